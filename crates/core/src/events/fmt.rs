//! Human formatting of durations and byte counts, shared by every view.
//!
//! Values print with three significant digits ("1.50 GiB", "48.0 MiB", "340 µs") so columns
//! of them read alike.

/// A duration in seconds, in the largest unit that keeps it at 1 or more (zero is `0 s`): `12.0 ns`,
/// `340 µs`, `1.20 ms`, `2.50 s`.
pub fn duration(seconds: f64) -> String {
    if seconds == 0.0 {
        return "0 s".to_string();
    }
    let units = [("ns", 1e-9), ("µs", 1e-6), ("ms", 1e-3)];
    for (unit, scale) in units {
        let value = seconds / scale;
        if value.abs() < 999.5 {
            return format!("{} {unit}", three_digits(value));
        }
    }
    format!("{} s", three_digits(seconds))
}

/// A duration in microseconds (the unit events carry), formatted as [`duration`].
pub fn duration_us(us: f64) -> String {
    duration(us * 1e-6)
}

/// A byte count in binary units: `512 B`, `1.50 KiB`, `48.0 MiB`, `24.0 GiB`.
pub fn bytes(n: u64) -> String {
    if n < 1000 {
        return format!("{n} B");
    }
    let units = ["KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    for unit in units {
        value /= 1024.0;
        if value < 999.5 {
            return format!("{} {unit}", three_digits(value));
        }
    }
    format!("{} PiB", three_digits(value / 1024.0))
}

/// [`bytes`] followed by the exact count, for error messages: `1.50 GiB (1610612736 bytes)`.
pub fn bytes_exact(n: u64) -> String {
    if n < 1000 {
        format!("{n} B")
    } else {
        format!("{} ({n} bytes)", bytes(n))
    }
}

/// Three significant digits for values below 1000.
fn three_digits(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude >= 99.95 {
        format!("{value:.0}")
    } else if magnitude >= 9.995 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_pick_a_unit() {
        assert_eq!(duration(0.0), "0 s");
        assert_eq!(duration(12e-9), "12.0 ns");
        assert_eq!(duration(340e-6), "340 µs");
        assert_eq!(duration(1.2e-3), "1.20 ms");
        assert_eq!(duration(2.5), "2.50 s");
        assert_eq!(duration(999.7e-6), "1.00 ms");
        assert_eq!(duration(9.996e-6), "10.0 µs");
        assert_eq!(duration_us(79.42), "79.4 µs");
    }

    #[test]
    fn bytes_use_binary_units() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.50 KiB");
        assert_eq!(bytes(1000), "0.98 KiB");
        assert_eq!(bytes(48 << 20), "48.0 MiB");
        assert_eq!(bytes(512 << 20), "512 MiB");
        assert_eq!(bytes(24 << 30), "24.0 GiB");
        assert_eq!(bytes_exact(3 << 29), "1.50 GiB (1610612736 bytes)");
        assert_eq!(bytes_exact(7), "7 B");
    }
}
