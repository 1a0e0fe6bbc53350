//! Human-friendly quantities on the command line: sizes (`512`, `4KiB`, `10MiB`, `1.5GB`),
//! durations (`500ms`, `30s`, `2h`) and counts (`10k`, `1.5M`).
//!
//! Binary suffixes (`KiB`, `MiB`, `GiB`, `TiB`) and the short forms `k`, `m`, `g`, `t` (with or
//! without a trailing `b`, any case) are powers of 1024, as docker and most registry tooling
//! use them; `KB`, `MB`, `GB`, `TB` spelled with a capital `B` are powers of 1000. Every parser
//! is total: it returns an error message, never panics, on any input.

use std::fmt;
use std::time::Duration;

/// A number of bytes that prints itself in binary units (`1.0 MiB`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub const fn bytes(self) -> u64 {
        self.0
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
        if self.0 < 1024 {
            return write!(f, "{} B", self.0);
        }
        let mut value = self.0 as f64 / 1024.0;
        let mut unit = 0;
        while value >= 1024.0 && unit + 1 < UNITS.len() {
            value /= 1024.0;
            unit += 1;
        }
        write!(f, "{value:.1} {}", UNITS[unit])
    }
}

impl std::str::FromStr for ByteSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_size(s).map(ByteSize)
    }
}

/// Splits `"1.5GiB"` into (`"1.5"`, `"GiB"`).
fn split_number(s: &str) -> (&str, &str) {
    let end = s
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_digit() || *c == '.' || *c == '_'))
        .map_or(s.len(), |(i, _)| i);
    (&s[..end], s[end..].trim())
}

fn parse_number(number: &str, original: &str) -> Result<f64, String> {
    let cleaned: String = number.chars().filter(|c| *c != '_').collect();
    if cleaned.is_empty() {
        return Err(format!("'{original}' does not start with a number"));
    }
    cleaned
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .ok_or_else(|| format!("'{original}' is not a number"))
}

fn scale(value: f64, multiplier: f64, original: &str) -> Result<u64, String> {
    let total = value * multiplier;
    if !(0.0..=u64::MAX as f64).contains(&total) {
        return Err(format!("'{original}' is out of range"));
    }
    if total.fract() != 0.0 {
        return Err(format!("'{original}' is not a whole number of units"));
    }
    Ok(total as u64)
}

/// Parses a byte size such as `512`, `4KiB`, `10MiB`, `1GiB`, `64k` or `1.5GB`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let trimmed = s.trim();
    let (number, unit) = split_number(trimmed);
    let value = parse_number(number, s)?;
    let multiplier: f64 = match unit {
        "" | "B" | "b" => 1.0,
        "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        other => match other.to_ascii_lowercase().as_str() {
            "k" | "kb" | "kib" => 1024.0,
            "m" | "mb" | "mib" => 1024.0 * 1024.0,
            "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
            "t" | "tb" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
            _ => {
                return Err(format!(
                    "'{s}' has an unknown size unit '{unit}' (use B, KiB, MiB, GiB, TiB, or KB, MB, GB, TB)"
                ))
            }
        },
    };
    scale(value, multiplier, s)
}

/// Parses a count such as `100`, `10k`, `1.5M` or `2G` (powers of 1000).
pub fn parse_count(s: &str) -> Result<u64, String> {
    let trimmed = s.trim();
    let (number, unit) = split_number(trimmed);
    let value = parse_number(number, s)?;
    let multiplier = match unit {
        "" => 1.0,
        "k" | "K" => 1e3,
        "m" | "M" => 1e6,
        "g" | "G" | "b" | "B" => 1e9,
        _ => {
            return Err(format!(
                "'{s}' has an unknown count suffix '{unit}' (use k, M or G)"
            ))
        }
    };
    scale(value, multiplier, s)
}

/// Parses a duration such as `500ms`, `30s`, `2h` or `1h 30m`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let trimmed = s.trim();
    // A bare number is read as seconds, the unit people mean when they type `--duration 30`.
    if let Ok(seconds) = trimmed.parse::<f64>() {
        if (0.0..1e12).contains(&seconds) {
            return Ok(Duration::from_secs_f64(seconds));
        }
    }
    humantime::parse_duration(trimmed).map_err(|e| format!("'{s}' is not a duration ({e})"))
}

/// Formats a duration for people: `850µs`, `12.3ms`, `4.20s`, `2m03s`.
pub fn format_duration(d: Duration) -> String {
    let micros = d.as_micros();
    if micros < 1_000 {
        format!("{micros}µs")
    } else if micros < 1_000_000 {
        format!("{:.1}ms", micros as f64 / 1e3)
    } else if micros < 60_000_000 {
        format!("{:.2}s", micros as f64 / 1e6)
    } else {
        let secs = d.as_secs();
        format!("{}m{:02}s", secs / 60, secs % 60)
    }
}

/// The ending of a counted noun: `""` for one, `"s"` for any other count ("1 core",
/// "2 cores").
pub fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// `1234567` → `1,234,567`.
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouped_thousands() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(1234567), "1,234,567");
    }
    use proptest::prelude::*;

    #[test]
    fn sizes_from_the_cli_contract() {
        let cases = [
            ("512", 512),
            ("4KiB", 4096),
            ("10MiB", 10 * 1024 * 1024),
            ("1GiB", 1 << 30),
            ("64k", 65536),
            ("1m", 1 << 20),
            ("1.5GiB", 3 << 29),
            ("2KB", 2000),
            ("1MB", 1_000_000),
            ("256 KiB", 256 * 1024),
            ("0", 0),
        ];
        for (input, want) in cases {
            assert_eq!(parse_size(input), Ok(want), "{input}");
        }
    }

    #[test]
    fn bad_sizes_are_errors() {
        for input in ["", "MiB", "1.5", "1XB", "-1", "1e400", "0.3B"] {
            assert!(parse_size(input).is_err(), "{input} should be rejected");
        }
    }

    #[test]
    fn counts_and_durations() {
        assert_eq!(parse_count("10k"), Ok(10_000));
        assert_eq!(parse_count("1.5M"), Ok(1_500_000));
        assert_eq!(parse_count("7"), Ok(7));
        assert!(parse_count("1.5").is_err());
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-3").is_err());
    }

    #[test]
    fn byte_size_display() {
        assert_eq!(ByteSize(512).to_string(), "512 B");
        assert_eq!(ByteSize(1536).to_string(), "1.5 KiB");
        assert_eq!(ByteSize(10 << 20).to_string(), "10.0 MiB");
    }

    #[test]
    fn duration_display() {
        assert_eq!(format_duration(Duration::from_micros(850)), "850µs");
        assert_eq!(format_duration(Duration::from_micros(12_345)), "12.3ms");
        assert_eq!(format_duration(Duration::from_secs(123)), "2m03s");
    }

    proptest! {
        #[test]
        fn parsers_never_panic(s in ".{0,24}") {
            let _ = parse_size(&s);
            let _ = parse_count(&s);
            let _ = parse_duration(&s);
        }

        #[test]
        fn whole_mebibytes_round_trip(n in 0u64..1_000_000) {
            prop_assert_eq!(parse_size(&format!("{n}MiB")), Ok(n << 20));
        }
    }
}
