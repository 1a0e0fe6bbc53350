//! zot's request log lines: zerolog JSON, one per request with `"message":"HTTP API"` (or
//! `msg`), carrying `method`, `path` (with its query), `statusCode`, `latency` (a Go
//! duration), `clientIP`, `bodySize`, `time` and the request headers (`User-Agent`;
//! `Authorization` is masked by zot). What it lacks beside distribution's: the registry
//! host and a request id (both filled in), and `time` is to the second unless zot's log
//! time format is set finer.

use super::line::{parse_go_duration, LogRequest, Parsed};

/// One line of a zot log.
pub fn parse(line: &str) -> Parsed {
    let v: serde_json::Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => return Parsed::Malformed(format!("not JSON: {e}")),
    };
    let msg = v
        .get("message")
        .or_else(|| v.get("msg"))
        .and_then(|m| m.as_str());
    if msg != Some("HTTP API") {
        return Parsed::Ignored("not_a_request");
    }
    let text = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_owned);
    let (Some(method), Some(path), Some(time)) = (text("method"), text("path"), text("time"))
    else {
        return Parsed::Malformed("an HTTP API line without method, path or time".into());
    };
    let Some(status) = v.get("statusCode").and_then(|s| s.as_u64()) else {
        return Parsed::Malformed("an HTTP API line without statusCode".into());
    };
    let Some(end_ms) = crate::trace::record::parse_timestamp(&time) else {
        return Parsed::Malformed(format!("time '{time}' is not RFC 3339"));
    };
    let duration_s = match v.get("latency") {
        Some(serde_json::Value::String(d)) => match parse_go_duration(d) {
            Some(s) => s,
            None => return Parsed::Malformed(format!("latency '{d}' is not a duration")),
        },
        // zerolog's Dur: milliseconds as a number.
        Some(serde_json::Value::Number(n)) => n.as_f64().unwrap_or(0.0) / 1000.0,
        _ => 0.0,
    };
    let useragent = v
        .pointer("/headers/User-Agent/0")
        .and_then(|u| u.as_str())
        .unwrap_or_default()
        .to_owned();
    Parsed::Request(LogRequest {
        end_ms: end_ms as f64,
        duration_s,
        method,
        uri: path,
        remote: text("clientIP").unwrap_or_default(),
        useragent,
        status: status as u16,
        written: v.get("bodySize").and_then(|b| b.as_u64()).unwrap_or(0),
        body: None,
        host: String::new(),
        id: None,
        second_resolution: !time.contains('.'),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_api_lines_and_others() {
        let line = r#"{"level":"info","clientIP":"10.0.0.7:40122","method":"GET","path":"/v2/acme/app/blobs/sha256:ab?x=1","statusCode":200,"latency":"3.2ms","bodySize":1024,"headers":{"User-Agent":["containerd/1.7"],"Authorization":["******"]},"time":"2026-11-24T22:53:52.5Z","message":"HTTP API"}"#;
        let Parsed::Request(r) = parse(line) else {
            panic!()
        };
        assert_eq!((r.method.as_str(), r.status, r.written), ("GET", 200, 1024));
        assert_eq!(r.useragent, "containerd/1.7");
        assert!((r.duration_s - 0.0032).abs() < 1e-12);
        assert!(!r.second_resolution);
        assert!(matches!(
            parse(r#"{"level":"info","message":"starting task","time":"2026-11-24T22:53:52Z"}"#),
            Parsed::Ignored("not_a_request")
        ));
        assert!(matches!(
            parse(r#"{"message":"HTTP API","time":"x"}"#),
            Parsed::Malformed(_)
        ));
    }
}
