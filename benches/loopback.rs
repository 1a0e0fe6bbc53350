//! End to end on loopback: what the OCI client costs per manifest GET, with everything a run
//! does around it — the transport (real sockets, pooled keep-alive connections; both
//! `--http-client` choices, hyper and reqwest),
//! `RegistryAuth` (anonymous), `RegistryClient::manifest_get` with its `Meter`, digest
//! verification, and every sample sent to a running aggregator.
//!
//! The server is a minimal in-process HTTP/1.1 server (hyper) on 127.0.0.1 answering
//! `GET /v2/` with 200 and `GET /v2/<repo>/manifests/<ref>` with a fixed 1 KiB OCI manifest
//! (`Content-Type`, `Docker-Content-Digest`, `Content-Length`), everything else 404. A mock is
//! right here because this bench measures the client, not a registry: the server does as
//! little as possible, on its own one-thread runtime. Registry behaviour is tested against
//! a real `docker-registry` in `tests/`.
//!
//! `manifest_get_<client>/in_flight_50` keeps 50 GETs in flight (as `creb-rs pull` drives them,
//! `buffer_unordered` over one client); `in_flight_1` is one at a time, so its time per
//! request is the unloaded round trip. Each iteration is a batch of 2,000 requests: the
//! throughput is requests/s, the time per request is the batch time / 2,000 (at 50 in flight
//! a request's own latency is ~50× that, Little's law); the client's own latency percentiles
//! (`Meter`, sent → body read and verified) are printed after each benchmark. On a machine
//! of few cores the client and server share the CPU: figures are the pair's.
//! Goal: ≥ 10k manifest GETs/s with 50 in flight on 2 vCPU, so a single creb-rs process is
//! not what limits a registry that serves small objects on a fast network.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use creb::auth::credentials::Credentials;
use creb::auth::registry_auth::RegistryAuth;
use creb::client::{ClientOptions, OpCtx, RegistryClient};
use creb::digest::Digest;
use creb::metrics::{AggregatorBuilder, Op, Recorder};
use creb::net::{build_transport, HttpClient, TransportConfig};
use creb::oci::manifest::{build_manifest, Descriptor, ManifestFormat, OCI_CONFIG, OCI_LAYER};
use creb::oci::{Reference, Repository};
use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use futures_util::StreamExt;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};

const BATCH: u64 = 2_000;

/// The served manifest: OCI, a config and four layers, padded to exactly 1 KiB.
struct Manifest {
    bytes: Bytes,
    digest: String,
}

fn manifest() -> Manifest {
    let descriptor = |media_type: &str, n: u8, size: u64| Descriptor {
        media_type: media_type.into(),
        digest: Digest::sha256_of(&[n]),
        size,
        platform: None,
    };
    let config = descriptor(OCI_CONFIG, 0, 1_469);
    let layers: Vec<Descriptor> = (1..=4)
        .map(|n| descriptor(OCI_LAYER, n, 1_000_000 * u64::from(n)))
        .collect();
    let bytes = build_manifest(ManifestFormat::Oci, &config, &layers, Some(1024));
    assert_eq!(bytes.len(), 1024);
    Manifest {
        digest: Digest::sha256_of(&bytes).to_string(),
        bytes,
    }
}

fn respond(req: &Request<Incoming>, m: &Manifest) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    let builder = Response::builder().header("Docker-Distribution-API-Version", "registry/2.0");
    let response = if req.method() != Method::GET {
        builder
            .status(StatusCode::METHOD_NOT_ALLOWED)
            .body(Full::new(Bytes::new()))
    } else if path == "/v2/" {
        builder
            .header("Content-Type", "application/json")
            .body(Full::new(Bytes::from_static(b"{}")))
    } else if path.starts_with("/v2/") && path.contains("/manifests/") {
        builder
            .header("Content-Type", ManifestFormat::Oci.manifest_type())
            .header("Docker-Content-Digest", m.digest.as_str())
            .body(Full::new(m.bytes.clone()))
    } else {
        builder
            .status(StatusCode::NOT_FOUND)
            .body(Full::new(Bytes::new()))
    };
    response.expect("valid response")
}

/// Starts the server on 127.0.0.1 (a free port) on its own runtime; it stops when the
/// runtime is dropped.
fn start_server() -> (tokio::runtime::Runtime, SocketAddr) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("loopback-server")
        .enable_all()
        .build()
        .expect("server runtime");
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(("127.0.0.1", 0)))
        .expect("bind 127.0.0.1");
    let addr = listener.local_addr().expect("local address");
    let m = Arc::new(manifest());
    rt.spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let m = Arc::clone(&m);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let response = respond(&req, &m);
                    async move { Ok::<_, Infallible>(response) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (rt, addr)
}

/// The client as `RegistryConfig::connect` builds it (src/session/mod.rs), anonymous.
fn client(addr: SocketAddr, recorder: Recorder, http: HttpClient) -> RegistryClient {
    let transport = build_transport(TransportConfig {
        client: http,
        pool_max_idle_per_host: 64,
        ..TransportConfig::default()
    })
    .expect("transport");
    let auth = Arc::new(RegistryAuth::new(
        Credentials::Anonymous,
        Arc::clone(&transport),
        recorder.clone(),
    ));
    let base = format!("http://{addr}/").parse().expect("url");
    RegistryClient::with_auth(transport, base, recorder, ClientOptions::default(), auth)
}

/// `BATCH` manifest GETs with `in_flight` outstanding.
async fn batch(
    client: &RegistryClient,
    repo: &Repository,
    reference: &Reference,
    in_flight: usize,
) {
    futures_util::stream::iter(0..BATCH)
        .map(|_| client.manifest_get(repo, reference, OpCtx::default()))
        .buffer_unordered(in_flight)
        .for_each(|r| {
            r.expect("manifest GET");
            async {}
        })
        .await;
}

fn loopback(c: &mut Criterion) {
    let (server, addr) = start_server();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("client runtime");
    let repo: Repository = "library/bench".parse().expect("repository");
    let reference: Reference = "latest".parse().expect("tag");

    let mut group = c.benchmark_group("loopback");
    group.throughput(Throughput::Elements(BATCH));
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(2));
    group.measurement_time(Duration::from_secs(6));
    for (http, in_flight) in [
        (HttpClient::Hyper, 50),
        (HttpClient::Reqwest, 50),
        (HttpClient::Hyper, 1),
        (HttpClient::Reqwest, 1),
    ] {
        let name = format!("manifest_get_{}", format!("{http:?}").to_lowercase());
        let (recorder, aggregator) = rt.block_on(async { AggregatorBuilder::default().spawn() });
        let client = client(addr, recorder, http);
        rt.block_on(async {
            // As every run starts: the preflight GET /v2/, then one checked manifest.
            client.ping(OpCtx::default()).await.expect("ping");
            let got = client
                .manifest_get(&repo, &reference, OpCtx::default())
                .await
                .expect("manifest");
            assert_eq!(got.bytes, manifest().bytes);
            assert_eq!(got.media_type(), Some(ManifestFormat::Oci.manifest_type()));
        });
        group.bench_function(
            BenchmarkId::new(&name, format!("in_flight_{in_flight}")),
            |b| b.iter(|| rt.block_on(batch(&client, &repo, &reference, in_flight))),
        );
        drop(client);
        let aggregator = rt.block_on(aggregator.finish());
        let gets = aggregator
            .table()
            .op_total(Op::ManifestGet)
            .expect("samples");
        assert_eq!(gets.errors, 0);
        let ms = |q: f64| gets.latency.value_at_quantile(q) as f64 / 1000.0;
        println!(
            "loopback/{name}/in_flight_{in_flight}: client latency over {} requests: \
             p50 {:.3} ms, p99 {:.3} ms, p99.9 {:.3} ms",
            gets.count,
            ms(0.5),
            ms(0.99),
            ms(0.999)
        );
    }
    group.finish();
    drop(rt);
    drop(server);
}

criterion_group!(benches, loopback);
criterion_main!(benches);
