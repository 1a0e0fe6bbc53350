//! `WWW-Authenticate` parsing per RFC 7235: several challenges in one header (or across
//! several headers), case-insensitive scheme and parameter names, quoted strings with
//! backslash escapes, commas inside quotes, `token68` credentials. Total: any input gives a
//! result or an error message, never a panic.

use crate::net::headers::{text, Headers};

/// One challenge: a scheme and its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    /// Lowercased scheme: `bearer`, `basic`, ...
    pub scheme: String,
    /// Parameters with lowercased names, in order.
    pub params: Vec<(String, String)>,
    /// A `token68` in place of parameters, if any.
    pub token68: Option<String>,
}

impl Challenge {
    /// The value of parameter `name` (case-insensitive).
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn is_token68_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~+/".contains(&b)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn eof(&self) -> bool {
        self.i >= self.s.len()
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.i += 1;
        }
    }

    fn skip_ws_and_commas(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b',')) {
            self.i += 1;
        }
    }

    fn token(&mut self) -> Option<String> {
        let start = self.i;
        while self.peek().is_some_and(is_tchar) {
            self.i += 1;
        }
        (self.i > start).then(|| String::from_utf8_lossy(&self.s[start..self.i]).into_owned())
    }

    fn quoted(&mut self) -> Result<String, String> {
        // At the opening quote.
        self.i += 1;
        let mut out = Vec::new();
        loop {
            match self.peek() {
                None => return Err("unterminated quoted string".into()),
                Some(b'"') => {
                    self.i += 1;
                    return Ok(String::from_utf8_lossy(&out).into_owned());
                }
                Some(b'\\') => {
                    self.i += 1;
                    match self.peek() {
                        Some(c) => {
                            out.push(c);
                            self.i += 1;
                        }
                        None => return Err("unterminated escape".into()),
                    }
                }
                Some(c) => {
                    out.push(c);
                    self.i += 1;
                }
            }
        }
    }

    /// Whether an auth-param (`name BWS "="`) starts here, without consuming it.
    fn at_param(&mut self) -> bool {
        let save = self.i;
        let found = self.token().is_some() && {
            self.skip_ws();
            self.peek() == Some(b'=')
        };
        self.i = save;
        found
    }

    /// `name BWS "=" BWS (token / quoted-string)`.
    fn param(&mut self) -> Result<(String, String), String> {
        let name = self.token().ok_or("expected a parameter name")?;
        self.skip_ws();
        if self.peek() != Some(b'=') {
            return Err(format!("parameter '{name}' has no '='"));
        }
        self.i += 1;
        self.skip_ws();
        let value = match self.peek() {
            Some(b'"') => self.quoted()?,
            _ => self.token().unwrap_or_default(),
        };
        Ok((name.to_ascii_lowercase(), value))
    }

    /// A token68 (`abc/+=`) if one stands here followed by a separator or the end.
    fn token68(&mut self) -> Option<String> {
        let start = self.i;
        while self.peek().is_some_and(is_token68_char) {
            self.i += 1;
        }
        if self.i == start {
            return None;
        }
        while self.peek() == Some(b'=') {
            self.i += 1;
        }
        let end = self.i;
        self.skip_ws();
        if self.eof() || self.peek() == Some(b',') {
            Some(String::from_utf8_lossy(&self.s[start..end]).into_owned())
        } else {
            self.i = start;
            None
        }
    }
}

/// Parses every challenge in a `WWW-Authenticate` value.
pub fn parse_challenges(header: &str) -> Result<Vec<Challenge>, String> {
    let mut p = Parser {
        s: header.as_bytes(),
        i: 0,
    };
    let mut out = Vec::new();
    loop {
        p.skip_ws_and_commas();
        if p.eof() {
            break;
        }
        let scheme = p
            .token()
            .ok_or_else(|| format!("expected an auth scheme at byte {}", p.i))?;
        let mut challenge = Challenge {
            scheme: scheme.to_ascii_lowercase(),
            params: Vec::new(),
            token68: None,
        };
        p.skip_ws();
        if !p.eof() && p.peek() != Some(b',') {
            if p.at_param() {
                challenge.params.push(p.param()?);
            } else if let Some(t) = p.token68() {
                challenge.token68 = Some(t);
            } else {
                return Err(format!("unexpected character at byte {}", p.i));
            }
        }
        // Further parameters follow commas; a comma followed by something that is not a
        // parameter starts the next challenge.
        loop {
            p.skip_ws();
            if p.peek() != Some(b',') {
                break;
            }
            let comma = p.i;
            p.i += 1;
            p.skip_ws_and_commas();
            if p.eof() {
                break;
            }
            if challenge.token68.is_none() && p.at_param() {
                challenge.params.push(p.param()?);
            } else {
                p.i = comma;
                break;
            }
        }
        out.push(challenge);
        p.skip_ws();
        if !p.eof() && p.peek() != Some(b',') {
            return Err(format!("unexpected character at byte {}", p.i));
        }
    }
    Ok(out)
}

/// Parses every `WWW-Authenticate` header of a response.
pub fn challenges_of(headers: &Headers) -> Vec<Challenge> {
    headers
        .get_all(http::header::WWW_AUTHENTICATE.as_str())
        .filter_map(text)
        .filter_map(|v| parse_challenges(v).ok())
        .flatten()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn distribution_bearer_challenge() {
        let c = parse_challenges(
            r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:x/y:pull,push""#,
        )
        .unwrap();
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].scheme, "bearer");
        assert_eq!(c[0].param("realm"), Some("https://auth.example/token"));
        assert_eq!(c[0].param("SCOPE"), Some("repository:x/y:pull,push"));
    }

    #[test]
    fn several_challenges_and_odd_spacing() {
        let c = parse_challenges(
            r#"Newauth realm="apps", type=1, title="Login to \"apps\"", Basic realm="simple""#,
        )
        .unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].scheme, "newauth");
        assert_eq!(c[0].param("type"), Some("1"));
        assert_eq!(c[0].param("title"), Some(r#"Login to "apps""#));
        assert_eq!(c[1].scheme, "basic");
        assert_eq!(c[1].param("realm"), Some("simple"));
        let c = parse_challenges(r#"BEARER Realm = "r" , Error="insufficient_scope",  "#).unwrap();
        assert_eq!(c[0].param("realm"), Some("r"));
        assert_eq!(c[0].param("error"), Some("insufficient_scope"));
    }

    #[test]
    fn token68_and_bare_schemes() {
        let c = parse_challenges("Negotiate abc+/def==, Basic").unwrap();
        assert_eq!(c[0].token68.as_deref(), Some("abc+/def=="));
        assert_eq!(c[1].scheme, "basic");
        assert!(c[1].params.is_empty());
    }

    #[test]
    fn commas_inside_quotes() {
        let c = parse_challenges(
            r#"Bearer realm="a,b",scope="repository:a:pull,push repository:b:pull""#,
        )
        .unwrap();
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].param("realm"), Some("a,b"));
        assert_eq!(
            c[0].param("scope"),
            Some("repository:a:pull,push repository:b:pull")
        );
    }

    #[test]
    fn malformed_is_an_error() {
        assert!(parse_challenges(r#"Bearer realm="unterminated"#).is_err());
        assert!(parse_challenges("=oops").is_err());
        assert_eq!(parse_challenges("").unwrap(), vec![]);
    }

    proptest! {
        #[test]
        fn never_panics(s in ".{0,120}") {
            let _ = parse_challenges(&s);
        }

        #[test]
        fn quoted_values_round_trip(v in "[ -~]{0,40}") {
            let escaped = v.replace('\\', "\\\\").replace('"', "\\\"");
            let header = format!("Bearer realm=\"{escaped}\",service=\"s\"");
            let c = parse_challenges(&header).unwrap();
            prop_assert_eq!(c[0].param("realm"), Some(v.as_str()));
            prop_assert_eq!(c[0].param("service"), Some("s"));
        }
    }
}
