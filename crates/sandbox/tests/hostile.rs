//! Hostile guests written from ABI.md alone, one test per class of what used to get past the
//! host: views that describe more than can exist, handles that wrap, modules without memory,
//! leniencies the ABI does not allow, and errors that said the wrong thing. Each call must
//! come back as a clear status, and the host must stay as it was.

mod common;

use common::{attrs, Attr, Driver, SCRATCH};
use neuronlab_core::device::topology::CoreId;
use neuronlab_sandbox::{ErrorCode, GuestErrorKind, Limits, Sandbox};

const GIB: u64 = 1 << 30;

fn in_use(d: &Driver) -> u64 {
    d.runtime.memory().stats(CoreId(0)).unwrap().in_use
}

#[test]
fn a_view_of_more_elements_than_can_exist_is_refused_before_anything_walks_it() {
    let mut d = Driver::new(GIB);
    let one = d.tensor(&[1], &[1.0]);
    let before = in_use(&d);
    // Counts and byte counts that overflow 64 bits are ERR_OP; a view that fits 64 bits but
    // not the host is ERR_MEMORY, a limit.
    let cases = [
        (
            vec![1i64 << 40],
            ErrorCode::Memory,
            "nothing this large can exist",
        ),
        (vec![1 << 32, 1 << 32], ErrorCode::Op, "overflows"),
        (vec![1 << 62], ErrorCode::Op, "overflows"),
    ];
    for (shape, code, needle) in cases {
        let (status, _) = d.op_call("expand", &[one], &attrs(&[Attr::Ints("shape", &shape)]));
        assert_eq!(status, code as i64, "expand to {shape:?}");
        let message = d.last_error();
        assert!(
            message.starts_with("expand(x: f32[1]):") && message.contains(needle),
            "{message}"
        );
    }
    // Within the host cap a broadcast view is still free, and reductions of it work.
    let (status, wide) = d.op_call("expand", &[one], &attrs(&[Attr::Ints("shape", &[1 << 20])]));
    assert_eq!(status, 1);
    let (status, _) = d.op_call("sum", &[wide.unwrap()], &[]);
    assert_eq!(status, 1, "{}", d.last_error());
    assert_eq!(d.call("tensor_numel", &[wide.unwrap()]), 1 << 20);
    assert!(in_use(&d) - before < 64, "a view allocates nothing");
}

#[test]
fn shape_arithmetic_that_would_wrap_fails_and_names_the_op() {
    let mut d = Driver::new(GIB);
    let x = d.tensor(&[4], &[1.0, 2.0, 3.0, 4.0]);
    let narrow = |start: i64, length: i64| {
        attrs(&[
            Attr::Int("dim", 0),
            Attr::Int("start", start),
            Attr::Int("length", length),
        ])
    };
    let (status, _) = d.op_call("narrow", &[x], &narrow(i64::MAX, 2));
    assert_eq!(status, ErrorCode::Op as i64);
    assert!(
        d.last_error().contains("out of range"),
        "{}",
        d.last_error()
    );
    let (status, _) = d.op_call("narrow", &[x], &narrow(1, 2));
    assert_eq!(status, 1, "a narrow that fits still works");
    let (status, _) = d.op_call("expand", &[x], &attrs(&[Attr::Ints("shape", &[-2, 4])]));
    assert_eq!(status, ErrorCode::Op as i64);
    let message = d.last_error();
    assert!(
        message.contains("dim 0 has a negative size -2"),
        "{message}"
    );
    let pads = [i64::MAX, i64::MAX];
    let (status, _) = d.op_call("pad", &[x], &attrs(&[Attr::Ints("pad", &pads)]));
    assert!(status < 0, "pad by i64::MAX twice: {status}");
    assert!(d.last_error().starts_with("pad("), "{}", d.last_error());
}

#[test]
fn a_freed_handle_stays_an_error_however_often_its_slot_is_reused() {
    let mut d = Driver::new(GIB);
    let first = d.tensor(&[1], &[1.0]);
    assert_eq!(d.call("tensor_drop", &[first]), 0);
    // The tensor's shape and data stay where `tensor` wrote them; create and drop again.
    let create = [0, SCRATCH, 1, SCRATCH + 512, 4];
    for cycle in 1..=2100 {
        let h = d.call("tensor_create", &create);
        assert!(h > 0, "cycle {cycle}: {}", d.last_error());
        assert_ne!(
            h, first,
            "cycle {cycle} issued the freed handle {first:#x} again"
        );
        assert_eq!(
            d.call("tensor_rank", &[first]),
            ErrorCode::Handle as i64,
            "cycle {cycle}"
        );
        assert_eq!(d.call("tensor_drop", &[h]), 0);
    }
    assert_eq!(d.guest.live_tensors(), 0);
}

#[test]
fn a_module_must_export_its_memory_as_memory() {
    let sandbox = Sandbox::new(None).unwrap();
    let abi = r#"(func (export "neuronlab_abi_version") (result i32) (i32.const 0x10003))"#;
    let cases = [
        (
            "none",
            format!("(module {abi})"),
            "does not export its linear memory",
        ),
        (
            "global",
            format!("(module (global (export \"memory\") i32 (i32.const 0)) {abi})"),
            "exports `memory` as a global",
        ),
    ];
    for (what, wat, needle) in cases {
        let e = sandbox.load(what, wat.as_bytes()).err().expect(what);
        assert_eq!(e.kind, GuestErrorKind::Link, "{what}: {e}");
        assert!(e.message.contains(needle), "{what}: {e}");
    }
}

#[test]
fn an_import_declared_with_another_signature_is_a_link_error_that_says_both() {
    let sandbox = Sandbox::new(None).unwrap();
    let wat = r#"(module
      (import "neuronlab" "tensor_drop" (func (param i32 i32) (result i32)))
      (memory (export "memory") 1)
      (func (export "neuronlab_abi_version") (result i32) (i32.const 0x10003)))"#;
    let e = sandbox.load("bad-sig", wat.as_bytes()).err().unwrap();
    assert_eq!(e.kind, GuestErrorKind::Link, "{e}");
    assert!(
        e.message.contains(
            "declares the import `tensor_drop` as (i32, i32) -> i32, but the host provides it \
             as (i32) -> i32"
        ),
        "{e}"
    );
}

#[test]
fn what_the_abi_does_not_allow_is_err_invalid_or_err_op() {
    let mut d = Driver::new(GIB);
    // print of bytes that are not UTF-8.
    d.write(SCRATCH, &[b'o', b'k', 0xff, 0xfe]);
    assert_eq!(d.call("print", &[1, SCRATCH, 4]), ErrorCode::Invalid as i64);
    assert!(
        d.last_error().contains("not valid UTF-8"),
        "{}",
        d.last_error()
    );
    // A result request carries no data.
    let mime = b"application/vnd.neuronlab.result";
    d.write(SCRATCH, mime);
    d.write(SCRATCH + 64, b"surprise");
    let display = [SCRATCH, mime.len() as i64, SCRATCH + 64, 8];
    assert_eq!(d.call("display", &display), ErrorCode::Invalid as i64);
    // A dtype attribute is a name, not a code.
    let x = d.tensor(&[2], &[1.0, 2.0]);
    let (status, _) = d.op_call("cast", &[x], &attrs(&[Attr::Int("dtype", 3)]));
    assert_eq!(status, ErrorCode::Op as i64);
    let (status, _) = d.op_call("cast", &[x], &attrs(&[Attr::Str("dtype", "f64")]));
    assert_eq!(status, 1);
    // Compile flags are 0 or 1.
    d.write(SCRATCH + 128, b"f");
    let options = attrs(&[Attr::Int("fullgraph", 7)]);
    d.write(SCRATCH + 192, &options);
    let compile = [0, SCRATCH + 128, 1, SCRATCH + 192, options.len() as i64];
    assert_eq!(d.call("compile_fn", &compile), ErrorCode::Invalid as i64);
    assert!(
        d.last_error().contains("'fullgraph' is 7"),
        "{}",
        d.last_error()
    );
    // A trampoline that claims more results than it handed over.
    let f = d.call("compile_fn", &[0, SCRATCH + 128, 1, 0, 0]);
    assert!(f >= 1, "{}", d.last_error());
    d.try_call("set_claim", &[1000]).unwrap();
    d.write(SCRATCH + 2048, &(x as u32).to_le_bytes());
    let call = [f, SCRATCH + 2048, 1, SCRATCH + 4096, 4];
    assert_eq!(d.call("compile_call", &call), ErrorCode::Invalid as i64);
    assert!(
        d.last_error()
            .contains("returned 1000 results but handed 1"),
        "{}",
        d.last_error()
    );
    d.try_call("set_claim", &[-1]).unwrap();
    assert_eq!(d.call("compile_call", &call), 1, "{}", d.last_error());
}

#[test]
fn traps_and_limits_say_what_happened() {
    let sandbox = Sandbox::new(None).unwrap();
    let rt = Driver::new(GIB).runtime;
    let wat = r#"(module
      (import "neuronlab" "print" (func $print (param i32 i32 i32) (result i32)))
      (memory (export "memory") 1)
      (table $t 1 funcref)
      (data (i32.const 0) "panicked: boom\n")
      (func (export "neuronlab_abi_version") (result i32) (i32.const 0x10003))
      (func (export "quiet") unreachable)
      (func (export "loud") (drop (call $print (i32.const 2) (i32.const 0) (i32.const 15))) unreachable)
      (func (export "grow") (result i32) (table.grow $t (ref.null func) (i32.const 1000))))"#;
    let module = sandbox.load("traps", wat.as_bytes()).unwrap();
    let limits = Limits {
        table_elements: 100,
        ..Limits::default()
    };
    let mut g = sandbox
        .instantiate(&module, rt, CoreId(0), limits, Box::new(|_| {}))
        .unwrap();
    let quiet = g.call("quiet", &[]).unwrap_err();
    assert_eq!(quiet.kind, GuestErrorKind::Trap);
    assert!(
        !quiet.message.contains("Rust"),
        "a WAT guest that printed nothing: {quiet}"
    );
    let loud = g.call("loud", &[]).unwrap_err();
    assert!(
        loud.message.contains("its message is on stderr above"),
        "{loud}"
    );
    let grow = g.call("grow", &[]).unwrap_err();
    assert_eq!(grow.kind, GuestErrorKind::ResourceLimit, "{grow}");
    assert!(
        grow.message
            .contains("table would exceed its limit of 100 elements"),
        "{grow}"
    );
}

#[test]
fn an_empty_tensor_with_a_huge_dim_prints_its_shape_without_listing_it() {
    let mut d = Driver::new(GIB);
    let shape: Vec<u8> = [0i64, 1 << 40]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    d.write(SCRATCH, &shape);
    let t = d.call("tensor_create", &[0, SCRATCH, 2, SCRATCH + 512, 0]);
    assert!(t > 0, "{}", d.last_error());
    let n = d.call("tensor_format", &[t, SCRATCH + 1024, 256]);
    assert!(n > 0 && n < 256, "{n}");
    let text: Vec<u8> = (0..n)
        .map(|k| d.read_i32(SCRATCH + 1024 + k) as u8)
        .collect();
    assert_eq!(
        String::from_utf8(text).unwrap(),
        "tensor([], size=(0, 1099511627776), dtype=f32, device=neuron:0)"
    );
}
