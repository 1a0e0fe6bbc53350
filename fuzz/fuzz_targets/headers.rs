//! Registry response headers: `Range` of uploads, `Link` pagination, `Location`,
//! `Retry-After`.
#![no_main]

use creb::oci::headers::{
    parse_link_next, parse_retry_after, parse_upload_range, resolve_location,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let base = url::Url::parse("https://registry.example:5000/v2/team/app/tags/list?n=10").unwrap();
    let _ = parse_upload_range(text);
    let _ = parse_link_next(text, &base);
    let _ = resolve_location(&base, text);
    let _ = parse_retry_after(text);
});
