package sandboxtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbot/agentbot/sandboxes"
)

func (s *suite) testExitCodes(t *testing.T) {
	ctx := testContext(t)
	sb := s.newSandbox(t)
	for _, tc := range []struct {
		cmd  string
		want int
	}{
		{"true", 0},
		{"false", 1},
		{"exit 42", 42},
		{"exit 3", 3},
		{"echo partial; exit 7", 7},
		{"sh -c 'exit 9'", 9},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			res, err := sb.Exec(ctx, sandboxes.ExecRequest{Command: tc.cmd})
			if err != nil {
				t.Fatalf("a non-zero exit is not an error, got %v", err)
			}
			if res.ExitCode != tc.want || res.TimedOut {
				t.Fatalf("exit code %d (timed out: %v), want %d", res.ExitCode, res.TimedOut, tc.want)
			}
		})
	}
	t.Run("empty command", func(t *testing.T) {
		if _, err := sb.Exec(ctx, sandboxes.ExecRequest{Command: "  "}); !errors.Is(err, sandboxes.ErrInvalid) {
			t.Fatalf("got %v, want ErrInvalid", err)
		}
	})
}

func (s *suite) testStdoutStderr(t *testing.T) {
	ctx := testContext(t)
	sb := s.newSandbox(t)
	var fullOut, fullErr bytes.Buffer
	res, err := sb.Exec(ctx, sandboxes.ExecRequest{
		Command: `echo to-stdout; echo to-stderr >&2; printf 'no newline'; printf 'err2' 1>&2`,
		Stdout:  &fullOut,
		Stderr:  &fullErr,
	})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: exit code %d, %v", res.ExitCode, err)
	}
	if got, want := res.Stdout.String(), "to-stdout\nno newline"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
	if got, want := res.Stderr.String(), "to-stderr\nerr2"; got != want {
		t.Errorf("stderr %q, want %q", got, want)
	}
	if fullOut.String() != res.Stdout.String() || fullErr.String() != res.Stderr.String() {
		t.Errorf("ExecRequest.Stdout/Stderr got %q and %q, want the same as the result", fullOut.String(), fullErr.String())
	}
	if res.Stdout.Truncated() || res.Stderr.Truncated() {
		t.Errorf("short output reported truncated: %+v %+v", res.Stdout, res.Stderr)
	}

	// Binary output comes through unchanged.
	res, err = sb.Exec(ctx, sandboxes.ExecRequest{Command: `printf '\000\001\377\r\n'`})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec printf: exit code %d, %v", res.ExitCode, err)
	}
	if got, want := res.Stdout.Head, []byte{0, 1, 0xff, '\r', '\n'}; !bytes.Equal(got, want) {
		t.Errorf("binary stdout %q, want %q", got, want)
	}

	// Stdin is empty, not the host's: a command reading it ends at once.
	res, err = sb.Exec(ctx, sandboxes.ExecRequest{Command: `cat; echo done`, Timeout: killBound})
	if err != nil || res.Stdout.String() != "done\n" {
		t.Errorf("a command reading stdin: stdout %q, %v; want \"done\\n\" (stdin must be empty)", res.Stdout.String(), err)
	}
}

func (s *suite) testDir(t *testing.T) {
	ctx := testContext(t)
	sb := s.newSandbox(t)
	writeFile(t, ctx, sb, "sub/dir/here.txt", []byte("here\n"), 0o644)
	root := strings.TrimSpace(sh(t, ctx, sb, "pwd -P"))

	res, err := sb.Exec(ctx, sandboxes.ExecRequest{Command: "pwd -P; cat here.txt", Dir: "sub/dir"})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec in sub/dir: exit code %d, %v, stderr %q", res.ExitCode, err, res.Stderr.String())
	}
	if got, want := res.Stdout.String(), root+"/sub/dir\nhere\n"; got != want {
		t.Errorf("in Dir sub/dir got %q, want %q", got, want)
	}
	res, err = sb.Exec(ctx, sandboxes.ExecRequest{Command: "pwd -P", Dir: "./sub/../sub/"})
	if err != nil || strings.TrimSpace(res.Stdout.String()) != root+"/sub" {
		t.Errorf("in Dir ./sub/../sub/ got %q, %v; want %q", res.Stdout.String(), err, root+"/sub")
	}
	for _, dir := range []string{"..", "../x", "sub/../../x", "/etc"} {
		if _, err := sb.Exec(ctx, sandboxes.ExecRequest{Command: "pwd", Dir: dir}); !errors.Is(err, sandboxes.ErrInvalid) {
			t.Errorf("Dir %q: got %v, want ErrInvalid", dir, err)
		}
	}
}

func (s *suite) testEnv(t *testing.T) {
	ctx := testContext(t)
	sb := s.newSandbox(t)
	hostSecret := setHostEnv()
	tricky := "a b 'c' \"d\" $HOME `x` \\ \n second line"
	res, err := sb.Exec(ctx, sandboxes.ExecRequest{
		Command: `printf '%s|%s|%s' "$SANDBOXTEST_SPEC" "$REQ_ONLY" "$TRICKY"`,
		Env:     map[string]string{"REQ_ONLY": "from the request", "TRICKY": tricky},
	})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: exit code %d, %v", res.ExitCode, err)
	}
	if got, want := res.Stdout.String(), specEnvVal+"|from the request|"+tricky; got != want {
		t.Errorf("environment: got %q, want %q", got, want)
	}

	// The request's environment is added to the spec's: it wins a clash.
	res, err = sb.Exec(ctx, sandboxes.ExecRequest{
		Command: `printf %s "$SANDBOXTEST_SPEC"`,
		Env:     map[string]string{specEnvName: "overridden"},
	})
	if err != nil || res.Stdout.String() != "overridden" {
		t.Errorf("request env over spec env: got %q, %v; want %q", res.Stdout.String(), err, "overridden")
	}
	// And only for that request.
	if got := sh(t, ctx, sb, `printf %s "$SANDBOXTEST_SPEC"`); got != specEnvVal {
		t.Errorf("a later exec sees %s=%q, want %q: one request's env leaked into the next", specEnvName, got, specEnvVal)
	}

	env := sh(t, ctx, sb, "env")
	if strings.Contains(env, hostEnvName) || strings.Contains(env, hostSecret) {
		t.Errorf("the test process's %s leaked into the sandbox:\n%s", hostEnvName, env)
	}
	for _, name := range []string{"PATH", "HOME"} {
		if !strings.Contains("\n"+env, "\n"+name+"=") {
			t.Errorf("%s is not set; the contract gives a default PATH and HOME. env:\n%s", name, env)
		}
	}
}

func (s *suite) testTimeout(t *testing.T) {
	ctx := testContext(t)
	sb := s.newSandbox(t)
	start := time.Now()
	res, err := sb.Exec(ctx, sandboxes.ExecRequest{Command: "echo started; sleep 30; echo finished", Timeout: 500 * time.Millisecond})
	took := time.Since(start)
	if took > killBound {
		t.Fatalf("a 30s sleep with a 500ms timeout returned after %s", took)
	}
	if !errors.Is(err, sandboxes.ErrTimeout) {
		t.Errorf("got error %v, want one matching ErrTimeout", err)
	}
	if errors.Is(err, context.Canceled) {
		t.Errorf("a timeout reported as a cancellation: %v", err)
	}
	if !res.TimedOut || res.ExitCode != -1 {
		t.Errorf("got TimedOut %v, ExitCode %d; want true, -1", res.TimedOut, res.ExitCode)
	}
	if got := res.Stdout.String(); got != "started\n" {
		t.Errorf("output before the timeout: got %q, want %q", got, "started\n")
	}
	// The sandbox still works.
	if got := sh(t, ctx, sb, "echo ok"); got != "ok\n" {
		t.Errorf("exec after a timeout: %q", got)
	}
}

// treeCommand starts three background processes, prints their IDs on one
// line and waits: one stays in the command's process group (killing the
// shell alone leaves it running), one leaves the session with setsid
// (killing the process group leaves it running), and one is a daemon that
// double-forked out of a new session, so that it is nobody's child any more
// (following descendants misses it). The command fails at once when the
// sandbox has no setsid.
var treeCommand = fmt.Sprintf(`command -v setsid >/dev/null || { echo "no setsid in the sandbox" >&2; exit 127; }
%[1]s & a=$!
setsid %[1]s & b=$!
c=$(setsid sh -c '%[1]s >/dev/null 2>&1 & echo $!')
echo "$a $b $c"
wait`, sleeper)

func (s *suite) testTimeoutKillsTree(t *testing.T) {
	ctx := testContext(t)
	sb := s.newSandbox(t)
	start := time.Now()
	res, err := sb.Exec(ctx, sandboxes.ExecRequest{Command: treeCommand, Timeout: time.Second})
	if took := time.Since(start); took > killBound {
		t.Fatalf("returned after %s", took)
	}
	if !errors.Is(err, sandboxes.ErrTimeout) || !res.TimedOut {
		t.Fatalf("got TimedOut %v, error %v, stderr %q; want a timeout", res.TimedOut, err, res.Stderr.String())
	}
	pids := parsePIDs(t, res.Stdout.String(), 3)
	waitGone(t, ctx, sb, pids...)
}

func (s *suite) testCancel(t *testing.T) {
	ctx := testContext(t)
	sb := s.newSandbox(t)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pidLine := newLineWriter()
	type result struct {
		res sandboxes.ExecResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := sb.Exec(cctx, sandboxes.ExecRequest{Command: treeCommand, Stdout: pidLine})
		done <- result{res, err}
	}()
	var line string
	select {
	case line = <-pidLine.first:
	case r := <-done:
		t.Fatalf("the command ended before it was cancelled: exit code %d, %v, stderr %q", r.res.ExitCode, r.err, r.res.Stderr.String())
	case <-time.After(time.Minute):
		t.Fatal("the command printed nothing within a minute")
	}
	pids := parsePIDs(t, line, 3)
	checkDetached(t, ctx, sb, pids[0], pids[1])
	cancel()
	var r result
	select {
	case r = <-done:
	case <-time.After(killBound):
		t.Fatalf("Exec did not return within %s of the cancellation", killBound)
	}
	if !errors.Is(r.err, context.Canceled) {
		t.Errorf("got error %v, want one matching context.Canceled", r.err)
	}
	if r.res.TimedOut || errors.Is(r.err, sandboxes.ErrTimeout) {
		t.Errorf("a cancellation reported as a timeout: %v", r.err)
	}
	if r.res.ExitCode != -1 {
		t.Errorf("exit code %d, want -1", r.res.ExitCode)
	}
	waitGone(t, ctx, sb, pids...)
}

// testLongExecRunsOnce runs a command that outlasts the client's
// per-request timeout. It must run exactly once: a client that gives up on
// the request that started it and sends it again starts it again, while
// the first run goes on (the server does not stop a command when its
// client leaves).
func (s *suite) testLongExecRunsOnce(t *testing.T) {
	ctx := testContext(t)
	sb := s.newSandbox(t)
	// Whole seconds: not every sleep takes fractions.
	secs := int(math.Ceil(s.h.RequestTimeout.Seconds())) + 2
	cmd := fmt.Sprintf("echo run >>runs.log; sleep %d; echo done", secs)
	start := time.Now()
	res, err := sb.Exec(ctx, sandboxes.ExecRequest{Command: cmd, Timeout: time.Duration(secs)*time.Second + time.Minute})
	took := time.Since(start).Round(time.Millisecond)
	// Every run appends its line as it starts, so the count is complete
	// once Exec returned, whatever it returned.
	runs := strings.Count(string(readFile(t, ctx, sb, "runs.log")), "run\n")
	if runs != 1 {
		t.Errorf("a %ds command (the client's request timeout is %s) ran %d times, want exactly once: "+
			"a request that may have started a command must never be sent again", secs, s.h.RequestTimeout, runs)
	}
	if err != nil || res.ExitCode != 0 || res.TimedOut {
		t.Fatalf("exec of a %ds command (request timeout %s): exit code %d, timed out %v, error %v after %s",
			secs, s.h.RequestTimeout, res.ExitCode, res.TimedOut, err, took)
	}
	if got := res.Stdout.String(); got != "done\n" {
		t.Errorf("stdout %q, want %q", got, "done\n")
	}
}

func (s *suite) testOutputCap(t *testing.T) {
	ctx := testContext(t)
	sb := s.newSandbox(t)
	const (
		limit    = 1000
		fill     = 1 << 20
		outTotal = len("START") + fill + len("END")
		errTotal = len("ERRSTART") + 5000 + len("ERREND")
	)
	var full countWriter
	res, err := sb.Exec(ctx, sandboxes.ExecRequest{
		Command: fmt.Sprintf(`printf START; yes abcdefg | head -c %d; printf END
{ printf ERRSTART; yes 0123 | head -c 5000; printf ERREND; } >&2`, fill),
		MaxOutput: limit,
		Stdout:    &full,
	})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: exit code %d, %v, stderr %q", res.ExitCode, err, res.Stderr.String())
	}
	if n := full.N(); n != outTotal {
		t.Errorf("ExecRequest.Stdout got %d bytes, want all %d", n, outTotal)
	}
	checkCapped(t, "stdout", res.Stdout, limit, outTotal, "START", "END")
	checkCapped(t, "stderr", res.Stderr, limit, errTotal, "ERRSTART", "ERREND")
}

func checkCapped(t *testing.T, stream string, o sandboxes.Output, limit, total int, start, end string) {
	t.Helper()
	if kept := len(o.Head) + len(o.Tail); kept > limit {
		t.Errorf("%s: kept %d bytes, more than MaxOutput %d", stream, kept, limit)
	}
	if o.Len() != int64(total) || o.Omitted != int64(total-len(o.Head)-len(o.Tail)) {
		t.Errorf("%s: head %d + tail %d + omitted %d bytes, want %d in all", stream, len(o.Head), len(o.Tail), o.Omitted, total)
	}
	if !bytes.HasPrefix(o.Head, []byte(start)) {
		t.Errorf("%s: head %.40q... does not start with %q", stream, o.Head, start)
	}
	if !bytes.HasSuffix(o.Tail, []byte(end)) {
		t.Errorf("%s: tail ...%q does not end with %q", stream, o.Tail[max(0, len(o.Tail)-40):], end)
	}
	if want := fmt.Sprintf("%d bytes omitted", o.Omitted); !strings.Contains(o.String(), want) {
		t.Errorf("%s: String() does not say %q", stream, want)
	}
}

// parsePIDs reads the n process IDs a command printed on its first line.
func parsePIDs(t *testing.T, out string, n int) []int {
	t.Helper()
	line, _, _ := strings.Cut(out, "\n")
	fields := strings.Fields(line)
	if len(fields) != n {
		t.Fatalf("the command was to print %d process IDs on its first line, printed %q", n, out)
	}
	pids := make([]int, n)
	for i, f := range fields {
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 0 {
			t.Fatalf("the command was to print %d process IDs on its first line, printed %q", n, out)
		}
		pids[i] = pid
	}
	return pids
}

// lineWriter sends the first complete line written to it on first.
type lineWriter struct {
	mu    sync.Mutex
	buf   []byte
	sent  bool
	first chan string
}

func newLineWriter() *lineWriter { return &lineWriter{first: make(chan string, 1)} }

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sent {
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	if i := bytes.IndexByte(w.buf, '\n'); i >= 0 {
		w.first <- string(w.buf[:i+1])
		w.sent = true
	}
	return len(p), nil
}

type countWriter struct {
	mu sync.Mutex
	n  int
}

func (w *countWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.n += len(p)
	w.mu.Unlock()
	return len(p), nil
}

func (w *countWriter) N() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}
