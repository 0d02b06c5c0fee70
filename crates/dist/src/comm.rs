//! The communicator: the ranks of one SPMD launch, each on its own thread, meeting in
//! collectives through shared memory.
//!
//! A [`World`] is shared by every rank; each rank drives it through its own [`RankComm`].
//!
//! **How ranks meet.** Every rank counts the collectives it has issued on each group (keyed by
//! the group's ranks). The `k`-th collective of a group on every rank is one *meeting*, keyed
//! by `(group, k)`, as NCCL matches calls by their order on a communicator. The first rank to
//! arrive opens the meeting; each rank leaves its input and its call (op, attributes, dtype,
//! shape) there; the last to arrive checks that the calls agree, computes every rank's result
//! once with [`super::combine`], and wakes the others. Each rank then takes its result onto
//! its own core (a copy, except for the last to take it, which moves it): that placement is
//! the data movement, accounted in the core's HBM.
//!
//! **Failure is shared.** A meeting fails for all its ranks at once: when the calls disagree,
//! when one rank's call is invalid, when the timeout passes before everyone arrived, when a
//! missing rank has ended (finished or trapped; reported at once, no timeout), or when a
//! waiting rank is interrupted. The failure stays recorded, so a rank that arrives late gets
//! the same error instead of waiting again.
//!
//! **Waiting hardly spins.** A waiting rank sleeps on its meeting's condition variable; it
//! wakes when the meeting completes, a rank ends, or every [`CANCEL_POLL`] to look at its
//! interrupt flag. Two exceptions are short, since waking a sleeping thread costs more
//! than a small collective. When the process has a core for each of its ranks, a rank with
//! a small input first watches its meeting for up to [`WATCH_FOR`]. And a rank that waits
//! only for ranks of other processes first takes their messages itself for up to
//! [`POLL_FOR`] more than its own message takes to cross ([`Peers::poll`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use super::combine::{chunk_sizes, concat, reduce_owning, split, ReduceOp};
use super::group::ProcessGroup;
use super::peers::{Message, Outgoing, Peers, WireTensor};
use super::ring_cost::{collective_cost, Collective};
use neuronlab_core::device::{CoreId, Role};
use neuronlab_core::error::{Error, Result};
use neuronlab_core::events::{CollectiveEvent, EventKind};
use neuronlab_core::tensor::{Buffer, Tensor};
use neuronlab_core::{DType, Runtime};

/// How long a rank waits in a collective for the others before it reports a deadlock.
pub const DEFAULT_COLLECTIVE_TIMEOUT: Duration = Duration::from_secs(5);

/// The environment variable that sets the collective timeout, in seconds.
pub const TIMEOUT_ENV: &str = "NEURONLAB_COLLECTIVE_TIMEOUT";

/// How often a waiting rank looks at its interrupt flag.
const CANCEL_POLL: Duration = Duration::from_millis(50);

/// How long a waiting rank watches its meeting before it sleeps, when the process has a
/// core for each of its ranks: waking a sleeping thread costs more than a small collective
/// (two ranks in one process on two cores: an all_reduce of 1 KiB took about 16 us, most of
/// it the wake-up). With more ranks than cores it sleeps at once, since a watching rank
/// would keep the one it waits for off its core.
const WATCH_FOR: Duration = Duration::from_micros(50);

/// The largest input a rank watches its meeting for: beyond it, combining the inputs takes
/// long enough that a watching rank only keeps the kernels' threads off a core (two ranks,
/// 256 KiB: 60-144 us a call watching, against 67-75 us sleeping).
const WATCH_MOST_BYTES: usize = 64 << 10;

/// How long a rank waiting only for other processes takes their messages itself before it
/// sleeps, beyond the time its own message takes to cross at [`POLL_RATE`]: a large message
/// must be polled for until it is in, since the listener's sleeps would add up to a
/// millisecond to it (1 MiB between two processes went from 0.6-0.8 to 1.5-2.8 GB/s).
const POLL_FOR: Duration = Duration::from_micros(500);

/// The rate, in bytes per second, a rank expects the other processes' messages of a
/// collective to arrive at, about the same size as its own: a slow rate for shared memory,
/// and 10 Gb Ethernet's.
const POLL_RATE: f64 = 1e9;

/// Settings of a [`World`].
#[derive(Clone, Debug)]
pub struct WorldOptions {
    /// How long a collective waits for missing ranks before it fails as a deadlock.
    pub timeout: Duration,
}

impl Default for WorldOptions {
    fn default() -> WorldOptions {
        WorldOptions {
            timeout: DEFAULT_COLLECTIVE_TIMEOUT,
        }
    }
}

impl WorldOptions {
    /// The defaults, with the timeout from `NEURONLAB_COLLECTIVE_TIMEOUT` (seconds) when set.
    pub fn from_env() -> Result<WorldOptions> {
        match std::env::var(TIMEOUT_ENV) {
            Ok(text) => Ok(WorldOptions {
                timeout: parse_timeout(&text)
                    .map_err(|e| Error::Invalid(format!("{TIMEOUT_ENV}: {e}")))?,
            }),
            Err(_) => Ok(WorldOptions::default()),
        }
    }
}

/// Parses a timeout in seconds (`"2.5"`), which must be positive and finite.
pub fn parse_timeout(text: &str) -> std::result::Result<Duration, String> {
    match text.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 && s < 1e9 => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!(
            "'{text}' is not a timeout: give a positive number of seconds, such as 5 or 0.5"
        )),
    }
}

/// One collective call as a rank made it: what must agree across the ranks of a meeting.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Call {
    AllReduce(ReduceOp),
    AllGather { dim: usize },
    ReduceScatter { op: ReduceOp, dim: usize },
    AllToAll { split_dim: usize, concat_dim: usize },
    Broadcast { src: u32 },
    Barrier,
}

impl Call {
    fn name(&self) -> &'static str {
        match self {
            Call::AllReduce(_) => "all_reduce",
            Call::AllGather { .. } => "all_gather",
            Call::ReduceScatter { .. } => "reduce_scatter",
            Call::AllToAll { .. } => "all_to_all",
            Call::Broadcast { .. } => "broadcast",
            Call::Barrier => "barrier",
        }
    }

    /// The op as the ring cost model knows it; a barrier is modeled as an empty all_reduce.
    fn collective(&self) -> Collective {
        match self {
            Call::AllReduce(_) | Call::Barrier => Collective::AllReduce,
            Call::AllGather { .. } => Collective::AllGather,
            Call::ReduceScatter { .. } => Collective::ReduceScatter,
            Call::AllToAll { .. } => Collective::AllToAll,
            Call::Broadcast { .. } => Collective::Broadcast,
        }
    }

    /// The one dim along which the ranks' shapes may differ.
    fn free_dim(&self) -> Option<usize> {
        match *self {
            Call::AllGather { dim } => Some(dim),
            Call::AllToAll {
                split_dim,
                concat_dim,
            } if split_dim != concat_dim => Some(concat_dim),
            _ => None,
        }
    }
}

impl std::fmt::Display for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Call::AllReduce(op) => write!(f, "all_reduce(op={op})"),
            Call::AllGather { dim } => write!(f, "all_gather(dim={dim})"),
            Call::ReduceScatter { op, dim } => write!(f, "reduce_scatter(op={op}, dim={dim})"),
            Call::AllToAll {
                split_dim,
                concat_dim,
            } => write!(
                f,
                "all_to_all(split_dim={split_dim}, concat_dim={concat_dim})"
            ),
            Call::Broadcast { src } => write!(f, "broadcast(src={src})"),
            Call::Barrier => write!(f, "barrier()"),
        }
    }
}

/// What one rank brought to a meeting.
struct Arrival {
    rank: u32,
    call: Call,
    input: Option<Input>,
}

/// A rank's input: its tensor, or what a rank in another process sent of it.
enum Input {
    Local(Tensor),
    Remote(WireTensor),
}

impl Input {
    fn dtype(&self) -> DType {
        match self {
            Input::Local(t) => t.dtype(),
            Input::Remote(w) => w.dtype,
        }
    }

    fn shape(&self) -> &[usize] {
        match self {
            Input::Local(t) => t.shape(),
            Input::Remote(w) => &w.shape,
        }
    }

    fn dense(&self) -> std::borrow::Cow<'_, Buffer> {
        match self {
            Input::Local(t) => dense(t),
            Input::Remote(w) => std::borrow::Cow::Borrowed(&w.buffer),
        }
    }
}

impl Arrival {
    fn signature(&self) -> String {
        match &self.input {
            Some(t) => format!("{} on {}{:?}", self.call, t.dtype(), t.shape()),
            None => self.call.to_string(),
        }
    }
}

/// Every rank's result of a completed meeting.
enum Outcome {
    /// The same tensor for every rank (all_reduce, all_gather, broadcast).
    Same(Buffer, Vec<usize>),
    /// One tensor per group position (reduce_scatter, all_to_all).
    PerRank(Vec<(Buffer, Vec<usize>)>),
    /// Nothing but the meeting itself (barrier).
    Nothing,
}

/// The `k`-th collective on one group.
struct Meeting {
    call: Call,
    opened: Instant,
    arrivals: Vec<Option<Arrival>>,
    /// Set once: every rank's result, or the error every rank gets.
    outcome: Option<std::result::Result<Arc<Outcome>, String>>,
    /// Ranks that have taken their result; the meeting is removed when all of this
    /// process's members have.
    collected: usize,
    /// Whether a rank is computing the outcome now (the arrivals are taken).
    computing: bool,
    /// What the meeting's waiting ranks sleep on: one per meeting, so a meeting's outcome
    /// wakes its own ranks and not every waiting rank of the world.
    wake: Arc<Condvar>,
    /// How many ranks sleep on `wake` now: a wake-up with none costs a system call for
    /// nothing, on every small collective's path.
    sleepers: usize,
    /// Counts the meeting's changes (an outcome, an arrival from another process), so a
    /// rank can watch it without the world's lock ([`WATCH_FOR`]).
    changes: Arc<AtomicU64>,
}

/// A meeting as errors name it, `all_reduce #3 on group [0, 1]`: written out only when an
/// error needs it, not on every call.
struct MeetingName<'a> {
    call: &'static str,
    seq: u64,
    group: &'a ProcessGroup,
}

impl std::fmt::Display for MeetingName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} #{} on group {}", self.call, self.seq, self.group)
    }
}

impl Meeting {
    fn open(call: &Call, group: &ProcessGroup) -> Meeting {
        Meeting {
            call: call.clone(),
            opened: Instant::now(),
            arrivals: (0..group.size()).map(|_| None).collect(),
            outcome: None,
            collected: 0,
            computing: false,
            wake: Arc::default(),
            sleepers: 0,
            changes: Arc::default(),
        }
    }

    /// Wakes the ranks sleeping on this meeting, if any, and tells those watching it.
    fn wake_sleepers(&self) {
        self.changes.fetch_add(1, Ordering::Release);
        if self.sleepers > 0 {
            self.wake.notify_all();
        }
    }

    /// Takes `arrival` at group position `position`; a call invalid on its own (`invalid`
    /// says why) fails the meeting (the `seq`-th on `group`) for everyone, unless it has an
    /// outcome already.
    fn admit(
        &mut self,
        position: usize,
        arrival: Arrival,
        invalid: Option<String>,
        (seq, group): (u64, &ProcessGroup),
    ) {
        if let (None, Some(problem)) = (&self.outcome, invalid) {
            let what = MeetingName {
                call: self.call.name(),
                seq,
                group,
            };
            self.outcome = Some(Err(format!(
                "{what} failed: rank {} passed an invalid call: {problem}",
                arrival.rank
            )));
        }
        self.arrivals[position] = Some(arrival);
    }

    fn missing(&self, group: &ProcessGroup) -> Vec<u32> {
        group
            .ranks()
            .iter()
            .zip(&self.arrivals)
            .filter(|(_, a)| a.is_none())
            .map(|(&r, _)| r)
            .collect()
    }
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct MeetingKey {
    group: Vec<u32>,
    seq: u64,
}

#[derive(Default)]
struct State {
    meetings: FxHashMap<MeetingKey, Meeting>,
    /// Ranks whose guest has ended, with how (`finished`, `stopped with an error: ...`).
    ended: FxHashMap<u32, String>,
}

/// The ranks of one SPMD launch: rank `r` runs on `cores[r]`, and all share one runtime. A
/// world may span processes ([`World::across`]); then this process runs some of its ranks.
pub struct World {
    runtime: Arc<Runtime>,
    cores: Vec<CoreId>,
    options: WorldOptions,
    state: Mutex<State>,
    spread: Option<Spread>,
    /// Whether a waiting rank watches its meeting before it sleeps: when the process has a
    /// core for each of its ranks.
    watch: bool,
}

/// How a world spans processes: `per_process` ranks in each, reached through `peers`.
struct Spread {
    peers: Arc<dyn Peers>,
    per_process: u32,
}

impl World {
    /// A world of `size` ranks, rank `r` on `neuron:r` of the runtime's topology.
    ///
    /// Fails when `size` is 0 or larger than the number of visible cores, saying which
    /// instance presets have more.
    pub fn new(runtime: Arc<Runtime>, size: u32, options: WorldOptions) -> Result<Arc<World>> {
        let topology = runtime.topology();
        if size == 0 || size as usize > topology.num_cores() {
            return Err(Error::Invalid(format!(
                "cannot start {size} rank(s): each rank needs its own NeuronCore and {} has {} \
                 visible core(s). Use at most {} ranks, or a larger instance \
                 (NEURONLAB_INSTANCE=trn2.48xlarge, NEURON_LOGICAL_NC_CONFIG=1 gives 128 cores)",
                topology.instance_name(),
                topology.num_cores(),
                topology.num_cores()
            )));
        }
        Ok(Arc::new(World::with_cores(
            runtime,
            (0..size).map(CoreId).collect(),
            options,
        )))
    }

    /// A world of one rank on `core`: what a plain (non-SPMD) run is. Its collectives are
    /// copies.
    pub fn single(runtime: Arc<Runtime>, core: CoreId) -> Arc<World> {
        Arc::new(World::with_cores(
            runtime,
            vec![core],
            WorldOptions::default(),
        ))
    }

    /// A world of `per_process` ranks in each of the processes `peers` reaches, rank
    /// `process * per_process + i` on `neuron:<rank>` of every process's topology (so modeled
    /// costs are those of a one-process world). This process runs [`World::local_ranks`].
    /// Messages for the launcher reach `launcher` with the sending process.
    pub fn across(
        runtime: Arc<Runtime>,
        per_process: u32,
        peers: Arc<dyn Peers>,
        options: WorldOptions,
        launcher: Arc<dyn Fn(u32, Vec<u8>) + Send + Sync>,
    ) -> Result<Arc<World>> {
        let size = per_process
            .checked_mul(peers.processes())
            .ok_or_else(|| Error::Invalid("too many ranks".into()))?;
        let world = World::new(runtime, size, options)?;
        let mut world = Arc::try_unwrap(world).unwrap_or_else(|_| unreachable!("just made"));
        world.watch = fits_cores(per_process as usize);
        world.spread = Some(Spread {
            peers: peers.clone(),
            per_process,
        });
        let world = Arc::new(world);
        let weak = Arc::downgrade(&world);
        peers.listen(Arc::new(move |from, message| match message {
            Message::Launcher(bytes) => launcher(from, bytes),
            other => {
                if let Some(world) = weak.upgrade() {
                    world.deliver(other);
                }
            }
        }));
        Ok(world)
    }

    fn with_cores(runtime: Arc<Runtime>, cores: Vec<CoreId>, options: WorldOptions) -> World {
        let cores_len = cores.len();
        World {
            runtime,
            cores,
            options,
            watch: fits_cores(cores_len),
            state: Mutex::new(State::default()),
            spread: None,
        }
    }

    /// The ranks this process runs: all of them unless the world spans processes.
    pub fn local_ranks(&self) -> std::ops::Range<u32> {
        match &self.spread {
            None => 0..self.size(),
            Some(s) => {
                let first = s.peers.process() * s.per_process;
                first..first + s.per_process
            }
        }
    }

    /// The process that runs `rank`.
    fn process_of(&self, rank: u32) -> u32 {
        self.spread.as_ref().map_or(0, |s| rank / s.per_process)
    }

    /// Sends `message` to every process but this one that runs a rank of `ranks`.
    fn tell(&self, ranks: &[u32], message: Outgoing) -> std::result::Result<(), String> {
        let Some(spread) = &self.spread else {
            return Ok(());
        };
        let me = spread.peers.process();
        let mut processes: Vec<u32> = ranks
            .iter()
            .map(|&r| self.process_of(r))
            .filter(|&p| p != me)
            .collect();
        processes.sort_unstable();
        processes.dedup();
        let Some(last) = processes.pop() else {
            return Ok(());
        };
        for p in processes {
            spread.peers.send_outgoing(p, message.clone())?;
        }
        spread.peers.send_outgoing(last, message)
    }

    /// What another process told this one about a meeting or a rank.
    fn deliver(&self, message: Message) {
        match message {
            Message::Arrival {
                group,
                seq,
                rank,
                call,
                invalid,
                input,
            } => {
                let Ok(g) = ProcessGroup::new(group.clone(), self.size(), None) else {
                    return;
                };
                let Ok(position) = g.rank_in_group(rank) else {
                    return;
                };
                let key = MeetingKey { group, seq };
                let mut state = self.lock();
                let meeting = state
                    .meetings
                    .entry(key)
                    .or_insert_with(|| Meeting::open(&call.0, &g));
                let arrival = Arrival {
                    rank,
                    call: call.0,
                    input: input.map(Input::Remote),
                };
                meeting.admit(position, arrival, invalid, (seq, &g));
                meeting.wake_sleepers();
            }
            Message::Departed { rank, how } => self.ended(rank, how),
            Message::Launcher(_) => {}
        }
    }

    /// Records that `rank` has ended, and wakes every waiting rank to see whether it was
    /// waiting for it.
    fn ended(&self, rank: u32, how: String) {
        let mut state = self.lock();
        state.ended.insert(rank, how);
        state.meetings.values().for_each(Meeting::wake_sleepers);
    }

    /// Number of ranks.
    pub fn size(&self) -> u32 {
        self.cores.len() as u32
    }

    /// The runtime every rank uses.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// The settings.
    pub fn options(&self) -> &WorldOptions {
        &self.options
    }

    /// The group of every rank, in rank order (torch's default group).
    pub fn world_group(&self) -> ProcessGroup {
        ProcessGroup::new((0..self.size()).collect(), self.size(), None)
            .expect("0..size is a valid group")
    }

    /// Rank `rank`'s communicator. Each rank uses exactly one.
    ///
    /// # Panics
    /// If `rank` is not below [`World::size`] (a launcher bug, not user input).
    pub fn rank(self: &Arc<Self>, rank: u32) -> RankComm {
        assert!(
            self.local_ranks().contains(&rank),
            "rank {rank} of a world of {} (this process runs {:?})",
            self.size(),
            self.local_ranks()
        );
        RankComm {
            world: self.clone(),
            rank,
            seqs: Arc::default(),
            cancel: None,
        }
    }

    /// Records that `rank`'s guest has ended (`how`: "finished", "stopped with an error:
    /// ..."), so meetings waiting for it fail at once instead of timing out.
    pub fn depart(&self, rank: u32, how: String) {
        self.ended(rank, how.clone());
        if self.spread.is_some() {
            // Best effort: a process that cannot hear it times out instead.
            let everyone: Vec<u32> = (0..self.size()).collect();
            let _ = self.tell(&everyone, Message::Departed { rank, how }.encode().into());
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One rank's side of a [`World`]: its rank, its core, and how many collectives it has issued
/// on each group. Clones share the counts: a clone is how a recorded backward issues its
/// collectives as the rank it was recorded on.
#[derive(Clone)]
pub struct RankComm {
    world: Arc<World>,
    rank: u32,
    seqs: Arc<Mutex<FxHashMap<Vec<u32>, u64>>>,
    cancel: Option<Arc<AtomicBool>>,
}

impl RankComm {
    /// This rank, in the world.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of ranks in the world.
    pub fn world_size(&self) -> u32 {
        self.world.size()
    }

    /// The core this rank's tensors live on.
    pub fn core(&self) -> CoreId {
        self.world.cores[self.rank as usize]
    }

    /// The runtime every rank uses.
    pub fn runtime(&self) -> &Arc<Runtime> {
        self.world.runtime()
    }

    /// The world this rank belongs to.
    pub fn world(&self) -> &Arc<World> {
        &self.world
    }

    /// Makes waits in collectives end with [`Error::Cancelled`] when `flag` is set (the
    /// guest's interrupt flag).
    pub fn set_cancel_flag(&mut self, flag: Arc<AtomicBool>) {
        self.cancel = Some(flag);
    }

    /// The group of ranks `ranks` (in ring order) of this world.
    pub fn new_group(&self, ranks: Vec<u32>) -> Result<ProcessGroup> {
        ProcessGroup::new(ranks, self.world_size(), None).map_err(Error::Invalid)
    }

    /// Every rank gets the reduction of all ranks' tensors, folded in group order.
    pub fn all_reduce(&mut self, group: &ProcessGroup, t: &Tensor, op: ReduceOp) -> Result<Tensor> {
        self.run(group, Call::AllReduce(op), Some(t))
            .map(|t| t.expect("all_reduce has a result"))
    }

    /// Every rank gets all ranks' tensors concatenated along `dim` in group order; the
    /// tensors may differ in size along `dim` only.
    pub fn all_gather(&mut self, group: &ProcessGroup, t: &Tensor, dim: usize) -> Result<Tensor> {
        self.run(group, Call::AllGather { dim }, Some(t))
            .map(|t| t.expect("all_gather has a result"))
    }

    /// Every rank gets its `torch.chunk` chunk along `dim` of the reduction.
    pub fn reduce_scatter(
        &mut self,
        group: &ProcessGroup,
        t: &Tensor,
        op: ReduceOp,
        dim: usize,
    ) -> Result<Tensor> {
        self.run(group, Call::ReduceScatter { op, dim }, Some(t))
            .map(|t| t.expect("reduce_scatter has a result"))
    }

    /// Each rank's tensor is cut along `split_dim` into group-size `torch.chunk` chunks; group
    /// position `i` receives chunk `i` of every rank, concatenated along `concat_dim`.
    pub fn all_to_all(
        &mut self,
        group: &ProcessGroup,
        t: &Tensor,
        split_dim: usize,
        concat_dim: usize,
    ) -> Result<Tensor> {
        let call = Call::AllToAll {
            split_dim,
            concat_dim,
        };
        self.run(group, call, Some(t))
            .map(|t| t.expect("all_to_all has a result"))
    }

    /// Every rank gets the tensor of global rank `src`; all pass one of the same dtype and
    /// shape.
    pub fn broadcast(&mut self, group: &ProcessGroup, t: &Tensor, src: u32) -> Result<Tensor> {
        self.run(group, Call::Broadcast { src }, Some(t))
            .map(|t| t.expect("broadcast has a result"))
    }

    /// Returns once every rank of the group has arrived.
    pub fn barrier(&mut self, group: &ProcessGroup) -> Result<()> {
        self.run(group, Call::Barrier, None).map(|_| ())
    }

    /// Joins the meeting for this call, waits for it, and takes this rank's result.
    fn run(
        &mut self,
        group: &ProcessGroup,
        call: Call,
        input: Option<&Tensor>,
    ) -> Result<Option<Tensor>> {
        let position = group.rank_in_group(self.rank).map_err(|e| {
            Error::Invalid(format!(
                "{}: {e}; only its members can call it",
                call.name()
            ))
        })?;
        let bus = self.runtime().bus().clone();
        let start_us = bus.now_us();
        let key = MeetingKey {
            group: group.ranks().to_vec(),
            seq: {
                let mut seqs = self.seqs.lock().unwrap_or_else(PoisonError::into_inner);
                // Looked up before inserting: the group's ranks are copied only once.
                match seqs.get_mut(group.ranks()) {
                    Some(seq) => {
                        *seq += 1;
                        *seq
                    }
                    None => {
                        seqs.insert(group.ranks().to_vec(), 1);
                        1
                    }
                }
            },
        };
        let invalid = check_call(&call, group, input);
        // Ranks in other processes get the arrival too, with the input's elements.
        let wire = self.world.spread.as_ref().map(|_| {
            Message::arrival(
                (&key.group, key.seq),
                self.rank,
                &call,
                invalid.as_deref(),
                input,
            )
        });
        let arrival = Arrival {
            rank: self.rank,
            call: call.clone(),
            input: input.cloned().map(Input::Local),
        };
        let outcome = self.meet(group, &key, position, arrival, invalid, wire)?;
        let output = match rank_result(outcome, position) {
            Some((buffer, shape)) => Some(self.runtime().tensor_on(self.core(), buffer, &shape)?),
            None => None,
        };
        let ready_us = self.publish(group, &call, input, output.as_ref(), start_us)?;
        if let Some(t) = &output {
            t.set_memory_role(Role::CollectiveBuffer);
            t.set_ready_us(ready_us);
        }
        Ok(output)
    }

    /// Leaves `arrival` at the meeting `key` and waits for its outcome.
    // The meeting protocol as one critical section: arrival, agreement, the last rank's compute,
    // and every way a meeting fails must be read together to see it never deadlocks.
    fn meet(
        &self,
        group: &ProcessGroup,
        key: &MeetingKey,
        position: usize,
        arrival: Arrival,
        invalid: Option<String>,
        wire: Option<Outgoing>,
    ) -> Result<Arc<Outcome>> {
        let world = &*self.world;
        let timeout = world.options.timeout;
        let local = world.local_ranks();
        let local_members = group.ranks().iter().filter(|r| local.contains(r)).count();
        // Only a rank that may wait for other processes polls.
        let polling_since = world.spread.as_ref().map(|_| Instant::now());
        let small = arrival.input.as_ref().is_none_or(|input| {
            input.shape().iter().product::<usize>() * input.dtype().size() <= WATCH_MOST_BYTES
        });
        let watch_until = (world.watch && small).then(|| Instant::now() + WATCH_FOR);
        let poll_for = POLL_FOR
            + wire.as_ref().map_or(Duration::ZERO, |message| {
                let bytes = message.head.len() + message.elements_len();
                Duration::from_secs_f64(bytes as f64 / POLL_RATE)
            });
        let mut state = world.lock();
        // The key is copied only by the rank that opens the meeting.
        if !state.meetings.contains_key(key) {
            let opened = Meeting::open(&arrival.call, group);
            state.meetings.insert(key.clone(), opened);
        }
        let meeting = state.meetings.get_mut(key).expect("opened above");
        let what = MeetingName {
            call: meeting.call.name(),
            seq: key.seq,
            group,
        };
        let wake = meeting.wake.clone();
        meeting.admit(position, arrival, invalid, (key.seq, group));
        if let Some(bytes) = wire {
            // Sent without the lock: the other processes' listeners take it meanwhile.
            drop(state);
            let sent = world.tell(group.ranks(), bytes);
            state = world.lock();
            if let Err(e) = sent {
                let meeting = state.meetings.get_mut(key).expect("meeting stays");
                let message = format!("{what} failed: cannot reach the other processes: {e}");
                meeting.outcome.get_or_insert(Err(message.clone()));
                meeting.wake_sleepers();
                return Err(Error::Collective(message));
            }
        }
        loop {
            let meeting = state
                .meetings
                .get_mut(key)
                .expect("meeting stays until collected");
            // The first rank to see every arrival computes, without the lock, so other
            // groups' meetings go on meanwhile.
            if meeting.outcome.is_none()
                && !meeting.computing
                && meeting.arrivals.iter().all(Option::is_some)
            {
                meeting.computing = true;
                let arrivals: Vec<Arrival> = meeting
                    .arrivals
                    .iter_mut()
                    .filter_map(Option::take)
                    .collect();
                drop(state);
                let computed = compute(group, arrivals).map(Arc::new);
                state = world.lock();
                let meeting = state
                    .meetings
                    .get_mut(key)
                    .expect("meeting stays until collected");
                meeting.outcome = Some(computed.map_err(|e| format!("{what} failed: {e}")));
                meeting.wake_sleepers();
                continue;
            }
            let State { meetings, ended } = &mut *state;
            let meeting = meetings
                .get_mut(key)
                .expect("meeting stays until collected");
            if let Some(outcome) = &meeting.outcome {
                let outcome = outcome.clone();
                if outcome.is_err() && self.interrupted() {
                    return Err(interrupted_waiting(&what, &meeting.missing(group)));
                }
                if outcome.is_ok() {
                    meeting.collected += 1;
                    if meeting.collected == local_members {
                        meetings.remove(key);
                    }
                }
                return outcome.map_err(Error::Collective);
            }
            if meeting.computing {
                state = match watch_until.filter(|&until| Instant::now() < until) {
                    Some(until) => watch(state, world, key, until),
                    None => sleep_on(state, key, &wake, CANCEL_POLL),
                };
                continue;
            }
            let missing = meeting.missing(group);
            if self.interrupted() {
                meeting.outcome = Some(Err(format!(
                    "{what} was interrupted on rank {} while rank(s) {} had not arrived",
                    self.rank,
                    list(&missing)
                )));
                meeting.wake_sleepers();
                return Err(interrupted_waiting(&what, &missing));
            }
            let gone: Vec<String> = missing
                .iter()
                .filter_map(|r| ended.get(r).map(|how| format!("rank {r} {how}")))
                .collect();
            let waited = meeting.opened.elapsed();
            let failure = if !gone.is_empty() {
                Some(format!(
                    "{what} cannot complete: {} without reaching it; rank(s) {} are waiting",
                    gone.join(", "),
                    list(&arrived(group, &missing))
                ))
            } else if waited >= timeout {
                Some(format!(
                    "{what} timed out after {:.1} s: rank(s) {} never arrived while rank(s) {} \
                     waited (a deadlock: every rank of a group must call the same collectives in \
                     the same order). Raise the limit with --collective-timeout or {TIMEOUT_ENV} \
                     if the ranks are only slow",
                    waited.as_secs_f64(),
                    list(&missing),
                    list(&arrived(group, &missing)),
                ))
            } else {
                None
            };
            if let Some(message) = failure {
                meeting.outcome = Some(Err(message.clone()));
                meeting.wake_sleepers();
                return Err(Error::Collective(message));
            }
            if let Some(spread) = &world.spread {
                let remote_only = missing.iter().all(|r| !local.contains(r));
                if remote_only && polling_since.is_some_and(|t| t.elapsed() < poll_for) {
                    drop(state);
                    if !spread.peers.poll() {
                        std::thread::yield_now();
                    }
                    state = world.lock();
                    continue;
                }
            }
            state = match watch_until.filter(|&until| Instant::now() < until) {
                Some(until) => watch(state, world, key, until),
                None => sleep_on(state, key, &wake, (timeout - waited).min(CANCEL_POLL)),
            };
        }
    }

    fn interrupted(&self) -> bool {
        self.cancel
            .as_ref()
            .is_some_and(|f| f.load(Ordering::SeqCst))
    }

    /// Publishes this rank's `collective` event; returns when its output is ready on the
    /// core's modeled device clock (the collective runs beside compute).
    fn publish(
        &self,
        group: &ProcessGroup,
        call: &Call,
        input: Option<&Tensor>,
        output: Option<&Tensor>,
        start_us: f64,
    ) -> Result<f64> {
        let input_bytes = input.map_or(0, |t| t.nbytes() as u64);
        // S as nccl-tests counts it: the gathered output for all_gather, the input otherwise.
        let message_bytes = match call {
            Call::AllGather { .. } => output.map_or(0, |t| t.nbytes() as u64),
            _ => input_bytes,
        };
        let runtime = self.runtime();
        let cost = collective_cost(call.collective(), group, message_bytes, runtime.topology())
            .map_err(Error::Invalid)?;
        let event = EventKind::Collective(CollectiveEvent {
            op: call.name().to_string(),
            group: group.ranks().to_vec(),
            mesh_dim: group.name().map(str::to_string),
            bytes: input_bytes,
            host_us: runtime.bus().now_us() - start_us,
            modeled_us: cost.total_s * 1e6,
        });
        let (_, ready_us) = runtime
            .bus()
            .publish_all_after(self.core(), start_us, 0.0, [event]);
        Ok(ready_us)
    }
}

/// Whether a process's `ranks` each have a core of their own.
fn fits_cores(ranks: usize) -> bool {
    std::thread::available_parallelism().is_ok_and(|cores| cores.get() >= ranks)
}

/// Watches the meeting `key` without the world's lock until it changes or `until`, then
/// takes the lock again.
fn watch<'a>(
    state: MutexGuard<'a, State>,
    world: &'a World,
    key: &MeetingKey,
    until: Instant,
) -> MutexGuard<'a, State> {
    let changes = state
        .meetings
        .get(key)
        .expect("meeting stays")
        .changes
        .clone();
    let seen = changes.load(Ordering::Acquire);
    drop(state);
    while changes.load(Ordering::Acquire) == seen && Instant::now() < until {
        for _ in 0..64 {
            std::hint::spin_loop();
        }
    }
    world.lock()
}

/// Sleeps on the meeting `key`'s `wake` for up to `wait`, counted among its sleepers (the
/// meeting stays while a rank that has not collected its result sleeps on it).
fn sleep_on<'a>(
    mut state: MutexGuard<'a, State>,
    key: &MeetingKey,
    wake: &Condvar,
    wait: Duration,
) -> MutexGuard<'a, State> {
    fn sleepers<'s>(state: &'s mut State, key: &MeetingKey) -> &'s mut usize {
        &mut state.meetings.get_mut(key).expect("meeting stays").sleepers
    }
    *sleepers(&mut state, key) += 1;
    let mut state = wake
        .wait_timeout(state, wait)
        .unwrap_or_else(PoisonError::into_inner)
        .0;
    *sleepers(&mut state, key) -= 1;
    state
}

/// What is wrong with this rank's call on its own (a dim out of range, an op the dtype does
/// not support, a source outside the group), before comparing it with the other ranks.
fn check_call(call: &Call, group: &ProcessGroup, input: Option<&Tensor>) -> Option<String> {
    let t = input?;
    let rank = t.shape().len();
    let dim_ok = |name: &str, d: usize| {
        (d >= rank).then(|| {
            format!(
                "{name} {d} is out of range for a tensor of {rank} dim(s) ({}{:?})",
                t.dtype(),
                t.shape()
            )
        })
    };
    match *call {
        Call::AllReduce(op) | Call::ReduceScatter { op, .. } if op.supports(t.dtype()).is_err() => {
            op.supports(t.dtype()).err()
        }
        Call::ReduceScatter { dim, .. } | Call::AllGather { dim } => dim_ok("dim", dim),
        Call::AllToAll {
            split_dim,
            concat_dim,
        } => dim_ok("split_dim", split_dim).or_else(|| dim_ok("concat_dim", concat_dim)),
        Call::Broadcast { src } if group.rank_in_group(src).is_err() => Some(format!(
            "src rank {src} is not in the group {group}; give a global rank that is"
        )),
        _ => None,
    }
}

/// The result of group position `position`: moved out when no other rank holds the outcome
/// any more (the last to collect it, or the only rank of this process), copied otherwise.
fn rank_result(outcome: Arc<Outcome>, position: usize) -> Option<(Buffer, Vec<usize>)> {
    match Arc::try_unwrap(outcome) {
        Ok(Outcome::Same(buffer, shape)) => Some((buffer, shape)),
        Ok(Outcome::PerRank(mut parts)) => {
            (position < parts.len()).then(|| parts.swap_remove(position))
        }
        Ok(Outcome::Nothing) => None,
        Err(shared) => match &*shared {
            Outcome::Same(buffer, shape) => Some((buffer.clone(), shape.clone())),
            Outcome::PerRank(parts) => parts.get(position).cloned(),
            Outcome::Nothing => None,
        },
    }
}

/// Checks that every rank made the same call on compatible tensors, then computes every
/// rank's result.
fn compute(
    group: &ProcessGroup,
    mut arrivals: Vec<Arrival>,
) -> std::result::Result<Outcome, String> {
    agree(&arrivals)?;
    let call = arrivals[0].call.clone();
    if call == Call::Barrier {
        return Ok(Outcome::Nothing);
    }
    // Elements received from other processes are this meeting's: a reduction folds over
    // them in place of a fresh buffer, a broadcast hands them on without a copy.
    let received: Vec<Option<Buffer>> = arrivals
        .iter_mut()
        .map(|a| match &mut a.input {
            Some(Input::Remote(w)) => {
                Some(std::mem::replace(&mut w.buffer, Buffer::U8(Vec::new())))
            }
            _ => None,
        })
        .collect();
    let inputs: Vec<&Input> = arrivals
        .iter()
        .map(|a| {
            a.input
                .as_ref()
                .expect("every call but barrier has an input")
        })
        .collect();
    let mut owned: Vec<std::borrow::Cow<'_, Buffer>> = inputs
        .iter()
        .zip(received)
        .map(|(t, received)| match received {
            Some(buffer) => std::borrow::Cow::Owned(buffer),
            None => t.dense(),
        })
        .collect();
    let shape = inputs[0].shape().to_vec();
    let n = group.size();
    Ok(match call {
        Call::AllReduce(op) => Outcome::Same(reduce_owning(op, owned)?, shape),
        Call::Broadcast { src } => {
            let p = group.rank_in_group(src)?;
            Outcome::Same(owned.swap_remove(p).into_owned(), shape)
        }
        Call::AllGather { dim } => {
            let parts: Vec<(&Buffer, &[usize])> = owned
                .iter()
                .zip(&inputs)
                .map(|(b, t)| (b.as_ref(), t.shape()))
                .collect();
            let (buffer, shape) = concat(&parts, dim)?;
            Outcome::Same(buffer, shape)
        }
        Call::ReduceScatter { op, dim } => {
            let full = reduce_owning(op, owned)?;
            Outcome::PerRank(split(&full, &shape, dim, &chunk_sizes(shape[dim], n))?)
        }
        Call::AllToAll {
            split_dim,
            concat_dim,
        } => {
            let pieces = owned
                .iter()
                .zip(&inputs)
                .map(|(b, t)| {
                    split(
                        b,
                        t.shape(),
                        split_dim,
                        &chunk_sizes(t.shape()[split_dim], n),
                    )
                })
                .collect::<std::result::Result<Vec<_>, String>>()?;
            (0..n)
                .map(|dst| {
                    let parts: Vec<(&Buffer, &[usize])> = pieces
                        .iter()
                        .map(|p| (&p[dst].0, p[dst].1.as_slice()))
                        .collect();
                    concat(&parts, concat_dim)
                })
                .collect::<std::result::Result<Vec<_>, String>>()
                .map(Outcome::PerRank)?
        }
        Call::Barrier => Outcome::Nothing,
    })
}

/// Fails, listing what each rank passed, unless all ranks made the same call with the same
/// dtype and shapes that agree outside the call's free dim.
fn agree(arrivals: &[Arrival]) -> std::result::Result<(), String> {
    let first = &arrivals[0];
    let compatible = |a: &Arrival| {
        if a.call != first.call {
            return false;
        }
        match (&a.input, &first.input) {
            (Some(x), Some(y)) => {
                x.dtype() == y.dtype()
                    && x.shape().len() == y.shape().len()
                    && x.shape()
                        .iter()
                        .zip(y.shape())
                        .enumerate()
                        .all(|(d, (p, q))| p == q || first.call.free_dim() == Some(d))
            }
            (None, None) => true,
            _ => false,
        }
    };
    if arrivals.iter().all(compatible) {
        return Ok(());
    }
    // Group the ranks by what they passed, in order of first appearance.
    let mut kinds: Vec<(String, Vec<u32>)> = Vec::new();
    for a in arrivals {
        let sig = a.signature();
        match kinds.iter_mut().find(|(s, _)| *s == sig) {
            Some((_, ranks)) => ranks.push(a.rank),
            None => kinds.push((sig, vec![a.rank])),
        }
    }
    let described: Vec<String> = kinds
        .iter()
        .map(|(sig, ranks)| format!("rank(s) {} passed {sig}", list(ranks)))
        .collect();
    let rule = match first.call.free_dim() {
        Some(d) => format!(" (the same dtype and shape, except along dim {d})"),
        None => " (the same op, attributes, dtype and shape)".to_string(),
    };
    Err(format!(
        "the ranks disagree{rule}: {}",
        described.join("; ")
    ))
}

/// The tensor's elements as a dense buffer, borrowed when the storage already is one.
pub(crate) fn dense(t: &Tensor) -> std::borrow::Cow<'_, Buffer> {
    let storage = t.storage_buffer();
    if t.is_contiguous() && storage.len() == t.numel() {
        std::borrow::Cow::Borrowed(storage)
    } else {
        std::borrow::Cow::Owned(t.to_buffer())
    }
}

fn arrived(group: &ProcessGroup, missing: &[u32]) -> Vec<u32> {
    group
        .ranks()
        .iter()
        .copied()
        .filter(|r| !missing.contains(r))
        .collect()
}

/// `0, 1, 3` (or `none`).
/// The error of a rank interrupted while it waited in `what` for the ranks `missing`.
fn interrupted_waiting(what: &MeetingName<'_>, missing: &[u32]) -> Error {
    Error::Cancelled(match missing.is_empty() {
        true => format!("interrupted while waiting in {what}"),
        false => format!(
            "interrupted while waiting in {what} for rank(s) {}",
            list(missing)
        ),
    })
}

fn list(ranks: &[u32]) -> String {
    if ranks.is_empty() {
        return "none".to_string();
    }
    ranks
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
