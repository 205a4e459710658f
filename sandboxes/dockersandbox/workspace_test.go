package dockersandbox_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/agentbot/agentbot/sandboxes"
	"github.com/agentbot/agentbot/sandboxes/dockersandbox"
)

// TestWorkspaceBound: the workspace volume is bounded (the local driver's
// size option) where the engine supports volume quotas; an engine that
// refuses it still gets its sandbox, without the bound, and the backend
// says so instead of failing every Create. This engine (ext4, no project
// quotas) refuses it, so what is proven here is the fallback and that the
// bound was asked for: the volume of a sandbox on an engine with quotas is
// made with size=<bytes>.
func TestWorkspaceBound(t *testing.T) {
	ctx := context.Background()
	var logs bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	b := newBackend(t, dockersandbox.Options{Image: testImage()})
	if !b.WorkspaceBounded() {
		t.Fatal("a new backend does not ask for a bounded workspace by default")
	}
	r := registry(t, b)
	for i := range 2 {
		sb := create(t, r, sandboxes.Spec{Name: "bounded"})
		if out := sh(t, sb, "echo ok > f && cat f"); out != "ok\n" {
			t.Fatalf("sandbox %d: %q", i, out)
		}
		if err := sb.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
	}
	quotas := b.WorkspaceBounded()
	warnings := strings.Count(logs.String(), "does not support workspace size limits")
	switch {
	case quotas && warnings != 0:
		t.Fatalf("bounded, yet warned:\n%s", logs.String())
	case !quotas && warnings != 1:
		// The engine refused the bound: said once, not tried again.
		t.Fatalf("the engine refused the bound; want one warning, got %d:\n%s", warnings, logs.String())
	}
	t.Logf("this engine supports workspace quotas: %v", quotas)

	unbounded := newBackend(t, dockersandbox.Options{Image: testImage(), WorkspaceBytes: -1})
	if unbounded.WorkspaceBounded() {
		t.Fatal("WorkspaceBytes -1 still bounds the workspace")
	}
}
