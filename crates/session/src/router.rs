//! What reaches the running cell's front end from other threads: the output of its guests
//! (which run on threads of their own) and `NEURONLAB_LOGS` lines (published on whichever
//! thread ran the op). Lines that arrive while no cell streams wait for the next flush.

use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use neuronlab_core::activity::Activities;
use neuronlab_core::events::EventBus;
use neuronlab_core::Runtime;
use neuronlab_sandbox::{GuestOutput, OutputSink};

use super::convert::OutputConverter;
use super::output::{Progress, BYTES};
use super::Output;

/// How long a run goes before it reports progress: most cells end well before.
const QUIET_FOR: Duration = Duration::from_secs(2);
/// How often a long run reports.
const REPORT_EVERY: Duration = Duration::from_secs(1);

/// The progress of a run while it streams: nothing for its first [`QUIET_FOR`], then a
/// report every [`REPORT_EVERY`] of how many events it has published so far (or of the bytes a
/// checkpoint read has got through), and a last, transient one when it ends (its output and
/// summary say the rest).
pub(super) struct RunWatch {
    what: String,
    started: Instant,
    last: Option<Instant>,
    bus: Arc<EventBus>,
    activities: Arc<Activities>,
    first_event: u64,
}

impl RunWatch {
    /// Watches the run `what` (`running cell [3]`) on `runtime`, whose events and host
    /// activities it reports.
    pub(super) fn new(what: String, runtime: &Runtime) -> RunWatch {
        RunWatch {
            what,
            started: Instant::now(),
            last: None,
            bus: runtime.bus().clone(),
            activities: runtime.activities().clone(),
            first_event: runtime.bus().next_seq(),
        }
    }

    /// The report due now, if any; at the end, the last one if any came before.
    fn report(&mut self, finished: bool) -> Option<Progress> {
        let elapsed = self.started.elapsed();
        let due = match (self.last, finished) {
            (None, true) => false,
            (Some(_), true) => true,
            (None, false) => elapsed >= QUIET_FOR,
            (Some(at), false) => at.elapsed() >= REPORT_EVERY,
        };
        if !due {
            return None;
        }
        self.last = Some(Instant::now());
        // Host work the guest waits on (a checkpoint read) says more than the event count,
        // which stands still meanwhile.
        let (what, done, total, unit) = match self.activities.current() {
            Some(a) if !finished => (
                format!("{}: {}", self.what, a.what),
                a.done,
                Some(a.total),
                BYTES,
            ),
            _ => (
                self.what.clone(),
                self.bus.next_seq() - self.first_event,
                None,
                "events",
            ),
        };
        Some(Progress {
            id: "neuronlab-run".to_string(),
            what,
            done,
            total,
            unit,
            elapsed,
            finished,
            transient: true,
        })
    }
}

/// One item on the way to the front end.
enum Routed {
    Guest(Box<GuestOutput>),
    Log(String),
}

/// Where the session's guests and its log filter send their output: the current cell's
/// channel while one streams.
#[derive(Clone, Default)]
pub(super) struct OutputRouter(Arc<Mutex<RouterState>>);

#[derive(Default)]
struct RouterState {
    tx: Option<mpsc::Sender<Routed>>,
    /// Log lines that came while nothing streamed.
    pending: Vec<String>,
}

impl OutputRouter {
    fn state(&self) -> std::sync::MutexGuard<'_, RouterState> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A sink for a new guest instance.
    pub(super) fn sink(&self) -> OutputSink {
        let router = self.clone();
        Box::new(move |o| {
            if let Some(tx) = &router.state().tx {
                let _ = tx.send(Routed::Guest(Box::new(o)));
            }
        })
    }

    /// A `NEURONLAB_LOGS` line: to the streaming cell, else kept for [`OutputRouter::flush_logs`].
    pub(super) fn log(&self, line: String) {
        let mut state = self.state();
        let unsent = match &state.tx {
            Some(tx) => tx.send(Routed::Log(line)).err().map(|e| match e.0 {
                Routed::Log(line) => line,
                Routed::Guest(_) => unreachable!("a log line was sent"),
            }),
            None => Some(line),
        };
        state.pending.extend(unsent);
    }

    /// Passes the log lines that came while nothing streamed to `out`, as stderr.
    pub(super) fn flush_logs(&self, out: &mut dyn FnMut(Output)) {
        let pending = std::mem::take(&mut self.state().pending);
        for line in pending {
            out(Output::Stderr(format!("{line}\n")));
        }
    }

    /// Runs `call` on its own thread while this thread passes its output, the log lines
    /// published meanwhile and the reports of `watch` to `out`.
    pub(super) fn stream<R: Send>(
        &self,
        converter: &mut OutputConverter,
        out: &mut dyn FnMut(Output),
        watch: &mut RunWatch,
        call: impl FnOnce() -> R + Send,
    ) -> R {
        self.flush_logs(out);
        let (tx, rx) = mpsc::channel();
        self.state().tx = Some(tx);
        let result = std::thread::scope(|s| {
            let worker = s.spawn(|| {
                let r = call();
                // Closing the channel ends the loop below once everything is delivered.
                self.state().tx = None;
                r
            });
            loop {
                match rx.recv_timeout(Duration::from_millis(100)) {
                    Ok(Routed::Guest(o)) => {
                        if let Some(o) = converter.convert(*o) {
                            out(o);
                        }
                    }
                    Ok(Routed::Log(line)) => out(Output::Stderr(format!("{line}\n"))),
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
                if let Some(report) = watch.report(false) {
                    out(Output::Progress(report));
                }
            }
            if let Some(report) = watch.report(true) {
                out(Output::Progress(report));
            }
            worker.join()
        });
        match result {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use neuronlab_core::device::topology::Topology;
    use neuronlab_core::runtime::RuntimeOptions;

    #[test]
    fn a_checkpoint_read_reports_its_bytes_in_place_of_events() {
        let runtime = Runtime::new(RuntimeOptions {
            topology: Topology::preset("trn2.3xlarge", None).unwrap(),
            host_limit: 1 << 30,
        });
        let mut watch = RunWatch::new("running cell [3]".into(), &runtime);
        watch.started -= QUIET_FOR;
        let load = runtime.activities().begin("loading `model`", 3 << 30);
        load.advance(1 << 30);
        let report = watch.report(false).expect("due after the quiet time");
        assert_eq!(
            report.text(),
            "running cell [3]: loading `model`: 1.00 GiB of 3.00 GiB · 2 s"
        );
        assert_eq!(report.fraction(), Some(1.0 / 3.0));
        drop(load);
        watch.last = Some(Instant::now() - REPORT_EVERY);
        let report = watch.report(false).expect("due a second later");
        assert_eq!(report.text(), "running cell [3]: 0 events · 2 s");
    }
}
