package health

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestProbes(t *testing.T) {
	var p Probes
	var temporalErr error
	p.Add("temporal", func(context.Context) error { return temporalErr })
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
	}{
		{name: "starting", act: func() {}, wantHealth: 200, wantReady: 503, wantBody: "starting"},
		{name: "ready", act: p.SetReady, wantHealth: 200, wantReady: 200, wantBody: "ok"},
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
			if code != step.wantReady || !strings.Contains(body, step.wantBody) {
				t.Errorf("/readyz = %d %q, want %d with %q", code, body, step.wantReady, step.wantBody)
			}
		})
	}
}
