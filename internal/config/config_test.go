package config

import (
	"strings"
	"testing"
	"time"
)

func TestLoad(t *testing.T) {
	base := []string{"HOME=/home/u"}
	tests := []struct {
		name    string
		env     []string
		wantErr []string
		check   func(t *testing.T, c Config)
	}{
		{name: "defaults", check: func(t *testing.T, c Config) {
			if c.TemporalAddress != "" || c.StateDir != "/home/u/.local/state/agentbot" ||
				c.BlobURL != "file:///home/u/.local/state/agentbot/blobs" || c.ModelAPI != "chat" ||
				c.IdleTimeout != 30*time.Minute || c.DefaultBackend != "local" || c.DockerNetwork != "none" {
				t.Fatalf("defaults: %+v", c)
			}
		}},
		{name: "xdg state", env: []string{"XDG_STATE_HOME=/xdg"}, check: func(t *testing.T, c Config) {
			if c.StateDir != "/xdg/agentbot" || c.LocalDir != "/xdg/agentbot/sandboxes" {
				t.Fatalf("%+v", c)
			}
		}},
		{name: "secrets collected", env: []string{"OPENAI_API_KEY=sk-abcdef123"}, check: func(t *testing.T, c Config) {
			if len(c.Secrets) != 1 || c.Secrets[0] != "sk-abcdef123" {
				t.Fatalf("secrets %v", c.Secrets)
			}
		}},
		{name: "backends list", env: []string{"AGENTBOT_BACKENDS=local, docker"}, check: func(t *testing.T, c Config) {
			if !c.Enabled("docker") || !c.Enabled("local") || c.Enabled("e2b") {
				t.Fatalf("%v", c.Backends)
			}
		}},
		{name: "unknown variable", env: []string{"AGENTBOT_MODLE=x"}, wantErr: []string{"unknown variable AGENTBOT_MODLE"}},
		{name: "bad numbers and durations", env: []string{"AGENTBOT_MAX_STEPS=lots", "AGENTBOT_IDLE_TIMEOUT=soon"},
			wantErr: []string{"AGENTBOT_MAX_STEPS", "AGENTBOT_IDLE_TIMEOUT"}},
		{name: "bad model api", env: []string{"AGENTBOT_MODEL_API=completions"}, wantErr: []string{"want chat or responses"}},
		{name: "bad base url", env: []string{"OPENAI_BASE_URL=localhost:11434"}, wantErr: []string{"not an http(s) URL"}},
		{name: "fake model", env: []string{"OPENAI_BASE_URL=fake"}},
		{name: "relative state dir", env: []string{"AGENTBOT_STATE_DIR=state"}, wantErr: []string{"absolute"}},
		{name: "default backend not enabled", env: []string{"AGENTBOT_BACKENDS=docker"}, wantErr: []string{`default backend "local"`}},
		{name: "bad redis url", env: []string{"REDIS_URL=localhost:6379"}, wantErr: []string{"redis://"}},
		{name: "bad log level", env: []string{"AGENTBOT_LOG_LEVEL=loud"}, wantErr: []string{"AGENTBOT_LOG_LEVEL"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(append(append([]string{}, base...), tt.env...))
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if tt.check != nil {
					tt.check(t, c)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestTableListsEveryVar(t *testing.T) {
	table := Table()
	for _, v := range Vars {
		if !strings.Contains(table, v.Name) {
			t.Fatalf("%s missing from the table", v.Name)
		}
	}
}
