//! Per-core HBM accounting and the process-wide host-memory cap.
//!
//! Every tensor's storage reserves its bytes here first. Two limits apply: the core's HBM
//! quota (simulated: what the real device would hold) and the host cap (real: the bytes do
//! live in host RAM). The [`Allocation`] guard gives the bytes back when the storage drops.
//! Each core also counts its bytes per [`Role`], now and at its peak.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};

use super::host::HOST_MEM_LIMIT_VAR;
use super::role::{Role, RoleBytes};
use super::topology::{CoreId, Topology, TopologyError};
use crate::events::fmt::{bytes, bytes_exact};
use crate::events::{EventBus, EventKind, MemoryAction, MemoryEvent};

/// Why a reservation failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MemoryError {
    /// The core's simulated HBM quota would be exceeded.
    #[error(
        "out of device memory on {core}: asked for {} but {} of its {} HBM is in use; \
         free tensors you no longer need or use a smaller shape",
        bytes_exact(*requested), bytes_exact(*in_use), bytes(*capacity)
    )]
    OutOfMemory {
        /// The core asked.
        core: CoreId,
        /// Bytes asked for.
        requested: u64,
        /// Bytes already reserved on the core.
        in_use: u64,
        /// The core's HBM capacity.
        capacity: u64,
    },
    /// The process-wide host-memory cap would be exceeded.
    #[error(
        "host memory limit reached on {core}: asked for {} but {} of the {} host limit is in \
         use; free tensors, use a smaller shape, or raise {HOST_MEM_LIMIT_VAR} (e.g. \
         {HOST_MEM_LIMIT_VAR}=16GiB)",
        bytes_exact(*requested), bytes_exact(*in_use), bytes(*limit)
    )]
    HostLimit {
        /// The core asked.
        core: CoreId,
        /// Bytes asked for.
        requested: u64,
        /// Bytes reserved across all cores.
        in_use: u64,
        /// The host cap.
        limit: u64,
    },
    /// A tensor, or a view, describes more than this host could ever hold: more elements
    /// than 64 bits count, or more bytes than the host cap even in the densest form a kernel
    /// may make of it (f64, 8 bytes an element).
    #[error(
        "{shape} has {elements} elements: more than this host could ever materialize under its \
         {} limit ({HOST_MEM_LIMIT_VAR}); nothing this large can exist, even as a view",
        bytes(*limit)
    )]
    TooLarge {
        /// The shape, as `f32[2, 3]`.
        shape: String,
        /// Its element count, in words (it may not fit in 64 bits).
        elements: String,
        /// The host cap.
        limit: u64,
    },
    /// The core is not one this process sees.
    #[error(transparent)]
    UnknownCore(#[from] TopologyError),
}

/// Memory use of one core.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemStats {
    /// Bytes reserved now.
    pub in_use: u64,
    /// Highest `in_use` since creation or the last [`DeviceMemory::reset_peak`].
    pub peak: u64,
    /// The core's HBM capacity.
    pub capacity: u64,
    /// Live allocations.
    pub allocations: u64,
    /// `in_use` per role.
    pub by_role: RoleBytes,
    /// `by_role` when `peak` was reached: what the core held at its peak.
    pub at_peak: RoleBytes,
}

/// HBM accounting for every visible core plus the host cap. Shared as `Arc<DeviceMemory>`.
pub struct DeviceMemory {
    capacity: u64,
    cores: Vec<Mutex<MemStats>>,
    host_in_use: AtomicU64,
    /// The most `host_in_use` has been since creation or [`DeviceMemory::reset_host_peak`].
    host_peak: AtomicU64,
    host_limit: u64,
    bus: Option<Arc<EventBus>>,
}

impl DeviceMemory {
    /// Accounting for `topology`'s visible cores, with a host cap of `host_limit` bytes.
    /// Alloc and free events go to `bus` when given.
    pub fn new(topology: &Topology, host_limit: u64, bus: Option<Arc<EventBus>>) -> Arc<Self> {
        let capacity = topology.hbm_bytes_per_core();
        let empty = MemStats {
            capacity,
            ..MemStats::default()
        };
        Arc::new(DeviceMemory {
            capacity,
            cores: (0..topology.num_cores())
                .map(|_| Mutex::new(empty))
                .collect(),
            host_in_use: AtomicU64::new(0),
            host_peak: AtomicU64::new(0),
            host_limit,
            bus,
        })
    }

    /// Reserves `bytes` on `core`; the bytes come back when the [`Allocation`] drops.
    pub fn reserve(self: &Arc<Self>, core: CoreId, bytes: u64) -> Result<Allocation, MemoryError> {
        self.reserve_at(core, bytes, self.now_us())
    }

    /// [`DeviceMemory::reserve`] for an op that started at `at_us` on the bus clock: the alloc
    /// event carries that time, which saves reading the clock again on every op's path.
    pub fn reserve_at(
        self: &Arc<Self>,
        core: CoreId,
        bytes: u64,
        at_us: f64,
    ) -> Result<Allocation, MemoryError> {
        let (allocation, event) = self.reserve_unpublished(core, bytes)?;
        if let Some(bus) = &self.bus {
            bus.publish_at(core, at_us, EventKind::Memory(event));
        }
        Ok(allocation)
    }

    /// Reserves like [`DeviceMemory::reserve`] but leaves the alloc event to the caller: the
    /// runtime, whose memory publishes on the runtime's own bus, publishes an op's alloc events
    /// together with the op's event, under one lock of the bus instead of one per event.
    pub fn reserve_unpublished(
        self: &Arc<Self>,
        core: CoreId,
        bytes: u64,
    ) -> Result<(Allocation, MemoryEvent), MemoryError> {
        let mut stats = self.lock(core)?;
        if stats.in_use.saturating_add(bytes) > self.capacity {
            return Err(MemoryError::OutOfMemory {
                core,
                requested: bytes,
                in_use: stats.in_use,
                capacity: self.capacity,
            });
        }
        // Reserve host bytes atomically against other cores' reservations.
        let before = self
            .host_in_use
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes)
                    .filter(|&total| total <= self.host_limit)
            })
            .map_err(|in_use| MemoryError::HostLimit {
                core,
                requested: bytes,
                in_use,
                limit: self.host_limit,
            })?;
        self.host_peak.fetch_max(before + bytes, Ordering::AcqRel);
        stats.in_use += bytes;
        stats.by_role[Role::Other] += bytes;
        if stats.in_use > stats.peak {
            stats.peak = stats.in_use;
            stats.at_peak = stats.by_role;
        }
        stats.allocations += 1;
        let event = change(MemoryAction::Alloc, bytes, &stats);
        let allocation = Allocation {
            memory: Arc::clone(self),
            core,
            bytes,
            role: AtomicU8::new(Role::Other as u8),
        };
        Ok((allocation, event))
    }

    /// The memory use of `core`.
    pub fn stats(&self, core: CoreId) -> Result<MemStats, MemoryError> {
        Ok(*self.lock(core)?)
    }

    /// Starts a new peak measurement on `core` from its current use.
    pub fn reset_peak(&self, core: CoreId) -> Result<(), MemoryError> {
        let mut stats = self.lock(core)?;
        stats.peak = stats.in_use;
        stats.at_peak = stats.by_role;
        Ok(())
    }

    /// Bytes reserved across all cores (what the host really holds).
    pub fn host_in_use(&self) -> u64 {
        self.host_in_use.load(Ordering::Acquire)
    }

    /// The most bytes reserved across all cores at once since the accounting was created or
    /// [`DeviceMemory::reset_host_peak`]: every rank's live tensors together.
    pub fn host_peak(&self) -> u64 {
        self.host_peak.load(Ordering::Acquire)
    }

    /// Starts a new host peak measurement from the current use.
    pub fn reset_host_peak(&self) {
        self.host_peak.store(self.host_in_use(), Ordering::Release);
    }

    /// The host cap in bytes.
    pub fn host_limit(&self) -> u64 {
        self.host_limit
    }

    fn lock(&self, core: CoreId) -> Result<MutexGuard<'_, MemStats>, MemoryError> {
        // Not `ok_or`: that builds (and drops) the error on every call, on every op's path.
        let Some(slot) = self.cores.get(core.0 as usize) else {
            return Err(TopologyError::UnknownCore {
                core,
                visible: self.cores.len() as u32,
            }
            .into());
        };
        // The counters stay consistent even if a holder panicked: every update is one step.
        Ok(slot.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn release(&self, core: CoreId, bytes: u64, role: Role) {
        let Ok(mut stats) = self.lock(core) else {
            return; // Unreachable: an Allocation only exists for a known core.
        };
        stats.in_use -= bytes;
        stats.by_role[role] -= bytes;
        stats.allocations -= 1;
        let event = change(MemoryAction::Free, bytes, &stats);
        // Publish outside the lock: a subscriber may ask for stats.
        drop(stats);
        self.host_in_use.fetch_sub(bytes, Ordering::AcqRel);
        if let Some(bus) = &self.bus {
            bus.publish(core, EventKind::Memory(event));
        }
    }

    /// The bus clock now (0 without a bus: nothing is stamped then).
    fn now_us(&self) -> f64 {
        self.bus.as_ref().map_or(0.0, |bus| bus.now_us())
    }
}

/// The event of a change of `bytes` that left a core at `stats`.
fn change(action: MemoryAction, bytes: u64, stats: &MemStats) -> MemoryEvent {
    MemoryEvent {
        action,
        bytes,
        in_use: stats.in_use,
        peak: stats.peak,
    }
}

impl fmt::Debug for DeviceMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceMemory")
            .field("cores", &self.cores.len())
            .field("capacity", &self.capacity)
            .field("host_in_use", &self.host_in_use())
            .field("host_limit", &self.host_limit)
            .finish_non_exhaustive()
    }
}

/// Reserved bytes on one core, given back (with a free event) on drop.
pub struct Allocation {
    memory: Arc<DeviceMemory>,
    core: CoreId,
    bytes: u64,
    /// A [`Role`] code: changed under the core's lock, so the per-role counts stay exact.
    role: AtomicU8,
}

impl Allocation {
    /// The core the bytes are reserved on.
    pub fn core(&self) -> CoreId {
        self.core
    }

    /// The number of bytes reserved.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// What the bytes hold.
    pub fn role(&self) -> Role {
        Role::from_code(self.role.load(Ordering::Relaxed)).unwrap_or(Role::Other)
    }

    /// Counts the bytes as `role` from now on. At the core's peak (nothing reserved since),
    /// the split at the peak follows: a collective's output is named just after it is
    /// reserved, and may be what made the peak.
    pub fn set_role(&self, role: Role) {
        let Ok(mut stats) = self.memory.lock(self.core) else {
            return;
        };
        let old = self.role();
        if old == role {
            return;
        }
        self.role.store(role as u8, Ordering::Relaxed);
        stats.by_role[old] -= self.bytes;
        stats.by_role[role] += self.bytes;
        if stats.in_use == stats.peak {
            stats.at_peak = stats.by_role;
        }
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        self.memory.release(self.core, self.bytes, self.role());
    }
}

impl fmt::Debug for Allocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Allocation({} on {})", bytes(self.bytes), self.core)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Event;

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    fn trn2_single_chip(host_limit: u64) -> Arc<DeviceMemory> {
        let topology = Topology::preset("trn2.3xlarge", None).unwrap();
        DeviceMemory::new(&topology, host_limit, None)
    }

    #[test]
    fn roles_count_bytes_now_and_at_the_peak() {
        let mem = trn2_single_chip(GIB);
        let core = CoreId(0);
        let weights = mem.reserve(core, 4 * MIB).unwrap();
        weights.set_role(Role::Parameter);
        let saved = mem.reserve(core, 2 * MIB).unwrap();
        saved.set_role(Role::Activation);
        let gathered = mem.reserve(core, MIB).unwrap();
        // Named just after it made the peak: the split at the peak follows.
        gathered.set_role(Role::CollectiveBuffer);
        drop(saved);
        let _temp = mem.reserve(core, MIB).unwrap();
        let stats = mem.stats(core).unwrap();
        assert_eq!((stats.in_use, stats.peak), (6 * MIB, 7 * MIB));
        assert_eq!(stats.by_role[Role::Parameter], 4 * MIB);
        assert_eq!(stats.by_role[Role::Activation], 0);
        assert_eq!(stats.by_role[Role::Other], MIB);
        assert_eq!(stats.at_peak[Role::Activation], 2 * MIB);
        assert_eq!(stats.at_peak[Role::CollectiveBuffer], MIB);
        assert_eq!(stats.at_peak[Role::Other], 0);
        assert_eq!(stats.at_peak.total(), stats.peak);
        mem.reset_peak(core).unwrap();
        let stats = mem.stats(core).unwrap();
        assert_eq!(stats.at_peak, stats.by_role);
        drop((weights, gathered));
        assert_eq!(mem.stats(core).unwrap().by_role.total(), MIB);
    }

    #[test]
    fn allocations_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Allocation>();
        assert_send_sync::<DeviceMemory>();
    }

    #[test]
    fn reservations_are_counted_and_given_back() {
        let memory = trn2_single_chip(64 * GIB);
        let a = memory.reserve(CoreId(1), 3 * MIB).unwrap();
        let b = memory.reserve(CoreId(1), MIB).unwrap();
        let stats = memory.stats(CoreId(1)).unwrap();
        assert_eq!(
            stats,
            MemStats {
                in_use: 4 * MIB,
                peak: 4 * MIB,
                capacity: 24 * GIB,
                allocations: 2,
                by_role: stats.by_role,
                at_peak: stats.at_peak,
            }
        );
        assert_eq!(stats.by_role[Role::Other], 4 * MIB);
        assert_eq!(memory.host_in_use(), 4 * MIB);
        let c = memory.reserve(CoreId(0), 2 * MIB).unwrap();
        drop(c);
        assert_eq!(memory.host_peak(), 6 * MIB, "both cores' bytes at once");
        drop(a);
        memory.reset_host_peak();
        assert_eq!(memory.host_peak(), MIB);
        let stats = memory.stats(CoreId(1)).unwrap();
        assert_eq!(
            (stats.in_use, stats.peak, stats.allocations),
            (MIB, 4 * MIB, 1)
        );
        memory.reset_peak(CoreId(1)).unwrap();
        assert_eq!(memory.stats(CoreId(1)).unwrap().peak, MIB);
        drop(b);
        assert_eq!(memory.host_in_use(), 0);
        assert_eq!(memory.stats(CoreId(0)).unwrap().in_use, 0);
    }

    #[test]
    fn exceeding_a_core_quota_names_the_core_and_the_fix() {
        let memory = trn2_single_chip(64 * GIB);
        let _held = memory.reserve(CoreId(3), 23 * GIB).unwrap();
        let err = memory.reserve(CoreId(3), 3 * GIB / 2).unwrap_err();
        assert_eq!(
            err.to_string(),
            "out of device memory on neuron:3: asked for 1.50 GiB (1610612736 bytes) but \
             23.0 GiB (24696061952 bytes) of its 24.0 GiB HBM is in use; free tensors you no \
             longer need or use a smaller shape"
        );
        // Another core has its own quota.
        assert!(memory.reserve(CoreId(2), 3 * GIB / 2).is_ok());
    }

    #[test]
    fn the_host_cap_spans_all_cores() {
        let memory = trn2_single_chip(GIB);
        let _a = memory.reserve(CoreId(0), 768 * MIB).unwrap();
        let err = memory.reserve(CoreId(1), 512 * MIB).unwrap_err();
        assert_eq!(
            err,
            MemoryError::HostLimit {
                core: CoreId(1),
                requested: 512 * MIB,
                in_use: 768 * MIB,
                limit: GIB
            }
        );
        assert_eq!(
            err.to_string(),
            "host memory limit reached on neuron:1: asked for 512 MiB (536870912 bytes) but \
             768 MiB (805306368 bytes) of the 1.00 GiB host limit is in use; free tensors, use \
             a smaller shape, or raise NEURONLAB_HOST_MEM_LIMIT (e.g. \
             NEURONLAB_HOST_MEM_LIMIT=16GiB)"
        );
        // The failed reservation left nothing behind.
        assert_eq!(memory.stats(CoreId(1)).unwrap().in_use, 0);
        assert_eq!(memory.host_in_use(), 768 * MIB);
    }

    #[test]
    fn unknown_cores_are_errors() {
        let memory = trn2_single_chip(GIB);
        let err = memory.reserve(CoreId(4), 1).unwrap_err().to_string();
        assert!(err.starts_with("neuron:4 does not exist: this process sees 4 NeuronCore(s)"));
        assert!(memory.stats(CoreId(9)).is_err());
    }

    #[test]
    fn alloc_and_free_are_published() {
        let bus = Arc::new(EventBus::new());
        let topology = Topology::preset("trn1.2xlarge", None).unwrap();
        let memory = DeviceMemory::new(&topology, GIB, Some(Arc::clone(&bus)));
        let a = memory.reserve(CoreId(1), 100).unwrap();
        let b = memory.reserve(CoreId(1), 50).unwrap();
        drop(a);
        drop(b);
        let seen: Vec<(CoreId, MemoryEvent)> = bus
            .events()
            .into_iter()
            .filter_map(|Event { core, kind, .. }| match kind {
                EventKind::Memory(m) => Some((core, m)),
                _ => None,
            })
            .collect();
        let expect = |action, bytes, in_use| MemoryEvent {
            action,
            bytes,
            in_use,
            peak: 150,
        };
        assert_eq!(
            seen,
            [
                (
                    CoreId(1),
                    MemoryEvent {
                        peak: 100,
                        ..expect(MemoryAction::Alloc, 100, 100)
                    }
                ),
                (CoreId(1), expect(MemoryAction::Alloc, 50, 150)),
                (CoreId(1), expect(MemoryAction::Free, 100, 50)),
                (CoreId(1), expect(MemoryAction::Free, 50, 0)),
            ]
        );
    }

    #[test]
    fn concurrent_reservations_balance() {
        let memory = trn2_single_chip(GIB);
        std::thread::scope(|s| {
            for t in 0..4 {
                let memory = &memory;
                s.spawn(move || {
                    for _ in 0..1000 {
                        let _a = memory.reserve(CoreId(t % 2), 4096).unwrap();
                    }
                });
            }
        });
        assert_eq!(memory.host_in_use(), 0);
        assert_eq!(memory.stats(CoreId(0)).unwrap().allocations, 0);
    }
}
