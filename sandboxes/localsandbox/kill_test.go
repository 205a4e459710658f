package localsandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbot/agentbot/sandboxes"
)

func TestMarkedIn(t *testing.T) {
	env := func(kv ...string) []byte { return []byte(strings.Join(kv, "\x00") + "\x00") }
	const m = "loc-0123456789ab/00ff"
	for _, tc := range []struct {
		name    string
		environ []byte
		match   func(string) bool
		want    bool
	}{
		{"exact", env("A=1", MarkerEnv+"="+m, "B=2"), exactMarker(m), true},
		{"exact, last and without a NUL", []byte("A=1\x00" + MarkerEnv + "=" + m), exactMarker(m), true},
		{"another exec", env(MarkerEnv + "=loc-0123456789ab/00fe"), exactMarker(m), false},
		{"a longer value", env(MarkerEnv + "=" + m + "0"), exactMarker(m), false},
		{"the sandbox", env(MarkerEnv + "=" + m), sandboxMarker("loc-0123456789ab"), true},
		{"another sandbox", env(MarkerEnv + "=loc-0123456789abc/00ff"), sandboxMarker("loc-0123456789ab"), false},
		{"a prefix of the ID", env(MarkerEnv + "=" + m), sandboxMarker("loc-0123456789a"), false},
		{"empty value", env(MarkerEnv + "="), sandboxMarker("loc-0123456789ab"), false},
		{"a longer name", env("X"+MarkerEnv+"="+m, MarkerEnv+"_2="+m), exactMarker(m), false},
		{"in another variable's value", env("A=" + MarkerEnv + "=" + m), exactMarker(m), false},
		{"no environment", nil, exactMarker(m), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := markedIn(tc.environ, tc.match); got != tc.want {
				t.Fatalf("markedIn(%q) = %v, want %v", tc.environ, got, tc.want)
			}
		})
	}
}

func TestReapNothing(t *testing.T) {
	start := time.Now()
	// A process group that cannot exist (pid_max is below 2^22 on Linux,
	// the limit of other systems is lower still) and a marker no process
	// has.
	if err := reap([]int{1 << 30}, exactMarker("loc-000000000000/none")); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("reaping a group that does not exist: %v, want os.ErrProcessDone", err)
	}
	if err := reap(nil, sandboxMarker("loc-000000000000")); err != nil {
		t.Errorf("reaping no group: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("reaping nothing took %s", took)
	}
}

// requireScan skips a test of processes that leave their group where the
// backend cannot find them, or the host cannot make them.
func requireScan(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("processes that leave their group are found through /proc on Linux only")
	}
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid here")
	}
}

// isOurs reports whether pid is alive and marked as a process of a local
// sandbox: only such a process is killed when a test fails, never one that
// took a recorded process ID since.
func isOurs(pid int) bool {
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	return err == nil && markedIn(environ, func(v string) bool { return strings.HasPrefix(v, idPrefix) }) && !gone(pid)
}

// trackPIDs parses the process IDs in text (separated by white space) and
// kills those of them still alive, and ours, when the test ends.
func trackPIDs(t *testing.T, text string) []int {
	t.Helper()
	var pids []int
	for _, f := range strings.Fields(text) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 0 {
			t.Fatalf("%q is not a list of process IDs", text)
		}
		pids = append(pids, pid)
	}
	t.Cleanup(func() {
		for _, pid := range pids {
			if isOurs(pid) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return pids
}

// readPIDs reads the process IDs a command wrote to the file name in dir.
func readPIDs(t *testing.T, dir, name string) []int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return trackPIDs(t, string(data))
}

// daemonize is a command that starts sleep 300 as a double-forked daemon,
// in a session of its own and a child of init, writing its ID to file.
func daemonize(file string) string {
	return fmt.Sprintf(`setsid sh -c 'sleep 300 >/dev/null 2>&1 </dev/null & echo $! >%s'`, file)
}

// TestLocalExecTimeoutKillsDetached checks that a timeout kills, besides
// the command's process group, what left it: a child in a session of its
// own, a double-forked daemon, and a loop in a session of its own that
// keeps starting more daemons while the backend looks for them. It spares
// what another command of the sandbox left running, which Destroy kills.
func TestLocalExecTimeoutKillsDetached(t *testing.T) {
	requireScan(t)
	ctx := t.Context()
	b := newBackend(t)
	inst := create(t, b, sandboxes.Spec{})
	root := inst.State().Root

	code, _, stderr, err := run(t, ctx, inst, sandboxes.ExecRequest{Command: daemonize("earlier.pid")})
	if err != nil || code != 0 {
		t.Fatalf("starting a daemon: %d, %v, %s", code, err, stderr)
	}
	earlier := readPIDs(t, root, "earlier.pid")[0]

	tctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	code, out, stderr, err := run(t, tctx, inst, sandboxes.ExecRequest{Command: daemonize("daemon.pid") + `
setsid sh -c 'while :; do (setsid sleep 300 >/dev/null 2>&1 & echo $! >>loop.pids); sleep 0.02; done' >/dev/null 2>&1 &
echo $! >loop.pid
setsid sleep 300 & echo $!
wait`})
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("returned after %s", took)
	}
	if !errors.Is(err, context.DeadlineExceeded) || code != -1 {
		t.Fatalf("got %d, %v, stderr %q; want -1 and the context's error", code, err, stderr)
	}
	pids := trackPIDs(t, out)
	pids = append(pids, readPIDs(t, root, "daemon.pid")...)
	pids = append(pids, readPIDs(t, root, "loop.pid")...)
	looped := readPIDs(t, root, "loop.pids")
	if len(looped) < 3 {
		t.Fatalf("the loop started %d daemons before the timeout, want a few", len(looped))
	}
	t.Logf("the loop started %d daemons in %s", len(looped), time.Since(start))
	for _, pid := range append(pids, looped...) {
		waitGone(t, pid)
	}
	// Even those the loop started but had no time to record.
	if left := slices.DeleteFunc(scanMarked(sandboxMarker(inst.State().ID)), func(pid int) bool { return pid == earlier }); len(left) > 0 {
		trackPIDs(t, fmt.Sprint(left))
		t.Fatalf("processes of the sandbox left after the timeout: %v", left)
	}
	time.Sleep(200 * time.Millisecond)
	if again := readPIDs(t, root, "loop.pids"); len(again) != len(looped) {
		t.Errorf("the loop went on starting daemons after the timeout: %d, then %d", len(looped), len(again))
	}

	if gone(earlier) {
		t.Fatal("the timeout killed a daemon another command of the sandbox left")
	}
	if err := inst.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	waitGone(t, earlier)
}

// TestLocalStopKillsDetached checks that Stop kills the daemons of the
// sandbox even through a Backend made afresh (as after a restart, which
// started none of them), and spares those of another sandbox.
func TestLocalStopKillsDetached(t *testing.T) {
	requireScan(t)
	ctx := t.Context()
	b := newBackend(t)
	inst := create(t, b, sandboxes.Spec{})
	other := create(t, b, sandboxes.Spec{})

	code, out, stderr, err := run(t, ctx, inst, sandboxes.ExecRequest{
		Command: daemonize("daemon.pid") + "\nsetsid sleep 300 >/dev/null 2>&1 & echo $!",
	})
	if err != nil || code != 0 {
		t.Fatalf("starting daemons: %d, %v, %s", code, err, stderr)
	}
	pids := append(trackPIDs(t, out), readPIDs(t, inst.State().Root, "daemon.pid")...)
	code, _, stderr, err = run(t, ctx, other, sandboxes.ExecRequest{Command: daemonize("daemon.pid")})
	if err != nil || code != 0 {
		t.Fatalf("starting a daemon in the other sandbox: %d, %v, %s", code, err, stderr)
	}
	otherPID := readPIDs(t, other.State().Root, "daemon.pid")[0]

	fresh, err := New(Options{BaseDir: b.baseDir})
	if err != nil {
		t.Fatal(err)
	}
	again, err := fresh.Attach(ctx, inst.State())
	if err != nil {
		t.Fatal(err)
	}
	if err := again.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	for _, pid := range pids {
		waitGone(t, pid)
	}
	if gone(otherPID) {
		t.Fatal("stopping a sandbox killed a daemon of another")
	}
	if err := other.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	waitGone(t, otherPID)
}

// BenchmarkScanMarked measures one scan of /proc, which reap repeats.
func BenchmarkScanMarked(b *testing.B) {
	match := sandboxMarker("loc-000000000000")
	for b.Loop() {
		scanMarked(match)
	}
}
