package agentflow_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentbot/agentbot/agentflow"
)

// TestIdleAndLostSandbox: an idle sandbox is snapshotted and stopped; the
// next message brings it back with its files. A sandbox removed behind the
// session's back is recreated from the last snapshot, and the user is told.
func TestIdleAndLostSandbox(t *testing.T) {
	r := newRig(t, rigOptions{docker: true})
	ctx := context.Background()
	const thread = "term:idle"
	start := agentflow.AgentInput{ThreadKey: thread, Backend: "docker",
		Options: agentflow.AgentOptions{IdleTimeout: 2 * time.Second}}
	send := func(id, text string) *agentflow.TurnResult {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		res, err := r.cl.SendAndWait(ctx, start, agentflow.MessageRequest{ID: id, Text: text})
		if err != nil || res.Result == nil {
			t.Fatalf("%s: %+v %v", text, res, err)
		}
		return res.Result
	}

	send("i1", "write: keep.txt <<< survives idle and loss")
	id := r.state(thread).SandboxID
	waitFor(t, "the idle sandbox is stopped", func() bool { return !containerRunning(t, r, id) })
	res := send("i2", "sh: cat keep.txt")
	mustContain(t, "after idle", res.Answer, "survives idle and loss")
	if got := r.state(thread).SandboxID; got != id {
		t.Fatalf("idle stop should keep the container: %s became %s", id, got)
	}

	// Remove the container outside the session.
	if err := dockerAPI(t).ContainerRemove(ctx, id, containerRemoveForce); err != nil {
		t.Fatal(err)
	}
	res = send("i3", "sh: cat keep.txt")
	mustContain(t, "after loss", res.Answer, "survives idle and loss", "sandbox was gone")
	if got := r.state(thread).SandboxID; got == id || got == "" {
		t.Fatalf("a lost sandbox should be replaced, got %q", got)
	}
	if _, err := r.cl.Destroy(ctx, thread, agentflow.DestroyRequest{}); err != nil {
		t.Fatal(err)
	}
}
