package agentflow_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/agentflow/llm"
	"github.com/agentbot/agentbot/internal/agentworker"
	"github.com/agentbot/agentbot/internal/fakedaytona"
	"github.com/agentbot/agentbot/internal/fakee2b"
	"github.com/agentbot/agentbot/internal/fakeopenai"
	"github.com/agentbot/agentbot/internal/testenv"
	"github.com/agentbot/agentbot/sandboxes"
	"github.com/agentbot/agentbot/sandboxes/daytonasandbox"
	"github.com/agentbot/agentbot/sandboxes/e2bsandbox"
	"github.com/agentbot/agentbot/sandboxes/localsandbox"
	"github.com/agentbot/agentbot/store"
)

// TestSwitchAcrossClouds moves one session local → E2B → Daytona → local
// (the cloud backends against their spec-validating fakes) and checks the
// workspace stays byte-identical at every hop.
func TestSwitchAcrossClouds(t *testing.T) {
	ctx := context.Background()
	specs := filepath.Join("..", "..", "shared", "specs")
	if _, err := os.Stat(specs); err != nil {
		t.Logf("no %s: the cloud fakes run without spec validation", specs)
		specs = ""
	}
	fe, err := fakee2b.New(fakee2b.Options{APIKey: "e2b_test", SpecsDir: specs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fe.Close)
	fdy, err := fakedaytona.New(fakedaytona.Options{Key: "dtn_test", SpecsDir: specs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fdy.Close)

	reg := sandboxes.NewRegistry()
	lb, err := localsandbox.New(localsandbox.Options{BaseDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	eb, err := e2bsandbox.New(e2bsandbox.Options{APIKey: "e2b_test", APIURL: fe.URL,
		EnvdURL: func(id string) string { return fe.EnvdURL(id) }})
	if err != nil {
		t.Fatal(err)
	}
	db, err := daytonasandbox.New(daytonasandbox.Options{APIKey: "dtn_test", APIURL: fdy.APIURL()})
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string]sandboxes.Backend{"local": lb, "e2b": eb, "daytona": db} {
		if err := reg.Register(name, b); err != nil {
			t.Fatal(err)
		}
	}
	blobs, err := store.OpenBlobs(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	model := fakeopenai.New(fakeopenai.Options{Script: fakeopenai.DirectiveScript()})
	t.Cleanup(model.Close)
	llmc, err := llm.New(llm.Config{BaseURL: model.URL()})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := client.Dial(client.Options{HostPort: temporalAddr(t), Logger: testenv.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	// The package's tests run one at a time and stop their workers at
	// cleanup, so this worker, the only one with the cloud backends, is
	// the only one polling while this test runs.
	w := worker.New(tc, agentflow.TaskQueue, testenv.WorkerOptions())
	agentworker.Register(w, &agentflow.Activities{Sandboxes: reg, Blobs: blobs, Model: llmc, ModelName: "fake", Temporal: tc})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	cl := agentflow.NewClient(tc)

	const thread = "term:clouds"
	n := 0
	send := func(text string) string {
		t.Helper()
		n++
		sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		res, err := cl.SendAndWait(sctx, agentflow.AgentInput{ThreadKey: thread, Backend: "local"},
			agentflow.MessageRequest{ID: thread + "-" + string(rune('a'+n)), Text: text})
		if err != nil || res.Result == nil {
			t.Fatalf("%s: %+v %v", text, res, err)
		}
		return res.Result.Answer
	}
	// A small tree with binary content, modes, a nested empty directory
	// and a symlink; its digest is printed by one command on every backend.
	send(`sh: mkdir -p src/pkg empty/dir && printf 'package main\n' > src/main.go && head -c 3000 /dev/urandom > blob.bin && printf '#!/bin/sh\necho hi\n' > run.sh && chmod 755 run.sh && ln -s src/main.go link.go`)
	digest := `sh: find . -path ./.agentbot -prune -o -print | LC_ALL=C sort | while read -r p; do if [ -L "$p" ]; then echo "L $p $(readlink "$p")"; elif [ -d "$p" ]; then echo "D $p"; else echo "F $p $(stat -c %a "$p") $(md5sum < "$p" | cut -c1-32)"; fi; done; echo end-of-digest`
	tree := func(answer string) string {
		i := strings.Index(answer, "stdout:")
		j := strings.Index(answer, "end-of-digest")
		if i < 0 || j < i {
			t.Fatalf("no digest in:\n%s", answer)
		}
		return answer[i:j]
	}
	want := tree(send(digest))
	if !strings.Contains(want, "F ./blob.bin") || !strings.Contains(want, "L ./link.go src/main.go") || !strings.Contains(want, "F ./run.sh 755") {
		t.Fatalf("unexpected tree:\n%s", want)
	}
	for _, backend := range []string{"e2b", "daytona", "local"} {
		res, err := cl.Switch(ctx, thread, agentflow.SwitchRequest{Backend: backend})
		if err != nil || !res.Changed {
			t.Fatalf("switch to %s: %+v %v", backend, res, err)
		}
		if v, _ := cl.State(ctx, thread); v.Backend != backend {
			t.Fatalf("on %s after switching to %s", v.Backend, backend)
		}
		if got := tree(send(digest)); got != want {
			t.Fatalf("the workspace changed moving to %s:\nbefore:\n%s\nafter:\n%s", backend, want, got)
		}
	}
	for _, f := range fe.Failures() {
		t.Errorf("E2B spec violation: %s", f)
	}
	for _, f := range fdy.Errors() {
		t.Errorf("Daytona spec violation: %s", f)
	}
}
