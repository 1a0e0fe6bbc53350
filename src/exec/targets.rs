//! The endpoints a run may use and how the dispatcher picks one per operation: the router's
//! candidates for the object it touches, the first of them that is up.

use std::sync::Arc;
use std::time::Duration;

use crate::client::RegistryClient;
use crate::metrics::Recorder;
use crate::oci::Repository;
use crate::plan::{Action, PlannedOp};
use crate::route::health::{Choice, Health};
use crate::route::{Object, Request, RouteOptions, Router};

/// The endpoints a run may use and how it picks one per operation.
#[derive(Clone)]
#[allow(missing_debug_implementations)] // clients hold transports that are not `Debug`
pub struct Targets {
    /// One client (and connection pool) per endpoint, each recording through its own
    /// endpoint recorder when there are several.
    pub clients: Vec<RegistryClient>,
    pub router: Arc<Router>,
    pub health: Arc<Health>,
    /// How often a down endpoint is probed.
    pub probe_interval: Duration,
    /// Clients that do not record, for the probes.
    pub probes: Vec<RegistryClient>,
}

impl Targets {
    /// A single endpoint: every operation goes to it; failures are just failures.
    pub fn single(client: RegistryClient) -> Targets {
        let probe = client.with_recorder(Recorder::discard());
        Targets {
            // Never consulted with one endpoint; one point keeps it cheap.
            router: Arc::new(Router::new(
                &["0"],
                RouteOptions {
                    vnodes: 1,
                    ..RouteOptions::default()
                },
            )),
            clients: vec![client],
            health: Arc::new(Health::disabled(1)),
            probe_interval: Duration::from_secs(1),
            probes: vec![probe],
        }
    }

    /// Where an operation goes.
    pub(super) fn choose(&self, op: &PlannedOp) -> Choice {
        if self.clients.len() == 1 {
            return Choice::Use {
                endpoint: 0,
                failed_over: false,
            };
        }
        let mut reference = String::new();
        let (object, write) = object_of(&op.action, &mut reference);
        let candidates = self.router.candidates(&Request {
            seq: op.seq,
            client: op.client,
            object,
            write,
        });
        self.health.choose(&candidates)
    }
}

/// What an operation touches on the ring, and whether it writes; `scratch` holds a manifest
/// reference spelled out for it.
fn object_of<'a>(action: &'a Action, scratch: &'a mut String) -> (Object<'a>, bool) {
    let manifest = |repo: &'a Repository, reference: &'a str| Object::Manifest {
        repo: repo.as_str(),
        reference,
    };
    match action {
        Action::Ping => (Object::None, false),
        Action::ManifestGet {
            repo, reference, ..
        }
        | Action::ManifestHead { repo, reference } => {
            *scratch = reference.to_string();
            let spelled: &'a String = scratch;
            (manifest(repo, spelled), false)
        }
        Action::ManifestPut { repo, tag, .. } => (manifest(repo, tag.as_str()), true),
        Action::BlobGet { digest, .. } | Action::BlobHead { digest, .. } => {
            (Object::Blob(digest.as_str()), false)
        }
        // An upload goes where the manifest of its push will (see `Action::BlobUpload`).
        Action::BlobUpload {
            push: Some((repo, tag)),
            ..
        } => (manifest(repo, tag.as_str()), true),
        Action::BlobDelete { digest, .. }
        | Action::BlobUpload { digest, .. }
        | Action::BlobMount { digest, .. } => (Object::Blob(digest.as_str()), true),
        Action::ManifestDelete { repo, digest } => (manifest(repo, digest.as_str()), true),
        Action::TagList { repo } => (Object::Repository(repo.as_str()), false),
    }
}
