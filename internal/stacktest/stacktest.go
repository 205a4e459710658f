// Package stacktest starts the whole back end of agentbot for end-to-end
// tests of chat adapters: a real Temporal dev server, a worker with the
// real activities, the local and Docker sandboxes, a file blob store and the
// fake model (DirectiveScript). The adapter under test brings its sender.
//
// Everything a stack makes goes when its test ends, failed or not: local
// sandboxes live in the test's temp directory, and every container the
// stack's Docker backend makes carries LabelRun with a value of its own, by
// which the stack removes them all (sessions are never destroyed by the
// tests, so their sandboxes would otherwise stay running).
package stacktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"maps"
	"testing"

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

// Stack is a running back end.
type Stack struct {
	Temporal client.Client
	Sessions *agentflow.Client
	Model    *fakeopenai.Server
}

// Options change a stack from its defaults.
type Options struct {
	// Model configures the fake model; a nil Script means
	// DirectiveScript.
	Model fakeopenai.Options
	// StreamAnswers streams answers to senders that can
	// (agentflow.Activities.StreamAnswers).
	StreamAnswers bool
}

// Start starts a stack whose worker delivers through senders; everything
// stops at the end of the test. It fails the test (never skips) when Docker
// or the temporal CLI is missing.
func Start(t *testing.T, senders map[string]agentflow.ChatSender) *Stack {
	t.Helper()
	return StartWith(t, senders, Options{})
}

// StartWith is Start with opts.
func StartWith(t *testing.T, senders map[string]agentflow.ChatSender, opts Options) *Stack {
	t.Helper()
	ctx := context.Background()
	if err := testenv.CheckDocker(ctx); err != nil {
		t.Fatal(err)
	}
	srv, err := testenv.StartTemporal(ctx, testenv.TemporalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	if opts.Model.Script == nil {
		opts.Model.Script = fakeopenai.DirectiveScript()
	}
	model := fakeopenai.New(opts.Model)
	t.Cleanup(model.Close)
	tc, err := client.Dial(client.Options{HostPort: srv.FrontendHostPort(), Logger: testenv.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)

	reg := sandboxes.NewRegistry()
	lb, err := localsandbox.New(localsandbox.Options{BaseDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	db, err := dockersandbox.New(dockersandbox.Options{Image: testenv.TestImage()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	// Registered before the worker's: runs after the worker stopped, so
	// no activity makes a container behind it.
	docker := TrackDocker(t, db)
	for name, b := range map[string]sandboxes.Backend{"local": lb, "docker": docker} {
		if err := reg.Register(name, b); err != nil {
			t.Fatal(err)
		}
	}
	blobs, err := store.OpenBlobs(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	llmc, err := llm.New(llm.Config{BaseURL: model.URL(), APIKey: opts.Model.APIKey})
	if err != nil {
		t.Fatal(err)
	}
	w := worker.New(tc, agentflow.TaskQueue, testenv.WorkerOptions())
	agentworker.Register(w, &agentflow.Activities{
		Sandboxes: reg, Blobs: blobs, Model: llmc, ModelName: "fake", Temporal: tc, Chat: senders,
		StreamAnswers: opts.StreamAnswers,
	})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return &Stack{Temporal: tc, Sessions: agentflow.NewClient(tc), Model: model}
}

// LabelRun is the container label of the sandboxes a stack makes; its
// value is unique to the stack.
const LabelRun = "agentbot.stacktest"

// TrackDocker returns db with LabelRun added to every sandbox it creates,
// and removes those containers when t ends, failed or not (register it
// before the worker that uses it, so that it runs after the worker
// stopped). Tests that make sandboxes they may not destroy use it.
func TrackDocker(t *testing.T, db *dockersandbox.Backend) sandboxes.Backend {
	run := newRunID()
	t.Cleanup(func() { removeContainers(t, run) })
	return labelled{Backend: db, label: run}
}

func newRunID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// labelled is the Docker backend with LabelRun added to every sandbox it
// creates; everything else is the backend's own.
type labelled struct {
	*dockersandbox.Backend
	label string
}

func (l labelled) Create(ctx context.Context, spec sandboxes.Spec) (sandboxes.Instance, error) {
	spec.Labels = maps.Clone(spec.Labels)
	if spec.Labels == nil {
		spec.Labels = map[string]string{}
	}
	spec.Labels[LabelRun] = l.label
	return l.Backend.Create(ctx, spec)
}

// removeContainers removes the containers (and their workspace volumes) of
// the stack whose LabelRun value is run, and fails the test if any is left.
func removeContainers(t *testing.T, run string) {
	testenv.RemoveContainers(t, LabelRun, run)
}
