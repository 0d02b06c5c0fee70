//! The MPI transport of a world that spans processes (feature `mpi`): one MPI process per
//! neuronlab process, as `mpirun -n P` starts them.
//!
//! MPI is initialised with `MPI_THREAD_MULTIPLE`. Each process has one listener thread that
//! probes for messages from any source (sleeping a little while there are none), and one sender thread per other process that sends what the
//! ranks queue for it, in order. A rank never blocks in MPI: a send to a process that died
//! stays in its queue while the rank's collective times out by its own clock, naming the
//! missing ranks (MPI alone would hang in `MPI_Send`). A heartbeat every
//! [`HEARTBEAT`] tells each process which others still answer.
//!
//! MPI only moves bytes: reductions happen in neuronlab, in group order (see `peers`).

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mpi::environment::Universe;
use mpi::point_to_point::{Destination, Source};
use mpi::topology::Communicator;
use mpi::Threading;

use super::peers::{Message, Peers};

/// The tag of every neuronlab message.
const TAG: i32 = 0x6e6c;
/// The listener's first and longest sleep between probes while no message comes.
const IDLE_FIRST: Duration = Duration::from_micros(10);
const IDLE_MOST: Duration = Duration::from_micros(500);
/// How often a process tells the others it is alive.
const HEARTBEAT: Duration = Duration::from_millis(500);
/// Control messages of the transport itself, distinct from every [`Message`] encoding (whose
/// first byte is its kind, 0 to 2); an empty message from a process to itself stops its
/// listener.
const ALIVE: u8 = 0xfe;
const LEAVING: u8 = 0xff;

/// This process's place among the processes `mpirun` started.
pub struct MpiPeers {
    /// Shared with the threads, which [`MpiPeers::finish`] ends, so MPI is finalised by the
    /// thread that started it.
    universe: Arc<Universe>,
    processes: u32,
    process: u32,
    /// Per other process, the queue its sender thread sends from (`None` once closed).
    queues: Mutex<Vec<Option<Sender<Vec<u8>>>>>,
    /// The sender threads, each telling `flushed` when its queue is closed and sent.
    flushed: Mutex<Receiver<u32>>,
    heard: Arc<Heard>,
    listener: Mutex<Option<JoinHandle<()>>>,
    /// The heartbeat thread, and the sender whose drop stops it.
    heartbeat: Mutex<Option<(Sender<()>, JoinHandle<()>)>>,
    started: Instant,
}

/// What the listener has heard: when each process last spoke, how many have said they are
/// leaving, and whom to hand messages to (those that arrive first wait for a handler).
#[derive(Default)]
struct Heard {
    state: Mutex<HeardState>,
    changed: Condvar,
}

#[derive(Default)]
struct HeardState {
    last: Vec<Option<Instant>>,
    leaving: u32,
    deliver: Option<Arc<dyn Fn(u32, Message) + Send + Sync>>,
    waiting: Vec<(u32, Message)>,
}

impl Heard {
    fn lock(&self) -> MutexGuard<'_, HeardState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl MpiPeers {
    /// Initialises MPI when this process was started by an MPI launcher (`mpirun` sets
    /// `OMPI_COMM_WORLD_SIZE`, `PMI_SIZE` or `PMIX_RANK`); `None` otherwise, so a plain run
    /// never touches MPI.
    pub fn from_launcher() -> Result<Option<Arc<MpiPeers>>, String> {
        let launched = ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"]
            .iter()
            .any(|v| std::env::var_os(v).is_some());
        if !launched {
            return Ok(None);
        }
        let (universe, threading) = mpi::initialize_with_threading(Threading::Multiple)
            .ok_or("MPI was initialised already")?;
        if threading != Threading::Multiple {
            return Err(format!(
                "this MPI library gives threading level {threading:?}, and neuronlab's ranks \
                 need MPI_THREAD_MULTIPLE; use an MPI built with it (Debian's OpenMPI is)"
            ));
        }
        let universe = Arc::new(universe);
        let world = universe.world();
        let (processes, process) = (world.size() as u32, world.rank() as u32);
        let (flushed_tx, flushed) = mpsc::channel();
        let mut queues = Vec::new();
        for to in 0..processes {
            if to == process {
                queues.push(None);
                continue;
            }
            let (tx, rx) = mpsc::channel::<Vec<u8>>();
            let (universe, flushed_tx) = (universe.clone(), flushed_tx.clone());
            std::thread::Builder::new()
                .name(format!("neuronlab-mpi-to{to}"))
                .spawn(move || {
                    let world = universe.world();
                    for bytes in rx {
                        world
                            .process_at_rank(to as i32)
                            .send_with_tag(&bytes[..], TAG);
                    }
                    let _ = flushed_tx.send(to);
                })
                .map_err(|e| format!("cannot start a sender thread: {e}"))?;
            queues.push(Some(tx));
        }
        let heard = Arc::new(Heard::default());
        heard.lock().last = vec![None; processes as usize];
        let peers = Arc::new(MpiPeers {
            universe,
            processes,
            process,
            queues: Mutex::new(queues),
            flushed: Mutex::new(flushed),
            heard,
            listener: Mutex::new(None),
            heartbeat: Mutex::new(None),
            started: Instant::now(),
        });
        peers.start_listener()?;
        let beating = Arc::downgrade(&peers);
        let (stop, stopped) = mpsc::channel::<()>();
        let heartbeat = std::thread::Builder::new()
            .name("neuronlab-mpi-heartbeat".into())
            .spawn(move || loop {
                match beating.upgrade() {
                    Some(peers) if peers.queue_to_all(&[ALIVE]) => drop(peers),
                    _ => return,
                }
                if stopped.recv_timeout(HEARTBEAT) != Err(mpsc::RecvTimeoutError::Timeout) {
                    return;
                }
            })
            .map_err(|e| format!("cannot start the heartbeat thread: {e}"))?;
        *peers.heartbeat.lock().unwrap_or_else(|e| e.into_inner()) = Some((stop, heartbeat));
        Ok(Some(peers))
    }

    fn start_listener(&self) -> Result<(), String> {
        let (universe, heard, me) = (self.universe.clone(), self.heard.clone(), self.process);
        let listener = std::thread::Builder::new()
            .name("neuronlab-mpi-listener".into())
            .spawn(move || {
                let world = universe.world();
                let mut idle = IDLE_FIRST;
                loop {
                    // OpenMPI's blocking receive spins on a core for as long as it waits, which
                    // would take a core from the ranks; so it probes, and sleeps longer while
                    // nothing comes.
                    let Some(status) = world.any_process().immediate_probe_with_tag(TAG) else {
                        std::thread::sleep(idle);
                        idle = (idle * 2).min(IDLE_MOST);
                        continue;
                    };
                    idle = IDLE_FIRST;
                    let from = status.source_rank() as u32;
                    let (bytes, _) = world
                        .process_at_rank(from as i32)
                        .receive_vec_with_tag::<u8>(TAG);
                    if bytes.is_empty() && from == me {
                        return;
                    }
                    let mut state = heard.lock();
                    if let Some(last) = state.last.get_mut(from as usize) {
                        *last = Some(Instant::now());
                    }
                    match bytes.as_slice() {
                        [ALIVE] => continue,
                        [LEAVING] => {
                            state.leaving += 1;
                            heard.changed.notify_all();
                            continue;
                        }
                        _ => {}
                    }
                    let message = match Message::decode(&bytes) {
                        Ok(m) => m,
                        Err(e) => {
                            eprintln!(
                                "neuronlab: dropped a malformed message from process {from}: {e}"
                            );
                            continue;
                        }
                    };
                    match state.deliver.clone() {
                        Some(deliver) => {
                            drop(state);
                            deliver(from, message);
                        }
                        None => state.waiting.push((from, message)),
                    }
                }
            })
            .map_err(|e| format!("cannot start the MPI listener: {e}"))?;
        *self.listener.lock().unwrap_or_else(|e| e.into_inner()) = Some(listener);
        Ok(())
    }

    /// Queues `bytes` for every other process; false once the queues are closed.
    fn queue_to_all(&self, bytes: &[u8]) -> bool {
        let queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        let mut open = false;
        for queue in queues.iter().flatten() {
            open |= queue.send(bytes.to_vec()).is_ok();
        }
        open
    }

    /// Ends this process's part: sends what is queued and a last message saying it leaves,
    /// then waits (up to `deadline`) until every other process has said the same, and stops
    /// the threads. True when all went so; false when some process did not answer in time
    /// (it died, or hangs): then MPI cannot shut down cleanly, and the caller should exit at
    /// once rather than finalise it.
    pub fn finish(&self, deadline: Duration) -> bool {
        let until = Instant::now() + deadline;
        let heartbeat = self
            .heartbeat
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some((stop, thread)) = heartbeat {
            drop(stop);
            let _ = thread.join();
        }
        let senders = {
            let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
            let open: Vec<Sender<Vec<u8>>> = queues.iter_mut().filter_map(Option::take).collect();
            open.iter().for_each(|q| drop(q.send(vec![LEAVING])));
            open.len()
        };
        let flushed = self.flushed.lock().unwrap_or_else(|e| e.into_inner());
        for _ in 0..senders {
            let left = until.saturating_duration_since(Instant::now());
            if flushed.recv_timeout(left).is_err() {
                return false;
            }
        }
        let mut state = self.heard.lock();
        while state.leaving < self.processes - 1 {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = self
                .heard
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        drop(state);
        // Everyone has sent their last message; an empty one to itself stops the listener.
        self.universe
            .world()
            .process_at_rank(self.process as i32)
            .send_with_tag(&[] as &[u8], TAG);
        let listener = self
            .listener
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(listener) = listener {
            let _ = listener.join();
        }
        true
    }
}

impl MpiPeers {
    /// The MPI world communicator, for a program that also calls MPI itself (the all_reduce
    /// benchmark compares against `MPI_Allreduce`).
    pub fn world(&self) -> mpi::topology::SimpleCommunicator {
        self.universe.world()
    }

    /// Ends every process of the launch with `code` (`MPI_Abort`): what a process does after
    /// reporting that another stopped answering, since mpirun may otherwise (as with
    /// `--enable-recovery`) end with status 0.
    pub fn abort(&self, code: i32) -> ! {
        self.universe.world().abort(code)
    }
}

impl Peers for MpiPeers {
    fn processes(&self) -> u32 {
        self.processes
    }

    fn process(&self) -> u32 {
        self.process
    }

    fn send(&self, to: u32, bytes: Vec<u8>) -> Result<(), String> {
        let queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        match queues.get(to as usize) {
            Some(Some(queue)) => queue
                .send(bytes)
                .map_err(|_| format!("the sender to process {to} has stopped")),
            Some(None) => Err(format!(
                "no queue to process {to}: it is this one, or closed"
            )),
            None => Err(format!("no process {to} among {}", self.processes)),
        }
    }

    fn listen(&self, deliver: Arc<dyn Fn(u32, Message) + Send + Sync>) {
        // Under the lock, so the listener hands over nothing newer before these.
        let mut state = self.heard.lock();
        for (from, message) in std::mem::take(&mut state.waiting) {
            deliver(from, message);
        }
        state.deliver = Some(deliver);
    }

    fn silent_for(&self, process: u32) -> Option<Duration> {
        let state = self.heard.lock();
        let last = state.last.get(process as usize).copied().flatten();
        // A process not heard from yet is as silent as the time since this one started.
        Some(last.map_or_else(|| self.started.elapsed(), |at| at.elapsed()))
    }
}
