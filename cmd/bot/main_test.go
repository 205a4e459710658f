package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbot/agentbot/internal/devserver"
)

// TestEmbeddedDefault runs the real binary with no configuration but the
// offline model: it starts its own Temporal dev server and worker, and a
// terminal chat on stdin. A second run on the same state dir finds the
// session of the first (the dev server keeps its SQLite file).
func TestEmbeddedDefault(t *testing.T) {
	temporal, err := devserver.FindBinary(os.Getenv("AGENTBOT_TEMPORAL_BIN"))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "bot")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	state := t.TempDir()
	run := func(input string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin)
		cmd.Env = []string{
			"HOME=" + state, "PATH=" + os.Getenv("PATH"), "USER=tester",
			"AGENTBOT_STATE_DIR=" + state, "AGENTBOT_TEMPORAL_BIN=" + temporal,
			"AGENTBOT_TEMPORAL_UI_PORT=-1", "OPENAI_BASE_URL=fake", "AGENTBOT_BACKENDS=local",
		}
		cmd.Stdin = strings.NewReader(input)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("bot: %v\n%s", err, out.String())
		}
		return out.String()
	}
	out := run("write: hello.txt <<< hi from the terminal\nsh: cat hello.txt\n/title first\n/status\n/quit\n")
	for _, want := range []string{"[main] agent:", "hi from the terminal", "*first* — idle on `local`"} {
		if !strings.Contains(out, want) {
			t.Fatalf("first run: want %q in:\n%s", want, out)
		}
	}
	out = run("/status\n/list\n/quit\n")
	if !strings.Contains(out, "turn 1, 0 queued") || !strings.Contains(out, "*first*") {
		t.Fatalf("second run does not find the session of the first:\n%s", out)
	}
	if log, err := os.ReadFile(filepath.Join(state, "bot.log")); err != nil || len(log) == 0 {
		t.Fatalf("no bot.log: %v", err)
	}
}
