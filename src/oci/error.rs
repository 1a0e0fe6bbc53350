//! Registry error bodies, `{"errors":[{"code","message","detail"}]}`, parsed leniently: what
//! a registry said when it refused a request.

use serde::Deserialize;

/// One entry of a registry error body `{"errors":[{"code","message","detail"}]}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryErrorEntry {
    /// `BLOB_UNKNOWN`, `MANIFEST_INVALID`, `UNAUTHORIZED`, `TOOMANYREQUESTS`, ...
    pub code: String,
    pub message: String,
}

#[derive(Deserialize)]
struct Body {
    #[serde(default)]
    errors: Vec<Entry>,
}

#[derive(Deserialize)]
struct Entry {
    #[serde(default)]
    code: String,
    #[serde(default)]
    message: String,
}

/// Parses an error body leniently: JSON per the spec, otherwise the first line of text
/// (proxies and some registries answer 4xx/5xx in plain text or HTML).
pub fn parse_error_body(body: &[u8]) -> Vec<RegistryErrorEntry> {
    if let Ok(parsed) = serde_json::from_slice::<Body>(body) {
        return parsed
            .errors
            .into_iter()
            .map(|e| RegistryErrorEntry {
                code: e.code,
                message: e.message,
            })
            .collect();
    }
    let text = String::from_utf8_lossy(body);
    let first = text.lines().map(str::trim).find(|l| !l.is_empty());
    match first {
        Some(line) => vec![RegistryErrorEntry {
            code: String::new(),
            message: line.chars().take(200).collect(),
        }],
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lenient_bodies() {
        assert!(parse_error_body(b"").is_empty());
        let e = parse_error_body(b"\n<html>502 Bad Gateway</html>\n");
        assert_eq!(e[0].message, "<html>502 Bad Gateway</html>");
        assert_eq!(e[0].code, "");
        // JSON without an errors array is treated as empty, not as an error.
        assert!(parse_error_body(br#"{"detail":"x"}"#).is_empty());
    }
}
