package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentbot/agentbot/internal/devserver"
)

// TestLineMode runs the real binary in line mode, the way `make run <
// script.txt` does (stdin not a terminal), with the offline model: two
// turns with tool calls, a Markdown message, /title, /fork, /list and
// /status. Everything it prints is plain text — no *bold*, no backticks,
// no <thread:…> links — and /list shows the fork indented under its
// parent. A second run on the same state dir, with --plain (line mode even
// on a terminal), lists both sessions as the same tree and reaches the
// fork by the name /list gives it.
func TestLineMode(t *testing.T) {
	temporal, err := devserver.FindBinary(os.Getenv("AGENTBOT_TEMPORAL_BIN"))
	if err != nil {
		t.Fatal(err)
	}
	bin := botBinary(t)
	state := t.TempDir()
	run := func(script string, args ...string) string {
		t.Helper()
		file := filepath.Join(t.TempDir(), "script.txt")
		if err := os.WriteFile(file, []byte(script), 0o600); err != nil {
			t.Fatal(err)
		}
		in, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = []string{
			"HOME=" + state, "PATH=" + os.Getenv("PATH"), "USER=tester",
			"AGENTBOT_STATE_DIR=" + state, "AGENTBOT_TEMPORAL_BIN=" + temporal,
			"AGENTBOT_TEMPORAL_UI_PORT=-1", "OPENAI_BASE_URL=fake", "AGENTBOT_BACKENDS=local",
		}
		cmd.Stdin = in
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("bot %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
		out := stdout.String()
		noMarkup(t, out)
		return out
	}

	out := run(strings.Join([]string{
		"write: notes.txt <<< hello from line mode",
		"sh: cat notes.txt",
		"/title first",
		"**Plan**: read [the guide](https://example.com/a_b) and `main.go`, keep snake_case_name and 2*3*4",
		"/fork the fork",
		// The session forks after the command returns; a turn after it
		// and a command that waits for that turn (/model) let /list see
		// the fork.
		"sh: echo after the fork",
		"/model",
		"/list",
		"/status",
		// Progress lines print a second apart at most (the session
		// paces edits), after the answers of a script this fast: a last
		// turn of two seconds lets them out before /quit, which waits
		// for it.
		"sleep: 2",
		"/quit",
	}, "\n") + "\n")
	for _, want := range []string{
		"[main] · write_file: notes.txt (done: 20 bytes)",
		"[main] · shell: cat notes.txt (done: exit 0",
		"[main] agent: done.\n[write_file] wrote 20 bytes to notes.txt",
		"[shell] exit code: 0\nstdout:\nhello from line mode\n",
		"Renamed to first.",
		"[main] agent: echo: Plan: read the guide (https://example.com/a_b) and main.go, keep snake_case_name and 2*3*4",
		"[main] * Forked into 'the-fork-",
		`* Forked from 'main' ("first") onto local`,
		"stdout:\nafter the fork\n",
		"Sessions in this channel\n'main' first — idle on local, owner @tester, created ",
		"first — idle on local",
		", 1 forks",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("first run: want %q in:\n%s", want, out)
		}
	}
	fork := regexp.MustCompile(`(?m)^└─ '(the-fork-[0-9a-f]{6})' the fork — idle on local, owner @tester, created \d{4}-\d\d-\d\d, active just now$`).FindStringSubmatch(out)
	if fork == nil {
		t.Fatalf("first run: /list does not show the fork under its parent:\n%s", out)
	}

	out = run("/list\n/use "+fork[1]+"\n/status\n/quit\n", "--plain")
	tree := regexp.MustCompile(`(?m)^Sessions in this channel\n'main' first — idle on local, owner @tester, created \S+, active .+\n└─ '` +
		fork[1] + `' the fork — idle on local, owner @tester, created \S+, active .+$`)
	if !tree.MatchString(out) {
		t.Errorf("second run: /list does not show both sessions as a tree:\n%s", out)
	}
	for _, want := range []string{"the fork — idle on local", "forked from 'main'"} {
		if !strings.Contains(out, want) {
			t.Errorf("second run: /status of the fork: want %q in:\n%s", want, out)
		}
	}
}

// markup is chat markup that line mode must not print: *bold* or **bold**
// (stars around words, not inside one: 2*3*4 is not markup), code spans,
// thread links, mentions, Markdown links.
var markup = regexp.MustCompile("(?:^|[^\\w*/])\\*\\*?[^\\s*](?:[^*\\n]*[^\\s*])?\\*|`|<thread:|<@|\\]\\(")

func noMarkup(t *testing.T, out string) {
	t.Helper()
	if m := markup.FindString(out); m != "" {
		t.Errorf("line mode printed chat markup %q:\n%s", m, out)
	}
}
