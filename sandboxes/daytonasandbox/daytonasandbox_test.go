package daytonasandbox_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbot/agentbot/internal/fakedaytona"
	"github.com/agentbot/agentbot/sandboxes"
	"github.com/agentbot/agentbot/sandboxes/daytonasandbox"
)

func newFake(t *testing.T, opts fakedaytona.Options) *fakedaytona.Server {
	t.Helper()
	opts.Logf = t.Logf
	f, err := fakedaytona.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Close()
		for _, e := range f.Errors() {
			t.Errorf("spec validation: %s", e)
		}
	})
	return f
}

func newBackend(t *testing.T, f *fakedaytona.Server, key string, mod func(*daytonasandbox.Options)) *daytonasandbox.Backend {
	t.Helper()
	o := daytonasandbox.Options{APIKey: key, APIURL: f.APIURL()}
	if mod != nil {
		mod(&o)
	}
	b, err := daytonasandbox.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAvailableNoKey(t *testing.T) {
	b, err := daytonasandbox.New(daytonasandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Available(t.Context()); !errors.Is(err, sandboxes.ErrUnavailable) {
		t.Fatalf("Available without a key: %v", err)
	}
}

func TestRejectedKeyIsPermanentAndNotLeaked(t *testing.T) {
	f := newFake(t, fakedaytona.Options{})
	const bad = "sk-very-secret-wrong-key-123"
	b := newBackend(t, f, bad, nil)
	before := f.Requests()
	for _, call := range []func() error{
		func() error { return b.Available(t.Context()) },
		func() error { _, err := b.Create(t.Context(), sandboxes.Spec{}); return err },
		func() error { _, err := b.List(t.Context()); return err },
		func() error {
			_, err := b.Attach(t.Context(), sandboxes.State{Backend: "daytona", ID: "x", Root: "/w"})
			return err
		},
	} {
		err := call()
		if !errors.Is(err, sandboxes.ErrUnavailable) || !strings.Contains(err.Error(), "Daytona rejected the API key") {
			t.Errorf("got %v, want the rejected-key error matching ErrUnavailable", err)
		}
		if err != nil && strings.Contains(err.Error(), bad) {
			t.Errorf("the key leaks in %q", err)
		}
	}
	// Permanent: one round trip per call, no retries.
	if got := f.Requests() - before; got != 0 {
		t.Errorf("%d requests passed auth", got)
	}
	if got := f.Rejected(); got != 4 {
		t.Errorf("%d requests refused, want 4 (one per call, no retries)", got)
	}
}

func TestRetry429ThenSuccess(t *testing.T) {
	f := newFake(t, fakedaytona.Options{StateDelay: 50 * time.Millisecond})
	b := newBackend(t, f, f.Key(), nil)
	f.FailNext(http.StatusTooManyRequests, http.StatusServiceUnavailable)
	before := f.Requests()
	if err := b.Available(t.Context()); err != nil {
		t.Fatalf("Available after a 429 and a 503: %v", err)
	}
	if got := f.Requests() - before; got != 3 {
		t.Errorf("%d requests, want 3 (two retried failures and a success)", got)
	}
	// A 400 is not retried.
	f.FailNext(http.StatusBadRequest)
	before = f.Requests()
	if err := b.Available(t.Context()); err == nil {
		t.Fatal("a 400 gave no error")
	}
	if got := f.Requests() - before; got != 1 {
		t.Errorf("%d requests for a 400, want 1", got)
	}
}

func TestStatePollingDeadline(t *testing.T) {
	f := newFake(t, fakedaytona.Options{StateDelay: time.Hour})
	b := newBackend(t, f, f.Key(), func(o *daytonasandbox.Options) {
		o.StateTimeout = 700 * time.Millisecond
		o.PollInterval = 50 * time.Millisecond
	})
	start := time.Now()
	_, err := b.Create(t.Context(), sandboxes.Spec{})
	if !errors.Is(err, sandboxes.ErrTimeout) || !strings.Contains(err.Error(), "creating") {
		t.Fatalf("got %v, want a timeout naming the state", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %s", took)
	}
	// The half-created sandbox was deleted.
	list, err := b.List(t.Context())
	if err != nil || len(list) != 0 {
		t.Errorf("after a failed create: %v, %v", list, err)
	}
}

func TestErrorState(t *testing.T) {
	f := newFake(t, fakedaytona.Options{StateDelay: 20 * time.Millisecond})
	b := newBackend(t, f, f.Key(), nil)
	ctx := t.Context()
	inst, err := b.Create(ctx, sandboxes.Spec{Labels: map[string]string{"x": "y"}})
	if err != nil {
		t.Fatal(err)
	}
	st := inst.State()
	if st.Backend != daytonasandbox.Name || st.Root == "" {
		t.Fatalf("state %+v", st)
	}
	list, err := b.List(ctx)
	if err != nil || len(list) != 1 || list[0].ID != st.ID {
		t.Fatalf("List: %v, %v", list, err)
	}
	f.SetState(st.ID, "error")
	if _, err := b.Attach(ctx, st); err == nil || !strings.Contains(err.Error(), `"error"`) {
		t.Fatalf("attach to an errored sandbox: %v", err)
	}
	if err := inst.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := inst.Destroy(ctx); !errors.Is(err, sandboxes.ErrNotFound) {
		t.Fatalf("second destroy: %v", err)
	}
	if _, err := b.Attach(ctx, st); !errors.Is(err, sandboxes.ErrNotFound) {
		t.Fatalf("attach after destroy: %v", err)
	}
}

func TestReadMissingFile(t *testing.T) {
	f := newFake(t, fakedaytona.Options{StateDelay: 20 * time.Millisecond})
	b := newBackend(t, f, f.Key(), nil)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	inst, err := b.Create(ctx, sandboxes.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Destroy(context.Background())
	if _, err := inst.ReadFile(ctx, "nope.txt"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("got %v", err)
	}
}

// newStarted creates a sandbox on f and destroys it when the test ends.
func newStarted(t *testing.T, b *daytonasandbox.Backend) sandboxes.Instance {
	t.Helper()
	inst, err := b.Create(t.Context(), sandboxes.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inst.Destroy(context.Background()) })
	return inst
}

// runs execs a command that appends a line to runs.log and returns how many
// lines runs.log has then and the Exec's error.
func runs(t *testing.T, inst sandboxes.Instance) (int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, execErr := inst.Exec(ctx, sandboxes.ExecRequest{Command: "echo run >>runs.log"}, io.Discard, io.Discard)
	rc, err := inst.ReadFile(ctx, "runs.log")
	if err != nil {
		t.Fatalf("reading runs.log: %v (exec: %v)", err, execErr)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(data), "run\n"), execErr
}

// TestExecNotResentAfterReset: an execute whose connection closed after
// the server ran the command must not be sent again.
func TestExecNotResentAfterReset(t *testing.T) {
	f := newFake(t, fakedaytona.Options{StateDelay: 20 * time.Millisecond})
	inst := newStarted(t, newBackend(t, f, f.Key(), nil))
	f.DropNext(http.MethodPost, "/process/execute")
	n, err := runs(t, inst)
	if n != 1 {
		t.Errorf("the command ran %d times after its answer was lost, want once", n)
	}
	if err == nil {
		t.Error("a lost answer gave no error: the exit code is unknown")
	}
}

// TestExecRetriedWhenRefused: a 429 or 503 means the command was not run,
// so the execute is sent again.
func TestExecRetriedWhenRefused(t *testing.T) {
	f := newFake(t, fakedaytona.Options{StateDelay: 20 * time.Millisecond})
	inst := newStarted(t, newBackend(t, f, f.Key(), nil))
	f.RefuseNext(http.MethodPost, "/process/execute", http.StatusTooManyRequests)
	f.RefuseNext(http.MethodPost, "/process/execute", http.StatusServiceUnavailable)
	if n, err := runs(t, inst); err != nil || n != 1 {
		t.Errorf("after a 429 and a 503: exec %v, ran %d times; want no error and once", err, n)
	}
	// A 502 may come after the server ran it: not sent again.
	f.RefuseNext(http.MethodPost, "/process/execute", http.StatusBadGateway)
	if n, err := runs(t, inst); err == nil || n != 1 {
		t.Errorf("after a 502: exec %v, runs.log has %d lines; want an error and still 1", err, n)
	}
}

// TestExecRetriedWhenNeverSent: a dial that failed sent nothing, so the
// execute is sent again.
func TestExecRetriedWhenNeverSent(t *testing.T) {
	f := newFake(t, fakedaytona.Options{StateDelay: 20 * time.Millisecond})
	var failDials atomic.Int32
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DisableKeepAlives = true // every request dials
	var d net.Dialer
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if failDials.Add(-1) >= 0 {
			return nil, &net.OpError{Op: "dial", Net: network, Err: errors.New("injected dial failure")}
		}
		return d.DialContext(ctx, network, addr)
	}
	inst := newStarted(t, newBackend(t, f, f.Key(), func(o *daytonasandbox.Options) {
		o.HTTPClient = &http.Client{Transport: tr}
	}))
	failDials.Store(1) // the execute's first dial
	if n, err := runs(t, inst); err != nil || n != 1 {
		t.Errorf("after a failed dial: exec %v, ran %d times; want no error and once", err, n)
	}
}
