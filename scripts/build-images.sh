#!/usr/bin/env bash
# build-images.sh builds agentbot's container images, agentbot-bot and
# agentbot-worker, from static binaries compiled here (CGO off, one per
# platform) and images/{bot,worker}.Dockerfile (FROM scratch).
#
#   scripts/build-images.sh [--tag T] [--repo R] [--platforms P] [--push]
#
#   --tag T        image tag; default: the chart's appVersion (helm/agentbot/Chart.yaml)
#   --repo R       name prefix, e.g. ghcr.io/acme (images R/agentbot-bot:T, R/agentbot-worker:T);
#                  default: none (local names agentbot-bot:T, agentbot-worker:T)
#   --platforms P  comma-separated, e.g. linux/amd64,linux/arm64; default: this machine's.
#                  More than one needs docker buildx, and --push (a multi-arch image
#                  cannot be loaded into a local engine).
#   --push         push the images (docker buildx build --push, or docker push)
#
# Compiling outside Docker keeps the build free of a registry (no golang
# base image to pull) and makes cross-compiling one `go build` per arch.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
tag="" repo="" platforms="" push=0
while (($#)); do
	case "$1" in
	--tag) tag="$2"; shift 2 ;;
	--repo) repo="${2%/}/"; shift 2 ;;
	--platforms) platforms="$2"; shift 2 ;;
	--push) push=1; shift ;;
	-h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "build-images: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
if [[ -z "$tag" ]]; then
	tag="$(sed -n 's/^appVersion:[[:space:]]*"\{0,1\}\([^"[:space:]]*\)"\{0,1\}[[:space:]]*$/\1/p' helm/agentbot/Chart.yaml 2>/dev/null || true)"
	[[ -n "$tag" ]] || { echo "build-images: no appVersion in helm/agentbot/Chart.yaml; pass --tag" >&2; exit 1; }
fi
[[ -n "$platforms" ]] || platforms="linux/$(go env GOARCH)"
IFS=, read -r -a plats <<<"$platforms"
if ((${#plats[@]} > 1)) && ((push == 0)); then
	echo "build-images: a multi-platform image cannot be loaded into the local engine; add --push" >&2
	exit 2
fi

version="$tag"
revision="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
if [[ -n "$(git status --porcelain 2>/dev/null)" ]]; then
	revision="$revision-dirty"
fi
created="$(date -u +%Y-%m-%dT%H:%M:%SZ)"

# The build context holds the binaries and the writable directories of
# the images, nothing else: a small context, and no source in the image.
ctx="$root/dist"
rm -rf "$ctx"
mkdir -p "$ctx/rootfs/tmp" "$ctx/rootfs/var/lib/agentbot"
chmod 1777 "$ctx/rootfs/tmp"
chmod 0700 "$ctx/rootfs/var/lib/agentbot"
for p in "${plats[@]}"; do
	os="${p%%/*}" arch="${p#*/}"
	echo "build-images: compiling bot and worker for $os/$arch" >&2
	CGO_ENABLED=0 GOOS="$os" GOARCH="$arch" go build -trimpath \
		-ldflags "-s -w -X main.version=$version" \
		-o "$ctx/${os}_${arch}/" ./cmd/bot ./cmd/worker
done

args=(--build-arg "VERSION=$version" --build-arg "REVISION=$revision" --build-arg "CREATED=$created")
for name in bot worker; do
	ref="${repo}agentbot-$name:$tag"
	echo "build-images: building $ref" >&2
	if ((push)) && { ((${#plats[@]} > 1)) || docker buildx version >/dev/null 2>&1; }; then
		docker buildx build --platform "$platforms" "${args[@]}" -f "images/$name.Dockerfile" -t "$ref" --push "$ctx"
		continue
	fi
	p="${plats[0]}"
	docker build -q "${args[@]}" --build-arg "TARGETOS=${p%%/*}" --build-arg "TARGETARCH=${p#*/}" \
		-f "images/$name.Dockerfile" -t "$ref" "$ctx" >/dev/null
	if ((push)); then
		docker push "$ref"
	fi
	echo "build-images: built $ref" >&2
done
