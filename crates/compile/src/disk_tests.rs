//! The on-disk program cache: round trips with bitwise-equal outputs, sessions sharing a
//! directory, damaged entries, concurrent writers, and compiler versions.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use half::bf16;
use serde_json::Value;

use super::*;
use crate::graph::{Graph, Producer, ValueId};
use crate::program::optimize;
use crate::program::tests::{id, random_graph, random_tensor, runtime, Rng};
use crate::recorder::{graph_id, CachedProgram, ProgramCache};
use neuronlab_core::device::CoreId;
use neuronlab_core::events::{CacheSource, EventKind, LogLevel};
use neuronlab_core::ops::Attrs;
use neuronlab_core::paths::CacheDir;
use neuronlab_core::tensor::{Buffer, DType, Tensor, TensorMeta};
use neuronlab_core::Runtime;

/// A directory of its own under the system temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "neuronlab-programs-test-{}-{name}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        TempDir(dir)
    }

    /// The file names in the directory, sorted.
    fn files(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(&self.0)
            .map(|entries| {
                entries
                    .map(|e| e.expect("a directory entry").file_name())
                    .map(|n| n.to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    fn cache(&self) -> ProgramCache {
        ProgramCache::with_disk_dir(Some(self.0.clone()))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A graph to compile and the input tensors to run it on.
struct Case {
    name: &'static str,
    graph: Graph,
    inputs: Vec<Tensor>,
}

fn f32s(shape: &[usize]) -> TensorMeta {
    TensorMeta::new(shape.to_vec(), DType::F32)
}

fn op(g: &mut Graph, name: &str, inputs: &[ValueId], attrs: Attrs) -> ValueId {
    g.op(id(name), inputs, &attrs).expect("a valid op")[0]
}

/// Adds an input of `meta` bound to a random tensor.
fn input(
    rt: &Runtime,
    rng: &mut Rng,
    g: &mut Graph,
    ins: &mut Vec<Tensor>,
    meta: TensorMeta,
) -> ValueId {
    ins.push(random_tensor(rt, rng, &meta));
    g.input(meta)
}

/// Graphs with each kind of kernel and constants of several dtypes.
fn cases(rt: &Runtime) -> Vec<Case> {
    let mut rng = Rng(17);
    let mut cases = Vec::new();

    // One loop across broadcasting.
    let (mut g, mut ins) = (Graph::new(), Vec::new());
    let x = input(rt, &mut rng, &mut g, &mut ins, f32s(&[8, 16]));
    let row = input(rt, &mut rng, &mut g, &mut ins, f32s(&[16]));
    let col = input(rt, &mut rng, &mut g, &mut ins, f32s(&[8, 1]));
    let e = op(&mut g, "exp", &[row], Attrs::new());
    let a = op(&mut g, "mul", &[x, e], Attrs::new());
    let b = op(&mut g, "add", &[a, col], Attrs::new());
    let out = op(&mut g, "gelu", &[b], Attrs::new());
    g.set_outputs(vec![out, a]);
    cases.push(Case {
        name: "elementwise",
        graph: g,
        inputs: ins,
    });

    // A matmul with its bias and activation, then a softmax.
    let (mut g, mut ins) = (Graph::new(), Vec::new());
    let x = input(rt, &mut rng, &mut g, &mut ins, f32s(&[8, 32]));
    let w = input(rt, &mut rng, &mut g, &mut ins, f32s(&[32, 16]));
    let bias = input(rt, &mut rng, &mut g, &mut ins, f32s(&[16]));
    let y = op(&mut g, "matmul", &[x, w], Attrs::new());
    let z = op(&mut g, "add", &[y, bias], Attrs::new());
    let act = op(
        &mut g,
        "gelu",
        &[z],
        Attrs::new().with("approximate", "tanh"),
    );
    let s = op(&mut g, "softmax", &[act], Attrs::new());
    g.set_outputs(vec![s]);
    cases.push(Case {
        name: "matmul epilogue",
        graph: g,
        inputs: ins,
    });

    // A residual add, a norm and its epilogue; a trailing reduction and its epilogue.
    let (mut g, mut ins) = (Graph::new(), Vec::new());
    let x = input(rt, &mut rng, &mut g, &mut ins, f32s(&[12, 24]));
    let r = input(rt, &mut rng, &mut g, &mut ins, f32s(&[12, 24]));
    let w = input(rt, &mut rng, &mut g, &mut ins, f32s(&[24]));
    let h = op(&mut g, "add", &[x, r], Attrs::new());
    let n = op(&mut g, "layer_norm", &[h, w, w], Attrs::new());
    let m = op(&mut g, "mul", &[n, w], Attrs::new());
    let a = op(&mut g, "silu", &[m], Attrs::new());
    let sq = op(&mut g, "square", &[a], Attrs::new());
    let mean = op(
        &mut g,
        "mean",
        &[sq],
        Attrs::new().with("dims", vec![-1i64]).with("keepdim", 1),
    );
    let inv = op(&mut g, "rsqrt", &[mean], Attrs::new());
    g.set_outputs(vec![inv, h]);
    cases.push(Case {
        name: "reductions",
        graph: g,
        inputs: ins,
    });

    // Constants of several dtypes, one folded, a NaN among them, and infinite attributes.
    let (mut g, mut ins) = (Graph::new(), Vec::new());
    let x = input(rt, &mut rng, &mut g, &mut ins, f32s(&[4, 6]));
    let w = input(rt, &mut rng, &mut g, &mut ins, f32s(&[5, 6]));
    let tensor = |buffer, shape: &[usize]| rt.tensor(buffer, shape).expect("fits");
    let c = g.constant(tensor(
        Buffer::F32(vec![1.0, 4.0, 9.0, f32::NAN, 0.0, 2.25]),
        &[6],
    ));
    let root = op(&mut g, "sqrt", &[c], Attrs::new());
    let ones = op(
        &mut g,
        "ones",
        &[],
        Attrs::new()
            .with("shape", vec![6i64])
            .with("dtype", DType::F32),
    );
    let scale = op(&mut g, "add", &[root, ones], Attrs::new());
    let y = op(&mut g, "mul", &[x, scale], Attrs::new());
    let clamped = op(
        &mut g,
        "clamp",
        &[y],
        Attrs::new().with("min", f64::NEG_INFINITY).with("max", 1.5),
    );
    let mask = g.constant(tensor(
        Buffer::Bool(vec![true, false, true, false, true, false]),
        &[6],
    ));
    let picked = op(&mut g, "where", &[mask, clamped, x], Attrs::new());
    let halves = g.constant(tensor(
        Buffer::Bf16((0..6).map(|i| bf16::from_f32(i as f32 * 0.5)).collect()),
        &[6],
    ));
    let shifted = op(&mut g, "add", &[picked, halves], Attrs::new());
    let idx = g.constant(tensor(Buffer::I64(vec![4, 0, 2]), &[3]));
    let rows = op(&mut g, "embedding", &[idx, w], Attrs::new());
    g.set_outputs(vec![shifted, rows]);
    cases.push(Case {
        name: "constants",
        graph: g,
        inputs: ins,
    });
    cases
}

/// The program's outputs on `inputs`.
fn run(rt: &Runtime, program: &Program, inputs: &[Tensor]) -> Vec<Tensor> {
    let refs: Vec<&Tensor> = inputs.iter().collect();
    program
        .run(rt, CoreId(0), &refs)
        .unwrap_or_else(|e| panic!("{e}\n{}", program.explain()))
}

/// Asserts equal metas and bit-for-bit equal elements.
fn assert_bitwise(what: &str, got: &[Tensor], want: &[Tensor]) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (k, (a, b)) in got.iter().zip(want).enumerate() {
        assert_eq!(a.meta(), b.meta(), "{what}: output {k}");
        assert!(
            a.to_buffer().to_le_bytes() == b.to_buffer().to_le_bytes(),
            "{what}: output {k} differs"
        );
    }
}

/// Optimizes `graph`, round-trips the program through its serialized form, and checks that
/// the copy is the same program and computes the same bits.
fn check_round_trip(rt: &Runtime, what: &str, graph: &Graph, inputs: &[Tensor]) -> Program {
    let (fresh, _) = optimize(rt, graph).unwrap_or_else(|e| panic!("{what}: {e}\n{graph}"));
    let payload = serial::encode(&fresh);
    let loaded = serial::decode(&payload).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(loaded.report(), fresh.report(), "{what}");
    assert_eq!(loaded.explain(), fresh.explain(), "{what}");
    assert!(
        serial::encode(&loaded) == payload,
        "{what}: re-encoding differs"
    );
    assert_bitwise(what, &run(rt, &loaded, inputs), &run(rt, &fresh, inputs));
    fresh
}

#[test]
fn programs_round_trip_and_compute_the_same_bits() {
    let rt = runtime();
    for case in cases(&rt) {
        let program = check_round_trip(&rt, case.name, &case.graph, &case.inputs);
        let kernels = &program.report().kernels;
        let constants = program
            .graph()
            .producers
            .iter()
            .filter(|p| matches!(p, Producer::Constant(_)))
            .count();
        let covered = match case.name {
            "elementwise" => kernels == &["fused[exp,mul,add,gelu]"],
            "matmul epilogue" => kernels == &["fused[matmul,add,gelu]", "softmax"],
            "reductions" => kernels.iter().filter(|k| k.starts_with("fused[")).count() == 2,
            // The folded scale, the mask, the bf16 halves and the indices.
            _ => constants == 4,
        };
        assert!(covered, "{}: {kernels:?}, {constants} constants", case.name);
    }
    for seed in 0..24 {
        let dtype = [DType::F32, DType::Bf16, DType::F64][seed as usize % 3];
        let mut rng = Rng(seed * 7919 + 5);
        let size = (rng.below(10) + 1, rng.below(30) + 1);
        let (g, inputs) = random_graph(&rt, &mut rng, dtype, size, seed % 2 == 0);
        check_round_trip(&rt, &format!("random graph {seed}"), &g, &inputs);
    }
}

/// The events published since `seq`.
fn events_since(rt: &Runtime, seq: u64) -> Vec<EventKind> {
    rt.bus().since(seq).into_iter().map(|e| e.kind).collect()
}

/// Runs `graph` through `cache`, returning where its program came from and the events.
fn get(
    rt: &Runtime,
    cache: &ProgramCache,
    case: &Case,
) -> (Arc<CachedProgram>, CacheSource, Vec<EventKind>) {
    let seq = rt.bus().next_seq();
    let (program, source) = cache
        .get_or_compile(
            rt,
            CoreId(0),
            &case.graph,
            case.name,
            "new graph",
            false,
            false,
        )
        .expect("compiles");
    (program, source, events_since(rt, seq))
}

#[test]
fn a_new_session_loads_the_program_from_disk() {
    let rt = runtime();
    let dir = TempDir::new("session");
    let case = cases(&rt).swap_remove(1);
    let (fresh, source, events) = get(&rt, &dir.cache(), &case);
    assert_eq!(source, CacheSource::Miss);
    let [EventKind::Compile(compile)] = &events[..] else {
        panic!("{events:?}");
    };
    assert_eq!(compile.cache, CacheSource::Miss);
    assert_eq!(compile.graph, graph_id(&case.graph.canonical_hash()));
    assert_eq!(compile.graph.len(), 16);
    // One entry, and no temp file left behind.
    let files = dir.files();
    assert!(
        files.len() == 1 && files[0].ends_with(".program"),
        "{files:?}"
    );

    let session = dir.cache();
    let (loaded, source, events) = get(&rt, &session, &case);
    assert_eq!(source, CacheSource::Disk);
    assert_eq!(
        events,
        [EventKind::CacheHit {
            function: case.name.into(),
            source: CacheSource::Disk
        }]
    );
    assert_eq!(loaded.report, fresh.report);
    assert_bitwise(
        "disk hit",
        &run(&rt, &loaded.program, &case.inputs),
        &run(&rt, &fresh.program, &case.inputs),
    );
    // The session keeps it in memory now.
    let (_, source, events) = get(&rt, &session, &case);
    assert_eq!(source, CacheSource::Memory);
    assert!(
        matches!(
            &events[..],
            [EventKind::CacheHit {
                source: CacheSource::Memory,
                ..
            }]
        ),
        "{events:?}"
    );
}

/// `payload` as an entry: its checksum, then itself.
fn seal(payload: &[u8]) -> Vec<u8> {
    let mut entry = blake3::hash(payload).as_bytes().to_vec();
    entry.extend_from_slice(payload);
    entry
}

/// A payload's JSON description and its constants' bytes.
fn split(payload: &[u8]) -> (Value, Vec<u8>) {
    let len = u64::from_le_bytes(payload[..8].try_into().expect("8 bytes")) as usize;
    let json = serde_json::from_slice(&payload[8..8 + len]).expect("JSON");
    (json, payload[8 + len..].to_vec())
}

fn join(json: &Value, tail: &[u8]) -> Vec<u8> {
    let text = serde_json::to_vec(json).expect("serializes");
    let mut payload = (text.len() as u64).to_le_bytes().to_vec();
    payload.extend_from_slice(&text);
    payload.extend_from_slice(tail);
    payload
}

#[test]
fn damaged_entries_are_reported_recompiled_and_rewritten() {
    let rt = runtime();
    let dir = TempDir::new("damaged");
    let case = cases(&rt).swap_remove(3);
    get(&rt, &dir.cache(), &case);
    let path = DiskCache::new(dir.0.clone()).path(&case.graph.canonical_hash());
    let good = fs::read(&path).expect("the entry");

    // Damage to the description or the constants, under a checksum that matches.
    let resealed = |entry: &mut Vec<u8>, edit: &dyn Fn(&mut Value, &mut Vec<u8>)| {
        let (mut json, mut tail) = split(&entry[32..]);
        edit(&mut json, &mut tail);
        *entry = seal(&join(&json, &tail));
    };
    let unknown_op = |entry: &mut Vec<u8>| {
        resealed(entry, &|json, _| {
            json["graph"]["nodes"][0]["op"] = "layer_nrom".into();
        })
    };
    let wrong_shape = |entry: &mut Vec<u8>| {
        resealed(entry, &|json, _| {
            let graph = &mut json["graph"];
            let producers = graph["producers"].as_array().expect("a list");
            let v = producers
                .iter()
                .position(|p| p.get("node").is_some())
                .expect("an op result");
            graph["values"][v]["shape"]
                .as_array_mut()
                .expect("a shape")
                .push(1.into());
        })
    };
    let short_constant = |entry: &mut Vec<u8>| {
        resealed(entry, &|_, tail| {
            tail.pop();
        })
    };
    let not_json = |entry: &mut Vec<u8>| {
        let text = b"{\"before\": nul}";
        *entry = seal(&[&(text.len() as u64).to_le_bytes()[..], text].concat());
    };
    type Damage<'a> = &'a dyn Fn(&mut Vec<u8>);
    let damages: [(&str, Damage); 7] = [
        ("its checksum does not match", &|e| {
            let i = e.len() / 2;
            e[i] ^= 0x20;
        }),
        ("its checksum does not match", &|e| e.truncate(e.len() - 7)),
        ("it is truncated (20 bytes)", &|e| e.truncate(20)),
        ("the description does not parse", &not_json),
        ("node 0: no op is named 'layer_nrom'", &unknown_op),
        ("but infers", &wrong_shape),
        ("is cut short", &short_constant),
    ];
    for (reason, damage) in damages {
        let mut entry = good.clone();
        damage(&mut entry);
        fs::write(&path, &entry).expect("writes");
        let (_, source, events) = get(&rt, &dir.cache(), &case);
        assert_eq!(source, CacheSource::Miss, "{reason}");
        let warning = events.iter().find_map(|e| match e {
            EventKind::Log {
                level: LogLevel::Warn,
                target,
                message,
            } if target == "cache" => Some(message.clone()),
            _ => None,
        });
        let warning = warning.unwrap_or_else(|| panic!("no warning for {reason}: {events:?}"));
        assert!(
            warning.contains(&path.display().to_string()) && warning.contains(reason),
            "{reason}: {warning}"
        );
        assert!(
            events
                .iter()
                .any(|e| matches!(e, EventKind::Compile(c) if c.cache == CacheSource::Miss)),
            "{events:?}"
        );
        // The entry was written again, whole.
        let (_, source, _) = get(&rt, &dir.cache(), &case);
        assert_eq!(source, CacheSource::Disk, "{reason}");
    }
}

#[test]
fn an_entry_of_another_graph_is_not_used() {
    let rt = runtime();
    let dir = TempDir::new("other-graph");
    let mut all = cases(&rt);
    let (a, b) = (all.swap_remove(0), all.swap_remove(0));
    get(&rt, &dir.cache(), &a);
    let disk = DiskCache::new(dir.0.clone());
    let (path_a, path_b) = (
        disk.path(&a.graph.canonical_hash()),
        disk.path(&b.graph.canonical_hash()),
    );
    fs::copy(&path_a, &path_b).expect("copies");
    match disk.load(&b.graph.canonical_hash()) {
        Lookup::Bad { path, reason } => {
            assert_eq!(path, path_b);
            assert_eq!(reason, "it holds the program of another graph");
        }
        _ => panic!("the entry of another graph was used"),
    }
}

/// A mutation of a payload's description: a number, string or list somewhere in it changed.
fn mutate(json: &mut Value, rng: &mut Rng) {
    // Pick a random node of the tree, preferring leaves.
    let mut at = json;
    loop {
        let children = match at {
            Value::Array(v) => v.len(),
            Value::Object(m) => m.len(),
            _ => 0,
        };
        if children == 0 || rng.below(8) == 0 {
            break;
        }
        let k = rng.below(children);
        at = match at {
            Value::Array(v) => &mut v[k],
            Value::Object(m) => m.values_mut().nth(k).expect("k < len"),
            _ => unreachable!("only containers have children"),
        };
    }
    let names = [
        "add",
        "mul",
        "exp",
        "matmul",
        "softmax",
        "sum",
        "layer_norm",
        "where",
        "transpose",
        "reshape",
        "ones",
        "f32",
        "bf16",
        "i64",
        "bool",
        "op",
        "input",
        "constant",
    ];
    *at = match at.take() {
        Value::Number(n) => {
            let n = n.as_u64().unwrap_or(1);
            let choices = [
                0,
                1,
                2,
                n.saturating_sub(1),
                n.saturating_add(1),
                n.saturating_mul(2),
                1 << 40,
                u64::MAX,
            ];
            choices[rng.below(choices.len())].into()
        }
        Value::String(_) => names[rng.below(names.len())].into(),
        Value::Array(mut v) => {
            match rng.below(3) {
                0 if !v.is_empty() => {
                    v.remove(rng.below(v.len()));
                }
                1 if !v.is_empty() => {
                    let x = v[rng.below(v.len())].clone();
                    v.push(x);
                }
                _ => v.reverse(),
            }
            Value::Array(v)
        }
        Value::Null => 0.into(),
        other => Value::Array(vec![other]),
    };
}

/// Seeded random damage to valid descriptions (numbers, strings, lists), resealed so only the
/// decoder's checks stand between them and the executor.
#[test]
fn damaged_payloads_fail_to_decode_without_panicking() {
    let rt = runtime();
    let mut rng = Rng(99);
    let (mut loaded, mut rejected) = (0, 0);
    let mut all = cases(&rt);
    for seed in 0..8u64 {
        let dtype = [DType::F32, DType::Bf16, DType::F64][seed as usize % 3];
        let mut r = Rng(seed * 31 + 7);
        let size = (r.below(10) + 1, r.below(30) + 1);
        let (graph, inputs) = random_graph(&rt, &mut r, dtype, size, seed % 2 == 0);
        all.push(Case {
            name: "random",
            graph,
            inputs,
        });
    }
    for case in all {
        let (program, _) = optimize(&rt, &case.graph).expect("optimizes");
        let (json, tail) = split(&serial::encode(&program));
        for round in 0..100 {
            let mut damaged = json.clone();
            for _ in 0..=rng.below(3) {
                // Mostly the kernel plan and the optimized graph, which the most checks guard.
                let part = ["kernels", "graph", "kernels", "all"][rng.below(4)];
                match damaged.get_mut(part) {
                    Some(at) => mutate(at, &mut rng),
                    None => mutate(&mut damaged, &mut rng),
                }
            }
            let cut = if round % 10 == 0 {
                tail.len().saturating_sub(rng.below(8) + 1)
            } else {
                tail.len()
            };
            let payload = join(&damaged, &tail[..cut]);
            let what = format!("{} round {round}: {damaged}", case.name);
            let decoded = catch_unwind(AssertUnwindSafe(|| serial::decode(&payload)))
                .unwrap_or_else(|_| panic!("decoding panicked: {what}"));
            match decoded {
                Ok(program) => {
                    loaded += 1;
                    // A damaged program that is still valid runs, or fails with an error.
                    let refs: Vec<&Tensor> = case.inputs.iter().collect();
                    catch_unwind(AssertUnwindSafe(|| program.run(&rt, CoreId(0), &refs)))
                        .unwrap_or_else(|_| panic!("running panicked: {what}"))
                        .ok();
                }
                Err(_) => rejected += 1,
            }
        }
    }
    assert!(
        rejected > 0 && loaded > 0,
        "{rejected} rejected, {loaded} loaded"
    );
}

#[test]
fn concurrent_writers_leave_a_valid_entry() {
    let rt = runtime();
    let dir = TempDir::new("race");
    let case = cases(&rt).swap_remove(3);
    let (program, _) = optimize(&rt, &case.graph).expect("optimizes");
    let hash = case.graph.canonical_hash();
    let disk = DiskCache::new(dir.0.clone());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..20 {
                    disk.store(&hash, &program).expect("stores");
                }
            });
        }
        s.spawn(|| {
            for _ in 0..100 {
                if let Lookup::Bad { reason, .. } = disk.load(&hash) {
                    panic!("a reader saw a broken entry: {reason}");
                }
            }
        });
    });
    let Lookup::Hit(loaded) = disk.load(&hash) else {
        panic!("no valid entry");
    };
    assert_bitwise(
        "after the race",
        &run(&rt, &loaded, &case.inputs),
        &run(&rt, &program, &case.inputs),
    );
    assert_eq!(dir.files(), [format!("{}.program", disk.key(&hash))]);
}

#[test]
fn another_compiler_format_does_not_hit() {
    let rt = runtime();
    let dir = TempDir::new("format");
    let case = cases(&rt).swap_remove(0);
    get(&rt, &dir.cache(), &case);
    let next = format!(
        "neuronlab-compile {} format {}",
        env!("CARGO_PKG_VERSION"),
        COMPILER_FORMAT + 1
    );
    assert_ne!(next, compiler_version());
    let newer = ProgramCache::with_disk(Some(DiskCache::with_compiler(dir.0.clone(), next)));
    let (_, source, events) = get(&rt, &newer, &case);
    assert_eq!(source, CacheSource::Miss);
    // A plain miss: nothing was wrong with the other version's entry.
    assert!(
        !events.iter().any(|e| matches!(e, EventKind::Log { .. })),
        "{events:?}"
    );
    assert_eq!(dir.files().len(), 2);
    let (_, source, _) = get(&rt, &dir.cache(), &case);
    assert_eq!(source, CacheSource::Disk);
}

#[test]
fn an_unwritable_cache_is_reported_and_compiling_goes_on() {
    let rt = runtime();
    let dir = TempDir::new("unwritable");
    // A file where the directory should be.
    fs::write(&dir.0, b"not a directory").expect("writes");
    let case = cases(&rt).swap_remove(0);
    let (_, source, events) = get(&rt, &dir.cache(), &case);
    assert_eq!(source, CacheSource::Miss);
    let warned = events.iter().any(|e| {
        matches!(e, EventKind::Log { level: LogLevel::Warn, target, message }
            if target == "cache" && message.starts_with("could not write program cache entry"))
    });
    assert!(warned, "{events:?}");
    fs::remove_file(&dir.0).expect("removes");
}

#[test]
fn from_env_caches_under_the_cache_root_and_new_in_memory() {
    let programs = CacheDir::Programs.path();
    assert_eq!(
        ProgramCache::from_env().disk_dir(),
        Some(programs.as_path())
    );
    assert_eq!(ProgramCache::new().disk_dir(), None);
}
