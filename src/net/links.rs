//! The connections a transport opened, per origin: how many, and what TLS and ALPN
//! negotiated. Updated once per new connection (never per request), read at the end of a
//! run for the result metadata (`meta.json`'s `endpoints`) and the report.

use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// What the connections to one origin were.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// Connections opened during the run (absent when the transport does not count them).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub connections: u64,
    /// `HTTP/1.1` or `HTTP/2`, as ALPN (or plain HTTP) settled it on the last connection.
    pub http: Option<String>,
    /// The TLS version of the last connection (`TLSv1.3`), absent for plain HTTP.
    pub tls: Option<String>,
    /// The ALPN protocol of the last connection (`h2`, `http/1.1`), if one was agreed.
    pub alpn: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Link {
    /// One line for people: `HTTP/2 over TLSv1.3, 12 connections`.
    pub fn describe(&self) -> String {
        let mut s = self.http.clone().unwrap_or_else(|| "HTTP".into());
        if let Some(tls) = &self.tls {
            s.push_str(" over ");
            s.push_str(tls);
        }
        if self.connections > 0 {
            s.push_str(&format!(
                ", {} connection{}",
                self.connections,
                if self.connections == 1 { "" } else { "s" }
            ));
        }
        s
    }
}

/// What one new connection negotiated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    pub http2: bool,
    pub tls: Option<&'static str>,
    pub alpn: Option<&'static str>,
}

/// The links of one transport, by origin. Few origins per run (the registry, its token
/// server, a storage redirect target): a list searched by name.
#[derive(Debug, Default)]
pub struct Links {
    by_origin: Mutex<Vec<(String, Link)>>,
}

impl Links {
    /// Counts a new connection to `origin` and what it negotiated.
    pub fn opened(&self, origin: &str, n: Negotiated) {
        let Ok(mut all) = self.by_origin.lock() else {
            return;
        };
        let i = match all.iter().position(|(o, _)| o == origin) {
            Some(i) => i,
            None => {
                all.push((origin.to_owned(), Link::default()));
                all.len() - 1
            }
        };
        let link = &mut all[i].1;
        link.connections += 1;
        link.http = Some(if n.http2 { "HTTP/2" } else { "HTTP/1.1" }.to_owned());
        link.tls = n.tls.map(str::to_owned);
        link.alpn = n.alpn.map(str::to_owned);
    }

    /// What is known of `origin`.
    pub fn get(&self, origin: &str) -> Option<Link> {
        let all = self.by_origin.lock().ok()?;
        all.iter()
            .find(|(o, _)| o == origin)
            .map(|(_, l)| l.clone())
    }
}

/// `scheme://host:port` of a URL, the port always written, as [`Links`] keys origins.
pub fn origin_key(url: &url::Url) -> String {
    format!(
        "{}://{}:{}",
        url.scheme(),
        url.host_str().unwrap_or_default(),
        url.port_or_known_default().unwrap_or_default()
    )
}

/// rustls's name of a TLS version.
pub fn tls_name(v: rustls::ProtocolVersion) -> &'static str {
    match v {
        rustls::ProtocolVersion::TLSv1_3 => "TLSv1.3",
        rustls::ProtocolVersion::TLSv1_2 => "TLSv1.2",
        _ => "TLS (other)",
    }
}

/// An ALPN protocol id as text, for the two this client offers.
pub fn alpn_name(id: &[u8]) -> Option<&'static str> {
    match id {
        b"h2" => Some("h2"),
        b"http/1.1" => Some("http/1.1"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_count_per_origin_and_keep_the_last_negotiation() {
        let links = Links::default();
        let h2 = Negotiated {
            http2: true,
            tls: Some("TLSv1.3"),
            alpn: Some("h2"),
        };
        links.opened("https://r:443", h2);
        links.opened("https://r:443", h2);
        links.opened(
            "http://s:80",
            Negotiated {
                http2: false,
                tls: None,
                alpn: None,
            },
        );
        let r = links.get("https://r:443").unwrap();
        assert_eq!(r.connections, 2);
        assert_eq!(r.http.as_deref(), Some("HTTP/2"));
        assert_eq!(r.tls.as_deref(), Some("TLSv1.3"));
        let s = links.get("http://s:80").unwrap();
        assert_eq!((s.connections, s.tls), (1, None));
        assert!(links.get("https://other:443").is_none());
        let url: url::Url = "https://r/v2/".parse().unwrap();
        assert_eq!(origin_key(&url), "https://r:443");
    }
}
