# Images of the hcomm operator and node agent, from one build:
#   docker build --target operator -t <registry>/hcomm/hcomm-operator:<tag> .
#   docker build --target agent    -t <registry>/hcomm/hcomm-agent:<tag> .
# The agent image carries no CANN runtime: on Ascend nodes the chart mounts the driver,
# and the HCCL backend loads libhccl.so / libascendcl.so from ASCEND_HOME_PATH at run time.

FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p hcomm-operator -p hcomm-agent \
 && install -D target/release/hcomm-operator /out/hcomm-operator \
 && install -D target/release/hcomm-agent /out/hcomm-agent

FROM gcr.io/distroless/cc-debian12:nonroot AS operator
COPY --from=build /out/hcomm-operator /usr/local/bin/hcomm-operator
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/hcomm-operator"]

# The agent needs iproute2 (NIC inventory) and runs as root on the host network.
FROM debian:bookworm-slim AS agent
RUN apt-get update \
 && apt-get install -y --no-install-recommends iproute2 ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/hcomm-agent /usr/local/bin/hcomm-agent
ENTRYPOINT ["/usr/local/bin/hcomm-agent"]
