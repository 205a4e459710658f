#!/usr/bin/env bash
# fuzz.sh runs every fuzz target of the repository for a while each:
#   scripts/fuzz.sh [fuzztime]    (default 2m; CI runs it with 10s)
# A failure leaves the input under the package's testdata/fuzz/<target>/,
# where plain go test replays it from then on: commit it with the fix.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
fuzztime="${1:-2m}"
# Targets from the sources, not go test -list: that would run the
# packages' TestMain, which start servers.
grep -rl --include='*_test.go' '^func Fuzz' . | grep -v '^./.bin/' | sort | while read -r file; do
	pkg="./$(dirname "${file#./}")"
	for target in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$file"); do
		echo "== fuzz $pkg $target ($fuzztime)" >&2
		# -run '^$': the package's other tests ran already; one worker
		# per core is the default.
		# Minimising a new input re-runs it many times: bounded, so a
		# slow target (FuzzRestore makes a sandbox per input) still
		# spends its time fuzzing.
		go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -fuzzminimizetime 10x "$pkg"
	done
done
