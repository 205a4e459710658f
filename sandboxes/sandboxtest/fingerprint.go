package sandboxtest

import (
	"bytes"
	"context"
	"encoding/hex"
	"testing"
	"time"

	"github.com/agentbot/agentbot/sandboxes"
)

// stampTick is longer than the clock file systems stamp times with: the
// kernel's coarse clock moves a tick (1–10ms) at a time, so two writes
// within one tick get the same times however many digits they have. The
// steps that change a file without changing its size wait until this long
// after the file was last changed; every other change is told apart
// without waiting.
const stampTick = 50 * time.Millisecond

// fingerprint returns sb's fingerprint, failing the test unless it is
// non-empty hex.
func fingerprint(t *testing.T, ctx context.Context, sb *sandboxes.Sandbox) string {
	t.Helper()
	fp, err := sb.Fingerprint(ctx)
	if err != nil {
		t.Fatalf("fingerprint: %v", err)
	}
	if _, err := hex.DecodeString(fp); err != nil || fp == "" || len(fp) > 128 {
		t.Fatalf("fingerprint %q: want a short hex digest", fp)
	}
	return fp
}

// testFingerprint changes the workspace one way at a time and checks the
// fingerprint changes with every change a snapshot would capture, and only
// with those: not with reads, snapshots, or anything under
// sandboxes.OutputsDir.
func (s *suite) testFingerprint(t *testing.T) {
	ctx := testContext(t)
	sb := s.newSandbox(t)
	buildRichTree(t, ctx, sb)
	outputs := shellQuote(sandboxes.OutputsDir)
	// Files the steps change; "same" and "back" get a time in whole
	// seconds, which every touch can set again exactly.
	sh(t, ctx, sb, `set -e
printf hello > same.txt
printf hello > back.txt && touch -d '2020-01-02 03:04:05' back.txt
printf mode > mode.txt && chmod 0644 mode.txt
printf a > target-a && printf b > target-b && ln -s target-a link
mkdir -p dir/sub `+outputs+`
printf 'old output' > `+outputs+`/old.txt`)
	changed := time.Now()

	fp := fingerprint(t, ctx, sb)
	if again := fingerprint(t, ctx, sb); again != fp {
		t.Fatalf("two fingerprints of an unchanged workspace differ: %s, then %s", fp, again)
	}

	for _, step := range []struct {
		name    string
		cmd     string // run in the workspace
		do      func(t *testing.T)
		changes bool
		// tick: the step changes a file's contents but not its size;
		// only the clock can tell.
		tick bool
	}{
		{name: "new file", cmd: "printf new > dir/sub/new.txt", changes: true},
		{name: "removed file", cmd: "rm dir/sub/new.txt", changes: true},
		{name: "chmod", cmd: "chmod 0600 mode.txt", changes: true},
		{name: "new empty directory", cmd: "mkdir dir/empty", changes: true},
		{name: "symlink retargeted", cmd: "ln -sfn target-b link", changes: true},
		{name: "file rewritten with the same size", cmd: "printf HELLO > same.txt", changes: true, tick: true},
		{
			// Only the change time tells this one: what make and
			// rsync miss.
			name:    "file rewritten with the same size and modification time",
			cmd:     "printf WORLD > back.txt && touch -d '2020-01-02 03:04:05' back.txt",
			changes: true, tick: true,
		},
		{name: "files read", cmd: "cat same.txt back.txt mode.txt link dir/sub/../../target-a >/dev/null && ls -lR . >/dev/null"},
		{name: "snapshot taken", do: func(t *testing.T) {
			var buf bytes.Buffer
			if _, err := sb.Snapshot(ctx, &buf); err != nil {
				t.Fatalf("snapshot: %v", err)
			}
		}},
		{name: "outputs written", cmd: `set -e; o=` + outputs + `
printf more >> "$o/old.txt"; printf new > "$o/new.txt"; mkdir "$o/sub"; rm "$o/old.txt"; chmod 0700 "$o"`},
	} {
		t.Run(step.name, func(t *testing.T) {
			if step.tick {
				time.Sleep(time.Until(changed.Add(stampTick)))
			}
			if step.cmd != "" {
				sh(t, ctx, sb, step.cmd)
			} else {
				step.do(t)
			}
			if step.changes {
				changed = time.Now()
			}
			got := fingerprint(t, ctx, sb)
			switch {
			case step.changes && got == fp:
				t.Errorf("the fingerprint did not change: %s", got)
			case !step.changes && got != fp:
				t.Errorf("the fingerprint changed from %s to %s; nothing a snapshot holds did", fp, got)
			}
			fp = got
			if again := fingerprint(t, ctx, sb); again != got {
				t.Errorf("two fingerprints with no change in between differ: %s, then %s", got, again)
			}
		})
	}
}
