package e2bsandbox

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbot/agentbot/internal/fakee2b"
	"github.com/agentbot/agentbot/sandboxes"
)

// countingTransport counts the requests that reach the network.
type countingTransport struct{ n atomic.Int32 }

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

func newFake(t *testing.T) *fakee2b.Server {
	t.Helper()
	dir := fakee2b.DefaultSpecsDir()
	f, err := fakee2b.New(fakee2b.Options{APIKey: testKey, SpecsDir: dir})
	if err != nil {
		t.Logf("no specs (%v): running the fake without validation", err)
		f, err = fakee2b.New(fakee2b.Options{APIKey: testKey})
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, msg := range f.Failures() {
			t.Error(msg)
		}
		f.Close()
	})
	return f
}

func backendFor(t *testing.T, f *fakee2b.Server, key string) (*Backend, *countingTransport) {
	t.Helper()
	ct := &countingTransport{}
	b, err := New(Options{APIKey: key, APIURL: f.URL, EnvdURL: f.EnvdURL, HTTPClient: &http.Client{Transport: ct}})
	if err != nil {
		t.Fatal(err)
	}
	return b, ct
}

func TestRejectedKeyIsPermanentAndUnavailable(t *testing.T) {
	f := newFake(t)
	badKey := "e2b_wrong_secret_key_42"
	b, ct := backendFor(t, f, badKey)
	_, err := b.Create(t.Context(), sandboxes.Spec{})
	if !errors.Is(err, sandboxes.ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), "E2B rejected the API key") {
		t.Errorf("error %q does not say the key was rejected", err)
	}
	if strings.Contains(err.Error(), badKey) {
		t.Errorf("error %q holds the key", err)
	}
	if n := ct.n.Load(); n != 1 {
		t.Errorf("%d requests; a 401 must not be retried", n)
	}
}

func TestRetry429ThenSuccess(t *testing.T) {
	f := newFake(t)
	b, ct := backendFor(t, f, testKey)
	f.FailNext(http.MethodPost, "/sandboxes", http.StatusTooManyRequests)
	f.FailNext(http.MethodPost, "/sandboxes", http.StatusServiceUnavailable)
	inst, err := b.Create(t.Context(), sandboxes.Spec{Env: map[string]string{"A": "b"}, Labels: map[string]string{"l": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	if n := ct.n.Load(); n < 3 {
		t.Errorf("%d requests, want the create tried 3 times", n)
	}
	st := inst.State()
	if st.Backend != Name || st.ID == "" || !strings.HasSuffix(st.Root, "/home/user/workspace") {
		t.Errorf("state %+v", st)
	}
	data, _ := json.Marshal(st)
	if strings.Contains(string(data), testKey) || strings.Contains(string(data), inst.(*instance).token) {
		t.Errorf("state holds a secret: %s", data)
	}
	// List finds it by metadata.
	list, err := b.List(t.Context())
	if err != nil || len(list) != 1 || list[0].ID != st.ID {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if s, err := b.Get(t.Context(), st.ID); err != nil || s != "running" {
		t.Errorf("get: %q, %v", s, err)
	}
	if err := b.SetTimeout(t.Context(), st.ID, time.Minute); err != nil {
		t.Error(err)
	}
	// Pause and resume.
	p := inst.(sandboxes.Pauser)
	if err := p.Pause(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s, _ := b.Get(t.Context(), st.ID); s != "paused" {
		t.Errorf("after pause: %q", s)
	}
	if err := p.Resume(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := inst.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := inst.Destroy(t.Context()); !errors.Is(err, sandboxes.ErrNotFound) {
		t.Errorf("second destroy: %v, want ErrNotFound", err)
	}
	if _, err := b.Get(t.Context(), st.ID); !errors.Is(err, sandboxes.ErrNotFound) {
		t.Errorf("get after destroy: %v, want ErrNotFound", err)
	}
	if _, err := b.Attach(t.Context(), st); !errors.Is(err, sandboxes.ErrNotFound) {
		t.Errorf("attach after destroy: %v, want ErrNotFound", err)
	}
}

func TestKeyNeverInErrors(t *testing.T) {
	const key = "e2b_very_secret_key_777"
	// A server that echoes the key back in its error messages.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		json.NewEncoder(w).Encode(map[string]any{"code": 500, "message": "broken for key " + r.Header.Get("X-API-Key")})
	}))
	defer srv.Close()
	b, err := New(Options{APIKey: key, APIURL: srv.URL, Retries: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = b.Create(ctx, sandboxes.Spec{})
	if err == nil || strings.Contains(err.Error(), key) {
		t.Fatalf("error %v holds the key (or is nil)", err)
	}
	_, err = b.List(ctx)
	if err == nil || strings.Contains(err.Error(), key) {
		t.Fatalf("error %v holds the key (or is nil)", err)
	}
	// Connection errors too.
	b2, _ := New(Options{APIKey: key, APIURL: "http://127.0.0.1:1", Retries: 1})
	_, err = b2.Create(ctx, sandboxes.Spec{})
	if err == nil || strings.Contains(err.Error(), key) {
		t.Fatalf("error %v holds the key (or is nil)", err)
	}
}

func TestAvailable(t *testing.T) {
	b, _ := New(Options{})
	if err := b.Available(t.Context()); !errors.Is(err, sandboxes.ErrUnavailable) || !strings.Contains(err.Error(), "no E2B_API_KEY") {
		t.Errorf("got %v", err)
	}
	b, _ = New(Options{APIKey: "k"})
	if err := b.Available(t.Context()); err != nil {
		t.Error(err)
	}
	if b.opts.APIURL != "https://api.e2b.app" || b.envdURL("abc", "") != "https://49983-abc.e2b.app" || b.envdURL("abc", "x.dev") != "https://49983-abc.x.dev" {
		t.Errorf("defaults: %q %q", b.opts.APIURL, b.envdURL("abc", ""))
	}
	if b.opts.Template != "base" || b.opts.Timeout != time.Hour {
		t.Errorf("defaults: %+v", b.opts)
	}
}

// newStarted creates a sandbox with b and destroys it when the test ends.
func newStarted(t *testing.T, b *Backend) sandboxes.Instance {
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

const startPath = "/process.Process/Start"

// TestStartNotResentAfterReset: a Start whose connection closed after envd
// ran the command must not be sent again.
func TestStartNotResentAfterReset(t *testing.T) {
	f := newFake(t)
	b, _ := backendFor(t, f, testKey)
	inst := newStarted(t, b)
	f.DropNext(http.MethodPost, startPath)
	n, err := runs(t, inst)
	if n != 1 {
		t.Errorf("the command ran %d times after its answer was lost, want once", n)
	}
	if err == nil {
		t.Error("a lost answer gave no error: the exit code is unknown")
	}
}

// TestStartRetriedWhenRefused: a 429 or 503 means the command was not
// run, so the Start is sent again; a 500 is not.
func TestStartRetriedWhenRefused(t *testing.T) {
	f := newFake(t)
	b, _ := backendFor(t, f, testKey)
	inst := newStarted(t, b)
	f.FailNext(http.MethodPost, startPath, http.StatusTooManyRequests)
	f.FailNext(http.MethodPost, startPath, http.StatusServiceUnavailable)
	if n, err := runs(t, inst); err != nil || n != 1 {
		t.Errorf("after a 429 and a 503: exec %v, ran %d times; want no error and once", err, n)
	}
	f.FailNext(http.MethodPost, startPath, http.StatusInternalServerError)
	if n, err := runs(t, inst); err == nil || n != 1 {
		t.Errorf("after a 500: exec %v, runs.log has %d lines; want an error and still 1", err, n)
	}
}

// TestStartRetriedWhenNeverSent: a dial that failed sent nothing, so the
// Start is sent again.
func TestStartRetriedWhenNeverSent(t *testing.T) {
	f := newFake(t)
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
	b, err := New(Options{APIKey: testKey, APIURL: f.URL, EnvdURL: f.EnvdURL, HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	inst := newStarted(t, b)
	failDials.Store(1) // the Start's first dial
	if n, err := runs(t, inst); err != nil || n != 1 {
		t.Errorf("after a failed dial: exec %v, ran %d times; want no error and once", err, n)
	}
}
