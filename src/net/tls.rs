//! TLS for both transports: one rustls configuration, and one-line answers when the
//! registry's certificate is refused.
//!
//! Trust is the platform's verifier (the system roots) plus every `--ca-cert` as a root.
//! A certificate given with `--ca-cert` is also trusted *as the server's own*: a
//! self-signed certificate made the usual way (`openssl req -x509 …`, which OpenSSL marks
//! `CA:TRUE`) is refused by WebPKI as "a CA used as an end entity", while curl, docker and
//! Go accept it. When the chain check fails and the server presented exactly one of the
//! `--ca-cert` certificates, that pinned certificate is accepted if it is within its
//! validity period and names the host or IP that was dialled; the handshake signature is
//! still checked, so the server must hold its key. `--insecure` turns verification off.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};

use super::config::{extra_roots, TransportBuildError, TransportConfig};

/// The rustls settings of a transport. ALPN is left to the transport (hyper-rustls sets it
/// from the HTTP versions it enables; reqwest takes the configuration as it is).
pub fn client_config(
    config: &TransportConfig,
) -> Result<rustls::ClientConfig, TransportBuildError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| TransportBuildError::Client(e.to_string()))?;
    Ok(builder
        .dangerous()
        .with_custom_certificate_verifier(verifier(config, provider)?)
        .with_no_client_auth())
}

/// The certificate verifier of `config`: see the module documentation.
fn verifier(
    config: &TransportConfig,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn ServerCertVerifier>, TransportBuildError> {
    let roots = extra_roots(config)?;
    Ok(if config.insecure {
        Arc::new(AcceptAnyCertificate(provider))
    } else if roots.is_empty() {
        Arc::new(Platform::new(provider, Vec::new(), Vec::new()))
    } else {
        let pinned = roots
            .iter()
            .map(Pinned::of)
            .collect::<Result<Vec<_>, _>>()?;
        // Each `--ca-cert` must serve as a root now, at the start: the platform's verifier
        // that adds them to the system's is made at the first handshake.
        let mut anchors = rustls::RootCertStore::empty();
        for root in &roots {
            anchors
                .add(root.clone())
                .map_err(|e| TransportBuildError::Certificate(e.to_string()))?;
        }
        Arc::new(Platform::new(provider, roots, pinned))
    })
}

/// The platform's verifier with the `--ca-cert` roots, then the `--ca-cert` certificates
/// as pinned server certificates (see the module documentation). The platform's verifier
/// is made when a handshake first needs it: loading the system roots costs milliseconds at
/// every start, and a run against an `http://` registry never verifies a certificate.
#[derive(Debug)]
struct Platform {
    provider: Arc<CryptoProvider>,
    extra: Vec<CertificateDer<'static>>,
    pinned: Vec<Pinned>,
    made: std::sync::OnceLock<Result<rustls_platform_verifier::Verifier, String>>,
}

impl Platform {
    fn new(
        provider: Arc<CryptoProvider>,
        extra: Vec<CertificateDer<'static>>,
        pinned: Vec<Pinned>,
    ) -> Platform {
        Platform {
            provider,
            extra,
            pinned,
            made: std::sync::OnceLock::new(),
        }
    }

    /// The verdict on `end_entity` when it is one of the pinned certificates: accepted
    /// within its validity period for the name dialled; `None` when it is not pinned.
    fn pinned(
        &self,
        end_entity: &CertificateDer<'_>,
        server_name: &ServerName<'_>,
        now: UnixTime,
    ) -> Option<Result<ServerCertVerified, rustls::Error>> {
        let pin = self
            .pinned
            .iter()
            .find(|p| p.der.as_ref() == end_entity.as_ref())?;
        let now = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
        if now < pin.not_before {
            return Some(Err(CertificateError::NotValidYet.into()));
        }
        if now > pin.not_after {
            return Some(Err(CertificateError::Expired.into()));
        }
        Some(
            rustls::server::ParsedCertificate::try_from(end_entity)
                .and_then(|parsed| rustls::client::verify_server_name(&parsed, server_name))
                .map(|()| ServerCertVerified::assertion()),
        )
    }

    /// The verifier, or why the platform could not give one (a TLS error of the handshake).
    fn get(&self) -> Result<&rustls_platform_verifier::Verifier, rustls::Error> {
        let made = self.made.get_or_init(|| {
            let provider = Arc::clone(&self.provider);
            let made = if self.extra.is_empty() {
                rustls_platform_verifier::Verifier::new(provider)
            } else {
                rustls_platform_verifier::Verifier::new_with_extra_roots(
                    self.extra.clone(),
                    provider,
                )
            };
            made.map_err(|e| format!("the system's certificate roots: {e}"))
        });
        made.as_ref().map_err(|e| rustls::Error::General(e.clone()))
    }
}

impl ServerCertVerifier for Platform {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let refused = match self.get().and_then(|v| {
            v.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        }) {
            Ok(ok) => return Ok(ok),
            Err(e) => e,
        };
        self.pinned(end_entity, server_name, now)
            .unwrap_or(Err(refused))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.get()?.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.get()?.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        // What the provider verifies: the platform's verifier answers the same, and the
        // roots need not be loaded to say it.
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A `--ca-cert` certificate, with its validity period.
#[derive(Debug)]
struct Pinned {
    der: CertificateDer<'static>,
    not_before: i64,
    not_after: i64,
}

impl Pinned {
    fn of(der: &CertificateDer<'static>) -> Result<Pinned, TransportBuildError> {
        let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).map_err(|e| {
            TransportBuildError::Certificate(format!("not an X.509 certificate: {e}"))
        })?;
        Ok(Pinned {
            der: der.clone(),
            not_before: cert.validity().not_before.timestamp(),
            not_after: cert.validity().not_after.timestamp(),
        })
    }
}

/// `--insecure`: any certificate is accepted; handshake signatures are still checked, so
/// the peer must hold the key of the certificate it shows.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// What to tell a person whose TLS handshake failed with `e`: what is wrong and what to do,
/// in one line. `None` for failures this has nothing useful to add to.
pub fn advice(e: &rustls::Error) -> Option<String> {
    const TRUST: &str = "pass the server's certificate or the CA that signed it with --ca-cert, or --insecure to skip verification";
    Some(match e {
        rustls::Error::InvalidCertificate(c) => match c {
            CertificateError::UnknownIssuer | CertificateError::BadSignature => format!(
                "the server's certificate is not signed by any trusted CA (system roots or --ca-cert); {TRUST}"
            ),
            CertificateError::NotValidForName => {
                "the server's certificate does not name the host or IP in the registry URL; use a name it lists, or a certificate for this one".into()
            }
            CertificateError::NotValidForNameContext { expected, presented } => format!(
                "the server's certificate is for {} and not for {}; use a name it lists in the registry URL, or a certificate for this one",
                if presented.is_empty() {
                    "no name at all".to_owned()
                } else {
                    presented.join(", ")
                },
                expected.to_str()
            ),
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                "the server's certificate has expired; renew it, or --insecure to skip verification".into()
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "the server's certificate is not valid yet (check this machine's clock)".into()
            }
            CertificateError::Other(other) if other.to_string().contains("CaUsedAsEndEntity") => {
                format!("the server presents a CA certificate as its own; {TRUST}")
            }
            _ => return None,
        },
        rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType) => {
            "the server did not answer in TLS: if the registry speaks plain HTTP, use an http:// URL".into()
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed certificate marked `CA:TRUE`, as `openssl req -x509` makes them
    /// (`tests/it/fronts.rs` uses openssl itself against nginx).
    fn ca_marked_self_signed(names: &[&str]) -> (CertificateDer<'static>, String) {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = rcgen::CertificateParams::new(
            names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>(),
        )
        .unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.not_before = rcgen::date_time_ymd(2000, 1, 1);
        params.not_after = rcgen::date_time_ymd(2200, 1, 1);
        let cert = params.self_signed(&key).unwrap();
        (cert.der().clone(), cert.pem())
    }

    fn verifier_trusting(pem: &str) -> Arc<dyn ServerCertVerifier> {
        let config = TransportConfig {
            extra_roots_pem: vec![pem.as_bytes().to_vec()],
            ..TransportConfig::default()
        };
        verifier(&config, Arc::new(rustls::crypto::ring::default_provider())).unwrap()
    }

    #[test]
    fn a_pinned_certificate_is_the_servers_own_for_its_names_only() {
        let (der, pem) = ca_marked_self_signed(&["127.0.0.1", "registry.test"]);
        let v = verifier_trusting(&pem);
        let now = UnixTime::now();
        for name in ["127.0.0.1", "registry.test"] {
            let name = ServerName::try_from(name).unwrap();
            assert!(
                v.verify_server_cert(&der, &[], &name, &[], now).is_ok(),
                "{name:?}"
            );
        }
        let other = ServerName::try_from("other.test").unwrap();
        let e = v
            .verify_server_cert(&der, &[], &other, &[], now)
            .unwrap_err();
        assert!(
            matches!(
                e,
                rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName
                        | CertificateError::NotValidForNameContext { .. }
                )
            ),
            "{e:?}"
        );
        // Another certificate for the same name is not pinned.
        let (stranger, _) = ca_marked_self_signed(&["127.0.0.1"]);
        let ip = ServerName::try_from("127.0.0.1").unwrap();
        assert!(v.verify_server_cert(&stranger, &[], &ip, &[], now).is_err());
        // Outside its validity period (2000 to 2200) it is refused.
        let at = |secs| UnixTime::since_unix_epoch(std::time::Duration::from_secs(secs));
        assert!(v
            .verify_server_cert(&der, &[], &ip, &[], at(631_152_000))
            .is_err());
        assert!(v
            .verify_server_cert(&der, &[], &ip, &[], at(10_413_792_000))
            .is_err());
    }

    #[test]
    fn advice_says_what_is_wrong_and_what_to_do() {
        let unknown = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
        let a = advice(&unknown).unwrap();
        assert!(
            a.contains("not signed by any trusted CA") && a.contains("--ca-cert"),
            "{a}"
        );
        let name = rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext {
            expected: ServerName::try_from("127.0.0.1").unwrap(),
            presented: vec!["DnsName(\"other.example\")".into()],
        });
        let a = advice(&name).unwrap();
        assert!(
            a.contains("other.example") && a.contains("127.0.0.1"),
            "{a}"
        );
        let plain = rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType);
        assert!(advice(&plain).unwrap().contains("http://"));
        assert!(advice(&rustls::Error::HandshakeNotComplete).is_none());
    }
}
