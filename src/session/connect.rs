//! Reaching a registry, for every workload that talks to one: the validated registry
//! settings, credentials resolved once, a client per endpoint, and the preflight `GET /v2/`
//! that proves an endpoint answers before any work is done.

use std::sync::Arc;

use anyhow::Context;
use url::Url;

use crate::auth::credentials::{self, CredentialInfo, CredentialOptions};
use crate::auth::registry_auth::RegistryAuth;
use crate::auth::secret::Credentials;
use crate::client::retry::RetryPolicy;
use crate::client::{ClientError, ClientOptions, OpCtx, RegistryClient};
use crate::exec::replicate::ReplicaSpec;
pub use crate::exec::replicate::{Pushed, Replica, Replicas};
use crate::metrics::{ErrorLog, Recorder};
use crate::net::transport::Transport;
use crate::net::{build_transport, TransportConfig};
use crate::results::config::RegistryBlock;
use crate::results::store::EndpointLink;
use crate::shutdown::Shutdown;

/// Validated registry settings.
#[derive(Debug, Clone)]
pub struct RegistryConfig {
    /// The (first) endpoint.
    pub base: Url,
    /// Every endpoint, in the order given.
    pub endpoints: Vec<Url>,
    pub transport: TransportConfig,
    /// How to find credentials; resolved when connecting (see [`Connection`]).
    pub credentials: CredentialOptions,
    pub retry: RetryPolicy,
}

/// A client ready for a run, and what was resolved on the way.
#[derive(Debug)]
pub struct Connection {
    pub client: RegistryClient,
    /// Where the credentials came from (for the result metadata; never the secret).
    pub credentials: CredentialInfo,
    pub auth: Arc<RegistryAuth>,
}

impl Connection {
    /// The client, recording into `recorder` from now on (token fetches included).
    pub fn client_for(&self, recorder: Recorder) -> RegistryClient {
        self.auth.set_recorder(recorder.clone());
        self.client.with_recorder(recorder)
    }
}

impl RegistryConfig {
    /// The registry as the results record it (no credential in it).
    pub fn block(&self) -> RegistryBlock {
        RegistryBlock {
            base: self.base.clone(),
            endpoints: self.endpoints.clone(),
            transport: self.transport.clone(),
            retry: self.retry.clone(),
        }
    }

    /// Resolves credentials (running helpers or password commands once) and builds a
    /// client whose connection pool fits `concurrency`. A stop while the credentials are
    /// resolved ends the resolution: the connection is then anonymous, its credentials'
    /// source says so, and the caller's stopped run starts nothing with it.
    pub async fn connect(
        &self,
        recorder: Recorder,
        mut options: ClientOptions,
        concurrency: usize,
        stop: &Shutdown,
    ) -> anyhow::Result<Connection> {
        options.retry = self.retry.clone();
        let resolved = stop
            .race(credentials::resolve(&self.credentials, &self.base))
            .await
            .transpose()
            .with_context(|| format!("credentials for {}", self.display()))?;
        let (creds, info) = resolved.unwrap_or_else(|| {
            let info = CredentialInfo {
                source: "not resolved (stopped first)".into(),
                username: None,
            };
            (Credentials::Anonymous, info)
        });
        self.connect_with(creds, info, recorder, options, concurrency)
    }

    /// A replica's connection (`--replica URL`), which records into `recorder`: the
    /// credentials the Docker config holds for the replica's host, else the primary's
    /// (`primary`, whatever gave them: flags, environment or Docker config); the primary's
    /// TLS, transport and retry settings.
    pub async fn connect_replica(
        &self,
        url: &Url,
        primary: &Connection,
        recorder: Recorder,
        stop: &Shutdown,
    ) -> anyhow::Result<Connection> {
        let replica = RegistryConfig {
            base: url.clone(),
            endpoints: vec![url.clone()],
            credentials: CredentialOptions {
                username: None,
                password: None,
                ..self.credentials.clone()
            },
            ..self.clone()
        };
        let own = stop
            .race(credentials::resolve(&replica.credentials, url))
            .await
            .transpose()
            .with_context(|| format!("credentials for --replica {}", replica.display()))?;
        let (creds, info) = match own {
            Some((creds, info)) if creds != Credentials::Anonymous => (creds, info),
            _ => (
                primary.auth.credentials().clone(),
                CredentialInfo {
                    source: format!("the primary's ({})", primary.credentials.source),
                    username: primary.credentials.username.clone(),
                },
            ),
        };
        let options = ClientOptions {
            retry: self.retry.clone(),
            ..ClientOptions::default()
        };
        replica.connect_with(creds, info, recorder, options, 4)
    }

    /// Connects to each replica of `spec` (`--replica`) for a run connected to this
    /// registry as `primary`: each replica's client records nothing (the watch is not the
    /// workload), its `replication` samples go to `recorder` for endpoint `first + i`.
    pub async fn connect_replicas(
        &self,
        spec: &ReplicaSpec,
        primary: &Connection,
        recorder: &Recorder,
        first: usize,
        errors: &ErrorLog,
        stop: &Shutdown,
    ) -> anyhow::Result<(Replicas, Vec<Connection>)> {
        let mut replicas = Vec::new();
        let mut connections = Vec::new();
        for (i, (url, name)) in spec.urls.iter().zip(spec.names()).enumerate() {
            let c = (self.connect_replica(url, primary, Recorder::discard(), stop)).await?;
            replicas.push(Replica {
                name,
                client: c.client.clone(),
                recorder: recorder.for_endpoint(first + i),
            });
            connections.push(c);
        }
        let replicas = Replicas::new(replicas, spec.work, recorder.clone(), errors.clone());
        Ok((replicas, connections))
    }

    /// The client of these settings with credentials already resolved.
    fn connect_with(
        &self,
        creds: Credentials,
        info: CredentialInfo,
        recorder: Recorder,
        options: ClientOptions,
        concurrency: usize,
    ) -> anyhow::Result<Connection> {
        tracing::info!(registry = %self.display(), credentials = %info.source, "connecting");
        let mut transport = self.transport.clone();
        transport.pool_max_idle_per_host = transport.pool_max_idle_per_host.max(concurrency);
        if transport.read_buffer_max == 0 {
            transport.read_buffer_max = crate::net::read_buffer_for(concurrency);
        }
        let transport: Arc<dyn Transport> = build_transport(transport)?;
        let auth = Arc::new(
            RegistryAuth::new(creds, Arc::clone(&transport), recorder.clone())
                .for_registry(&self.base),
        );
        let client = RegistryClient::with_auth(
            transport,
            self.base.clone(),
            recorder,
            options,
            Arc::clone(&auth) as Arc<dyn crate::auth::Authenticator>,
        );
        Ok(Connection {
            client,
            credentials: info,
            auth,
        })
    }

    /// The registry as shown in results: scheme, host and port.
    pub fn display(&self) -> String {
        self.base.as_str().trim_end_matches('/').to_owned()
    }

    /// Every endpoint as shown in results (at least the base).
    pub fn endpoint_names(&self) -> Vec<String> {
        if self.endpoints.is_empty() {
            return vec![self.display()];
        }
        self.endpoints
            .iter()
            .map(|u| u.as_str().trim_end_matches('/').to_owned())
            .collect()
    }

    /// The settings of endpoint `index` alone.
    pub fn for_endpoint(&self, index: usize) -> RegistryConfig {
        let base = self
            .endpoints
            .get(index)
            .cloned()
            .unwrap_or_else(|| self.base.clone());
        RegistryConfig {
            base: base.clone(),
            endpoints: vec![base],
            ..self.clone()
        }
    }

    /// Refuses several endpoints (commands that drive one registry).
    pub fn single(self, command: &str) -> anyhow::Result<RegistryConfig> {
        if self.endpoints.len() > 1 {
            anyhow::bail!(
                "{command} takes one --registry; several endpoints are for replay (--route)"
            );
        }
        Ok(self)
    }
}

/// `GET /v2/` before the workload: proves the registry answers, and teaches the client the
/// authentication scheme so credentials go out with the first real request. The error is
/// one line a person can act on.
///
/// It races `stop`: a signal ends it with `Ok` (the caller's stopped run starts nothing and
/// is marked interrupted, 130/143 outranking 2); `--max-run-time` ends it with the error
/// that the registry did not answer in time.
pub async fn preflight(
    connection: &Connection,
    registry: &str,
    stop: &Shutdown,
) -> Result<(), String> {
    let anonymous = connection.credentials.source == "anonymous";
    let Some(answer) = stop.race(connection.client.ping(OpCtx::default())).await else {
        if stop.by_limit() {
            // Which exchange hung: the registry's own, or its token service's after the
            // challenge.
            return Err(match connection.client.token_service() {
                Some(service) => format!(
                    "{registry} answered GET /v2/ with a token challenge, but its token \
                     service {service} issued no token before --max-run-time ended the run"
                ),
                None => format!(
                    "{registry} did not answer GET /v2/ before --max-run-time ended the run"
                ),
            });
        }
        return Ok(());
    };
    match answer {
        Ok(()) => {
            tracing::info!(registry, "the registry answers GET /v2/");
            Ok(())
        }
        Err(ClientError::Auth(e)) => Err(format!("{registry}: {e}")),
        Err(e @ ClientError::Status { status: 401, .. }) if anonymous => Err(format!(
            "{registry} requires credentials ({e}): give --username with --password-stdin or --password-cmd, or log in with docker"
        )),
        Err(e @ ClientError::Status { status: 401 | 403, .. }) => Err(format!(
            "{registry} refused the credentials from {} ({e})",
            connection.credentials.source
        )),
        Err(e) => Err(format!("{registry} is not usable: {e}")),
    }
}

/// How each of `connections` (one per endpoint, named as in the results by `names`)
/// reached its registry, for `meta.json`.
pub fn endpoint_links(names: &[String], connections: &[Connection]) -> Vec<EndpointLink> {
    names
        .iter()
        .zip(connections)
        .map(|(url, connection)| EndpointLink {
            url: url.clone(),
            link: connection.client.link(),
        })
        .collect()
}
