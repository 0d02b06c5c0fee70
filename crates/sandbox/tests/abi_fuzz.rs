//! A seeded fuzz test of the whole ABI: thousands of random imports, each with random,
//! boundary and hostile arguments (handles live, freed and forged; pointers in, at the edge
//! of and past memory; shapes and attributes near 2^31, 2^32 and 2^63), against one host.
//!
//! Every call must return a status the ABI defines, never trap the guest or fail the host;
//! when the guest drops what it holds, memory accounting and the handle count are back where
//! they started. The process runs under a real data limit (RLIMIT_DATA, set by scripts/test
//! with `ulimit -d`) far below what an unchecked allocation of a hostile size would take, so
//! such an allocation ends this test, not the machine. `NEURONLAB_FUZZ_CALLS` and
//! `NEURONLAB_FUZZ_SEED` change the run; a failure prints the seed to reproduce it.

mod common;

use std::collections::BTreeMap;

use common::{attrs, Attr, Driver, PAGES, SCRATCH};
use neuronlab_core::device::topology::CoreId;
use neuronlab_core::ops::attrs::AttrKind;
use neuronlab_core::ops::Registry;
use neuronlab_core::testing::SplitMix64;
use neuronlab_sandbox::abi::{imports, Import, WasmType};
use neuronlab_sandbox::GuestErrorKind;

const MEMORY: i64 = PAGES * 65536;
/// Where imports write their outputs (handles, shapes, text).
const OUT_AT: i64 = SCRATCH + 32_768;

struct Fuzzer {
    d: Driver,
    rng: SplitMix64,
    /// Handles the guest was given and has not dropped.
    live: Vec<i64>,
    /// Handles it dropped (stale from then on).
    dropped: Vec<i64>,
    statuses: BTreeMap<String, BTreeMap<i64, u64>>,
}

/// Values at the edges of what a field can hold.
const EDGES: &[i64] = &[
    0,
    1,
    -1,
    2,
    7,
    64,
    i32::MAX as i64,
    i32::MIN as i64,
    1 << 31,
    (1 << 32) - 1,
    1 << 32,
    1 << 40,
    1 << 62,
    i64::MAX,
    i64::MIN,
];

impl Fuzzer {
    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        self.rng.pick(items)
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.rng.below(100) < percent
    }

    /// A handle: usually a live one, sometimes freed, forged, or not a handle at all.
    fn handle(&mut self) -> i64 {
        match self.rng.below(10) {
            0..=5 if !self.live.is_empty() => self.live[self.rng.below(self.live.len())],
            6 if !self.dropped.is_empty() => self.dropped[self.rng.below(self.dropped.len())],
            7 => (self.rng.next() & 0x7fff_ffff) as i64,
            8 => self.pick(EDGES),
            _ => self.small(),
        }
    }

    fn small(&mut self) -> i64 {
        self.rng.below(8) as i64
    }

    /// A pointer: into the scratch area, at the edge of memory, or outside it.
    fn pointer(&mut self) -> i64 {
        match self.rng.below(10) {
            0..=6 => SCRATCH + self.rng.below(8192) as i64,
            7 => MEMORY - self.rng.below(16) as i64,
            8 => self.pick(EDGES),
            _ => OUT_AT,
        }
    }

    /// A length or count: small, or an edge.
    fn length(&mut self) -> i64 {
        if self.chance(75) {
            self.rng.below(64) as i64
        } else {
            self.pick(EDGES)
        }
    }

    /// Random bytes at a random scratch spot, some of them shapes and attributes of
    /// hostile sizes, so pointer arguments find something to read.
    fn scribble(&mut self) {
        let at = SCRATCH + self.rng.below(8192) as i64;
        let mut bytes = Vec::new();
        for _ in 0..self.rng.below(6) {
            let v = self.pick(EDGES);
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        let name = Registry::global().ops()[self.rng.below(Registry::global().ops().len())].name;
        bytes.extend_from_slice(name.as_bytes());
        self.d.write(at, &bytes);
    }

    /// Argument `k` of `import`: a handle, a pointer, a length or an edge value.
    fn argument(&mut self, import: &Import, k: usize) -> i64 {
        let value = match self.rng.below(4) {
            0 => self.handle(),
            1 => self.pointer(),
            2 => self.length(),
            _ => self.pick(EDGES),
        };
        match import.params[k] {
            WasmType::I32 => value as i32 as i64,
            WasmType::I64 | WasmType::F64 => value,
        }
    }

    /// An op call with a real op, real or hostile inputs, and attributes it declares with
    /// random (often hostile) values: what reaches shape inference and the kernels.
    fn op_call(&mut self) {
        let ops = Registry::global().ops();
        let def = &ops[self.rng.below(ops.len())];
        let (min, max) = def.input_count();
        let n = (min + self.rng.below(2)).min(max.unwrap_or(min + 1));
        let inputs: Vec<i64> = (0..n).map(|_| self.handle()).collect();
        let mut encoded = Vec::new();
        for spec in def.attrs {
            if !self.chance(60) {
                continue;
            }
            // Mostly the declared kind; sometimes another, which must be a clean error.
            let kind = if self.chance(90) {
                spec.kind
            } else {
                self.pick(&[AttrKind::Int, AttrKind::Ints, AttrKind::Str])
            };
            let entry = match kind {
                AttrKind::Int | AttrKind::Float => {
                    let v = self.edge_or_small();
                    attrs(&[Attr::Int(spec.name, v)])
                }
                AttrKind::Ints => {
                    let dims: Vec<i64> = (0..self.rng.below(5))
                        .map(|_| self.edge_or_small())
                        .collect();
                    attrs(&[Attr::Ints(spec.name, &dims)])
                }
                AttrKind::Str | AttrKind::DType => {
                    let s = self.pick(&["f32", "bf16", "i64", "bool", "sum", "tanh", "none", "x"]);
                    attrs(&[Attr::Str(spec.name, s)])
                }
            };
            encoded.extend(entry);
        }
        match self.d.try_op_call(def.name, &inputs, &encoded) {
            Ok((status, _)) => {
                self.collect_outputs(status, SCRATCH + 8192);
                self.count("op_call", status);
            }
            // An op as large as the quota allows may outlast the deadline: the host stops it.
            Err(e) if e.kind == GuestErrorKind::Deadline => self.count("op_call (deadline)", 0),
            Err(e) => panic!(
                "{} failed the guest instead of returning a status: {e}",
                def.name
            ),
        }
    }

    fn edge_or_small(&mut self) -> i64 {
        if self.chance(70) {
            self.rng.below(6) as i64 - 1
        } else {
            self.pick(EDGES)
        }
    }

    /// A tensor made on purpose, so there is something to operate on.
    fn create(&mut self) {
        let rank = self.rng.below(3);
        let shape: Vec<i64> = (0..rank).map(|_| 1 + self.rng.below(4) as i64).collect();
        let h = self.d.tensor(&shape, &[1.5, -2.0, 0.25]);
        assert!(h > 0, "tensor_create of {shape:?}: {}", self.d.last_error());
        self.live.push(h);
        self.count("tensor_create", 1);
    }

    /// Handles an import wrote at `at` when it returned `status` of them.
    fn collect_outputs(&mut self, status: i64, at: i64) {
        for k in 0..status.clamp(0, 4) {
            let h = i64::from(self.d.read_i32(at + 4 * k));
            if h > 0 && !self.live.contains(&h) {
                self.live.push(h);
            }
        }
    }

    fn count(&mut self, name: &str, status: i64) {
        let bucket = if status >= 0 { 0 } else { status };
        *self
            .statuses
            .entry(name.to_string())
            .or_default()
            .entry(bucket)
            .or_default() += 1;
    }

    /// Any import with random arguments.
    fn any_import(&mut self) {
        let all: Vec<&Import> = imports().collect();
        let import = all[self.rng.below(all.len())];
        let args: Vec<i64> = (0..import.params.len())
            .map(|k| self.argument(import, k))
            .collect();
        let name = format!("f_{}", import.name);
        let status = match self.d.try_call(&name, &args) {
            Ok(v) => v,
            Err(e) => panic!(
                "{}{args:?} failed the guest instead of returning a status: {e}",
                import.name
            ),
        };
        // ABI.md's error codes: ERR_INVALID (-1) to ERR_FS (-12).
        let known = status >= 0 || (-12..=-1).contains(&status);
        assert!(
            known,
            "{}{args:?} returned {status}, not an ABI status",
            import.name
        );
        if import.name == "tensor_drop" && status == 0 {
            self.live.retain(|&h| h != args[0]);
            self.dropped.push(args[0]);
        }
        let issues_handles = [
            "tensor_create",
            "tensor_clone",
            "var_get_tensor",
            "dist_full_tensor",
            "dist_to_local",
        ];
        if issues_handles.contains(&import.name) && status > 0 && import.result == WasmType::I32 {
            self.live.push(status);
        }
        self.count(import.name, status);
    }
}

#[test]
fn random_import_sequences_return_statuses_and_leave_the_host_as_it_was() {
    let calls: usize = std::env::var("NEURONLAB_FUZZ_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let seed: u64 = std::env::var("NEURONLAB_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed_2026);
    println!("abi fuzz: seed {seed}, {calls} calls (NEURONLAB_FUZZ_SEED / NEURONLAB_FUZZ_CALLS)");
    let mut f = Fuzzer {
        d: Driver::new(256 << 20),
        rng: SplitMix64(seed),
        live: Vec::new(),
        dropped: Vec::new(),
        statuses: BTreeMap::new(),
    };
    let baseline = f.d.runtime.memory().stats(CoreId(0)).unwrap().in_use;
    for _ in 0..calls {
        match f.rng.below(10) {
            0 => f.create(),
            1..=3 => f.op_call(),
            4 => f.scribble(),
            _ => f.any_import(),
        }
    }
    let issued = f.live.len() + f.dropped.len();
    for h in std::mem::take(&mut f.live) {
        f.d.call("tensor_drop", &[h]);
    }
    // Whatever the calls made that the fuzzer did not see as handles is still counted.
    let leftover = f.d.guest.live_tensors();
    println!("abi fuzz: {issued} handles seen, {leftover} left after dropping them");
    for (name, by_status) in &f.statuses {
        let counts: Vec<String> = by_status.iter().map(|(s, n)| format!("{s}: {n}")).collect();
        println!("  {name:<20} {}", counts.join(", "));
    }
    drop(f.d.guest);
    // Displayed tensors went to the front end, which holds them until it lets go.
    f.d.output.lock().unwrap().clear();
    let after = f.d.runtime.memory().stats(CoreId(0)).unwrap().in_use;
    assert_eq!(
        after, baseline,
        "seed {seed}: device memory in use after the guest ended"
    );
    let host_in_use: u64 =
        f.d.runtime
            .topology()
            .cores()
            .map(|c| f.d.runtime.memory().stats(c).unwrap().in_use)
            .sum();
    assert_eq!(
        host_in_use, 0,
        "seed {seed}: bytes still reserved on some core"
    );
}
