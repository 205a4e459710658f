package bot_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
	"github.com/agentbot/agentbot/bot/terminal"
	"github.com/agentbot/agentbot/internal/agentworker"
	"github.com/agentbot/agentbot/internal/config"
	"github.com/agentbot/agentbot/internal/testenv"
	"github.com/agentbot/agentbot/sandboxes"
)

// TestUnavailableBackend is the embedded default with the Docker backend
// enabled but its image missing, as for a new user who never built it:
// the worker (agentworker, with the real Docker backend on the real engine)
// finds at start that docker cannot run and why; the router, given those
// reasons, answers `/switch docker` typed in the terminal with that reason
// and the command that builds the image, and the session stays on local;
// `/backends` lists docker as not available, with why; `/new docker ...`
// gets the reason too rather than a session titled "docker ...".
func TestUnavailableBackend(t *testing.T) {
	ctx := context.Background()
	if err := testenv.CheckDocker(ctx); err != nil {
		t.Fatal(err)
	}
	srv, err := testenv.StartTemporal(ctx, testenv.TemporalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	tc, err := client.Dial(client.Options{HostPort: srv.FrontendHostPort(), Namespace: "default", Logger: testenv.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)

	img := "agentbot-sandbox:missing-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cfg, err := config.Load([]string{
		"OPENAI_BASE_URL=fake",
		"AGENTBOT_BACKENDS=local,docker",
		"AGENTBOT_DEFAULT_BACKEND=local",
		"AGENTBOT_DOCKER_IMAGE=" + img,
		"AGENTBOT_LOCAL_DIR=" + t.TempDir(),
		"AGENTBOT_STATE_DIR=" + t.TempDir(),
		"AGENTBOT_BLOB_URL=file://" + t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	var out testenv.Buffer
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelError}))
	w, err := agentworker.New(ctx, tc, agentworker.Options{
		Config: cfg, Logger: logger, Chat: map[string]agentflow.ChatSender{"term": terminal.NewSender(&out)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)

	if got := w.Registry.Names(); len(got) != 1 || got[0] != "local" {
		t.Errorf("registered backends %v, want [local]: docker must not be listed as available without its image", got)
	}
	var dockerErr error
	for _, u := range w.Unavailable {
		if u.Name == "docker" {
			dockerErr = u.Err
		}
	}
	if !errors.Is(dockerErr, sandboxes.ErrUnavailable) || !strings.Contains(dockerErr.Error(), img) {
		t.Fatalf("docker's unavailability at start = %v, want ErrUnavailable naming %s", dockerErr, img)
	}

	router := &bot.Router{
		Sessions: agentflow.NewClient(tc), Backends: w.Registry.Names(), DefaultBackend: cfg.DefaultBackend,
		Unavailable: w.UnavailableReasons(), Logger: logger,
	}
	chat := &terminal.Chat{
		Router: router, Client: router.Sessions, Out: &out, User: "alice",
		In: strings.NewReader("sh: echo hello\n/switch docker\n/backends\n/new docker a title\n"),
	}
	runCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := chat.Run(runCtx); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	hint := "scripts/build-sandbox-image.sh " + img
	for _, want := range []string{
		// /switch docker and /new docker:
		"The docker backend is not available here: docker image " + img + " is not present",
		hint,
		"Available: local.",
		// /backends:
		"Backends: local. Default: local.\nNot available here:\n- docker: docker image " + img,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the terminal does not show %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "The docker backend is not available here"); n != 2 {
		t.Errorf("%d answers say docker is not available, want 2 (/switch and /new):\n%s", n, got)
	}
	for _, bad := range []string{"Switching to", "could not move", "unknown backend", "Tell me what to do."} {
		if strings.Contains(got, bad) {
			t.Errorf("the terminal shows %q:\n%s", bad, got)
		}
	}
	v, err := router.Sessions.State(ctx, "term:main")
	if err != nil {
		t.Fatal(err)
	}
	if v.Backend != "local" {
		t.Errorf("the session is on %q, want local", v.Backend)
	}
}
