package agentflow_test

import (
	"context"
	"testing"

	"github.com/agentbot/agentbot/agentflow"
)

// TestSnapshotOnlyWhenChanged: a turn whose commands changed nothing in the
// workspace writes no snapshot (issue 15, P2: before, every turn that ran
// a shell command wrote the whole workspace again), and a turn that
// changed a file, a directory or a mode writes one and deletes the one it
// replaces. Real dev server, local sandbox, the directive model.
func TestSnapshotOnlyWhenChanged(t *testing.T) {
	r := newRig(t, rigOptions{})
	const thread = "term:snapshot-skip"
	if res := r.send(thread, "write: a.txt <<< one"); res.Status != agentflow.TurnDone {
		t.Fatalf("first turn: %s %s", res.Status, res.Error)
	}
	first := r.state(thread).Snapshot
	if first == "" {
		t.Fatal("no snapshot after a turn that wrote a file")
	}
	before := snapshotActivities(t, r, thread)
	for _, text := range []string{"sh: true", "sh: cat a.txt", "read: a.txt"} {
		if res := r.send(thread, text); res.Status != agentflow.TurnDone {
			t.Fatalf("%q: %s %s", text, res.Status, res.Error)
		}
		if got := r.state(thread).Snapshot; got != first {
			t.Errorf("after %q, which changes nothing, the snapshot is %s, want still %s", text, got, first)
		}
	}
	// The commands reported the snapshot's fingerprint: the turns ran no
	// SnapshotSandbox at all (changeToolFingerprint; before, each shell
	// turn ran one, only to find nothing changed).
	if n := snapshotActivities(t, r, thread) - before; n != 0 {
		t.Errorf("turns that changed nothing ran SnapshotSandbox %d times, want 0", n)
	}
	if !blobExists(t, r, first) {
		t.Fatalf("the kept snapshot %s is not in the blob store", first)
	}
	for i, text := range []string{"sh: echo two > a.txt", "sh: mkdir d", "sh: chmod 600 a.txt", "sh: rm a.txt"} {
		prev := r.state(thread).Snapshot
		if res := r.send(thread, text); res.Status != agentflow.TurnDone {
			t.Fatalf("%q: %s %s", text, res.Status, res.Error)
		}
		got := r.state(thread).Snapshot
		if got == prev {
			t.Errorf("change %d (%q): the snapshot stayed %s, want a new one", i, text, got)
		}
		if blobExists(t, r, prev) {
			t.Errorf("change %d: the replaced snapshot %s is still stored", i, prev)
		}
	}
}

// snapshotActivities counts the SnapshotSandbox activities in a session's
// history.
func snapshotActivities(t *testing.T, r *rig, thread string) int {
	t.Helper()
	n := 0
	it := r.tc.GetWorkflowHistory(context.Background(), agentflow.AgentWorkflowID(thread), "", false, 0)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == "SnapshotSandbox" {
			n++
		}
	}
	return n
}

func blobExists(t *testing.T, r *rig, key string) bool {
	t.Helper()
	ok, err := r.blobs.Exists(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}
