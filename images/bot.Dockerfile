# agentbot's gateway (cmd/bot): receives Slack and Discord events and hands
# them to Temporal. Build it with scripts/build-images.sh, which compiles
# static binaries into the build context (dist/<os>_<arch>/) first:
#
#   scripts/build-images.sh                                  # this machine's arch, into the local engine
#   scripts/build-images.sh --platforms linux/amd64,linux/arm64 --repo ghcr.io/acme --push
#
# The image is the binary and nothing else (FROM scratch): no shell, no
# package manager, no libc. The gateway needs none: it is a static Go
# binary that makes HTTPS calls (CA roots from SSL_CERT_FILE/SSL_CERT_DIR
# when mounted, else the Mozilla roots compiled into it) and never runs a
# command. It runs as uid 65532 and writes only under /tmp and
# /var/lib/agentbot, so the root filesystem can be read-only (the Helm
# chart mounts emptyDirs there).
FROM scratch

# Set by BuildKit for each platform of a multi-arch build; the defaults
# serve the classic builder.
ARG TARGETOS=linux
ARG TARGETARCH=amd64
ARG VERSION=dev
ARG REVISION=unknown
ARG CREATED=unknown

LABEL org.opencontainers.image.title="agentbot-bot" \
      org.opencontainers.image.description="agentbot gateway: Slack and Discord in, Temporal out" \
      org.opencontainers.image.source="https://github.com/agentbot/agentbot" \
      org.opencontainers.image.url="https://github.com/agentbot/agentbot" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"

COPY --chown=65532:65532 rootfs/ /
COPY ${TARGETOS}_${TARGETARCH}/bot /usr/local/bin/agentbot-bot

ENV AGENTBOT_STATE_DIR=/var/lib/agentbot \
    HOME=/var/lib/agentbot \
    TMPDIR=/tmp \
    AGENTBOT_HTTP_ADDR=:8080
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/agentbot-bot"]
