//! What a registry sends as the answer to a request: the bytes are cut into a manifest body
//! with its `Content-Type`, a token server's JSON and a registry error body, and each goes
//! through the parser that reads it in a run.
#![no_main]

use creb::auth::token::parse_token_response;
use creb::oci::error::parse_error_body;
use creb::oci::manifest::ParsedManifest;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // First byte: where the content type ends; the rest, three parts split at 0xff bytes.
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let cut = usize::from(cut).min(rest.len());
    let (content_type, rest) = rest.split_at(cut);
    let mut parts = rest.splitn(3, |b| *b == 0xff);
    let manifest = parts.next().unwrap_or_default();
    let token = parts.next().unwrap_or_default();
    let error = parts.next().unwrap_or_default();
    let content_type = std::str::from_utf8(content_type).ok();
    if let Ok(parsed) = ParsedManifest::parse(manifest, content_type) {
        let _ = parsed.blobs();
        // With no platform asked for (this machine's) and with one named in the body.
        let _ = parsed.pick_platform(None);
        let _ = parsed.pick_platform(Some(&creb::oci::manifest::Platform {
            architecture: "arm64".into(),
            os: "linux".into(),
            variant: Some("v8".into()),
        }));
    }
    let _ = parse_token_response(
        token,
        tokio::time::Instant::now(),
        std::time::SystemTime::now(),
    );
    for entry in parse_error_body(error) {
        let _ = (entry.code.len(), entry.message.len());
    }
});
