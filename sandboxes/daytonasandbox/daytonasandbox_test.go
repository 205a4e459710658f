package daytonasandbox_test

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"strings"
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
