package agentflow_test

// Tests of what a shell command's output costs the worker: whatever a
// command prints (yes prints forever), the output file kept in the
// workspace, the Docker backend's spool in the worker's temp directory and
// the number of output files stay bounded.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/internal/testenv"
	"github.com/agentbot/agentbot/sandboxes"
	"github.com/agentbot/agentbot/sandboxes/dockersandbox"
	"github.com/agentbot/agentbot/sandboxes/localsandbox"
)

// outputSlack is what an output file may hold beyond MaxKeptOutput: the
// lines that say where it was cut.
const outputSlack = 4 << 10

// TestShellOutputIsBounded runs a command that prints 200 MB through
// RunTool on the local and the Docker backend: the result says the output
// was cut, and the worker keeps at most agentflow.MaxKeptOutput of it (the
// output file in the workspace; for Docker also its spool in the worker's
// temp directory), the head and the tail.
func TestShellOutputIsBounded(t *testing.T) {
	const total = 200_000_000
	for _, backend := range []string{localsandbox.Name, dockersandbox.Name} {
		t.Run(backend, func(t *testing.T) {
			// The Docker backend spools what it copies into a
			// container under os.TempDir: watch that directory.
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp)
			reg := outputRegistry(t, backend)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			sb := newOutputSandbox(t, ctx, reg, backend)
			a := &agentflow.Activities{Sandboxes: reg}

			peak := watchDirSize(t, tmp)
			cmd := fmt.Sprintf("echo FIRST-LINE; yes | head -c %d; echo LAST-LINE; echo on-stderr >&2", total)
			res, err := a.RunTool(ctx, shellInput(sb, 1, "big", cmd))
			spool := peak()
			if err != nil {
				t.Fatalf("RunTool: %v", err)
			}
			if !res.OK {
				t.Fatalf("the command failed: %s", res.Output)
			}
			log := path(sandboxes.OutputsDir, "turn1-step1-big.log")
			for _, want := range []string{"exit code: 0", "bytes omitted", "[output was cut;", log, "left out"} {
				if !strings.Contains(res.Output, want) {
					t.Errorf("the result does not say %q; it ends:\n%s", want, res.Output[max(0, len(res.Output)-400):])
				}
			}
			if len(res.Output) > agentflow.MaxToolOutput {
				t.Errorf("the result has %d bytes, more than MaxToolOutput %d", len(res.Output), agentflow.MaxToolOutput)
			}

			head, tail, size, lines := readEnds(t, ctx, sb, log, "on-stderr\n", "bytes of stdout left out")
			t.Logf("output file %d bytes, temp directory at most %d bytes", size, spool)
			if size > agentflow.MaxKeptOutput+outputSlack {
				t.Errorf("the output file has %d bytes, more than MaxKeptOutput %d", size, agentflow.MaxKeptOutput)
			}
			if size < agentflow.MaxKeptOutput/2 {
				t.Errorf("the output file has %d bytes: the bound is %d, half of it at least should be kept", size, agentflow.MaxKeptOutput)
			}
			if !strings.HasPrefix(head, "FIRST-LINE\ny\ny\n") {
				t.Errorf("the output file does not start with the output's head: %q", head)
			}
			if !strings.HasSuffix(tail, "y\nLAST-LINE\n") {
				t.Errorf("the output file does not end with the output's tail: ...%q", tail[max(0, len(tail)-100):])
			}
			for what, seen := range lines {
				if !seen {
					t.Errorf("the output file does not hold %q", what)
				}
			}
			if spool > agentflow.MaxKeptOutput+outputSlack {
				t.Errorf("the worker's temp directory held %d bytes during the command, more than MaxKeptOutput %d", spool, agentflow.MaxKeptOutput)
			}
		})
	}
}

// TestShellOutputsArePruned: after 30 commands whose outputs were each kept
// in a file, only the newest agentflow.KeptOutputs files are left.
func TestShellOutputsArePruned(t *testing.T) {
	reg := outputRegistry(t, localsandbox.Name)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sb := newOutputSandbox(t, ctx, reg, localsandbox.Name)
	a := &agentflow.Activities{Sandboxes: reg}
	// Files of the user's own under the outputs directory are not ours
	// to delete.
	if err := sb.WriteFile(ctx, path(sandboxes.OutputsDir, "mine.txt"), []byte("keep me"), 0); err != nil {
		t.Fatal(err)
	}
	const commands = 30
	for i := 1; i <= commands; i++ {
		// More than MaxToolOutput, so the output goes to a file.
		cmd := fmt.Sprintf("yes %d | head -c %d", i, agentflow.MaxToolOutput*2)
		res, err := a.RunTool(ctx, shellInput(sb, i, fmt.Sprintf("c%d", i), cmd))
		if err != nil || !res.OK {
			t.Fatalf("command %d: %v %s", i, err, res.Output)
		}
	}
	dir := filepath.Join(sb.State().Root, filepath.FromSlash(sandboxes.OutputsDir))
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, e := range ents {
		have[e.Name()] = true
	}
	logs := len(ents) - 1
	if !have["mine.txt"] {
		t.Errorf("the user's own file in %s was deleted", sandboxes.OutputsDir)
	}
	if logs != agentflow.KeptOutputs {
		t.Errorf("%d output files are left after %d commands, want %d: %v", logs, commands, agentflow.KeptOutputs, have)
	}
	for i := 1; i <= commands; i++ {
		name := fmt.Sprintf("turn%d-step%d-c%d.log", i, i, i)
		if want := i > commands-agentflow.KeptOutputs; have[name] != want {
			t.Errorf("%s is there: %v, want %v", name, have[name], want)
		}
	}
}

func outputRegistry(t *testing.T, backend string) *sandboxes.Registry {
	t.Helper()
	reg := sandboxes.NewRegistry()
	var b sandboxes.Backend
	switch backend {
	case localsandbox.Name:
		lb, err := localsandbox.New(localsandbox.Options{BaseDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		b = lb
	case dockersandbox.Name:
		if err := testenv.CheckDocker(context.Background()); err != nil {
			t.Fatal(err)
		}
		db, err := dockersandbox.New(dockersandbox.Options{Image: testenv.TestImage()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		b = db
	}
	if err := reg.Register(backend, b); err != nil {
		t.Fatal(err)
	}
	return reg
}

// newOutputSandbox creates a sandbox that is destroyed when the test ends,
// failed or not.
func newOutputSandbox(t *testing.T, ctx context.Context, reg *sandboxes.Registry, backend string) *sandboxes.Sandbox {
	t.Helper()
	sb, err := reg.Create(ctx, backend, sandboxes.Spec{Name: "output-test", Labels: map[string]string{"agentbot.test": "agentflow"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sb.Destroy(dctx); err != nil {
			t.Errorf("destroying the sandbox: %v", err)
		}
	})
	return sb
}

func shellInput(sb *sandboxes.Sandbox, step int, id, command string) agentflow.ToolInput {
	return agentflow.ToolInput{
		SessionID: "agent/term:output-test", Turn: step, Step: step, State: sb.State(),
		Call:           agentflow.ToolCall{ID: id, Name: "shell", Arguments: fmt.Sprintf(`{"command": %q}`, command)},
		DefaultTimeout: 5 * time.Minute,
	}
}

func path(elem ...string) string { return strings.Join(elem, "/") }

// readEnds streams the file name of sb and returns its first and last
// kilobyte, its size, and which of the strings find it holds.
func readEnds(t *testing.T, ctx context.Context, sb *sandboxes.Sandbox, name string, find ...string) (head, tail string, size int64, found map[string]bool) {
	t.Helper()
	rc, err := sb.OpenFile(ctx, name)
	if err != nil {
		t.Fatalf("opening the output file: %v", err)
	}
	defer rc.Close()
	e := endsWriter{found: map[string]bool{}}
	for _, f := range find {
		e.found[f] = false
	}
	if size, err = io.Copy(&e, rc); err != nil {
		t.Fatalf("reading the output file: %v", err)
	}
	return string(e.head), string(e.tail), size, e.found
}

// endsWriter keeps the first and last kilobyte of a stream and looks for
// short strings in it.
type endsWriter struct {
	head, tail []byte
	found      map[string]bool
}

func (e *endsWriter) Write(p []byte) (int, error) {
	if room := 1024 - len(e.head); room > 0 {
		e.head = append(e.head, p[:min(room, len(p))]...)
	}
	// The last kilobyte before p, and p: a string under 1 KiB split
	// between two writes is found too.
	window := append(e.tail, p...)
	for f, seen := range e.found {
		if !seen && bytes.Contains(window, []byte(f)) {
			e.found[f] = true
		}
	}
	e.tail = append([]byte(nil), window[max(0, len(window)-1024):]...)
	return len(p), nil
}

// watchDirSize measures the bytes of the files under dir every few
// milliseconds until the returned function is called, which returns the
// most seen at once.
func watchDirSize(t *testing.T, dir string) (peak func() int64) {
	var most atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			var n int64
			_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() {
					if fi, err := d.Info(); err == nil {
						n += fi.Size()
					}
				}
				return nil
			})
			if n > most.Load() {
				most.Store(n)
			}
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	stop := func() int64 {
		once.Do(func() { close(done); wg.Wait() })
		return most.Load()
	}
	t.Cleanup(func() { stop() })
	return stop
}
