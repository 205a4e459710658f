package localsandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbot/agentbot/sandboxes"
)

// run runs cmd in inst and returns its exit code and output.
func run(t *testing.T, ctx context.Context, inst *instance, req sandboxes.ExecRequest) (int, string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code, err := inst.Exec(ctx, req, &stdout, &stderr)
	return code, stdout.String(), stderr.String(), err
}

func TestLocalExecEnv(t *testing.T) {
	secret := make([]byte, 8)
	rand.Read(secret)
	secretVal := "hunter2-" + hex.EncodeToString(secret)
	t.Setenv("AGENTBOT_LOCAL_TEST_SECRET", secretVal)

	b := newBackend(t)
	inst := create(t, b, sandboxes.Spec{Env: map[string]string{
		"FROM_SPEC": "spec",
		"BOTH":      "spec",
		"LANG":      "en_US.UTF-8", // the sandbox's Env wins over the defaults
		MarkerEnv:   "from-the-spec",
	}})
	code, out, stderr, err := run(t, t.Context(), inst, sandboxes.ExecRequest{
		Command: "env",
		Env:     map[string]string{"FROM_REQ": "req", "BOTH": "req", MarkerEnv: "from-the-request"},
	})
	if err != nil || code != 0 {
		t.Fatalf("env: %d, %v, %s", code, err, stderr)
	}
	if strings.Contains(out, "AGENTBOT_LOCAL_TEST_SECRET") || strings.Contains(out, secretVal) {
		t.Fatalf("the host's secret leaked into the command:\n%s", out)
	}
	got := make(map[string]string)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	want := map[string]string{
		"PATH":      defaultPath,
		"HOME":      inst.State().Root,
		"LANG":      "en_US.UTF-8",
		"TERM":      "dumb",
		"FROM_SPEC": "spec",
		"FROM_REQ":  "req",
		"BOTH":      "req",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s=%q, want %q", k, got[k], v)
		}
	}
	// The marker is ours, whatever the environments say, and new for
	// every Exec.
	markRE := regexp.MustCompile("^" + regexp.QuoteMeta(inst.State().ID) + "/[0-9a-f]{16}$")
	if !markRE.MatchString(got[MarkerEnv]) {
		t.Errorf("%s=%q, want the sandbox's ID, a slash and a nonce", MarkerEnv, got[MarkerEnv])
	}
	_, again, _, err := run(t, t.Context(), inst, sandboxes.ExecRequest{Command: "printf %s \"$" + MarkerEnv + "\""})
	if err != nil || !markRE.MatchString(again) || again == got[MarkerEnv] {
		t.Errorf("a second Exec has %s=%q (%v), want another nonce than %q", MarkerEnv, again, err, got[MarkerEnv])
	}
	want[MarkerEnv] = got[MarkerEnv]
	// What the shell sets itself is fine; nothing else may be there.
	shellOwn := map[string]bool{"PWD": true, "OLDPWD": true, "SHLVL": true, "_": true}
	for k := range got {
		if _, ok := want[k]; !ok && !shellOwn[k] {
			t.Errorf("unexpected variable %s=%q in the command's environment", k, got[k])
		}
	}

	t.Run("defaults", func(t *testing.T) {
		inst := create(t, b, sandboxes.Spec{})
		_, out, _, err := run(t, t.Context(), inst, sandboxes.ExecRequest{Command: `printf '%s|%s' "$LANG" "$TERM"`})
		if err != nil || out != "C.UTF-8|dumb" {
			t.Fatalf("LANG|TERM = %q, %v; want C.UTF-8|dumb", out, err)
		}
	})
}

// The child process of TestLocalExecParentEnviron: set, they give it the
// secret to hold in its environment block and the file to write the
// commands' output to.
const (
	parentSecretEnv = "AGENTBOT_LOCALSANDBOX_TEST_PARENT_SECRET"
	parentOutEnv    = "AGENTBOT_LOCALSANDBOX_TEST_PARENT_OUT"
)

// parentCommands read the environment block of a command's parent process,
// as a user of the sandbox would look for the keys of the program running
// it.
var parentCommands = []string{
	`cat /proc/$PPID/environ`,
	`tr '\0' '\n' </proc/$PPID/environ`,
}

// TestLocalExecParentEnviron runs commands that read their parent's
// /proc/<pid>/environ in a child process that was started with a secret in
// its environment, as a worker started with its API keys is (t.Setenv
// cannot stand in: it changes the Go runtime's copy of the environment, not
// the block /proc shows). The parent of a command must be a process started
// with the sandbox's environment only, never the program running the
// backend. (That program's own environment block is cmd/*'s to keep clean:
// see internal/secretenv.)
func TestLocalExecParentEnviron(t *testing.T) {
	if out := os.Getenv(parentOutEnv); out != "" {
		parentEnvironChild(t, out)
		return
	}
	secret := "sk-parent-" + randHex(12)
	out := filepath.Join(t.TempDir(), "out")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestLocalExecParentEnviron$", "-test.count=1")
	cmd.Env = append(os.Environ(), parentSecretEnv+"="+secret, parentOutEnv+"="+out)
	cmd.WaitDelay = 5 * time.Second
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, b)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	outputs := strings.Split(string(data), "\x00--next--\x00")
	if len(outputs) != len(parentCommands) {
		t.Fatalf("%d outputs for %d commands:\n%q", len(outputs), len(parentCommands), data)
	}
	for i, got := range outputs {
		if strings.Contains(got, secret) || strings.Contains(got, parentSecretEnv) {
			t.Errorf("%s shows the secret of the process running the backend (%d bytes read)", parentCommands[i], len(got))
		}
		// The parent was read: it holds the sandbox's environment.
		if !strings.Contains(got, MarkerEnv+"=") || !strings.Contains(got, "PATH="+defaultPath) {
			t.Errorf("%s did not read a parent with the sandbox's environment: %q…", parentCommands[i], got[:min(len(got), 200)])
		}
	}
}

// parentEnvironChild runs parentCommands in a new sandbox and writes their
// outputs to out, separated.
func parentEnvironChild(t *testing.T, out string) {
	b := newBackend(t)
	inst := create(t, b, sandboxes.Spec{})
	var all []string
	for _, c := range parentCommands {
		code, stdout, stderr, err := run(t, t.Context(), inst, sandboxes.ExecRequest{Command: c})
		if err != nil || code != 0 {
			t.Fatalf("%s: %d, %v, %s", c, code, err, stderr)
		}
		all = append(all, stdout)
	}
	if err := os.WriteFile(out, []byte(strings.Join(all, "\x00--next--\x00")), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestLocalExecExitCodes(t *testing.T) {
	b := newBackend(t)
	inst := create(t, b, sandboxes.Spec{})
	for _, tc := range []struct {
		cmd  string
		want int
	}{
		{"true", 0},
		{"exit 3", 3},
		{"kill -TERM $$", 128 + int(syscall.SIGTERM)},
		{"kill -KILL $$", 128 + int(syscall.SIGKILL)}, // not ours: a plain exit status
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			code, _, _, err := run(t, t.Context(), inst, sandboxes.ExecRequest{Command: tc.cmd})
			if err != nil || code != tc.want {
				t.Fatalf("got %d, %v; want %d", code, err, tc.want)
			}
		})
	}
}

func TestLocalExecDir(t *testing.T) {
	b := newBackend(t)
	inst := create(t, b, sandboxes.Spec{})
	root := inst.State().Root
	realRoot, _ := filepath.EvalSymlinks(root)
	writeTestFile(t, filepath.Join(root, "sub/file"), "x", 0o644)
	os.Symlink("sub", filepath.Join(root, "link-in"))
	os.Symlink(os.TempDir(), filepath.Join(root, "link-out"))
	os.Symlink("../..", filepath.Join(root, "link-up"))
	for _, tc := range []struct {
		dir, want, wantErr string
		invalid            bool
	}{
		{dir: "", want: realRoot},
		{dir: "sub", want: filepath.Join(realRoot, "sub")},
		{dir: "link-in", want: filepath.Join(realRoot, "sub")},
		{dir: "link-out", wantErr: "leads outside the workspace", invalid: true},
		{dir: "link-up", wantErr: "leads outside the workspace", invalid: true},
		{dir: "sub/file", wantErr: "is not a directory", invalid: true},
		{dir: "missing", wantErr: "no such file or directory"},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			code, out, _, err := run(t, t.Context(), inst, sandboxes.ExecRequest{Command: "pwd -P", Dir: tc.dir})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error saying %q", err, tc.wantErr)
				}
				if tc.invalid && !errors.Is(err, sandboxes.ErrInvalid) {
					t.Fatalf("got %v, want ErrInvalid", err)
				}
				return
			}
			if err != nil || code != 0 || strings.TrimSpace(out) != tc.want {
				t.Fatalf("got %q, %d, %v; want %q", out, code, err, tc.want)
			}
		})
	}
}

// gone reports whether process pid has ended; a zombie has (it was killed,
// only its parent has not reaped it yet).
func gone(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) != nil
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !gone(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("process %d is still alive", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func parsePID(t *testing.T, out string) int {
	t.Helper()
	line, _, _ := strings.Cut(out, "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		t.Fatalf("the command was to print a process ID first, printed %q", out)
	}
	t.Cleanup(func() {
		if !gone(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return pid
}

func TestLocalExecTimeoutKillsGrandchild(t *testing.T) {
	b := newBackend(t)
	inst := create(t, b, sandboxes.Spec{})
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	code, out, _, err := run(t, ctx, inst, sandboxes.ExecRequest{Command: "sleep 300 & echo $!; wait"})
	if !errors.Is(err, context.DeadlineExceeded) || code != -1 {
		t.Fatalf("got %d, %v; want -1 and the context's error", code, err)
	}
	waitGone(t, parsePID(t, out))
}

// lineWriter sends the first line written to it.
type lineWriter struct {
	mu    sync.Mutex
	buf   []byte
	first chan string
}

func newLineWriter() *lineWriter { return &lineWriter{first: make(chan string, 1)} }

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.buf == nil || !bytes.Contains(w.buf, []byte("\n")) {
		w.buf = append(w.buf, p...)
		if i := bytes.IndexByte(w.buf, '\n'); i >= 0 {
			w.first <- string(w.buf[:i+1])
		}
	}
	return len(p), nil
}

func TestLocalStop(t *testing.T) {
	ctx := t.Context()
	b := newBackend(t)
	inst := create(t, b, sandboxes.Spec{})
	st := inst.State()

	// A command started through one instance, and a job another left
	// running in the background.
	pidLine := newLineWriter()
	done := make(chan error, 1)
	go func() {
		_, err := inst.Exec(ctx, sandboxes.ExecRequest{Command: "sleep 300 & echo $!; wait"}, pidLine, io.Discard)
		done <- err
	}()
	var running int
	select {
	case line := <-pidLine.first:
		running = parsePID(t, line)
	case err := <-done:
		t.Fatalf("the command ended early: %v", err)
	}
	code, out, _, err := run(t, ctx, inst, sandboxes.ExecRequest{Command: "sleep 300 >/dev/null 2>&1 & echo $!"})
	if err != nil || code != 0 {
		t.Fatalf("starting a background job: %d, %v", code, err)
	}
	background := parsePID(t, out)
	if gone(background) {
		t.Fatal("the background job did not outlive its command")
	}

	// Stop through another instance of the same sandbox, as an activity
	// that attached would.
	other, err := b.Attach(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, sandboxes.ErrStopped) {
			t.Errorf("the running command ended with %v, want ErrStopped", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the running command was not killed by Stop")
	}
	waitGone(t, running)
	waitGone(t, background)

	if err := other.Stop(ctx); err != nil {
		t.Errorf("stopping a stopped sandbox: %v", err)
	}
	if _, _, _, err := run(t, ctx, inst, sandboxes.ExecRequest{Command: "true"}); !errors.Is(err, sandboxes.ErrStopped) {
		t.Errorf("exec in a stopped sandbox: got %v, want ErrStopped", err)
	}
	if _, err := inst.ReadFile(ctx, "x"); !errors.Is(err, sandboxes.ErrStopped) {
		t.Errorf("read in a stopped sandbox: got %v, want ErrStopped", err)
	}

	again, err := b.Attach(ctx, st)
	if err != nil {
		t.Fatalf("attach after stop: %v", err)
	}
	if code, out, _, err := run(t, ctx, again.(*instance), sandboxes.ExecRequest{Command: "echo alive"}); err != nil || code != 0 || out != "alive\n" {
		t.Fatalf("exec after attach: %q, %d, %v", out, code, err)
	}
}

// TestLocalExecBackgroundHoldsPipes checks that a job left running with the
// command's output open neither hangs Exec nor dies of a closed pipe.
func TestLocalExecBackgroundHoldsPipes(t *testing.T) {
	ctx := t.Context()
	b := newBackend(t)
	inst := create(t, b, sandboxes.Spec{})
	code, _, stderr, err := run(t, ctx, inst, sandboxes.ExecRequest{
		Command: "(while :; do echo tick; sleep 0.1; done) & echo $! >&2",
	})
	if err != nil || code != 0 {
		t.Fatalf("got %d, %v", code, err)
	}
	pid := parsePID(t, stderr)
	// Exec has returned: the job now writes into a pipe nobody copies.
	time.Sleep(500 * time.Millisecond)
	if gone(pid) {
		t.Fatal("the background job died once Exec stopped copying its output")
	}
	if err := inst.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
}
