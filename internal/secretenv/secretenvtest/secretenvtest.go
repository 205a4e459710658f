// Package secretenvtest checks, from a test, that a running agentbot
// binary keeps its secrets out of reach: out of its own
// /proc/<pid>/environ, and out of the environment blocks a command in its
// local sandbox can read by walking up its ancestors. cmd/bot and cmd/worker
// use it in their tests of the real binaries.
package secretenvtest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// WalkScript is a shell command that writes to walk.txt, in its working
// directory, the environment block of every ancestor of the command up to
// init, each after a line "== <pid> <comm>", then "== end"; the file
// appears whole (renamed into place). It is what someone looking for the
// keys of the process running their command would do.
const WalkScript = `p=$PPID; while [ "$p" -gt 1 ]; do echo "== $p $(cat /proc/$p/comm)"; tr '\0' '\n' </proc/$p/environ; echo; p=$(sed -n 's/^PPid:[[:space:]]*//p' /proc/$p/status); done >walk.tmp 2>&1; echo "== end" >>walk.tmp; mv walk.tmp walk.txt`

// Secret returns a recognisable random value starting with prefix.
func Secret(prefix string) string {
	b := make([]byte, 8)
	rand.Read(b) // never fails (crypto/rand)
	return prefix + hex.EncodeToString(b)
}

// Build builds the main package in dir (relative to the test's package
// directory, e.g. ".") into a temporary directory and returns the binary.
func Build(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bin")
	if out, err := exec.Command("go", "build", "-o", bin, dir).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// Process is a binary started by Start.
type Process struct {
	Cmd   *exec.Cmd
	Stdin io.WriteCloser
	out   syncBuffer
	done  chan struct{}
}

// Start starts bin with exactly env. At the end of the test, a process
// still running is asked to stop (SIGTERM: agentbot's binaries then stop
// their dev server and worker) and killed if it has not within 30 seconds.
func Start(t *testing.T, bin string, env []string) *Process {
	t.Helper()
	p := &Process{Cmd: exec.Command(bin), done: make(chan struct{})}
	p.Cmd.Env = env
	var err error
	if p.Stdin, err = p.Cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	p.Cmd.Stdout, p.Cmd.Stderr = &p.out, &p.out
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.Cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Stdin.Close()
		select {
		case <-p.done:
			return
		default:
		}
		p.Cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			p.Cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// Pid is the process's ID.
func (p *Process) Pid() int { return p.Cmd.Process.Pid }

// Output is what the process wrote to stdout and stderr so far.
func (p *Process) Output() string { return p.out.String() }

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// WaitOutput waits until the process's output contains s.
func (p *Process) WaitOutput(t *testing.T, s string, timeout time.Duration) {
	t.Helper()
	p.wait(t, timeout, "output "+strconv.Quote(s), func() bool { return strings.Contains(p.Output(), s) })
}

// WaitWalk waits for WalkScript's file in any directory matching the glob
// pattern dir and returns its contents.
func (p *Process) WaitWalk(t *testing.T, dir string, timeout time.Duration) string {
	t.Helper()
	var walk []byte
	p.wait(t, timeout, "walk.txt in "+dir, func() bool {
		files, _ := filepath.Glob(filepath.Join(dir, "walk.txt"))
		if len(files) == 0 {
			return false
		}
		var err error
		if walk, err = os.ReadFile(files[0]); err != nil {
			t.Fatal(err)
		}
		return true
	})
	return string(walk)
}

func (p *Process) wait(t *testing.T, timeout time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.After(timeout)
	for !ok() {
		select {
		case <-p.done:
			if ok() {
				return
			}
			t.Fatalf("the process exited before %s:\n%s", what, p.Output())
		case <-deadline:
			t.Fatalf("no %s after %v:\n%s", what, timeout, p.Output())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// CheckWalk fails the test when walk, WalkScript's output, did not pass
// through the process pid or shows any of secrets.
func CheckWalk(t *testing.T, walk string, pid int, secrets ...string) {
	t.Helper()
	if !strings.Contains(walk, "== "+strconv.Itoa(pid)+" ") || !strings.HasSuffix(walk, "== end\n") {
		t.Fatalf("the walk did not pass through process %d:\n%s", pid, walk)
	}
	for _, s := range secrets {
		if strings.Contains(walk, s) {
			t.Errorf("a sandbox command found the secret %q in an ancestor's environment", s)
		}
	}
}

// CheckEnviron reads /proc/<pid>/environ: it must show want (so that the
// read is real) and none of secrets. When we are not root, a process that
// is not dumpable cannot be read at all; that is fine too.
func CheckEnviron(t *testing.T, pid int, want string, secrets ...string) {
	t.Helper()
	environ, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if errors.Is(err, fs.ErrPermission) && os.Geteuid() != 0 {
		t.Logf("/proc/%d/environ is unreadable to us (the process is not dumpable)", pid)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(environ, []byte(want)) {
		t.Fatalf("/proc/%d/environ lacks %q: not the process we started?", pid, want)
	}
	for _, s := range secrets {
		if bytes.Contains(environ, []byte(s)) {
			t.Errorf("/proc/%d/environ holds the secret %q", pid, s)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a process's output and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
