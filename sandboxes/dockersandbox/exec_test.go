package dockersandbox_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentbot/agentbot/sandboxes"
	"github.com/agentbot/agentbot/sandboxes/dockersandbox"
)

// The tests of this file are about how Exec runs commands: through a
// long-lived exec server of the container where it can, else through a
// docker exec of its own (an image without setsid, an environment name a
// shell cannot export, a very long command). The engine's requests are
// recorded (recordingEngine) to tell the two apart: a command that goes
// through a warm server sends none.

// execRequests runs cmd in sb and returns the API requests it took.
func execRequests(t *testing.T, sb *sandboxes.Sandbox, requests func() []string, req sandboxes.ExecRequest) (sandboxes.ExecResult, []string) {
	t.Helper()
	n := len(requests())
	res, err := sb.Exec(context.Background(), req)
	if err != nil {
		t.Fatalf("exec %q: %v", req.Command, err)
	}
	return res, requests()[n:]
}

// TestDockerExecRoundTrips: once a sandbox has run a command, the next
// ones cost the engine no API request at all, not even one per command to
// learn its exit code. (Before the exec server each took three or four:
// create, start, and one or two inspections.)
func TestDockerExecRoundTrips(t *testing.T) {
	host, requests := recordingEngine(t)
	b := newBackend(t, dockersandbox.Options{Host: host})
	sb := create(t, registry(t, b), sandboxes.Spec{Env: map[string]string{"SPEC": "spec"}})
	_, first := execRequests(t, sb, requests, sandboxes.ExecRequest{Command: "true"})
	if len(asked(first, "/exec")) == 0 {
		t.Errorf("the first command made no exec request: %q", first)
	}
	for _, tc := range []struct {
		name string
		req  sandboxes.ExecRequest
		code int
		out  string
	}{
		{"true", sandboxes.ExecRequest{Command: "true"}, 0, ""},
		{"exit code", sandboxes.ExecRequest{Command: "echo out; exit 3"}, 3, "out\n"},
		{"env", sandboxes.ExecRequest{Command: `printf '%s|%s' "$SPEC" "$REQ"`, Env: map[string]string{"REQ": "a'b\nc"}}, 0, "spec|a'b\nc"},
		{"killed by a signal", sandboxes.ExecRequest{Command: "kill -9 $$"}, 137, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, asked := execRequests(t, sb, requests, tc.req)
			if res.ExitCode != tc.code || res.Stdout.String() != tc.out {
				t.Errorf("exit code %d, stdout %q; want %d, %q", res.ExitCode, res.Stdout.String(), tc.code, tc.out)
			}
			if len(asked) != 0 {
				t.Errorf("a command after the first made API requests %q, want none", asked)
			}
		})
	}
}

// TestDockerExecServerLikeDockerExec runs the same probe through the exec
// server and through docker exec (in an image without setsid, which cannot
// have a server): the command must not be able to tell them apart, from
// its environment and arguments to its signal dispositions, open files
// and place in its session.
func TestDockerExecServerLikeDockerExec(t *testing.T) {
	noSetsid := buildImage(t, "ARG BASE\nFROM $BASE\nRUN rm /bin/setsid\n")
	host, requests := recordingEngine(t)
	b := newBackend(t, dockersandbox.Options{Host: host})
	r := registry(t, b)
	spec := sandboxes.Spec{Env: map[string]string{"SPEC": "s p"}}
	server := create(t, r, spec)
	spec.Image = noSetsid
	classic := create(t, r, spec)
	sh(t, server, "mkdir -p sub/dir")
	sh(t, classic, "mkdir -p sub/dir")

	// The session and process group of the command's shell are its
	// parent's, the wrapper's (1 would mean it leads them). The shell's
	// descriptors are listed by a child writing to a file, not into a
	// pipe: while a pipeline starts the shell holds the pipe's end for a
	// moment, and a listing that raced with it failed now and then.
	const probe = `env | sort; echo "0=$0 #=$#"
grep -E '^(Sig|Umask|Uid|Gid|Groups|NoNewPrivs|Cap)' /proc/$$/status
(ls -l /proc/$$/fd >/tmp/fds.$$); sed -n 's/.*[0-9] \([0-9]* ->\)/\1/p' /tmp/fds.$$; rm -f /tmp/fds.$$
read -r _ _ _ ppid pgrp sid _ </proc/$$/stat
echo "leads pgrp $(( pgrp == $$ )) session $(( sid == $$ )) parent leads $(( sid == ppid ))"
pwd; umask; ulimit -n; cat /proc/$$/oom_score_adj; echo err >&2; exit 5`
	// What differs between the two sandboxes: the marker (their IDs),
	// and the pipes.
	differ := regexp.MustCompile(`pipe:\[\d+\]|(?m)^` + sandboxes.MarkerEnv + `=.*$`)
	for _, dir := range []string{"", "sub/dir"} {
		req := sandboxes.ExecRequest{Command: probe, Dir: dir, Env: map[string]string{"REQ": "a'b\nc $HOME"}}
		sh(t, server, "true") // a warm server
		want, classicAsked := execRequests(t, classic, requests, req)
		got, serverAsked := execRequests(t, server, requests, req)
		if len(asked(classicAsked, "/exec")) == 0 {
			t.Fatalf("the image without setsid ran a command without a docker exec of its own: %q", classicAsked)
		}
		if len(asked(serverAsked, "/exec")) != 0 {
			t.Fatalf("the test image ran a command through docker exec, not the server: %q", serverAsked)
		}
		wantOut := differ.ReplaceAllString(want.Stdout.String(), "...")
		gotOut := differ.ReplaceAllString(got.Stdout.String(), "...")
		if gotOut != wantOut || got.Stderr.String() != want.Stderr.String() || got.ExitCode != want.ExitCode {
			t.Errorf("Dir %q: through the server:\n%s%s(exit %d)\nthrough docker exec:\n%s%s(exit %d)", dir,
				gotOut, got.Stderr.String(), got.ExitCode, wantOut, want.Stderr.String(), want.ExitCode)
		}
	}
}

// TestDockerExecLeftovers: a command's output is the server's, so what a
// command leaves behind must never write into the output of a later one.
// A process that holds the output (in the command's process group, or in
// a session of its own) makes the server give up its place, and the output
// ends as with docker exec: when they close it, or a moment after the
// command exited. A process that writes into the server's output later,
// through /proc, retires the server as soon as it does.
func TestDockerExecLeftovers(t *testing.T) {
	host, requests := recordingEngine(t)
	b := newBackend(t, dockersandbox.Options{Host: host})
	sb := create(t, registry(t, b), sandboxes.Spec{})
	sh(t, sb, "true")
	for _, tc := range []struct {
		name, cmd string
		reused    bool // the next command goes through the same server
	}{
		{"holds stdout", `(sleep 3; echo late) & echo first`, false},
		{"holds stderr in its own session", `setsid sh -c 'sleep 3; echo late >&2' & echo first`, false},
		{"writes through /proc", `s=$(cut -d' ' -f4 /proc/$PPID/stat)
(sleep 1; echo late >/proc/$s/fd/1; echo late >/proc/$s/fd/2) >/dev/null 2>&1 </dev/null &
echo first`, false},
		// Once the daemon has moved its output (it may not have yet
		// when its parent exits, and then the server retires, to be
		// safe).
		{"leaves a quiet daemon", `sleep 30 >/dev/null 2>&1 </dev/null & p=$!
until [ /proc/$p/fd/1 -ef /dev/null ] && [ /proc/$p/fd/2 -ef /dev/null ]; do :; done
echo first`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			res, _ := execRequests(t, sb, requests, sandboxes.ExecRequest{Command: tc.cmd, Timeout: 30 * time.Second})
			if res.ExitCode != 0 || res.Stdout.String() != "first\n" || res.Stderr.String() != "" {
				t.Errorf("exit code %d, stdout %q, stderr %q; want 0, %q, none", res.ExitCode, res.Stdout.String(), res.Stderr.String(), "first\n")
			}
			if took := time.Since(start); took > 2500*time.Millisecond {
				t.Errorf("returned after %s: what the command left kept it waiting", took)
			}
			// The late writes happen, then the next command.
			time.Sleep(time.Until(start.Add(4 * time.Second)))
			res, asked := execRequests(t, sb, requests, sandboxes.ExecRequest{Command: "echo next"})
			if res.Stdout.String() != "next\n" || res.Stderr.String() != "" {
				t.Errorf("the next command printed %q and %q, want %q alone: output of the earlier one leaked in",
					res.Stdout.String(), res.Stderr.String(), "next\n")
			}
			if reused := len(asked) == 0; reused != tc.reused {
				t.Errorf("next command's requests %q: server reused %v, want %v", asked, reused, tc.reused)
			}
		})
	}
}

// TestDockerExecOutputIntact pushes long streams through the server, in
// which hex digits (of which the protocol's markers are made) keep
// arriving at the edges of the reads: every byte must come out as the
// command wrote it, and nothing else.
func TestDockerExecOutputIntact(t *testing.T) {
	_, _, sb := setup(t)
	sh(t, sb, "true")
	var out, errOut bytes.Buffer
	res, err := sb.Exec(context.Background(), sandboxes.ExecRequest{
		Command: `head -c 300000 /dev/urandom >r && od -An -vtx1 r | tr -d ' \n' >h
cat h; od -An -vtx1 r | tr -d ' \n' >&2; printf 'a'; sha256sum h >&2; exit 4`,
		Stdout: &out,
		Stderr: &errOut,
	})
	if err != nil || res.ExitCode != 4 {
		t.Fatalf("exit code %d, %v", res.ExitCode, err)
	}
	hexOut, ok := strings.CutSuffix(out.String(), "a")
	if !ok || len(hexOut) != 600000 {
		t.Fatalf("stdout has %d bytes, ending %q; want 600000 hex digits and \"a\"", out.Len(), out.String()[max(0, out.Len()-20):])
	}
	sum := sha256.Sum256([]byte(hexOut))
	if want := hexOut + hex.EncodeToString(sum[:]) + "  h\n"; errOut.String() != want {
		t.Errorf("stderr (%d bytes) is not the same hex digits and their sha256 (%d bytes)", errOut.Len(), len(want))
	}
}

// TestDockerExecFallback: commands that a server cannot take go through a
// docker exec of their own, and still work.
func TestDockerExecFallback(t *testing.T) {
	host, requests := recordingEngine(t)
	b := newBackend(t, dockersandbox.Options{Host: host})
	sb := create(t, registry(t, b), sandboxes.Spec{})
	sh(t, sb, "true")
	long := strings.Repeat("x", 70<<10)
	for _, tc := range []struct {
		name string
		req  sandboxes.ExecRequest
		out  string
	}{
		{"a name the shell cannot export", sandboxes.ExecRequest{Command: "echo ok", Env: map[string]string{"a.b": "1"}}, "ok\n"},
		{"a long command", sandboxes.ExecRequest{Command: ": " + long + "; echo ${#0}"}, "7\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, asked := execRequests(t, sb, requests, tc.req)
			if res.ExitCode != 0 || res.Stdout.String() != tc.out {
				t.Errorf("exit code %d, stdout %q, stderr %q", res.ExitCode, res.Stdout.String(), res.Stderr.String())
			}
			if len(asked) == 0 {
				t.Errorf("went through the server")
			}
		})
	}
}

// TestDockerExecServerPaused: a server frozen with its container cannot
// answer; Exec says the sandbox is stopped, and the command does not run
// once the container thaws. A server of a stopped container is not used.
func TestDockerExecServerPaused(t *testing.T) {
	_, _, sb := setup(t)
	ctx := context.Background()
	sh(t, sb, "true")
	if err := sb.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := sb.Exec(ctx, sandboxes.ExecRequest{Command: "echo ran >ran.log"})
	if !errors.Is(err, sandboxes.ErrStopped) {
		t.Errorf("exec in a paused sandbox = %v, want ErrStopped", err)
	}
	if err := sb.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // time for a late start, if any
	if got := sh(t, sb, "cat ran.log 2>/dev/null; echo end"); got != "end\n" {
		t.Errorf("after resume: %q; the command refused while paused ran later", got)
	}
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Exec(ctx, sandboxes.ExecRequest{Command: "true"}); !errors.Is(err, sandboxes.ErrStopped) {
		t.Errorf("exec in a stopped sandbox = %v, want ErrStopped", err)
	}
}
