package discordbot

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/bwmarrin/discordgo"

	"github.com/agentbot/agentbot/bot"
)

func TestThreadKey(t *testing.T) {
	tests := []struct {
		name, guild, channel, want string
	}{
		{"channel", "G1", "C1", "discord:G1:C1"},
		{"direct message", "", "D1", "discord:@me:D1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := ThreadKey(tt.guild, tt.channel)
			if key != tt.want {
				t.Fatalf("ThreadKey = %q, want %q", key, tt.want)
			}
			g, c, err := ParseThreadKey(key)
			if err != nil || c != tt.channel || (tt.guild != "" && g != tt.guild) {
				t.Fatalf("ParseThreadKey(%q) = %q, %q, %v", key, g, c, err)
			}
		})
	}
	for _, bad := range []string{"", "slack:T:C:1", "discord:G", "discord::C", "discord:G:C:x"} {
		if _, _, err := ParseThreadKey(bad); err == nil {
			t.Errorf("ParseThreadKey(%q) took a bad key", bad)
		}
	}
}

func TestMarker(t *testing.T) {
	tests := []struct {
		name, content string
		ownLine       bool
	}{
		{"prose", "hello", false},
		{"code block last", "```go\nx := 1\n```", true},
		{"tilde fence last", "~~~\nx\n~~~", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := withMarker(tt.content, "k1")
			if findMarker(got) != Marker("k1") {
				t.Fatalf("marker not found in %q", got)
			}
			if Marker("k1") == Marker("k2") {
				t.Fatal("two keys share a marker")
			}
			if own := strings.HasSuffix(got, "\n"+Marker("k1")); own != tt.ownLine {
				t.Fatalf("marker on its own line = %v, want %v", own, tt.ownLine)
			}
		})
	}
	if findMarker("no marker here") != "" || findMarker("x\u2063\u200b") != "" {
		t.Fatal("found a marker where there is none")
	}
}

func interaction(t *testing.T, raw string) *discordgo.Interaction {
	t.Helper()
	var i discordgo.Interaction
	if err := json.Unmarshal([]byte(raw), &i); err != nil {
		t.Fatal(err)
	}
	return &i
}

func TestCommandText(t *testing.T) {
	sub := func(name, opts string) string {
		return `{"type":2,"data":{"name":"agent","type":1,"options":[{"type":1,"name":"` + name + `","options":[` + opts + `]}]}}`
	}
	opt := func(name, value string) string {
		v, _ := json.Marshal(value)
		return `{"type":3,"name":"` + name + `","value":` + string(v) + `}`
	}
	num := func(name string, value int) string {
		return `{"type":4,"name":"` + name + `","value":` + strconv.Itoa(value) + `}`
	}
	flag := func(name string, value bool) string {
		return `{"type":5,"name":"` + name + `","value":` + strconv.FormatBool(value) + `}`
	}
	tests := []struct {
		name, raw, want string
		ok              bool
	}{
		{"switch", sub("switch", opt("backend", "docker")), "switch docker", true},
		{"switch with root", sub("switch", opt("backend", "local")+","+opt("root", "/srv/app")), "switch local /srv/app", true},
		{"new", sub("new", opt("backend", "docker")+","+opt("title", "my title")), "new docker my title", true},
		{"new title only", sub("new", opt("title", "docker stuff")), `new "docker" stuff`, true},
		{"fork", sub("fork", opt("backend", "local")+","+opt("title", "title")), "fork --backend local title", true},
		{"title", sub("title", opt("name", "a name")), "title a name", true},
		{"stop", sub("stop", ""), "stop", true},
		{"help verb", sub("help", opt("verb", "fork")), "help fork", true},
		{"model", sub("model", ""), "model", true},
		{"model name", sub("model", opt("name", "claude-sonnet-4.5")), "model claude-sonnet-4.5", true},
		{"model name with a provider", sub("model", opt("name", " openai/gpt-4o:latest ")), "model openai/gpt-4o:latest", true},
		{"policy", sub("policy", ""), "policy", true},
		{"policy set", sub("policy", opt("action", "set")+","+opt("key", "max-turns")+","+opt("value", "20")),
			"policy set max-turns 20", true},
		{"policy set multi-word value", sub("policy", opt("action", "set")+","+opt("key", "models")+","+opt("value", "gpt-4o claude-sonnet-4.5")),
			"policy set models gpt-4o claude-sonnet-4.5", true},
		{"policy set value with quotes", sub("policy", opt("action", "set")+","+opt("key", "motd")+","+opt("value", `say "hi" to 'all'`)),
			`policy set motd say "\"hi\"" to "'all'"`, true},
		{"policy set options in any order", sub("policy", opt("value", "local docker")+","+opt("key", "backends")+","+opt("action", "set")),
			"policy set backends local docker", true},
		{"policy reset all", sub("policy", opt("action", "reset")), "policy reset", true},
		{"policy reset key", sub("policy", opt("action", "reset")+","+opt("key", "max-turns")), "policy reset max-turns", true},
		{"audit", sub("audit", ""), "audit", true},
		{"audit page", sub("audit", num("page", 4)), "audit --page 4", true},
		{"list", sub("list", ""), "list", true},
		{"list mine", sub("list", opt("scope", "mine")), "list --mine", true},
		{"list all", sub("list", opt("scope", "all")), "list --all", true},
		{"list page", sub("list", num("page", 2)), "list --page 2", true},
		{"list mine page", sub("list", opt("scope", "mine")+","+num("page", 3)), "list --mine --page 3", true},
		{"list all page", sub("list", num("page", 12)+","+opt("scope", "all")), "list --all --page 12", true},
		{"approve", sub("approve", ""), "approve", true},
		{"approve id", sub("approve", opt("id", " t3-call_abc ")), "approve t3-call_abc", true},
		{"approve id all", sub("approve", opt("id", "t3-call_abc")+","+flag("all", true)), "approve t3-call_abc --all", true},
		{"approve all first", sub("approve", flag("all", true)+","+opt("id", "t3-call_abc")), "approve t3-call_abc --all", true},
		{"approve all only", sub("approve", flag("all", true)), "approve --all", true},
		{"approve all false", sub("approve", opt("id", "t3-call_abc")+","+flag("all", false)), "approve t3-call_abc", true},
		{"deny", sub("deny", ""), "deny", true},
		{"deny id", sub("deny", opt("id", "t3-call_abc")), "deny t3-call_abc", true},
		{"approvals", sub("approvals", ""), "approvals", true},
		{"approvals never", sub("approvals", opt("mode", "never")), "approvals never", true},
		{"approvals risky", sub("approvals", opt("mode", "risky")), "approvals risky", true},
		{"approvals always", sub("approvals", opt("mode", "always")), "approvals always", true},
		{"other command", `{"type":2,"data":{"name":"other","type":1}}`, "", false},
		{"select", `{"type":3,"data":{"custom_id":"agent_switch","component_type":3,"values":["docker"]}}`, "switch docker", true},
		{"fork button", `{"type":3,"data":{"custom_id":"agent_fork","component_type":2}}`, "fork", true},
		{"done button", `{"type":3,"data":{"custom_id":"agent_done","component_type":2}}`, "done", true},
		{"unknown button", `{"type":3,"data":{"custom_id":"x","component_type":2}}`, "", false},
		{"autocomplete", `{"type":4,"data":{"name":"agent","type":1}}`, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := commandText(interaction(t, tt.raw))
			if got != tt.want || ok != tt.ok {
				t.Fatalf("commandText = %q, %v; want %q, %v", got, ok, tt.want, tt.ok)
			}
			if !ok {
				return
			}
			// The text is what Parse accepts, in the grammar's canonical form.
			cmd, err := bot.Parse(got, testBackends)
			if err != nil {
				t.Fatalf("Parse(%q): %v", got, err)
			}
			if s := cmd.String(); s != got {
				t.Fatalf("Parse(%q).String() = %q, not canonical", got, s)
			}
		})
	}
}

func TestCommandTextOptionValues(t *testing.T) {
	sub := func(name, opts string) string {
		return `{"type":2,"data":{"name":"agent","type":1,"options":[{"type":1,"name":"` + name + `","options":[` + opts + `]}]}}`
	}
	tests := []struct {
		name, raw string
		want      bot.Command
	}{
		{"policy set multi-word value", sub("policy", `{"type":3,"name":"action","value":"set"},{"type":3,"name":"key","value":"models"},`+
			`{"type":3,"name":"value","value":"gpt-4o  \"fast\"\tclaude"}`),
			bot.Command{Verb: bot.VerbPolicy, PolicyAction: bot.PolicySet, PolicyKey: "models", PolicyValue: `gpt-4o "fast" claude`}},
		{"policy reset key", sub("policy", `{"type":3,"name":"action","value":"reset"},{"type":3,"name":"key","value":"max-turns"}`),
			bot.Command{Verb: bot.VerbPolicy, PolicyAction: bot.PolicyReset, PolicyKey: "max-turns"}},
		{"model", sub("model", `{"type":3,"name":"name","value":"claude-opus-4"}`),
			bot.Command{Verb: bot.VerbModel, Model: "claude-opus-4"}},
		{"list", sub("list", `{"type":3,"name":"scope","value":"mine"},{"type":4,"name":"page","value":2}`),
			bot.Command{Verb: bot.VerbList, Scope: bot.ScopeMine, Page: 2}},
		{"audit", sub("audit", `{"type":4,"name":"page","value":7}`), bot.Command{Verb: bot.VerbAudit, Page: 7}},
		{"approve", sub("approve", `{"type":3,"name":"id","value":"t3-call_abc"},{"type":5,"name":"all","value":true}`),
			bot.Command{Verb: bot.VerbApprove, ApprovalID: "t3-call_abc", All: true}},
		{"deny", sub("deny", `{"type":3,"name":"id","value":"t12-call_9"}`), bot.Command{Verb: bot.VerbDeny, ApprovalID: "t12-call_9"}},
		{"approvals", sub("approvals", `{"type":3,"name":"mode","value":"always"}`),
			bot.Command{Verb: bot.VerbApprovals, Mode: "always"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text, ok := commandText(interaction(t, tt.raw))
			if !ok {
				t.Fatal("commandText refused the interaction")
			}
			cmd, err := bot.Parse(text, testBackends)
			if err != nil || cmd != tt.want {
				t.Fatalf("Parse(%q) = %+v, %v; want %+v", text, cmd, err, tt.want)
			}
		})
	}
}

// TestCommandTextMisfits covers options that Discord lets a user combine
// but the verb does not take together: Parse must refuse the text, never
// read one option as another.
func TestCommandTextMisfits(t *testing.T) {
	sub := func(name, opts string) string {
		return `{"type":2,"data":{"name":"agent","type":1,"options":[{"type":1,"name":"` + name + `","options":[` + opts + `]}]}}`
	}
	opt := func(name, value string) string {
		v, _ := json.Marshal(value)
		return `{"type":3,"name":"` + name + `","value":` + string(v) + `}`
	}
	tests := []struct {
		name, raw, want, refusal string
	}{
		{"policy key without action", sub("policy", opt("key", "max-turns")), `policy "" max-turns`, "'set' or 'reset'"},
		{"policy key reset without action", sub("policy", opt("key", "reset")), `policy "" reset`, "'set' or 'reset'"},
		{"policy key set without action", sub("policy", opt("key", "set")+","+opt("value", "max-turns 1")),
			`policy "" set max-turns 1`, "'set' or 'reset'"},
		{"policy value without action", sub("policy", opt("value", "20")), `policy "" "" 20`, "'set' or 'reset'"},
		{"policy set without anything", sub("policy", opt("action", "set")), "policy set", "needs a key and a value"},
		{"policy set without value", sub("policy", opt("action", "set")+","+opt("key", "max-turns")), "policy set max-turns",
			"needs a value for 'max-turns'"},
		{"policy set without key", sub("policy", opt("action", "set")+","+opt("value", "max-turns 20")),
			`policy set "" max-turns 20`, "is not a policy key"},
		{"policy reset with a value", sub("policy", opt("action", "reset")+","+opt("value", "max-turns")),
			`policy reset "" max-turns`, "at most one key"},
		{"policy reset with key and value", sub("policy", opt("action", "reset")+","+opt("key", "max-turns")+","+opt("value", "20")),
			"policy reset max-turns 20", "at most one key"},
		{"policy key with a space", sub("policy", opt("action", "reset")+","+opt("key", "max turns")),
			`policy reset "max turns"`, "is not a policy key"},
		{"model with a space", sub("model", opt("name", "gpt 4")), `model "gpt 4"`, "not a model name"},
		{"page below 1", sub("list", `{"type":4,"name":"page","value":-1}`), "list --page -1", "number of 1 or more"},
		{"approval ID with a space", sub("approve", opt("id", "t3 call")), `approve "t3 call"`, "is not an approval ID"},
		{"approval ID like an option", sub("deny", opt("id", "--all")), `deny "--all"`, "is not an approval ID"},
		{"approval ID like an option, with all", sub("approve", opt("id", "—all")+`,{"type":5,"name":"all","value":true}`),
			`approve "—all" --all`, "is not an approval ID"},
		{"approval ID with a quote", sub("approve", opt("id", `t3"x`)), `approve "t3\"x"`, "is not an approval ID"},
		{"approval mode not a choice", sub("approvals", opt("mode", "sometimes")), "approvals sometimes", "is not an approval mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := commandText(interaction(t, tt.raw))
			if got != tt.want || !ok {
				t.Fatalf("commandText = %q, %v; want %q, true", got, ok, tt.want)
			}
			cmd, err := bot.Parse(got, testBackends)
			if err == nil || !strings.Contains(err.Error(), tt.refusal) {
				t.Fatalf("Parse(%q) = %+v, %v; want a refusal saying %q", got, cmd, err, tt.refusal)
			}
		})
	}
}

func TestAllowedURL(t *testing.T) {
	tests := []struct {
		url string
		ok  bool
	}{
		{"https://cdn.discordapp.com/attachments/1/2/a.txt?ex=1", true},
		{"https://media.discordapp.net/attachments/1/2/a.png", true},
		{"http://cdn.discordapp.com/attachments/1/2/a.txt", false},
		{"https://evil.example/a.txt", false},
		{"https://cdn.discordapp.com.evil.example/a", false},
		{"file:///etc/passwd", false},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			if err := allowedURL(tt.url); (err == nil) != tt.ok {
				t.Fatalf("allowedURL(%q) = %v, want ok=%v", tt.url, err, tt.ok)
			}
		})
	}
}

func TestRenderLinks(t *testing.T) {
	got := renderLinks("see <thread:discord:G1:C9> and <thread:slack:T:C:1>")
	want := "see <#C9> and `slack:T:C:1`"
	if got != want {
		t.Fatalf("renderLinks = %q, want %q", got, want)
	}
}
