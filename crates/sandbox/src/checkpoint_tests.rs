use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::*;
use neuronlab_core::device::topology::Topology;
use neuronlab_core::runtime::RuntimeOptions;

/// A folder for one test's files, and a resolver that maps guest paths into it.
struct Dir(tempfile::TempDir);

impl Dir {
    fn new() -> Dir {
        Dir(tempfile::tempdir().unwrap())
    }

    fn path(&self) -> &Path {
        self.0.path()
    }

    fn resolve(&self) -> impl Fn(&str, Need) -> Result<PathBuf, String> + '_ {
        move |p, _| Ok(self.path().join(p))
    }

    /// A file of the 8-byte header length, `header` and `data`.
    fn raw(&self, name: &str, header: &str, data: &[u8]) {
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend_from_slice(data);
        std::fs::write(self.path().join(name), bytes).unwrap();
    }

    fn inspect(&self, name: &str) -> Result<Contents, CheckpointError> {
        inspect(name, &self.resolve())
    }

    /// The message of a file error inspecting `name`.
    fn bad(&self, name: &str) -> String {
        match self.inspect(name) {
            Err(e) if e.kind == FailureKind::File => e.message,
            other => panic!("{name}: expected a file error, got {other:?}"),
        }
    }
}

fn runtime(host_limit: u64) -> Runtime {
    Runtime::new(RuntimeOptions {
        topology: Topology::preset("trn2.3xlarge", None).unwrap(),
        host_limit,
    })
}

/// One small tensor of every dtype, with a name that is not an identifier.
fn tensors(rt: &Runtime) -> Vec<(String, Tensor)> {
    let t = |buffer: Buffer, shape: &[usize]| rt.tensor(buffer, shape).unwrap();
    vec![
        (
            "f32.w".into(),
            t(Buffer::F32(vec![1.5, -0.0, f32::NAN, 3e38]), &[2, 2]),
        ),
        (
            "bf16 ü".into(),
            t(Buffer::Bf16(vec![half::bf16::from_bits(0x7f81)]), &[1]),
        ),
        (
            "f16".into(),
            t(Buffer::F16(vec![half::f16::from_bits(0x3c01); 3]), &[3]),
        ),
        (
            "f64".into(),
            t(Buffer::F64(vec![std::f64::consts::PI]), &[]),
        ),
        ("i64".into(), t(Buffer::I64(vec![i64::MIN, i64::MAX]), &[2])),
        ("i32".into(), t(Buffer::I32(vec![-7; 6]), &[1, 2, 3])),
        ("u8".into(), t(Buffer::U8(vec![0, 255]), &[2])),
        (
            "bool".into(),
            t(Buffer::Bool(vec![true, false, true]), &[3]),
        ),
        ("empty".into(), t(Buffer::F32(vec![]), &[0, 4])),
    ]
}

fn bits(t: &Tensor) -> (DType, Vec<usize>, Vec<u8>) {
    (t.dtype(), t.shape().to_vec(), t.to_buffer().to_le_bytes())
}

fn assert_same(saved: &[(String, Tensor)], loaded: &[(String, Tensor)]) {
    let mut expected: Vec<_> = saved.iter().map(|(n, t)| (n.clone(), bits(t))).collect();
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    let got: Vec<_> = loaded.iter().map(|(n, t)| (n.clone(), bits(t))).collect();
    assert_eq!(got, expected);
}

fn never() -> bool {
    false
}

#[test]
fn every_dtype_round_trips_bit_for_bit_with_names_and_metadata() {
    let dir = Dir::new();
    let rt = runtime(1 << 30);
    let saved = tensors(&rt);
    let meta = BTreeMap::from([("format".to_string(), "pt".to_string())]);
    assert_eq!(
        save("one.safetensors", &dir.resolve(), &saved, &meta, None),
        Ok(1)
    );
    let contents = dir.inspect("one.safetensors").unwrap();
    assert_eq!(contents.metadata(), &meta);
    assert_eq!(
        contents.nbytes(),
        saved.iter().map(|(_, t)| t.nbytes() as u64).sum::<u64>()
    );
    let loaded = contents.load(&rt, CoreId(1), &never).unwrap();
    assert_same(&saved, &loaded);
    assert!(loaded.iter().all(|(_, t)| t.device() == CoreId(1)));
    let on_core = rt.memory().stats(CoreId(1)).unwrap().in_use;
    assert_eq!(
        on_core,
        contents.nbytes(),
        "the loaded tensors are accounted on their core"
    );
}

#[test]
fn sharded_folders_round_trip_with_an_index() {
    let dir = Dir::new();
    let rt = runtime(1 << 30);
    let saved = tensors(&rt);
    let meta = BTreeMap::from([("step".to_string(), "7".to_string())]);
    let shards = save("model", &dir.resolve(), &saved, &meta, Some(16)).unwrap();
    assert!(shards > 2, "{shards} shards");
    let index: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("model").join(INDEX_FILE)).unwrap())
            .unwrap();
    let total: u64 = saved.iter().map(|(_, t)| t.nbytes() as u64).sum();
    assert_eq!(index["metadata"]["total_size"], total);
    assert_eq!(index["weight_map"].as_object().unwrap().len(), saved.len());
    for name in ["model", "model/", &format!("model/{INDEX_FILE}")] {
        let contents = dir.inspect(name).unwrap();
        assert_eq!(contents.metadata()["step"], "7");
        assert_eq!(contents.metadata()["total_size"], total.to_string());
        assert_same(&saved, &contents.load(&rt, CoreId(0), &never).unwrap());
    }
    // Saving again with fewer tensors replaces the index.
    assert_eq!(
        save("model", &dir.resolve(), &saved[..1], &meta, Some(1 << 20)),
        Ok(1)
    );
    assert_eq!(dir.inspect("model").unwrap().names().count(), 1);
}

#[test]
fn malformed_files_are_clear_errors() {
    let dir = Dir::new();
    let t = r#""t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}"#;
    std::fs::write(dir.path().join("short"), [1, 2, 3]).unwrap();
    assert!(dir
        .bad("short")
        .contains("less than the 8-byte header length"));
    std::fs::write(dir.path().join("long"), 1000u64.to_le_bytes()).unwrap();
    assert!(dir
        .bad("long")
        .contains("header length 1000 is more than the 0 bytes"));
    std::fs::write(dir.path().join("huge"), u64::MAX.to_le_bytes()).unwrap();
    assert!(dir
        .bad("huge")
        .contains("more than the 100000000 bytes a header may have"));
    let cases: &[(&str, String, usize, &str)] = &[
        ("json", "{nope".into(), 0, "not a JSON object"),
        ("list", "[1,2]".into(), 0, "not a JSON object"),
        ("nodtype", r#"{"t":{"shape":[],"data_offsets":[0,4]}}"#.into(), 4, "has no `dtype`"),
        ("unknown", format!("{{{}}}", t.replace("F32", "F128")), 8, "`F128`, which is not a safetensors dtype"),
        ("unsupported", format!("{{{}}}", t.replace("F32", "I8").replace("[2]", "[8]")), 8, "dtype I8, which neuronlab does not have (it has F32, BF16, F16, F64, I64, I32, U8, BOOL)"),
        ("size", format!("{{{}}}", t.replace("[2]", "[3]")), 8, "f32 [3], which takes 12 bytes, but its offsets span 8"),
        ("backwards", format!("{{{}}}", t.replace("[0,8]", "[8,0]")), 8, "ends (byte 0) before it starts (8)"),
        ("shape", format!("{{{}}}", t.replace("[2]", "[-2]")), 8, "`shape` [-2], not a list of whole numbers"),
        ("offsets", format!("{{{}}}", t.replace("[0,8]", "[0]")), 8, "`data_offsets` that are not two numbers"),
        ("overflow", format!("{{{}}}", t.replace("[2]", "[4294967296,4294967296,4294967296]")), 8, "overflows"),
        ("overlap", format!(r#"{{{t},"u":{{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}}}"#), 8, "overlaps tensor"),
        ("gap", format!(r#"{{{},"u":{{"dtype":"U8","shape":[2],"data_offsets":[10,12]}}}}"#, t), 12, "bytes 8..10 before tensor `u` belong to no tensor"),
        ("late", format!("{{{}}}", t.replace("[0,8]", "[4,12]")), 12, "bytes 0..4 before tensor `t`"),
        ("truncated", format!("{{{t}}}"), 5, "truncated: its tensors need 8 bytes of data, but only 5 follow"),
        ("trailing", format!("{{{t}}}"), 11, "3 bytes after its last tensor belong to no tensor"),
        ("meta", format!(r#"{{"__metadata__":{{"n":1}},{t}}}"#), 8, "`__metadata__` value `n` is not a string"),
    ];
    for (name, header, data, expected) in cases {
        dir.raw(name, header, &vec![0; *data]);
        let message = dir.bad(name);
        assert!(message.contains(expected), "{name}: {message}");
        assert!(
            message.contains(&format!("`{name}`")),
            "{name} names the file: {message}"
        );
    }
    // Python pads the header with spaces; an empty checkpoint is fine.
    dir.raw("padded", &format!("{{{t}}}   "), &[0; 8]);
    assert_eq!(
        dir.inspect("padded").unwrap().names().collect::<Vec<_>>(),
        ["t"]
    );
    dir.raw("empty", "{}", &[]);
    assert_eq!(dir.inspect("empty").unwrap().names().count(), 0);
}

#[test]
fn bad_indexes_and_shards_are_clear_errors() {
    let dir = Dir::new();
    let rt = runtime(1 << 30);
    let saved = tensors(&rt);
    save("m", &dir.resolve(), &saved[..2], &BTreeMap::new(), Some(1)).unwrap();
    let index_path = dir.path().join("m").join(INDEX_FILE);
    let index = std::fs::read_to_string(&index_path).unwrap();
    let write_index = |text: &str| std::fs::write(&index_path, text).unwrap();
    let mut ghost: Value = serde_json::from_str(&index).unwrap();
    ghost["weight_map"]["ghost"] = "model-00001-of-00002.safetensors".into();
    let with_ghost = ghost.to_string();
    let cases = [
        (
            index.replace("model-00001-of-00002", "../x"),
            "not a file beside the index",
        ),
        (
            index.replace("weight_map", "weights"),
            "has no `weight_map`",
        ),
        (
            index.replace("\"f32.w\"", "\"other\""),
            "holds tensor `f32.w`, which `weight_map` does not put there",
        ),
        (
            with_ghost,
            "puts tensor `ghost` in `m/model-00001-of-00002.safetensors`, which does not hold it",
        ),
        ("[]".to_string(), "not a JSON object"),
    ];
    for (text, expected) in cases {
        write_index(&text);
        let message = dir.bad("m");
        assert!(message.contains(expected), "{text}\n{message}");
    }
    write_index(&index);
    std::fs::remove_file(dir.path().join("m/model-00002-of-00002.safetensors")).unwrap();
    assert!(dir.bad("m").contains("model-00002-of-00002.safetensors"));
    std::fs::create_dir(dir.path().join("plain")).unwrap();
    assert!(dir
        .bad("plain")
        .contains("without a `*.safetensors.index.json`"));
}

#[test]
fn a_checkpoint_larger_than_what_is_free_fails_before_reading() {
    let dir = Dir::new();
    let big = runtime(1 << 30);
    let t = big.tensor(Buffer::F32(vec![1.0; 1024]), &[1024]).unwrap();
    save(
        "big.safetensors",
        &dir.resolve(),
        &[("w".into(), t)],
        &BTreeMap::new(),
        None,
    )
    .unwrap();
    let small = runtime(999);
    let e = dir
        .inspect("big.safetensors")
        .unwrap()
        .load(&small, CoreId(0), &never)
        .unwrap_err();
    assert_eq!(e.kind, FailureKind::Memory);
    assert!(
        e.message.contains(
            "holds 4.00 KiB (4096 bytes) of tensors, more than the 999 B left of the 999 B host \
             limit",
        ) && e.message.contains("NEURONLAB_HOST_MEM_LIMIT")
            && e.message.contains("nothing was read"),
        "{}",
        e.message
    );
    assert_eq!(small.memory().host_in_use(), 0);
    let stop = || true;
    let e = dir
        .inspect("big.safetensors")
        .unwrap()
        .load(&big, CoreId(0), &stop)
        .unwrap_err();
    assert_eq!(e.kind, FailureKind::Cancelled);
}

#[test]
fn a_load_reports_its_bytes_while_it_reads() {
    let dir = Dir::new();
    let rt = runtime(1 << 30);
    // 24 MiB and 4 KiB: the large tensor is read in two pieces.
    let big = rt
        .tensor(Buffer::F32(vec![0.5; 6 << 20]), &[6 << 20])
        .unwrap();
    let small = rt.tensor(Buffer::F32(vec![2.0; 1024]), &[1024]).unwrap();
    let saved = vec![("a.big".to_string(), big), ("b.small".to_string(), small)];
    save(
        "two",
        &dir.resolve(),
        &saved,
        &BTreeMap::new(),
        Some(1 << 20),
    )
    .unwrap();
    let contents = dir.inspect("two").unwrap();
    let total = contents.nbytes();
    let seen = std::sync::Mutex::new(Vec::new());
    let watch = || {
        seen.lock().unwrap().push(rt.activities().current());
        false
    };
    assert_same(&saved, &contents.load(&rt, CoreId(0), &watch).unwrap());
    let seen = seen.into_inner().unwrap();
    let done: Vec<u64> = seen
        .iter()
        .map(|r| {
            let r = r.as_ref().expect("under way while it reads");
            assert_eq!((r.what.as_str(), r.total), ("loading `two`", total));
            r.done
        })
        .collect();
    // Before each piece: the large tensor's two, then the small one's.
    assert_eq!(done, [0, 16 << 20, 24 << 20]);
    assert_eq!(rt.activities().current(), None, "it ends with the load");
}

#[test]
fn saving_refuses_duplicate_and_reserved_names() {
    let dir = Dir::new();
    let rt = runtime(1 << 30);
    let t = rt.tensor(Buffer::F32(vec![1.0]), &[1]).unwrap();
    let twice = [("a".to_string(), t.clone()), ("a".to_string(), t.clone())];
    let e = save(
        "x.safetensors",
        &dir.resolve(),
        &twice,
        &BTreeMap::new(),
        None,
    )
    .unwrap_err();
    assert!(
        e.kind == FailureKind::Invalid && e.message.contains("`a` is given twice"),
        "{e:?}"
    );
    let reserved = [("__metadata__".to_string(), t)];
    let e = save(
        "x.safetensors",
        &dir.resolve(),
        &reserved,
        &BTreeMap::new(),
        None,
    )
    .unwrap_err();
    assert!(e.message.contains("name the tensor otherwise"), "{e:?}");
    assert!(!dir.path().join("x.safetensors").exists());
}
