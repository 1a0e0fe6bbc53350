//! nginx access logs in front of a registry, in two layouts (docs/traces.md gives the
//! `log_format` lines):
//! - `combined` followed by `$request_time $upstream_response_time`, optionally `$msec`
//!   (which gives the millisecond the request ended; without it `$time_local` gives only
//!   the second);
//! - a JSON `log_format` (`escape=json`) with the keys `msec` (or `time_iso8601`),
//!   `remote_addr`, `request` (or `request_method` and `request_uri`), `status`,
//!   `body_bytes_sent`, `request_time`, `http_user_agent`, `host`, `request_id`.

use super::line::{LogRequest, Parsed};

/// One line of the combined layout with times.
pub fn parse_combined(line: &str) -> Parsed {
    match combined(line) {
        Ok(r) => Parsed::Request(r),
        Err(why) => Parsed::Malformed(why),
    }
}

fn combined(line: &str) -> Result<LogRequest, String> {
    let (remote, rest) = line.split_once(' ').ok_or("not the combined log format")?;
    let open = rest.find('[').ok_or("no [time_local]")?;
    let close = rest[open..].find(']').ok_or("no [time_local]")? + open;
    let time_local = &rest[open + 1..close];
    let rest = &rest[close + 1..];
    let mut quoted = rest.split('"');
    let _ = quoted.next();
    let request = quoted.next().ok_or("no \"request\"")?;
    let numbers = quoted.next().ok_or("no status")?;
    let _ = quoted.next().ok_or("no \"referer\"")?;
    let _ = quoted.next();
    let useragent = quoted.next().ok_or("no \"user agent\"")?;
    let times = quoted
        .next()
        .ok_or("no $request_time after the user agent")?;
    let mut nums = numbers.split_whitespace();
    let status: u16 = nums
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or("no status")?;
    let written: u64 = match nums.next() {
        Some("-") | None => 0,
        Some(n) => n
            .parse()
            .map_err(|_| format!("bytes '{n}' is not a number"))?,
    };
    let fields: Vec<&str> = times.split_whitespace().collect();
    let duration_s: f64 = fields
        .first()
        .and_then(|s| s.parse().ok())
        .ok_or("no $request_time after the user agent (see the log_format in docs/traces.md)")?;
    // `$msec` last, when the log_format has it: seconds since the epoch, with a fraction.
    let msec = fields
        .last()
        .filter(|_| fields.len() >= 3)
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|v| *v > 1e9);
    let end_ms = match msec {
        Some(s) => s * 1000.0,
        None => time_local_ms(time_local)
            .ok_or_else(|| format!("time '{time_local}' is not $time_local"))?
            as f64,
    };
    let (method, uri) = split_request(request)?;
    Ok(LogRequest {
        end_ms,
        duration_s,
        method,
        uri,
        remote: remote.to_owned(),
        useragent: useragent.to_owned(),
        status,
        written,
        host: String::new(),
        id: None,
        second_resolution: msec.is_none(),
    })
}

/// `GET /v2/x HTTP/1.1` → method and URI.
fn split_request(request: &str) -> Result<(String, String), String> {
    let mut parts = request.split(' ');
    match (parts.next(), parts.next()) {
        (Some(m), Some(u)) if !m.is_empty() && !u.is_empty() => Ok((m.to_owned(), u.to_owned())),
        _ => Err(format!("request '{request}' is not METHOD URI PROTOCOL")),
    }
}

/// `25/Nov/2026:06:28:49 +0000` → Unix ms.
fn time_local_ms(s: &str) -> Option<i64> {
    let (stamp, zone) = s.split_once(' ')?;
    let mut it = stamp.split(['/', ':']);
    let day: u32 = it.next()?.parse().ok()?;
    let month = match it.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: i32 = it.next()?.parse().ok()?;
    let (h, m, sec): (u32, u32, u32) = (
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
    );
    let iso = format!(
        "{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{sec:02}{}:{}",
        &zone.get(..3)?,
        &zone.get(3..5)?
    );
    crate::trace::record::parse_timestamp(&iso)
}

/// One line of the JSON layout.
pub fn parse_json(line: &str) -> Parsed {
    let v: serde_json::Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => return Parsed::Malformed(format!("not JSON: {e}")),
    };
    let text = |k: &str| -> Option<String> {
        match v.get(k)? {
            serde_json::Value::String(s) if s != "-" && !s.is_empty() => Some(s.clone()),
            serde_json::Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    };
    let number = |k: &str| text(k).and_then(|s| s.parse::<f64>().ok());
    let (method, uri) = match (text("request_method"), text("request_uri")) {
        (Some(m), Some(u)) => (m, u),
        _ => match text("request").map(|r| split_request(&r)) {
            Some(Ok(mu)) => mu,
            Some(Err(why)) => return Parsed::Malformed(why),
            None => {
                return Parsed::Malformed("no request, nor request_method and request_uri".into())
            }
        },
    };
    let Some(status) = number("status").map(|s| s as u16) else {
        return Parsed::Malformed("no status".into());
    };
    let Some(duration_s) = number("request_time") else {
        return Parsed::Malformed("no request_time".into());
    };
    let end_ms = match (number("msec"), text("time_iso8601")) {
        (Some(s), _) => s * 1000.0,
        (None, Some(t)) => match crate::trace::record::parse_timestamp(&t) {
            Some(ms) => ms as f64,
            None => return Parsed::Malformed(format!("time_iso8601 '{t}' is not RFC 3339")),
        },
        (None, None) => return Parsed::Malformed("no msec or time_iso8601".into()),
    };
    Parsed::Request(LogRequest {
        end_ms,
        duration_s,
        method,
        uri,
        remote: text("remote_addr").unwrap_or_default(),
        useragent: text("http_user_agent").unwrap_or_default(),
        status,
        written: number("body_bytes_sent").map_or(0, |b| b as u64),
        host: text("host").unwrap_or_default(),
        id: text("request_id"),
        second_resolution: text("msec").is_none(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combined_with_times_and_msec() {
        let line = r#"127.0.0.1 - - [25/Nov/2026:06:28:49 +0000] "GET /v2/a/b/manifests/t HTTP/2.0" 200 527 "-" "docker/24.0" 0.004 0.003 1795588129.123"#;
        let Parsed::Request(r) = parse_combined(line) else {
            panic!()
        };
        assert_eq!(
            (r.method.as_str(), r.uri.as_str(), r.status, r.written),
            ("GET", "/v2/a/b/manifests/t", 200, 527)
        );
        assert_eq!(r.end_ms, 1_795_588_129_123.0);
        assert!((r.duration_s - 0.004).abs() < 1e-12);
        assert!(!r.second_resolution);
        // Without $msec: the second of $time_local; an upstream that never answered.
        let line = r#"10.0.0.9 - alice [25/Nov/2026:07:28:49 +0100] "HEAD /v2/a/b/blobs/sha256:00 HTTP/1.1" 404 0 "-" "docker/24.0" 0.010 -"#;
        let Parsed::Request(r) = parse_combined(line) else {
            panic!()
        };
        assert_eq!(r.end_ms, 1_795_588_129_000.0);
        assert!(r.second_resolution);
        assert!(matches!(
            parse_combined(
                r#"127.0.0.1 - - [25/Nov/2026:06:28:49 +0000] "GET / HTTP/1.1" 200 2 "-" "curl""#
            ),
            Parsed::Malformed(_)
        ));
        assert!(matches!(parse_combined("garbage"), Parsed::Malformed(_)));
    }

    #[test]
    fn json_layout() {
        let line = r#"{"msec":"1795588129.123","remote_addr":"10.0.0.9","request":"PUT /v2/a/b/manifests/t HTTP/1.1","status":"201","body_bytes_sent":"0","request_time":"0.012","http_user_agent":"docker/24.0","host":"registry.example","request_id":"abc"}"#;
        let Parsed::Request(r) = parse_json(line) else {
            panic!()
        };
        assert_eq!(
            (r.method.as_str(), r.status, r.host.as_str()),
            ("PUT", 201, "registry.example")
        );
        assert_eq!(r.end_ms, 1_795_588_129_123.0);
        assert!(matches!(
            parse_json(r#"{"status":200}"#),
            Parsed::Malformed(_)
        ));
    }
}
