#!/usr/bin/env bash
# build-test-image.sh builds the Docker sandbox image used by the tests,
# without a registry: a busybox-static root filesystem brought in with
# `docker import`. Idempotent: the image is tagged with a hash of its inputs
# and rebuilt only when they change.
#
# The image has /bin/sh and the busybox applets, a non-root user "sandbox"
# (uid 1000) and /workspace owned by it. For a full image (bash, git, curl,
# python3, build tools) see sandboxes/dockersandbox/Dockerfile.
set -euo pipefail

image="${AGENTBOT_TEST_IMAGE:-agentbot-sandbox-test:latest}"
busybox="$(command -v busybox || true)"
[[ -x /bin/busybox ]] && busybox=/bin/busybox
if [[ -z "$busybox" ]] || ! file -L "$busybox" 2>/dev/null | grep -q 'statically linked'; then
	if [[ -x /bin/busybox ]] && ldd /bin/busybox 2>&1 | grep -q 'not a dynamic'; then
		busybox=/bin/busybox
	else
		echo "build-test-image: need a static busybox (apt-get install busybox-static)" >&2
		exit 1
	fi
fi

recipe_version=1
sum="$( (echo "$recipe_version"; sha256sum "$busybox") | sha256sum | cut -c1-16)"
if [[ "$(docker image inspect -f '{{index .Config.Labels "agentbot.recipe"}}' "$image" 2>/dev/null || true)" == "$sum" ]]; then
	echo "build-test-image: $image is up to date" >&2
	exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
rootfs="$tmp/rootfs"
mkdir -p "$rootfs"/{bin,etc,tmp,workspace,root,home/sandbox}
cp "$busybox" "$rootfs/bin/busybox"
for applet in $("$busybox" --list); do
	[[ "$applet" == busybox ]] && continue
	ln -sf busybox "$rootfs/bin/$applet"
done
mkdir -p "$rootfs/usr"
ln -s ../bin "$rootfs/usr/bin"
ln -s bin "$rootfs/sbin"
cat >"$rootfs/etc/passwd" <<'P'
root:x:0:0:root:/root:/bin/sh
sandbox:x:1000:1000:sandbox:/home/sandbox:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
P
cat >"$rootfs/etc/group" <<'G'
root:x:0:
sandbox:x:1000:
nogroup:x:65534:
G
chmod 1777 "$rootfs/tmp"
tar -C "$rootfs" --numeric-owner --owner=0 --group=0 -cf "$tmp/rootfs.tar" .
# Give /workspace and the home directory to the sandbox user inside the tar.
python3 - "$tmp/rootfs.tar" <<'PY'
import sys, tarfile
src = sys.argv[1]
dst = src + ".fixed"
with tarfile.open(src) as tin, tarfile.open(dst, "w", format=tarfile.PAX_FORMAT) as tout:
    for m in tin.getmembers():
        if m.name.rstrip("/") in ("./workspace", "./home/sandbox"):
            m.uid = m.gid = 1000
        tout.addfile(m, tin.extractfile(m) if m.isfile() else None)
import os; os.replace(dst, src)
PY
docker import \
	--change 'CMD ["/bin/sh"]' \
	--change 'WORKDIR /workspace' \
	--change 'ENV PATH=/bin:/usr/bin:/sbin' \
	--change "LABEL agentbot.recipe=$sum" \
	"$tmp/rootfs.tar" "$image" >/dev/null
echo "build-test-image: built $image" >&2
