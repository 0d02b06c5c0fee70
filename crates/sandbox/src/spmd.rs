//! The SPMD launcher: one guest module run as N ranks, as `torchrun --nproc_per_node N`.
//!
//! Each rank is its own instance of the module (its own memory, handles and output), on its
//! own thread and its own core (`neuron:<rank>`), started together; the ranks meet in
//! collectives through one [`World`]. Ops of every rank share the process's thread pool, unless
//! the process runs at least one rank per thread of the pool: then the ranks keep every core
//! busy themselves, and each runs its ops' kernels on its own thread (handing a rank's small
//! kernels to the shared pool would only add hand-offs and wake-ups). A rank waiting in a
//! collective sleeps.
//!
//! [`RankOutputs`] turns the ranks' output into what a user reads: lines prefixed with
//! `[rank3]: ` as torchrun prints them, by default only rank 0's, and with every rank shown,
//! what several ranks print alike once, as `[ranks 0-31]: `.

use std::collections::{HashMap, VecDeque};
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::Shared;
use crate::{
    GuestError, GuestErrorKind, GuestModule, GuestOutput, InterruptHandle, Limits, OutputSink,
    Sandbox,
};
use neuronlab_core::events::{EventBus, SummaryWindow};
use neuronlab_core::tensor::{format_tensor, FormatOptions};
use neuronlab_core::{Error, Runtime};
use neuronlab_dist::peers::{Message, Peers, Processes};
use neuronlab_dist::{RankComm, World, WorldOptions};

use crate::remote_ranks::{Finished, ForRankZero};

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
    /// The processes of a launch that spans several (`mpirun`), each running `nproc` ranks;
    /// `None` for one process.
    pub processes: Option<Processes>,
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

    /// Whether [`SpmdInterrupt::interrupt`] was called.
    fn requested(&self) -> bool {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .requested
    }
}

/// Runs `module` as `options.nproc` ranks on `runtime` and waits for all of them.
///
/// Every rank reads and writes the session variables in `shared` (the last write of a name
/// wins) and shares its compiled programs.
/// `output` receives each rank's output as it happens, tagged with the rank. Returns every
/// rank's result in rank order; fails before starting when the world cannot exist (more
/// ranks than cores).
///
/// With `options.processes`, this process runs its `nproc` ranks of the world of every
/// process; process 0 shows every rank's text output, returns every rank's result and
/// publishes every rank's events on its bus; the others return none (they sent theirs to
/// process 0).
pub fn launch(
    sandbox: &Sandbox,
    module: &GuestModule,
    runtime: Arc<Runtime>,
    shared: Shared,
    options: &SpmdOptions,
    output: Arc<dyn Fn(u32, GuestOutput) + Send + Sync>,
    interrupt: &SpmdInterrupt,
) -> Result<Vec<RankResult>, Error> {
    let (done_tx, done) = mpsc::channel();
    let bus = runtime.bus().clone();
    let first_event = bus.next_seq();
    // What a process other than 0 reports of its ranks' events, all of them.
    let counted = SummaryWindow::open(&bus);
    let (world, to_rank_zero) = match &options.processes {
        None => (
            World::new(runtime, options.nproc, options.world.clone())?,
            None,
        ),
        Some(Processes(peers)) => {
            let shown = output.clone();
            // Process 0 shows what the others' ranks print and collects their results.
            let launcher =
                Arc::new(
                    move |from: u32, bytes: Vec<u8>| match ForRankZero::decode(&bytes) {
                        Ok(ForRankZero::Output { rank, stderr, text }) => shown(
                            rank,
                            match stderr {
                                true => GuestOutput::Stderr(text),
                                false => GuestOutput::Stdout(text),
                            },
                        ),
                        Ok(ForRankZero::Done(finished)) => {
                            let _ = done_tx.send((from, *finished));
                        }
                        Err(e) => eprintln!("neuronlab: a bad message from process {from}: {e}"),
                    },
                );
            let world = World::across(
                runtime,
                options.nproc,
                peers.clone(),
                options.world.clone(),
                launcher,
            )?;
            let to_rank_zero = (peers.process() != 0).then(|| peers.clone());
            (world, to_rank_zero)
        }
    };
    let kernels_on_rank_threads = world.local_ranks().len() >= rayon::current_num_threads();
    let results: Vec<RankResult> = std::thread::scope(|scope| {
        let ranks: Vec<_> = world
            .local_ranks()
            .map(|rank| {
                let (world, output, shared) = (world.clone(), output.clone(), shared.clone());
                let sink: OutputSink = match to_rank_zero.clone() {
                    None => Box::new(move |o| output(rank, o)),
                    Some(peers) => Box::new(move |o| {
                        if let Some(m) = ForRankZero::output(rank, o) {
                            let _ = peers.send(0, Message::Launcher(m.encode()).encode());
                        }
                    }),
                };
                let spawned = std::thread::Builder::new()
                    .name(format!("neuronlab-rank{rank}"))
                    .spawn_scoped(scope, move || {
                        let _own_pool =
                            kernels_on_rank_threads.then(crate::guest::kernels_on_this_thread);
                        let comm = world.rank(rank);
                        let result =
                            run_rank(sandbox, module, comm, shared, options, sink, interrupt);
                        let how = match &result {
                            Ok(_) => "finished".to_string(),
                            Err(e) => format!("stopped with an error ({})", e.message),
                        };
                        world.depart(rank, how);
                        RankResult { rank, result }
                    });
                (rank, spawned)
            })
            .collect();
        ranks
            .into_iter()
            .map(|(rank, spawned)| match spawned.map(|h| h.join()) {
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
            })
            .collect()
    });
    let Some(Processes(peers)) = &options.processes else {
        return Ok(results);
    };
    if let Some(peers) = to_rank_zero {
        let finished = Finished {
            results: results.into_iter().map(|r| (r.rank, r.result)).collect(),
            events: bus.since(first_event),
            counted: counted.counted(),
            sent_at_us: bus.now_us(),
        };
        let bytes = Message::Launcher(ForRankZero::Done(Box::new(finished)).encode()).encode();
        peers
            .send(0, bytes)
            .map_err(|e| Error::Collective(format!("cannot report to process 0: {e}")))?;
        return Ok(Vec::new());
    }
    let mut all = results;
    gather(&mut all, &done, &**peers, &bus, options, interrupt);
    all.sort_by_key(|r| r.rank);
    Ok(all)
}

/// On process 0: adds to `all` what every other process reports through `done` (its
/// ranks' results; its events go onto `bus`), or, for a process silent for longer than the
/// collective timeout (it died), an error for each of its ranks. Once this process is
/// interrupted, it waits at most [`INTERRUPTED_PATIENCE`] more: mpirun interrupts the
/// survivors of a process that died and kills them soon after, and what they report must
/// reach the user first.
fn gather(
    all: &mut Vec<RankResult>,
    done: &mpsc::Receiver<(u32, Finished)>,
    peers: &dyn Peers,
    bus: &EventBus,
    options: &SpmdOptions,
    interrupt: &SpmdInterrupt,
) {
    let mut waiting: Vec<u32> = (1..peers.processes()).collect();
    let patience = options.world.timeout;
    let mut interrupted_at: Option<Instant> = None;
    while !waiting.is_empty() {
        if interrupt.requested() {
            let since = *interrupted_at.get_or_insert_with(Instant::now);
            if since.elapsed() >= INTERRUPTED_PATIENCE {
                for p in std::mem::take(&mut waiting) {
                    all.extend(unreported(p, options.nproc));
                }
                break;
            }
        }
        match done.recv_timeout(Duration::from_millis(100)) {
            Ok((from, theirs)) => {
                waiting.retain(|&p| p != from);
                // Their events join this process's, on this clock (the message's own
                // latency aside), so the trace covers every rank; and what they counted joins
                // the summaries, which would count only the events their recorder kept.
                let shift = bus.now_us() - theirs.sent_at_us;
                for e in theirs.events {
                    bus.replay_at(e.core, e.ts_us + shift, e.kind);
                }
                bus.count(&theirs.counted);
                all.extend(
                    theirs
                        .results
                        .into_iter()
                        .map(|(rank, result)| RankResult { rank, result }),
                );
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let (silent, answering) = waiting
                    .iter()
                    .partition(|&&p| peers.silent_for(p).is_some_and(|d| d > patience));
                for p in silent {
                    all.extend(lost(p, options.nproc, patience));
                }
                waiting = answering;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
}

/// How long process 0, once interrupted, still waits for the other processes' reports.
const INTERRUPTED_PATIENCE: Duration = Duration::from_millis(300);

/// The results of the ranks of process `p`, which had not reported when process 0 was
/// interrupted.
fn unreported(p: u32, per_process: u32) -> Vec<RankResult> {
    let ranks = p * per_process..(p + 1) * per_process;
    let message = format!(
        "process {p} (ranks {}-{}) had not reported when this launch was interrupted: it \
         died, or was still running",
        ranks.start,
        ranks.end - 1
    );
    ranks
        .map(|rank| RankResult {
            rank,
            result: Err(GuestError::new(
                GuestErrorKind::Interrupted,
                message.clone(),
            )),
        })
        .collect()
}

/// The results of the ranks of process `p`, which stopped answering.
fn lost(p: u32, per_process: u32, patience: Duration) -> Vec<RankResult> {
    let ranks = p * per_process..(p + 1) * per_process;
    let message = format!(
        "process {p} (ranks {}-{}) stopped answering for more than {:.1} s (the collective \
         timeout): it died, or mpirun stopped it",
        ranks.start,
        ranks.end - 1,
        patience.as_secs_f64()
    );
    ranks
        .map(|rank| RankResult {
            rank,
            result: Err(GuestError::new(GuestErrorKind::Host, message.clone())),
        })
        .collect()
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
    /// How many ranks run.
    pub ranks: u32,
    /// Show every rank, not only rank 0.
    pub all_ranks: bool,
    /// Prefix lines with `[rankN]: ` (for launches of more than one rank).
    pub prefix: bool,
}

/// How far one shown rank may run ahead of the slowest before its records go out without
/// waiting to be matched: a rank that prints much more than the others is not held back
/// to the end.
const MAX_AHEAD: usize = 64;

/// One thing a rank printed: a whole line, or a whole tensor's text.
#[derive(Clone, PartialEq, Eq)]
struct Record {
    stderr: bool,
    text: String,
}

/// Turns the tagged output of ranks into the stream a user reads: output of hidden ranks is
/// dropped; with prefixes, text is cut into lines, each prefixed with its rank, and tensors are
/// formatted as text so that their lines get prefixes too. Partial lines wait for their end
/// (or for [`RankOutputs::finish`]), so ranks' lines never interleave mid-line.
///
/// With every rank shown, the n-th records of the ranks go out together once each shown rank
/// has printed its n-th (or at the end), and ranks that printed the same record share one
/// `[ranks 0-3, 6]: ` prefix: 32 ranks printing the same tensor show it once.
pub struct RankOutputs {
    view: RankView,
    sink: Box<dyn Fn(GuestOutput) + Send + Sync>,
    state: Mutex<Pending>,
}

/// What waits to be shown: each rank's partial lines and its records not yet delivered.
#[derive(Default)]
struct Pending {
    partial: HashMap<(u32, bool), String>,
    records: Vec<VecDeque<Record>>,
}

impl RankOutputs {
    /// Output shown as `view` says, delivered to `sink`.
    pub fn new(view: RankView, sink: Box<dyn Fn(GuestOutput) + Send + Sync>) -> RankOutputs {
        let shown = if view.all_ranks { view.ranks.max(1) } else { 1 };
        RankOutputs {
            view,
            sink,
            state: Mutex::new(Pending {
                partial: HashMap::new(),
                records: vec![VecDeque::new(); shown as usize],
            }),
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
                self.push(
                    rank,
                    vec![Record {
                        stderr: false,
                        text,
                    }],
                );
            }
            rich => (self.sink)(rich),
        }
    }

    /// Delivers everything still waiting: partial lines as lines, and every record.
    pub fn finish(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut rest: Vec<_> = std::mem::take(&mut state.partial)
            .into_iter()
            .filter(|(_, t)| !t.is_empty())
            .collect();
        rest.sort_by_key(|((rank, stderr), _)| (*rank, *stderr));
        for ((rank, stderr), text) in rest {
            if let Some(queue) = state.records.get_mut(rank as usize) {
                queue.push_back(Record {
                    stderr,
                    text: text + "\n",
                });
            }
        }
        while state.records.iter().any(|q| !q.is_empty()) {
            self.deliver_row(&mut state);
        }
    }

    fn lines(&self, rank: u32, stderr: bool, text: &str) {
        let complete = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            let buffer = state.partial.entry((rank, stderr)).or_default();
            buffer.push_str(text);
            match buffer.rfind('\n') {
                Some(end) => {
                    let rest = buffer.split_off(end + 1);
                    std::mem::replace(buffer, rest)
                }
                None => return,
            }
        };
        let records = complete
            .lines()
            .map(|line| Record {
                stderr,
                text: format!("{line}\n"),
            })
            .collect();
        self.push(rank, records);
    }

    /// Queues `records` of `rank` and delivers every row that is complete (or overdue).
    fn push(&self, rank: u32, records: Vec<Record>) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(queue) = state.records.get_mut(rank as usize) else {
            return;
        };
        queue.extend(records);
        while state.records.iter().all(|q| !q.is_empty())
            || state.records.iter().any(|q| q.len() > MAX_AHEAD)
        {
            self.deliver_row(&mut state);
        }
    }

    /// Delivers the first record of every rank that has one, ranks printing the same record
    /// under one prefix, in the order of their lowest rank.
    fn deliver_row(&self, state: &mut Pending) {
        let mut groups: Vec<(Record, Vec<u32>)> = Vec::new();
        for (rank, queue) in state.records.iter_mut().enumerate() {
            let Some(record) = queue.pop_front() else {
                continue;
            };
            match groups.iter_mut().find(|(r, _)| *r == record) {
                Some((_, ranks)) => ranks.push(rank as u32),
                None => groups.push((record, vec![rank as u32])),
            }
        }
        for (record, ranks) in groups {
            let prefix = rank_label(&ranks);
            let text: String = record
                .text
                .lines()
                .map(|line| format!("{prefix}: {line}\n"))
                .collect();
            (self.sink)(match record.stderr {
                true => GuestOutput::Stderr(text),
                false => GuestOutput::Stdout(text),
            });
        }
    }
}

/// `[rank3]`, or `[ranks 0-3, 6]` for several (ascending ranks, runs as ranges).
fn rank_label(ranks: &[u32]) -> String {
    if let [rank] = ranks {
        return format!("[rank{rank}]");
    }
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for &rank in ranks {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == rank => *end = rank,
            _ => runs.push((rank, rank)),
        }
    }
    let runs: Vec<String> = runs
        .iter()
        .map(|&(a, b)| match a == b {
            true => a.to_string(),
            false => format!("{a}-{b}"),
        })
        .collect();
    format!("[ranks {}]", runs.join(", "))
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
            ranks: 2,
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
            ranks: 3,
            all_ranks: true,
            prefix: true,
        });
        out.emit(2, GuestOutput::Stderr("oops\n".into()));
        out.emit(0, GuestOutput::Stdout("ok\n".into()));
        assert!(seen.lock().unwrap().is_empty(), "rank 1 has not printed");
        out.emit(1, GuestOutput::Stdout("fine\n".into()));
        assert_eq!(
            seen.lock().unwrap().concat(),
            "[rank0]: ok\n[rank1]: fine\n[rank2]: oops\n"
        );

        let (seen, out) = collect(RankView {
            ranks: 1,
            all_ranks: false,
            prefix: false,
        });
        out.emit(0, GuestOutput::Stdout("no newline".into()));
        assert_eq!(seen.lock().unwrap().concat(), "no newline");
    }

    #[test]
    fn what_ranks_print_alike_shows_once_with_the_ranks_that_printed_it() {
        let (seen, out) = collect(RankView {
            ranks: 8,
            all_ranks: true,
            prefix: true,
        });
        for rank in 0..8 {
            out.emit(rank, GuestOutput::Stdout("loss 1.5\nstep done".into()));
            let own = if rank == 6 { "x = 2\n" } else { "x = 1\n" };
            out.emit(rank, GuestOutput::Stdout(own.into()));
        }
        out.emit(3, GuestOutput::Stdout("rank 3 only\n".into()));
        out.finish();
        assert_eq!(
            seen.lock().unwrap().concat(),
            "[ranks 0-7]: loss 1.5\n\
             [ranks 0-5, 7]: step donex = 1\n\
             [rank6]: step donex = 2\n\
             [rank3]: rank 3 only\n"
        );
    }

    #[test]
    fn a_rank_far_ahead_is_not_held_back_to_the_end() {
        let (seen, out) = collect(RankView {
            ranks: 2,
            all_ranks: true,
            prefix: true,
        });
        for i in 0..=MAX_AHEAD {
            out.emit(0, GuestOutput::Stdout(format!("line {i}\n")));
        }
        assert_eq!(seen.lock().unwrap().first().unwrap(), "[rank0]: line 0\n");
    }
}
