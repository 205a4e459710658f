package agentflow_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	dockerclient "github.com/docker/docker/client"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/agentflow/llm"
	"github.com/agentbot/agentbot/bot/terminal"
	"github.com/agentbot/agentbot/internal/agentworker"
	"github.com/agentbot/agentbot/internal/fakeopenai"
	"github.com/agentbot/agentbot/internal/stacktest"
	"github.com/agentbot/agentbot/internal/testenv"
	"github.com/agentbot/agentbot/sandboxes"
	"github.com/agentbot/agentbot/sandboxes/dockersandbox"
	"github.com/agentbot/agentbot/sandboxes/localsandbox"
	"github.com/agentbot/agentbot/store"
)

// devServer is the real Temporal dev server of this package's tests. The
// dynamic config makes it suggest continue-as-new early, so the long-session
// test crosses several runs through the real suggestion path.
var devServer *testsuite.DevServer

const suggestCANAt = 600 // events

func TestMain(m *testing.M) {
	srv, err := testenv.StartTemporal(context.Background(), testenv.TemporalOptions{
		DynamicConfig: []string{fmt.Sprintf("limit.historyCount.suggestContinueAsNew=%d", suggestCANAt)},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "agentflow tests:", err)
		os.Exit(1)
	}
	devServer = srv
	code := m.Run()
	srv.Stop()
	os.Exit(code)
}

// rig is a worker with real parts (local and Docker sandboxes, a file blob
// store, the fake model over HTTP, a terminal sender) on the shared dev
// server. Tests keep apart by thread keys.
type rig struct {
	t        *testing.T
	tc       client.Client
	cl       *agentflow.Client
	reg      *sandboxes.Registry
	blobs    *store.Blobs
	model    *fakeopenai.Server
	terminal *testenv.Buffer
	docker   *dockersandbox.Backend
	// acts and worker are the worker's, for tests that stop it and start
	// another.
	acts   *agentflow.Activities
	worker worker.Worker
}

type rigOptions struct {
	docker bool
	script fakeopenai.Script
}

func newRig(t *testing.T, opts rigOptions) *rig {
	t.Helper()
	ctx := context.Background()
	tc, err := client.Dial(client.Options{HostPort: temporalAddr(t), Namespace: "default", Logger: testenv.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	r := &rig{t: t, tc: tc, cl: agentflow.NewClient(tc), reg: sandboxes.NewRegistry(), terminal: &testenv.Buffer{}}

	lb, err := localsandbox.New(localsandbox.Options{BaseDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.reg.Register(localsandbox.Name, lb); err != nil {
		t.Fatal(err)
	}
	if opts.docker {
		if err := testenv.CheckDocker(ctx); err != nil {
			t.Fatal(err)
		}
		db, err := dockersandbox.New(dockersandbox.Options{Image: testenv.TestImage()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		// A failed test may never destroy its sessions: their containers
		// go when it ends all the same.
		if err := r.reg.Register(dockersandbox.Name, stacktest.TrackDocker(t, db)); err != nil {
			t.Fatal(err)
		}
		r.docker = db
	}
	r.blobs, err = store.OpenBlobs(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	script := opts.script
	if script == nil {
		script = fakeopenai.DirectiveScript()
	}
	r.model = fakeopenai.New(fakeopenai.Options{APIKey: "sk-test-secret-key", Script: script})
	t.Cleanup(r.model.Close)
	model, err := llm.New(llm.Config{BaseURL: r.model.URL(), APIKey: "sk-test-secret-key"})
	if err != nil {
		t.Fatal(err)
	}
	acts := &agentflow.Activities{
		Sandboxes: r.reg, Blobs: r.blobs, Model: model, ModelName: "fake-model",
		Chat: map[string]agentflow.ChatSender{"term": terminal.NewSender(r.terminal)}, Temporal: tc,
		Secrets: []string{"sk-test-secret-key"},
	}
	w := worker.New(tc, agentflow.TaskQueue, testenv.WorkerOptions())
	agentworker.Register(w, acts)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.worker.Stop() })
	r.acts, r.worker = acts, w
	return r
}

func temporalAddr(t *testing.T) string {
	if devServer == nil {
		t.Fatal("no dev server")
	}
	return devServer.FrontendHostPort()
}

func (r *rig) send(thread, text string) *agentflow.TurnResult {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := r.cl.SendAndWait(ctx, agentflow.AgentInput{ThreadKey: thread, Backend: "local"},
		agentflow.MessageRequest{ID: fmt.Sprintf("%s-%d", thread, time.Now().UnixNano()), Author: "tester", Text: text})
	if err != nil {
		r.t.Fatalf("send %q: %v", text, err)
	}
	if res.Result == nil {
		r.t.Fatalf("send %q: no turn result", text)
	}
	return res.Result
}

func (r *rig) state(thread string) agentflow.SessionView {
	r.t.Helper()
	v, err := r.cl.State(context.Background(), thread)
	if err != nil {
		r.t.Fatal(err)
	}
	return v
}

func mustContain(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Fatalf("%s: want %q in:\n%s", what, w, got)
		}
	}
}

func mustNotContain(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if strings.Contains(got, w) {
			t.Fatalf("%s: did not want %q in:\n%s", what, w, got)
		}
	}
}

// TestSessionLifecycle walks one session through everything a chat can do
// to it, on the real dev server, the local and Docker sandboxes and the fake
// model: two turns, switch to Docker, fork onto local, title, pause and
// resume, stop during a long command, destroy.
func TestSessionLifecycle(t *testing.T) {
	r := newRig(t, rigOptions{docker: true})
	ctx := context.Background()
	const thread = "term:lifecycle"

	// Two turns; the second sees the first's file.
	res := r.send(thread, "write: notes.txt <<< hello from turn one")
	if res.Status != agentflow.TurnDone {
		t.Fatalf("turn 1: %+v", res)
	}
	res = r.send(thread, "sh: cat notes.txt")
	mustContain(t, "turn 2", res.Answer, "hello from turn one")
	if v := r.state(thread); v.Backend != "local" || v.Turn != 2 || v.Usage.TotalTokens == 0 {
		t.Fatalf("state after two turns: %+v", v)
	}

	// Switch to Docker: the file comes along and commands run in the
	// container (as the image's non-root user).
	sw, err := r.cl.Switch(ctx, thread, agentflow.SwitchRequest{Backend: "docker"})
	if err != nil || !sw.Changed {
		t.Fatalf("switch: %+v %v", sw, err)
	}
	again, err := r.cl.Switch(ctx, thread, agentflow.SwitchRequest{Backend: "docker"})
	if err != nil || again.Changed || !strings.Contains(again.Message, "already on docker") {
		t.Fatalf("switch to the current backend: %+v %v", again, err)
	}
	res = r.send(thread, "sh: cat notes.txt; test -f /.dockerenv && echo in-a-container; id -u; pwd")
	mustContain(t, "after switch", res.Answer, "hello from turn one", "in-a-container", "1000", "/workspace")
	v := r.state(thread)
	if v.Backend != "docker" || v.SandboxID == "" {
		t.Fatalf("state after switch: %+v", v)
	}
	containerID := v.SandboxID

	// Fork onto local: each side gets its own copy.
	fork, err := r.cl.Fork(ctx, agentflow.ForkRequest{SourceThread: thread, Backend: "local", RequestID: "fork-1", Requester: "tester"})
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	if fork.Backend != "local" || !strings.Contains(fork.Title, "[local]") {
		t.Fatalf("fork result: %+v", fork)
	}
	// A repeated request returns the same fork.
	fork2, err := r.cl.Fork(ctx, agentflow.ForkRequest{SourceThread: thread, Backend: "local", RequestID: "fork-1"})
	if err != nil || fork2.ThreadKey != fork.ThreadKey {
		t.Fatalf("repeated fork: %+v %v", fork2, err)
	}
	res = r.send(fork.ThreadKey, "sh: cat notes.txt && echo only-in-fork > fork.txt && ls")
	mustContain(t, "fork sees the parent's file", res.Answer, "hello from turn one")
	res = r.send(thread, "sh: echo only-in-parent > parent.txt; ls")
	mustNotContain(t, "parent does not see the fork's file", res.Answer, "fork.txt")
	res = r.send(fork.ThreadKey, "sh: ls")
	mustNotContain(t, "fork does not see the parent's new file", res.Answer, "parent.txt")
	mustContain(t, "fork keeps its own file", res.Answer, "fork.txt")
	if fv := r.state(fork.ThreadKey); fv.Parent != thread || fv.Backend != "local" {
		t.Fatalf("fork state: %+v", fv)
	}
	if pv := r.state(thread); pv.Forks != 1 {
		t.Fatalf("parent fork count: %+v", pv)
	}
	mustContain(t, "fork links in the terminal", r.terminal.String(), "Forked into", "Forked from")

	// Title; the registry follows.
	if _, err := r.cl.Title(ctx, thread, agentflow.TitleRequest{Title: "the build fix"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.cl.Title(ctx, thread, agentflow.TitleRequest{Title: "   "}); err == nil {
		t.Fatal("an empty title was accepted")
	}
	waitFor(t, "registry shows the new title", func() bool {
		l, _ := r.cl.List(ctx, thread)
		for _, e := range l {
			if e.ThreadKey == thread && e.Title == "the build fix" {
				return true
			}
		}
		return false
	})

	// Pause: snapshot and stop; the container is stopped, not gone. The
	// next message resumes it.
	pv, err := r.cl.Pause(ctx, thread, agentflow.PauseRequest{})
	if err != nil || pv.Status != agentflow.StatusPaused {
		t.Fatalf("pause: %+v %v", pv, err)
	}
	if running := containerRunning(t, r, containerID); running {
		t.Fatal("container still running after pause")
	}
	res = r.send(thread, "sh: cat notes.txt parent.txt")
	mustContain(t, "after resume", res.Answer, "hello from turn one", "only-in-parent")

	// Stop during a long command: the turn ends promptly, the session
	// stays usable.
	go func() {
		_, _ = r.cl.Send(ctx, agentflow.AgentInput{ThreadKey: thread}, agentflow.MessageRequest{ID: "long-sleep", Text: "sleep: 120"})
	}()
	waitFor(t, "the sleep is running", func() bool {
		v := r.state(thread)
		for _, tool := range v.Tools {
			if tool.State == "running" {
				return true
			}
		}
		return false
	})
	start := time.Now()
	st, err := r.cl.Stop(ctx, thread, agentflow.StopRequest{})
	if err != nil || !st.Stopped {
		t.Fatalf("stop: %+v %v", st, err)
	}
	if d := time.Since(start); d > 60*time.Second {
		t.Fatalf("stop took %s", d)
	}
	res = r.send(thread, "sh: echo still-usable")
	mustContain(t, "after stop", res.Answer, "still-usable")
	// A platform retry of the stopped message starts no second turn, and
	// waiting for it gives the first answer.
	turns := r.state(thread).Turn
	if _, err := r.cl.Send(ctx, agentflow.AgentInput{ThreadKey: thread}, agentflow.MessageRequest{ID: "long-sleep", Text: "sleep: 120"}); err != nil {
		t.Fatalf("retried message: %v", err)
	}
	if dup, err := r.cl.Wait(ctx, thread, "long-sleep"); err != nil || dup.Result == nil || dup.Result.Status != agentflow.TurnStopped {
		t.Fatalf("the retried message's result: %+v %v", dup, err)
	}
	time.Sleep(500 * time.Millisecond)
	if v := r.state(thread); v.Turn != turns || v.Queued != 0 || v.Status != agentflow.StatusIdle {
		t.Fatalf("a retried message started a turn: %+v", v)
	}

	// Destroy: the container is gone; later messages are told so.
	if _, err := r.cl.Destroy(ctx, thread, agentflow.DestroyRequest{}); err != nil {
		t.Fatal(err)
	}
	if exists := containerExists(t, r, containerID); exists {
		t.Fatal("container still exists after destroy")
	}
	// The destroy is answered before the run ends: a message that comes
	// while it still sends what it had queued (a progress edit waiting
	// for its second) is taken and answered in the thread; one that
	// comes after is refused at once. Either way the sender is told.
	told := strings.Count(r.terminal.String(), agentflow.ErrDestroyedText)
	_, err = r.cl.Send(ctx, agentflow.AgentInput{ThreadKey: thread}, agentflow.MessageRequest{ID: "after-destroy", Text: "hello?"})
	switch {
	case errors.Is(err, agentflow.ErrDestroyed):
	case err == nil:
		waitFor(t, "the thread is told the session was destroyed", func() bool {
			return strings.Count(r.terminal.String(), agentflow.ErrDestroyedText) > told
		})
	default:
		t.Fatalf("message after destroy: %v", err)
	}
	waitFor(t, "registry marks it destroyed", func() bool {
		l, _ := r.cl.List(ctx, thread)
		for _, e := range l {
			if e.ThreadKey == thread {
				return e.Status == agentflow.StatusDestroyed
			}
		}
		return false
	})
	// The fork lives on.
	res = r.send(fork.ThreadKey, "sh: cat fork.txt")
	mustContain(t, "fork after parent destroyed", res.Answer, "only-in-fork")
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func dockerAPI(t *testing.T) *dockerclient.Client {
	t.Helper()
	c, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func containerExists(t *testing.T, r *rig, id string) bool {
	_, err := dockerAPI(t).ContainerInspect(context.Background(), id)
	if err != nil && !cerrdefs.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

func containerRunning(t *testing.T, r *rig, id string) bool {
	info, err := dockerAPI(t).ContainerInspect(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Running
}

var containerRemoveForce = container.RemoveOptions{Force: true, RemoveVolumes: true}
