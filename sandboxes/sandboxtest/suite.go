package sandboxtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbot/agentbot/sandboxes"
)

// Limits of the suite. Bounds on how long a killed command may take to
// return are generous: they tell "killed" from "ran to the end", nothing
// finer.
const (
	// testTimeout bounds every subtest's backend calls.
	testTimeout = 3 * time.Minute
	// killBound is how soon Exec must return once its command is to be
	// killed (a timeout of a `sleep 30`, a cancellation).
	killBound = 10 * time.Second
	// goneBound is how long a killed process may linger before a second
	// exec no longer sees it.
	goneBound = 5 * time.Second
)

// Values the suite puts into a sandbox's environment and the test process's
// own, to tell which reach a command.
const (
	specEnvName = "SANDBOXTEST_SPEC"
	specEnvVal  = "from the spec"
	hostEnvName = "AGENTBOT_SANDBOXTEST_SECRET"
)

// runID is unique to this test process: it names files the suite creates
// outside a workspace (which must never appear) and the host secret.
var runID = func() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}()

var setHostEnv = sync.OnceValue(func() string {
	// The process environment, not t.Setenv: the subtests are parallel.
	v := "host-secret-" + runID
	os.Setenv(hostEnvName, v)
	return v
})

// Run runs the conformance subtests against the backend of h. Every subtest
// creates its own sandboxes through a Registry holding only this backend,
// destroys them when it ends, and runs in parallel with the others.
//
// The package's TestMain must call Main with h, for the subtest that
// attaches to a sandbox made by another process.
func Run(t *testing.T, h Harness) {
	h.validate(t)
	setHostEnv()
	s := &suite{h: h, reg: h.registry(t)}
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"ExitCodes", s.testExitCodes},
		{"StdoutStderr", s.testStdoutStderr},
		{"Dir", s.testDir},
		{"Env", s.testEnv},
		{"Timeout", s.testTimeout},
		{"TimeoutKillsTree", s.testTimeoutKillsTree},
		{"Cancel", s.testCancel},
		{"LongExecRunsOnce", s.testLongExecRunsOnce},
		{"OutputCap", s.testOutputCap},
		{"HugeOutput", s.testHugeOutput},
		{"FilesRoundTrip", s.testFilesRoundTrip},
		{"FileModes", s.testFileModes},
		{"FilePaths", s.testFilePaths},
		{"SymlinkEscape", s.testSymlinkEscape},
		{"SnapshotRestore", s.testSnapshotRestore},
		{"SnapshotSkips", s.testSnapshotSkips},
		{"SnapshotReadOnlyDir", s.testSnapshotReadOnlyDir},
		{"SnapshotLeavesOutOutputs", s.testSnapshotLeavesOutOutputs},
		{"Fingerprint", s.testFingerprint},
		{"RestoreRefusesUnsafe", s.testRestoreUnsafe},
		{"RestoreRefusesCorrupt", s.testRestoreCorrupt},
		{"AttachAfterExit", s.testAttachAfterExit},
		{"ConcurrentExec", s.testConcurrentExec},
		{"StopAttach", s.testStopAttach},
		{"Destroy", s.testDestroy},
		{"CreateByKey", s.testCreateByKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.test(t)
		})
	}
}

func (h Harness) validate(t testing.TB) {
	t.Helper()
	if h.Name == "" || h.NewBackend == nil || h.Exists == nil || h.RequestTimeout <= 0 {
		t.Fatalf("sandboxtest: harness %q needs Name, NewBackend, Exists and RequestTimeout", h.Name)
	}
	if h.RequestTimeout > time.Minute {
		t.Fatalf("sandboxtest: harness %q has a RequestTimeout of %s; give its client a smaller one (at most a minute)", h.Name, h.RequestTimeout)
	}
}

// suite is one backend under test.
type suite struct {
	h   Harness
	reg *sandboxes.Registry
}

// specFor returns the harness's spec with the suite's own environment and
// labels added; the harness's maps are not modified.
func specFor(h Harness, name string) sandboxes.Spec {
	spec := h.Spec
	if spec.Name == "" {
		spec.Name = name
	}
	spec.Env = maps.Clone(h.Spec.Env)
	if spec.Env == nil {
		spec.Env = map[string]string{}
	}
	spec.Env[specEnvName] = specEnvVal
	spec.Labels = maps.Clone(h.Spec.Labels)
	if spec.Labels == nil {
		spec.Labels = map[string]string{}
	}
	spec.Labels["agentbot.sandboxtest"] = "true"
	return spec
}

// newSandbox creates a sandbox for the test and destroys it when the test
// ends (a sandbox the test already destroyed is fine).
func (s *suite) newSandbox(t *testing.T) *sandboxes.Sandbox {
	t.Helper()
	return newSandbox(t, s.h, s.reg)
}

func newSandbox(t *testing.T, h Harness, reg *sandboxes.Registry) *sandboxes.Sandbox {
	t.Helper()
	sb, err := reg.Create(testContext(t), h.Name, specFor(h, "sandboxtest"))
	if err != nil {
		t.Fatalf("creating a %s sandbox: %v", h.Name, err)
	}
	t.Cleanup(func() { destroyLater(t, sb) })
	st := sb.State()
	if st.Backend != h.Name || st.ID == "" || st.Root == "" {
		t.Fatalf("new sandbox has State %+v: want Backend %q and an ID and Root", st, h.Name)
	}
	return sb
}

// destroyLater destroys sb at the end of a test. The test's context is
// already cancelled by then.
func destroyLater(t *testing.T, sb *sandboxes.Sandbox) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sb.Destroy(ctx); err != nil && !errors.Is(err, sandboxes.ErrNotFound) {
		t.Errorf("cleanup: %v", err)
	}
}

// testContext bounds a test's backend calls.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// sh runs cmd and fails the test unless it exits 0; it returns stdout.
func sh(t *testing.T, ctx context.Context, sb *sandboxes.Sandbox, cmd string) string {
	t.Helper()
	res, err := sb.Exec(ctx, sandboxes.ExecRequest{Command: cmd})
	if err != nil {
		t.Fatalf("exec %q: %v", cmd, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exec %q: exit code %d\nstdout: %s\nstderr: %s", cmd, res.ExitCode, res.Stdout, res.Stderr)
	}
	return res.Stdout.String()
}

// exitCode runs cmd and returns its exit code, failing the test when it
// could not run.
func exitCode(t *testing.T, ctx context.Context, sb *sandboxes.Sandbox, cmd string) int {
	t.Helper()
	res, err := sb.Exec(ctx, sandboxes.ExecRequest{Command: cmd})
	if err != nil {
		t.Fatalf("exec %q: %v", cmd, err)
	}
	return res.ExitCode
}

func writeFile(t *testing.T, ctx context.Context, sb *sandboxes.Sandbox, name string, data []byte, mode fs.FileMode) {
	t.Helper()
	if err := sb.WriteFile(ctx, name, data, mode); err != nil {
		t.Fatalf("writing %s: %v", name, err)
	}
}

func readFile(t *testing.T, ctx context.Context, sb *sandboxes.Sandbox, name string) []byte {
	t.Helper()
	data, err := sb.ReadFile(ctx, name, 0)
	if err != nil {
		t.Fatalf("reading %s: %v", name, err)
	}
	return data
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// sleeper is the command line of the processes the suite leaves for a
// backend to kill. Checks match it, so that a process that took the same
// ID later (in a restarted container, say) is not taken for it.
const sleeper = "sleep 300"

// pidAlive is a command that exits 0 when the process pid is alive and
// runs sleeper. A zombie counts as gone: it was killed, only its parent has
// not reaped it.
func pidAlive(pid int) string {
	return fmt.Sprintf(`kill -0 %[1]d 2>/dev/null || exit 1
s=$(sed -n 's/^.*) \(.\).*$/\1/p' /proc/%[1]d/stat 2>/dev/null)
[ "$s" != Z ] || exit 1
c=$(tr '\0' ' ' </proc/%[1]d/cmdline 2>/dev/null)
[ "$c" = %[2]s ]`, pid, shellQuote(sleeper+" "))
}

// waitGone fails the test unless every process of pids disappears from sb
// within goneBound.
func waitGone(t *testing.T, ctx context.Context, sb *sandboxes.Sandbox, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(goneBound)
	for _, pid := range pids {
		for exitCode(t, ctx, sb, pidAlive(pid)) == 0 {
			if time.Now().After(deadline) {
				st, _ := sb.Exec(ctx, sandboxes.ExecRequest{Command: fmt.Sprintf("head -n 7 /proc/%d/status 2>&1", pid)})
				t.Fatalf("process %d (%s) is still alive %s after it was to be killed\n%s",
					pid, sleeper, goneBound, st.Stdout)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// startSleepers starts two background processes in sb and returns their
// IDs once both run: one left in the command's process group and session,
// and one detached into a session of its own with setsid, as a daemon
// does. Their output goes nowhere, so the Exec returns at once.
func startSleepers(t *testing.T, ctx context.Context, sb *sandboxes.Sandbox) (plain, detached int) {
	t.Helper()
	out := sh(t, ctx, sb, fmt.Sprintf(`%[1]s >/dev/null 2>&1 & a=$!
setsid %[1]s >/dev/null 2>&1 & echo "$a $!"`, sleeper))
	pids := parsePIDs(t, out, 2)
	checkDetached(t, ctx, sb, pids[0], pids[1])
	return pids[0], pids[1]
}

// checkDetached waits, up to goneBound, until the processes plain and
// detached both run sleeper, and checks that detached is in a session
// other than plain's: that setsid worked, so that the test is not void.
func checkDetached(t *testing.T, ctx context.Context, sb *sandboxes.Sandbox, plain, detached int) {
	t.Helper()
	deadline := time.Now().Add(goneBound)
	for _, pid := range []int{plain, detached} {
		for exitCode(t, ctx, sb, pidAlive(pid)) != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("the background process %d is not running %q (the suite needs setsid in the sandbox, "+
					"as busybox and util-linux have)", pid, sleeper)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Field 6 of /proc/PID/stat is the session; the name before it, in
	// parentheses, may hold spaces.
	out := sh(t, ctx, sb, fmt.Sprintf(`for p in %d %d; do
	sed -n 's/^.*) [^ ]* [^ ]* [^ ]* \([0-9]*\) .*$/\1/p' /proc/$p/stat
done`, plain, detached))
	sids := strings.Fields(out)
	if len(sids) != 2 || sids[0] == sids[1] {
		t.Fatalf("sessions of the plain and the setsid background process: %q; want two different ones", out)
	}
}
