package health

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

func TestProbes(t *testing.T) {
	var p Probes
	var temporalErr, redisErr error
	p.Add("temporal", func(context.Context) error { return temporalErr })
	p.AddDegraded("redis", func(context.Context) error { return redisErr })
	mux := http.NewServeMux()
	p.Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, step := range []struct {
		name       string
		act        func()
		wantHealth int
		wantReady  int
		wantBody   string
		notBody    string
	}{
		{name: "starting", act: func() {}, wantHealth: 200, wantReady: 503, wantBody: "starting"},
		{name: "ready", act: p.SetReady, wantHealth: 200, wantReady: 200, wantBody: "ok", notBody: "degraded"},
		{name: "redis down is degraded, still ready", act: func() { redisErr = errors.New("dial tcp: connection refused") },
			wantHealth: 200, wantReady: 200, wantBody: "ok\ndegraded: redis: dial tcp: connection refused\n"},
		{name: "redis down and temporal down", act: func() { temporalErr = errors.New("unavailable") },
			wantHealth: 200, wantReady: 503, wantBody: "not ready: temporal: unavailable\ndegraded: redis: dial tcp"},
		{name: "both back", act: func() { temporalErr, redisErr = nil, nil }, wantHealth: 200, wantReady: 200, wantBody: "ok", notBody: "degraded"},
		{name: "temporal down", act: func() { temporalErr = errors.New("connection refused") }, wantHealth: 200, wantReady: 503,
			wantBody: "temporal: connection refused"},
		{name: "temporal back", act: func() { temporalErr = nil }, wantHealth: 200, wantReady: 200, wantBody: "ok"},
		{name: "stopping", act: p.SetStopping, wantHealth: 200, wantReady: 503, wantBody: "stopping"},
	} {
		t.Run(step.name, func(t *testing.T) {
			step.act()
			if code, _ := get("/healthz"); code != step.wantHealth {
				t.Errorf("/healthz = %d, want %d", code, step.wantHealth)
			}
			code, body := get("/readyz")
			if code != step.wantReady || !strings.Contains(body, step.wantBody) || (step.notBody != "" && strings.Contains(body, step.notBody)) {
				t.Errorf("/readyz = %d %q, want %d with %q", code, body, step.wantReady, step.wantBody)
			}
		})
	}
}

// TestChecksRunTogether: the checks run at once, so a probe's own timeout
// is not spent waiting for them one after another. Each check waits until
// all three have started: run in turn, the first would wait out its
// CheckTimeout and fail.
func TestChecksRunTogether(t *testing.T) {
	var p Probes
	var started sync.WaitGroup
	started.Add(3)
	all := make(chan struct{})
	go func() { started.Wait(); close(all) }()
	meet := func(ctx context.Context) error {
		started.Done()
		select {
		case <-all:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p.Add("a", meet)
	p.Add("b", meet)
	p.AddDegraded("c", meet)
	p.SetReady()
	if st := p.Status(context.Background()); st.Err != nil || len(st.Degraded) != 0 {
		t.Errorf("status = %+v, want ready and nothing degraded", st)
	}
}
