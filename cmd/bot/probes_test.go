package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentbot/agentbot/internal/devserver"
	"github.com/agentbot/agentbot/internal/fakeslack"
	"github.com/agentbot/agentbot/internal/secretenv/secretenvtest"
	"github.com/agentbot/agentbot/internal/testenv"
)

// TestProbes runs the real gateway in Socket Mode against the fake Slack
// workspace, a real redis-server and a real Temporal dev server, and reads
// its probes as the kubelet does while each goes away and comes back:
//
//   - all up: /readyz 200, nothing degraded;
//   - the Socket Mode connection drops and Slack refuses the reconnect
//     for a while (apps.connections.open rate-limited): 503 naming slack,
//     then 200 once it has reconnected;
//   - Redis down: still 200 (the bot works from Temporal), the body says
//     "degraded: redis"; back: no longer degraded;
//   - Temporal down: 503 naming temporal; a dev server back on the same
//     port: 200;
//
// while /healthz stays 200 throughout, and the probes are gone once the
// bot has stopped on SIGTERM.
func TestProbes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	temporal := newRestartableTemporal(ctx, t)
	redisSrv := testenv.StartRedis(ctx, t)
	slack := fakeslack.New(fakeslack.Options{})
	t.Cleanup(slack.Close)
	bin := secretenvtest.Build(t, ".")
	state := t.TempDir()
	addr := freeAddr(t)
	p := secretenvtest.Start(t, bin, []string{
		"HOME=" + state, "PATH=" + os.Getenv("PATH"), "AGENTBOT_STATE_DIR=" + state,
		"TEMPORAL_ADDRESS=" + temporal.hostPort, "REDIS_URL=" + redisSrv.URL(),
		"SLACK_BOT_TOKEN=" + slack.Options().BotToken, "SLACK_APP_TOKEN=" + slack.Options().AppToken,
		"AGENTBOT_SLACK_API_URL=" + slack.APIURL(), "AGENTBOT_ALLOWED_USERS=UALICE",
		"AGENTBOT_HTTP_ADDR=" + addr, "AGENTBOT_LOG_FORMAT=json",
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("bot output:\n%s", p.Output())
		}
	})
	base := "http://" + addr
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
	// want polls until path answers code with a body that contains body
	// and, when not empty, not notBody.
	want := func(what, path string, code int, body, notBody string) {
		t.Helper()
		deadline := time.Now().Add(45 * time.Second)
		for {
			c, b := get(path)
			if c == code && strings.Contains(b, body) && (notBody == "" || !strings.Contains(b, notBody)) {
				t.Logf("%s: %s = %d %q", what, path, c, b)
				return
			}
			select {
			case <-p.Done():
				t.Fatalf("%s: the bot exited", what)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s = %d %q, want %d with %q", what, path, c, b, code, body)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	want("all up", "/readyz", 200, "ok", "degraded")
	want("all up", "/healthz", 200, "ok", "")

	// The reconnect's apps.connections.open is answered 429 with a
	// Retry-After, so the bot stays disconnected that long.
	slack.RateLimit("apps.connections.open", 1, 8*time.Second)
	slack.DropConnections()
	want("slack dropped", "/readyz", 503, "slack: socket mode", "")
	want("slack dropped", "/healthz", 200, "ok", "")
	want("slack back", "/readyz", 200, "ok", "slack")

	redisSrv.Stop()
	want("redis down", "/readyz", 200, "degraded: redis:", "")
	if err := redisSrv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	want("redis back", "/readyz", 200, "ok", "degraded")

	temporal.stop(t)
	want("temporal down", "/readyz", 503, "temporal:", "")
	want("temporal down", "/healthz", 200, "ok", "")
	temporal.start(ctx, t)
	want("temporal back", "/readyz", 200, "ok", "temporal")

	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(time.Minute):
		t.Fatal("the bot did not stop on SIGTERM")
	}
	if c, _ := get("/healthz"); c != 0 {
		t.Errorf("the probes still answer after the bot stopped: %d", c)
	}
}

// restartableTemporal is a Temporal dev server that can be stopped and
// started again on the same port and database, as a cluster going away
// and coming back.
type restartableTemporal struct {
	bin, db, hostPort string
	log               *testenv.Buffer
	srv               *testsuite.DevServer
}

func newRestartableTemporal(ctx context.Context, t *testing.T) *restartableTemporal {
	t.Helper()
	bin, err := devserver.FindBinary(os.Getenv("AGENTBOT_TEMPORAL_BIN"))
	if err != nil {
		t.Fatalf("the tests need the temporal CLI (run scripts/setup.sh --test): %v", err)
	}
	r := &restartableTemporal{bin: bin, db: filepath.Join(t.TempDir(), "temporal.db"), hostPort: freeAddr(t), log: &testenv.Buffer{}}
	t.Cleanup(func() {
		if r.srv != nil {
			_ = r.srv.Stop()
		}
	})
	r.start(ctx, t)
	return r
}

func (r *restartableTemporal) start(ctx context.Context, t *testing.T) {
	t.Helper()
	// The port may linger a moment after the last server stopped.
	var err error
	for range 10 {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		r.srv, err = testsuite.StartDevServer(sctx, testsuite.DevServerOptions{
			ExistingPath: r.bin, DBFilename: r.db, LogLevel: "error", Stdout: r.log, Stderr: r.log,
			ClientOptions: &client.Options{HostPort: r.hostPort, Namespace: "default", Logger: testenv.Logger()},
		})
		cancel()
		if err == nil {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("starting the Temporal dev server on %s: %v\n%s", r.hostPort, err, r.log.String())
}

func (r *restartableTemporal) stop(t *testing.T) {
	t.Helper()
	if err := r.srv.Stop(); err != nil {
		t.Logf("stopping the dev server: %v", err)
	}
	r.srv = nil
}

// freeAddr returns a loopback address with a port that was free.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
