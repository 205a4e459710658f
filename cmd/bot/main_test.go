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
	bin := botBinary(t)
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
	for _, want := range []string{"[main] agent:", "hi from the terminal", "first — idle on local"} {
		if !strings.Contains(out, want) {
			t.Fatalf("first run: want %q in:\n%s", want, out)
		}
	}
	out = run("/status\n/list\n/quit\n")
	if !strings.Contains(out, "turn 1, 0 queued") || !strings.Contains(out, "first — ") {
		t.Fatalf("second run does not find the session of the first:\n%s", out)
	}
	if log, err := os.ReadFile(filepath.Join(state, "bot.log")); err != nil || len(log) == 0 {
		t.Fatalf("no bot.log: %v", err)
	}
}

// TestSwitchToDocker is the first thing a new user tries after `make run`:
// a message on the local backend, then `/switch docker`. The session must
// move into the full sandbox image that scripts/setup.sh builds
// (scripts/build-sandbox-image.sh), with its workspace, and the tools a
// coding agent needs must run there as the sandbox user.
func TestSwitchToDocker(t *testing.T) {
	temporal, err := devserver.FindBinary(os.Getenv("AGENTBOT_TEMPORAL_BIN"))
	if err != nil {
		t.Fatal(err)
	}
	const image = "agentbot-sandbox:latest"
	if out, err := exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", image).CombinedOutput(); err != nil {
		t.Fatalf("the full sandbox image is missing (scripts/setup.sh builds it with scripts/build-sandbox-image.sh): %v\n%s", err, out)
	}
	bin := botBinary(t)
	state := t.TempDir()
	started := time.Now()
	t.Cleanup(func() { removeSandboxes(t, image, started) })
	run := func(input string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin)
		// Nothing configured but the offline model: the defaults of make run.
		cmd.Env = []string{
			"HOME=" + state, "PATH=" + os.Getenv("PATH"), "USER=tester",
			"AGENTBOT_STATE_DIR=" + state, "AGENTBOT_TEMPORAL_BIN=" + temporal,
			"AGENTBOT_TEMPORAL_UI_PORT=-1", "OPENAI_BASE_URL=fake",
		}
		cmd.Stdin = strings.NewReader(input)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("bot: %v\n%s", err, out.String())
		}
		return out.String()
	}
	out := run("write: notes.txt <<< written on local\n/switch docker\n" +
		"sh: cat notes.txt; id -u; git --version; python3 --version; pwd\n/quit\n")
	if strings.Contains(out, "backend docker is not available") {
		t.Fatalf("the docker backend is not available on a fresh set-up:\n%s", out)
	}
	for _, want := range []string{"written on local", "1000", "git version 2.", "Python 3.", "/workspace"} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in:\n%s", want, out)
		}
	}
	if out := run("/status\n/destroy\n/quit\n"); !strings.Contains(out, " on docker") {
		t.Errorf("the session is not on docker:\n%s", out)
	}
}

// removeSandboxes removes the sandbox containers of image made since the
// test started, should the session's own destroy not have.
func removeSandboxes(t *testing.T, image string, since time.Time) {
	out, err := exec.Command("docker", "ps", "--all", "--no-trunc",
		"--filter", "label=dev.agentbot.sandbox", "--filter", "label=dev.agentbot.image="+image,
		"--format", "{{.ID}} {{.CreatedAt}}").Output()
	if err != nil {
		t.Errorf("listing sandboxes: %v", err)
		return
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		id, created, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		at, err := time.Parse("2006-01-02 15:04:05 -0700 MST", created)
		if err != nil || at.Before(since.Add(-time.Second)) {
			continue
		}
		t.Logf("removing sandbox %.12s left by the test", id)
		_ = exec.Command("docker", "rm", "--force", "--volumes", id).Run()
	}
}

// TestSwitchToMissingImage: when the sandbox image is missing, the start
// names the docker backend as unavailable with the command that builds
// the image, and /switch docker says the same instead of failing later.
func TestSwitchToMissingImage(t *testing.T) {
	temporal, err := devserver.FindBinary(os.Getenv("AGENTBOT_TEMPORAL_BIN"))
	if err != nil {
		t.Fatal(err)
	}
	bin := botBinary(t)
	state := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = []string{
		"HOME=" + state, "PATH=" + os.Getenv("PATH"), "USER=tester",
		"AGENTBOT_STATE_DIR=" + state, "AGENTBOT_TEMPORAL_BIN=" + temporal,
		"AGENTBOT_TEMPORAL_UI_PORT=-1", "OPENAI_BASE_URL=fake",
		"AGENTBOT_DOCKER_IMAGE=agentbot-sandbox:never-built-" + filepath.Base(state),
	}
	cmd.Stdin = strings.NewReader("hello\n/switch docker\n/status\n/quit\n")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("bot: %v\n%s", err, out.String())
	}
	start, rest, _ := strings.Cut(out.String(), "agentbot terminal")
	if !strings.Contains(start, "backend docker is not available") || !strings.Contains(start, "scripts/build-sandbox-image.sh") {
		t.Errorf("the start does not say docker is unavailable and how to build its image:\n%s", start)
	}
	if !strings.Contains(rest, "not available here") || !strings.Contains(rest, "scripts/build-sandbox-image.sh") {
		t.Errorf("/switch docker does not say why docker is unavailable:\n%s", rest)
	}
	if strings.Contains(rest, "Switching to") || !strings.Contains(rest, "on local") {
		t.Errorf("the session did not stay on local:\n%s", rest)
	}
}
