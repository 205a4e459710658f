# agentbot's worker (cmd/worker): runs the session workflows, calls the
# model and drives the sandboxes. Build it with scripts/build-images.sh
# (see bot.Dockerfile).
#
# Like the gateway it is the static binary alone (FROM scratch). It carries
# neither git nor the Docker CLI because it runs neither: the Docker
# backend speaks the Engine API over DOCKER_HOST (a remote engine over TLS,
# or a socket), snapshots are tar streams made in Go, and the e2b and
# daytona backends are HTTPS clients. Commands run inside the sandboxes,
# whose image carries the tools (scripts/build-sandbox-image.sh). The
# local backend (commands on the worker itself, via /bin/sh) therefore
# cannot run in this image, which is what production wants: it is not
# isolated, and it is off while serving chat anyway.
FROM scratch

ARG TARGETOS=linux
ARG TARGETARCH=amd64
ARG VERSION=dev
ARG REVISION=unknown
ARG CREATED=unknown

LABEL org.opencontainers.image.title="agentbot-worker" \
      org.opencontainers.image.description="agentbot worker: session workflows, the model and the sandboxes" \
      org.opencontainers.image.source="https://github.com/agentbot/agentbot" \
      org.opencontainers.image.url="https://github.com/agentbot/agentbot" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"

COPY --chown=65532:65532 rootfs/ /
COPY ${TARGETOS}_${TARGETARCH}/worker /usr/local/bin/agentbot-worker

ENV AGENTBOT_STATE_DIR=/var/lib/agentbot \
    HOME=/var/lib/agentbot \
    TMPDIR=/tmp \
    AGENTBOT_HTTP_ADDR=:8080
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/agentbot-worker"]
