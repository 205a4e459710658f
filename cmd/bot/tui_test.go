package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/internal/agentworker"
	"github.com/agentbot/agentbot/internal/config"
	"github.com/agentbot/agentbot/internal/devserver"
	"github.com/agentbot/agentbot/internal/testenv"
)

// tmuxScreen is the real binary on a terminal of tmux: keys go in with
// send-keys, what is on the screen comes out with capture-pane.
type tmuxScreen struct {
	t      *testing.T
	socket string
	name   string
}

// startTUI runs bin in a new tmux session of its own server (socket), on
// a terminal of 100×30, in dir, with env.
func startTUI(t *testing.T, socket, bin, dir string, env []string) *tmuxScreen {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatal("tmux is missing (scripts/setup.sh installs it):", err)
	}
	s := &tmuxScreen{t: t, socket: socket, name: fmt.Sprintf("bot%d", time.Now().UnixNano())}
	script := filepath.Join(t.TempDir(), "run.sh")
	var b strings.Builder
	b.WriteString("#!/bin/sh\ncd " + dir + " || exit 1\nenv -i")
	for _, e := range env {
		b.WriteString(" '" + e + "'")
	}
	b.WriteString(" " + bin + "\necho \"exit status $?\"\n")
	if err := os.WriteFile(script, []byte(b.String()), 0o755); err != nil {
		t.Fatal(err)
	}
	// The pane stays once the program ends, so its last screen and its
	// exit status can be read.
	s.tmux("new-session", "-d", "-s", s.name, "-x", "100", "-y", "30", script)
	s.tmux("set-option", "-t", s.name, "remain-on-exit", "on")
	t.Cleanup(func() { _ = exec.Command("tmux", "-S", s.socket, "kill-session", "-t", s.name).Run() })
	return s
}

func (s *tmuxScreen) tmux(args ...string) string {
	s.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", s.socket}, args...)...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// keys types keys: tmux key names ("Enter", "Tab", "C-c") or text.
func (s *tmuxScreen) keys(keys ...string) {
	s.t.Helper()
	s.tmux(append([]string{"send-keys", "-t", s.name}, keys...)...)
}

// text types text literally.
func (s *tmuxScreen) text(text string) {
	s.t.Helper()
	s.tmux("send-keys", "-t", s.name, "-l", text)
}

// capture saves the screen as name.txt under $AGENTBOT_TUI_CAPTURES, when
// set: docs/terminal.md shows these captures.
func (s *tmuxScreen) capture(name string) {
	s.t.Helper()
	dir := os.Getenv("AGENTBOT_TUI_CAPTURES")
	if dir == "" {
		return
	}
	var lines []string
	for _, l := range strings.Split(s.screen(), "\n") {
		lines = append(lines, strings.TrimRight(l, " "))
	}
	if err := os.WriteFile(filepath.Join(dir, name+".txt"), []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		s.t.Fatal(err)
	}
}

func (s *tmuxScreen) screen() string {
	s.t.Helper()
	return s.tmux("capture-pane", "-p", "-t", s.name)
}

// wait waits until the screen shows every one of wants, and returns it.
func (s *tmuxScreen) wait(what string, d time.Duration, wants ...string) string {
	s.t.Helper()
	deadline := time.Now().Add(d)
	for {
		scr := s.screen()
		ok := true
		for _, w := range wants {
			if !strings.Contains(scr, w) {
				ok = false
				break
			}
		}
		if ok {
			return scr
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: the screen does not show %q after %s:\n%s", what, wants, d, scr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// exited waits until the program ended and returns its exit status: as
// the script printed it or, when the screen lost that line, as tmux says
// it ("Pane is dead (status N, ...)").
func (s *tmuxScreen) exited(d time.Duration) string {
	s.t.Helper()
	deadline := time.Now().Add(d)
	for {
		scr := s.screen()
		for _, mark := range []string{"exit status ", "Pane is dead (status "} {
			if _, rest, ok := strings.Cut(scr, mark); ok {
				return strings.TrimRight(strings.Fields(rest + " ?")[0], ",")
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the program did not end within %s:\n%s", d, scr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestTUI drives the full-screen terminal UI of the real binary on a real
// terminal (tmux), with the embedded default (its own Temporal dev server
// and worker), the local sandbox and the offline model: a new session
// through the pickers, two turns with tool rows, a row expanded to its
// arguments and output, /switch through the backend picker, /fork, /title,
// /done keep, quit; then a second start resumes the session from the
// picker, with its transcript replayed and the fork under it.
func TestTUI(t *testing.T) {
	temporal, err := devserver.FindBinary(os.Getenv("AGENTBOT_TEMPORAL_BIN"))
	if err != nil {
		t.Fatal(err)
	}
	bin := botBinary(t)
	state, work := t.TempDir(), t.TempDir()
	socket := filepath.Join(t.TempDir(), "tmux.sock")
	t.Cleanup(func() { _ = exec.Command("tmux", "-S", socket, "kill-server").Run() })
	env := []string{
		"HOME=" + state, "PATH=" + os.Getenv("PATH"), "USER=tester", "TERM=xterm-256color",
		"AGENTBOT_STATE_DIR=" + state, "AGENTBOT_TEMPORAL_BIN=" + temporal,
		"AGENTBOT_TEMPORAL_UI_PORT=-1", "OPENAI_BASE_URL=fake", "AGENTBOT_BACKENDS=local",
	}
	const boot = 90 * time.Second
	s := startTUI(t, socket, bin, work, env)
	s.wait("the picker", boot, "agentbot — sessions", "+ New session", "no sessions yet")

	// A new session: the backend picker, the root (the default), a title.
	s.keys("Enter")
	s.wait("the backend picker", 10*time.Second, "New session on", "local")
	s.keys("Enter")
	s.wait("the root prompt", 10*time.Second, "Workspace root for local", "./workspace")
	s.keys("Enter")
	s.wait("the title prompt", 10*time.Second, "Title (optional)")
	s.text("tui demo")
	s.keys("Enter")
	s.wait("the new session", 30*time.Second, "tui demo", "Session tui demo on local", "idle · local")

	// Two turns, each with a tool row.
	s.text("write: notes.txt <<< written from the tui")
	s.keys("Enter")
	s.wait("the first turn", 60*time.Second, "✓ write_file: notes.txt", "wrote 20 bytes")
	s.text("sh: cat notes.txt; echo; seq 1 12")
	s.keys("Enter")
	scr := s.wait("the second turn", 60*time.Second, "✓ shell: cat notes.txt; echo; seq 1 12", "written from the tui  +12 lines", "turn 2")
	if !strings.Contains(scr, "tokens") {
		t.Fatalf("no status bar:\n%s", scr)
	}
	s.capture("session")
	if _, err := os.Stat(filepath.Join(work, "workspace", "notes.txt")); err != nil {
		t.Fatalf("the session's workspace is not ./workspace: %v", err)
	}

	// Expand the last tool row: its arguments and its whole output.
	s.keys("Tab")
	s.keys("Enter")
	s.wait("the expanded row", 20*time.Second, "arguments:", `"command": "cat notes.txt; echo; seq 1 12"`, "output:", "exit code: 0")
	s.capture("expanded")
	// Back to the input (Tab; an Escape followed at once by the next
	// keys would read as Alt+key).
	s.keys("Tab")

	// /switch through the picker: local again, onto another root.
	s.text("/swi")
	s.wait("completion", 10*time.Second, "/switch <backend> [root]")
	s.keys("Tab", "BSpace", "Enter")
	s.wait("the backend picker", 10*time.Second, "Switch this session to", "local (current)")
	s.capture("switch-picker")
	s.keys("Enter")
	s.wait("the root prompt", 10*time.Second, "Workspace root for local")
	s.text("moved")
	s.keys("Enter")
	s.wait("the switch", 60*time.Second, filepath.Join(work, "moved"))
	s.text("sh: cat notes.txt")
	s.keys("Enter")
	s.wait("the workspace came along", 60*time.Second, "turn 3")
	if _, err := os.Stat(filepath.Join(work, "moved", "notes.txt")); err != nil {
		t.Fatalf("the workspace did not move to ./moved: %v", err)
	}

	// /fork through the picker, onto a root of its own; /title.
	s.text("/fork")
	s.keys("Enter")
	s.wait("the backend picker", 10*time.Second, "Fork this session onto")
	s.keys("Enter")
	s.wait("the root prompt", 10*time.Second, "Workspace root for local")
	s.text("forked")
	s.keys("Enter")
	s.wait("the fork", 60*time.Second, "Forked into")
	s.text("/title renamed demo")
	s.keys("Enter")
	s.wait("the title", 30*time.Second, "renamed demo")

	// /done: keep it (paused), back to the picker; quit from there.
	s.text("/done")
	s.keys("Enter")
	s.wait("the question", 10*time.Second, "Keep this session?")
	s.keys("y")
	s.wait("the picker after /done", 60*time.Second, "agentbot — sessions", "renamed demo", "tui demo (fork #1)")
	s.keys("C-c")
	if status := s.exited(60 * time.Second); status != "0" {
		t.Fatalf("exit status %s:\n%s", status, s.screen())
	}

	// Again: the picker lists the session (paused) with its fork under
	// it; opening it replays the transcript.
	s = startTUI(t, socket, bin, work, env)
	s.wait("the picker again", boot, "renamed demo", "└─ tui demo (fork #1)", "paused")
	s.capture("picker")
	s.keys("Down", "Enter")
	s.wait("the transcript replayed", 30*time.Second, "you › sh: cat notes.txt", "✓ shell: cat notes.txt; echo; seq 1 12",
		"written from the tui  +12 lines", "paused · local · turn 3")
	s.keys("PageUp", "PageUp")
	s.wait("the first turn replayed", 10*time.Second, "you › write: notes.txt <<< written from the tui", "✓ write_file: notes.txt")
	s.keys("C-c")
	s.wait("the question", 10*time.Second, "Keep this session?")
	// Two Escapes at once read as Alt+Escape: one, then the other.
	s.keys("Escape")
	s.wait("the question gone", 10*time.Second, "paused · local · turn 3")
	s.keys("Escape")
	s.wait("the picker", 10*time.Second, "+ New session")

	// The fork works in the root it was given, on its own copy.
	s.keys("Down", "Down", "Enter")
	s.wait("the fork", 30*time.Second, "tui demo (fork #1)", "· local")
	s.text("sh: cat notes.txt; pwd")
	s.keys("Enter")
	s.wait("the fork's first turn", 60*time.Second, "written from the tui", filepath.Join(work, "forked"))
	if _, err := os.Stat(filepath.Join(work, "forked", "notes.txt")); err != nil {
		t.Fatalf("the fork's workspace is not ./forked: %v", err)
	}
	s.keys("Escape")
	s.wait("the picker", 10*time.Second, "+ New session")
	s.keys("C-c")
	if status := s.exited(60 * time.Second); status != "0" {
		t.Fatalf("exit status %s:\n%s", status, s.screen())
	}
}

// TestTerminalRemote runs the terminal against a remote Temporal
// (TEMPORAL_ADDRESS) whose worker runs elsewhere (here: in the test, as
// cmd/worker would, with no terminal of its own): the full-screen UI shows
// the tool rows and the answer by asking the session, and expands a row
// from the blob store the two share; the line chat (--plain) prints the
// answer.
func TestTerminalRemote(t *testing.T) {
	ctx := context.Background()
	srv, err := testenv.StartTemporal(ctx, testenv.TemporalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	tc, err := client.Dial(client.Options{HostPort: srv.FrontendHostPort(), Logger: testenv.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	blobs := "file://" + t.TempDir()
	cfg, err := config.Load([]string{
		"OPENAI_BASE_URL=fake", "AGENTBOT_BACKENDS=local",
		"AGENTBOT_LOCAL_DIR=" + t.TempDir(), "AGENTBOT_STATE_DIR=" + t.TempDir(), "AGENTBOT_BLOB_URL=" + blobs,
	})
	if err != nil {
		t.Fatal(err)
	}
	w, err := agentworker.New(ctx, tc, agentworker.Options{Config: cfg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)

	bin := botBinary(t)
	state := t.TempDir()
	env := []string{
		"HOME=" + state, "PATH=" + os.Getenv("PATH"), "USER=tester", "TERM=xterm-256color",
		"AGENTBOT_STATE_DIR=" + state, "TEMPORAL_ADDRESS=" + srv.FrontendHostPort(),
		"OPENAI_BASE_URL=fake", "AGENTBOT_BACKENDS=local", "AGENTBOT_BLOB_URL=" + blobs,
	}
	socket := filepath.Join(t.TempDir(), "tmux.sock")
	t.Cleanup(func() { _ = exec.Command("tmux", "-S", socket, "kill-server").Run() })
	s := startTUI(t, socket, bin, t.TempDir(), env)
	s.wait("the picker", 60*time.Second, "+ New session")
	s.keys("Enter")
	s.wait("the backend picker", 10*time.Second, "New session on")
	s.keys("Enter")
	s.wait("the root prompt", 10*time.Second, "Workspace root for local")
	// The worker's machine: the root must exist there (here it is the
	// same machine, so the test makes it; the UI does not touch a remote
	// worker's disk).
	root := t.TempDir()
	s.text(root)
	s.keys("Enter")
	s.wait("the title prompt", 10*time.Second, "Title (optional)")
	s.text("remote")
	s.keys("Enter")
	s.wait("the new session", 30*time.Second, "Session remote on local")
	s.text("sh: echo from-the-remote-worker; seq 1 3")
	s.keys("Enter")
	s.wait("the answer, polled", 60*time.Second, "✓ shell: echo from-the-remote-worker", "from-the-remote-worker  +3 lines", "done.", "idle · local · turn 1")
	s.keys("Tab")
	s.keys("Enter")
	s.wait("the expanded row, from the shared blob store", 20*time.Second, "arguments:", "output:", "exit code: 0")
	s.keys("Tab")
	s.keys("C-c")
	s.wait("the question", 10*time.Second, "Keep this session?")
	s.keys("y")
	s.wait("the picker", 30*time.Second, "remote", "paused")
	s.keys("C-c")
	if status := s.exited(60 * time.Second); status != "0" {
		t.Fatalf("exit status %s:\n%s", status, s.screen())
	}

	// The line chat, on the same session.
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, bin, "--plain")
	cmd.Env = env
	cmd.Stdin = strings.NewReader("/use " + firstThread(t, tc) + "\nsh: echo plain-remote\n/quit\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bot --plain: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "plain-remote") || !strings.Contains(string(out), "agent:") {
		t.Fatalf("the line chat does not print the answer:\n%s", out)
	}
}

// firstThread is the name of the one terminal session on tc.
func firstThread(t *testing.T, tc client.Client) string {
	t.Helper()
	entries, err := agentflow.NewClient(tc).List(context.Background(), "term:main")
	if err != nil || len(entries) != 1 {
		t.Fatalf("sessions: %+v %v", entries, err)
	}
	return strings.TrimPrefix(entries[0].ThreadKey, "term:")
}
