# syntax=docker/dockerfile:1
#
# The jobqueue image: the `jobqueue` binary alone on a distroless base (glibc, CA
# certificates, no shell, no package manager), running as a non-root user.
#
#   docker build -t jobqueue .
#   docker run --rm jobqueue --help
#
# It runs the operator by default (`jobqueue operator`); the Helm chart passes the same.
# A worker image copies the binary next to its own command:
#   COPY --from=ghcr.io/jobqueue-dev/jobqueue:0.1.0 /jobqueue /usr/local/bin/jobqueue

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-slim-bookworm AS build
WORKDIR /src
COPY . .
# A lean release binary: no debug info, symbols stripped.
ENV CARGO_PROFILE_RELEASE_DEBUG=0 \
    CARGO_PROFILE_RELEASE_STRIP=symbols
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin jobqueue \
    && install -m 0755 target/release/jobqueue /jobqueue

# Debian 12's glibc, as the build stage; the `nonroot` user is 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="jobqueue" \
      org.opencontainers.image.description="Kubernetes operator and CLI for Redis reliable job queues" \
      org.opencontainers.image.source="https://github.com/jobqueue-dev/jobqueue" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /jobqueue /jobqueue
USER 65532:65532
# /metrics, /healthz and /readyz of the operator.
EXPOSE 8080
ENTRYPOINT ["/jobqueue"]
CMD ["operator"]
