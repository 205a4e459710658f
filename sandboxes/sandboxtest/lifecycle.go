package sandboxtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbot/agentbot/sandboxes"
)

// testAttachAfterExit creates a sandbox in a child process of the test
// binary (see Main), which exits without destroying it, and attaches to it
// from here, as a worker does after a restart.
func (s *suite) testAttachAfterExit(t *testing.T) {
	ctx := testContext(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "state.json")
	nonce := "child-" + runID + "-" + fmt.Sprint(time.Now().UnixNano())
	// -test.run=^$: a package whose TestMain does not call Main runs no
	// tests in the child and writes no state, which is reported below.
	cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childHarnessEnv+"="+s.h.Name, childOutEnv+"="+out, childNonceEnv+"="+nonce)
	output, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child process: %v\n%s", err, output)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("the child wrote no sandbox state (does the package's TestMain call sandboxtest.Main with the %q harness?): %v\n%s",
			s.h.Name, err, output)
	}
	var st sandboxes.State
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatalf("the child's state %s: %v", data, err)
	}
	if st.Backend != s.h.Name || st.ID == "" {
		t.Fatalf("the child's state %+v: want backend %q and an ID", st, s.h.Name)
	}

	sb, err := s.reg.Attach(ctx, st)
	if err != nil {
		t.Fatalf("attaching to the sandbox the child made: %v", err)
	}
	t.Cleanup(func() { destroyLater(t, sb) })
	if sb.ID() != st.ID {
		t.Errorf("attached to %q, want %q", sb.ID(), st.ID)
	}
	if got := string(readFile(t, ctx, sb, childFile)); got != nonce {
		t.Errorf("the child's file holds %q, want %q", got, nonce)
	}
	if got := sh(t, ctx, sb, `cat `+childFile+`; printf ' %s' "$`+specEnvName+`"`); got != nonce+" "+specEnvVal {
		t.Errorf("exec after attach printed %q, want %q (the file and the spec's environment)", got, nonce+" "+specEnvVal)
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	if s.h.Exists(ctx, t, st) {
		t.Errorf("sandbox %s is left after Destroy", st.ID)
	}
}

func (s *suite) testConcurrentExec(t *testing.T) {
	ctx := testContext(t)
	sb := s.newSandbox(t)
	const workers, rounds = 8, 3
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				id := fmt.Sprintf("w%d-r%d", w, r)
				res, err := sb.Exec(ctx, sandboxes.ExecRequest{
					Command: fmt.Sprintf(`mkdir -p out && yes %s | head -n 2000 > out/%[1]s.txt && cat out/%[1]s.txt && echo %[1]s-err >&2`, id),
				})
				if err != nil || res.ExitCode != 0 {
					t.Errorf("%s: exit code %d, %v, stderr %q", id, res.ExitCode, err, res.Stderr.String())
					return
				}
				lines := strings.Split(strings.TrimSuffix(res.Stdout.String(), "\n"), "\n")
				for i, l := range lines {
					if l != id {
						t.Errorf("%s: line %d of its output is %q: outputs mixed", id, i+1, l)
						break
					}
				}
				if len(lines) != 2000 {
					t.Errorf("%s: %d lines of output, want 2000", id, len(lines))
				}
				if got := res.Stderr.String(); got != id+"-err\n" {
					t.Errorf("%s: stderr %q", id, got)
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for w := range workers {
		for r := range rounds {
			id := fmt.Sprintf("w%d-r%d", w, r)
			if got := readFile(t, ctx, sb, "out/"+id+".txt"); len(got) != 2000*(len(id)+1) {
				t.Errorf("out/%s.txt holds %d bytes, want %d", id, len(got), 2000*(len(id)+1))
			}
		}
	}
}

func (s *suite) testStopAttach(t *testing.T) {
	ctx := testContext(t)
	sb := s.newSandbox(t)
	writeFile(t, ctx, sb, "survives/stop.txt", []byte("still here"), 0o600)
	// Processes left running, one of them detached like a daemon: Stop
	// kills them.
	plain, detached := startSleepers(t, ctx, sb)
	st := sb.State()
	if err := sb.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := sb.Stop(ctx); err != nil {
		t.Fatalf("stopping a stopped sandbox: %v", err)
	}
	again, err := s.reg.Attach(ctx, st)
	if err != nil {
		t.Fatalf("attach after stop: %v", err)
	}
	if got := string(readFile(t, ctx, again, "survives/stop.txt")); got != "still here" {
		t.Errorf("after stop and attach, the file holds %q", got)
	}
	if got := lsMode(t, ctx, again, "survives/stop.txt"); got != "-rw-------" {
		t.Errorf("after stop and attach, the file's mode is %s", got)
	}
	if got := sh(t, ctx, again, "echo alive"); got != "alive\n" {
		t.Errorf("exec after attach: %q", got)
	}
	waitGone(t, ctx, again, plain, detached)
	// Attaching to a running sandbox works too.
	third, err := s.reg.Attach(ctx, again.State())
	if err != nil {
		t.Fatalf("attach to a running sandbox: %v", err)
	}
	if got := sh(t, ctx, third, "cat survives/stop.txt"); got != "still here" {
		t.Errorf("exec after a second attach: %q", got)
	}
}

func (s *suite) testDestroy(t *testing.T) {
	ctx := testContext(t)
	sb := s.newSandbox(t)
	writeFile(t, ctx, sb, "doomed.txt", []byte("x"), 0o644)
	plain, detached := startSleepers(t, ctx, sb)
	st := sb.State()
	if !s.h.Exists(ctx, t, st) {
		t.Fatalf("Harness.Exists says sandbox %s does not exist before Destroy", st.ID)
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	if s.h.Exists(ctx, t, st) {
		t.Errorf("sandbox %s is left after Destroy", st.ID)
	}
	// What the sandbox left running must not run on: seen from another
	// sandbox of the backend, it is gone. Where sandboxes do not share
	// processes (containers, VMs) this holds at once; where they do (the
	// local backend, on the host), Destroy must have killed them.
	waitGone(t, ctx, s.newSandbox(t), plain, detached)
	checkNotFound := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, sandboxes.ErrNotFound) {
			t.Errorf("%s: got %v, want an error matching ErrNotFound", what, err)
		} else if !strings.Contains(err.Error(), st.ID) {
			t.Errorf("%s: error %q does not name sandbox %s", what, err, st.ID)
		}
	}
	checkNotFound("destroying again", sb.Destroy(ctx))
	_, err := s.reg.Attach(ctx, st)
	checkNotFound("attaching after destroy", err)
	if res, err := sb.Exec(ctx, sandboxes.ExecRequest{Command: "echo still here", Timeout: killBound}); err == nil {
		t.Errorf("exec in a destroyed sandbox succeeded: exit code %d, %q", res.ExitCode, res.Stdout.String())
	}

	// A made-up ID is not found either, and named.
	ghost := st
	ghost.ID = st.ID + "-never-made"
	_, err = s.reg.Attach(ctx, ghost)
	if !errors.Is(err, sandboxes.ErrNotFound) || !strings.Contains(err.Error(), ghost.ID) {
		t.Errorf("attaching to a sandbox that never existed: got %v, want ErrNotFound naming %s", err, ghost.ID)
	}
}

// RunCross moves a workspace between the backends of from and to: a rich
// tree made in a from sandbox is snapshotted and restored into a fresh to
// sandbox, changed there, and carried back into a fresh from sandbox; the
// listings must match at every step. from and to may name the same
// backend.
func RunCross(t *testing.T, from, to Harness) {
	from.validate(t)
	to.validate(t)
	ctx := testContext(t)
	fromReg, toReg := from.registry(t), to.registry(t)

	src := newSandbox(t, from, fromReg)
	buildRichTree(t, ctx, src)
	tree, _ := listTree(t, ctx, src)
	checkRich(t, from.Name, tree)
	snap, info := snapshot(t, ctx, src)

	dst := newSandbox(t, to, toReg)
	sameCounts(t, from.Name+" to "+to.Name, info, restore(t, ctx, dst, snap))
	got, _ := listTree(t, ctx, dst)
	sameTree(t, from.Name+" restored into "+to.Name, tree, got)
	if out := sh(t, ctx, dst, "./bin/run.sh && cat links/to-dir/c/sibling"); out != "ran\ndeep\n" {
		t.Errorf("in %s, the restored tree's script and links printed %q", to.Name, out)
	}

	sh(t, ctx, dst, `set -e
rm -rf a/b/c && echo "made in the other backend" > a/b/new.txt
chmod 0700 bin/run.sh && ln -s b/new.txt a/newlink && mkdir -p more/empty`)
	writeFile(t, ctx, dst, "data/random.bin", randomBytes(100<<10, 5), 0o640)
	changed, _ := listTree(t, ctx, dst)
	if diffTrees(tree, changed) == "" {
		t.Fatal("the changes did not change the listing")
	}
	snap, info = snapshot(t, ctx, dst)

	back := newSandbox(t, from, fromReg)
	sameCounts(t, to.Name+" back to "+from.Name, info, restore(t, ctx, back, snap))
	got, _ = listTree(t, ctx, back)
	sameTree(t, to.Name+" restored into "+from.Name, changed, got)
	if out := sh(t, ctx, back, "cat a/newlink"); out != "made in the other backend\n" {
		t.Errorf("back in %s, a/newlink reads %q", from.Name, out)
	}
}
