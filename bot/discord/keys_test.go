package discordbot

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/bwmarrin/discordgo"
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
	opt := func(name, value string) string { return `{"type":3,"name":"` + name + `","value":"` + value + `"}` }
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
