package fakeslack

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"
)

// publishRaw calls views.publish with body as JSON and returns the answer.
func publishRaw(t *testing.T, s *Server, token string, body map[string]any) map[string]any {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, s.APIURL()+"views.publish", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
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

// homeBlocks is a home of n sections, then an actions block with a Stop
// and a confirmed Destroy button whose value is thread.
func homeBlocks(n int, thread string) []any {
	var blocks []any
	for i := range n {
		blocks = append(blocks, map[string]any{"type": "section", "block_id": fmt.Sprintf("s%d", i),
			"text": map[string]any{"type": "mrkdwn", "text": fmt.Sprintf("session %d", i)}})
	}
	return append(blocks, map[string]any{"type": "actions", "block_id": "actions", "elements": []any{
		map[string]any{"type": "button", "action_id": "agent_stop", "value": thread, "text": map[string]any{"type": "plain_text", "text": "Stop"}},
		map[string]any{"type": "button", "action_id": "agent_destroy", "value": thread, "style": "danger",
			"text": map[string]any{"type": "plain_text", "text": "Destroy"},
			"confirm": map[string]any{"title": map[string]any{"type": "plain_text", "text": "Sure?"},
				"text": map[string]any{"type": "mrkdwn", "text": "It goes."}, "confirm": map[string]any{"type": "plain_text", "text": "Destroy"},
				"deny": map[string]any{"type": "plain_text", "text": "Cancel"}}},
	}})
}

func TestViewsPublish(t *testing.T) {
	s := newServer(t, Options{})
	s.SetUser(User{ID: "U1", Name: "ada"})
	home := func(blocks []any) map[string]any { return map[string]any{"type": "home", "blocks": blocks} }

	// A first publication; the hash it answers lets the next one through.
	ok := publishRaw(t, s, s.Options().BotToken, map[string]any{"user_id": "U1", "view": home(homeBlocks(1, "t1"))})
	if ok["ok"] != true {
		t.Fatalf("publish: %v", ok)
	}
	first, _ := s.Home("U1")
	view := ok["view"].(map[string]any)
	if view["type"] != "home" || view["id"] != first.ID || view["hash"] != first.Hash || first.Publishes != 1 {
		t.Fatalf("answer %v, stored %+v", view, first)
	}

	long := strings.Repeat("a", 256)
	tests := []struct {
		name  string
		token string
		body  map[string]any
		want  string // error code; "" for ok
		msg   string // in a response_metadata message
	}{
		{name: "no token", body: map[string]any{"user_id": "U1", "view": home(homeBlocks(1, "t"))}, want: "not_authed"},
		{name: "app token", token: s.Options().AppToken, body: map[string]any{"user_id": "U1", "view": home(homeBlocks(1, "t"))}, want: "not_allowed_token_type"},
		{name: "no user", body: map[string]any{"view": home(homeBlocks(1, "t"))}, want: "invalid_arguments", msg: "user_id"},
		{name: "no view", body: map[string]any{"user_id": "U1"}, want: "invalid_arguments", msg: "view"},
		{name: "view not json", body: map[string]any{"user_id": "U1", "view": "{not json"}, want: "invalid_arguments", msg: "JSON object"},
		{name: "view as a string of json", body: map[string]any{"user_id": "U1", "view": mustJSON(home(homeBlocks(2, "t")))}},
		{name: "modal", body: map[string]any{"user_id": "U1", "view": map[string]any{"type": "modal", "blocks": homeBlocks(1, "t")}}, want: "invalid_arguments", msg: "/view/type"},
		{name: "not a member", body: map[string]any{"user_id": "nobody", "view": home(homeBlocks(1, "t"))}, want: "user_not_found"},
		{name: "100 blocks", body: map[string]any{"user_id": "U1", "view": home(homeBlocks(99, "t"))}},
		{name: "101 blocks", body: map[string]any{"user_id": "U1", "view": home(homeBlocks(100, "t"))}, want: "invalid_arguments", msg: "no more than 100 items"},
		{name: "block_id twice", body: map[string]any{"user_id": "U1", "view": home(append(homeBlocks(1, "t"),
			map[string]any{"type": "divider", "block_id": "s0"}))}, want: "invalid_arguments", msg: "not unique"},
		{name: "long block_id", body: map[string]any{"user_id": "U1", "view": home([]any{map[string]any{"type": "divider", "block_id": long}})},
			want: "invalid_arguments", msg: "/view/blocks/0/block_id"},
		{name: "long action_id", body: map[string]any{"user_id": "U1", "view": home([]any{map[string]any{"type": "actions", "elements": []any{
			map[string]any{"type": "button", "action_id": long, "text": map[string]any{"type": "plain_text", "text": "x"}}}}})},
			want: "invalid_arguments", msg: "/view/blocks/0/elements/0/action_id"},
		{name: "action_id twice in a block", body: map[string]any{"user_id": "U1", "view": home([]any{map[string]any{"type": "actions", "elements": []any{
			map[string]any{"type": "button", "action_id": "a", "text": map[string]any{"type": "plain_text", "text": "x"}},
			map[string]any{"type": "button", "action_id": "a", "text": map[string]any{"type": "plain_text", "text": "y"}}}}})},
			want: "invalid_arguments", msg: "not unique in the block"},
		{name: "long button text", body: map[string]any{"user_id": "U1", "view": home([]any{map[string]any{"type": "actions", "elements": []any{
			map[string]any{"type": "button", "action_id": "a", "text": map[string]any{"type": "plain_text", "text": strings.Repeat("x", 76)}}}}})},
			want: "invalid_arguments", msg: "/text/text"},
		{name: "stale hash", body: map[string]any{"user_id": "U1", "hash": "1.stale", "view": home(homeBlocks(1, "t"))}, want: "hash_conflict"},
		{name: "long private_metadata", body: map[string]any{"user_id": "U1", "view": map[string]any{"type": "home", "blocks": homeBlocks(1, "t"),
			"private_metadata": strings.Repeat("m", 3001)}}, want: "invalid_arguments", msg: "private_metadata"},
		{name: "too large", body: map[string]any{"user_id": "U1", "view": home([]any{map[string]any{"type": "section",
			"text": map[string]any{"type": "mrkdwn", "text": strings.Repeat("z", 300<<10)}}})}, want: "view_too_large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, _ := s.Home("U1")
			token := tt.token
			if token == "" && tt.name != "no token" {
				token = s.Options().BotToken
			}
			got := publishRaw(t, s, token, tt.body)
			after, _ := s.Home("U1")
			if tt.want == "" {
				if got["ok"] != true || after.Publishes != before.Publishes+1 || after.ID != before.ID || after.Hash == before.Hash {
					t.Fatalf("got %v; home before %+v after %+v", got["error"], before, after)
				}
				return
			}
			if got["ok"] != false || got["error"] != tt.want {
				t.Fatalf("got %v %v, want error %s", got["ok"], got["error"], tt.want)
			}
			if tt.msg != "" && !strings.Contains(fmt.Sprint(got["response_metadata"]), tt.msg) {
				t.Errorf("messages %v do not say %q", got["response_metadata"], tt.msg)
			}
			if after.Publishes != before.Publishes || after.Hash != before.Hash {
				t.Errorf("a refused publication changed the home: %+v → %+v", before, after)
			}
		})
	}

	t.Run("current hash", func(t *testing.T) {
		cur, _ := s.Home("U1")
		got := publishRaw(t, s, s.Options().BotToken, map[string]any{"user_id": "U1", "hash": cur.Hash, "view": home(homeBlocks(1, "t"))})
		if got["ok"] != true {
			t.Fatalf("got %v", got)
		}
	})
	t.Run("slack-go and block ids", func(t *testing.T) {
		view := slack.HomeTabViewRequest{Type: slack.VTHomeTab, Blocks: slack.Blocks{BlockSet: []slack.Block{
			slack.NewDividerBlock(),
			slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, "hello", false, false), nil, nil),
		}}}
		resp, err := client(s).PublishViewContext(testCtx(t), slack.PublishViewContextRequest{UserID: "U2", View: view})
		if err != nil {
			t.Fatal(err)
		}
		h, ok := s.Home("U2")
		if !ok || resp.View.ID != h.ID || resp.View.Type != slack.VTHomeTab || len(resp.View.Blocks.BlockSet) != 2 {
			t.Fatalf("answer %+v, home %+v", resp.View, h)
		}
		var blocks []map[string]any
		_ = json.Unmarshal(h.Blocks, &blocks)
		if blocks[0]["block_id"] == "" || blocks[0]["block_id"] == blocks[1]["block_id"] {
			t.Errorf("block ids not given: %s", h.Blocks)
		}
		if u1, _ := s.Home("U1"); u1.ID == h.ID {
			t.Error("two users share a view ID")
		}
	})
	t.Run("refused", func(t *testing.T) {
		s.Refuse("views.publish", "not_enabled")
		defer s.Refuse("views.publish", "")
		calls := s.Calls("views.publish")
		_, err := client(s).PublishViewContext(testCtx(t), slack.PublishViewContextRequest{UserID: "U1",
			View: slack.HomeTabViewRequest{Type: slack.VTHomeTab}})
		if slackErr(err) != "not_enabled" || s.Calls("views.publish") != calls+1 {
			t.Fatalf("err %v, calls %d → %d", err, calls, s.Calls("views.publish"))
		}
	})
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// publishHome publishes homeBlocks(1, thread) as U1's home.
func publishHome(t *testing.T, s *Server, thread string) HomeView {
	t.Helper()
	if got := publishRaw(t, s, s.Options().BotToken, map[string]any{"user_id": "U1",
		"view": map[string]any{"type": "home", "blocks": homeBlocks(1, thread)}}); got["ok"] != true {
		t.Fatalf("publish: %v", got)
	}
	h, _ := s.Home("U1")
	return h
}

func TestHomeOverSocketMode(t *testing.T) {
	s := newServer(t, Options{})
	sm, events := runSocket(t, s)

	opened := func() *slackevents.AppHomeOpenedEvent {
		t.Helper()
		e := nextOf(t, sm, events, socketmode.EventTypeEventsAPI)
		_ = sm.Ack(*e.Request)
		d, ok := e.Data.(slackevents.EventsAPIEvent).InnerEvent.Data.(*slackevents.AppHomeOpenedEvent)
		if !ok {
			t.Fatalf("event %+v", e.Data)
		}
		return d
	}
	s.OpenHome("U1")
	first := opened()
	if first.User != "U1" || first.Tab != "home" || !strings.HasPrefix(first.Channel, "D") || first.View != nil {
		t.Fatalf("first opening: %+v", first)
	}
	h := publishHome(t, s, "thread-1")
	s.OpenHome("U1")
	again := opened()
	if again.Channel != first.Channel || again.View == nil || again.View.ID != h.ID || again.View.Hash != h.Hash || again.View.Type != slack.VTHomeTab {
		t.Fatalf("second opening: %+v", again)
	}
	if s.HomeOpens() != 2 {
		t.Errorf("HomeOpens = %d", s.HomeOpens())
	}

	tests := []struct {
		name, clicker, action string
	}{
		{"owner stops", "U1", "agent_stop"},
		{"owner destroys, confirmed", "U1", "agent_destroy"},
		{"forged as another user", "U2", "agent_stop"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.ClickHomeAs("U1", tt.clicker, tt.action, "thread-1"); err != nil {
				t.Fatal(err)
			}
			e := nextOf(t, sm, events, socketmode.EventTypeInteractive)
			_ = sm.Ack(*e.Request)
			cb := e.Data.(slack.InteractionCallback)
			acts := cb.ActionCallback.BlockActions
			if cb.Type != slack.InteractionTypeBlockActions || cb.View.Type != slack.VTHomeTab || cb.View.ID != h.ID ||
				cb.Container.Type != "view" || cb.Container.ViewID != h.ID || cb.User.ID != tt.clicker || cb.Channel.ID != "" ||
				cb.ResponseURL != "" || len(acts) != 1 || acts[0].ActionID != tt.action || acts[0].Value != "thread-1" ||
				acts[0].BlockID != "actions" || acts[0].ActionTs == "" {
				t.Errorf("interaction %+v, actions %+v", cb, acts)
			}
		})
	}
	t.Run("no such button", func(t *testing.T) {
		if err := s.ClickHome("U1", "agent_stop", "another-thread"); err == nil {
			t.Error("clicked a button the home does not have")
		}
		if err := s.ClickHome("U3", "agent_stop", "thread-1"); err == nil {
			t.Error("clicked in a home never published")
		}
	})
}

func TestHomeOverHTTP(t *testing.T) {
	const secret = "fake-signing-secret"
	s := newServer(t, Options{})
	a, url := newApp(t, secret, nil)
	s.SetEventsURL(url)
	s.SetInteractivityURL(url)
	h := publishHome(t, s, "thread-1")
	s.OpenHome("U1")
	if err := s.ClickHome("U1", "agent_stop", "thread-1"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, s, "two deliveries", func(*Server) bool { return len(a.requests()) == 2 })
	var sawOpen, sawClick bool
	for _, r := range a.requests() {
		if strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
			ev, err := slackevents.ParseEvent(r.body, slackevents.OptionNoVerifyToken())
			if err != nil {
				t.Fatal(err)
			}
			d, ok := ev.InnerEvent.Data.(*slackevents.AppHomeOpenedEvent)
			sawOpen = ok && d.User == "U1" && d.Tab == "home" && d.View != nil && d.View.ID == h.ID
			continue
		}
		cb, err := slack.InteractionCallbackParse(r.form)
		if err != nil {
			t.Fatal(err)
		}
		sawClick = cb.View.Type == slack.VTHomeTab && cb.User.ID == "U1" && len(cb.ActionCallback.BlockActions) == 1 &&
			cb.ActionCallback.BlockActions[0].Value == "thread-1"
	}
	if !sawOpen || !sawClick {
		t.Errorf("opened %v, clicked %v: %d requests", sawOpen, sawClick, len(a.requests()))
	}
	for _, d := range s.Deliveries() {
		if d.Status != http.StatusOK {
			t.Errorf("delivery %+v", d)
		}
	}
}
