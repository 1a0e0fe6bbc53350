//! nginx access logs in front of a registry, in two layouts (docs/traces.md gives the
//! `log_format` lines):
//! - `combined` followed by `$request_time $upstream_response_time`, optionally `$msec`
//!   (which gives the millisecond the request ended; without it `$time_local` gives only
//!   the second) and then `$content_length` (the request body's size);
//! - a JSON `log_format` (`escape=json`) with the keys `msec` (or `time_iso8601`),
//!   `remote_addr`, `request` (or `request_method` and `request_uri`), `status`,
//!   `body_bytes_sent`, `request_time`, `http_user_agent`, `host`, `request_id`,
//!   `content_length`.
//!
//! A request line that is not HTTP/1 (a TLS handshake or an HTTP/2 preface sent to a
//! plain port, which nginx answers 400 and logs) is `not_http` in both.

use super::line::{request_line, LogRequest, Parsed, NOT_HTTP};

/// One line of the combined layout with times.
pub fn parse_combined(line: &str) -> Parsed {
    combined(line).unwrap_or_else(Parsed::Malformed)
}

fn combined(line: &str) -> Result<Parsed, String> {
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
    let Times {
        duration_s,
        msec,
        body,
    } = Times::of(times)?;
    let end_ms = match msec {
        Some(s) => s * 1000.0,
        None => time_local_ms(time_local)
            .ok_or_else(|| format!("time '{time_local}' is not $time_local"))?
            as f64,
    };
    let Some((method, uri)) = request_line(request) else {
        return Ok(Parsed::Ignored(NOT_HTTP));
    };
    Ok(Parsed::Request(LogRequest {
        end_ms,
        duration_s,
        method,
        uri,
        remote: remote.to_owned(),
        useragent: useragent.to_owned(),
        status,
        written,
        body,
        host: String::new(),
        id: None,
        second_resolution: msec.is_none(),
    }))
}

/// What the log_format logs after the user agent.
struct Times {
    /// `$request_time`.
    duration_s: f64,
    /// `$msec`, when logged: seconds since the epoch, with a fraction.
    msec: Option<f64>,
    /// `$content_length`, when logged and not `-`.
    body: Option<u64>,
}

impl Times {
    fn of(times: &str) -> Result<Times, String> {
        let fields: Vec<&str> = times.split_whitespace().collect();
        let duration_s: f64 = fields.first().and_then(|s| s.parse().ok()).ok_or(
            "no $request_time after the user agent (see the log_format in docs/traces.md)",
        )?;
        // `$msec` after `$upstream_response_time` (which holds one time per upstream tried),
        // when the log_format has it: seconds since the epoch, with a fraction; then
        // `$content_length` (`-` when the request had none).
        let at_msec = (2..fields.len()).find(|&i| {
            fields[i]
                .parse::<f64>()
                .is_ok_and(|v| v > 1e9 && fields[i].contains('.'))
        });
        let msec = at_msec.and_then(|i| fields[i].parse::<f64>().ok());
        let body = at_msec
            .and_then(|i| fields.get(i + 1))
            .and_then(|s| s.parse::<u64>().ok());
        Ok(Times {
            duration_s,
            msec,
            body,
        })
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
    let (method, uri) = match (text("request_method"), text("request_uri"), text("request")) {
        (Some(m), Some(u), _) => (m, u),
        (_, _, Some(r)) => match request_line(&r) {
            Some(mu) => mu,
            None => return Parsed::Ignored(NOT_HTTP),
        },
        // nginx leaves both empty when it could not read a request line at all.
        (None, None, None) if v.get("request_method").is_some() => {
            return Parsed::Ignored(NOT_HTTP)
        }
        _ => return Parsed::Malformed("no request, nor request_method and request_uri".into()),
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
        body: number("content_length").map(|b| b as u64),
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

    /// Lines nginx 1.22 wrote for a crane session against a plain port (`--insecure` tries
    /// TLS first), an HTTP/2 prior-knowledge client and a scanner, in both layouts.
    #[test]
    fn what_is_not_http_is_skipped_as_such_in_both_layouts() {
        for line in [
            r#"127.0.0.1 - - [26/Nov/2026:01:43:39 +0000] "\x16\x03\x01\x05\xD4\x01\x00\x05\xD0\x03\x033\x0E\x87j\x12\xB5h\xBC~\xC8\xAC\xDAo\x12F\x19" 400 157 "-" "-" 0.000 - 1795657419.522 - 0"#,
            r#"127.0.0.1 - - [26/Nov/2026:01:43:42 +0000] "\x16\x03\x01\x05\xD4\x01\x00\x05\xD0\x03\x03\xFF\x8B6M-\xE7\xF2D&\xF8 E\x06\xEA\xB3{\x8E" 400 157 "-" "-" 0.000 - 1795657422.117 - 0"#,
            r#"127.0.0.1 - - [26/Nov/2026:01:43:52 +0000] "PRI * HTTP/2.0" 400 157 "-" "-" 0.000 - 1795657432.269 - 0"#,
            r#"127.0.0.1 - - [26/Nov/2026:01:43:52 +0000] "\x00\x01\x02garbage" 400 157 "-" "-" 0.005 - 1795657432.279 - 0"#,
        ] {
            assert!(
                matches!(parse_combined(line), Parsed::Ignored(NOT_HTTP)),
                "{line}"
            );
        }
        for line in [
            r#"{"msec":"1795657419.522","remote_addr":"127.0.0.1","request_method":"","request_uri":"","status":"400","body_bytes_sent":"157","request_time":"0.000","http_user_agent":"","host":"","request_id":"210004afe0cc779ccb11efc2ab8c6ad1","content_length":""}"#,
            r#"{"msec":"1795657432.269","request":"PRI * HTTP/2.0","status":"400","request_time":"0.000"}"#,
        ] {
            assert!(
                matches!(parse_json(line), Parsed::Ignored(NOT_HTTP)),
                "{line}"
            );
        }
    }

    #[test]
    fn content_length_is_the_body_size() {
        let line = r#"127.0.0.1 - - [26/Nov/2026:01:43:39 +0000] "PATCH /v2/app/one/blobs/uploads/11c4?_state=x HTTP/1.1" 202 0 "-" "crane/v0.22.1" 0.014 0.014 1795657419.553 600979"#;
        let Parsed::Request(r) = parse_combined(line) else {
            panic!()
        };
        assert_eq!((r.body, r.written), (Some(600979), 0));
        // Two upstreams tried; a GET without a body.
        let line = r#"127.0.0.1 - - [26/Nov/2026:01:43:39 +0000] "GET /v2/ HTTP/1.1" 200 2 "-" "crane" 0.002 0.001, 0.001 1795657419.524 -"#;
        let Parsed::Request(r) = parse_combined(line) else {
            panic!()
        };
        assert_eq!((r.body, r.end_ms), (None, 1_795_657_419_524.0));
        let json = r#"{"msec":"1795657419.553","remote_addr":"127.0.0.1","request_method":"PATCH","request_uri":"/v2/a/blobs/uploads/u","status":"202","body_bytes_sent":"0","request_time":"0.014","content_length":"600979"}"#;
        let Parsed::Request(r) = parse_json(json) else {
            panic!()
        };
        assert_eq!(r.body, Some(600979));
    }
}
