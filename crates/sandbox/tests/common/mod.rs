//! A driver guest made from the host's import table: it imports every import with its
//! declared signature and re-exports each as `f_<name>`, plus `poke8`/`poke64`/`peek32`/
//! `peek64` to write and read its memory, so a test can make any call with any arguments,
//! as a hostile guest written from ABI.md would.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use neuronlab_core::device::topology::{CoreId, Topology};
use neuronlab_core::runtime::RuntimeOptions;
use neuronlab_core::Runtime;
use neuronlab_sandbox::abi::{imports, WasmType};
use neuronlab_sandbox::{Guest, GuestError, GuestOutput, Limits, Sandbox};

/// Where the driver's scratch memory starts; below it nothing is written by the tests.
pub const SCRATCH: i64 = 1024;
/// Pages of linear memory the driver has (64 KiB each).
pub const PAGES: i64 = 16;

/// The driver's WAT text. Its trampoline returns the true count of results, or the count
/// `set_claim` chose, to test what the host does with a lie.
pub fn driver_wat() -> String {
    let ty = |t: WasmType| t.name();
    let mut wat = String::from("(module\n");
    for (i, import) in imports().enumerate() {
        let params: Vec<&str> = import.params.iter().map(|&t| ty(t)).collect();
        wat.push_str(&format!(
            "  (import \"neuronlab\" \"{}\" (func $i{i} (param {}) (result {})))\n",
            import.name,
            params.join(" "),
            ty(import.result)
        ));
    }
    wat.push_str(&format!(
        "  (memory (export \"memory\") {PAGES})\n  (table 4 funcref)\n  \
         (global $claim (mut i32) (i32.const -1))\n  \
         (func (export \"neuronlab_abi_version\") (result i32) (i32.const 0x10003))\n  \
         (func (export \"poke8\") (param i32 i32) (i32.store8 (local.get 0) (local.get 1)))\n  \
         (func (export \"poke64\") (param i32 i64) (i64.store (local.get 0) (local.get 1)))\n  \
         (func (export \"peek32\") (param i32) (result i32) (i32.load (local.get 0)))\n  \
         (func (export \"peek64\") (param i32) (result i64) (i64.load (local.get 0)))\n  \
         (func (export \"set_claim\") (param i32) (global.set $claim (local.get 0)))\n"
    ));
    let result_of = |name: &str| {
        imports()
            .position(|i| i.name == name)
            .expect("the driver's trampoline uses compile_arg and compile_result")
    };
    // The trampoline hands its first argument back as the one result, and returns 1, or
    // the count `set_claim` chose.
    wat.push_str(&format!(
        "  (func (export \"neuronlab_trampoline\") (param i32 i32) (result i32)\n    \
         (drop (call $i{} (call $i{} (i32.const 0))))\n    \
         (if (result i32) (i32.eq (global.get $claim) (i32.const -1))\n      \
         (then (i32.const 1)) (else (global.get $claim))))\n",
        result_of("compile_result"),
        result_of("compile_arg"),
    ));
    for (i, import) in imports().enumerate() {
        let params: Vec<String> = import
            .params
            .iter()
            .enumerate()
            .map(|(k, &t)| format!("(param $p{k} {})", ty(t)))
            .collect();
        let args: Vec<String> = (0..import.params.len())
            .map(|k| format!("(local.get $p{k})"))
            .collect();
        wat.push_str(&format!(
            "  (func (export \"f_{}\") {} (result {}) (call $i{i} {}))\n",
            import.name,
            params.join(" "),
            ty(import.result),
            args.join(" ")
        ));
    }
    wat.push_str(")\n");
    wat
}

/// A host (runtime and sandbox) with one driver guest, and what the guest printed.
pub struct Driver {
    pub runtime: Arc<Runtime>,
    pub sandbox: Sandbox,
    pub guest: Guest,
    pub output: Arc<Mutex<Vec<GuestOutput>>>,
}

impl Driver {
    /// A driver on a trn2.3xlarge runtime whose tensors may hold `host_limit` bytes.
    pub fn new(host_limit: u64) -> Driver {
        let runtime = Arc::new(Runtime::new(RuntimeOptions {
            topology: Topology::preset("trn2.3xlarge", None).unwrap(),
            host_limit,
        }));
        let sandbox = Sandbox::new(None).unwrap();
        let module = sandbox.load("driver", driver_wat().as_bytes()).unwrap();
        let output = Arc::new(Mutex::new(Vec::new()));
        let sink = output.clone();
        let limits = Limits {
            deadline: Duration::from_secs(10),
            memory_bytes: 64 << 20,
            ..Limits::default()
        };
        let guest = sandbox
            .instantiate(
                &module,
                runtime.clone(),
                CoreId(0),
                limits,
                Box::new(move |o| sink.lock().unwrap().push(o)),
            )
            .unwrap();
        Driver {
            runtime,
            sandbox,
            guest,
            output,
        }
    }

    /// Calls export `name` with `args`; its one result, or the guest's failure.
    pub fn try_call(&mut self, name: &str, args: &[i64]) -> Result<i64, GuestError> {
        let args: Vec<String> = args.iter().map(i64::to_string).collect();
        let results = self.guest.call(name, &args)?;
        Ok(results.first().map_or(0, |r| r.parse().unwrap()))
    }

    /// Calls import `name` (through `f_<name>`) with `args`: its status or value.
    /// A guest stopped at its deadline is a failure here (tests that expect it call
    /// [`Driver::try_call`]).
    pub fn call(&mut self, name: &str, args: &[i64]) -> i64 {
        self.try_call(&format!("f_{name}"), args)
            .unwrap_or_else(|e| panic!("{name}{args:?} trapped: {e}"))
    }

    /// Writes `bytes` at `addr` of the guest's memory.
    pub fn write(&mut self, addr: i64, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        let mut at = addr;
        for c in &mut chunks {
            self.try_call("poke64", &[at, i64::from_le_bytes(c.try_into().unwrap())])
                .unwrap();
            at += 8;
        }
        for &b in chunks.remainder() {
            self.try_call("poke8", &[at, i64::from(b)]).unwrap();
            at += 1;
        }
    }

    /// The `i32` at `addr`.
    pub fn read_i32(&mut self, addr: i64) -> i32 {
        self.try_call("peek32", &[addr]).unwrap() as i32
    }

    /// The last error's message.
    pub fn last_error(&mut self) -> String {
        let (at, cap) = (SCRATCH + 60_000, 4096);
        let n = self.call("last_error", &[at, cap]);
        let bytes: Vec<u8> = (0..n.min(cap))
            .map(|k| self.try_call("peek32", &[at + k]).unwrap() as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// A new f32 tensor of `shape` filled from `values` (repeated), through `tensor_create`.
    pub fn tensor(&mut self, shape: &[i64], values: &[f32]) -> i64 {
        let numel: i64 = shape.iter().product();
        let shape_at = SCRATCH;
        let data_at = SCRATCH + 512;
        let shape_bytes: Vec<u8> = shape.iter().flat_map(|d| d.to_le_bytes()).collect();
        self.write(shape_at, &shape_bytes);
        let data: Vec<u8> = (0..numel as usize)
            .flat_map(|i| values[i % values.len()].to_le_bytes())
            .collect();
        self.write(data_at, &data);
        self.call(
            "tensor_create",
            &[0, shape_at, shape.len() as i64, data_at, data.len() as i64],
        )
    }

    /// The id of op `name`.
    pub fn op(&mut self, name: &str) -> i64 {
        let at = SCRATCH + 256;
        self.write(at, name.as_bytes());
        self.call("op_lookup", &[at, name.len() as i64])
    }

    /// Calls op `name` on `inputs` with encoded `attrs`: the status, and the first output's
    /// handle when there is one.
    pub fn op_call(&mut self, name: &str, inputs: &[i64], attrs: &[u8]) -> (i64, Option<i64>) {
        self.try_op_call(name, inputs, attrs)
            .unwrap_or_else(|e| panic!("{name} trapped: {e}"))
    }

    /// [`Driver::op_call`], with the guest's failure (its deadline, say) as an error.
    pub fn try_op_call(
        &mut self,
        name: &str,
        inputs: &[i64],
        attrs: &[u8],
    ) -> Result<(i64, Option<i64>), GuestError> {
        let id = self.op(name);
        let (inputs_at, attrs_at, out_at) = (SCRATCH + 2048, SCRATCH + 4096, SCRATCH + 8192);
        let handles: Vec<u8> = inputs
            .iter()
            .flat_map(|&h| (h as u32).to_le_bytes())
            .collect();
        self.write(inputs_at, &handles);
        self.write(attrs_at, attrs);
        let status = self.try_call(
            "f_op_call",
            &[
                id,
                inputs_at,
                inputs.len() as i64,
                attrs_at,
                attrs.len() as i64,
                out_at,
                4,
            ],
        )?;
        let first = (status > 0).then(|| i64::from(self.read_i32(out_at)));
        Ok((status, first))
    }
}

/// The binary attribute encoding (ABI.md): one entry.
pub enum Attr<'a> {
    Int(&'a str, i64),
    Ints(&'a str, &'a [i64]),
    Str(&'a str, &'a str),
}

/// Encodes `attrs` as ABI.md's attribute entries.
pub fn attrs(attrs: &[Attr]) -> Vec<u8> {
    let mut out = Vec::new();
    let head = |kind: u8, name: &str, out: &mut Vec<u8>| {
        out.push(kind);
        out.push(name.len() as u8);
        out.extend_from_slice(name.as_bytes());
    };
    for a in attrs {
        match a {
            Attr::Int(n, v) => {
                head(1, n, &mut out);
                out.extend_from_slice(&v.to_le_bytes());
            }
            Attr::Ints(n, vs) => {
                head(3, n, &mut out);
                out.extend_from_slice(&(vs.len() as u32).to_le_bytes());
                vs.iter()
                    .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
            }
            Attr::Str(n, s) => {
                head(4, n, &mut out);
                out.extend_from_slice(&(s.len() as u32).to_le_bytes());
                out.extend_from_slice(s.as_bytes());
            }
        }
    }
    out
}
