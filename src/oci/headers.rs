//! Pure parsers and formatters for the headers of the distribution protocol.
//!
//! Each is total (never panics) and lenient where registries differ: `Range` with or without
//! `bytes=`, absolute or relative `Location`, `Link` with several values and parameters.

use url::Url;

/// Parses an upload `Range` header (`0-1023`, `bytes=0-1023`) into its *inclusive* end.
///
/// `0-0` is ambiguous in the protocol: distribution sends it both for an empty session and
/// for one holding a single byte. Callers decide by context: after a PATCH that sent bytes
/// it means one byte; on a fresh or queried session it is read as empty.
pub fn parse_upload_range(value: &str) -> Result<u64, String> {
    let v = value.trim();
    let v = v.strip_prefix("bytes=").unwrap_or(v).trim();
    let (start, end) = v
        .split_once('-')
        .ok_or_else(|| format!("Range '{}' has no '-'", truncate(value)))?;
    let start: u64 = start
        .trim()
        .parse()
        .map_err(|_| format!("Range '{}' has a bad start", truncate(value)))?;
    let end: u64 = end
        .trim()
        .parse()
        .map_err(|_| format!("Range '{}' has a bad end", truncate(value)))?;
    if start != 0 {
        return Err(format!("Range '{}' does not start at 0", truncate(value)));
    }
    Ok(end)
}

/// `Content-Range` of a PATCH chunk: inclusive offsets, no `bytes=` (distribution's form).
pub fn content_range(start: u64, len: u64) -> String {
    format!("{}-{}", start, start + len.saturating_sub(1))
}

/// Resolves a `Location` header against the URL of the request it answered.
pub fn resolve_location(request_url: &Url, location: &str) -> Result<Url, String> {
    request_url
        .join(location.trim())
        .map_err(|e| format!("bad Location '{}': {e}", truncate(location)))
}

/// Appends `key=value` to a URL's query, keeping what is there (`_state` and friends).
pub fn with_query_param(url: &Url, key: &str, value: &str) -> Url {
    let mut out = url.clone();
    out.query_pairs_mut().append_pair(key, value);
    out
}

/// Finds the `rel="next"` target of a `Link` header, resolved against `base`.
///
/// Accepts several comma-separated links, unquoted `rel=next`, and extra parameters.
pub fn parse_link_next(value: &str, base: &Url) -> Option<Url> {
    let mut rest = value;
    while let Some(open) = rest.find('<') {
        let after = &rest[open + 1..];
        let close = after.find('>')?;
        let target = &after[..close];
        let params_and_more = &after[close + 1..];
        // Parameters run until the next link starts.
        let params_end = params_and_more.find('<').unwrap_or(params_and_more.len());
        let params = &params_and_more[..params_end];
        let is_next = params.split(';').any(|p| {
            let p = p.trim().trim_end_matches(',').trim();
            match p.split_once('=') {
                Some((k, v)) if k.trim().eq_ignore_ascii_case("rel") => v
                    .trim()
                    .trim_matches('"')
                    .split_whitespace()
                    .any(|r| r.eq_ignore_ascii_case("next")),
                _ => false,
            }
        });
        if is_next {
            return base.join(target.trim()).ok();
        }
        rest = &params_and_more[params_end..];
    }
    None
}

/// `Retry-After` as seconds (delta form only; an HTTP date is ignored).
pub fn parse_retry_after(value: &str) -> Option<u64> {
    value.trim().parse().ok()
}

/// The first `limit` characters of a header for error messages.
pub fn truncate(s: &str) -> String {
    const LIMIT: usize = 120;
    if s.chars().count() <= LIMIT {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(LIMIT).collect();
        t.push('…');
        t
    }
}

/// Splits `total` bytes into PATCH chunks of `chunk` bytes (the last may be shorter).
/// Returns `(offset, length)` pairs; an empty blob yields no chunk.
pub fn chunk_plan(total: u64, chunk: u64) -> impl Iterator<Item = (u64, u64)> {
    let chunk = chunk.max(1);
    (0..total.div_ceil(chunk)).map(move |i| {
        let start = i * chunk;
        (start, chunk.min(total - start))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn upload_ranges() {
        assert_eq!(parse_upload_range("0-0"), Ok(0));
        assert_eq!(parse_upload_range("0-1023"), Ok(1023));
        assert_eq!(parse_upload_range("bytes=0-1023"), Ok(1023));
        assert_eq!(parse_upload_range(" 0 - 9 "), Ok(9));
        assert!(parse_upload_range("5-9").is_err());
        assert!(parse_upload_range("0-x").is_err());
        assert!(parse_upload_range("").is_err());
    }

    #[test]
    fn content_ranges_are_inclusive() {
        assert_eq!(content_range(0, 1024), "0-1023");
        assert_eq!(content_range(1024, 1), "1024-1024");
    }

    #[test]
    fn locations_absolute_and_relative() {
        let req = Url::parse("http://127.0.0.1:5000/v2/a/b/blobs/uploads/").unwrap();
        let abs = resolve_location(
            &req,
            "http://127.0.0.1:5000/v2/a/b/blobs/uploads/u1?_state=x",
        )
        .unwrap();
        assert_eq!(
            abs.as_str(),
            "http://127.0.0.1:5000/v2/a/b/blobs/uploads/u1?_state=x"
        );
        let rel = resolve_location(&req, "/v2/a/b/blobs/uploads/u2").unwrap();
        assert_eq!(
            rel.as_str(),
            "http://127.0.0.1:5000/v2/a/b/blobs/uploads/u2"
        );
        let d = with_query_param(&abs, "digest", "sha256:00");
        assert_eq!(d.query(), Some("_state=x&digest=sha256%3A00"));
        let plain = with_query_param(&rel, "digest", "sha256:00");
        assert_eq!(plain.query(), Some("digest=sha256%3A00"));
    }

    #[test]
    fn link_next() {
        let base = Url::parse("https://r.example/v2/a/tags/list?n=2").unwrap();
        let next = parse_link_next(r#"</v2/a/tags/list?n=2&last=b>; rel="next""#, &base).unwrap();
        assert_eq!(next.as_str(), "https://r.example/v2/a/tags/list?n=2&last=b");
        let several = r#"<https://x/prev>; rel="prev", <https://x/next>; type="a"; rel=next"#;
        assert_eq!(
            parse_link_next(several, &base).unwrap().as_str(),
            "https://x/next"
        );
        assert!(parse_link_next(r#"<https://x/prev>; rel="prev""#, &base).is_none());
        assert!(parse_link_next("garbage", &base).is_none());
    }

    #[test]
    fn chunking() {
        let plan: Vec<_> = chunk_plan(10, 4).collect();
        assert_eq!(plan, vec![(0, 4), (4, 4), (8, 2)]);
        assert_eq!(chunk_plan(0, 4).count(), 0);
        assert_eq!(chunk_plan(1 << 20, 256 * 1024).count(), 4);
    }

    proptest! {
        #[test]
        fn chunks_cover_exactly_once(total in 0u64..10_000_000, chunk in 1u64..3_000_000) {
            let mut next = 0;
            for (start, len) in chunk_plan(total, chunk) {
                prop_assert_eq!(start, next);
                prop_assert!(len > 0 && len <= chunk);
                next = start + len;
            }
            prop_assert_eq!(next, total);
        }

        #[test]
        fn header_parsers_never_panic(s in ".{0,80}") {
            let base = Url::parse("http://h/v2/").unwrap();
            let _ = parse_upload_range(&s);
            let _ = parse_link_next(&s, &base);
            let _ = resolve_location(&base, &s);
            let _ = parse_retry_after(&s);
        }
    }
}
