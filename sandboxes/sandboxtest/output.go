package sandboxtest

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/agentbot/agentbot/sandboxes"
)

// testHugeOutput runs a command that prints far more than the exec
// contract lets a caller's writer receive: ExecRequest.Stdout gets at most
// MaxStream bytes, the head as it comes and the tail at the end, and is told
// through Skip how many bytes it did not get, so head, tail and count add up
// to the whole stream. The result keeps its own MaxOutput head and tail.
func (s *suite) testHugeOutput(t *testing.T) {
	ctx := testContext(t)
	sb := s.newSandbox(t)
	const (
		limit     = 1000
		maxStream = 1 << 20
		fill      = 24_000_000
		total     = len("START\n") + fill + len("END\n")
	)
	var out, errOut streamRecorder
	res, err := sb.Exec(ctx, sandboxes.ExecRequest{
		Command:   fmt.Sprintf(`echo START; yes | head -c %d; echo END; echo small >&2`, fill),
		MaxOutput: limit,
		MaxStream: maxStream,
		Stdout:    &out,
		Stderr:    &errOut,
	})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: exit code %d, %v, stderr %q", res.ExitCode, err, res.Stderr.String())
	}
	checkCapped(t, "stdout", res.Stdout, limit, total, "START\n", "y\nEND\n")
	if got := res.Stderr.String(); got != "small\n" {
		t.Errorf("stderr %q, want %q", got, "small\n")
	}

	out.mu.Lock()
	defer out.mu.Unlock()
	if out.n > maxStream {
		t.Errorf("ExecRequest.Stdout got %d bytes, more than MaxStream %d", out.n, maxStream)
	}
	if out.n < maxStream/2 {
		t.Errorf("ExecRequest.Stdout got %d bytes: of a %d-byte stream it must get the first and last MaxStream/2 (%d) bytes", out.n, total, maxStream/2)
	}
	if out.n+out.skipped != total || out.skips != 1 {
		t.Errorf("ExecRequest.Stdout got %d bytes and %d Skip calls for %d bytes, want %d bytes in all, in one Skip",
			out.n, out.skips, out.skipped, total)
	}
	if !strings.HasPrefix(out.head.String(), "START\ny\ny\n") {
		t.Errorf("ExecRequest.Stdout does not start with the stream's head: %.40q", out.head.String())
	}
	if tail := out.tail(); !strings.HasSuffix(tail, "y\ny\nEND\n") {
		t.Errorf("ExecRequest.Stdout does not end with the stream's tail: %q", tail)
	}
	if out.afterSkip < maxStream/2 {
		t.Errorf("after the Skip, ExecRequest.Stdout got %d bytes; the tail is the last MaxStream/2 (%d)", out.afterSkip, maxStream/2)
	}
	errOut.mu.Lock()
	defer errOut.mu.Unlock()
	if errOut.head.String() != "small\n" || errOut.skips != 0 {
		t.Errorf("ExecRequest.Stderr got %q and %d Skip calls, want %q and none", errOut.head.String(), errOut.skips, "small\n")
	}
}

// testSnapshotLeavesOutOutputs: a snapshot carries the workspace without
// sandboxes.OutputsDir, where callers keep commands' outputs; the rest of
// its parent directory is carried.
func (s *suite) testSnapshotLeavesOutOutputs(t *testing.T) {
	ctx := testContext(t)
	sb := s.newSandbox(t)
	writeFile(t, ctx, sb, sandboxes.OutputsDir+"/turn1-step1-call.log", []byte(strings.Repeat("output\n", 1000)), 0o644)
	writeFile(t, ctx, sb, sandboxes.OutputsDir+"/sub/deeper.log", []byte("deeper"), 0o644)
	writeFile(t, ctx, sb, ".agentbot/kept.txt", []byte("kept"), 0o644)
	writeFile(t, ctx, sb, "work.txt", []byte("work"), 0o644)
	tree, info := listTree(t, ctx, sb)
	names := map[string]bool{}
	for _, e := range tree {
		names[e.Name] = true
		if e.Name == sandboxes.OutputsDir || strings.HasPrefix(e.Name, sandboxes.OutputsDir+"/") {
			t.Errorf("the snapshot carries %s", e)
		}
	}
	for _, want := range []string{".agentbot", ".agentbot/kept.txt", "work.txt"} {
		if !names[want] {
			t.Errorf("the snapshot lacks %s:\n%s", want, formatTree(tree))
		}
	}
	if info.Bytes != int64(len("kept")+len("work")) {
		t.Errorf("the snapshot holds %d bytes of files, want %d", info.Bytes, len("kept")+len("work"))
	}
}

// streamRecorder is an ExecRequest writer that keeps the first kilobyte,
// the last kilobyte and the counts of what it was given, Skip included.
type streamRecorder struct {
	mu        sync.Mutex
	head      strings.Builder
	last      []byte
	n         int // bytes written
	skipped   int // bytes announced by Skip
	skips     int // calls of Skip
	afterSkip int // bytes written after the last Skip
}

var _ sandboxes.Skipper = (*streamRecorder)(nil)

func (r *streamRecorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if room := 1024 - r.head.Len(); room > 0 {
		r.head.Write(p[:min(room, len(p))])
	}
	r.last = append(r.last, p...)
	if len(r.last) > 1024 {
		r.last = append(r.last[:0], r.last[len(r.last)-1024:]...)
	}
	r.n += len(p)
	r.afterSkip += len(p)
	return len(p), nil
}

func (r *streamRecorder) Skip(n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.skipped += int(n)
	r.skips++
	r.afterSkip = 0
}

// tail returns the last kilobyte written; r.mu is held.
func (r *streamRecorder) tail() string { return string(r.last) }
