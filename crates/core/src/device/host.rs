//! The real host-memory cap.
//!
//! Simulated HBM is only bookkeeping, but the tensors behind it really live in host RAM. The
//! cap stops a notebook from exhausting the machine (and being killed by the OOM killer, which
//! would lose the session) with a clear error instead.

/// The variable that overrides the host-memory cap, in bytes or with a unit (`4GiB`).
pub const HOST_MEM_LIMIT_VAR: &str = "NEURONLAB_HOST_MEM_LIMIT";

/// The share of physical memory the default cap allows; the rest is left to the OS, the
/// compiler and other processes.
pub const DEFAULT_SHARE: f64 = 0.75;

/// The cap used when physical memory cannot be read (no `/proc/meminfo`).
pub const FALLBACK_LIMIT: u64 = 8 << 30;

/// A bad `NEURONLAB_HOST_MEM_LIMIT` value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid {HOST_MEM_LIMIT_VAR}='{value}': {problem}; \
     expected bytes or a size like 512MiB, 4GiB or 2G"
)]
pub struct HostLimitError {
    /// The value as written.
    pub value: String,
    /// What is wrong with it.
    pub problem: &'static str,
}

/// The host-memory cap for this process: `NEURONLAB_HOST_MEM_LIMIT` when set, else
/// [`DEFAULT_SHARE`] of physical memory, else [`FALLBACK_LIMIT`].
pub fn host_limit_from_env() -> Result<u64, HostLimitError> {
    let var = std::env::var(HOST_MEM_LIMIT_VAR).ok();
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok();
    host_limit(var.as_deref(), meminfo.as_deref())
}

/// [`host_limit_from_env`] with its inputs given: the variable's value and the text of
/// `/proc/meminfo`. An empty variable counts as unset.
pub fn host_limit(var: Option<&str>, meminfo: Option<&str>) -> Result<u64, HostLimitError> {
    match var.map(str::trim).filter(|v| !v.is_empty()) {
        Some(value) => {
            let error = |problem| HostLimitError {
                value: value.to_string(),
                problem,
            };
            match parse_byte_size(value) {
                None => Err(error("not a size")),
                Some(0) => Err(error("the limit must be above zero")),
                Some(bytes) => Ok(bytes),
            }
        }
        None => Ok(meminfo.and_then(mem_total).map_or(FALLBACK_LIMIT, |total| {
            (total as f64 * DEFAULT_SHARE) as u64
        })),
    }
}

/// Parses a byte size: a number (fractions allowed) and an optional unit, case-insensitive.
///
/// `K`, `M`, `G`, `T` and `KiB` .. `TiB` are binary (powers of 1024, as memory limits in
/// Docker or the JVM); `KB` .. `TB` are decimal. No unit or `B` means bytes. Returns `None`
/// for anything else or on overflow.
pub fn parse_byte_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return None,
    };
    if number.contains('.') {
        let bytes = number.parse::<f64>().ok()? * scale as f64;
        // u64::MAX as f64 rounds up to 2^64, so `<` keeps the cast in range.
        (bytes.is_finite() && bytes < u64::MAX as f64).then(|| bytes.round() as u64)
    } else {
        number.parse::<u64>().ok()?.checked_mul(scale)
    }
}

/// Physical memory in bytes, from the `MemTotal:` line of `/proc/meminfo` (given in kB).
pub fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib = line.split_whitespace().nth(1)?.parse::<u64>().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_and_decimal_units() {
        assert_eq!(parse_byte_size("1048576"), Some(1 << 20));
        assert_eq!(parse_byte_size("512MiB"), Some(512 << 20));
        assert_eq!(parse_byte_size("4GiB"), Some(4 << 30));
        assert_eq!(parse_byte_size("2G"), Some(2 << 30));
        assert_eq!(parse_byte_size("2g"), Some(2 << 30));
        assert_eq!(parse_byte_size("1.5 GiB"), Some(1_610_612_736));
        assert_eq!(parse_byte_size("3GB"), Some(3_000_000_000));
        assert_eq!(parse_byte_size("64 b"), Some(64));
        assert_eq!(parse_byte_size("lots"), None);
        assert_eq!(parse_byte_size("4 GiBs"), None);
        assert_eq!(parse_byte_size("1.2.3G"), None);
        assert_eq!(parse_byte_size("99999999999T"), None);
    }

    #[test]
    fn default_is_three_quarters_of_physical_memory() {
        let meminfo = "MemTotal:       16384000 kB\nMemFree:         1000 kB\n";
        assert_eq!(host_limit(None, Some(meminfo)), Ok(12_582_912_000));
        assert_eq!(host_limit(Some(""), Some(meminfo)), Ok(12_582_912_000));
        assert_eq!(host_limit(None, None), Ok(8 << 30));
        assert_eq!(host_limit(None, Some("garbage")), Ok(8 << 30));
    }

    #[test]
    fn the_variable_overrides_and_bad_values_say_how_to_fix_them() {
        assert_eq!(host_limit(Some("2G"), None), Ok(2 << 30));
        let err = host_limit(Some("lots"), None).unwrap_err().to_string();
        assert_eq!(
            err,
            "invalid NEURONLAB_HOST_MEM_LIMIT='lots': not a size; \
             expected bytes or a size like 512MiB, 4GiB or 2G"
        );
        let err = host_limit(Some("0"), None).unwrap_err().to_string();
        assert!(err.contains("the limit must be above zero"));
    }
}
