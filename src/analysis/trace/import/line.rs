//! One access-log line as every format's parser gives it: a request of the registry API,
//! a line that is not one (with why), or a line that is not of the format; and the Go
//! duration syntax the Go registries log.

/// One request as a log line gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct LogRequest {
    /// When the response completed, Unix ms.
    pub end_ms: f64,
    pub duration_s: f64,
    pub method: String,
    pub uri: String,
    pub remote: String,
    pub useragent: String,
    pub status: u16,
    pub written: u64,
    pub host: String,
    pub id: Option<String>,
    /// The time is known to the second only (nginx `$time_local`).
    pub second_resolution: bool,
}

/// What a line is.
#[derive(Debug)]
pub enum Parsed {
    Request(LogRequest),
    /// Not a request of the registry API; the reason is counted.
    Ignored(&'static str),
    /// Not a line of the format.
    Malformed(String),
}

/// A Go duration (`1.04028ms`, `2.5s`, `1m2.3s`, `850µs`) in seconds.
pub fn parse_go_duration(s: &str) -> Option<f64> {
    let mut rest = s.trim();
    if rest == "0" {
        return Some(0.0);
    }
    let mut total = 0.0;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|&i| i > 0)?;
        let value: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let (unit, scale) = [
            ("ns", 1e-9),
            ("us", 1e-6),
            ("µs", 1e-6),
            ("μs", 1e-6),
            ("ms", 1e-3),
            ("s", 1.0),
            ("m", 60.0),
            ("h", 3600.0),
        ]
        .into_iter()
        .find(|(u, _)| rest.starts_with(u))?;
        total += value * scale;
        rest = &rest[unit.len()..];
    }
    Some(total)
}
