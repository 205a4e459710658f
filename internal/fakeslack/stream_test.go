package fakeslack

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"
)

// recipient is what chat.startStream needs outside a DM.
func recipient(s *Server, user string) slack.MsgOption {
	return slack.MsgOptionCompose(slack.MsgOptionRecipientUserID(user), slack.MsgOptionRecipientTeamID(s.Options().TeamID))
}

// message returns the channel's message ts as the accessors show it.
func message(t *testing.T, s *Server, channel, ts string) Message {
	t.Helper()
	for _, m := range s.Messages(channel) {
		if m.TS == ts {
			return m
		}
	}
	t.Fatalf("no message %s in %s", ts, channel)
	return Message{}
}

func TestStreamGrowsThenStops(t *testing.T) {
	s := newServer(t, Options{})
	api := client(s)
	ctx := testCtx(t)
	_, root, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("question", false))
	if err != nil {
		t.Fatal(err)
	}
	if err := api.SetAssistantThreadsStatusContext(ctx, slack.AssistantThreadsSetStatusParameters{ChannelID: "C1", ThreadTS: root, Status: "is working…"}); err != nil {
		t.Fatal(err)
	}
	ch, ts, err := api.StartStreamContext(ctx, "C1", slack.MsgOptionTS(root), recipient(s, "U1"), slack.MsgOptionMarkdownText("**Hel"))
	if err != nil {
		t.Fatal(err)
	}
	if ch != "C1" || ts == "" {
		t.Fatalf("startStream answered channel %q ts %q", ch, ts)
	}
	if got := s.ThreadStatus("C1", root); got != "" {
		t.Errorf("status %q once the stream started, want none (the app replied)", got)
	}
	for _, part := range []string{"lo**", " world"} {
		if _, _, err := api.AppendStreamContext(ctx, "C1", ts, slack.MsgOptionMarkdownText(part)); err != nil {
			t.Fatal(err)
		}
	}
	m := message(t, s, "C1", ts)
	if !m.Streaming || m.Text != "**Hello** world" || m.ThreadTS != root || m.BotID != s.Options().BotID {
		t.Fatalf("streaming message %+v", m)
	}
	if thread := s.Thread("C1", root); len(thread) != 2 || thread[1].TS != ts {
		t.Fatalf("thread %+v, want the root and the streamed reply", thread)
	}

	meta := slack.SlackMetadata{EventType: "agentbot_message", EventPayload: map[string]any{"key": "k"}}
	ctxBlock := slack.NewContextBlock("", slack.NewTextBlockObject(slack.MarkdownType, "sources", false, false))
	if _, _, err := api.StopStreamContext(ctx, "C1", ts, slack.MsgOptionMarkdownText("!"), slack.MsgOptionMetadata(meta), slack.MsgOptionBlocks(ctxBlock)); err != nil {
		t.Fatal(err)
	}
	m = message(t, s, "C1", ts)
	if m.Streaming || m.Text != "**Hello** world!" || m.Metadata == nil || m.Metadata.EventType != "agentbot_message" {
		t.Fatalf("stopped message %+v", m)
	}
	var blocks []struct {
		Type string `json:"type"`
		Text any    `json:"text"`
	}
	if err := json.Unmarshal(m.Blocks, &blocks); err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 2 || blocks[0].Type != "markdown" || blocks[0].Text != "**Hello** world!" || blocks[1].Type != "context" {
		t.Errorf("blocks %s, want the streamed markdown then the stop's context block", m.Blocks)
	}
	// The metadata is what a lookup of the thread finds.
	msgs, _, _, err := api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{ChannelID: "C1", Timestamp: root, IncludeAllMetadata: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 || msgs[1].Metadata.EventPayload["key"] != "k" {
		t.Errorf("conversations.replies %+v", msgs)
	}

	for _, call := range []struct {
		name string
		do   func() error
	}{
		{"append", func() error {
			_, _, err := api.AppendStreamContext(ctx, "C1", ts, slack.MsgOptionMarkdownText("more"))
			return err
		}},
		{"stop", func() error { _, _, err := api.StopStreamContext(ctx, "C1", ts); return err }},
	} {
		t.Run(call.name+" after stop", func(t *testing.T) {
			if got := slackErr(call.do()); got != "message_not_in_streaming_state" {
				t.Errorf("error %q, want message_not_in_streaming_state", got)
			}
		})
	}
	// A stopped stream is an ordinary message of the app.
	if _, _, _, err := api.UpdateMessageContext(ctx, "C1", ts, slack.MsgOptionText("final", false), slack.MsgOptionBlocks()); err != nil {
		t.Fatal(err)
	}
	if m = message(t, s, "C1", ts); m.Text != "final" || m.Edits != 1 {
		t.Errorf("edited message %+v", m)
	}
	if _, _, err := api.DeleteMessageContext(ctx, "C1", ts); err != nil {
		t.Fatal(err)
	}
	if n := len(s.Thread("C1", root)); n != 1 {
		t.Errorf("%d messages in the thread after chat.delete, want the root", n)
	}
}

func TestStreamDeletedWhileStreaming(t *testing.T) {
	s := newServer(t, Options{})
	api := client(s)
	ctx := testCtx(t)
	_, root, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("question", false))
	if err != nil {
		t.Fatal(err)
	}
	_, ts, err := api.StartStreamContext(ctx, "C1", slack.MsgOptionTS(root), recipient(s, "U1"), slack.MsgOptionMarkdownText("thinking"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := api.DeleteMessageContext(ctx, "C1", ts); err != nil {
		t.Fatal(err)
	}
	if _, _, err := api.AppendStreamContext(ctx, "C1", ts, slack.MsgOptionMarkdownText("x")); slackErr(err) != "message_not_found" {
		t.Errorf("append to a deleted stream: %v, want message_not_found", err)
	}
}

func TestStreamStartErrors(t *testing.T) {
	s := newServer(t, Options{})
	api := client(s)
	ctx := testCtx(t)
	_, root, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("question", false))
	if err != nil {
		t.Fatal(err)
	}
	_, dmRoot, err := api.PostMessageContext(ctx, "D1", slack.MsgOptionText("question", false))
	if err != nil {
		t.Fatal(err)
	}
	team := slack.MsgOptionRecipientTeamID(s.Options().TeamID)
	cases := []struct {
		name    string
		channel string
		opts    []slack.MsgOption
		want    string
	}{
		{"channel thread", "C1", []slack.MsgOption{slack.MsgOptionTS(root), recipient(s, "U1")}, ""},
		{"DM without recipient", "D1", []slack.MsgOption{slack.MsgOptionTS(dmRoot)}, ""},
		{"no channel", "", []slack.MsgOption{slack.MsgOptionTS(root), recipient(s, "U1")}, "channel_not_found"},
		{"unknown thread", "C1", []slack.MsgOption{slack.MsgOptionTS("1.000001"), recipient(s, "U1")}, "invalid_thread_ts"},
		{"no user outside a DM", "C1", []slack.MsgOption{slack.MsgOptionTS(root), team}, "missing_recipient_user_id"},
		{"no team outside a DM", "C1", []slack.MsgOption{slack.MsgOptionTS(root), slack.MsgOptionRecipientUserID("U1")}, "missing_recipient_team_id"},
		{"another team", "C1", []slack.MsgOption{slack.MsgOptionTS(root), slack.MsgOptionRecipientUserID("U1"), slack.MsgOptionRecipientTeamID("T9999")}, "team_not_found"},
		{"not a user", "C1", []slack.MsgOption{slack.MsgOptionTS(root), recipient(s, "bob")}, "user_not_found"},
		{"markdown too long", "C1", []slack.MsgOption{slack.MsgOptionTS(root), recipient(s, "U1"), slack.MsgOptionMarkdownText(strings.Repeat("x", 12001))}, "msg_too_long"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := len(s.Messages(tc.channel))
			_, ts, err := api.StartStreamContext(ctx, tc.channel, tc.opts...)
			if got := slackErr(err); got != tc.want || (tc.want == "" && err != nil) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			after := s.Messages(tc.channel)
			switch {
			case tc.want != "" && len(after) != before:
				t.Errorf("a refused start left a message: %+v", after)
			case tc.want == "" && (len(after) != before+1 || !after[len(after)-1].Streaming || after[len(after)-1].TS != ts):
				t.Errorf("want one more message, streaming: %+v", after)
			}
		})
	}
}

func TestStreamAppendErrors(t *testing.T) {
	s := newServer(t, Options{})
	api := client(s)
	ctx := testCtx(t)
	_, root, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("question", false))
	if err != nil {
		t.Fatal(err)
	}
	userTS := s.PostUserMessage("C1", "U1", "a person's reply", root)
	_, posted, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("posted", false), slack.MsgOptionTS(root))
	if err != nil {
		t.Fatal(err)
	}
	_, ts, err := api.StartStreamContext(ctx, "C1", slack.MsgOptionTS(root), recipient(s, "U1"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, channel, ts, text, want string
	}{
		{"no channel", "", ts, "x", "channel_not_found"},
		{"unknown ts", "C1", "1.000001", "x", "message_not_found"},
		{"no ts", "C1", "", "x", "message_not_found"},
		{"a posted message", "C1", posted, "x", "message_not_in_streaming_state"},
		{"a person's message", "C1", userTS, "x", "message_not_in_streaming_state"},
		{"no text", "C1", ts, "", "no_text"},
		{"text too long", "C1", ts, strings.Repeat("x", 12001), "msg_too_long"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := api.AppendStreamContext(ctx, tc.channel, tc.ts, slack.MsgOptionMarkdownText(tc.text))
			if got := slackErr(err); got != tc.want {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
	t.Run("message past 40,000 characters", func(t *testing.T) {
		for range 3 {
			if _, _, err := api.AppendStreamContext(ctx, "C1", ts, slack.MsgOptionMarkdownText(strings.Repeat("y", 12000))); err != nil {
				t.Fatal(err)
			}
		}
		_, _, err := api.AppendStreamContext(ctx, "C1", ts, slack.MsgOptionMarkdownText(strings.Repeat("z", 4001)))
		if got := slackErr(err); got != "msg_too_long" {
			t.Errorf("error %v, want msg_too_long", err)
		}
		if n := len(message(t, s, "C1", ts).Text); n != 36000 {
			t.Errorf("text of %d characters, want the 36,000 accepted", n)
		}
	})
	t.Run("refused block type at stop", func(t *testing.T) {
		s.RefuseBlockType("context", true)
		t.Cleanup(func() { s.RefuseBlockType("context", false) })
		blk := slack.NewContextBlock("", slack.NewTextBlockObject(slack.MarkdownType, "x", false, false))
		_, _, err := api.StopStreamContext(ctx, "C1", ts, slack.MsgOptionBlocks(blk))
		if got := slackErr(err); got != "invalid_blocks" {
			t.Errorf("error %v, want invalid_blocks", err)
		}
		if !message(t, s, "C1", ts).Streaming {
			t.Error("a refused stop stopped the stream")
		}
	})
}

func TestStreamRateLimitAndRefusal(t *testing.T) {
	s := newServer(t, Options{})
	api := client(s)
	ctx := testCtx(t)
	_, root, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("question", false))
	if err != nil {
		t.Fatal(err)
	}
	_, ts, err := api.StartStreamContext(ctx, "C1", slack.MsgOptionTS(root), recipient(s, "U1"), slack.MsgOptionMarkdownText("a"))
	if err != nil {
		t.Fatal(err)
	}
	s.RateLimit("chat.appendStream", 1, 2*time.Second)
	_, _, err = api.AppendStreamContext(ctx, "C1", ts, slack.MsgOptionMarkdownText("b"))
	var rl *slack.RateLimitedError
	if !errors.As(err, &rl) || rl.RetryAfter != 2*time.Second {
		t.Fatalf("error %v, want a rate limit of 2s", err)
	}
	if _, _, err := api.AppendStreamContext(ctx, "C1", ts, slack.MsgOptionMarkdownText("c")); err != nil {
		t.Fatal(err)
	}
	if got := message(t, s, "C1", ts).Text; got != "ac" {
		t.Errorf("text %q, want the limited append left out", got)
	}
	if n := s.Calls("chat.appendStream"); n != 2 {
		t.Errorf("%d appendStream calls counted, want 2", n)
	}

	s.Refuse("chat.startStream", "missing_scope")
	if _, _, err := api.StartStreamContext(ctx, "C1", slack.MsgOptionTS(root), recipient(s, "U1")); slackErr(err) != "missing_scope" {
		t.Errorf("refused start: %v, want missing_scope", err)
	}
	s.Refuse("chat.startStream", "")
	if _, _, err := api.StartStreamContext(ctx, "C1", slack.MsgOptionTS(root), recipient(s, "U1")); err != nil {
		t.Errorf("start once the refusal is lifted: %v", err)
	}
}
