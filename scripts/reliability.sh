#!/usr/bin/env bash
# reliability.sh runs the reliability suite long and writes docs/reliability.md:
#   scripts/reliability.sh [runs] [fuzztime]     (default 20 and 30s; make reliability)
# 1. the scenarios of ./reliability/ (the real bot and worker processes,
#    Temporal on a database file, Redis, Docker; faults on purpose), each
#    [runs] times;
# 2. the security tables of the other packages (signatures, access at every
#    entry point, secrets, Docker hardening, the payload codec);
# 3. every fuzz target for [fuzztime];
# then cmd/reliabilityreport turns what they printed into the table. It exits
# non-zero when anything failed, after writing the report all the same.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
runs="${1:-20}"
fuzztime="${2:-30s}"
"$root/scripts/setup.sh" --test
export PATH="$root/.bin:$PATH"
export AGENTBOT_TEMPORAL_BIN="$root/.bin/temporal"
[[ -x "$AGENTBOT_TEMPORAL_BIN" ]] || AGENTBOT_TEMPORAL_BIN="$(command -v temporal)"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
began=$(date +%s)
status=0

# go test -json, shown as it goes: the verdict of each test and scenario.
progress() { grep --line-buffered -o '"Action":"\(pass\|fail\)","Package":"[^"]*","Test":"[^"/]*"\|reliability: [^"]*' | sed -u 's/\\t/  /g' >&2 || true; }

echo "== reliability scenarios, $runs runs each" >&2
go test -race -count=1 -json -timeout 180m ./reliability/ -runs="$runs" | tee "$out/reliability.json" | progress ||
	status=1

echo "== security tables" >&2
go test -race -count=1 -p 1 -json -timeout 30m \
	-run '^(TestHTTPRefusesBadSignatures|TestAccessEveryEntryPoint|TestSecretsOutOfReach|TestDockerHardening|TestPayloadEncryption)$' \
	./bot/slack/ ./bot/discord/ ./cmd/worker/ ./cmd/bot/ ./sandboxes/dockersandbox/ | tee "$out/security.json" | progress ||
	status=1

echo "== fuzz, $fuzztime a target" >&2
"$root/scripts/fuzz.sh" "$fuzztime" >"$out/fuzz.log" 2>&1 || status=1
grep -E '^(== fuzz|--- FAIL|ok )' "$out/fuzz.log" >&2 || true

go run ./cmd/reliabilityreport -out docs/reliability.md -runs "$runs" -fuzztime "$fuzztime" \
	-took "$(($(date +%s) - began))s" -fuzz "$out/fuzz.log" "$out/reliability.json" "$out/security.json"
echo "== docs/reliability.md written" >&2
cat docs/reliability.md
exit "$status"
