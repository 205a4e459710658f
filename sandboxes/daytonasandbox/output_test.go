package daytonasandbox_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbot/agentbot/sandboxes"
	"github.com/agentbot/agentbot/sandboxes/daytonasandbox"
)

// TestExecReadsBoundedOutput: of a command that prints 64 MB, the backend
// reads from the toolbox no more than MaxStream bytes of the stream (plus
// the encoding's overhead), not the whole output file, and the result
// keeps its head and tail with the cut counted.
func TestExecReadsBoundedOutput(t *testing.T) {
	const (
		fill      = 64_000_000
		maxStream = 2 << 20
		total     = len("FIRST\n") + fill + len("LAST\n")
		// base64 (4/3) and the small answers of the polls.
		bound = maxStream*4/3 + 256<<10
	)
	var read atomic.Int64
	hc := &http.Client{Transport: countingTransport{rt: http.DefaultTransport.(*http.Transport).Clone(), n: &read}}
	b, err := daytonasandbox.New(daytonasandbox.Options{APIKey: os.Getenv(fakeKeyEnv), APIURL: os.Getenv(fakeURLEnv),
		RequestTimeout: requestTimeout, HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	reg := sandboxes.NewRegistry()
	if err := reg.Register(daytonasandbox.Name, b); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, err := reg.Create(ctx, daytonasandbox.Name, sandboxes.Spec{Name: "output-bound"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sb.Destroy(dctx); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})

	var got countWriter
	read.Store(0)
	res, err := sb.Exec(ctx, sandboxes.ExecRequest{
		Command:   fmt.Sprintf("echo FIRST; yes | head -c %d; echo LAST", fill),
		MaxStream: maxStream,
		Stdout:    &got,
	})
	n := read.Load()
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: exit code %d, %v, stderr %q", res.ExitCode, err, res.Stderr.String())
	}
	t.Logf("read %d bytes from the toolbox for a %d-byte stream", n, total)
	if n > bound {
		t.Errorf("read %d bytes from the toolbox for a %d-byte stream; MaxStream is %d, so at most %d", n, total, maxStream, bound)
	}
	if !res.Stdout.Truncated() || res.Stdout.Len() != int64(total) {
		t.Errorf("stdout: %d bytes in all, truncated %v; want %d, truncated", res.Stdout.Len(), res.Stdout.Truncated(), total)
	}
	if !strings.HasPrefix(string(res.Stdout.Head), "FIRST\ny\n") || !strings.HasSuffix(string(res.Stdout.Tail), "y\nLAST\n") {
		t.Errorf("stdout head %.20q..., tail ...%q", res.Stdout.Head, res.Stdout.Tail[max(0, len(res.Stdout.Tail)-20):])
	}
	if gn, gs := got.n.Load(), got.skipped.Load(); gn > maxStream || gn+gs != int64(total) {
		t.Errorf("ExecRequest.Stdout got %d bytes and a Skip of %d, want at most %d and %d in all", gn, gs, maxStream, total)
	}
}

// countingTransport counts the bytes of every answer's body.
type countingTransport struct {
	rt http.RoundTripper
	n  *atomic.Int64
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(r)
	if err == nil {
		resp.Body = countingBody{ReadCloser: resp.Body, n: c.n}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	k, err := b.ReadCloser.Read(p)
	b.n.Add(int64(k))
	return k, err
}

// countWriter counts what it is given, Skip included.
type countWriter struct{ n, skipped atomic.Int64 }

func (w *countWriter) Write(p []byte) (int, error) { w.n.Add(int64(len(p))); return len(p), nil }
func (w *countWriter) Skip(n int64)                { w.skipped.Add(n) }

// TestExecOutputFileRemoved: a command that deletes its own output files
// (they are under the sandbox's home) still ends: Exec returns what it read.
func TestExecOutputFileRemoved(t *testing.T) {
	b, err := daytonasandbox.New(daytonasandbox.Options{APIKey: os.Getenv(fakeKeyEnv), APIURL: os.Getenv(fakeURLEnv),
		RequestTimeout: requestTimeout})
	if err != nil {
		t.Fatal(err)
	}
	reg := sandboxes.NewRegistry()
	if err := reg.Register(daytonasandbox.Name, b); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := reg.Create(ctx, daytonasandbox.Name, sandboxes.Spec{Name: "output-removed"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sb.Destroy(dctx); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	res, err := sb.Exec(ctx, sandboxes.ExecRequest{
		Command:   `yes | head -c 3000000; sleep 1; rm -f "$HOME"/.agentbot-tmp/*.out`,
		MaxStream: 1 << 20,
		Timeout:   time.Minute,
	})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: exit code %d, %v", res.ExitCode, err)
	}
	if !strings.HasPrefix(string(res.Stdout.Head), "y\ny\n") {
		t.Errorf("stdout head %.20q", res.Stdout.Head)
	}
}
