//! distribution's (2.x and v3) request log lines, JSON (`log.formatter: json`) or logrus
//! text (`key=value`, the default formatter): every request ends in one line whose `msg` is `response completed` (or `response completed
//! with error`) and whose fields are the IBM trace's (`http.request.method`, `…uri`,
//! `…remoteaddr`, `…useragent`, `http.response.status`, `…written`), with `time` (when the
//! response completed) and `http.response.duration` (a Go duration). Every other JSON line
//! (start-up, warnings, errors without a request) is not a request.

use std::borrow::Cow;

use serde::Deserialize;

use super::line::{parse_go_duration, LogRequest, Parsed};

#[derive(Deserialize)]
struct Line<'a> {
    #[serde(borrow)]
    msg: Option<Cow<'a, str>>,
    #[serde(borrow)]
    time: Option<Cow<'a, str>>,
    #[serde(borrow, rename = "http.request.method")]
    method: Option<Cow<'a, str>>,
    #[serde(borrow, rename = "http.request.uri")]
    uri: Option<Cow<'a, str>>,
    #[serde(borrow, rename = "http.request.remoteaddr")]
    remoteaddr: Option<Cow<'a, str>>,
    #[serde(borrow, rename = "http.request.useragent")]
    useragent: Option<Cow<'a, str>>,
    #[serde(borrow, rename = "http.request.host")]
    host: Option<Cow<'a, str>>,
    #[serde(borrow, rename = "http.request.id")]
    id: Option<Cow<'a, str>>,
    #[serde(rename = "http.response.status")]
    status: Option<u16>,
    #[serde(rename = "http.response.written")]
    written: Option<u64>,
    #[serde(borrow, rename = "http.response.duration")]
    duration: Option<Cow<'a, str>>,
}

/// `ADDR - USER [TIME] "REQUEST" …`: a line of the combined access log.
fn looks_like_text_access_log(line: &str) -> bool {
    let mut words = line.splitn(4, ' ');
    let (_, dash, _, rest) = (words.next(), words.next(), words.next(), words.next());
    dash == Some("-") && rest.is_some_and(|r| r.starts_with('[') && r.contains("] \""))
}

/// `key=value key="quoted value"` (logrus's text formatter) as a JSON object, numbers as
/// numbers; `None` when the line is not of that shape.
fn logfmt(line: &str) -> Option<serde_json::Map<String, serde_json::Value>> {
    let mut map = serde_json::Map::new();
    let mut rest = line.trim();
    while !rest.is_empty() {
        let eq = rest.find('=')?;
        let key = &rest[..eq];
        if key.is_empty() || key.contains([' ', '"']) {
            return None;
        }
        rest = &rest[eq + 1..];
        let value = if let Some(quoted) = rest.strip_prefix('"') {
            // A quoted value: Go's strconv.Quote escapes, up to the closing quote.
            let mut out = String::new();
            let mut chars = quoted.char_indices();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => match chars.next() {
                        Some((_, 'n')) => out.push('\n'),
                        Some((_, 't')) => out.push('\t'),
                        Some((_, other)) => out.push(other),
                        None => return None,
                    },
                    '"' => {
                        end = Some(i);
                        break;
                    }
                    c => out.push(c),
                }
            }
            rest = &quoted[end? + 1..];
            serde_json::Value::String(out)
        } else {
            let end = rest.find(' ').unwrap_or(rest.len());
            let raw = &rest[..end];
            rest = &rest[end..];
            match raw.parse::<u64>() {
                Ok(n) if key.starts_with("http.response.") => serde_json::Value::from(n),
                _ => serde_json::Value::String(raw.to_owned()),
            }
        };
        map.insert(key.to_owned(), value);
        rest = rest.trim_start();
    }
    map.contains_key("msg").then_some(map)
}

/// One line of a distribution log: JSON (`log.formatter: json`) or logrus text
/// (`log.formatter: text`, the default).
pub fn parse(line: &str) -> Parsed {
    if !line.trim_start().starts_with('{') {
        if let Some(map) = logfmt(line) {
            let json = serde_json::Value::Object(map).to_string();
            return parse_json(&json);
        }
    }
    parse_json(line)
}

fn parse_json(line: &str) -> Parsed {
    let l: Line<'_> = match serde_json::from_str(line) {
        Ok(l) => l,
        Err(e) if line.trim_start().starts_with('{') => {
            return Parsed::Malformed(format!("not a JSON log line: {e}"))
        }
        // The Apache-style access log distribution writes beside its JSON lines unless
        // `log.accesslog.disabled`: the same requests again, so not imported.
        Err(_) if looks_like_text_access_log(line) => return Parsed::Ignored("text_access_log"),
        Err(_) => return Parsed::Malformed("neither a JSON nor a text (logfmt) log line".into()),
    };
    match l.msg.as_deref() {
        Some("response completed" | "response completed with error") => {}
        _ => return Parsed::Ignored("not_a_request"),
    }
    let (Some(method), Some(uri), Some(time), Some(status)) = (l.method, l.uri, l.time, l.status)
    else {
        return Parsed::Malformed(
            "a request line without http.request.method, http.request.uri, time or http.response.status"
                .into(),
        );
    };
    let Some(end_ms) = crate::trace::record::parse_timestamp(&time) else {
        return Parsed::Malformed(format!("time '{time}' is not RFC 3339"));
    };
    let duration_s = match l.duration.as_deref() {
        None => 0.0,
        Some(d) => match parse_go_duration(d) {
            Some(s) => s,
            None => {
                return Parsed::Malformed(format!("http.response.duration '{d}' is not a duration"))
            }
        },
    };
    Parsed::Request(LogRequest {
        end_ms: end_ms as f64,
        duration_s,
        method: method.into_owned(),
        uri: uri.into_owned(),
        remote: l.remoteaddr.map(Cow::into_owned).unwrap_or_default(),
        useragent: l.useragent.map(Cow::into_owned).unwrap_or_default(),
        status,
        written: l.written.unwrap_or(0),
        body: None,
        host: l.host.map(Cow::into_owned).unwrap_or_default(),
        id: l.id.map(Cow::into_owned),
        second_resolution: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines_other_lines_and_broken_ones() {
        let line = r#"{"go.version":"go1.19.8","http.request.host":"127.0.0.1:33979","http.request.id":"fa93","http.request.method":"GET","http.request.remoteaddr":"127.0.0.1:44802","http.request.uri":"/v2/","http.request.useragent":"curl/7.88.1","http.response.contenttype":"application/json; charset=utf-8","http.response.duration":"1.04028ms","http.response.status":200,"http.response.written":2,"level":"info","msg":"response completed","time":"2026-11-24T22:53:52.398458074Z"}"#;
        let Parsed::Request(r) = parse(line) else {
            panic!("{:?}", parse(line))
        };
        assert_eq!(
            (r.method.as_str(), r.uri.as_str(), r.status, r.written),
            ("GET", "/v2/", 200, 2)
        );
        assert!((r.duration_s - 0.00104028).abs() < 1e-12);
        assert_eq!(r.end_ms, 1_795_560_832_398.0);
        assert_eq!(r.id.as_deref(), Some("fa93"));
        let error = line.replace("response completed", "response completed with error");
        assert!(matches!(parse(&error), Parsed::Request(_)));
        assert!(matches!(
            parse(
                r#"{"level":"info","msg":"listening on 127.0.0.1:5000","time":"2026-11-24T22:53:52Z"}"#
            ),
            Parsed::Ignored("not_a_request")
        ));
        assert!(matches!(
            parse("127.0.0.1 - - [24/Nov/2026:22:53:52 +0000] \"GET /v2/ HTTP/1.1\" 200 2"),
            Parsed::Ignored("text_access_log")
        ));
        assert!(matches!(parse("panic: something"), Parsed::Malformed(_)));
        // The text formatter: the same request.
        let text = r#"time="2026-11-24T22:53:52.398458074Z" level=info msg="response completed" go.version=go1.19.8 http.request.host="127.0.0.1:33979" http.request.id=fa93 http.request.method=GET http.request.remoteaddr="127.0.0.1:44802" http.request.uri="/v2/" http.request.useragent="curl/7.88.1 \"x\"" http.response.contenttype="application/json; charset=utf-8" http.response.duration=1.04028ms http.response.status=200 http.response.written=2"#;
        let Parsed::Request(t) = parse(text) else {
            panic!("{:?}", parse(text))
        };
        assert_eq!(t.useragent, "curl/7.88.1 \"x\"");
        assert_eq!(
            (t.status, t.written, t.end_ms, t.id),
            (r.status, r.written, r.end_ms, r.id)
        );
        assert!(matches!(
            parse(r#"time="2026-11-24T22:53:52Z" level=info msg="listening on [::]:5000""#),
            Parsed::Ignored("not_a_request")
        ));
        assert!(matches!(
            parse(r#"{"msg":"response completed","time":"x"}"#),
            Parsed::Malformed(_)
        ));
    }
}
