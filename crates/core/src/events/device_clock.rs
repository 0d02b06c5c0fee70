//! Each core's modeled device clock, with two streams: compute (ops and fused kernels, one
//! after another) and communication (collectives, one after another). A collective starts
//! when the core has issued it (compute has reached it) and the previous collective is
//! done, and runs while compute goes on; an op that reads a collective's output waits for
//! it. So communication overlaps the compute that does not depend on it, as a NeuronCore's
//! collective engine runs beside its compute engines, and what is left over is exposed.
//!
//! The clock is the makespan of both streams. It splits exactly into compute (the ops'
//! modeled times) and exposed communication (the compute stream's waits, plus any
//! collective still running after the last op); the rest of the collectives' time overlapped
//! compute.

/// One core's two streams, in microseconds since the bus was created.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct CoreClock {
    /// When the compute stream's last op ends.
    compute_end: f64,
    /// When the communication stream's last collective ends.
    comm_end: f64,
    /// The modeled time of every op.
    compute_us: f64,
    /// The modeled time of every collective.
    collective_us: f64,
}

impl CoreClock {
    /// An op of `us` whose inputs are ready at `ready_us`: it starts when compute is free and
    /// its inputs are there.
    /// Returns when it starts.
    pub(super) fn op(&mut self, ready_us: f64, us: f64) -> f64 {
        let start = self.compute_end.max(ready_us);
        self.compute_end = start + us;
        self.compute_us += us;
        start
    }

    /// A collective of `us`, issued now; returns when it starts and when its output is ready.
    pub(super) fn collective(&mut self, us: f64) -> (f64, f64) {
        let start = self.comm_end.max(self.compute_end);
        self.comm_end = start + us;
        self.collective_us += us;
        (start, self.comm_end)
    }

    /// The clock: when both streams are done.
    pub(super) fn now(&self) -> f64 {
        self.compute_end.max(self.comm_end)
    }

    /// The modeled time of every collective, overlapped or not.
    pub(super) fn collective_us(&self) -> f64 {
        self.collective_us
    }

    /// The part of [`CoreClock::now`] that is not compute: communication nothing overlapped.
    pub(super) fn exposed_us(&self) -> f64 {
        (self.now() - self.compute_us).max(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_collective_overlaps_the_ops_that_do_not_read_it() {
        let mut c = CoreClock::default();
        c.op(0.0, 10.0);
        let (start, ready) = c.collective(6.0);
        assert_eq!((start, ready), (10.0, 16.0));
        assert_eq!(c.op(0.0, 4.0), 10.0, "independent: 10..14, overlapping");
        assert_eq!(
            (c.now(), c.exposed_us()),
            (16.0, 2.0),
            "2 µs of it still runs after"
        );
        assert_eq!(c.op(ready, 1.0), 16.0, "reads it: waits");
        assert_eq!((c.now(), c.exposed_us()), (17.0, 2.0));
        assert_eq!(c.collective_us(), 6.0);
    }

    #[test]
    fn collectives_queue_on_their_stream_and_a_reader_waits_for_each() {
        let mut c = CoreClock::default();
        let first = c.collective(5.0);
        let second = c.collective(5.0);
        assert_eq!((first, second), ((0.0, 5.0), (5.0, 10.0)));
        c.op(second.1, 2.0);
        assert_eq!(
            (c.now(), c.exposed_us()),
            (12.0, 10.0),
            "nothing to overlap with"
        );
    }
}
