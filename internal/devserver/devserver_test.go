package devserver_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/agentbot/agentbot/internal/devserver"
)

// temporalBin finds the CLI: $AGENTBOT_TEMPORAL_BIN, then
// PATH, then the repository's .bin. These tests exercise the real server, so a
// missing binary is a failure, not a skip.
func temporalBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("AGENTBOT_TEMPORAL_BIN"); p != "" {
		return p
	}
	p, err := devserver.FindBinary("")
	if err != nil {
		t.Fatalf("temporal CLI needed for this test (set AGENTBOT_TEMPORAL_BIN or run scripts/setup.sh): %v", err)
	}
	return p
}

func startServer(t *testing.T, ctx context.Context, opts devserver.Options) *devserver.Server {
	t.Helper()
	if opts.Path == "" {
		opts.Path = temporalBin(t)
	}
	s, err := devserver.Start(ctx, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

func dial(t *testing.T, ctx context.Context, addr string) client.Client {
	t.Helper()
	c, err := client.DialContext(ctx, client.Options{
		HostPort: addr,
		Logger:   sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
	})
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestStartStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	var out syncBuffer
	s := startServer(t, ctx, devserver.Options{
		StateDir: t.TempDir(),
		LogLevel: "info",
		Stdout:   &out,
		Stderr:   &out,
	})

	host, port, err := net.SplitHostPort(s.Address())
	if err != nil || host != "127.0.0.1" || port == "0" {
		t.Fatalf("Address() = %q, want 127.0.0.1:<port>", s.Address())
	}
	p, _ := strconv.Atoi(port)
	if want := "http://127.0.0.1:" + strconv.Itoa(p+1000); s.UIAddress() != want {
		t.Errorf("UIAddress() = %q, want %q", s.UIAddress(), want)
	}

	c := dial(t, ctx, s.Address())
	if _, err := c.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		t.Fatalf("CheckHealth: %v", err)
	}
	resp, err := http.Get(s.UIAddress())
	if err != nil {
		t.Fatalf("GET UI: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 500 {
		t.Errorf("GET UI: %s", resp.Status)
	}
	if out.Len() == 0 {
		t.Error("Stdout/Stderr got no server output")
	}

	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed after Stop returned")
	}
	if err := s.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if conn, err := net.DialTimeout("tcp", s.Address(), time.Second); err == nil {
		conn.Close()
		t.Errorf("%s still accepts connections after Stop", s.Address())
	}
}

func TestHeadlessAndNamespace(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	s := startServer(t, ctx, devserver.Options{UIPort: -1, Namespace: "agentbot-test"})
	if s.UIAddress() != "" {
		t.Errorf("UIAddress() = %q, want empty when headless", s.UIAddress())
	}
	nc, err := client.NewNamespaceClient(client.Options{
		HostPort: s.Address(),
		Logger:   sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Describe(ctx, "agentbot-test"); err != nil {
		t.Errorf("namespace agentbot-test not created: %v", err)
	}
}

// TestPersistence starts a workflow (no worker, so it stays running), restarts
// the server on the same state dir, and finds the workflow again.
func TestPersistence(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	dir := t.TempDir()
	const id = "devserver-persistence"

	s1 := startServer(t, ctx, devserver.Options{StateDir: dir, UIPort: -1})
	c1 := dial(t, ctx, s1.Address())
	run, err := c1.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: "nobody-listens"}, "NoSuchWorkflow")
	if err != nil {
		t.Fatalf("ExecuteWorkflow: %v", err)
	}
	c1.Close()
	if err := s1.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, devserver.DBFileName)); err != nil {
		t.Fatalf("state file: %v", err)
	}

	s2 := startServer(t, ctx, devserver.Options{StateDir: dir, UIPort: -1})
	c2 := dial(t, ctx, s2.Address())
	desc, err := c2.DescribeWorkflow(ctx, id, "")
	if err != nil {
		t.Fatalf("after restart, DescribeWorkflow(%s): %v", id, err)
	}
	info := desc.RawResponse.GetWorkflowExecutionInfo()
	if got := info.GetExecution().GetRunId(); got != run.GetRunID() {
		t.Errorf("run ID after restart = %s, want %s", got, run.GetRunID())
	}
	if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Errorf("status after restart = %v, want running", info.GetStatus())
	}
}

func TestContextDoneStopsServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	lifeCtx, stop := context.WithCancel(ctx)
	s := startServer(t, lifeCtx, devserver.Options{UIPort: -1})
	stop()
	select {
	case <-s.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("server still running 15 s after its context was cancelled")
	}
	if err := s.Stop(); err != nil {
		t.Errorf("Stop after context stop: %v", err)
	}
}

func TestPortInUse(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port

	_, err = devserver.Start(ctx, devserver.Options{Path: temporalBin(t), Port: port, UIPort: -1})
	if !errors.Is(err, devserver.ErrPortInUse) {
		t.Fatalf("Start on a taken port: err = %v, want ErrPortInUse", err)
	}
	var se *devserver.StartError
	if !errors.As(err, &se) || !strings.Contains(se.Output, strconv.Itoa(port)) {
		t.Errorf("error does not carry the server's output naming port %d: %v", port, err)
	}
}

func TestMissingBinary(t *testing.T) {
	ctx := t.Context()
	missing := filepath.Join(t.TempDir(), "temporal")
	_, err := devserver.Start(ctx, devserver.Options{Path: missing})
	if !errors.Is(err, devserver.ErrBinaryNotFound) {
		t.Fatalf("err = %v, want ErrBinaryNotFound", err)
	}
	if !strings.Contains(err.Error(), "scripts/setup.sh") {
		t.Errorf("error %q does not tell the user to run scripts/setup.sh", err)
	}

	t.Run("nothing on PATH or in .bin", func(t *testing.T) {
		t.Setenv("PATH", "")
		t.Chdir(t.TempDir())
		_, err := devserver.Start(ctx, devserver.Options{})
		if !errors.Is(err, devserver.ErrBinaryNotFound) {
			t.Fatalf("err = %v, want ErrBinaryNotFound", err)
		}
	})
}

func TestFindBinaryRepoBin(t *testing.T) {
	root := t.TempDir()
	bin := filepath.Join(root, ".bin", "temporal")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	deep := filepath.Join(root, "a", "b")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", "")
	t.Chdir(deep)
	got, err := devserver.FindBinary("")
	if err != nil {
		t.Fatal(err)
	}
	if got != bin {
		t.Errorf("FindBinary = %q, want %q", got, bin)
	}
}

// TestEarlyExitOutput runs a fake CLI that fails at once, to check the start
// error says so and carries its output.
func TestEarlyExitOutput(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "temporal")
	script := "#!/bin/sh\necho \"args: $*\"\necho 'boom: something broke' >&2\nexit 3\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	_, err := devserver.Start(t.Context(), devserver.Options{Path: fake, Port: 7999, Stderr: &stderr})
	if !errors.Is(err, devserver.ErrExited) {
		t.Fatalf("err = %v, want ErrExited", err)
	}
	if errors.Is(err, devserver.ErrPortInUse) {
		t.Errorf("err = %v, should not claim the port is taken", err)
	}
	for _, want := range []string{"boom: something broke", "exit status 3",
		"args: server start-dev --ip 127.0.0.1 --port 7999 --ui-port 8999 --namespace default --log-level error"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if !strings.Contains(stderr.String(), "boom") {
		t.Errorf("Stderr writer got %q", stderr.String())
	}
}

func TestOptionsValidation(t *testing.T) {
	tests := []struct {
		name string
		opts devserver.Options
		want string
	}{
		{"bad log level", devserver.Options{LogLevel: "loud"}, "log level"},
		{"negative port", devserver.Options{Port: -1}, "port -1"},
		{"port too big", devserver.Options{Port: 70000}, "port 70000"},
		{"ui port below -1", devserver.Options{UIPort: -2}, "UI port -2"},
		{"no room for ui", devserver.Options{Port: 65000}, "port+1000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Path = "/nonexistent/never-run"
			_, err := devserver.Start(t.Context(), tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of the server's
// stdout and stderr copiers.
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

func (s *syncBuffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}

var _ io.Writer = (*syncBuffer)(nil)
