//! What gets measured: operation names, size classes and outcome kinds.
//!
//! Operation names are part of the result contract (`docs/results.md`, `cli.md`): scripts
//! and `--fail-if` expressions use them, so they never change meaning.

use std::fmt;

/// How an operation relates to the others, which decides what `totals` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Something the workload asked for (a blob GET, a whole blob upload, a manifest PUT).
    /// `totals.requests` counts these.
    Operation,
    /// One HTTP exchange inside an operation (the PATCHes of an upload, a redirect hop) or
    /// beside it (a token fetch). Reported per name, never added into `totals.requests`.
    Request,
    /// A group of operations with a dependency order (an image pull or push), or what a
    /// client does with what they brought (`--unpack`: a layer unpacked, an image ready to
    /// run). Never added into `totals.requests`.
    ///
    /// (`replication`, from a push's answer to a replica serving it, is a `Request`: it is
    /// reported in `operations`, per replica endpoint, and never added into the totals.)
    Session,
}

macro_rules! ops {
    ($( $variant:ident = $name:literal, $level:ident; )*) => {
        /// Every measured operation.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Op { $( $variant, )* }

        impl Op {
            pub const ALL: &'static [Op] = &[ $( Op::$variant, )* ];

            /// The stable name used in results and threshold expressions.
            pub const fn name(self) -> &'static str {
                match self { $( Op::$variant => $name, )* }
            }

            pub const fn level(self) -> Level {
                match self { $( Op::$variant => Level::$level, )* }
            }
        }
    };
}

ops! {
    Ping = "ping", Operation;
    ManifestGet = "manifest_get", Operation;
    ManifestHead = "manifest_head", Operation;
    ManifestPut = "manifest_put", Operation;
    ManifestDelete = "manifest_delete", Operation;
    BlobGet = "blob_get", Operation;
    BlobHead = "blob_head", Operation;
    BlobUpload = "blob_upload", Operation;
    BlobMount = "blob_mount", Operation;
    BlobDelete = "blob_delete", Operation;
    TagList = "tag_list", Operation;
    Referrers = "referrers", Operation;
    UploadPost = "upload_post", Request;
    UploadPatch = "upload_patch", Request;
    UploadPut = "upload_put", Request;
    UploadStatus = "upload_status", Request;
    Redirect = "redirect", Request;
    StorageGet = "storage_get", Request;
    TokenFetch = "token_fetch", Request;
    Replication = "replication", Request;
    ImagePull = "image_pull", Session;
    ImagePush = "image_push", Session;
    LayerUnpack = "layer_unpack", Session;
    ImageReady = "image_ready", Session;
}

impl Op {
    pub const COUNT: usize = Op::ALL.len();

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn from_name(name: &str) -> Option<Op> {
        Op::ALL.iter().copied().find(|op| op.name() == name)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Things worth counting that are not requests: fallbacks, retries, skips.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Event {
    /// A push found the blob already in the repository and skipped it.
    BlobExists,
    /// A cross-repository mount was not done; the blob was uploaded instead.
    MountFallback,
    /// A single-request upload was answered 202 (body ignored); the blob was sent again.
    SinglePostFallback,
    /// A request was answered 401 and retried with fresh credentials.
    AuthRetry,
    /// A redirect went to another origin; `Authorization` was withheld.
    RedirectCrossOrigin,
    /// Storage refused a redirected request (expired URL); the registry was asked again.
    StorageRetry,
    /// The registry had fewer upload bytes than sent; the upload resumed from its offset.
    UploadResume,
    /// A HEAD was answered 404 (the normal answer of an existence check).
    HeadMiss,
    /// A request was sent again after a failure (`--retry`).
    Retry,
    /// An endpoint was marked down (several endpoints: `--endpoint-down-after`).
    EndpointDown,
    /// A down endpoint answered its probe and was marked up.
    EndpointUp,
    /// An operation went to another endpoint because its own was down (`--failover`).
    Failover,
    /// HTTP/2: a request's stream was above the last stream id of a GOAWAY the server sent
    /// (it rotates connections, e.g. nginx's `keepalive_requests`): never processed.
    H2GoAway,
    /// HTTP/2: the server refused a request's stream (`REFUSED_STREAM`): never processed.
    H2RefusedStream,
    /// A request the server provably never processed (the two above) was sent again on a
    /// fresh connection; it is not an error and not a `--retry`.
    UnprocessedRetry,
    /// The registry has no referrers API (OCI 1.1): `GET /v2/<name>/referrers/<digest>`
    /// answered 404. Clients fall back to the referrers tag schema.
    ReferrersUnsupported,
    /// A full page of the tag list came without a `Link` to the next; the next was asked
    /// for with `last=` (a registry's deviation from the spec).
    TagListNoLink,
    /// `replay --unpack`: a layer read ended while the layers waiting to be unpacked were at
    /// their bound; it kept its in-flight slot until one was unpacked.
    UnpackBehind,
    /// `--replica`: a request creb-rs sent to a replica to watch for a push (a manifest GET
    /// or a blob HEAD): not the workload's, counted apart.
    ReplicaRequest,
    /// `--replica`: such a request failed (the replica down, refusing, 5xx); the watch
    /// goes on until `--replica-timeout`.
    ReplicaRequestFailed,
    /// `--replica`: a pushed image was not watched because `--replica-max-watches` images
    /// were watched already.
    ReplicaWatchSkipped,
}

impl Event {
    pub const ALL: [Event; 21] = [
        Event::BlobExists,
        Event::MountFallback,
        Event::SinglePostFallback,
        Event::AuthRetry,
        Event::RedirectCrossOrigin,
        Event::StorageRetry,
        Event::UploadResume,
        Event::HeadMiss,
        Event::Retry,
        Event::EndpointDown,
        Event::EndpointUp,
        Event::Failover,
        Event::H2GoAway,
        Event::H2RefusedStream,
        Event::UnprocessedRetry,
        Event::ReferrersUnsupported,
        Event::TagListNoLink,
        Event::UnpackBehind,
        Event::ReplicaRequest,
        Event::ReplicaRequestFailed,
        Event::ReplicaWatchSkipped,
    ];
    pub const COUNT: usize = Event::ALL.len();

    pub const fn name(self) -> &'static str {
        match self {
            Event::BlobExists => "blob_exists",
            Event::MountFallback => "mount_fallback",
            Event::SinglePostFallback => "single_post_fallback",
            Event::AuthRetry => "auth_retry",
            Event::RedirectCrossOrigin => "redirect_cross_origin",
            Event::StorageRetry => "storage_retry",
            Event::UploadResume => "upload_resume",
            Event::HeadMiss => "head_miss",
            Event::Retry => "retry",
            Event::EndpointDown => "endpoint_down",
            Event::EndpointUp => "endpoint_up",
            Event::Failover => "failover",
            Event::H2GoAway => "h2_goaway",
            Event::H2RefusedStream => "h2_refused_stream",
            Event::UnprocessedRetry => "unprocessed_retry",
            Event::ReferrersUnsupported => "referrers_unsupported",
            Event::TagListNoLink => "tag_list_no_link",
            Event::UnpackBehind => "unpack_behind",
            Event::ReplicaRequest => "replica_request",
            Event::ReplicaRequestFailed => "replica_request_failed",
            Event::ReplicaWatchSkipped => "replica_watch_skipped",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn from_name(name: &str) -> Option<Event> {
        Event::ALL.into_iter().find(|e| e.name() == name)
    }
}

/// Objects of very different sizes never share a histogram: a 2 KiB manifest and a 500 MiB
/// layer measure different things. Classes are by payload bytes of the exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SizeClass {
    Under1MiB,
    To10MiB,
    To100MiB,
    To1GiB,
    Over1GiB,
}

impl SizeClass {
    pub const ALL: [SizeClass; 5] = [
        SizeClass::Under1MiB,
        SizeClass::To10MiB,
        SizeClass::To100MiB,
        SizeClass::To1GiB,
        SizeClass::Over1GiB,
    ];
    pub const COUNT: usize = 5;

    pub fn of(bytes: u64) -> SizeClass {
        const MIB: u64 = 1 << 20;
        match bytes {
            b if b < MIB => SizeClass::Under1MiB,
            b if b < 10 * MIB => SizeClass::To10MiB,
            b if b < 100 * MIB => SizeClass::To100MiB,
            b if b < 1024 * MIB => SizeClass::To1GiB,
            _ => SizeClass::Over1GiB,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            SizeClass::Under1MiB => "lt_1mib",
            SizeClass::To10MiB => "1mib_10mib",
            SizeClass::To100MiB => "10mib_100mib",
            SizeClass::To1GiB => "100mib_1gib",
            SizeClass::Over1GiB => "ge_1gib",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// Why an exchange failed. Errors are data: counted by kind, never mixed into success
/// latencies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorKind {
    /// Name resolution failed.
    Dns,
    /// TCP connect failed (refused, unreachable).
    Connect,
    /// TLS handshake or certificate verification failed.
    Tls,
    /// No response (or no progress on the body) within the configured timeout. The latency
    /// of such a request is censored: it is at least the timeout.
    Timeout,
    /// The connection was reset (TCP RST) mid-exchange.
    Reset,
    /// The server closed the connection before this request's answer was complete: after
    /// an HTTP/2 GOAWAY for a request it had taken, or an HTTP/1.1 connection closed under
    /// it. The request may have been processed, so it is never sent again silently.
    ConnectionClosed,
    /// The body ended before its announced length.
    ShortBody,
    /// Another failure while reading or writing a body.
    Body,
    /// The server answered with an unexpected status (4xx/5xx, or 3xx without Location).
    Http(u16),
    /// Received bytes do not hash to the expected digest.
    DigestMismatch,
    /// Received a different number of bytes than the descriptor or trace says.
    SizeMismatch,
    /// A response that breaks the protocol (missing Location, a bad upload offset, ...).
    Protocol,
    /// A body larger than creb-rs reads for its kind of answer: a blob longer than its
    /// descriptor (that is `size_mismatch`), or a manifest, tag page, token or error body
    /// over its cap.
    TooLarge,
    /// A manifest GET answered with something that is not a manifest of a type it asked
    /// for: an HTML page (a login portal, a proxy's error), JSON of another shape.
    NotAManifest,
    /// The answer's `Docker-Content-Digest` is not the digest of its body.
    DigestHeaderMismatch,
    /// A JSON answer (tag list, referrers, token) that is not the JSON asked for.
    NotJson,
    /// Credentials were refused or a token could not be obtained.
    Auth,
    /// Stopped by shutdown (Ctrl-C) before it completed.
    Cancelled,
    /// Not sent: its endpoint was down and failover is off (`--no-failover`).
    EndpointDown,
    /// An unpacked layer (`--unpack`) is not the compression its media type declares, or
    /// not a tar.
    LayerInvalid,
    /// An unpacked layer's tar does not hash to the diff_id its image's config gives it.
    DiffIdMismatch,
    /// An unpacked layer holds an entry whose path or link would leave the directory.
    UnsafePath,
    /// An unpacked layer's tar grew past its bound (a decompression bomb): stopped.
    DecompressionBomb,
    /// `--replica`: a replica did not serve a pushed image within `--replica-timeout`.
    ReplicationTimeout,
    /// `--replica`: a replica served other content under a pushed manifest's digest.
    ReplicaMismatch,
    /// Anything else the transport reported.
    Other,
}

impl ErrorKind {
    /// Stable key in `errors` maps: `timeout`, `connect`, `http_404`, ...
    pub fn key(self) -> String {
        match self {
            ErrorKind::Http(code) => format!("http_{code}"),
            other => other.static_key().to_owned(),
        }
    }

    fn static_key(self) -> &'static str {
        match self {
            ErrorKind::Dns => "dns",
            ErrorKind::Connect => "connect",
            ErrorKind::Tls => "tls",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Reset => "reset",
            ErrorKind::ConnectionClosed => "connection_closed",
            ErrorKind::ShortBody => "short_body",
            ErrorKind::Body => "body",
            ErrorKind::Http(_) => "http",
            ErrorKind::DigestMismatch => "digest_mismatch",
            ErrorKind::SizeMismatch => "size_mismatch",
            ErrorKind::Protocol => "protocol",
            ErrorKind::TooLarge => "too_large",
            ErrorKind::NotAManifest => "not_a_manifest",
            ErrorKind::DigestHeaderMismatch => "digest_header_mismatch",
            ErrorKind::NotJson => "not_json",
            ErrorKind::Auth => "auth",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::EndpointDown => "endpoint_down",
            ErrorKind::LayerInvalid => "layer_invalid",
            ErrorKind::DiffIdMismatch => "diff_id_mismatch",
            ErrorKind::UnsafePath => "unsafe_path",
            ErrorKind::DecompressionBomb => "decompression_bomb",
            ErrorKind::ReplicationTimeout => "replication_timeout",
            ErrorKind::ReplicaMismatch => "replica_mismatch",
            ErrorKind::Other => "other",
        }
    }

    /// Parses a key produced by [`ErrorKind::key`].
    pub fn from_key(key: &str) -> Option<ErrorKind> {
        if let Some(code) = key.strip_prefix("http_") {
            return code.parse().ok().map(ErrorKind::Http);
        }
        [
            ErrorKind::Dns,
            ErrorKind::Connect,
            ErrorKind::Tls,
            ErrorKind::Timeout,
            ErrorKind::Reset,
            ErrorKind::ConnectionClosed,
            ErrorKind::ShortBody,
            ErrorKind::Body,
            ErrorKind::DigestMismatch,
            ErrorKind::SizeMismatch,
            ErrorKind::Protocol,
            ErrorKind::TooLarge,
            ErrorKind::NotAManifest,
            ErrorKind::DigestHeaderMismatch,
            ErrorKind::NotJson,
            ErrorKind::Auth,
            ErrorKind::Cancelled,
            ErrorKind::EndpointDown,
            ErrorKind::LayerInvalid,
            ErrorKind::DiffIdMismatch,
            ErrorKind::UnsafePath,
            ErrorKind::DecompressionBomb,
            ErrorKind::ReplicationTimeout,
            ErrorKind::ReplicaMismatch,
            ErrorKind::Other,
        ]
        .into_iter()
        .find(|k| k.static_key() == key)
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for op in Op::ALL {
            assert_eq!(Op::from_name(op.name()), Some(*op));
        }
        for kind in [
            ErrorKind::Http(429),
            ErrorKind::Timeout,
            ErrorKind::DigestMismatch,
            ErrorKind::TooLarge,
            ErrorKind::NotAManifest,
            ErrorKind::DigestHeaderMismatch,
            ErrorKind::NotJson,
            ErrorKind::LayerInvalid,
            ErrorKind::DiffIdMismatch,
            ErrorKind::UnsafePath,
            ErrorKind::DecompressionBomb,
            ErrorKind::ReplicationTimeout,
            ErrorKind::ReplicaMismatch,
        ] {
            assert_eq!(ErrorKind::from_key(&kind.key()), Some(kind));
        }
        assert_eq!(ErrorKind::from_key("http_x"), None);
    }

    #[test]
    fn size_class_bounds() {
        assert_eq!(SizeClass::of(0), SizeClass::Under1MiB);
        assert_eq!(SizeClass::of((1 << 20) - 1), SizeClass::Under1MiB);
        assert_eq!(SizeClass::of(1 << 20), SizeClass::To10MiB);
        assert_eq!(SizeClass::of(1 << 30), SizeClass::Over1GiB);
    }
}
