//! The SPMD launcher: one guest module run as N ranks, as `torchrun --nproc_per_node N`.
//!
//! Each rank is its own instance of the module (its own memory, handles and output), on its
//! own thread and its own core (`neuron:<rank>`), started together; the ranks meet in
//! collectives through one [`World`]. Ops of every rank share the process's thread pool; a rank
//! waiting in a collective sleeps.
//!
//! [`RankOutputs`] turns the ranks' output into what a user reads: lines prefixed with
//! `[rank3]: ` as torchrun prints them, and by default only rank 0's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::Shared;
use crate::{
    GuestError, GuestErrorKind, GuestModule, GuestOutput, InterruptHandle, Limits, OutputSink,
    Sandbox,
};
use neuronlab_core::tensor::{format_tensor, FormatOptions};
use neuronlab_core::{Error, Runtime};
use neuronlab_dist::{RankComm, World, WorldOptions};

/// What to launch.
#[derive(Clone, Debug)]
pub struct SpmdOptions {
    /// Number of ranks.
    pub nproc: u32,
    /// The exported function every rank calls.
    pub entry: String,
    /// Its arguments, as text.
    pub args: Vec<String>,
    /// Each rank's sandbox limits.
    pub limits: Limits,
    /// The world's settings (the collective timeout).
    pub world: WorldOptions,
}

/// How one rank ended.
#[derive(Debug)]
pub struct RankResult {
    /// The rank.
    pub rank: u32,
    /// The entry's results as text, or why the rank failed.
    pub result: Result<Vec<String>, GuestError>,
}

/// Stops every rank of a running launch from another thread (Ctrl-C).
#[derive(Clone, Default)]
pub struct SpmdInterrupt {
    inner: Arc<Mutex<InterruptState>>,
}

#[derive(Default)]
struct InterruptState {
    requested: bool,
    ranks: Vec<InterruptHandle>,
}

impl SpmdInterrupt {
    /// A handle for a launch that has not started.
    pub fn new() -> SpmdInterrupt {
        SpmdInterrupt::default()
    }

    /// Interrupts every rank; ranks that start afterwards are interrupted at once.
    pub fn interrupt(&self) {
        let mut state = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        state.requested = true;
        state.ranks.iter().for_each(InterruptHandle::interrupt);
    }

    fn register(&self, handle: InterruptHandle) {
        let mut state = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if state.requested {
            handle.interrupt();
        }
        state.ranks.push(handle);
    }
}

/// Runs `module` as `options.nproc` ranks on `runtime` and waits for all of them.
///
/// Every rank reads and writes the session variables in `shared` (the last write of a name
/// wins) and shares its compiled programs.
/// `output` receives each rank's output as it happens, tagged with the rank. Returns every
/// rank's result in rank order; fails before starting when the world cannot exist (more
/// ranks than cores).
pub fn launch(
    sandbox: &Sandbox,
    module: &GuestModule,
    runtime: Arc<Runtime>,
    shared: Shared,
    options: &SpmdOptions,
    output: Arc<dyn Fn(u32, GuestOutput) + Send + Sync>,
    interrupt: &SpmdInterrupt,
) -> Result<Vec<RankResult>, Error> {
    let world = World::new(runtime, options.nproc, options.world.clone())?;
    let results = std::thread::scope(|scope| {
        let ranks: Vec<_> = (0..options.nproc)
            .map(|rank| {
                let (world, output, shared) = (world.clone(), output.clone(), shared.clone());
                let sink: OutputSink = Box::new(move |o| output(rank, o));
                std::thread::Builder::new()
                    .name(format!("neuronlab-rank{rank}"))
                    .spawn_scoped(scope, move || {
                        let comm = world.rank(rank);
                        let result =
                            run_rank(sandbox, module, comm, shared, options, sink, interrupt);
                        let how = match &result {
                            Ok(_) => "finished".to_string(),
                            Err(e) => format!("stopped with an error ({})", e.message),
                        };
                        world.depart(rank, how);
                        RankResult { rank, result }
                    })
            })
            .collect();
        ranks
            .into_iter()
            .enumerate()
            .map(|(rank, spawned)| {
                let rank = rank as u32;
                match spawned.map(|h| h.join()) {
                    Ok(Ok(result)) => result,
                    Ok(Err(_)) => RankResult {
                        rank,
                        result: Err(GuestError::new(
                            GuestErrorKind::Host,
                            format!(
                            "internal error: the thread of rank {rank} panicked; please report it"
                        ),
                        )),
                    },
                    Err(e) => RankResult {
                        rank,
                        result: Err(GuestError::new(
                            GuestErrorKind::Host,
                            format!("cannot start the thread of rank {rank}: {e}"),
                        )),
                    },
                }
            })
            .collect()
    });
    Ok(results)
}

fn run_rank(
    sandbox: &Sandbox,
    module: &GuestModule,
    comm: RankComm,
    shared: Shared,
    options: &SpmdOptions,
    sink: OutputSink,
    interrupt: &SpmdInterrupt,
) -> Result<Vec<String>, GuestError> {
    let mut guest = sandbox.instantiate_rank(module, comm, shared, options.limits.clone(), sink)?;
    interrupt.register(guest.interrupt_handle());
    guest.call(&options.entry, &options.args)
}

/// Which ranks' output a user sees, and how it is labelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RankView {
    /// Show every rank, not only rank 0.
    pub all_ranks: bool,
    /// Prefix lines with `[rankN]: ` (for launches of more than one rank).
    pub prefix: bool,
}

/// Turns the tagged output of ranks into the stream a user reads: output of hidden ranks is
/// dropped; with prefixes, text is cut into lines, each prefixed with its rank, and tensors are
/// formatted as text so that their lines get prefixes too. Partial lines wait for their end
/// (or for [`RankOutputs::finish`]), so ranks' lines never interleave mid-line.
pub struct RankOutputs {
    view: RankView,
    sink: Box<dyn Fn(GuestOutput) + Send + Sync>,
    partial: Mutex<HashMap<(u32, bool), String>>,
}

impl RankOutputs {
    /// Output shown as `view` says, delivered to `sink`.
    pub fn new(view: RankView, sink: Box<dyn Fn(GuestOutput) + Send + Sync>) -> RankOutputs {
        RankOutputs {
            view,
            sink,
            partial: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one piece of rank `rank`'s output.
    pub fn emit(&self, rank: u32, output: GuestOutput) {
        if rank != 0 && !self.view.all_ranks {
            return;
        }
        if !self.view.prefix {
            (self.sink)(output);
            return;
        }
        match output {
            GuestOutput::Stdout(text) => self.lines(rank, false, &text),
            GuestOutput::Stderr(text) => self.lines(rank, true, &text),
            GuestOutput::Tensor(t) => {
                let text = format_tensor(&t, &FormatOptions::default()) + "\n";
                self.lines(rank, false, &text)
            }
            rich => (self.sink)(rich),
        }
    }

    /// Delivers every partial line still waiting for its end.
    pub fn finish(&self) {
        let partial =
            std::mem::take(&mut *self.partial.lock().unwrap_or_else(PoisonError::into_inner));
        let mut rest: Vec<_> = partial.into_iter().filter(|(_, t)| !t.is_empty()).collect();
        rest.sort_by_key(|((rank, stderr), _)| (*rank, *stderr));
        for ((rank, stderr), text) in rest {
            self.deliver(stderr, format!("[rank{rank}]: {text}\n"));
        }
    }

    fn lines(&self, rank: u32, stderr: bool, text: &str) {
        let complete = {
            let mut partial = self.partial.lock().unwrap_or_else(PoisonError::into_inner);
            let buffer = partial.entry((rank, stderr)).or_default();
            buffer.push_str(text);
            match buffer.rfind('\n') {
                Some(end) => {
                    let rest = buffer.split_off(end + 1);
                    std::mem::replace(buffer, rest)
                }
                None => return,
            }
        };
        let prefixed: String = complete
            .lines()
            .map(|line| format!("[rank{rank}]: {line}\n"))
            .collect();
        self.deliver(stderr, prefixed);
    }

    fn deliver(&self, stderr: bool, text: String) {
        (self.sink)(if stderr {
            GuestOutput::Stderr(text)
        } else {
            GuestOutput::Stdout(text)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(view: RankView) -> (Arc<Mutex<Vec<String>>>, RankOutputs) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink_seen = seen.clone();
        let outputs = RankOutputs::new(
            view,
            Box::new(move |o| {
                if let GuestOutput::Stdout(t) | GuestOutput::Stderr(t) = o {
                    sink_seen.lock().unwrap().push(t);
                }
            }),
        );
        (seen, outputs)
    }

    #[test]
    fn lines_are_prefixed_whole_and_hidden_ranks_dropped() {
        let (seen, out) = collect(RankView {
            all_ranks: false,
            prefix: true,
        });
        out.emit(0, GuestOutput::Stdout("hel".into()));
        out.emit(1, GuestOutput::Stdout("from rank 1\n".into()));
        out.emit(0, GuestOutput::Stdout("lo\nworld\npart".into()));
        out.finish();
        assert_eq!(
            seen.lock().unwrap().concat(),
            "[rank0]: hello\n[rank0]: world\n[rank0]: part\n"
        );
    }

    #[test]
    fn all_ranks_shows_every_rank_and_single_runs_pass_through() {
        let (seen, out) = collect(RankView {
            all_ranks: true,
            prefix: true,
        });
        out.emit(2, GuestOutput::Stderr("oops\n".into()));
        out.emit(0, GuestOutput::Stdout("ok\n".into()));
        assert_eq!(
            seen.lock().unwrap().concat(),
            "[rank2]: oops\n[rank0]: ok\n"
        );

        let (seen, out) = collect(RankView {
            all_ranks: false,
            prefix: false,
        });
        out.emit(0, GuestOutput::Stdout("no newline".into()));
        assert_eq!(seen.lock().unwrap().concat(), "no newline");
    }
}
