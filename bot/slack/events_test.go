package slackbot

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/slack-go/slack"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
)

func testIdentity() *identity {
	return &identity{team: "T1", user: "UBOT", bot: "BBOT",
		mention: regexp.MustCompile(`<@UBOT(?:\|[^>]*)?>[ \t]?`)}
}

// callback makes an event_callback around one inner event, written as
// Slack writes it.
func callback(t *testing.T, inner string) envelope {
	t.Helper()
	var env envelope
	body := `{"type":"event_callback","team_id":"T1","event_id":"Ev1","event":` + inner + `}`
	if err := json.Unmarshal([]byte(body), &env); err != nil {
		t.Fatalf("bad test event %s: %v", inner, err)
	}
	return env
}

func TestEventOf(t *testing.T) {
	tests := []struct {
		name  string
		inner string
		want  *bot.Event // nil: ignored
	}{
		{"mention in a channel starts a thread under it",
			`{"type":"app_mention","user":"U1","text":"<@UBOT> fix the build","ts":"100.1","channel":"C1"}`,
			&bot.Event{Kind: bot.KindMention, NewThreadKey: "slack:T1:C1:100.1", Text: "fix the build"}},
		{"mention in a thread goes to the thread",
			`{"type":"app_mention","user":"U1","text":"<@UBOT> and the tests","ts":"100.5","thread_ts":"100.1","channel":"C1"}`,
			&bot.Event{Kind: bot.KindMention, ThreadKey: "slack:T1:C1:100.1", Text: "and the tests"}},
		{"mention with a name form and a mention mid-text",
			`{"type":"app_mention","user":"U1","text":"hey <@UBOT|agentbot> look at a &lt; b","ts":"100.1","channel":"C1"}`,
			&bot.Event{Kind: bot.KindMention, NewThreadKey: "slack:T1:C1:100.1", Text: "hey look at a < b"}},
		{"mention that is a command",
			`{"type":"app_mention","user":"U1","text":"<@UBOT> switch docker","ts":"100.5","thread_ts":"100.1","channel":"C1"}`,
			&bot.Event{Kind: bot.KindCommand, ThreadKey: "slack:T1:C1:100.1", Text: "switch docker"}},
		{"mention that only starts with a verb is chat",
			`{"type":"app_mention","user":"U1","text":"<@UBOT> stop the server on port 80","ts":"100.5","thread_ts":"100.1","channel":"C1"}`,
			&bot.Event{Kind: bot.KindMention, ThreadKey: "slack:T1:C1:100.1", Text: "stop the server on port 80"}},
		{"!agent with a trailing mention",
			`{"type":"app_mention","user":"U1","text":"!agent stop <@UBOT>","ts":"100.5","thread_ts":"100.1","channel":"C1"}`,
			&bot.Event{Kind: bot.KindCommand, ThreadKey: "slack:T1:C1:100.1", Text: "stop"}},
		{"mention with a file",
			`{"type":"app_mention","user":"U1","text":"<@UBOT> read this","ts":"100.1","channel":"C1","files":[{"id":"F1","name":"log.txt","size":42}]}`,
			&bot.Event{Kind: bot.KindMention, NewThreadKey: "slack:T1:C1:100.1", Text: "read this"}},
		{"mention by a bot", `{"type":"app_mention","user":"U2","bot_id":"B2","text":"<@UBOT> hi","ts":"100.1","channel":"C1"}`, nil},
		{"mention by itself", `{"type":"app_mention","user":"UBOT","text":"<@UBOT> hi","ts":"100.1","channel":"C1"}`, nil},
		{"edited mention", `{"type":"app_mention","user":"U1","text":"<@UBOT> hi","ts":"100.1","channel":"C1","edited":{"user":"U1","ts":"101.0"}}`, nil},

		{"reply in a thread",
			`{"type":"message","channel_type":"channel","user":"U1","text":"also the docs","ts":"100.5","thread_ts":"100.1","channel":"C1"}`,
			&bot.Event{Kind: bot.KindMessage, ThreadKey: "slack:T1:C1:100.1", Text: "also the docs"}},
		{"reply in a private channel broadcast to the channel",
			`{"type":"message","subtype":"thread_broadcast","channel_type":"group","user":"U1","text":"done?","ts":"100.5","thread_ts":"100.1","channel":"G1"}`,
			&bot.Event{Kind: bot.KindMessage, ThreadKey: "slack:T1:G1:100.1", Text: "done?"}},
		{"top-level chat", `{"type":"message","channel_type":"channel","user":"U1","text":"lunch?","ts":"100.1","channel":"C1"}`, nil},
		{"message that mentions the bot counts through its app_mention",
			`{"type":"message","channel_type":"channel","user":"U1","text":"<@UBOT> fix it","ts":"100.5","thread_ts":"100.1","channel":"C1"}`, nil},
		{"!agent in a thread",
			`{"type":"message","channel_type":"channel","user":"U1","text":"!agent switch docker","ts":"100.5","thread_ts":"100.1","channel":"C1"}`,
			&bot.Event{Kind: bot.KindCommand, ThreadKey: "slack:T1:C1:100.1", Text: "switch docker"}},
		{"!agent in the channel",
			`{"type":"message","channel_type":"channel","user":"U1","text":"!agent new docker \"fix &amp; ship\"","ts":"100.1","channel":"C1"}`,
			&bot.Event{Kind: bot.KindCommand, NewThreadKey: "slack:T1:C1:100.1", Text: `new docker "fix & ship"`}},
		{"file shared in a thread",
			`{"type":"message","subtype":"file_share","channel_type":"channel","user":"U1","text":"see this","ts":"100.5","thread_ts":"100.1","channel":"C1","files":[{"id":"F1","name":"a.png","size":1234},{"id":"F2","title":"untitled","size":0}]}`,
			&bot.Event{Kind: bot.KindMessage, ThreadKey: "slack:T1:C1:100.1", Text: "see this"}},
		{"file shared in the channel", `{"type":"message","subtype":"file_share","channel_type":"channel","user":"U1","text":"","ts":"100.5","channel":"C1","files":[{"id":"F1","name":"a.png","size":1234}]}`, nil},
		{"bot message", `{"type":"message","subtype":"bot_message","bot_id":"B2","text":"hi","ts":"100.5","thread_ts":"100.1","channel":"C1"}`, nil},
		{"own message", `{"type":"message","channel_type":"channel","user":"UBOT","bot_id":"BBOT","text":"answer","ts":"100.5","thread_ts":"100.1","channel":"C1"}`, nil},
		{"another app's message with a user", `{"type":"message","channel_type":"channel","user":"U9","bot_id":"B9","text":"beep","ts":"100.5","thread_ts":"100.1","channel":"C1"}`, nil},
		{"edit", `{"type":"message","subtype":"message_changed","channel_type":"channel","ts":"100.6","channel":"C1","message":{"user":"U1","text":"x","ts":"100.5","thread_ts":"100.1"}}`, nil},
		{"join", `{"type":"message","subtype":"channel_join","channel_type":"channel","user":"U1","text":"<@U1> has joined","ts":"100.5","thread_ts":"100.1","channel":"C1"}`, nil},
		{"direct message", `{"type":"message","channel_type":"im","user":"U1","text":"hi","ts":"100.5","thread_ts":"100.1","channel":"D1"}`, nil},
		{"other event", `{"type":"reaction_added","user":"U1","ts":"100.5","channel":"C1"}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := callback(t, tt.inner)
			got, ok := eventOf(testIdentity(), env)
			if tt.want == nil {
				if ok {
					t.Fatalf("not ignored: %+v", got)
				}
				return
			}
			if !ok {
				t.Fatal("ignored")
			}
			want := *tt.want
			want.ID, want.Platform, want.Channel, want.User, want.MessageID = "Ev1", "slack", env.Event.Channel, "U1", env.Event.TS
			if got.Kind != want.Kind || got.ThreadKey != want.ThreadKey || got.NewThreadKey != want.NewThreadKey ||
				got.Text != want.Text || got.ID != want.ID || got.Platform != want.Platform || got.Channel != want.Channel ||
				got.User != want.User || got.MessageID != want.MessageID {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestInteractionEvents(t *testing.T) {
	tests := []struct {
		name    string
		payload string
		want    []bot.Event
	}{
		{"backend select on a status message in a thread",
			`{"type":"block_actions","user":{"id":"U1"},"channel":{"id":"C1"},"container":{"type":"message","message_ts":"100.9","channel_id":"C1"},
			  "message":{"ts":"100.9","thread_ts":"100.1","text":"status"},
			  "actions":[{"type":"static_select","action_id":"agent_switch","block_id":"agent_controls","action_ts":"200.1","selected_option":{"value":"docker","text":{"type":"plain_text","text":"docker"}}}]}`,
			[]bot.Event{{ID: "200.1:U1", Platform: "slack", Kind: bot.KindCommand, ThreadKey: "slack:T1:C1:100.1", Channel: "C1", User: "U1", Text: "switch docker"}}},
		{"buttons",
			`{"type":"block_actions","user":{"id":"U1"},"channel":{"id":"C1"},"message":{"ts":"100.9","thread_ts":"100.1"},
			  "actions":[{"type":"button","block_id":"agent_controls","action_id":"agent_fork","action_ts":"200.2"},{"type":"button","block_id":"agent_controls","action_id":"agent_stop","action_ts":"200.3"},{"type":"button","block_id":"agent_controls","action_id":"agent_done","action_ts":"200.4"},{"type":"button","block_id":"agent_controls","action_id":"agent_webui","action_ts":"200.5"}]}`,
			[]bot.Event{
				{ID: "200.2:U1", Platform: "slack", Kind: bot.KindCommand, ThreadKey: "slack:T1:C1:100.1", Channel: "C1", User: "U1", Text: "fork"},
				{ID: "200.3:U1", Platform: "slack", Kind: bot.KindCommand, ThreadKey: "slack:T1:C1:100.1", Channel: "C1", User: "U1", Text: "stop"},
				{ID: "200.4:U1", Platform: "slack", Kind: bot.KindCommand, ThreadKey: "slack:T1:C1:100.1", Channel: "C1", User: "U1", Text: "done"},
			}},
		{"button on an ephemeral message names its thread in the container",
			`{"type":"block_actions","user":{"id":"U1"},"container":{"type":"message","message_ts":"100.9","channel_id":"C1","thread_ts":"100.1","is_ephemeral":true},
			  "actions":[{"type":"button","block_id":"agent_controls","action_id":"agent_stop","action_ts":"200.3"}]}`,
			[]bot.Event{{ID: "200.3:U1", Platform: "slack", Kind: bot.KindCommand, ThreadKey: "slack:T1:C1:100.1", Channel: "C1", User: "U1", Text: "stop"}}},
		{"fork from here on a reply",
			`{"type":"message_action","callback_id":"fork_from_here","trigger_id":"tr1","user":{"id":"U1"},"channel":{"id":"C1"},"message_ts":"100.5","message":{"ts":"100.5","thread_ts":"100.1"}}`,
			[]bot.Event{{ID: "tr1", Platform: "slack", Kind: bot.KindCommand, ThreadKey: "slack:T1:C1:100.1", Channel: "C1", User: "U1", Text: "fork"}}},
		{"fork from here on a root",
			`{"type":"message_action","callback_id":"fork_from_here","trigger_id":"tr2","user":{"id":"U1"},"channel":{"id":"C1"},"message_ts":"100.1","message":{"ts":"100.1"}}`,
			[]bot.Event{{ID: "tr2", Platform: "slack", Kind: bot.KindCommand, ThreadKey: "slack:T1:C1:100.1", Channel: "C1", User: "U1", Text: "fork"}}},
		{"another shortcut", `{"type":"message_action","callback_id":"other","trigger_id":"tr3","user":{"id":"U1"},"channel":{"id":"C1"},"message":{"ts":"100.1"}}`, nil},
		{"a select value that is not one word",
			`{"type":"block_actions","user":{"id":"U1"},"channel":{"id":"C1"},"message":{"ts":"100.9","thread_ts":"100.1"},
			  "actions":[{"type":"static_select","block_id":"agent_controls","action_id":"agent_switch","action_ts":"200.1","selected_option":{"value":"docker /etc"}}]}`, nil},
		{"a view submission", `{"type":"view_submission","user":{"id":"U1"},"channel":{"id":"C1"}}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cb slack.InteractionCallback
			if err := json.Unmarshal([]byte(tt.payload), &cb); err != nil {
				t.Fatal(err)
			}
			got := interactionEvents(testIdentity(), cb)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d events %+v, want %d", len(got), got, len(tt.want))
			}
			for i := range got {
				if g, w := got[i], tt.want[i]; g.ID != w.ID || g.Platform != w.Platform || g.Kind != w.Kind ||
					g.ThreadKey != w.ThreadKey || g.Channel != w.Channel || g.User != w.User || g.Text != w.Text {
					t.Errorf("event %d:\ngot  %+v\nwant %+v", i, g, w)
				}
			}
		})
	}
}

func TestThreadKeyRoundTrip(t *testing.T) {
	k := ThreadKey("T1", "C1", "1712.000100")
	if k != "slack:T1:C1:1712.000100" {
		t.Fatalf("ThreadKey = %q", k)
	}
	team, ch, ts, err := ParseThreadKey(k)
	if err != nil || team != "T1" || ch != "C1" || ts != "1712.000100" {
		t.Fatalf("ParseThreadKey(%q) = %q %q %q %v", k, team, ch, ts, err)
	}
	for _, bad := range []string{"", "term:x", "slack:T1:C1", "slack:T1:C1:", "discord:G:C:1", "slack:T1:C1:1.2:x"} {
		if _, _, _, err := ParseThreadKey(bad); err == nil {
			t.Errorf("ParseThreadKey(%q) accepted", bad)
		}
	}
}

func TestSplitText(t *testing.T) {
	long := strings.Repeat("line of text\n", 40) // 520 characters
	tests := []struct {
		name       string
		text       string
		limit, max int
		parts      int
		cut        bool
	}{
		{"short", "hello", 100, 3, 1, false},
		{"several messages", long, 100, 10, 6, false},
		{"too many messages", long, 100, 2, 2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := splitText(tt.text, tt.limit, tt.max)
			if len(got) != tt.parts {
				t.Fatalf("%d parts, want %d: %q", len(got), tt.parts, got)
			}
			if said := strings.Contains(got[len(got)-1], "left out"); said != tt.cut {
				t.Errorf("cut said %v, want %v: %q", said, tt.cut, got[len(got)-1])
			}
			for _, p := range got[:len(got)-1] {
				if n := len([]rune(p)); n > tt.limit {
					t.Errorf("part of %d characters > %d", n, tt.limit)
				}
			}
		})
	}
}

func TestStatusMessage(t *testing.T) {
	in := NewInbound(InboundConfig{Backends: []string{"local", "docker"}}, newRecorder(), nil)
	tests := []struct {
		name     string
		text     string
		view     agentflow.SessionView
		webUI    string
		want     []string // in the blocks' JSON
		wantNot  []string
		maxRunes int
	}{
		{"controls", "*t* — idle on `docker`", agentflow.SessionView{ThreadKey: "slack:T1:C1:1.2", Backend: "docker", Status: agentflow.StatusIdle},
			"http://ui/wf", []string{`"action_id":"agent_switch"`, `"initial_option":{"text":{"type":"plain_text","text":"docker","emoji":false},"value":"docker"}`,
				`"action_id":"agent_fork"`, `"action_id":"agent_stop"`, `"action_id":"agent_done"`, `"url":"http://ui/wf"`}, nil, 3000},
		{"backend not offered", "x", agentflow.SessionView{Backend: "e2b", Status: agentflow.StatusPaused},
			"", []string{`"agent_switch"`}, []string{`"initial_option"`, `"agent_webui"`}, 3000},
		{"destroyed: no controls", "gone", agentflow.SessionView{Backend: "local", Status: agentflow.StatusDestroyed},
			"", nil, []string{`"actions"`}, 3000},
		{"long text that grows when escaped", strings.Repeat("a<b ", 1000), agentflow.SessionView{Backend: "local"},
			"", []string{"a&lt;b"}, nil, 3000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps := in.parts(context.Background(), bot.Response{Text: tt.text, Session: &tt.view, WebUI: tt.webUI}, maxReplyParts)
			if len(ps) != 1 {
				t.Fatalf("%d messages", len(ps))
			}
			if n := len([]rune(ps[0].text)); n > tt.maxRunes {
				t.Errorf("section text of %d characters", n)
			}
			var buf strings.Builder
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(ps[0].blocks); err != nil {
				t.Fatal(err)
			}
			b := buf.String()
			for _, w := range tt.want {
				if !strings.Contains(b, w) {
					t.Errorf("blocks lack %s:\n%s", w, b)
				}
			}
			for _, w := range tt.wantNot {
				if strings.Contains(b, w) {
					t.Errorf("blocks have %s:\n%s", w, b)
				}
			}
		})
	}
}
