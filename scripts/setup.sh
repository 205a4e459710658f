#!/usr/bin/env bash
# setup.sh prepares this machine for running and testing agentbot. It is
# idempotent: every step checks before it acts, so a second run is fast.
#
#   scripts/setup.sh            tools for running the product (temporal CLI)
#                               and, when the Docker engine answers, the
#                               image of Docker sandboxes
#   scripts/setup.sh --test     also Redis, the sandbox test image, linters;
#                               the Docker engine must answer
#
# The image of Docker sandboxes, agentbot-sandbox:latest (or the
# agentbot-sandbox image AGENTBOT_DOCKER_IMAGE names), is built by
# scripts/build-sandbox-image.sh from Debian packages: minutes the first
# time, then only when its recipe changes. Without it the bot starts all the
# same and says that the docker backend is not available, and why.
#
# Tools built from the Go module proxy go to ./.bin (git-ignored) unless they
# are already on PATH.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="$root/.bin"
mkdir -p "$bin"
export PATH="$bin:$PATH"
want_test=0
[[ "${1:-}" == "--test" ]] && want_test=1

log() { printf 'setup: %s\n' "$*" >&2; }

go_tool() { # go_tool NAME MODULE@VERSION
	local name="$1" mod="$2"
	if [[ -x "$bin/$name" ]] || command -v "$name" >/dev/null 2>&1; then
		return
	fi
	log "building $name from $mod (first time takes a few minutes)"
	GOBIN="$bin" GOFLAGS=-buildvcs=false go install "$mod"
}

apt_pkgs() { # apt_pkgs PKG... — installs the Debian packages that are missing
	local missing=()
	for p in "$@"; do
		dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
	done
	((${#missing[@]} == 0)) && return
	log "installing ${missing[*]}"
	local sudo=""
	[[ $(id -u) -ne 0 ]] && sudo="sudo"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

# docker_answers reports whether the Docker engine answers, within ten
# seconds (a stuck daemon must not hold up make run).
docker_answers() {
	command -v docker >/dev/null 2>&1 || return 1
	if command -v timeout >/dev/null 2>&1; then
		timeout 10 docker info >/dev/null 2>&1
	else
		docker info >/dev/null 2>&1
	fi
}

go_tool temporal github.com/temporalio/cli/cmd/temporal@v1.5.1

if ((want_test)); then
	# tmux: the terminal UI is tested on a real terminal (cmd/bot TestTUI).
	apt_pkgs redis-server busybox-static zstd tmux
	go_tool workflowcheck go.temporal.io/sdk/contrib/tools/workflowcheck@v0.6.0
	go_tool staticcheck honnef.co/go/tools/cmd/staticcheck@v0.8.2
	go_tool helm helm.sh/helm/v3/cmd/helm@v3.22.0
	docker_answers || {
		log "the Docker engine does not answer (docker info): the tests need it; is dockerd running?"
		exit 1
	}
	"$root/scripts/build-test-image.sh"
	# The tests of the Docker backend use the full image too. The script
	# returns at once when the image is current.
	"$root/scripts/build-sandbox-image.sh" agentbot-sandbox:latest
else
	image="${AGENTBOT_DOCKER_IMAGE:-agentbot-sandbox:latest}"
	backends=",${AGENTBOT_BACKENDS:-docker},"
	backends="${backends// /}"
	if [[ "$backends" != *,docker,* ]]; then
		: # the docker backend is not enabled: no image needed
	elif [[ "${image%%[:@]*}" != agentbot-sandbox ]]; then
		log "AGENTBOT_DOCKER_IMAGE=$image is not agentbot's own image: Docker pulls it on first use"
	elif ! docker_answers; then
		log "the Docker engine does not answer (docker info): the docker backend will not be available; the local one is"
	elif ! "$root/scripts/build-sandbox-image.sh" "$image"; then
		log "could not build $image (see above): the docker backend will not be available; the local one is"
	fi
fi
log "ready (tools in $bin)"
