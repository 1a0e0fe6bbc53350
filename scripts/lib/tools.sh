# The registries the compatibility suite runs besides Debian's docker-registry, pinned, and
# where scripts/setup installs them (`go install` from the Go module proxy). Sourced by
# scripts/setup; the tests read the same directory (CREB_TOOLS, default below).
CREB_TOOLS="${CREB_TOOLS:-$HOME/.cache/creb-rs/tools}"
# CNCF distribution v3: `registry serve config.yml`.
DISTRIBUTION_MODULE=github.com/distribution/distribution/v3/cmd/registry
DISTRIBUTION_VERSION=v3.1.2
# go-containerregistry: `crane registry serve --address ADDR --disk DIR`.
GGCR_MODULE=github.com/google/go-containerregistry/cmd/crane
GGCR_VERSION=v0.22.1
# An S3 server for distribution's S3 storage driver: gofakes3 (`-backend fs -fs.path DIR`),
# the S3 protocol served from a directory (SeaweedFS's module cannot be `go install`ed: its
# go.mod has replace directives; MinIO is AGPL).
S3_MODULE=github.com/johannesboyne/gofakes3/cmd/gofakes3
S3_VERSION=v1.2.0
# umoci unpacks generated images as a runtime's image tool does (`umoci unpack --rootless`);
# 0.5 reads zstd layers, which Debian's 0.4.7 refuses.
UMOCI_MODULE=github.com/opencontainers/umoci/cmd/umoci
UMOCI_VERSION=v0.5.0
