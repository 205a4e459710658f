// Package stacktest starts the whole back end of agentbot for end-to-end
// tests of chat adapters: a real Temporal dev server, a worker with the
// real activities, the local and Docker sandboxes, a file blob store and the
// fake model (DirectiveScript). The adapter under test brings its sender.
package stacktest

import (
	"context"
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

// Start starts a stack whose worker delivers through senders; everything
// stops at the end of the test. It fails the test (never skips) when Docker
// or the temporal CLI is missing.
func Start(t *testing.T, senders map[string]agentflow.ChatSender) *Stack {
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
	model := fakeopenai.New(fakeopenai.Options{Script: fakeopenai.DirectiveScript()})
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
	for name, b := range map[string]sandboxes.Backend{"local": lb, "docker": db} {
		if err := reg.Register(name, b); err != nil {
			t.Fatal(err)
		}
	}
	blobs, err := store.OpenBlobs(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	llmc, err := llm.New(llm.Config{BaseURL: model.URL()})
	if err != nil {
		t.Fatal(err)
	}
	w := worker.New(tc, agentflow.TaskQueue, testenv.WorkerOptions())
	agentworker.Register(w, &agentflow.Activities{
		Sandboxes: reg, Blobs: blobs, Model: llmc, ModelName: "fake", Temporal: tc, Chat: senders,
	})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return &Stack{Temporal: tc, Sessions: agentflow.NewClient(tc), Model: model}
}
