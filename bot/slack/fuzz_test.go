package slackbot

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/agentbot/agentbot/bot"
)

// The payload parsers under fuzzing (issue 16): whatever a signed request
// holds, they never panic, and an event they accept names a thread that
// parses back to the channel and timestamp it came from, so its answer
// goes to that thread and its session is that thread's. Seeds are in
// testdata/fuzz; make fuzz runs each target longer.

// checkEvent is what every accepted event must satisfy.
func checkEvent(t *testing.T, ev bot.Event, channel string) {
	t.Helper()
	if (ev.ThreadKey == "") == (ev.NewThreadKey == "") {
		t.Fatalf("event with thread %q and new thread %q: want exactly one", ev.ThreadKey, ev.NewThreadKey)
	}
	team, ch, ts, err := ParseThreadKey(threadOf(ev))
	if err != nil {
		t.Fatalf("accepted event's thread does not parse: %v", err)
	}
	if team != "T1" || ch != channel || ch != ev.Channel {
		t.Fatalf("thread %q is not of channel %q (team %q, channel %q)", threadOf(ev), channel, team, ch)
	}
	if tsTime(ts).IsZero() {
		t.Fatalf("thread %q has no Slack timestamp", threadOf(ev))
	}
	switch ev.Kind {
	case bot.KindCommand, bot.KindMention, bot.KindMessage:
	default:
		t.Fatalf("event kind %q", ev.Kind)
	}
	if ev.User == "" {
		t.Fatalf("event without a user: %+v", ev)
	}
}

func FuzzEventCallback(f *testing.F) {
	for _, s := range []string{
		`{"type":"event_callback","event_id":"Ev1","event":{"type":"app_mention","user":"U1","text":"<@UBOT> hi","ts":"1700000000.000100","channel":"C1"}}`,
		`{"type":"event_callback","event_id":"Ev2","event":{"type":"message","user":"U1","text":"more","ts":"1700000001.000100","thread_ts":"1700000000.000100","channel":"C1"}}`,
		`{"type":"event_callback","event_id":"Ev3","event":{"type":"message","user":"U1","text":"!agent stop","ts":"1700000001.000100","channel":"C1","channel_type":"channel"}}`,
		`{"type":"event_callback","event":{"type":"message","subtype":"file_share","user":"U1","ts":"1.2","thread_ts":"1.1","channel":"C1","files":[{"id":"F1","name":"a"}]}}`,
		`{"type":"event_callback","event":{"type":"app_mention","user":"U1","text":"<@UBOT|bot> new docker","ts":"1700000000.1","channel":"C1:X","edited":null}}`,
		`{"type":"url_verification","challenge":"c"}`,
		`{"type":"event_callback","event":{"type":"message","user":"U1","ts":"x:y","thread_ts":"1:2","channel":"C1"}}`,
		`{"event":7}`, ``, `null`,
	} {
		f.Add([]byte(s))
	}
	id := testIdentity()
	f.Fuzz(func(t *testing.T, data []byte) {
		var env envelope
		if json.Unmarshal(data, &env) != nil {
			return
		}
		ev, ok := eventOf(id, env)
		if ok {
			checkEvent(t, ev, env.Event.Channel)
		}
	})
}

func FuzzInteraction(f *testing.F) {
	for _, p := range []string{
		`{"type":"block_actions","user":{"id":"U1"},"channel":{"id":"C1"},"message":{"ts":"1700000000.000100","thread_ts":"1700000000.000050"},"actions":[{"action_id":"` + ActionStop + `","action_ts":"1.2"}]}`,
		`{"type":"block_actions","user":{"id":"U1"},"container":{"channel_id":"C1","message_ts":"1700000000.1"},"actions":[{"action_id":"` + ActionSwitch + `","selected_option":{"value":"docker"}}]}`,
		`{"type":"message_action","callback_id":"` + ShortcutForkFromID + `","user":{"id":"U1"},"channel":{"id":"C1"},"message":{"ts":"1700000000.2"}}`,
		`{"type":"block_actions","user":{"id":"U1"},"channel":{"id":"C:1"},"message":{"ts":"1:2"},"actions":[{"action_id":"` + ActionFork + `"}]}`,
		`{"type":"block_actions","user":{"id":"U1"},"channel":{"id":"C1"},"message":{"ts":"1700000000.3","thread_ts":"1700000000.1"},"actions":[{"action_id":"` + ActionApproveAll + `","value":"t3-call_abc","action_ts":"1.3"},{"action_id":"` + ActionDeny + `","value":"t 3","action_ts":"1.4"}]}`,
		`{"type":"view_submission"}`, `{}`, `[]`,
	} {
		f.Add([]byte("payload=" + url.QueryEscape(p)))
	}
	f.Add([]byte("payload=%"))
	f.Add([]byte(""))
	id := testIdentity()
	f.Fuzz(func(t *testing.T, body []byte) {
		cb, err := interactionOf(body)
		if err != nil {
			return
		}
		channel := cb.Channel.ID
		if channel == "" {
			channel = cb.Container.ChannelID
		}
		for _, ev := range interactionEvents(id, cb) {
			checkEvent(t, ev, channel)
			if ev.Kind != bot.KindCommand {
				t.Fatalf("an interaction made a %s event", ev.Kind)
			}
			if _, err := bot.Parse(ev.Text, []string{"local", "docker"}); err != nil && !strings.HasPrefix(ev.Text, string(bot.VerbSwitch)+" ") {
				t.Fatalf("an interaction made the command %q, which does not parse: %v", ev.Text, err)
			}
		}
	})
}

func FuzzSlashCommand(f *testing.F) {
	for _, b := range []string{
		"command=%2Fagent&text=new+docker&channel_id=C1&user_id=U1&team_id=T1&trigger_id=t1&response_url=https%3A%2F%2Fhooks.slack.com%2Fx",
		"command=%2Fagent&text=switch+%26lt%3Bdocker%26gt%3B&channel_id=C1&user_id=U1",
		"command=%2Fagent&text=title+%22a+b%22&channel_id=C:1&user_id=U1",
		"command=%2Fagent&text=%00%1b%ff&channel_id=C1&user_id=U1",
		"text=list&channel_id=&user_id=U1", "channel_id=C1", "%", "",
	} {
		f.Add([]byte(b))
	}
	backends := []string{"local", "docker"}
	f.Fuzz(func(t *testing.T, body []byte) {
		cmd, ok := slashCommandOf(body)
		if !ok {
			return
		}
		if cmd.ChannelID == "" || cmd.UserID == "" {
			t.Fatalf("accepted a slash command without channel or user: %+v", cmd)
		}
		ev, ok := slashEvent(cmd)
		if !ok {
			if validChannel(cmd.ChannelID) {
				t.Fatalf("refused the slash command of valid channel %q", cmd.ChannelID)
			}
			return
		}
		if ev.Kind != bot.KindCommand || ev.Channel != cmd.ChannelID || ev.User != cmd.UserID || ev.Platform != Platform {
			t.Fatalf("slash command %+v made the event %+v", cmd, ev)
		}
		if ev.Text != strings.TrimSpace(ev.Text) {
			t.Fatalf("command text %q is not trimmed", ev.Text)
		}
		// Whatever the text, the grammar answers (a command or an error).
		_, _ = bot.Parse(ev.Text, backends)
		// The thread that /agent new opens under the bot's message parses
		// back to this channel.
		_, ch, _, err := ParseThreadKey(ThreadKey("T1", ev.Channel, "1700000000.000100"))
		if err != nil || ch != ev.Channel {
			t.Fatalf("thread key of channel %q: channel %q, %v", ev.Channel, ch, err)
		}
	})
}
