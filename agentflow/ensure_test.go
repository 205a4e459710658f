package agentflow_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	dockerclient "github.com/docker/docker/client"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
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

// sandboxRig is a registry with a local backend of its own (a fresh base
// directory, so its List holds this test's sandboxes only) and, when asked,
// the Docker backend, with a file blob store. Docker containers the test
// made (found by their agentbot.session label) are removed at cleanup,
// whatever the test did.
type sandboxRig struct {
	t      *testing.T
	reg    *sandboxes.Registry
	local  *localsandbox.Backend
	docker *dockersandbox.Backend
	dc     *dockerclient.Client
	blobs  *store.Blobs
	// sessions are the session IDs whose containers cleanup removes.
	sessions []string
}

func newSandboxRig(t *testing.T, docker bool) *sandboxRig {
	t.Helper()
	ctx := context.Background()
	r := &sandboxRig{t: t, reg: sandboxes.NewRegistry()}
	var err error
	if r.local, err = localsandbox.New(localsandbox.Options{BaseDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	if err := r.reg.Register(localsandbox.Name, r.local); err != nil {
		t.Fatal(err)
	}
	if docker {
		if err := testenv.CheckDocker(ctx); err != nil {
			t.Fatal(err)
		}
		if r.docker, err = dockersandbox.New(dockersandbox.Options{Image: testenv.TestImage()}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.docker.Close() })
		if err := r.reg.Register(dockersandbox.Name, r.docker); err != nil {
			t.Fatal(err)
		}
		if r.dc, err = dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			for _, s := range r.sessions {
				for _, id := range r.containers(s) {
					_ = r.dc.ContainerRemove(context.Background(), id, container.RemoveOptions{Force: true, RemoveVolumes: true})
				}
			}
			r.dc.Close()
		})
	}
	if r.blobs, err = store.OpenBlobs(ctx, "file://"+t.TempDir()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.blobs.Close() })
	return r
}

// session returns a new session ID whose Docker containers cleanup removes.
func (r *sandboxRig) session(name string) string {
	b := make([]byte, 4)
	rand.Read(b)
	id := agentflow.AgentWorkflowID("term:" + name + "-" + hex.EncodeToString(b))
	r.sessions = append(r.sessions, id)
	return id
}

// containers lists the containers, running or not, labelled with session.
func (r *sandboxRig) containers(session string) []string {
	r.t.Helper()
	cs, err := r.dc.ContainerList(context.Background(), container.ListOptions{
		All: true, Filters: filters.NewArgs(filters.Arg("label", "agentbot.session="+session)),
	})
	if err != nil {
		r.t.Fatalf("listing containers: %v", err)
	}
	var ids []string
	for _, c := range cs {
		ids = append(ids, c.ID)
	}
	slices.Sort(ids)
	return ids
}

// sandboxesOf lists the IDs of the sandboxes of session on backend: for
// local every sandbox of the rig's own base directory (only this test
// makes any there), for Docker the containers with the session's label.
func (r *sandboxRig) sandboxesOf(backend, session string) []string {
	r.t.Helper()
	if backend == dockersandbox.Name {
		return r.containers(session)
	}
	list, err := r.local.List(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	var ids []string
	for _, l := range list {
		ids = append(ids, l.ID)
	}
	return ids
}

// TestEnsureSandboxRetryMakesOneSandbox calls EnsureSandbox twice with the
// same input, as Temporal does when an attempt's result is lost (a timeout,
// a worker that died after creating): there must be one sandbox, and a
// sandbox found half-restored is restored again from scratch.
func TestEnsureSandboxRetryMakesOneSandbox(t *testing.T) {
	for _, backend := range []string{localsandbox.Name, dockersandbox.Name} {
		t.Run(backend, func(t *testing.T) {
			r := newSandboxRig(t, backend == dockersandbox.Name)
			ctx := context.Background()
			acts := &agentflow.Activities{Sandboxes: r.reg, Blobs: r.blobs}
			session := r.session("ensure-" + backend)
			in := agentflow.EnsureSandboxInput{SessionID: session, Backend: backend, Title: "retry", Generation: 1}
			first, err := acts.EnsureSandbox(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			second, err := acts.EnsureSandbox(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.sandboxesOf(backend, session); len(got) != 1 {
				t.Fatalf("two calls with one input left %d sandboxes (%v); want 1", len(got), got)
			}
			if first.State.ID != second.State.ID || !second.Created {
				t.Fatalf("the retry answered %+v; want sandbox %s, created", second, first.State.ID)
			}
			// The next generation is another sandbox.
			in.Generation = 2
			third, err := acts.EnsureSandbox(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			if third.State.ID == first.State.ID {
				t.Fatalf("generation 2 got generation 1's sandbox %s", first.State.ID)
			}
		})
	}

	t.Run("half-restored sandbox found on retry", func(t *testing.T) {
		r := newSandboxRig(t, true)
		ctx := context.Background()
		session := r.session("ensure-restore")
		// A snapshot of a workspace holding keep.txt.
		src, err := r.reg.Create(ctx, localsandbox.Name, sandboxes.Spec{})
		if err != nil {
			t.Fatal(err)
		}
		if err := src.WriteFile(ctx, "keep.txt", []byte("from the snapshot"), 0o644); err != nil {
			t.Fatal(err)
		}
		key := store.SnapshotKey(session, 1)
		w, err := r.blobs.NewWriter(ctx, key, sandboxes.SnapshotContentType)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := src.Snapshot(ctx, w); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := src.Destroy(ctx); err != nil {
			t.Fatal(err)
		}

		acts := &agentflow.Activities{Sandboxes: r.reg, Blobs: r.blobs}
		in := agentflow.EnsureSandboxInput{SessionID: session, Backend: dockersandbox.Name, SnapshotKey: key, Generation: 1}
		first, err := acts.EnsureSandbox(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		// What an attempt that died half-way may leave: the workspace
		// neither empty nor the snapshot.
		sb, err := r.reg.Attach(ctx, first.State)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sb.Exec(ctx, sandboxes.ExecRequest{Command: "rm -f keep.txt && echo half > junk.txt"}); err != nil {
			t.Fatal(err)
		}
		second, err := acts.EnsureSandbox(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if second.State.ID != first.State.ID || !second.Restored {
			t.Fatalf("the retry answered %+v; want sandbox %s, restored", second, first.State.ID)
		}
		sb, err = r.reg.Attach(ctx, second.State)
		if err != nil {
			t.Fatal(err)
		}
		res, err := sb.Exec(ctx, sandboxes.ExecRequest{Command: "cat keep.txt; ls"})
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Stdout.String(); got != "from the snapshotkeep.txt\n" {
			t.Errorf("the workspace handed out after the retry holds %q; want exactly the snapshot", got)
		}
		if got := r.sandboxesOf(dockersandbox.Name, session); len(got) != 1 {
			t.Errorf("%d sandboxes (%v); want 1", len(got), got)
		}
	})

	t.Run("dev server, result lost after creating", func(t *testing.T) {
		r := newSandboxRig(t, false)
		ctx := context.Background()
		tc, err := client.Dial(client.Options{HostPort: temporalAddr(t), Logger: testenv.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tc.Close)
		model := fakeopenai.New(fakeopenai.Options{Script: fakeopenai.DirectiveScript()})
		t.Cleanup(model.Close)
		llmc, err := llm.New(llm.Config{BaseURL: model.URL()})
		if err != nil {
			t.Fatal(err)
		}
		acts := &agentflow.Activities{Sandboxes: r.reg, Blobs: r.blobs, Model: llmc, ModelName: "fake", Temporal: tc}
		w := worker.New(tc, agentflow.TaskQueue, testenv.WorkerOptions())
		agentworker.Register(w, acts)
		// The first attempt creates the sandbox and then fails, as if the
		// worker had died before reporting: Temporal retries it.
		var attempts atomic.Int32
		w.RegisterActivityWithOptions(func(ctx context.Context, in agentflow.EnsureSandboxInput) (agentflow.EnsureSandboxResult, error) {
			attempts.Add(1)
			res, err := acts.EnsureSandbox(ctx, in)
			if err == nil && activity.GetInfo(ctx).Attempt == 1 {
				return agentflow.EnsureSandboxResult{}, errors.New("test: the result of this attempt is lost")
			}
			return res, err
		}, activity.RegisterOptions{Name: "EnsureSandbox", DisableAlreadyRegisteredCheck: true})
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)

		cl := agentflow.NewClient(tc)
		b := make([]byte, 4)
		rand.Read(b)
		thread := "term:ensure-retry-" + hex.EncodeToString(b)
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		res, err := cl.SendAndWait(sctx, agentflow.AgentInput{ThreadKey: thread, Backend: localsandbox.Name},
			agentflow.MessageRequest{ID: thread + "-1", Text: "sh: echo made"})
		if err != nil || res.Result == nil || res.Result.Status != agentflow.TurnDone {
			t.Fatalf("turn: %+v, %v", res, err)
		}
		if n := attempts.Load(); n < 2 {
			t.Fatalf("EnsureSandbox ran %d times; the test needs a retry", n)
		}
		got := r.sandboxesOf(localsandbox.Name, "")
		v, err := cl.State(ctx, thread)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0] != v.SandboxID {
			t.Fatalf("sandboxes %v after a retried EnsureSandbox; want only the session's %s", got, v.SandboxID)
		}
		if _, err := cl.Destroy(ctx, thread, agentflow.DestroyRequest{}); err != nil {
			t.Fatal(err)
		}
	})
}
