package fakeslack

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/slack-go/slack"
)

func TestSetStatus(t *testing.T) {
	s := newServer(t, Options{})
	api := client(s)
	ctx := testCtx(t)
	_, root, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("root", false))
	if err != nil {
		t.Fatal(err)
	}
	set := func(ch, ts, status string) error {
		return api.SetAssistantThreadsStatusContext(ctx, slack.AssistantThreadsSetStatusParameters{ChannelID: ch, ThreadTS: ts, Status: status})
	}
	if err := set("C1", root, "is working…"); err != nil {
		t.Fatal(err)
	}
	if got := s.ThreadStatus("C1", root); got != "is working…" {
		t.Errorf("status %q", got)
	}
	// The app's reply in the thread clears it, as on Slack.
	if _, _, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("done", false), slack.MsgOptionTS(root)); err != nil {
		t.Fatal(err)
	}
	if got := s.ThreadStatus("C1", root); got != "" {
		t.Errorf("status %q after a reply, want none", got)
	}
	if err := set("C1", root, "again"); err != nil {
		t.Fatal(err)
	}
	if err := set("C1", root, ""); err != nil {
		t.Fatal(err)
	}
	if got := s.ThreadStatus("C1", root); got != "" {
		t.Errorf("status %q after a clear", got)
	}
	if n := len(s.StatusCalls()); n != 3 {
		t.Errorf("%d calls recorded, want 3", n)
	}

	errs := []struct {
		name, ch, ts, want string
	}{
		{"unknown channel", "C404", root, "channel_not_found"},
		{"unknown thread", "C1", "1.000001", "invalid_thread_ts"},
		{"no channel", "", root, "invalid_arguments"},
		{"no thread", "C1", "", "invalid_arguments"},
	}
	for _, tc := range errs {
		t.Run(tc.name, func(t *testing.T) {
			if got := slackErr(set(tc.ch, tc.ts, "x")); got != tc.want {
				t.Errorf("error %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("no status", func(t *testing.T) {
		body, _ := json.Marshal(map[string]string{"channel_id": "C1", "thread_ts": root})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.APIURL()+"assistant.threads.setStatus", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+s.Options().BotToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			OK    bool   `json:"ok"`
			Error string `json:"error"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.OK || out.Error != "invalid_arguments" {
			t.Errorf("answer %+v, %v; want invalid_arguments", out, err)
		}
	})
	t.Run("refused", func(t *testing.T) {
		s.Refuse("assistant.threads.setStatus", "missing_scope")
		err := set("C1", root, "x")
		if slackErr(err) != "missing_scope" {
			t.Fatalf("error %v, want missing_scope", err)
		}
		s.Refuse("assistant.threads.setStatus", "")
		if err := set("C1", root, "x"); err != nil {
			t.Errorf("after lifting the refusal: %v", err)
		}
	})
}

func TestMarkdownBlocks(t *testing.T) {
	s := newServer(t, Options{})
	api := client(s)
	ctx := testCtx(t)
	md := "**bold** and a [link](https://example.com)"
	_, ts, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("fallback", false), slack.MsgOptionBlocks(slack.NewMarkdownBlock("", md)))
	if err != nil {
		t.Fatal(err)
	}
	msgs := s.Messages("C1")
	if len(msgs) != 1 || msgs[0].TS != ts || !strings.Contains(string(msgs[0].Blocks), `"type":"markdown"`) {
		t.Fatalf("messages %+v", msgs)
	}
	cases := []struct {
		name   string
		blocks []slack.Block
	}{
		{"one too long", []slack.Block{slack.NewMarkdownBlock("", strings.Repeat("x", 12001))}},
		{"two too long together", []slack.Block{slack.NewMarkdownBlock("", strings.Repeat("x", 7000)), slack.NewMarkdownBlock("", strings.Repeat("y", 7000))}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("f", false), slack.MsgOptionBlocks(tc.blocks...))
			if slackErr(err) != "invalid_blocks" {
				t.Errorf("error %v, want invalid_blocks", err)
			}
		})
	}
	if _, _, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionBlocks(slack.NewMarkdownBlock("", strings.Repeat("é", 12000)))); err != nil {
		t.Errorf("12,000 characters: %v", err)
	}
	t.Run("refused type", func(t *testing.T) {
		s.RefuseBlockType("markdown", true)
		_, _, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("f", false), slack.MsgOptionBlocks(slack.NewMarkdownBlock("", md)))
		if slackErr(err) != "invalid_blocks" {
			t.Errorf("post: %v, want invalid_blocks", err)
		}
		_, _, _, err = api.UpdateMessageContext(ctx, "C1", ts, slack.MsgOptionBlocks(slack.NewMarkdownBlock("", md)))
		if slackErr(err) != "invalid_blocks" {
			t.Errorf("update: %v, want invalid_blocks", err)
		}
		// Other blocks still go.
		if _, _, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionBlocks(slack.NewSectionBlock(slack.NewTextBlockObject("mrkdwn", "*ok*", false, false), nil, nil))); err != nil {
			t.Errorf("a section block: %v", err)
		}
		s.RefuseBlockType("markdown", false)
		if _, _, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionBlocks(slack.NewMarkdownBlock("", md))); err != nil {
			t.Errorf("after accepting markdown again: %v", err)
		}
	})
}
