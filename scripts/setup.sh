#!/usr/bin/env bash
# setup.sh prepares this machine for running and testing agentbot. It is
# idempotent: every step checks before it acts, so a second run is fast.
#
#   scripts/setup.sh            tools for running the product (temporal CLI)
#   scripts/setup.sh --test     also Redis, the sandbox test image, linters
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

go_tool temporal github.com/temporalio/cli/cmd/temporal@v1.5.1

if ((want_test)); then
	apt_pkgs redis-server busybox-static zstd
	go_tool workflowcheck go.temporal.io/sdk/contrib/tools/workflowcheck@v0.6.0
	go_tool staticcheck honnef.co/go/tools/cmd/staticcheck@v0.8.2
	go_tool helm helm.sh/helm/v3/cmd/helm@v3.22.0
	"$root/scripts/build-test-image.sh"
fi
log "ready (tools in $bin)"
