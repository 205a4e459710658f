package fakeslack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"
)

func newServer(t *testing.T, opts Options) *Server {
	t.Helper()
	s := New(opts)
	t.Cleanup(s.Close)
	return s
}

// client is a slack-go client of s with the bot token.
func client(s *Server, opts ...slack.Option) *slack.Client {
	return slack.New(s.Options().BotToken, append([]slack.Option{slack.OptionAPIURL(s.APIURL())}, opts...)...)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// slackErr returns the Web API error code of err, or "" for another error.
func slackErr(err error) string {
	var se slack.SlackErrorResponse
	if errors.As(err, &se) {
		return se.Err
	}
	return ""
}

func TestAuth(t *testing.T) {
	s := newServer(t, Options{})
	ctx := testCtx(t)

	resp, err := client(s).AuthTestContext(ctx)
	if err != nil {
		t.Fatalf("auth.test: %v", err)
	}
	if resp.UserID != "UBOT" || resp.TeamID != "T0001" || resp.BotID != "BBOT" {
		t.Errorf("auth.test = %+v, want UBOT/T0001/BBOT", resp)
	}

	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"wrong bot token", func() error {
			_, err := slack.New("xoxb-wrong", slack.OptionAPIURL(s.APIURL())).AuthTestContext(ctx)
			return err
		}, "invalid_auth"},
		{"no token", func() error {
			_, err := slack.New("", slack.OptionAPIURL(s.APIURL())).AuthTestContext(ctx)
			return err
		}, "not_authed"},
		{"app token on chat.postMessage", func() error {
			_, _, err := slack.New("xapp-fake", slack.OptionAPIURL(s.APIURL())).PostMessageContext(ctx, "C1", slack.MsgOptionText("x", false))
			return err
		}, "not_allowed_token_type"},
		{"bot token on apps.connections.open", func() error {
			_, _, err := client(s, slack.OptionAppLevelToken("xoxb-fake")).StartSocketModeContext(ctx)
			return err
		}, "not_allowed_token_type"},
		{"wrong app token", func() error {
			_, _, err := client(s, slack.OptionAppLevelToken("xapp-wrong")).StartSocketModeContext(ctx)
			return err
		}, "invalid_auth"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := slackErr(tt.call()); got != tt.want {
				t.Errorf("error = %q, want %q", got, tt.want)
			}
		})
	}

	t.Run("apps.connections.open", func(t *testing.T) {
		_, u, err := client(s, slack.OptionAppLevelToken("xapp-fake")).StartSocketModeContext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := "ws" + strings.TrimPrefix(s.URL(), "http") + "/socketmode?ticket="; !strings.HasPrefix(u, want) {
			t.Errorf("url = %q, want prefix %q", u, want)
		}
	})
}

func TestMessages(t *testing.T) {
	s := newServer(t, Options{})
	ctx := testCtx(t)
	api := client(s)

	section := slack.NewSectionBlock(slack.NewTextBlockObject("mrkdwn", "*working*", false, false), nil, nil)
	meta := slack.SlackMetadata{EventType: "agentbot_part", EventPayload: map[string]any{"key": "wf/1/0"}}
	ch, root, err := api.PostMessageContext(ctx, "C1",
		slack.MsgOptionText("working", false), slack.MsgOptionBlocks(section), slack.MsgOptionMetadata(meta))
	if err != nil {
		t.Fatalf("chat.postMessage: %v", err)
	}
	if ch != "C1" || !regexp.MustCompile(`^\d{10}\.\d{6}$`).MatchString(root) {
		t.Fatalf("chat.postMessage = %q, %q; want C1 and a Slack ts", ch, root)
	}
	_, reply, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("step 1", false), slack.MsgOptionTS(root))
	if err != nil {
		t.Fatalf("chat.postMessage in thread: %v", err)
	}
	if compareTS(reply, root) <= 0 {
		t.Errorf("reply ts %s not after root ts %s", reply, root)
	}
	if _, _, _, err := api.UpdateMessageContext(ctx, "C1", reply, slack.MsgOptionText("step 1 done", false)); err != nil {
		t.Fatalf("chat.update: %v", err)
	}

	t.Run("replies with metadata", func(t *testing.T) {
		msgs, _, _, err := api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{
			ChannelID: "C1", Timestamp: root, IncludeAllMetadata: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != 2 {
			t.Fatalf("got %d messages, want 2", len(msgs))
		}
		if msgs[0].Metadata.EventType != "agentbot_part" || msgs[0].Metadata.EventPayload["key"] != "wf/1/0" {
			t.Errorf("root metadata = %+v", msgs[0].Metadata)
		}
		if msgs[0].ReplyCount != 1 || msgs[0].BotID != "BBOT" || msgs[0].User != "UBOT" {
			t.Errorf("root = reply_count %d, bot_id %q, user %q", msgs[0].ReplyCount, msgs[0].BotID, msgs[0].User)
		}
		if len(msgs[0].Blocks.BlockSet) != 1 || msgs[0].Blocks.BlockSet[0].BlockType() != slack.MBTSection {
			t.Errorf("root blocks = %+v", msgs[0].Blocks.BlockSet)
		}
		if msgs[1].Text != "step 1 done" || msgs[1].Edited == nil || msgs[1].ThreadTimestamp != root {
			t.Errorf("reply = %q edited %v thread_ts %q", msgs[1].Text, msgs[1].Edited, msgs[1].ThreadTimestamp)
		}
	})

	t.Run("replies without metadata", func(t *testing.T) {
		msgs, _, _, err := api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{ChannelID: "C1", Timestamp: reply})
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != 2 || msgs[0].Metadata.EventType != "" {
			t.Errorf("got %d messages, root metadata %+v; want 2 and none", len(msgs), msgs[0].Metadata)
		}
	})

	t.Run("state", func(t *testing.T) {
		got := s.Messages("C1")
		if len(got) != 2 {
			t.Fatalf("Messages = %d, want 2", len(got))
		}
		if got[0].Metadata == nil || got[0].Metadata.EventType != "agentbot_part" || !bytes.Contains(got[0].Blocks, []byte(`"section"`)) {
			t.Errorf("root = %+v", got[0])
		}
		if got[1].ThreadTS != root || got[1].Edits != 1 || got[1].BotID != "BBOT" {
			t.Errorf("reply = %+v", got[1])
		}
		if th := s.Thread("C1", root); len(th) != 2 {
			t.Errorf("Thread = %d messages, want 2", len(th))
		}
		if n := s.Calls("chat.postMessage"); n != 2 {
			t.Errorf("Calls(chat.postMessage) = %d, want 2", n)
		}
	})

	t.Run("history", func(t *testing.T) {
		h, err := api.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{ChannelID: "C1"})
		if err != nil {
			t.Fatal(err)
		}
		if len(h.Messages) != 1 || h.Messages[0].Timestamp != root || h.Messages[0].ReplyCount != 1 {
			t.Errorf("history = %+v", h.Messages)
		}
	})

	t.Run("permalink", func(t *testing.T) {
		link, err := api.GetPermalinkContext(ctx, &slack.PermalinkParameters{Channel: "C1", Ts: reply})
		if err != nil {
			t.Fatal(err)
		}
		want := "https://fake.slack.com/archives/C1/p" + strings.Replace(reply, ".", "", 1) + "?thread_ts=" + root + "&cid=C1"
		if link != want {
			t.Errorf("permalink = %q, want %q", link, want)
		}
	})

	t.Run("ephemeral", func(t *testing.T) {
		ts, err := api.PostEphemeralContext(ctx, "C1", "U1", slack.MsgOptionText("only you", false), slack.MsgOptionTS(root))
		if err != nil || ts == "" {
			t.Fatalf("chat.postEphemeral = %q, %v", ts, err)
		}
		eph := s.Ephemerals("C1")
		if len(eph) != 1 || eph[0].Recipient != "U1" || eph[0].ThreadTS != root {
			t.Errorf("Ephemerals = %+v", eph)
		}
		if n := len(s.Messages("C1")); n != 2 {
			t.Errorf("ephemeral went into Messages: %d messages", n)
		}
	})

	t.Run("users.info", func(t *testing.T) {
		s.SetUser(User{ID: "U2", Name: "ada", RealName: "Ada Lovelace", IsAdmin: true})
		u, err := api.GetUserInfoContext(ctx, "U2")
		if err != nil {
			t.Fatal(err)
		}
		if u.Name != "ada" || !u.IsAdmin || u.Profile.RealName != "Ada Lovelace" {
			t.Errorf("users.info = %+v", u)
		}
		if _, err := api.GetUserInfoContext(ctx, "nobody"); err == nil || err.Error() != "user_not_found" {
			t.Errorf("users.info(nobody) error = %v, want user_not_found", err)
		}
	})

	t.Run("delete", func(t *testing.T) {
		_, ts, err := api.PostMessageContext(ctx, "C9", slack.MsgOptionText("bye", false))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := api.DeleteMessageContext(ctx, "C9", ts); err != nil {
			t.Fatal(err)
		}
		if n := len(s.Messages("C9")); n != 0 {
			t.Errorf("%d messages after chat.delete", n)
		}
	})
}

func TestMessageErrors(t *testing.T) {
	s := newServer(t, Options{})
	ctx := testCtx(t)
	api := client(s)
	userTS := s.PostUserMessage("C1", "U1", "hi", "")

	var tooMany []slack.Block
	for range 51 {
		tooMany = append(tooMany, slack.NewDividerBlock())
	}
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"no text", func() error {
			_, _, err := api.PostMessageContext(ctx, "C1")
			return err
		}, "no_text"},
		{"no channel", func() error {
			_, _, err := api.PostMessageContext(ctx, "", slack.MsgOptionText("x", false))
			return err
		}, "channel_not_found"},
		{"51 blocks", func() error {
			_, _, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionBlocks(tooMany...))
			return err
		}, "invalid_blocks"},
		{"section text over 3000", func() error {
			b := slack.NewSectionBlock(slack.NewTextBlockObject("mrkdwn", strings.Repeat("x", 3001), false, false), nil, nil)
			_, _, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionBlocks(b))
			return err
		}, "invalid_blocks"},
		{"text over 40000", func() error {
			_, _, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText(strings.Repeat("x", 40001), false))
			return err
		}, "msg_too_long"},
		{"unknown thread", func() error {
			_, _, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("x", false), slack.MsgOptionTS("1.000001"))
			return err
		}, "invalid_thread_ts"},
		{"update unknown message", func() error {
			_, _, _, err := api.UpdateMessageContext(ctx, "C1", "1.000001", slack.MsgOptionText("x", false))
			return err
		}, "message_not_found"},
		{"update a user's message", func() error {
			_, _, _, err := api.UpdateMessageContext(ctx, "C1", userTS, slack.MsgOptionText("x", false))
			return err
		}, "cant_update_message"},
		{"replies of unknown thread", func() error {
			_, _, _, err := api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{ChannelID: "C1", Timestamp: "1.000001"})
			return err
		}, "thread_not_found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := slackErr(tt.call()); got != tt.want {
				t.Errorf("error = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestJSONBody posts as a client that sends JSON bodies does: token in the
// Authorization header, blocks and metadata as JSON values.
func TestJSONBody(t *testing.T) {
	s := newServer(t, Options{})
	post := func(auth, body string) map[string]any {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, s.APIURL()+"chat.postMessage", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	body := `{"channel":"C1","text":"hi","blocks":[{"type":"divider"}],"metadata":{"event_type":"x","event_payload":{"a":1}}}`
	if out := post("Bearer xoxb-fake", body); out["ok"] != true || out["ts"] == "" {
		t.Errorf("JSON chat.postMessage = %v", out)
	}
	if out := post("", `{"token":"xoxb-fake","channel":"C1","text":"hi"}`); out["error"] != "not_authed" {
		t.Errorf("token in a JSON body: %v, want not_authed", out)
	}
	m := s.Messages("C1")
	if len(m) != 1 || string(m[0].Blocks) != `[{"type":"divider"}]` || m[0].Metadata == nil || string(m[0].Metadata.EventPayload) != `{"a":1}` {
		t.Errorf("Messages = %+v", m)
	}
}

func TestRateLimit(t *testing.T) {
	s := newServer(t, Options{})
	ctx := testCtx(t)
	api := client(s)

	s.RateLimit("chat.postMessage", 2, 1500*time.Millisecond)
	for i := range 2 {
		_, _, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("x", false))
		var rl *slack.RateLimitedError
		if !errors.As(err, &rl) {
			t.Fatalf("call %d: error %v, want *slack.RateLimitedError", i, err)
		}
		if rl.RetryAfter != 2*time.Second {
			t.Errorf("RetryAfter = %v, want 2s (rounded up)", rl.RetryAfter)
		}
	}
	if _, _, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("x", false)); err != nil {
		t.Fatalf("third call: %v", err)
	}
	if n, m := s.Calls("chat.postMessage"), len(s.Messages("C1")); n != 3 || m != 1 {
		t.Errorf("Calls = %d, messages = %d; want 3 and 1", n, m)
	}

	t.Run("wire", func(t *testing.T) {
		s.RateLimit("auth.test", 1, 3*time.Second)
		resp, err := http.PostForm(s.APIURL()+"auth.test", map[string][]string{"token": {"xoxb-fake"}})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "3" ||
			strings.TrimSpace(string(body)) != `{"error":"ratelimited","ok":false}` {
			t.Errorf("got %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	})

	t.Run("slack-go retries", func(t *testing.T) {
		s.RateLimit("auth.test", 1, time.Second)
		retrying := client(s, slack.OptionRetryConfig(slack.RetryConfig{MaxRetries: 1}))
		if _, err := retrying.AuthTestContext(ctx); err != nil {
			t.Fatalf("auth.test with retry: %v", err)
		}
	})
}

func TestTimestampsIncrease(t *testing.T) {
	s := newServer(t, Options{})
	prev := ""
	for i := range 200 {
		ts := s.PostUserMessage("C1", "U1", "x", "")
		if prev != "" && compareTS(ts, prev) <= 0 {
			t.Fatalf("message %d: ts %s not after %s", i, ts, prev)
		}
		prev = ts
	}
}
