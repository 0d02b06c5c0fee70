//! The MPI transport of a world that spans processes (feature `mpi`): one MPI process per
//! neuronlab process, as `mpirun -n P` starts them.
//!
//! MPI is initialised with `MPI_THREAD_MULTIPLE`. Messages come in through the [`Inbox`]: a
//! rank waiting in a collective for other processes probes it itself ([`Peers::poll`]), so
//! an arrival reaches it with no thread in between, and a listener thread probes it the rest
//! of the time (sleeping a little while nothing comes). Messages go out from the sending
//! thread itself, in program order, so each thread's messages keep their order: small ones
//! with `MPI_Send`, which MPI completes at once (up to its eager limit, which this transport
//! raises: [`EAGER_LIMIT`]), larger ones with `MPI_Isend`, handed to the completer thread of
//! their destination, which frees the buffer when MPI is done with it. A rank never blocks
//! in MPI: a send to a process that died stays with the completer while the rank's
//! collective times out by its own clock, naming the missing ranks (MPI alone would hang in
//! `MPI_Send`). A heartbeat every [`HEARTBEAT`] tells each process which others still
//! answer.
//!
//! An input of [`ELEMENTS_APART_MIN`] bytes or more travels as two messages: the arrival's
//! head, then its elements, sent from the tensor's own memory and received straight into
//! the buffer of the tensor they become (no copy into or out of a message).
//!
//! MPI only moves bytes: reductions happen in neuronlab, in group order (see `peers`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mpi::environment::Universe;
use mpi::point_to_point::{Destination, MatchedReceiveVec, Source};
use mpi::request::{Request, StaticScope};
use mpi::topology::Communicator;
use mpi::Threading;

use super::peers::{Message, Outgoing, Peers, WireElements};
use mpi::datatype::Equivalence;
use mpi::raw::{AsRaw, AsRawMut};
use neuronlab_core::tensor::Buffer;
use neuronlab_core::DType;

/// The tag of a whole neuronlab message.
const TAG: i32 = 0x6e6c;
/// The tag of a message's head whose input elements follow apart, as the same sender's next
/// message ([`TAG_ELEMENTS`]); the sender holds its sending lock across the two, so nothing
/// of its process comes between them.
const TAG_HEAD: i32 = TAG + 1;
/// The tag of input elements sent apart from their head, straight from the tensor's memory
/// and received straight into the buffer of the tensor they become.
const TAG_ELEMENTS: i32 = TAG + 2;
/// The smallest elements sent apart from their head: below it, the copies into and out of
/// one message cost less than a second message (at 16 KiB, apart was the slower, 0.9-1.1
/// against 0.9-2.1 GB/s between two processes).
const ELEMENTS_APART_MIN: usize = 64 << 10;
/// The listener's first and longest sleep between probes while no message comes.
const IDLE_FIRST: Duration = Duration::from_micros(10);
const IDLE_MOST: Duration = Duration::from_micros(500);
/// How often a process tells the others it is alive.
const HEARTBEAT: Duration = Duration::from_millis(500);
/// The eager limit this transport asks of OpenMPI's transports unless the user set one:
/// room for a 64 KiB tensor and its message's header. OpenMPI's defaults are 4 KiB on
/// shared memory and 64 KiB over TCP, header included; a larger message takes MPI's
/// rendezvous, whose handshake costs this transport more than the copy saved (between two
/// processes on one host, 4 KiB went from 0.09-0.16 to 0.47-0.53 GB/s).
const EAGER_LIMIT: usize = 68 << 10;
/// What MPI's eager limit leaves for a message: the limit counts MPI's own header.
const EAGER_HEADROOM: usize = 96;
/// The eager limit assumed of an MPI other than OpenMPI, whose limits this does not set: a
/// message this small goes eagerly on every common transport.
const OTHER_MPI_EAGER_LIMIT: usize = 4096;
/// The MCA parameters, as environment variables, that set an eager limit, each with the
/// one for its transport's largest fragment when that must grow with it: shared memory in
/// OpenMPI 4 (`vader`; OpenMPI 5 renamed it `sm` and keeps `vader` only as an alias, so
/// only one of the two names is set), and TCP.
const EAGER_LIMIT_VARS_OMPI4: [(&str, Option<&str>); 2] = [
    (
        "OMPI_MCA_btl_vader_eager_limit",
        Some("OMPI_MCA_btl_vader_max_send_size"),
    ),
    ("OMPI_MCA_btl_tcp_eager_limit", None),
];
const EAGER_LIMIT_VARS_OMPI5: [(&str, Option<&str>); 2] = [
    (
        "OMPI_MCA_btl_sm_eager_limit",
        Some("OMPI_MCA_btl_sm_max_send_size"),
    ),
    ("OMPI_MCA_btl_tcp_eager_limit", None),
];
/// Control messages of the transport itself, distinct from every [`Message`] encoding (whose
/// first byte is its kind, 0 to 2).
const ALIVE: u8 = 0xfe;
const LEAVING: u8 = 0xff;

/// This process's place among the processes `mpirun` started.
pub struct MpiPeers {
    /// Shared with the threads, which [`MpiPeers::finish`] ends, so MPI is finalised by the
    /// thread that started it.
    universe: Arc<Universe>,
    processes: u32,
    process: u32,
    /// The largest message sent with a blocking `MPI_Send`: one MPI sends eagerly (copied
    /// out without waiting for the receiver), so the send returns even when the receiver is
    /// gone, and sooner than a non-blocking send reports being complete.
    eager_max: usize,
    /// Per other process, the queue of its completer thread (`None` once closed).
    queues: Mutex<Vec<Option<Sender<InFlight>>>>,
    /// The completer threads, each telling `flushed` when its queue is closed and every
    /// send in it complete.
    flushed: Mutex<Receiver<u32>>,
    /// Held while a thread starts a send. OpenMPI's send path spins on its own locks, and
    /// with more threads than cores a thread that holds one may be descheduled: the others
    /// then sleep here instead of spinning out their time slices.
    sending: Mutex<()>,
    inbox: Arc<Inbox>,
    listener: Mutex<Option<JoinHandle<()>>>,
    /// The heartbeat thread, and the sender whose drop stops it.
    heartbeat: Mutex<Option<(Sender<()>, JoinHandle<()>)>>,
    started: Instant,
}

/// What has come in: when each process last spoke, how many have said they are
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

/// What a send reads: a message's bytes, or a collective's input elements.
enum Body {
    Bytes(Box<[u8]>),
    Elements(Arc<WireElements>),
}

impl Body {
    fn bytes(&self) -> &[u8] {
        match self {
            Body::Bytes(b) => b,
            Body::Elements(e) => e.bytes(),
        }
    }
}

/// A send under way: MPI reads `body` until `request` completes.
struct InFlight {
    request: Request<'static, [u8]>,
    /// Dropped only once the request is complete.
    body: Body,
}

// SAFETY: under MPI_THREAD_MULTIPLE any thread may complete a request, and the body is
// owned by the `InFlight` alone (the elements' tensor is shared, but nothing writes a
// storage once made).
unsafe impl Send for InFlight {}

impl InFlight {
    /// Starts sending `body` to process `to` with `tag`.
    fn start(universe: &Universe, to: u32, body: Body, tag: i32) -> InFlight {
        // SAFETY: the bytes live on the heap, where moving `body` does not move them, and stay
        // unchanged until the request is complete (`try_finish` drops `body` only then),
        // which is all MPI needs of them.
        let buffer: &'static [u8] = unsafe { &*(body.bytes() as *const [u8]) };
        let request = universe
            .world()
            .process_at_rank(to as i32)
            .immediate_send_with_tag(StaticScope, buffer, tag);
        InFlight { request, body }
    }

    /// Completes the send if MPI is done with it (freeing the body), or gives it back.
    fn try_finish(self) -> Result<(), InFlight> {
        let InFlight { request, body } = self;
        match request.test() {
            Ok(_) => {
                drop(body);
                Ok(())
            }
            Err(request) => Err(InFlight { request, body }),
        }
    }

    /// Completes the send, looking less often while it is not done: a blocking
    /// `MPI_Wait` would spin a core.
    fn finish_with_sleeps(mut self) {
        let mut idle = IDLE_FIRST;
        while let Err(pending) = self.try_finish() {
            self = pending;
            std::thread::sleep(idle);
            idle = (idle * 2).min(IDLE_MOST);
        }
    }
}

/// Receives the elements `head` awaits straight into a buffer of their dtype, and makes the
/// arrival of the two.
fn receive_elements(
    mut message: mpi::point_to_point::Message,
    status: mpi::point_to_point::Status,
    head: AwaitingElements,
) -> Result<Message, String> {
    let count = status.count(u8::equivalent_datatype());
    let len = head.bytes / head.dtype.size();
    // The slice `receive` is given holds exactly `count` bytes: whole elements, as many as
    // the message holds.
    if usize::try_from(count) == Ok(head.bytes) && len * head.dtype.size() == head.bytes {
        let receive = |bytes: &mut [std::mem::MaybeUninit<u8>]| {
            // SAFETY: MPI writes the message's `count` bytes (the slice's length, checked
            // above) into the slice and sets the matched message to null, as `Message`'s drop
            // expects; the status is not wanted. A failure ends the process (MPI's default
            // error handler), so its code needs no check.
            unsafe {
                mpi::ffi::MPI_Mrecv(
                    bytes.as_mut_ptr().cast(),
                    count,
                    u8::equivalent_datatype().as_raw(),
                    message.as_raw_mut(),
                    mpi::ffi::RSMPI_STATUS_IGNORE,
                )
            };
        };
        // SAFETY: `receive` writes every byte of the slice (above).
        if let Some(buffer) = unsafe { Buffer::from_le_bytes_written(head.dtype, len, receive) } {
            return Message::decode_parts(&head.head, Some(buffer));
        }
    }
    // Not written into a buffer (a size the head did not announce, or bool elements): taken
    // all the same, so the sender's next message is next.
    let _ = (message, status).matched_receive_vec::<u8>();
    Err(format!(
        "{count} bytes of elements where the head said {} of {}",
        head.bytes, head.dtype
    ))
}

/// A head taken whose elements, the same sender's next message, have not come yet.
struct AwaitingElements {
    head: Vec<u8>,
    dtype: DType,
    bytes: usize,
}

/// Where messages come in. One thread at a time takes them (`taking`), so each sender's
/// messages are handed over in the order they were sent, whichever thread takes them;
/// `taking` also holds, per sender, a head whose elements are still to come.
struct Inbox {
    universe: Arc<Universe>,
    heard: Heard,
    taking: Mutex<Vec<Option<AwaitingElements>>>,
    /// Set by [`MpiPeers::finish`] once every process has said it leaves.
    closed: AtomicBool,
}

impl Inbox {
    /// Takes one message, if one has come and no other thread is taking one, and hands it
    /// over; true when it took one.
    fn take(&self) -> bool {
        let mut awaiting = match self.taking.try_lock() {
            Ok(turn) => turn,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => return false,
        };
        let world = self.universe.world();
        let Some((message, status)) = world.any_process().immediate_matched_probe() else {
            return false;
        };
        let from = status.source_rank() as u32;
        let expected = awaiting.get_mut(from as usize).and_then(Option::take);
        let tag = status.tag();
        // Received into fresh memory: zeroing it first would be one more pass over it.
        let receive = |message, status| (message, status).matched_receive_vec::<u8>().0;
        let decoded = match expected {
            Some(head) if tag == TAG_ELEMENTS => receive_elements(message, status, head),
            Some(_) => {
                receive(message, status);
                Err(format!(
                    "a message with tag {tag} where the elements of the last one were due"
                ))
            }
            None => {
                let bytes = receive(message, status);
                match tag {
                    TAG_HEAD => match Message::elements_after(&bytes) {
                        Ok(Some((dtype, bytes_due))) => {
                            awaiting[from as usize] = Some(AwaitingElements {
                                head: bytes,
                                dtype,
                                bytes: bytes_due,
                            });
                            drop(self.heard_from(from));
                            return true;
                        }
                        Ok(None) => Err("a head without elements to follow".into()),
                        Err(e) => Err(e),
                    },
                    TAG => match bytes.as_slice() {
                        [ALIVE] => {
                            drop(self.heard_from(from));
                            return true;
                        }
                        [LEAVING] => {
                            let mut state = self.heard_from(from);
                            state.leaving += 1;
                            self.heard.changed.notify_all();
                            return true;
                        }
                        _ => Message::decode(&bytes),
                    },
                    tag => Err(format!("a message with the unknown tag {tag}")),
                }
            }
        };
        // `awaiting` is held until the message is handed over, which keeps each sender's
        // messages in order.
        let message = match decoded {
            Ok(m) => m,
            Err(e) => {
                drop(self.heard_from(from));
                eprintln!("neuronlab: dropped a malformed message from process {from}: {e}");
                return true;
            }
        };
        let mut state = self.heard_from(from);
        match state.deliver.clone() {
            Some(deliver) => {
                drop(state);
                deliver(from, message);
            }
            None => state.waiting.push((from, message)),
        }
        true
    }

    /// Records that `from` spoke just now; returns the state, locked.
    fn heard_from(&self, from: u32) -> MutexGuard<'_, HeardState> {
        let mut state = self.heard.lock();
        if let Some(last) = state.last.get_mut(from as usize) {
            *last = Some(Instant::now());
        }
        state
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
        let eager_max = eager_limit().saturating_sub(EAGER_HEADROOM);
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
            let (tx, rx) = mpsc::channel::<InFlight>();
            let flushed_tx = flushed_tx.clone();
            std::thread::Builder::new()
                .name(format!("neuronlab-mpi-to{to}"))
                .spawn(move || {
                    for send in rx {
                        send.finish_with_sleeps();
                    }
                    let _ = flushed_tx.send(to);
                })
                .map_err(|e| format!("cannot start a completer thread: {e}"))?;
            queues.push(Some(tx));
        }
        let inbox = Arc::new(Inbox {
            universe: universe.clone(),
            heard: Heard::default(),
            taking: Mutex::new((0..processes).map(|_| None).collect()),
            closed: AtomicBool::new(false),
        });
        inbox.heard.lock().last = vec![None; processes as usize];
        let peers = Arc::new(MpiPeers {
            universe,
            processes,
            process,
            eager_max,
            queues: Mutex::new(queues),
            flushed: Mutex::new(flushed),
            sending: Mutex::new(()),
            inbox,
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
                    Some(peers) if peers.send_to_all(&[ALIVE]) => drop(peers),
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
        let inbox = self.inbox.clone();
        let listener = std::thread::Builder::new()
            .name("neuronlab-mpi-listener".into())
            .spawn(move || {
                let mut idle = IDLE_FIRST;
                while !inbox.closed.load(Ordering::Acquire) {
                    // OpenMPI's blocking receive spins on a core for as long as it waits, which
                    // would take a core from the ranks; so it probes, and sleeps longer while
                    // nothing comes.
                    if inbox.take() {
                        idle = IDLE_FIRST;
                    } else {
                        std::thread::sleep(idle);
                        idle = (idle * 2).min(IDLE_MOST);
                    }
                }
            })
            .map_err(|e| format!("cannot start the MPI listener: {e}"))?;
        *self.listener.lock().unwrap_or_else(|e| e.into_inner()) = Some(listener);
        Ok(())
    }

    /// Sends `bytes` to process `to`, or starts to: a send MPI has not completed at once goes
    /// to the destination's completer thread.
    fn send_now(&self, to: u32, bytes: Vec<u8>) -> Result<(), String> {
        self.send_body(to, None, Body::Bytes(bytes.into_boxed_slice()))
    }

    /// Sends `body` to process `to` (after `head`, when its elements go apart), or starts to.
    fn send_body(&self, to: u32, head: Option<&[u8]>, body: Body) -> Result<(), String> {
        // Only a send that may not complete at once needs the destination's completer.
        let completer = match self
            .queues
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(to as usize)
        {
            Some(Some(queue)) => (body.bytes().len() > self.eager_max).then(|| queue.clone()),
            Some(None) => {
                return Err(format!(
                    "no queue to process {to}: it is this one, or closed"
                ))
            }
            None => return Err(format!("no process {to} among {}", self.processes)),
        };
        let tag = match head {
            Some(_) => TAG_ELEMENTS,
            None => TAG,
        };
        let sending = self.sending.lock().unwrap_or_else(|e| e.into_inner());
        let world = self.universe.world();
        let process = world.process_at_rank(to as i32);
        if let Some(head) = head {
            // A head is small: MPI sends it eagerly.
            process.send_with_tag(head, TAG_HEAD);
        }
        let Some(completer) = completer else {
            process.send_with_tag(body.bytes(), tag);
            return Ok(());
        };
        let started = InFlight::start(&self.universe, to, body, tag).try_finish();
        drop(sending);
        let Err(pending) = started else {
            return Ok(());
        };
        completer.send(pending).map_err(|mpsc::SendError(pending)| {
            pending.finish_with_sleeps();
            format!("the completer of sends to process {to} has stopped")
        })
    }

    /// Sends `bytes` to every other process; false once the queues are closed.
    fn send_to_all(&self, bytes: &[u8]) -> bool {
        let mut open = false;
        for to in (0..self.processes).filter(|&p| p != self.process) {
            open |= self.send_now(to, bytes.to_vec()).is_ok();
        }
        open
    }

    /// Ends this process's part: sends a last message saying it leaves, completes every send,
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
        // After everything this process sent before: its ranks are done.
        self.send_to_all(&[LEAVING]);
        let senders = {
            let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
            queues.iter_mut().filter_map(Option::take).count()
        };
        let flushed = self.flushed.lock().unwrap_or_else(|e| e.into_inner());
        for _ in 0..senders {
            let left = until.saturating_duration_since(Instant::now());
            if flushed.recv_timeout(left).is_err() {
                return false;
            }
        }
        let heard = &self.inbox.heard;
        let mut state = heard.lock();
        while state.leaving < self.processes - 1 {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = heard
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        drop(state);
        // Every process has sent its last message to this one.
        self.inbox.closed.store(true, Ordering::Release);
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

/// The smallest eager limit MPI will use. For OpenMPI: the user's where an MCA variable
/// sets one, otherwise [`EAGER_LIMIT`], which this sets for MPI to read at its start (MPI
/// tells its version before it starts).
fn eager_limit() -> usize {
    let version = mpi::environment::library_version().unwrap_or_default();
    let major = version
        .strip_prefix("Open MPI v")
        .map(|v| v.split('.').next().and_then(|m| m.parse::<u32>().ok()));
    let vars = match major {
        Some(Some(major)) if major <= 4 => EAGER_LIMIT_VARS_OMPI4,
        Some(_) => EAGER_LIMIT_VARS_OMPI5,
        None => return OTHER_MPI_EAGER_LIMIT,
    };
    let mut smallest = usize::MAX;
    for (var, fragment_var) in vars {
        if let Some(limit) = std::env::var(var)
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
        {
            smallest = smallest.min(limit);
            continue;
        }
        // Before MPI starts, while no other thread reads the environment.
        std::env::set_var(var, EAGER_LIMIT.to_string());
        if let Some(fragment_var) = fragment_var.filter(|v| std::env::var_os(v).is_none()) {
            std::env::set_var(fragment_var, EAGER_LIMIT.to_string());
        }
        smallest = smallest.min(EAGER_LIMIT);
    }
    smallest
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
        self.send_now(to, bytes)
    }

    fn send_outgoing(&self, to: u32, message: Outgoing) -> Result<(), String> {
        match &message.elements {
            Some(elements) if message.elements_len() >= ELEMENTS_APART_MIN => {
                let elements = Body::Elements(elements.clone());
                self.send_body(to, Some(&message.head), elements)
            }
            _ => self.send_now(to, message.into_bytes()),
        }
    }

    fn listen(&self, deliver: Arc<dyn Fn(u32, Message) + Send + Sync>) {
        // Under the lock, so the listener hands over nothing newer before these.
        let mut state = self.inbox.heard.lock();
        for (from, message) in std::mem::take(&mut state.waiting) {
            deliver(from, message);
        }
        state.deliver = Some(deliver);
    }

    fn poll(&self) -> bool {
        self.inbox.take()
    }

    fn silent_for(&self, process: u32) -> Option<Duration> {
        let state = self.inbox.heard.lock();
        let last = state.last.get(process as usize).copied().flatten();
        // A process not heard from yet is as silent as the time since this one started.
        Some(last.map_or_else(|| self.started.elapsed(), |at| at.elapsed()))
    }
}
