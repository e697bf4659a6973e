# Builds the operator image used by deploy/: docker build -t habitat-operator:0.1.0 .
#
# The binary is fully static: it is built for the musl target (x86_64-unknown-linux-musl, or
# aarch64-unknown-linux-musl with --build-arg TARGET=...), whose C library is linked in. The only
# C code is ring's (TLS through rustls; there is no OpenSSL) and mimalloc's (the global
# allocator, faster than musl's malloc), compiled with musl-gcc from musl-tools. The image is
# distroless/static: no shell, no libc, nothing else to patch. It runs as the unprivileged user
# 65532; the Deployment adds a read-only root filesystem, no capabilities and seccomp
# RuntimeDefault (see docs/releasing.md).
FROM rust:1-bookworm AS build
ARG TARGET=x86_64-unknown-linux-musl
RUN apt-get update \
    && apt-get install -y --no-install-recommends musl-tools \
    && rm -rf /var/lib/apt/lists/* \
    && rustup target add "$TARGET"
WORKDIR /src
COPY . .
# Static, or the build fails here rather than at start-up in a cluster.
# Without the `sandbox` feature: the simulated cluster is for developers, not for a cluster.
RUN cargo build --release --locked --no-default-features --target "$TARGET" --bin habitat-operator \
    && cp "target/$TARGET/release/habitat-operator" /habitat-operator \
    && ! ldd /habitat-operator 2>/dev/null | grep -q '=>'

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /habitat-operator /habitat-operator
USER 65532:65532
ENTRYPOINT ["/habitat-operator"]
CMD ["run"]
