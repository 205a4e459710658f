#!/usr/bin/env bash
# build-sandbox-image.sh builds agentbot-sandbox:latest, the default image of
# Docker sandboxes (dockersandbox.DefaultImage, AGENTBOT_DOCKER_IMAGE),
# without an image registry: the root filesystem is made from Debian
# packages with mmdebstrap (debootstrap where mmdebstrap cannot be had) and
# brought in with `docker import`. scripts/setup.sh runs it.
#
#   scripts/build-sandbox-image.sh [IMAGE]     default agentbot-sandbox:latest
#
# Idempotent: the image carries the label agentbot.recipe, a hash of this
# script (which holds the package list), the Dockerfile, the Debian suite
# and the architecture; when the image has the current hash, the script
# exits at once. Docker copies the label onto the containers made from the
# image, which is how the leak check of scripts/test.sh finds them (as for
# the test image of scripts/build-test-image.sh).
#
# The image: Debian bookworm with the packages below (no recommends, no
# docs, no apt lists), a non-root user "sandbox" (uid 1000, gid 1000) whose
# home is /workspace, which it owns. dockersandbox runs every command as that
# user. A cold build downloads and installs about 190 packages and takes one
# to a few minutes; it needs root (or sudo) for mmdebstrap's chroot.
#
# Where Docker Hub is reachable, sandboxes/dockersandbox/Dockerfile builds the
# same image with `docker build`; this script does that itself when neither
# mmdebstrap nor debootstrap can run here (no root, no apt-get).
#
# Environment:
#   AGENTBOT_DEBIAN_MIRROR  Debian mirror (default http://deb.debian.org/debian)
set -euo pipefail

image="${1:-agentbot-sandbox:latest}"
suite=bookworm
mirror="${AGENTBOT_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

# The packages of the image. Keep this list in sync with the apt-get install
# of sandboxes/dockersandbox/Dockerfile (TestPackageListsInSync in
# sandboxes/dockersandbox compares them).
packages=(
	bash
	build-essential
	ca-certificates
	coreutils
	curl
	git
	jq
	less
	procps
	python3
	python3-pip
	python3-venv
	ripgrep
	unzip
)

log() { printf 'build-sandbox-image: %s\n' "$*" >&2; }
die() {
	log "$*"
	exit 1
}

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
self="$root/scripts/build-sandbox-image.sh"
dockerfile_dir="$root/sandboxes/dockersandbox"
arch="$(dpkg --print-architecture 2>/dev/null || uname -m)"
sha256() { if command -v sha256sum >/dev/null 2>&1; then sha256sum; else shasum -a 256; fi; }
# The Dockerfile is part of the recipe: it is the fallback below, and the
# two must agree.
recipe="$( (
	sha256 <"$self"
	sha256 <"$dockerfile_dir/Dockerfile"
	echo "$suite $arch ${packages[*]}"
) | sha256 | cut -c1-16)"

old_id=""
if inspected="$(docker image inspect -f '{{.Id}} {{index .Config.Labels "agentbot.recipe"}}' "$image" 2>/dev/null)"; then
	old_id="${inspected%% *}"
	current="${inspected#* }"
	[[ "$current" == "<no value>" ]] && current="" # an image without labels
	if [[ "$current" == "$recipe" ]]; then
		log "$image is up to date"
		exit 0
	fi
	log "$image is outdated (recipe ${current:-none}, now $recipe): rebuilding it"
else
	log "$image is missing: building it from Debian $suite packages ($mirror)"
fi

# remove_old removes the image that the new one replaced, unless containers
# still use it.
remove_old() {
	[[ -n "$old_id" && "$old_id" != "$(docker image inspect -f '{{.Id}}' "$image")" ]] || return 0
	docker image rm "$old_id" >/dev/null 2>&1 ||
		log "kept the previous image ${old_id#sha256:}: containers still use it"
}

# tool is what makes the root filesystem: mmdebstrap, installed if missing,
# else debootstrap. Both need root (or sudo) and a Debian-like host; where
# neither can run, the Dockerfile is built instead, which needs Docker Hub.
sudo=""
can_root=1
if [[ $(id -u) -ne 0 ]]; then
	if command -v sudo >/dev/null 2>&1; then
		sudo="sudo"
	else
		can_root=0
	fi
fi
tool=""
for t in mmdebstrap debootstrap; do
	((can_root)) || break
	if command -v "$t" >/dev/null 2>&1; then
		tool="$t"
		break
	fi
	if command -v apt-get >/dev/null 2>&1; then
		log "installing $t"
		if $sudo apt-get update -qq &&
			DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$t" >/dev/null; then
			tool="$t"
			break
		fi
	fi
done
if [[ -z "$tool" ]]; then
	log "neither mmdebstrap nor debootstrap can run here (they need root and apt-get):" \
		"building $dockerfile_dir/Dockerfile instead, which needs Docker Hub"
	start=$SECONDS
	docker build --label "agentbot.recipe=$recipe" -t "$image" "$dockerfile_dir" ||
		die "could not build $image: install mmdebstrap (Debian, Ubuntu) and run this script again as root"
	remove_old
	log "built $image with docker build in $((SECONDS - start)) s"
	exit 0
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/agentbot-sandbox-image.XXXXXX")"
# apt downloads as the user _apt, which must be able to reach the root
# filesystem.
chmod 0755 "$tmp"
rootfs="$tmp/rootfs"
watcher=""
cleanup() {
	if [[ -n "$watcher" ]]; then kill "$watcher" 2>/dev/null || true; fi
	# The root filesystem belongs to root; with sudo, so does its removal.
	$sudo rm -rf --one-file-system "$tmp"
}
trap cleanup EXIT

# mmdebstrap and debootstrap say which stage they are in, but not how far
# along: a line every 20 seconds says the build is alive.
(
	# Killed, it takes its sleep along: nothing outlives the script
	# holding its stderr open.
	nap=""
	trap '[[ -n "$nap" ]] && kill "$nap" 2>/dev/null; exit 0' TERM
	while :; do
		sleep 20 &
		nap=$!
		wait "$nap"
		mb="$($sudo du -sm "$tmp" 2>/dev/null | cut -f1 || true)"
		log "still working: ${mb:-0} MB written"
	done
) &
watcher=$!

start=$SECONDS
log "[1/4] downloading and installing Debian $suite with ${#packages[@]} packages and their dependencies with $tool (this takes a few minutes)…"
# Documentation, manuals and translations are left out by dpkg (and stay
# out of packages installed later in the sandbox).
excludes=(
	'path-exclude=/usr/share/doc/*'
	'path-include=/usr/share/doc/*/copyright'
	'path-exclude=/usr/share/man/*'
	'path-exclude=/usr/share/info/*'
	'path-exclude=/usr/share/locale/*'
	'path-include=/usr/share/locale/locale.alias'
	'path-exclude=/usr/share/lintian/*'
)
if [[ "$tool" == mmdebstrap ]]; then
	args=(--variant=apt --mode=root --format=directory --include="$(
		IFS=,
		echo "${packages[*]}"
	)")
	for e in "${excludes[@]}"; do
		args+=(--dpkgopt="$e")
	done
	$sudo mmdebstrap "${args[@]}" "$suite" "$rootfs" "$mirror"
else
	$sudo debootstrap --variant=minbase --include="$(
		IFS=,
		echo "${packages[*]}"
	)" "$suite" "$rootfs" "$mirror"
	printf '%s\n' "${excludes[@]}" | $sudo tee "$rootfs/etc/dpkg/dpkg.cfg.d/01-agentbot-excludes" >/dev/null
	$sudo chroot "$rootfs" apt-get clean
	$sudo find "$rootfs/usr/share/doc" -mindepth 2 -not -name copyright -not -type d -delete
	$sudo find "$rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
	$sudo rm -rf "$rootfs"/usr/share/{man,info,lintian}/* "$rootfs"/var/lib/apt/lists/*
fi

log "[2/4] adding the sandbox user (uid 1000) owning /workspace"
$sudo chroot "$rootfs" groupadd --gid 1000 sandbox
$sudo chroot "$rootfs" useradd --uid 1000 --gid 1000 --home-dir /workspace --no-create-home --shell /bin/bash sandbox
$sudo mkdir -p "$rootfs/workspace"
$sudo chown 1000:1000 "$rootfs/workspace"
# Files of the build host that mmdebstrap or debootstrap copied in; Docker
# provides its own at run time.
$sudo rm -f "$rootfs/etc/resolv.conf" "$rootfs/etc/hostname"
$sudo rm -rf "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/log/apt/* "$rootfs"/var/log/dpkg.log "$rootfs"/tmp/*

log "[3/4] importing into Docker as $image"
# Docker mounts its own /dev, /proc and /sys.
$sudo tar -C "$rootfs" --numeric-owner --xattrs --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' -cf - . |
	docker import \
		--change 'CMD ["/bin/bash"]' \
		--change 'WORKDIR /workspace' \
		--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'ENV LANG=C.UTF-8' \
		--change 'ENV HOME=/workspace' \
		--change 'USER sandbox' \
		--change "LABEL agentbot.recipe=$recipe" \
		--message "scripts/build-sandbox-image.sh: Debian $suite, recipe $recipe" \
		- "$image" >/dev/null

log "[4/4] checking the image: git and python3 as uid 1000"
docker run --rm --network none --user 1000:1000 "$image" \
	sh -c 'cd /workspace && touch .probe && rm .probe && git --version && python3 --version' >&2 ||
	die "the new image $image does not work (see above)"

remove_old
size="$(docker image inspect -f '{{.Size}}' "$image")"
log "built $image ($((size / 1000000)) MB, recipe $recipe) in $((SECONDS - start)) s"
