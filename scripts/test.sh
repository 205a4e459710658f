#!/usr/bin/env bash
# test.sh is agentbot's one test command: it prepares this machine (tools,
# the sandbox test image), runs the static checks, then every test with the
# race detector against the real services (Temporal dev server, Docker).
# Usage: scripts/test.sh [go test flags...]   e.g. scripts/test.sh -run TestSession ./agentflow/
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
"$root/scripts/setup.sh" --test
export PATH="$root/.bin:$PATH"
export AGENTBOT_TEMPORAL_BIN="$root/.bin/temporal"
[[ -x "$AGENTBOT_TEMPORAL_BIN" ]] || AGENTBOT_TEMPORAL_BIN="$(command -v temporal)"

echo "== static checks" >&2
unformatted="$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.bin/*'))"
if [[ -n "$unformatted" ]]; then
	echo "gofmt: these files need formatting:" >&2
	echo "$unformatted" >&2
	exit 1
fi
go vet ./...
staticcheck ./...
workflowcheck ./agentflow/...

echo "== tests" >&2
# Every test removes the containers it made, even when it fails. Those of
# the test image all carry its label agentbot.recipe (build-test-image.sh):
# one that appears during this run and outlives it is a leak, and fails it.
test_containers() { docker ps -aq --no-trunc --filter label=agentbot.recipe | sort; }
containers_before="$(test_containers)"
check_leaks() {
	local status=$? leaked
	leaked="$(comm -13 <(echo "$containers_before") <(test_containers))"
	if [[ -n "$leaked" ]]; then
		echo "== FAIL: the tests left these containers behind:" >&2
		docker ps -a --no-trunc --filter label=agentbot.recipe --format '{{.ID}} {{.Status}} {{.Labels}}' | grep -F "$leaked" >&2
		status=1
	fi
	exit "$status"
}
trap check_leaks EXIT
if (($# == 0)); then
	set -- ./...
fi
# One package at a time: packages start their own Temporal servers,
# containers and Redis, and two cores under the race detector are enough
# for one.
go test -race -count=1 -p 1 -timeout 45m "$@"

# The workflows must not depend on how the SDK schedules coroutines: run
# agentflow's tests again with the SDK flag that changes how
# AwaitWithTimeout yields (the long-session measurement is left to the
# first run).
if (($# == 1)) && [[ "$1" == "./..." ]]; then
	echo "== agentflow with TEMPORAL_SDK_FLAG_6=1" >&2
	TEMPORAL_SDK_FLAG_6=1 go test -race -count=1 -timeout 30m -skip 'TestLongSession' ./agentflow/
	# Every fuzz target a little (make fuzz runs them long); their seeds
	# and testdata/fuzz corpora ran above as plain tests.
	echo "== fuzz, ${AGENTBOT_FUZZTIME:-8s} a target" >&2
	"$root/scripts/fuzz.sh" "${AGENTBOT_FUZZTIME:-8s}"
fi
