package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/internal/fakeopenai"
	"github.com/agentbot/agentbot/internal/secretenv/secretenvtest"
	"github.com/agentbot/agentbot/internal/testenv"
)

// TestSecretsOutOfReach runs the real worker with recognisable secrets in
// its environment and a model that answers only the key among them, and
// gives it a session on the local backend whose command walks up its
// ancestors reading their /proc/<pid>/environ. Neither that walk nor the
// test reading the worker's /proc/<pid>/environ may find a secret, and the
// model must still have been called with the key.
func TestSecretsOutOfReach(t *testing.T) {
	srv := startTemporal(t)
	bin := secretenvtest.Build(t, ".")
	key, other := secretenvtest.Secret("sk-test-"), secretenvtest.Secret("dtn-test-")
	model := fakeopenai.New(fakeopenai.Options{APIKey: key})
	t.Cleanup(model.Close)
	state := t.TempDir()

	p := secretenvtest.Start(t, bin, []string{
		"HOME=" + state, "PATH=" + os.Getenv("PATH"),
		"TEMPORAL_ADDRESS=" + srv.FrontendHostPort(), "AGENTBOT_STATE_DIR=" + state, "AGENTBOT_BACKENDS=local",
		"AGENTBOT_HTTP_ADDR=127.0.0.1:0",
		"OPENAI_BASE_URL=" + model.URL(), "OPENAI_API_KEY=" + key, "DAYTONA_API_KEY=" + other,
	})
	p.WaitOutput(t, "worker started", time.Minute)

	tc, err := client.Dial(client.Options{HostPort: srv.FrontendHostPort(), Logger: testenv.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := agentflow.NewClient(tc).Send(ctx, agentflow.AgentInput{ThreadKey: "term:secrets", Backend: "local"},
		agentflow.MessageRequest{ID: "walk", Text: "sh: " + secretenvtest.WalkScript}); err != nil {
		t.Fatal(err)
	}
	walk := p.WaitWalk(t, filepath.Join(state, "sandboxes", "*", "workspace"), 2*time.Minute)
	secretenvtest.CheckWalk(t, walk, p.Pid(), key, other)
	secretenvtest.CheckEnviron(t, p.Pid(), "TEMPORAL_ADDRESS="+srv.FrontendHostPort(), key, other)

	called := false
	for _, r := range model.Requests() {
		called = called || (r.Header.Get("Authorization") == "Bearer "+key && r.Status == 200)
	}
	if !called {
		t.Fatal("the model was never called with the key")
	}
}

// TestLocalOffInChat: a worker that delivers to a chat platform runs no
// local sandbox unless AGENTBOT_UNSAFE_LOCAL=true, and then says loudly
// what that means.
func TestLocalOffInChat(t *testing.T) {
	srv := startTemporal(t)
	bin := secretenvtest.Build(t, ".")
	for _, tc := range []struct {
		name        string
		env         []string
		want        []string
		wantStarted string
	}{
		{name: "off", want: []string{"local: off while serving a chat platform", "AGENTBOT_UNSAFE_LOCAL=true turns it on"},
			wantStarted: "backends=[docker]"},
		{name: "unsafe", env: []string{"AGENTBOT_UNSAFE_LOCAL=true"},
			want:        []string{"level=WARN msg=\"UNSAFE: AGENTBOT_UNSAFE_LOCAL=true: the local backend is on while serving Slack; it is NOT isolated"},
			wantStarted: "backends=\"[docker local]\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			p := secretenvtest.Start(t, bin, append([]string{
				"HOME=" + state, "PATH=" + os.Getenv("PATH"), "OPENAI_BASE_URL=fake",
				"TEMPORAL_ADDRESS=" + srv.FrontendHostPort(), "AGENTBOT_STATE_DIR=" + state,
				"AGENTBOT_DOCKER_IMAGE=" + testenv.TestImage(), "AGENTBOT_HTTP_ADDR=127.0.0.1:0",
				"SLACK_BOT_TOKEN=xoxb-1", "SLACK_SIGNING_SECRET=s", "AGENTBOT_SLACK_API_URL=http://127.0.0.1:1/",
			}, tc.env...))
			p.WaitOutput(t, "worker started", time.Minute)
			out := p.Output()
			for _, w := range append(tc.want, tc.wantStarted) {
				if !strings.Contains(out, w) {
					t.Errorf("the worker's log lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// startTemporal starts a dev server for the test.
func startTemporal(t *testing.T) *testsuite.DevServer {
	t.Helper()
	srv, err := testenv.StartTemporal(context.Background(), testenv.TemporalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	return srv
}
