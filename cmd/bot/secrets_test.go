package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbot/agentbot/internal/devserver"
	"github.com/agentbot/agentbot/internal/fakeopenai"
	"github.com/agentbot/agentbot/internal/secretenv/secretenvtest"
)

// TestSecretsOutOfReach runs the real binary, embedded (dev server,
// in-process worker, local sandbox, terminal chat), with recognisable
// secrets in its environment and a model that answers only the key among
// them. A command in the local sandbox walks up its ancestors reading their
// /proc/<pid>/environ; neither that walk nor the test reading the bot's own
// /proc/<pid>/environ may find a secret, and the model must still have been
// called with the key.
func TestSecretsOutOfReach(t *testing.T) {
	temporal, err := devserver.FindBinary(os.Getenv("AGENTBOT_TEMPORAL_BIN"))
	if err != nil {
		t.Fatal(err)
	}
	bin := secretenvtest.Build(t, ".")
	key, other := secretenvtest.Secret("sk-test-"), secretenvtest.Secret("e2b-test-")
	model := fakeopenai.New(fakeopenai.Options{APIKey: key})
	t.Cleanup(model.Close)
	state := t.TempDir()

	p := secretenvtest.Start(t, bin, []string{
		"HOME=" + state, "PATH=" + os.Getenv("PATH"), "USER=tester",
		"AGENTBOT_STATE_DIR=" + state, "AGENTBOT_TEMPORAL_BIN=" + temporal,
		"AGENTBOT_TEMPORAL_UI_PORT=-1", "AGENTBOT_BACKENDS=local",
		"OPENAI_BASE_URL=" + model.URL(), "OPENAI_API_KEY=" + key, "E2B_API_KEY=" + other,
	})
	if _, err := p.Stdin.Write([]byte("sh: " + secretenvtest.WalkScript + "\n")); err != nil {
		t.Fatal(err)
	}
	walk := p.WaitWalk(t, filepath.Join(state, "sandboxes", "*", "workspace"), 2*time.Minute)
	// The worker runs in the bot: the walk passes through it.
	secretenvtest.CheckWalk(t, walk, p.Pid(), key, other)
	secretenvtest.CheckEnviron(t, p.Pid(), "AGENTBOT_STATE_DIR="+state, key, other)

	// The worker still has the key: the model, which answers nothing
	// else, was called with it (else the command would not have run).
	called := false
	for _, r := range model.Requests() {
		called = called || (r.Header.Get("Authorization") == "Bearer "+key && r.Status == 200)
	}
	if !called {
		t.Fatal("the model was never called with the key")
	}

	p.Stdin.Write([]byte("/quit\n"))
	select {
	case <-p.Done():
	case <-time.After(time.Minute):
		t.Fatalf("the bot did not quit:\n%s", p.Output())
	}
}

// TestRefusesUnsafeChat: serving Slack or Discord, the bot refuses at start
// to run with no allowlist, or with the local backend, unless told so
// explicitly, and says what to set. It stops before it reaches Temporal or
// the platform (both addresses lead nowhere).
func TestRefusesUnsafeChat(t *testing.T) {
	bin := secretenvtest.Build(t, ".")
	slack := []string{"SLACK_BOT_TOKEN=xoxb-1", "SLACK_APP_TOKEN=xapp-1"}
	for _, tc := range []struct {
		name string
		env  []string
		want []string
	}{
		{"slack, no allowlist", slack,
			[]string{"AGENTBOT_ALLOWED_USERS, AGENTBOT_ALLOWED_CHANNELS or AGENTBOT_ALLOWED_ROLES", "AGENTBOT_ALLOW_EVERYONE=true"}},
		{"discord, no allowlist", []string{"DISCORD_TOKEN=d", "DISCORD_APP_ID=1"}, []string{"AGENTBOT_ALLOW_EVERYONE=true"}},
		{"slack, local listed", append(slices.Clone(slack), "AGENTBOT_ALLOWED_CHANNELS=C1", "AGENTBOT_BACKENDS=local"),
			[]string{"AGENTBOT_BACKENDS lists local", "AGENTBOT_UNSAFE_LOCAL=true"}},
		{"slack, local default", append(slices.Clone(slack), "AGENTBOT_ALLOW_EVERYONE=true", "AGENTBOT_DEFAULT_BACKEND=local"),
			[]string{"AGENTBOT_DEFAULT_BACKEND=local", "AGENTBOT_UNSAFE_LOCAL=true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin)
			cmd.Env = append([]string{
				"HOME=" + state, "PATH=" + os.Getenv("PATH"), "AGENTBOT_STATE_DIR=" + state,
				"TEMPORAL_ADDRESS=127.0.0.1:1", "AGENTBOT_SLACK_API_URL=http://127.0.0.1:1/",
			}, tc.env...)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the bot ran:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Fatalf("the bot's error lacks %q:\n%s", w, out)
				}
			}
		})
	}
}
