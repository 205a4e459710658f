package main

import (
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbot/agentbot/internal/secretenv/secretenvtest"
)

// TestProbes runs the real worker and reads its probes the way the
// kubelet does: /readyz is 200 once it polls and 503 naming Temporal while
// Temporal is gone, while /healthz stays 200 (a Temporal outage must not
// restart every worker); a worker told to stop is not ready while it
// drains.
func TestProbes(t *testing.T) {
	srv := startTemporal(t)
	bin := secretenvtest.Build(t, ".")
	state := t.TempDir()
	p := secretenvtest.Start(t, bin, []string{
		"HOME=" + state, "PATH=" + os.Getenv("PATH"), "OPENAI_BASE_URL=fake",
		"TEMPORAL_ADDRESS=" + srv.FrontendHostPort(), "AGENTBOT_STATE_DIR=" + state, "AGENTBOT_BACKENDS=local",
		"AGENTBOT_HTTP_ADDR=127.0.0.1:0", "AGENTBOT_DRAIN_TIMEOUT=30s",
	})
	p.WaitOutput(t, "worker started", time.Minute)
	m := regexp.MustCompile(`msg="serving health endpoints" addr=(\S+)`).FindStringSubmatch(p.Output())
	if m == nil {
		t.Fatalf("the worker does not say where its probes are:\n%s", p.Output())
	}
	base := "http://" + m[1]
	get := func(path string) (int, string) {
		t.Helper()
		c := http.Client{Timeout: 10 * time.Second}
		resp, err := c.Get(base + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// want polls until path answers code with a body containing body.
	want := func(path string, code int, body string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			c, b := get(path)
			if c == code && strings.Contains(b, body) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s = %d %q, want %d with %q", path, c, b, code, body)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	want("/healthz", 200, "ok")
	want("/readyz", 200, "ok")

	if err := srv.Stop(); err != nil {
		t.Logf("stopping the dev server: %v", err)
	}
	want("/readyz", 503, "temporal:")
	want("/healthz", 200, "ok")

	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(time.Minute):
		t.Fatalf("the worker did not stop on SIGTERM:\n%s", p.Output())
	}
	if c, _ := get("/healthz"); c != 0 {
		t.Errorf("the probes still answer after the worker stopped: %d", c)
	}
}
