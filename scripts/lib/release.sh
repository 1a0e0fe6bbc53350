# The release build users get, shared by scripts/dist and the benchmarks (scripts/lib/bench.sh,
# bench-floor, bench-layers); sourced, not run, from the repository's root.

# Builds for `target` in the release profile, static, and profile-guided unless PGO=0: the
# profile comes from scripts/pgo-profile (creb-rs built instrumented, run against a local
# registry; docs/benchmarks.md, "The hot path", step 33), made once per shell. Without
# further arguments it builds creb-rs (target/TARGET/release/creb-rs); further arguments go
# to cargo (`--example floor_client`: built as the benchmarks' creb-rs is).
release_build() { # target [cargo arguments]
  local target=$1
  shift
  rustup target add "$target" >/dev/null
  if [ "${PGO:-1}" = 1 ]; then
    if [ -z "${pgo_profile:-}" ]; then
      pgo_profile=$(TARGET="$target" scripts/pgo-profile)
    fi
    RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-use=$pgo_profile" \
      cargo build --release --locked --quiet --target "$target" "$@"
  else
    cargo build --release --locked --quiet --target "$target" "$@"
  fi
}
