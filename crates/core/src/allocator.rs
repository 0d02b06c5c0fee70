//! The process allocator the front ends (and the benchmarks) run on: mimalloc, told to keep
//! freed memory mapped for a while.
//!
//! A training loop frees and reallocates the same large buffers every step (activations,
//! gradients, a compiled program's intermediates). mimalloc returns freed memory to the OS
//! after its purge delay (one second by default), and the next step then pays the kernel to
//! fault in and zero every page again: in the MLP training step that was a tenth of the step's
//! time. [`keep_freed_memory`] raises the delay to [`FREED_MEMORY_KEPT`], longer than any
//! step a researcher waits on, so the next step reuses the same pages; memory an idle session
//! freed still goes back to the OS after that delay.

use std::time::Duration;

pub use mimalloc::MiMalloc;

/// How long freed memory stays mapped for reuse before mimalloc returns it to the OS.
pub const FREED_MEMORY_KEPT: Duration = Duration::from_secs(10);

/// mimalloc's `mi_option_purge_delay` (its number in `mimalloc.h`'s `mi_option_e`), which the
/// Rust bindings do not name.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Sets mimalloc's purge delay to [`FREED_MEMORY_KEPT`]. Called first thing by each binary
/// that runs on mimalloc; harmless where mimalloc is not the global allocator.
pub fn keep_freed_memory() {
    // SAFETY: mi_option_set only stores the option's value; it is safe to call at any time.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, FREED_MEMORY_KEPT.as_millis() as _) };
}

/// Returns to the OS the freed memory mimalloc is keeping for reuse, now rather than after
/// [`FREED_MEMORY_KEPT`]. A measurement of one run's memory calls it first, so what earlier
/// runs freed is not counted as the run's.
pub fn release_freed_memory() {
    // SAFETY: mi_collect only walks mimalloc's own structures; it is safe to call at any time.
    unsafe { libmimalloc_sys::mi_collect(true) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Minor page faults of this process so far (`minflt`, field 10 of /proc/self/stat).
    fn minor_faults() -> u64 {
        let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
        // The command name, field 2, may hold spaces; the fields after it do not.
        let after_name = &stat[stat.rfind(')').expect("a command name") + 2..];
        after_name
            .split(' ')
            .nth(7)
            .expect("minflt")
            .parse()
            .expect("a count")
    }

    /// Page faults of writing a fresh 64 MiB mimalloc block, `gap` after an equal one was
    /// freed, with mimalloc's due purges carried out in between.
    fn faults_of_reallocating_after(gap: Duration) -> u64 {
        const BYTES: usize = 64 << 20;
        let touch = |p: *mut u8| {
            for page in (0..BYTES).step_by(4096) {
                // SAFETY: `p` holds BYTES bytes.
                unsafe { p.add(page).write_volatile(1) };
            }
        };
        // SAFETY: blocks from mi_malloc of BYTES, written within bounds, freed once.
        unsafe {
            let first = libmimalloc_sys::mi_malloc(BYTES).cast::<u8>();
            touch(first);
            libmimalloc_sys::mi_free(first.cast());
            std::thread::sleep(gap);
            libmimalloc_sys::mi_collect(false);
            let before = minor_faults();
            let second = libmimalloc_sys::mi_malloc(BYTES).cast::<u8>();
            touch(second);
            let faults = minor_faults() - before;
            libmimalloc_sys::mi_free(second.cast());
            faults
        }
    }

    #[test]
    fn freed_memory_is_reused_without_faulting_its_pages_in_again() {
        keep_freed_memory();
        // Longer than mimalloc's default delay of one second, well inside ours.
        let faults = faults_of_reallocating_after(Duration::from_millis(1500));
        // A purged block faults in all 16384 of its pages again.
        assert!(
            faults < 1000,
            "writing a reallocated 64 MiB block faulted {faults} pages in"
        );
    }
}
