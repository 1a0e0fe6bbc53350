//! The registry flags (`--registry`, TLS, timeouts, retries, credentials) turned into the
//! validated [`RegistryConfig`] every workload connects with.

use std::fs;

use anyhow::Context;
use url::Url;

use super::args::{AuthArgs, RegistryArgs};
use crate::auth::credentials::{CredentialOptions, PasswordSource};
use crate::client::retry::RetryPolicy;
use crate::net::TransportConfig;
use crate::session::connect::RegistryConfig;

impl TryFrom<&RegistryArgs> for RegistryConfig {
    type Error = anyhow::Error;

    fn try_from(args: &RegistryArgs) -> anyhow::Result<Self> {
        let extra_roots_pem = extra_roots(&args.ca_cert)?;
        let base = args
            .registry
            .first()
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("--registry is required"))?;
        let mut endpoints: Vec<Url> = Vec::with_capacity(args.registry.len());
        for url in &args.registry {
            if endpoints.contains(url) {
                anyhow::bail!("--registry {url} is given twice");
            }
            endpoints.push(url.clone());
        }
        Ok(RegistryConfig {
            base,
            endpoints,
            transport: TransportConfig {
                connect_timeout: args.connect_timeout,
                request_timeout: args.request_timeout,
                body_idle_timeout: args.body_idle_timeout,
                request_deadline: args.request_deadline,
                client: args.http_client.into(),
                // Not given: 0, sized by the operations in flight when connecting.
                read_buffer_max: args.http1_read_buffer.map_or(0, |b| {
                    usize::try_from(b.bytes())
                        .unwrap_or(usize::MAX)
                        .max(crate::net::MIN_READ_BUFFER)
                }),
                insecure: args.insecure,
                extra_roots_pem,
                ..TransportConfig::default()
            },
            retry: RetryPolicy {
                on: args.retry.clone().unwrap_or_default(),
                max_retries: if args.retry.is_some() {
                    args.max_retries
                } else {
                    0
                },
                backoff: args.backoff,
                max_backoff: args.max_backoff,
            },
            credentials: credential_options(&args.auth),
        })
    }
}

/// The PEM files of `--ca-cert`, read.
fn extra_roots(paths: &[std::path::PathBuf]) -> anyhow::Result<Vec<Vec<u8>>> {
    paths
        .iter()
        .map(|path| {
            fs::read(path).with_context(|| format!("cannot read --ca-cert {}", path.display()))
        })
        .collect()
}

/// How the credential flags say to find credentials.
fn credential_options(a: &AuthArgs) -> CredentialOptions {
    let password = if a.password_stdin {
        Some(PasswordSource::Stdin)
    } else if let Some(cmd) = &a.password_cmd {
        Some(PasswordSource::Command(cmd.clone()))
    } else {
        a.username.as_ref().map(|_| PasswordSource::Environment)
    };
    CredentialOptions {
        anonymous: a.anonymous,
        username: a.username.clone(),
        password,
        docker_config: a.docker_config.clone(),
        command_timeout: a.credential_timeout,
    }
}

/// A registry read from outside a run (`trace import --sizes-from`): `url` with the
/// credential and TLS flags given, every other setting its default.
pub fn reading(
    url: Url,
    insecure: bool,
    ca_cert: &[std::path::PathBuf],
    auth: &AuthArgs,
) -> anyhow::Result<RegistryConfig> {
    Ok(RegistryConfig {
        base: url.clone(),
        endpoints: vec![url],
        transport: TransportConfig {
            insecure,
            extra_roots_pem: extra_roots(ca_cert)?,
            ..TransportConfig::default()
        },
        credentials: credential_options(auth),
        retry: RetryPolicy::default(),
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[test]
    fn transport_settings_reach_the_transport_config() {
        let cli = crate::commands::Cli::try_parse_from([
            "creb-rs",
            "pull",
            "--registry",
            "http://127.0.0.1:5000",
            "--repo",
            "x/y",
            "--http-client",
            "reqwest",
            "--http1-read-buffer",
            "1KiB",
        ])
        .unwrap();
        let crate::commands::Command::Pull(p) = cli.command else {
            panic!("not pull")
        };
        let config = RegistryConfig::try_from(&p.registry).unwrap();
        assert_eq!(config.transport.client, crate::net::HttpClient::Reqwest);
        // Below hyper's minimum: raised to it rather than refused.
        assert_eq!(
            config.transport.read_buffer_max,
            crate::net::MIN_READ_BUFFER
        );
    }
}
