# Builds the operator image used by deploy/: docker build -t habitat-operator:0.1.0 .
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --bin habitat-operator

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/habitat-operator /habitat-operator
USER 65532
ENTRYPOINT ["/habitat-operator"]
CMD ["run"]
