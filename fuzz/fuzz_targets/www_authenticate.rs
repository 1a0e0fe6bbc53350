//! `WWW-Authenticate` challenges, as text and as raw header bytes.
#![no_main]

use creb::auth::challenge::{challenges_of, parse_challenges};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(challenges) = parse_challenges(text) {
            for c in &challenges {
                let _ = c.param("realm");
                let _ = c.param("scope");
            }
        }
    }
    if let Ok(value) = http::HeaderValue::from_bytes(data) {
        let mut headers = http::HeaderMap::new();
        headers.append(http::header::WWW_AUTHENTICATE, value);
        let _ = challenges_of(&creb::net::headers::Headers::from(headers));
    }
});
