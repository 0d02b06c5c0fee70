//! Compiled functions: a cache of programs keyed by call signature, with recompile counting,
//! the recompile limit, graph-break bookkeeping and `explain`.
//!
//! This module holds the decisions; the sandbox drives the guest (tracing through the
//! trampoline) and asks this module what to do at each call.

use std::sync::Arc;

use super::autodiff;
use super::captures::{self, Access, Captured, Effect, Guard, Slot, TensorState};
use super::graph::Part;
use super::guards::{self, Signature};
use super::recorder::CachedProgram;
use neuronlab_core::ops::attrs::{AttrDefault, AttrKind, AttrSpec, ResolvedAttrs};
use neuronlab_core::ops::Attrs;

/// Options of a compiled function, as `torch.compile` names them.
#[derive(Clone, Debug, PartialEq)]
pub struct CompileOptions {
    /// Recompiles allowed before the function runs eagerly (or fails).
    pub recompile_limit: u32,
    /// Past the limit, fail instead of running eagerly.
    pub fail_on_recompile: bool,
    /// A graph break is an error instead of a split.
    pub fullgraph: bool,
    /// Names of the inputs, for messages (`x`, `cache`).
    pub input_names: Vec<String>,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            recompile_limit: 8,
            fail_on_recompile: false,
            fullgraph: false,
            input_names: Vec::new(),
        }
    }
}

static OPTION_SPECS: &[AttrSpec] = &[
    AttrSpec::new("recompile_limit", AttrKind::Int, AttrDefault::Int(8)),
    AttrSpec::new("fail_on_recompile", AttrKind::Int, AttrDefault::Int(0)),
    AttrSpec::new("fullgraph", AttrKind::Int, AttrDefault::Int(0)),
    AttrSpec::new("input_names", AttrKind::Str, AttrDefault::Str("")),
];

impl CompileOptions {
    /// Options from attributes (the ABI passes them that way); unknown names are errors.
    pub fn from_attrs(attrs: &Attrs) -> Result<CompileOptions, String> {
        let a = ResolvedAttrs::resolve(OPTION_SPECS, attrs)
            .map_err(|e| format!("compile options: {e}"))?;
        let limit = a.int("recompile_limit");
        if !(0..=1_000_000).contains(&limit) {
            return Err(format!(
                "compile options: recompile_limit {limit} must be between 0 and 1000000"
            ));
        }
        let names = a.str("input_names");
        let flag = |name: &str| match a.int(name) {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(format!("option '{name}' is {other}: give 0 or 1")),
        };
        Ok(CompileOptions {
            recompile_limit: limit as u32,
            fail_on_recompile: flag("fail_on_recompile")?,
            fullgraph: flag("fullgraph")?,
            input_names: if names.is_empty() {
                Vec::new()
            } else {
                names.split(',').map(|n| n.trim().to_string()).collect()
            },
        })
    }
}

/// One compiled version of a function: its guards and program.
pub struct Entry {
    /// The signature it was traced with (the arguments' guards).
    pub signature: Signature,
    /// The optimized program.
    pub compiled: Arc<CachedProgram>,
    /// The program's inputs after the arguments: tensors the function used without being
    /// passed them.
    pub captured: Vec<Captured>,
    /// What else the trace read, and found (see [`super::captures`]).
    pub guards: Vec<Guard>,
    /// The updates each run makes, from the program's outputs after the function's results.
    pub effects: Vec<Effect>,
}

impl Entry {
    /// A version with no captures read at each call, no other guards and no effects.
    pub fn plain(signature: Signature, compiled: Arc<CachedProgram>) -> Entry {
        Entry {
            signature,
            compiled,
            captured: Vec::new(),
            guards: Vec::new(),
            effects: Vec::new(),
        }
    }

    /// The held handles this version reaches, in the order messages number them.
    fn held(&self) -> Vec<u32> {
        let mut held = Vec::new();
        let accesses = self.guards.iter().map(|g| g.access);
        for access in accesses.chain(self.effects.iter().map(|e| e.access)) {
            if let Access::Data(Slot::Held(h)) | Access::Grad(Slot::Held(h)) = access {
                if !held.contains(&h) {
                    held.push(h);
                }
            }
        }
        held
    }

    /// True when a call with `signature`, whose captures `observe` reports, can run it.
    fn accepts(&self, signature: &Signature, observe: &Observe) -> bool {
        &self.signature == signature && self.guards.iter().all(|g| observe(&g.access) == g.expect)
    }

    /// Every guard of this version such a call fails.
    fn failures(&self, signature: &Signature, observe: &Observe, names: &[String]) -> Vec<String> {
        let mut out = guards::failures(&self.signature, signature, names);
        out.extend(captures::guard_failures(
            &self.guards,
            observe,
            &self.held(),
            names,
        ));
        out
    }
}

/// What the caller sees now of a capture: a held tensor's state, or a gradient's (`None`
/// when there is none, or the handle was freed).
pub type Observe<'a> = dyn Fn(&Access) -> Option<TensorState> + 'a;

/// What a call should do.
pub enum Plan<'a> {
    /// Run this cached program; the guest is not entered.
    Hit(&'a Entry),
    /// Trace (and compile): `reason` says why, `recompile` whether a version existed.
    Trace {
        /// `new function`, or the failed guards.
        reason: String,
        /// True when this is a recompile.
        recompile: bool,
    },
    /// The function breaks its graph: re-enter the guest in lazy mode; segments are cached by
    /// graph hash.
    Lazy,
    /// The recompile limit was reached: run eagerly. `first` is true the first time, when the
    /// warning event is due.
    Eager {
        /// Whether this is the first call past the limit.
        first: bool,
        /// The miss reason.
        reason: String,
    },
    /// The recompile limit was reached and `fail_on_recompile` is set: the call fails.
    /// `first` is true the first time, when the limit's event is due.
    Fail {
        /// Whether this is the first call past the limit.
        first: bool,
        /// Why the call fails.
        message: String,
    },
}

/// A compiled function and its cache.
pub struct CompiledFunction {
    /// Its name, for events and messages.
    pub name: String,
    /// The guest's function-table index of the traced function.
    pub fn_index: u32,
    /// Its options.
    pub options: CompileOptions,
    /// Compiled versions, oldest first.
    pub entries: Vec<Entry>,
    /// Compiles after the first.
    pub recompiles: u32,
    /// Graph breaks seen while tracing, with their reasons.
    pub breaks: Vec<String>,
    /// True once the limit was reached (later calls run eagerly, or fail).
    pub limit_reached: bool,
    /// What its calls did so far.
    pub stats: CallStats,
}

/// What a compiled function's calls did, counted as they are planned: the numbers a plot of
/// compiles per step needs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallStats {
    /// Calls.
    pub calls: u64,
    /// Calls that traced a new version (the first compile and every recompile).
    pub compiles: u64,
    /// Calls that ran a cached version without entering the guest.
    pub cache_hits: u64,
    /// Calls past the recompile limit, run eagerly.
    pub eager_calls: u64,
}

impl CompiledFunction {
    /// A function not yet called.
    pub fn new(name: &str, fn_index: u32, options: CompileOptions) -> CompiledFunction {
        CompiledFunction {
            name: name.to_string(),
            fn_index,
            options,
            entries: Vec::new(),
            recompiles: 0,
            breaks: Vec::new(),
            limit_reached: false,
            stats: CallStats::default(),
        }
    }

    /// Decides what a call with `signature` does, where `observe` reports the state of what
    /// versions captured, and counts it in [`CompiledFunction::stats`].
    pub fn plan(&mut self, signature: &Signature, observe: &Observe) -> Plan<'_> {
        self.stats.calls += 1;
        if !self.breaks.is_empty() {
            return Plan::Lazy;
        }
        if let Some(i) = self
            .entries
            .iter()
            .position(|e| e.accepts(signature, observe))
        {
            self.stats.cache_hits += 1;
            return Plan::Hit(&self.entries[i]);
        }
        let names = &self.options.input_names;
        let reason = guards::closest(
            self.entries
                .iter()
                .map(|e| e.failures(signature, observe, names)),
        );
        let recompile = !self.entries.is_empty();
        if recompile && self.recompiles >= self.options.recompile_limit {
            let first = !std::mem::replace(&mut self.limit_reached, true);
            if self.options.fail_on_recompile {
                let message = format!(
                    "'{}' reached its recompile limit ({}) and fail_on_recompile is set: {reason}",
                    self.name, self.options.recompile_limit
                );
                return Plan::Fail { first, message };
            }
            self.stats.eager_calls += 1;
            return Plan::Eager { first, reason };
        }
        self.stats.compiles += 1;
        Plan::Trace { reason, recompile }
    }

    /// The event text of a compile: `recompile 3/8 of 'f': <reason>` or `compile of 'f': new function`.
    pub fn compile_label(&self, recompile: bool, reason: &str) -> String {
        if recompile {
            format!(
                "recompile {}/{} of '{}': {reason}",
                self.recompiles + 1,
                self.options.recompile_limit,
                self.name
            )
        } else {
            format!("compile of '{}': {reason}", self.name)
        }
    }

    /// Records a new compiled version.
    pub fn add(&mut self, entry: Entry, recompile: bool) {
        if recompile {
            self.recompiles += 1;
        }
        self.entries.push(entry);
    }

    /// What `torch._dynamo.explain` would say: versions with their guards, graphs before and
    /// after the passes, fused kernels and compile times; graph breaks with reasons.
    pub fn explain(&self) -> String {
        let mut out = format!(
            "compiled function '{}': {} version(s), {} recompile(s) of {} allowed{}\n",
            self.name,
            self.entries.len(),
            self.recompiles,
            self.options.recompile_limit,
            match (self.limit_reached, self.options.fail_on_recompile) {
                (false, _) => "",
                (true, false) => "; the limit was reached, later calls run eagerly",
                (true, true) => "; the limit was reached, later calls that recompile fail",
            }
        );
        if !self.breaks.is_empty() {
            out.push_str(&format!(
                "graph breaks ({}): every call re-enters the guest; the runs between breaks are compiled and cached by graph hash\n",
                self.breaks.len()
            ));
            for (i, b) in self.breaks.iter().enumerate() {
                out.push_str(&format!("  break {}: {b}\n", i + 1));
            }
        }
        for (i, e) in self.entries.iter().enumerate() {
            let r = &e.compiled.report;
            out.push_str(&format!(
                "\nversion {} {}: {} ops before passes, {} after, {} kernel(s), compiled in {:.0} µs (host)\n",
                i + 1,
                e.signature,
                r.nodes_before,
                r.nodes_after,
                r.kernels.len(),
                r.host_compile_us
            ));
            out.push_str("  guards:\n");
            let names = &self.options.input_names;
            for g in e.signature.guards(names) {
                out.push_str(&format!("    {g}\n"));
            }
            let held = e.held();
            for g in &e.guards {
                let label = captures::access_label(g.access, &held, names);
                match &g.expect {
                    Some(state) => out.push_str(&format!("    {label}: {state}\n")),
                    None => out.push_str(&format!("    {label}: None\n")),
                }
            }
            let fixed: Vec<String> = e
                .captured
                .iter()
                .filter_map(|c| match c {
                    Captured::Fixed(t) => Some(t.meta().to_string()),
                    Captured::Read(_) => None,
                })
                .collect();
            if !fixed.is_empty() {
                out.push_str(&format!(
                    "  tensors made while tracing (values fixed): {}\n",
                    fixed.join(", ")
                ));
            }
            if !e.effects.is_empty() {
                let writes: Vec<String> = e
                    .effects
                    .iter()
                    .map(|w| {
                        let label = captures::access_label(w.access, &held, names);
                        match w.output {
                            Some(_) => label,
                            None => format!("{label} (cleared)"),
                        }
                    })
                    .collect();
                out.push_str(&format!(
                    "  updates after each run: {}\n",
                    writes.join(", ")
                ));
            }
            out.push_str(&parts(e));
            out.push_str(&e.compiled.program.explain());
            out.push('\n');
        }
        out
    }
}

/// The forward, backward and update parts of a version's graph, and what the backward read
/// of the forward: empty for a graph without a traced backward.
fn parts(e: &Entry) -> String {
    let graph = e.compiled.program.before();
    let count = |part: Part| graph.nodes.iter().filter(|n| n.part == part).count();
    let (backward, update) = (count(Part::Backward), count(Part::Update));
    if backward == 0 && update == 0 {
        return String::new();
    }
    let mut out = format!(
        "  parts: forward {} ops, backward {backward} ops, update {update} ops\n",
        count(Part::Forward)
    );
    let saved = autodiff::saved_for_backward(graph);
    let bytes: usize = saved.iter().map(|&v| graph.meta(v).nbytes()).sum();
    let listed: Vec<String> = saved
        .iter()
        .map(|&v| format!("{v} {}", graph.meta(v)))
        .collect();
    out.push_str(&format!(
        "  saved for backward ({}): {}\n",
        neuronlab_core::events::fmt::bytes(bytes as u64),
        listed.join(", ")
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse_from_attributes() {
        let o = CompileOptions::from_attrs(
            &Attrs::new()
                .with("recompile_limit", 2)
                .with("fullgraph", 1)
                .with("input_names", "x, cache"),
        )
        .unwrap();
        assert_eq!(o.recompile_limit, 2);
        assert!(o.fullgraph && !o.fail_on_recompile);
        assert_eq!(o.input_names, vec!["x", "cache"]);
        let e = CompileOptions::from_attrs(&Attrs::new().with("dynamic", 1)).unwrap_err();
        assert!(e.contains("unknown attribute 'dynamic'"), "{e}");
        assert!(CompileOptions::from_attrs(&Attrs::new().with("recompile_limit", -1)).is_err());
        let e = CompileOptions::from_attrs(&Attrs::new().with("fullgraph", 7)).unwrap_err();
        assert_eq!(e, "option 'fullgraph' is 7: give 0 or 1");
    }
}
