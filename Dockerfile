# syntax=docker/dockerfile:1
#
# wavegate container image: a static-ish Rust binary on distroless (glibc + libgcc, no shell,
# no package manager), running as uid/gid 65532.
#
#   docker build -t wavegate:0.1.0 .
#
# Stages: chef (toolchain + cargo-chef) → planner (dependency recipe from the manifests) →
# builder (dependencies in their own layer, rebuilt only when Cargo.toml/Cargo.lock change;
# then the crate) → runtime.

# Base images by tag, NOT YET BY DIGEST (issue 9, item 8). A digest pins the exact bytes a build
# starts from, so a re-pushed tag cannot change the image; it must be read from the registry
# (`docker buildx imagetools inspect gcr.io/distroless/cc-debian12:nonroot`, `crane digest …`),
# and the machines this repository is built and tested on cannot reach a container registry, so
# no digest here could be verified — and an unverified digest is worse than none. Pin at release
# time without editing this file:
#   docker build \
#     --build-arg RUST_IMAGE=rust:1-bookworm@sha256:<digest> \
#     --build-arg RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot@sha256:<digest> .
# (or commit the digests here, and let Renovate/Dependabot's docker manager keep them current).
ARG RUST_IMAGE=rust:1-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot
ARG GO_IMAGE=golang:1-bookworm
# The Argo CD releases whose bundled health scripts the image ships (`serve --argocd-version`
# picks one): the same three the conformance test runs (tests/offline/argocd_lua.rs).
ARG ARGOCD_RELEASES="v3.4.7 v3.5.1 v3.6.1"

# Argo CD's bundled health scripts, unmodified, from the argo-cd Go module (through the Go
# module proxy, checked against sum.golang.org as every module download is): only each
# release's `resource_customizations/<group>/<Kind>/health.lua`, to
# /out/argocd/<release>/<group>/<Kind>/health.lua. Nothing of Argo CD is in this repository.
FROM ${GO_IMAGE} AS argocd-scripts
ARG ARGOCD_RELEASES
RUN set -eu; \
    for v in ${ARGOCD_RELEASES}; do \
      dir=$(cd /tmp && GOTOOLCHAIN=auto go mod download -json "github.com/argoproj/argo-cd/v3@$v" \
            | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'); \
      test -d "$dir/resource_customizations"; \
      cd "$dir/resource_customizations"; \
      find . -name health.lua -exec install -D -m 0444 {} "/out/argocd/$v/{}" \; ; \
      test -n "$(ls "/out/argocd/$v")"; \
    done

FROM ${RUST_IMAGE} AS chef
# cargo-chef turns the manifests into a recipe and builds a skeleton of every target (bins,
# benches, tests) from it, so the dependency layer survives source edits and new targets.
ARG CARGO_CHEF_VERSION=0.1.76
RUN cargo install cargo-chef --locked --version "${CARGO_CHEF_VERSION}"
WORKDIR /src

FROM chef AS planner
COPY . .
RUN cargo chef prepare --recipe-path recipe.json

FROM chef AS builder
COPY --from=planner /src/recipe.json recipe.json
# Dependency layer: cached until Cargo.toml / Cargo.lock change. (The recipe carries
# Cargo.lock; the --locked build below fails if it is stale.)
RUN cargo chef cook --release --recipe-path recipe.json
COPY . .
RUN cargo build --release --locked --bin wavegate \
 && install -D -m 0755 target/release/wavegate /out/wavegate \
 && strip /out/wavegate

FROM ${RUNTIME_IMAGE} AS runtime
LABEL org.opencontainers.image.title="wavegate" \
      org.opencontainers.image.description="Argo CD sync-wave readiness gates that tell the truth" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/wavegate /wavegate
# `--argocd-version 3.5.1` reads /usr/share/wavegate/argocd/v3.5.1 (src/argocd_lua SCRIPTS_ROOT).
COPY --from=argocd-scripts /out/argocd /usr/share/wavegate/argocd
# distroless :nonroot already runs as 65532; say it explicitly (numeric, so Kubernetes'
# runAsNonRoot can verify it without /etc/passwd).
USER 65532:65532
EXPOSE 8080
# The server stops gracefully on SIGINT; runtimes that honour the image's stop signal send it
# instead of SIGTERM.
STOPSIGNAL SIGINT
ENTRYPOINT ["/wavegate"]
CMD ["serve"]
