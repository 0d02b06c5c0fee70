//! Running a module as ranks, one thread and one core each: what `%spmd` and `neuronlab run`
//! both do, on the session's runtime, variables and compiled programs.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use neuronlab_core::events::{Summary, SummaryWindow};
use neuronlab_dist::peers::Processes;
use neuronlab_sandbox::spmd::{
    launch, RankOutputs, RankResult, RankView, SpmdInterrupt, SpmdOptions,
};
use neuronlab_sandbox::{GuestModule, ModuleSource, Shared};

use super::convert::OutputConverter;
use super::router::RunWatch;
use super::{CellError, Output, Running, Session};

/// How to run a module.
#[derive(Clone, Copy, Debug)]
pub struct RunRequest<'a> {
    /// How many ranks.
    pub nproc: u32,
    /// The export every rank calls.
    pub entry: &'a str,
    /// Its arguments, as text (numbers for the export's parameters).
    pub args: &'a [String],
    /// The arguments every rank's guest reads with the `args` import (what follows `--` on
    /// `neuronlab run`).
    pub guest_args: &'a [String],
    /// Show every rank's output, not only rank 0's.
    pub all_ranks: bool,
    /// The processes the run spans (`mpirun`), each running `nproc` ranks; `None` for one.
    pub processes: Option<&'a Processes>,
}

/// How a run went: the module it loaded and every rank's result, in rank order.
#[derive(Debug)]
pub struct RunReport {
    /// The module's name.
    pub module: String,
    /// Whether it was compiled now or came from the module cache.
    pub source: ModuleSource,
    /// How long loading it took.
    pub load_time: Duration,
    /// Every rank's result.
    pub ranks: Vec<RankResult>,
    /// What every rank's events amount to (under mpirun, on process 0, every process's),
    /// counted as they were published: none is missing when the recorder kept fewer.
    pub summary: Summary,
}

impl RunReport {
    /// The ranks that failed, as `rank N: message` lines.
    pub fn failures(&self) -> Vec<String> {
        self.ranks
            .iter()
            .filter_map(|r| {
                r.result
                    .as_ref()
                    .err()
                    .map(|e| format!("rank {}: {e}", r.rank))
            })
            .collect()
    }
}

impl Session {
    /// Loads the module at `path` (`.wasm` or `.wat`), checking its imports.
    pub fn load_module(&self, path: &Path) -> Result<GuestModule, CellError> {
        self.sandbox
            .load_file(path)
            .map_err(|e| CellError::new(e.kind.name(), e.message))
    }

    /// Runs `module` as `request.nproc` ranks, streaming their output (prefixed with the rank
    /// when there are several) and the log lines published meanwhile to `out`. An error is a
    /// world that cannot start; a rank that fails is in the report.
    pub fn run_module(
        &mut self,
        module: &GuestModule,
        request: &RunRequest<'_>,
        out: &mut dyn FnMut(Output),
    ) -> Result<RunReport, CellError> {
        let options = SpmdOptions {
            nproc: request.nproc,
            entry: request.entry.to_string(),
            args: request.args.to_vec(),
            limits: self.limits.clone(),
            world: self.world.clone(),
            processes: request.processes.cloned(),
        };
        let processes = request.processes.as_ref().map_or(1, |p| p.0.processes());
        let world_size = request.nproc * processes;
        let view = RankView {
            ranks: world_size,
            all_ranks: request.all_ranks,
            prefix: world_size > 1,
        };
        let sink = Mutex::new(self.router.sink());
        let outputs = Arc::new(RankOutputs::new(
            view,
            Box::new(move |o| {
                let mut sink = sink.lock().unwrap_or_else(PoisonError::into_inner);
                (*sink)(o)
            }),
        ));
        let interrupt = SpmdInterrupt::new();
        self.interrupter.set(Running::Ranks(interrupt.clone()));
        let mut converter = OutputConverter::new(self.execution_count, self.cell_columns.take());
        let (sandbox, runtime) = (self.sandbox, self.runtime.clone());
        let shared = Shared {
            args: request.guest_args.into(),
            ..self.shared.clone()
        };
        let what = match (world_size, processes) {
            (1, _) => format!("running {}", module.name),
            (n, 1) => format!("running {} as {n} ranks", module.name),
            (n, p) => format!("running {} as {n} ranks in {p} processes", module.name),
        };
        let mut watch = RunWatch::new(what, &runtime);
        let counted = SummaryWindow::open(runtime.bus());
        let ranks = self.router.stream(&mut converter, out, &mut watch, || {
            let emit = outputs.clone();
            let ranks = launch(
                sandbox,
                module,
                runtime,
                shared,
                &options,
                Arc::new(move |rank, o| emit.emit(rank, o)),
                &interrupt,
            );
            // Partial last lines go out before the stream ends.
            outputs.finish();
            ranks
        });
        self.interrupter.set(Running::Nothing);
        let ranks = ranks.map_err(|e| CellError::new("SpmdError", e.to_string()))?;
        Ok(RunReport {
            module: module.name.clone(),
            source: module.source.clone(),
            load_time: module.load_time,
            ranks,
            summary: counted.finish().with_peak_roles(self.runtime.memory()),
        })
    }
}
