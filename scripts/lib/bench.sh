# Shared by scripts/bench-compare, bench-families, bench-ab, bench-floor, bench-instructions and
# bench-layers; sourced, not run. The caller sets `set -euo pipefail`, works from the
# repository's root, checks its tools, then calls bench_init. Loopback only.

# shellcheck source=scripts/lib/release.sh
. scripts/lib/release.sh

# Builds (or takes CREB_BIN) the binary under test into $bin, makes the scratch directory
# $work, and stops every server in $servers and removes $work on exit.
bench_init() {
  # The binary users get: the static musl build, profile-guided as scripts/dist builds it
  # (PGO=0: without the profile; CREB_BIN=path measures another build).
  if [ -z "${CREB_BIN:-}" ]; then
    release_build x86_64-unknown-linux-musl
  fi
  bin=${CREB_BIN:-$(pwd)/target/x86_64-unknown-linux-musl/release/creb-rs}
  work=$(mktemp -d)
  servers=()
  trap bench_cleanup EXIT
}

bench_cleanup() {
  # A server that already exited must not stop the others being stopped.
  for p in ${servers[@]+"${servers[@]}"}; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}

# A free TCP port on 127.0.0.1.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Waits up to 10 s for a server to listen on `port`; exits with a message if it does not.
wait_port() { # port name
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done
  echo "$(basename "$0"): $2 is not listening on port $1 after 10 s" >&2
  exit 1
}

# CPU seconds (user + system) a process has used so far.
cpu_of() { # pid
  awk '{print ($14+$15)/100}' "/proc/$1/stat"
}

# Starts a fresh docker-registry (filesystem storage under $work/data, no access log) and
# sets $registry_pid and $reg, its URL. With GCTRACE=1 the Go runtime writes a line per
# garbage collection to $work/registry.log (GODEBUG=gctrace=1; see gc_since).
start_registry() {
  local port godebug=()
  [ "${GCTRACE:-0}" != 1 ] || godebug=(GODEBUG=gctrace=1)
  port=$(free_port)
  cat >"$work/registry.yml" <<YAML
version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $work/data
http:
  addr: 127.0.0.1:$port
YAML
  env ${godebug[@]+"${godebug[@]}"} docker-registry serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
  registry_pid=$!
  servers+=("$registry_pid")
  wait_port "$port" docker-registry
  reg="http://127.0.0.1:$port"
}

# Fetches the manifest at `url` with Accept `accept` into `file` and prints its digest (the
# servers that stand in for the registry send it as Docker-Content-Digest).
fetch_manifest() { # url accept file
  curl -sf -H "Accept: $2" "$1" >"$3"
  echo "sha256:$(sha256sum "$3" | cut -d' ' -f1)"
}

# Starts nginx (one worker, no access log) serving the manifest at `url` (a registry's
# v2/bench/one/manifests/t1), fetched once with Accept `accept`, as a static file at the same
# path with the registry's headers: its type and its Docker-Content-Digest. A generator is
# then the limit, not the server (section 4 of bench-compare, `NGINX=1 scripts/bench-floor`).
# Sets $nginx_pid and $ngx, its URL.
start_nginx_manifest() { # url accept
  local url=$1 accept=$2 port digest
  port=$(free_port)
  mkdir -p "$work/www/v2/bench/one/manifests" "$work/nginx-tmp"
  echo '{}' >"$work/www/v2/index.html"
  digest=$(fetch_manifest "$url" "$accept" "$work/www/v2/bench/one/manifests/t1")
  chmod -R a+rX "$work"
  cat >"$work/nginx.conf" <<NGINX
daemon off;
master_process off;
worker_processes 1;
pid $work/nginx.pid;
error_log $work/nginx-error.log error;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work/nginx-tmp;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$port;
    root $work/www;
    index index.html;
    location /v2/bench/one/manifests/ {
      default_type $accept;
      add_header Docker-Content-Digest $digest;
    }
  }
}
NGINX
  nginx -p "$work" -c "$work/nginx.conf" &
  nginx_pid=$!
  servers+=("$nginx_pid")
  wait_port "$port" nginx
  ngx="http://127.0.0.1:$port"
}

# Starts examples/paced_server.rs ($paced_bin, built by the caller) serving the manifest at
# `url` (fetched once with Accept `accept`) at the same path with the registry's headers: each
# GET answered `delay_ms` after its request, after writing over `work_kib` KiB of the server's
# memory `passes` times (a registry's pace without its garbage collector or its disk,
# `scripts/bench-floor` PACED= and EVICT=). Sets $paced_pid and $paced, its URL.
start_paced_server() { # url accept delay_ms work_kib passes
  local url=$1 accept=$2 port digest path
  port=$(free_port)
  path=/${url#*://*/}
  digest=$(fetch_manifest "$url" "$accept" "$work/paced-manifest")
  "$paced_bin" "127.0.0.1:$port" "$path" "$work/paced-manifest" "$accept" "$digest" "$3" "$4" "$5" &
  paced_pid=$!
  servers+=("$paced_pid")
  wait_port "$port" paced_server
  paced="http://127.0.0.1:$port"
}

# Lines in the registry's log so far: where a run's garbage collections start (gc_since).
gc_mark() {
  wc -l <"$work/registry.log"
}

# The registry's garbage collections since log line `from` (gc_mark), over `gets` requests:
# "collections per 1,000 requests, mean live heap after each (MB)", or "nan nan" without
# GCTRACE=1. A Go server whose live heap is small collects every few megabytes allocated,
# and the live heap follows the requests in its hands, so how often it collects follows how
# the generator hands them over (docs/benchmarks.md, "The hot path", step 32).
gc_since() { # from gets
  python3 - "$work/registry.log" "$1" "$2" <<'PY'
import re, sys
path, start, gets = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(path, errors="replace") as f:
    lines = f.read().splitlines()[start:]
# gc N @T s P%: ... ms cpu, A->B->C MB, D MB goal, ...: C is the heap marked live.
live = [int(m.group(1)) for m in (re.search(r"->\d+->(\d+) MB, \d+ MB goal", l)
        for l in lines if l.startswith("gc ")) if m]
print(f"{len(live) / max(gets, 1) * 1000:.1f} {sum(live) / len(live):.2f}" if live else "nan nan")
PY
}

# The machine and the binary, the first line of every benchmark's output.
machine_line() {
  echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -r); $("$bin" --version)"
}

# Writes a trace of `gets` GETs of one 1 KiB manifest (v2/bench/one/manifests/t1), one per
# millisecond, from `clients` clients in turn: pull sessions without layers (sections 1 and
# 10 of bench-compare, and bench-ab).
manifest_trace() { # file gets clients
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
path, gets, clients = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(path, "w") as f:
    f.write("[\n")
    for i in range(gets):
        t = "2017-06-20T00:%02d:%02d.%03dZ" % ((i // 60000) % 60, (i // 1000) % 60, i % 1000)
        rec = {"http.request.method": "GET", "http.request.uri": "v2/bench/one/manifests/t1",
               "http.request.remoteaddr": "c%04d" % (i % clients), "http.response.status": 200,
               "http.response.written": 1024, "http.request.duration": 0.001,
               "id": "%010x" % i, "timestamp": t}
        f.write(("," if i else "") + json.dumps(rec) + "\n")
    f.write("]\n")
PY
}

# What wrk sends as Accept: the header creb-rs sends with every manifest GET
# (oci::manifest::ACCEPT; a unit test keeps the two equal), so that both generators ask the
# registry for the same work (on an AMD EPYC VM, wrk asking for five types got 2-4% fewer
# GETs per second than asking for one, in three alternating pairs of 8 s).
request_accept='application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.docker.distribution.manifest.v1+prettyjws;q=0.5'
