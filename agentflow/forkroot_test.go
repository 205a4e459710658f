package agentflow_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/agentbot/agentbot/agentflow"
)

// TestForkRoot: a fork onto the local backend with a Root works in that
// directory, not in a fresh one: the parent's workspace is restored into it,
// what the fork writes lands in it, and the parent's workspace stays apart;
// both ways of forking (the manager's, and the session's own update that a
// chat's fork is handed to) take the root.
// A root the backend refuses ("/") fails the fork's turn with the reason a
// switch to that root is refused with. Destroying the fork leaves the
// directory, which is the user's.
func TestForkRoot(t *testing.T) {
	r := newRig(t, rigOptions{})
	ctx := context.Background()
	const thread = "term:forkroot"
	t.Cleanup(func() { _, _ = r.cl.Destroy(context.Background(), thread, agentflow.DestroyRequest{}) })

	if res := r.send(thread, "write: parent.txt <<< from the parent"); res.Status != agentflow.TurnDone {
		t.Fatalf("parent's turn: %+v", res)
	}
	dir := t.TempDir()
	fork, err := r.cl.Fork(ctx, agentflow.ForkRequest{SourceThread: thread, Backend: "local", Root: dir,
		RequestID: "forkroot-1", Requester: "tester"})
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	t.Cleanup(func() {
		_, _ = r.cl.Destroy(context.Background(), fork.ThreadKey, agentflow.DestroyRequest{By: "tester"})
	})

	res := r.send(fork.ThreadKey, "sh: echo from-the-fork > fork.txt && pwd")
	if res.Status != agentflow.TurnDone {
		t.Fatalf("fork's turn: %+v", res)
	}
	mustContain(t, "the fork runs in its root", res.Answer, dir)
	for name, want := range map[string]string{"parent.txt": "from the parent", "fork.txt": "from-the-fork"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || strings.TrimSpace(string(b)) != want {
			t.Errorf("%s in the fork's root: %q, %v; want %q", name, b, err, want)
		}
	}
	if v := r.state(fork.ThreadKey); v.Root != dir || v.Backend != "local" || v.Parent != thread {
		t.Errorf("fork's state: root %q, backend %q, parent %q; want %q, local, %q", v.Root, v.Backend, v.Parent, dir, thread)
	}
	res = r.send(thread, "sh: ls; pwd")
	mustNotContain(t, "the parent's workspace", res.Answer, "fork.txt", dir)

	// The session's own fork update, which the manager hands a chat's
	// fork to, takes the root too.
	dir2 := t.TempDir()
	h, err := r.tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: agentflow.AgentWorkflowID(thread), UpdateName: agentflow.UpdateFork, UpdateID: "forkroot-3",
		Args:         []any{agentflow.ForkRequest{SourceThread: thread, Root: dir2, RequestID: "forkroot-3", Requester: "tester"}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var own agentflow.ForkResult
	if err == nil {
		err = h.Get(ctx, &own)
	}
	if err != nil {
		t.Fatalf("the session's fork: %v", err)
	}
	t.Cleanup(func() {
		_, _ = r.cl.Destroy(context.Background(), own.ThreadKey, agentflow.DestroyRequest{By: "tester"})
	})
	res = r.send(own.ThreadKey, "sh: pwd && cat parent.txt")
	mustContain(t, "the session's fork runs in its root", res.Answer, dir2, "from the parent")
	if v := r.state(own.ThreadKey); v.Root != dir2 {
		t.Errorf("the session's fork has root %q, want %q", v.Root, dir2)
	}

	// A root the backend refuses: the fork is made, its sandbox is not.
	bad, err := r.cl.Fork(ctx, agentflow.ForkRequest{SourceThread: thread, Backend: "local", Root: "/",
		RequestID: "forkroot-2", Requester: "tester"})
	if err != nil {
		t.Fatalf("fork onto /: %v", err)
	}
	t.Cleanup(func() {
		_, _ = r.cl.Destroy(context.Background(), bad.ThreadKey, agentflow.DestroyRequest{By: "tester"})
	})
	res = r.send(bad.ThreadKey, "sh: echo should-not-run")
	if res.Status != agentflow.TurnFailed {
		t.Fatalf("turn of a fork rooted at /: %+v", res)
	}
	_, serr := r.cl.Switch(ctx, thread, agentflow.SwitchRequest{Backend: "local", Root: "/"})
	if serr == nil {
		t.Fatal("a switch to / was accepted")
	}
	const reason = `root "/" is the file system root`
	mustContain(t, "the switch's refusal", serr.Error(), reason)
	mustContain(t, "the fork's refusal", res.Error, reason)

	// Destroy answers once the sandbox is gone.
	if v, err := r.cl.Destroy(ctx, fork.ThreadKey, agentflow.DestroyRequest{By: "tester"}); err != nil || v.SandboxUp {
		t.Fatalf("destroying the fork: %+v, %v", v, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "fork.txt")); err != nil {
		t.Errorf("the fork's root lost its files when the fork was destroyed: %v", err)
	}
}
