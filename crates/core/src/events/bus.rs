//! The event bus: stamps events, keeps the recent ones, and hands them to subscribers.
//!
//! `publish` sits on every op's path, from every rank's thread at once, so the one lock it
//! takes covers only numbering, the device clocks, the summary windows and a copy into the
//! ring: each event's kind is encoded before the lock ([`super::ring`]), and subscribers see
//! the publisher's own `Event`, after the lock, so none of them copies one.

use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use smallvec::SmallVec;

use super::clock::Clock;
use super::device_clock::CoreClock;
use super::event::{Event, EventKind};
use super::ring::{encode_kind, EventRing};
use super::summary::{Summary, SummaryBuilder};
use crate::device::CoreId;

/// How many events the bus keeps by default before dropping the oldest.
pub const DEFAULT_CAPACITY: usize = 100_000;

type Subscriber = Arc<dyn Fn(&Event) + Send + Sync>;

/// The most bytes of encoding buffer a publishing thread keeps between events.
const KEPT_ENCODING_BYTES: usize = 16 * 1024;

thread_local! {
    /// Each publishing thread's buffer for the encodings of the events it publishes.
    static ENCODINGS: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// The recent events, oldest first, in `seq` order, and who else wants them.
struct Recorder {
    events: EventRing,
    capacity: usize,
    next_seq: u64,
    dropped: u64,
    // Copy-on-write under the one lock that publishing takes anyway: publish clones the Arc
    // (no allocation) only when there are subscribers and calls them unlocked, so a
    // subscriber may itself subscribe or read the bus.
    subscribers: Arc<[Subscriber]>,
    /// Per core (by index), the modeled device clock of the ops and collectives published
    /// on it.
    clocks: Vec<CoreClock>,
    /// The open [`SummaryWindow`]s by id, each counting every event since it opened.
    windows: Vec<(u64, SummaryBuilder)>,
    next_window: u64,
}

impl Recorder {
    /// Numbers `event` as the next in the stream and lays it out on its core's device clock
    /// (an op waiting for inputs ready at `ready_us`). Returns when a collective's output is
    /// ready (0 otherwise).
    fn stamp(&mut self, event: &mut Event, ready_us: f64) -> f64 {
        event.seq = self.next_seq;
        self.next_seq += 1;
        let mut ready = 0.0;
        if let Some(us) = event.kind.modeled_us() {
            let i = event.core.0 as usize;
            if self.clocks.len() <= i {
                self.clocks.resize(i + 1, CoreClock::default());
            }
            event.device_us = Some(match event.kind {
                EventKind::Collective(_) => {
                    let (start, done) = self.clocks[i].collective(us);
                    ready = done;
                    start
                }
                _ => self.clocks[i].op(ready_us, us),
            });
        }
        ready
    }

    /// Keeps `event`, whose kind's encoding is `kind` (if it encoded), pushing the oldest out
    /// of a full ring.
    fn keep(&mut self, event: &Event, kind: Option<&[u8]>) {
        let kept = match kind {
            Some(kind) if self.capacity > 0 => {
                if self.events.len() == self.capacity {
                    self.events.evict(1);
                    self.dropped += 1;
                }
                self.events.push(event, kind)
            }
            _ => false,
        };
        if !kept {
            self.dropped += 1;
        }
    }
}

/// The runtime's one event stream. Thread-safe; shared as `Arc<EventBus>`.
pub struct EventBus {
    clock: Clock,
    recorder: Mutex<Recorder>,
}

impl EventBus {
    /// A bus keeping the last [`DEFAULT_CAPACITY`] events.
    pub fn new() -> EventBus {
        EventBus::with_capacity(DEFAULT_CAPACITY)
    }

    /// A bus keeping the last `capacity` events (0 keeps none; subscribers still see all).
    pub fn with_capacity(capacity: usize) -> EventBus {
        EventBus {
            clock: Clock::new(),
            recorder: Mutex::new(Recorder {
                events: EventRing::default(),
                capacity,
                next_seq: 0,
                dropped: 0,
                subscribers: Arc::new([]),
                clocks: Vec::new(),
                windows: Vec::new(),
                next_window: 0,
            }),
        }
    }

    /// Microseconds since the bus was created: the clock of every event's `ts_us`, and of
    /// the host times ops measure (a read costs tens of nanoseconds on every op's path; see
    /// [`super::clock`]).
    pub fn now_us(&self) -> f64 {
        self.clock.now_us()
    }

    /// Publishes an event that happens now. Returns its `seq`.
    pub fn publish(&self, core: CoreId, kind: EventKind) -> u64 {
        self.publish_at(core, self.now_us(), kind)
    }

    /// Publishes an event that started at `start_us` (from [`EventBus::now_us`]), so that
    /// spans measured by the caller line up in traces. Returns its `seq`.
    pub fn publish_at(&self, core: CoreId, start_us: f64, kind: EventKind) -> u64 {
        self.publish_all_at(core, start_us, std::iter::once(kind))
    }

    /// Publishes events that started at `start_us`, with consecutive `seq`s: one lock for
    /// all of them, which is what an op's event and its outputs' alloc events cost together
    /// on every op's path. Returns the first one's `seq`.
    pub fn publish_all_at(
        &self,
        core: CoreId,
        start_us: f64,
        kinds: impl IntoIterator<Item = EventKind>,
    ) -> u64 {
        self.publish_all_after(core, start_us, 0.0, kinds).0
    }

    /// [`EventBus::publish_all_at`] for an op whose inputs are ready at `ready_us` on the
    /// core's device clock (a collective's output; see [`super::device_clock`]): the op waits
    /// for them. Returns the first event's `seq`, and when the last collective among the
    /// events has its output ready on the device clock (0 without one).
    pub fn publish_all_after(
        &self,
        core: CoreId,
        start_us: f64,
        ready_us: f64,
        kinds: impl IntoIterator<Item = EventKind>,
    ) -> (u64, f64) {
        self.publish_counted(core, start_us, ready_us, kinds, true)
    }

    /// Publishes an event that another process published and counted (see
    /// [`EventBus::count`]): it is recorded and reaches subscribers, but the open
    /// [`SummaryWindow`]s do not count it again.
    pub fn replay_at(&self, core: CoreId, start_us: f64, kind: EventKind) {
        self.publish_counted(core, start_us, 0.0, [kind], false);
    }

    /// Adds what another process's window counted to every open [`SummaryWindow`].
    pub fn count(&self, counted: &SummaryBuilder) {
        for (_, builder) in &mut self.recorder().windows {
            builder.merge(counted);
        }
    }

    fn publish_counted(
        &self,
        core: CoreId,
        start_us: f64,
        ready_us: f64,
        kinds: impl IntoIterator<Item = EventKind>,
        counted: bool,
    ) -> (u64, f64) {
        // The kinds' encodings, one after the other in this thread's buffer (taken, so a
        // subscriber that publishes gets a buffer of its own).
        let mut encodings = ENCODINGS.take();
        encodings.clear();
        let mut events: SmallVec<[(Event, Option<Range<usize>>); 3]> = kinds
            .into_iter()
            .map(|kind| {
                // Only a kind serde cannot write would fail here; it is then counted and
                // shown to subscribers, but not kept.
                let start = encodings.len();
                let encoded = encode_kind(&kind, &mut encodings)
                    .ok()
                    .map(|()| start..encodings.len());
                let event = Event {
                    seq: 0,
                    ts_us: start_us,
                    device_us: None,
                    core,
                    kind,
                };
                (event, encoded)
            })
            .collect();
        let mut recorder = self.recorder();
        let first = recorder.next_seq;
        let mut ready = 0.0f64;
        for (event, encoded) in &mut events {
            ready = ready.max(recorder.stamp(event, ready_us));
            if counted {
                for (_, builder) in &mut recorder.windows {
                    builder.add(event);
                }
            }
            recorder.keep(event, encoded.clone().map(|range| &encodings[range]));
        }
        let subscribers = Arc::clone(&recorder.subscribers);
        drop(recorder);
        // A compile event's graph can make the buffer large; a thread keeps only a small one.
        if encodings.capacity() <= KEPT_ENCODING_BYTES {
            ENCODINGS.set(encodings);
        }
        for (event, _) in &events {
            for subscriber in subscribers.iter() {
                subscriber(event);
            }
        }
        (first, ready)
    }

    /// Calls `subscriber` with every event published from now on, for as long as the bus
    /// lives, on the publishing thread. Events from different threads may reach it out of
    /// `seq` order.
    pub fn subscribe(&self, subscriber: Box<dyn Fn(&Event) + Send + Sync>) {
        let mut recorder = self.recorder();
        let mut list = recorder.subscribers.to_vec();
        list.push(Arc::from(subscriber));
        recorder.subscribers = list.into();
    }

    /// The recorded events, oldest first.
    pub fn events(&self) -> Vec<Event> {
        self.recorder().events.decode_from(0)
    }

    /// The recorded events with `seq >= seq`, oldest first. Take [`EventBus::next_seq`]
    /// before a cell runs and call this after it to get the cell's events.
    pub fn since(&self, seq: u64) -> Vec<Event> {
        let recorder = self.recorder();
        // The kept events' seqs run without gaps up to the last one stamped.
        let oldest = recorder.next_seq - recorder.events.len() as u64;
        let skip = seq.saturating_sub(oldest).min(recorder.events.len() as u64);
        recorder.events.decode_from(skip as usize)
    }

    /// The `seq` the next event will get.
    pub fn next_seq(&self) -> u64 {
        self.recorder().next_seq
    }

    /// `core`'s device clock, in microseconds since the bus was created: when the ops (fused
    /// kernels included) and collectives published on it are done, as their events' modeled
    /// times lay them out with collectives overlapping the compute that does not read them
    /// ([`super::device_clock`]). Kept apart from the recorded events, so it counts events
    /// the recorder dropped or [`EventBus::clear`] forgot.
    pub fn device_us(&self, core: CoreId) -> f64 {
        self.clock_of(core).now()
    }

    /// The modeled time of every collective `core` ran, overlapped with compute or not.
    pub fn collective_us(&self, core: CoreId) -> f64 {
        self.clock_of(core).collective_us()
    }

    /// The part of [`EventBus::device_us`] that is communication overlapping no compute:
    /// the clock less the ops' modeled time.
    pub fn exposed_collective_us(&self, core: CoreId) -> f64 {
        self.clock_of(core).exposed_us()
    }

    fn clock_of(&self, core: CoreId) -> CoreClock {
        self.recorder()
            .clocks
            .get(core.0 as usize)
            .copied()
            .unwrap_or_default()
    }

    /// Keeps the last `capacity` events from now on (`usize::MAX`: all of them, as a trace of
    /// a whole run needs), dropping the oldest beyond it.
    pub fn set_capacity(&self, capacity: usize) {
        let mut recorder = self.recorder();
        recorder.capacity = capacity;
        let excess = recorder.events.len().saturating_sub(capacity);
        recorder.events.evict(excess);
        recorder.dropped += excess as u64;
    }

    /// Forgets the recorded events (numbering continues).
    pub fn clear(&self) {
        self.recorder().events.clear();
    }

    /// Events dropped because the recorder was full (or has no capacity).
    pub fn dropped(&self) -> u64 {
        self.recorder().dropped
    }

    fn recorder(&self) -> MutexGuard<'_, Recorder> {
        // A panicking subscriber never holds this lock, and pushes are single steps.
        self.recorder.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Counts every event published on a bus from [`SummaryWindow::open`] on, into the
/// [`Summary`] of a cell or a run: unlike [`Summary::from_events`] over the recorded events,
/// it misses none when the recorder keeps fewer than were published. Closed when dropped.
pub struct SummaryWindow {
    bus: Arc<EventBus>,
    id: u64,
}

impl SummaryWindow {
    /// Starts counting `bus`'s events.
    pub fn open(bus: &Arc<EventBus>) -> SummaryWindow {
        let mut recorder = bus.recorder();
        let id = recorder.next_window;
        recorder.next_window += 1;
        recorder.windows.push((id, SummaryBuilder::default()));
        drop(recorder);
        SummaryWindow {
            bus: Arc::clone(bus),
            id,
        }
    }

    /// What it has counted so far.
    pub fn counted(&self) -> SummaryBuilder {
        let recorder = self.bus.recorder();
        recorder
            .windows
            .iter()
            .find(|(id, _)| *id == self.id)
            .map(|(_, builder)| builder.clone())
            .unwrap_or_default()
    }

    /// The summary of every event since it opened; closes it.
    pub fn finish(self) -> Summary {
        self.counted().summary()
    }
}

impl Drop for SummaryWindow {
    fn drop(&mut self) {
        self.bus.recorder().windows.retain(|(id, _)| *id != self.id);
    }
}

impl Default for EventBus {
    fn default() -> Self {
        EventBus::new()
    }
}

impl fmt::Debug for EventBus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let recorder = self.recorder();
        f.debug_struct("EventBus")
            .field("recorded", &recorder.events.len())
            .field("capacity", &recorder.capacity)
            .field("next_seq", &recorder.next_seq)
            .field("dropped", &recorder.dropped)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::LogLevel;

    fn log(message: &str) -> EventKind {
        EventKind::Log {
            level: LogLevel::Info,
            target: "test".into(),
            message: message.into(),
        }
    }

    fn messages(events: &[Event]) -> Vec<String> {
        events
            .iter()
            .map(|e| match &e.kind {
                EventKind::Log { message, .. } => message.clone(),
                other => other.tag().to_string(),
            })
            .collect()
    }

    #[test]
    fn events_are_numbered_and_timestamped() {
        let bus = EventBus::new();
        let start = bus.now_us();
        assert_eq!(bus.publish(CoreId(0), log("a")), 0);
        assert_eq!(bus.publish_at(CoreId(2), 5.0, log("b")), 1);
        let events = bus.events();
        assert_eq!(messages(&events), ["a", "b"]);
        assert!(events[0].ts_us >= start);
        assert_eq!((events[1].ts_us, events[1].core), (5.0, CoreId(2)));
    }

    fn hit() -> EventKind {
        EventKind::CacheHit {
            function: "f".into(),
            source: crate::events::CacheSource::Memory,
        }
    }

    #[test]
    fn a_summary_window_counts_every_event_however_few_the_recorder_keeps() {
        let bus = Arc::new(EventBus::with_capacity(3));
        bus.publish(CoreId(0), hit());
        let cell = SummaryWindow::open(&bus);
        for _ in 0..10 {
            bus.publish(CoreId(0), hit());
        }
        let inner = SummaryWindow::open(&bus);
        bus.publish(CoreId(1), hit());
        // Another process's events: replayed for the trace, counted by what it sent.
        bus.replay_at(CoreId(2), 0.0, hit());
        let mut theirs = SummaryBuilder::default();
        theirs.add(&Event {
            seq: 0,
            ts_us: 0.0,
            device_us: None,
            core: CoreId(2),
            kind: hit(),
        });
        bus.count(&theirs);
        assert_eq!(inner.finish().cache_hits, 2);
        assert_eq!(cell.counted().summary().cache_hits, 12);
        assert_eq!(bus.events().len(), 3);
        drop(cell);
        bus.publish(CoreId(0), hit());
        assert!(bus.recorder().windows.is_empty());
    }

    #[test]
    fn a_recorder_without_a_limit_keeps_every_event() {
        let bus = EventBus::with_capacity(4);
        for i in 0..6 {
            bus.publish(CoreId(0), log(&i.to_string()));
        }
        bus.set_capacity(2);
        assert_eq!(messages(&bus.events()), ["4", "5"]);
        bus.set_capacity(usize::MAX);
        for i in 6..200 {
            bus.publish(CoreId(0), log(&i.to_string()));
        }
        assert_eq!(bus.events().len(), 196);
        assert_eq!(bus.dropped(), 4);
    }

    #[test]
    fn the_recorder_keeps_the_newest_and_counts_the_rest() {
        let bus = EventBus::with_capacity(3);
        for m in ["a", "b", "c", "d", "e"] {
            bus.publish(CoreId(0), log(m));
        }
        assert_eq!(messages(&bus.events()), ["c", "d", "e"]);
        assert_eq!(bus.dropped(), 2);
        assert_eq!(messages(&bus.since(3)), ["d", "e"]);
        assert_eq!(messages(&bus.since(0)), ["c", "d", "e"]);
        bus.clear();
        assert!(bus.events().is_empty());
        assert_eq!(bus.next_seq(), 5);
        assert_eq!(bus.publish(CoreId(0), log("f")), 5);
    }

    #[test]
    fn each_cores_device_clock_lays_out_its_ops_and_overlaps_collectives() {
        use crate::device::{Bound, ModeledTime};
        use crate::events::{CollectiveEvent, OpEvent, Phase};
        let op = |total_s: f64| {
            EventKind::Op(OpEvent {
                name: "relu".into(),
                inputs: vec![],
                outputs: vec![],
                flops: 0.0,
                bytes: 0.0,
                host_us: 1.0,
                modeled: ModeledTime {
                    compute_s: 0.0,
                    memory_s: 0.0,
                    launch_s: total_s,
                    total_s,
                    bound: Bound::Launch,
                },
                phase: Phase::Forward,
            })
        };
        let collective = EventKind::Collective(CollectiveEvent {
            op: "all_reduce".into(),
            group: vec![0, 1],
            mesh_dim: None,
            bytes: 4,
            host_us: 100.0,
            modeled_us: 4.0,
        });
        // No recording at all: the clock does not depend on what the recorder keeps.
        let bus = EventBus::with_capacity(0);
        bus.publish(CoreId(1), op(10e-6));
        bus.publish_all_at(CoreId(1), 0.0, [op(2e-6), log("no device time")]);
        bus.publish(CoreId(1), collective.clone());
        bus.publish(CoreId(3), op(1e-6));
        bus.clear();
        assert_eq!(bus.device_us(CoreId(0)), 0.0);
        assert!((bus.device_us(CoreId(1)) - 16.0).abs() < 1e-9);
        assert!((bus.device_us(CoreId(3)) - 1.0).abs() < 1e-9);
        assert_eq!(bus.device_us(CoreId(7)), 0.0, "a core nothing ran on");
        assert!(
            (bus.collective_us(CoreId(1)) - 4.0).abs() < 1e-9,
            "its collective part"
        );
        assert_eq!(bus.collective_us(CoreId(3)), 0.0);
        assert!((bus.exposed_collective_us(CoreId(1)) - 4.0).abs() < 1e-9);

        // The collective (12..16) overlaps an op that does not read it (12..15); one that
        // reads it waits for 16.
        let (_, ready) = bus.publish_all_after(CoreId(2), 0.0, 0.0, [op(12e-6)]);
        assert_eq!(ready, 0.0, "an op's output is ready when the op is");
        let (_, ready) = bus.publish_all_after(CoreId(2), 0.0, 0.0, [collective.clone()]);
        assert!((ready - 16.0).abs() < 1e-9);
        bus.publish_all_after(CoreId(2), 0.0, 0.0, [op(3e-6)]);
        assert!((bus.device_us(CoreId(2)) - 16.0).abs() < 1e-9);
        assert!((bus.exposed_collective_us(CoreId(2)) - 1.0).abs() < 1e-9);
        bus.publish_all_after(CoreId(2), 0.0, ready, [op(1e-6)]);
        assert!((bus.device_us(CoreId(2)) - 17.0).abs() < 1e-9);
        assert!((bus.exposed_collective_us(CoreId(2)) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn subscribers_see_every_later_event_and_may_read_the_bus() {
        let bus = Arc::new(EventBus::new());
        bus.publish(CoreId(0), log("before"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        bus.subscribe(Box::new(move |e: &Event| sink.lock().unwrap().push(e.seq)));
        // A subscriber may read the bus without deadlocking.
        let reader = Arc::clone(&bus);
        let read = Arc::new(Mutex::new(0));
        let counted = Arc::clone(&read);
        bus.subscribe(Box::new(move |_: &Event| {
            *counted.lock().unwrap() = reader.events().len();
        }));
        bus.publish(CoreId(0), log("a"));
        bus.publish(CoreId(0), log("b"));
        assert_eq!(*seen.lock().unwrap(), [1, 2]);
        assert_eq!(*read.lock().unwrap(), 3);
    }

    #[test]
    fn publishing_from_threads_keeps_seq_order() {
        let bus = EventBus::new();
        std::thread::scope(|s| {
            for t in 0..4 {
                let bus = &bus;
                s.spawn(move || {
                    for _ in 0..250 {
                        bus.publish(CoreId(t), log("x"));
                    }
                });
            }
        });
        let seqs: Vec<u64> = bus.events().iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (0..1000).collect::<Vec<_>>());
    }
}
