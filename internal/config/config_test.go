package config

import (
	"strings"
	"testing"
	"time"

	"github.com/agentbot/agentbot/agentflow"
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
				c.IdleTimeout != 30*time.Minute || c.DefaultBackend != "local" || c.DockerNetwork != "none" ||
				c.WorkflowCache != 500 || c.PprofAddr != "" {
				t.Fatalf("defaults: %+v", c)
			}
		}},
		{name: "xdg state", env: []string{"XDG_STATE_HOME=/xdg"}, check: func(t *testing.T, c Config) {
			if c.StateDir != "/xdg/agentbot" || c.LocalDir != "/xdg/agentbot/sandboxes" {
				t.Fatalf("%+v", c)
			}
		}},
		{name: "secrets collected", env: []string{"OPENAI_API_KEY=sk-abcdef123", "AWS_SECRET_ACCESS_KEY=aws-abc"}, check: func(t *testing.T, c Config) {
			if len(c.Secrets) != 2 || c.Secrets[0] != "sk-abcdef123" || c.Secrets[1] != "aws-abc" {
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
		{name: "model timeout", env: []string{"AGENTBOT_MODEL_TIMEOUT=3s"}, check: func(t *testing.T, c Config) {
			if c.ModelTimeout != 3*time.Second {
				t.Fatalf("model timeout %v, want 3s", c.ModelTimeout)
			}
		}},
		{name: "model timeout by default", check: func(t *testing.T, c Config) {
			if c.ModelTimeout != DefaultModelTimeout || c.ModelTimeout >= agentflow.ModelStepTimeout {
				t.Fatalf("model timeout %v, want %v, under the step's %v", c.ModelTimeout, DefaultModelTimeout, agentflow.ModelStepTimeout)
			}
		}},
		{name: "model timeout not a duration", env: []string{"AGENTBOT_MODEL_TIMEOUT=30"}, wantErr: []string{`AGENTBOT_MODEL_TIMEOUT="30" is not a positive duration`}},
		{name: "model timeout zero", env: []string{"AGENTBOT_MODEL_TIMEOUT=0s"}, wantErr: []string{`AGENTBOT_MODEL_TIMEOUT="0s" is not a positive duration`}},
		{name: "model timeout negative", env: []string{"AGENTBOT_MODEL_TIMEOUT=-1m"}, wantErr: []string{`AGENTBOT_MODEL_TIMEOUT="-1m" is not a positive duration`}},
		{name: "model timeout past the step's limit", env: []string{"AGENTBOT_MODEL_TIMEOUT=5m"}, wantErr: []string{"AGENTBOT_MODEL_TIMEOUT 5m0s: want less than 5m0s"}},
		{name: "bad model api", env: []string{"AGENTBOT_MODEL_API=completions"}, wantErr: []string{"want chat or responses"}},
		{name: "bad base url", env: []string{"OPENAI_BASE_URL=localhost:11434"}, wantErr: []string{"not an http(s) URL"}},
		{name: "fake model", env: []string{"OPENAI_BASE_URL=fake"}},
		{name: "relative state dir", env: []string{"AGENTBOT_STATE_DIR=state"}, wantErr: []string{"absolute"}},
		{name: "default backend not enabled", env: []string{"AGENTBOT_BACKENDS=docker", "AGENTBOT_DEFAULT_BACKEND=local"}, wantErr: []string{`default backend "local"`}},
		{name: "default backend from the enabled ones", env: []string{"AGENTBOT_BACKENDS=daytona,docker"}, check: func(t *testing.T, c Config) {
			if c.DefaultBackend != "docker" {
				t.Fatalf("default %q, want docker", c.DefaultBackend)
			}
		}},
		{name: "bad redis url", env: []string{"REDIS_URL=localhost:6379"}, wantErr: []string{"redis://"}},
		{name: "bad log level", env: []string{"AGENTBOT_LOG_LEVEL=loud"}, wantErr: []string{"AGENTBOT_LOG_LEVEL"}},
		{name: "workflow cache and profiles", env: []string{"AGENTBOT_WORKFLOW_CACHE=250", "AGENTBOT_PPROF_ADDR=127.0.0.1:6060"}, check: func(t *testing.T, c Config) {
			if c.WorkflowCache != 250 || c.PprofAddr != "127.0.0.1:6060" {
				t.Fatalf("cache %d, pprof %q", c.WorkflowCache, c.PprofAddr)
			}
		}},
		{name: "bad workflow cache and profile address", env: []string{"AGENTBOT_WORKFLOW_CACHE=0", "AGENTBOT_PPROF_ADDR=6060"},
			wantErr: []string{"AGENTBOT_WORKFLOW_CACHE 0", "AGENTBOT_PPROF_ADDR"}},

		// The local backend is a shell on this machine: on by default in
		// the terminal, off while serving a chat platform unless asked for.
		{name: "terminal: local on, no warning", check: func(t *testing.T, c Config) {
			if c.ChatPlatform() || !c.Enabled("local") || !c.Enabled("docker") || c.DefaultBackend != "local" || len(c.Warnings()) != 0 {
				t.Fatalf("chat %v, local %v, default %q, warnings %q", c.ChatPlatform(), c.Enabled("local"), c.DefaultBackend, c.Warnings())
			}
		}},
		{name: "terminal: unsafe local changes nothing", env: []string{"AGENTBOT_UNSAFE_LOCAL=true"}, check: func(t *testing.T, c Config) {
			if !c.Enabled("local") || c.DefaultBackend != "local" || len(c.Warnings()) != 0 {
				t.Fatalf("local %v, default %q, warnings %q", c.Enabled("local"), c.DefaultBackend, c.Warnings())
			}
		}},
		{name: "slack: local off, docker default", env: slack("AGENTBOT_ALLOWED_CHANNELS=C1"), check: func(t *testing.T, c Config) {
			if !c.ChatPlatform() || c.Enabled("local") || !c.Enabled("docker") || c.DefaultBackend != "docker" {
				t.Fatalf("chat %v, local %v, docker %v, default %q", c.ChatPlatform(), c.Enabled("local"), c.Enabled("docker"), c.DefaultBackend)
			}
		}},
		{name: "discord: local off", env: []string{"DISCORD_TOKEN=d", "DISCORD_APP_ID=1", "AGENTBOT_ALLOWED_ROLES=R1"}, check: func(t *testing.T, c Config) {
			if !c.ChatPlatform() || c.Enabled("local") || c.DefaultBackend != "docker" {
				t.Fatalf("chat %v, local %v, default %q", c.ChatPlatform(), c.Enabled("local"), c.DefaultBackend)
			}
		}},
		{name: "slack: default is the first enabled backend without docker", env: slack("AGENTBOT_BACKENDS=e2b,daytona"), check: func(t *testing.T, c Config) {
			if c.Enabled("local") || c.DefaultBackend != "e2b" {
				t.Fatalf("local %v, default %q", c.Enabled("local"), c.DefaultBackend)
			}
		}},
		{name: "slack: unsafe local on, loudly", env: slack("AGENTBOT_UNSAFE_LOCAL=true"), check: func(t *testing.T, c Config) {
			if !c.Enabled("local") || c.DefaultBackend != "local" {
				t.Fatalf("local %v, default %q", c.Enabled("local"), c.DefaultBackend)
			}
			if w := strings.Join(c.Warnings(), "\n"); !strings.Contains(w, "AGENTBOT_UNSAFE_LOCAL") || !strings.Contains(w, "NOT isolated") {
				t.Fatalf("warnings %q", w)
			}
		}},
		{name: "slack: local listed without the flag", env: slack("AGENTBOT_BACKENDS=local,docker"),
			wantErr: []string{"AGENTBOT_BACKENDS lists local", "AGENTBOT_UNSAFE_LOCAL=true"}},
		{name: "slack: local default without the flag", env: slack("AGENTBOT_DEFAULT_BACKEND=local"),
			wantErr: []string{"AGENTBOT_DEFAULT_BACKEND=local", "AGENTBOT_UNSAFE_LOCAL=true"}},
		{name: "slack: only local enabled without the flag", env: slack("AGENTBOT_BACKENDS=local"),
			wantErr: []string{"AGENTBOT_UNSAFE_LOCAL=true"}},
		{name: "unsafe local not a boolean", env: []string{"AGENTBOT_UNSAFE_LOCAL=yes"}, wantErr: []string{`AGENTBOT_UNSAFE_LOCAL="yes"`}},
		{name: "allow everyone not a boolean", env: []string{"AGENTBOT_ALLOW_EVERYONE=1"}, wantErr: []string{`AGENTBOT_ALLOW_EVERYONE="1"`}},
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

// slack returns a Slack configuration (Socket Mode) plus env.
func slack(env ...string) []string {
	return append([]string{"SLACK_BOT_TOKEN=xoxb-1", "SLACK_APP_TOKEN=xapp-1"}, env...)
}

// TestValidateGateway: serving a chat platform needs an allowlist, or the
// explicit word that everyone in the workspace may use the bot.
func TestValidateGateway(t *testing.T) {
	discord := []string{"DISCORD_TOKEN=d", "DISCORD_APP_ID=1"}
	tests := []struct {
		name     string
		env      []string
		wantErr  []string
		wantWarn string
	}{
		{name: "terminal needs no allowlist"},
		{name: "slack, no allowlist", env: slack(),
			wantErr: []string{"AGENTBOT_ALLOWED_USERS", "AGENTBOT_ALLOWED_CHANNELS", "AGENTBOT_ALLOWED_ROLES", "AGENTBOT_ALLOW_EVERYONE=true"}},
		{name: "discord, no allowlist", env: discord, wantErr: []string{"AGENTBOT_ALLOW_EVERYONE=true"}},
		{name: "admins are no allowlist", env: slack("AGENTBOT_ADMINS=U1"), wantErr: []string{"AGENTBOT_ALLOWED_USERS"}},
		{name: "slack, users", env: slack("AGENTBOT_ALLOWED_USERS=U1")},
		{name: "slack, channels", env: slack("AGENTBOT_ALLOWED_CHANNELS=C1")},
		{name: "discord, roles", env: append(discord, "AGENTBOT_ALLOWED_ROLES=R1")},
		{name: "slack, everyone on purpose", env: slack("AGENTBOT_ALLOW_EVERYONE=true"), wantWarn: "AGENTBOT_ALLOW_EVERYONE"},
		{name: "everyone false is no allowlist", env: slack("AGENTBOT_ALLOW_EVERYONE=false"), wantErr: []string{"AGENTBOT_ALLOW_EVERYONE=true"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(append([]string{"HOME=/home/u"}, tt.env...))
			if err != nil {
				t.Fatal(err)
			}
			warnings := strings.Join(c.Warnings(), "\n")
			if (tt.wantWarn == "") != (warnings == "") || !strings.Contains(warnings, tt.wantWarn) {
				t.Fatalf("warnings %q, want %q", warnings, tt.wantWarn)
			}
			err = c.ValidateGateway()
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatal(err)
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

// TestLoadTemporalTLS: TLS is on when asked for or implied by a TLS file or
// an API key, and an API key is never allowed over a connection without
// TLS; no error repeats the key.
func TestLoadTemporalTLS(t *testing.T) {
	const key = "tmprl-secret-0123456789abcdef"
	addr := "TEMPORAL_ADDRESS=ns.acct.tmprl.cloud:7233"
	tests := []struct {
		name    string
		env     []string
		wantTLS bool
		wantErr []string
	}{
		{name: "no TLS by default", env: []string{addr}},
		{name: "TLS asked for", env: []string{addr, "TEMPORAL_TLS=true"}, wantTLS: true},
		{name: "a CA implies TLS", env: []string{addr, "TEMPORAL_TLS_SERVER_CA_CERT_PATH=/ca.pem"}, wantTLS: true},
		{name: "a client certificate implies TLS", env: []string{addr, "TEMPORAL_TLS_CLIENT_CERT_PATH=/c.pem", "TEMPORAL_TLS_CLIENT_KEY_PATH=/k.pem"}, wantTLS: true},
		{name: "an API key implies TLS", env: []string{addr, "TEMPORAL_API_KEY=" + key}, wantTLS: true},
		{name: "API key with TLS off is refused", env: []string{addr, "TEMPORAL_API_KEY=" + key, "TEMPORAL_TLS=false"},
			wantErr: []string{"TEMPORAL_API_KEY", "TEMPORAL_TLS=false", "clear text"}},
		{name: "TLS not a boolean", env: []string{addr, "TEMPORAL_TLS=yes"}, wantErr: []string{`TEMPORAL_TLS="yes"`}},
		{name: "certificate without key", env: []string{addr, "TEMPORAL_TLS_CLIENT_CERT_PATH=/c.pem"}, wantErr: []string{"set both or neither"}},
		{name: "TLS without an address", env: []string{"TEMPORAL_API_KEY=" + key}, wantErr: []string{"TEMPORAL_ADDRESS is not"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(append([]string{"HOME=/home/u"}, tt.env...))
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if c.TemporalTLS != tt.wantTLS {
					t.Fatalf("TemporalTLS %v, want %v", c.TemporalTLS, tt.wantTLS)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			if strings.Contains(err.Error(), key) {
				t.Fatalf("the error holds the API key: %v", err)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestWorkerNeedsOnlyBotTokens: the worker delivers to Slack and Discord
// with the bot tokens alone, so it loads without the app token, signing
// secret or Discord app ID the gateway needs to receive; the gateway
// refuses to start without them.
func TestWorkerNeedsOnlyBotTokens(t *testing.T) {
	for _, tc := range []struct {
		name, env, gatewayErr string
	}{
		{"slack", "SLACK_BOT_TOKEN=xoxb-1", "neither SLACK_APP_TOKEN"},
		{"discord", "DISCORD_TOKEN=d-1", "DISCORD_APP_ID is not"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load([]string{"HOME=/home/u", "TEMPORAL_ADDRESS=t:7233", "AGENTBOT_BACKENDS=docker", tc.env, "AGENTBOT_ALLOWED_USERS=U1"})
			if err != nil {
				t.Fatalf("the worker's configuration is refused: %v", err)
			}
			if err := c.ValidateGateway(); err == nil || !strings.Contains(err.Error(), tc.gatewayErr) {
				t.Errorf("ValidateGateway = %v, want %q", err, tc.gatewayErr)
			}
		})
	}
}

// TestApprovalPolicy: the approval variables become the configured
// tenant policy; a bad value fails the start naming the variable.
func TestApprovalPolicy(t *testing.T) {
	c, err := Load([]string{"AGENTBOT_APPROVALS=risky", "AGENTBOT_APPROVAL_CHANNELS=C1=always",
		"AGENTBOT_APPROVAL_TIMEOUT=2m", "AGENTBOT_APPROVAL_TWO_PERSON=on", "AGENTBOT_APPROVAL_RULES_OFF=git-push",
		"AGENTBOT_APPROVAL_PATTERNS=tf-apply=terraform:apply*"})
	if err != nil {
		t.Fatal(err)
	}
	p := c.TenantPolicy()
	if p.Approvals != "risky" || p.ChannelMode("C1") != "always" || p.ApprovalTimeout != 2*time.Minute || !p.TwoPerson ||
		len(p.ApprovalRulesOff) != 1 || len(p.ApprovalPatterns) != 1 || p.ApprovalPatterns[0].Command != "terraform" || p.ApprovalPatterns[0].Args != "apply*" {
		t.Fatalf("policy: %+v", p)
	}
	for _, bad := range []string{"AGENTBOT_APPROVALS=sometimes", "AGENTBOT_APPROVAL_TIMEOUT=1s", "AGENTBOT_APPROVAL_TWO_PERSON=maybe",
		"AGENTBOT_APPROVAL_RULES_OFF=unparsable", "AGENTBOT_APPROVAL_PATTERNS=x", "AGENTBOT_APPROVAL_CHANNELS=C1"} {
		name, _, _ := strings.Cut(bad, "=")
		if _, err := Load([]string{bad}); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
