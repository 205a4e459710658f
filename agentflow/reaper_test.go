package agentflow_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/agentflow/llm"
	"github.com/agentbot/agentbot/internal/agentworker"
	"github.com/agentbot/agentbot/internal/fakeopenai"
	"github.com/agentbot/agentbot/internal/testenv"
	"github.com/agentbot/agentbot/sandboxes"
	"github.com/agentbot/agentbot/sandboxes/dockersandbox"
	"github.com/agentbot/agentbot/sandboxes/localsandbox"
	"github.com/agentbot/agentbot/store"
)

// reapRig is a worker of its own on the shared dev server, with the local
// and Docker backends of a sandboxRig, and a DestroySandbox that can be
// made to fail (failDestroy), as when a switch cannot remove the old
// sandbox.
type reapRig struct {
	*sandboxRig
	tc          client.Client
	cl          *agentflow.Client
	failDestroy atomic.Bool
}

func newReapRig(t *testing.T, docker bool) *reapRig {
	t.Helper()
	r := &reapRig{sandboxRig: newSandboxRig(t, docker)}
	tc, err := client.Dial(client.Options{HostPort: temporalAddr(t), Logger: testenv.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	r.tc, r.cl = tc, agentflow.NewClient(tc)
	model := fakeopenai.New(fakeopenai.Options{Script: fakeopenai.DirectiveScript()})
	t.Cleanup(model.Close)
	llmc, err := llm.New(llm.Config{BaseURL: model.URL()})
	if err != nil {
		t.Fatal(err)
	}
	acts := &agentflow.Activities{Sandboxes: r.reg, Blobs: r.blobs, Model: llmc, ModelName: "fake", Temporal: tc}
	// The package's tests run one at a time and stop their workers at
	// cleanup, so this is the only worker polling while the test runs.
	w := worker.New(tc, agentflow.TaskQueue, testenv.WorkerOptions())
	agentworker.Register(w, acts)
	w.RegisterActivityWithOptions(func(ctx context.Context, in agentflow.SandboxInput) error {
		if r.failDestroy.Load() {
			return temporal.NewNonRetryableApplicationError("test: the sandbox cannot be destroyed", "Test", nil)
		}
		return acts.DestroySandbox(ctx, in)
	}, activity.RegisterOptions{Name: "DestroySandbox", DisableAlreadyRegisteredCheck: true})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return r
}

// thread returns a new thread key; its session's containers are removed at
// cleanup.
func (r *reapRig) thread(name string) string {
	b := make([]byte, 4)
	rand.Read(b)
	thread := "term:" + name + "-" + hex.EncodeToString(b)
	r.sessions = append(r.sessions, agentflow.AgentWorkflowID(thread))
	return thread
}

// send runs one turn on thread (starting its session on backend).
func (r *reapRig) send(thread, backend, text string) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := r.cl.SendAndWait(ctx, agentflow.AgentInput{ThreadKey: thread, Backend: backend},
		agentflow.MessageRequest{ID: thread + "-" + time.Now().Format(time.RFC3339Nano), Text: text})
	if err != nil || res.Result == nil || res.Result.Status != agentflow.TurnDone {
		r.t.Fatalf("turn %q on %s: %+v, %v", text, thread, res, err)
	}
}

// switchLeaving switches thread to backend while DestroySandbox fails, so
// the old sandbox stays behind; it returns the old and the new sandbox.
func (r *reapRig) switchLeaving(thread, backend string) (old, cur sandboxes.State) {
	r.t.Helper()
	ctx := context.Background()
	before := r.state(thread)
	r.failDestroy.Store(true)
	defer r.failDestroy.Store(false)
	res, err := r.cl.Switch(ctx, thread, agentflow.SwitchRequest{Backend: backend})
	if err != nil || !res.Changed {
		r.t.Fatalf("switch %s to %s: %+v, %v", thread, backend, res, err)
	}
	after := r.state(thread)
	return sandboxes.State{Backend: before.Backend, ID: before.SandboxID}, sandboxes.State{Backend: after.Backend, ID: after.SandboxID}
}

func (r *reapRig) state(thread string) agentflow.SessionView {
	r.t.Helper()
	v, err := r.cl.State(context.Background(), thread)
	if err != nil {
		r.t.Fatal(err)
	}
	return v
}

// exists reports whether the sandbox st names is still there.
func (r *reapRig) exists(st sandboxes.State) bool {
	r.t.Helper()
	ctx := context.Background()
	if st.Backend == dockersandbox.Name {
		_, err := r.dc.ContainerInspect(ctx, st.ID)
		if cerrdefs.IsNotFound(err) {
			return false
		}
		if err != nil {
			r.t.Fatal(err)
		}
		return true
	}
	list, err := r.local.List(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, l := range list {
		if l.ID == st.ID {
			return true
		}
	}
	return false
}

// reap runs one sweep of the reaper workflow, as the schedule does.
func (r *reapRig) reap(in agentflow.ReaperInput) agentflow.ReaperResult {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b := make([]byte, 4)
	rand.Read(b)
	run, err := r.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "reaper-test-" + hex.EncodeToString(b), TaskQueue: agentflow.TaskQueue},
		agentflow.ReaperWorkflowName, in)
	if err != nil {
		r.t.Fatal(err)
	}
	var res agentflow.ReaperResult
	if err := run.Get(ctx, &res); err != nil {
		r.t.Fatalf("reaper: %v", err)
	}
	return res
}

// TestReapSandboxes leaves sandboxes behind the way sessions do (a switch
// whose destroy of the old sandbox failed, in a session later destroyed and
// in one still live) and checks that the reaper destroys those once they
// are older than the grace period, and never the sandbox a session points
// to, one younger than the grace period, or one it cannot tell is
// agentbot's in this namespace.
func TestReapSandboxes(t *testing.T) {
	r := newReapRig(t, true)
	ctx := context.Background()
	const grace = 3 * time.Second

	// A: docker, then local with the docker sandbox left behind; then
	// destroyed, so that the docker one is an orphan of a closed session.
	a := r.thread("reap-a")
	r.send(a, dockersandbox.Name, "sh: echo a")
	aOld, aCur := r.switchLeaving(a, localsandbox.Name)
	if _, err := r.cl.Destroy(ctx, a, agentflow.DestroyRequest{}); err != nil {
		t.Fatal(err)
	}
	if !r.exists(aOld) || r.exists(aCur) {
		t.Fatalf("after destroying A: its old sandbox exists %v (want true), its last %v (want false)", r.exists(aOld), r.exists(aCur))
	}
	// B: local, then docker with the local sandbox left behind: a stale
	// generation of a live session.
	b := r.thread("reap-b")
	r.send(b, localsandbox.Name, "sh: echo b")
	bOld, bCur := r.switchLeaving(b, dockersandbox.Name)
	// Sandboxes that are not this namespace's agentbot sessions': no
	// session label, no namespace label, another namespace's.
	mk := func(backend string, labels map[string]string) sandboxes.State {
		sb, err := r.reg.Create(ctx, backend, sandboxes.Spec{Labels: labels})
		if err != nil {
			t.Fatal(err)
		}
		return sb.State()
	}
	aID := agentflow.AgentWorkflowID(a)
	foreign := []sandboxes.State{
		mk(localsandbox.Name, nil),
		mk(dockersandbox.Name, map[string]string{"agentbot.session": aID}),
		mk(dockersandbox.Name, map[string]string{"agentbot.session": aID, "agentbot.namespace": "another-namespace"}),
	}

	time.Sleep(grace + time.Second)
	// D: like B, but moments before the sweep: its old sandbox is younger
	// than the grace period.
	d := r.thread("reap-d")
	r.send(d, localsandbox.Name, "sh: echo d")
	dOld, dCur := r.switchLeaving(d, dockersandbox.Name)

	res := r.reap(agentflow.ReaperInput{Grace: grace, Retention: time.Hour})
	for _, c := range []struct {
		what string
		st   sandboxes.State
		want bool
	}{
		{"the old sandbox of destroyed session A", aOld, false},
		{"the stale sandbox of live session B", bOld, false},
		{"the current sandbox of B", bCur, true},
		{"the stale sandbox of D, younger than the grace period", dOld, true},
		{"the current sandbox of D", dCur, true},
		{"a sandbox without a session label", foreign[0], true},
		{"a sandbox without a namespace label", foreign[1], true},
		{"a sandbox of another namespace", foreign[2], true},
	} {
		if got := r.exists(c.st); got != c.want {
			t.Errorf("after the sweep, %s (%s %s) exists: %v, want %v", c.what, c.st.Backend, c.st.ID, got, c.want)
		}
	}
	if res.SandboxesDestroyed != 2 {
		t.Errorf("the sweep reports %d sandboxes destroyed, want 2: %+v", res.SandboxesDestroyed, res)
	}
	// B still works, in the sandbox it points to.
	r.send(b, localsandbox.Name, "sh: echo b again")
	if v := r.state(b); v.SandboxID != bCur.ID {
		t.Errorf("B now points to %s, want %s", v.SandboxID, bCur.ID)
	}

	// Once older than the grace period, D's stale sandbox goes too.
	time.Sleep(grace)
	r.reap(agentflow.ReaperInput{Grace: grace, Retention: time.Hour})
	if r.exists(dOld) || !r.exists(dCur) {
		t.Errorf("second sweep: D's stale sandbox exists %v (want false), its current %v (want true)", r.exists(dOld), r.exists(dCur))
	}
	for _, th := range []string{b, d} {
		if _, err := r.cl.Destroy(ctx, th, agentflow.DestroyRequest{}); err != nil {
			t.Error(err)
		}
	}
	for _, st := range foreign {
		if sb, err := r.reg.Attach(ctx, st); err == nil {
			_ = sb.Destroy(ctx)
		}
	}
}

// TestReapSessionData checks the retention of blobs: what a destroyed
// session left in the blob store, and the data of a session that never
// started (a fork that failed half-way), are deleted once older than the
// retention, never before; a live session's data never, however old.
func TestReapSessionData(t *testing.T) {
	r := newReapRig(t, false)
	ctx := context.Background()
	put := func(key string) {
		t.Helper()
		w, err := r.blobs.NewWriter(ctx, key, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	keys := func(prefix string) []string {
		t.Helper()
		ks, err := r.blobs.List(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		return ks
	}

	live := r.thread("retain-live")
	r.send(live, localsandbox.Name, "write: a.txt <<< live data")
	r.send(live, localsandbox.Name, "sh: cat a.txt")
	liveID := agentflow.AgentWorkflowID(live)
	liveKeys := append(keys(store.SessionPrefix(liveID)), keys(store.SnapshotPrefix(liveID))...)
	if len(liveKeys) == 0 {
		t.Fatal("the live session has no data in the blob store")
	}

	gone := r.thread("retain-destroyed")
	r.send(gone, localsandbox.Name, "write: b.txt <<< doomed")
	if _, err := r.cl.Destroy(ctx, gone, agentflow.DestroyRequest{}); err != nil {
		t.Fatal(err)
	}
	goneID := agentflow.AgentWorkflowID(gone)
	// What a failed delete, or a write that raced the destroy, leaves.
	put(store.SessionPrefix(goneID) + "transcript/late.json")
	put(store.SnapshotKey(goneID, 9))
	// A fork whose workflow never started.
	never := agentflow.AgentWorkflowID(r.thread("retain-never"))
	put(store.SessionPrefix(never) + "transcript/0000000000000001.json")
	put(store.SnapshotKey(never, 1))
	// Not a session's: left alone.
	put("other/keep.txt")
	put("sessions/not-an-encoded-id/keep.txt")

	// Within the retention, nothing goes.
	r.reap(agentflow.ReaperInput{Grace: time.Hour, Retention: time.Hour})
	for _, p := range []string{store.SessionPrefix(goneID), store.SnapshotPrefix(goneID), store.SessionPrefix(never), store.SnapshotPrefix(never)} {
		if len(keys(p)) == 0 {
			t.Errorf("%s was deleted within the retention", p)
		}
	}

	time.Sleep(2 * time.Second)
	res := r.reap(agentflow.ReaperInput{Grace: time.Hour, Retention: time.Second})
	for _, p := range []string{store.SessionPrefix(goneID), store.SnapshotPrefix(goneID), store.SessionPrefix(never), store.SnapshotPrefix(never)} {
		if ks := keys(p); len(ks) != 0 {
			t.Errorf("past the retention, %s still holds %v", p, ks)
		}
	}
	if got := append(keys(store.SessionPrefix(liveID)), keys(store.SnapshotPrefix(liveID))...); !slices.Equal(got, liveKeys) {
		t.Errorf("the live session's data changed: %v, was %v", got, liveKeys)
	}
	for _, k := range []string{"other/keep.txt", "sessions/not-an-encoded-id/keep.txt"} {
		if ok, err := r.blobs.Exists(ctx, k); err != nil || !ok {
			t.Errorf("%s is gone (%v)", k, err)
		}
	}
	if res.SessionsDeleted != 2 {
		t.Errorf("the sweep reports %d sessions' data deleted, want 2: %+v", res.SessionsDeleted, res)
	}
	r.send(live, localsandbox.Name, "sh: cat a.txt")
	if _, err := r.cl.Destroy(ctx, live, agentflow.DestroyRequest{}); err != nil {
		t.Fatal(err)
	}
}

// TestEnsureReaper makes the reaper's schedule, makes it again with other
// settings (as a worker restarted with a new configuration does), and
// triggers it: the sweep it starts runs on the worker and completes.
func TestEnsureReaper(t *testing.T) {
	r := newReapRig(t, false)
	ctx := context.Background()
	h := r.tc.ScheduleClient().GetHandle(ctx, agentflow.ReaperScheduleID)
	t.Cleanup(func() { _ = h.Delete(context.Background()) })
	check := func(every time.Duration, want agentflow.ReaperInput) *client.ScheduleDescription {
		t.Helper()
		d, err := h.Describe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if iv := d.Schedule.Spec.Intervals; len(iv) != 1 || iv[0].Every != every {
			t.Errorf("intervals %+v, want every %s", iv, every)
		}
		if d.Schedule.Policy.Overlap != enumspb.SCHEDULE_OVERLAP_POLICY_SKIP {
			t.Errorf("overlap policy %v, want skip", d.Schedule.Policy.Overlap)
		}
		act, ok := d.Schedule.Action.(*client.ScheduleWorkflowAction)
		if !ok || act.Workflow != agentflow.ReaperWorkflowName || act.TaskQueue != agentflow.TaskQueue || len(act.Args) != 1 {
			t.Fatalf("action %+v", d.Schedule.Action)
		}
		var got agentflow.ReaperInput
		if err := converter.GetDefaultDataConverter().FromPayload(act.Args[0].(*commonpb.Payload), &got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("sweep input %+v, want %+v", got, want)
		}
		return d
	}
	if err := agentflow.EnsureReaper(ctx, r.tc, agentflow.ReaperOptions{Interval: time.Hour, Grace: 5 * time.Hour, Retention: 48 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	check(time.Hour, agentflow.ReaperInput{Grace: 5 * time.Hour, Retention: 48 * time.Hour})
	if err := agentflow.EnsureReaper(ctx, r.tc, agentflow.ReaperOptions{Interval: 2 * time.Hour, Grace: 6 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	check(2*time.Hour, agentflow.ReaperInput{Grace: 6 * time.Hour, Retention: agentflow.DefaultRetention})

	if err := h.Trigger(ctx, client.ScheduleTriggerOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		d := check(2*time.Hour, agentflow.ReaperInput{Grace: 6 * time.Hour, Retention: agentflow.DefaultRetention})
		if n := len(d.Info.RecentActions); n > 0 {
			run := d.Info.RecentActions[n-1].StartWorkflowResult
			var res agentflow.ReaperResult
			if err := r.tc.GetWorkflow(ctx, run.WorkflowID, run.FirstExecutionRunID).Get(ctx, &res); err != nil {
				t.Fatalf("the scheduled sweep: %v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the triggered schedule started no sweep within a minute")
		}
		time.Sleep(200 * time.Millisecond)
	}
}
