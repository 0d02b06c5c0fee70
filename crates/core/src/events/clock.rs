//! The bus clock: microseconds since the bus was created.
//!
//! Every op reads it two or three times (its event's start, its host time, its outputs'
//! frees), so a read must be cheap. Where the kernel itself keeps time with the CPU's
//! time-stamp counter (Linux's clocksource is `tsc`: the counter is invariant and in step
//! across cores), the clock reads that counter directly, about 22 ns a read on the VMs this
//! runs on against about 50 ns for `Instant::now` through the vDSO, which adds a seqlock and
//! scaling to the same counter. Ticks become microseconds at a rate measured once per
//! process against `Instant`. Everywhere else the clock reads `Instant`.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long the tick rate is measured against `Instant`, once per process. The rate's error
/// is about the two `Instant` reads' jitter over this span: tens of nanoseconds over 2 ms,
/// some tens of parts per million, far below the spread of the host times it scales.
const CALIBRATION: Duration = Duration::from_millis(2);

/// A monotonic clock in microseconds from its creation.
#[derive(Debug)]
pub(crate) struct Clock {
    origin: Origin,
}

/// Where a [`Clock`] counts from.
#[derive(Debug)]
enum Origin {
    /// The time-stamp counter at creation, and microseconds per tick.
    Tsc { ticks: u64, us_per_tick: f64 },
    /// `Instant` at creation.
    Instant(Instant),
}

impl Clock {
    /// A clock reading 0 now.
    pub(crate) fn new() -> Clock {
        let origin = match tsc_rate() {
            Some(us_per_tick) => Origin::Tsc {
                ticks: ticks(),
                us_per_tick,
            },
            None => Origin::Instant(Instant::now()),
        };
        Clock { origin }
    }

    /// Microseconds since the clock was created.
    #[inline]
    pub(crate) fn now_us(&self) -> f64 {
        match self.origin {
            Origin::Tsc {
                ticks: t0,
                us_per_tick,
            } => ticks().saturating_sub(t0) as f64 * us_per_tick,
            Origin::Instant(t0) => t0.elapsed().as_secs_f64() * 1e6,
        }
    }

    /// True when the clock reads the time-stamp counter.
    #[cfg(test)]
    fn reads_tsc(&self) -> bool {
        matches!(self.origin, Origin::Tsc { .. })
    }
}

/// Microseconds per time-stamp counter tick, measured once; `None` where the counter is not
/// the kernel's clocksource.
fn tsc_rate() -> Option<f64> {
    static RATE: OnceLock<Option<f64>> = OnceLock::new();
    *RATE.get_or_init(|| {
        let source = std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .ok()?;
        if !cfg!(target_arch = "x86_64") || source.trim() != "tsc" {
            return None;
        }
        let (t0, c0) = (Instant::now(), ticks());
        while t0.elapsed() < CALIBRATION {
            std::hint::spin_loop();
        }
        let (t1, c1) = (Instant::now(), ticks());
        let rate = (t1 - t0).as_secs_f64() * 1e6 / c1.checked_sub(c0)?.max(1) as f64;
        // A counter between 100 MHz and 100 GHz; anything else is not a usable counter.
        (1e-5..1e-2).contains(&rate).then_some(rate)
    })
}

/// The time-stamp counter (0 where there is none; [`tsc_rate`] is `None` there).
#[inline]
fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC exists on every x86-64 CPU and reads a counter; it has no
        // preconditions.
        unsafe { std::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_keeps_pace_with_instant() {
        let clock = Clock::new();
        let started = Instant::now();
        let from = clock.now_us();
        std::thread::sleep(Duration::from_millis(50));
        let to = clock.now_us();
        let real_us = started.elapsed().as_secs_f64() * 1e6;
        // Both spans bracket the same sleep; they differ by the reads' own cost and the
        // rate's error, both far below 1%.
        let measured = to - from;
        assert!(
            (measured - real_us).abs() < 0.01 * real_us,
            "clock measured {measured:.1} µs over {real_us:.1} µs of Instant (tsc: {})",
            clock.reads_tsc()
        );
    }

    #[test]
    fn readings_never_go_back_across_threads() {
        let clock = std::sync::Arc::new(Clock::new());
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let clock = clock.clone();
                std::thread::spawn(move || {
                    let mut last = clock.now_us();
                    for _ in 0..100_000 {
                        let now = clock.now_us();
                        assert!(now >= last, "{now} µs read after {last} µs");
                        last = now;
                    }
                    last
                })
            })
            .collect();
        let last = handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .fold(0.0, f64::max);
        assert!(clock.now_us() >= last);
    }
}
