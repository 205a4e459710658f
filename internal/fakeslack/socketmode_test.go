package fakeslack

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"
)

// runSocket runs a slack-go Socket Mode client against s and returns it
// with the channel of the payload events it receives (events_api,
// slash_commands, interactive).
func runSocket(t *testing.T, s *Server, opts ...socketmode.Option) (*socketmode.Client, <-chan socketmode.Event) {
	t.Helper()
	api := client(s, slack.OptionAppLevelToken(s.Options().AppToken))
	sm := socketmode.New(api, opts...)
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan socketmode.Event, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = sm.RunContext(ctx)
	}()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case e := <-sm.Events:
				switch e.Type {
				case socketmode.EventTypeEventsAPI, socketmode.EventTypeSlashCommand, socketmode.EventTypeInteractive:
					select {
					case out <- e:
					case <-ctx.Done():
						return
					}
				}
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return sm, out
}

// next returns the next event, failing the test after 10 s.
func next(t *testing.T, events <-chan socketmode.Event) socketmode.Event {
	t.Helper()
	select {
	case e := <-events:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no Socket Mode event within 10 s")
	}
	return socketmode.Event{}
}

// nextOf returns the next event of type typ, acknowledging and dropping
// the others.
func nextOf(t *testing.T, sm *socketmode.Client, events <-chan socketmode.Event, typ socketmode.EventType) socketmode.Event {
	t.Helper()
	for {
		e := next(t, events)
		if e.Type == typ {
			return e
		}
		_ = sm.Ack(*e.Request)
	}
}

func waitFor(t *testing.T, s *Server, what string, cond func(*Server) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.WaitFor(ctx, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func TestSocketModeEvents(t *testing.T) {
	s := newServer(t, Options{})
	sm, events := runSocket(t, s)

	ts := s.PostUserMessage("C1", "U1", "<@UBOT> hello", "")
	got := map[string]socketmode.Event{}
	eventIDs := map[string]bool{}
	for range 2 {
		e := next(t, events)
		if e.Type != socketmode.EventTypeEventsAPI || e.Request.RetryAttempt != 0 || e.Request.AcceptsResponsePayload {
			t.Fatalf("event %s, retry_attempt %d, accepts_response_payload %v", e.Type, e.Request.RetryAttempt, e.Request.AcceptsResponsePayload)
		}
		outer := e.Data.(slackevents.EventsAPIEvent)
		cb := outer.Data.(*slackevents.EventsAPICallbackEvent)
		if outer.TeamID != "T0001" || outer.APIAppID != "A0001" || len(cb.Authorizations) != 1 || cb.Authorizations[0].UserID != "UBOT" {
			t.Errorf("callback = %+v", cb)
		}
		eventIDs[cb.EventID] = true
		got[outer.InnerEvent.Type] = e
		if err := sm.Ack(*e.Request); err != nil {
			t.Fatal(err)
		}
	}
	if len(eventIDs) != 2 {
		t.Errorf("event IDs %v, want two distinct", eventIDs)
	}
	msg, ok := got["message"].Data.(slackevents.EventsAPIEvent).InnerEvent.Data.(*slackevents.MessageEvent)
	if !ok || msg.TimeStamp != ts || msg.User != "U1" || msg.Channel != "C1" || msg.ChannelType != "channel" || msg.Text != "<@UBOT> hello" {
		t.Errorf("message event = %+v", msg)
	}
	if ok && (len(msg.Blocks.BlockSet) != 1 || msg.Blocks.BlockSet[0].BlockType() != slack.MBTRichText) {
		t.Errorf("message blocks = %+v, want one rich_text", msg.Blocks.BlockSet)
	}
	mention, ok := got["app_mention"].Data.(slackevents.EventsAPIEvent).InnerEvent.Data.(*slackevents.AppMentionEvent)
	if !ok || mention.TimeStamp != ts || mention.User != "U1" {
		t.Errorf("app_mention event = %+v", mention)
	}
	waitFor(t, s, "both acks", func(s *Server) bool { return len(s.Acks()) == 2 && len(s.Unacked()) == 0 })
	for _, a := range s.Acks() {
		if a.Type != "events_api" || a.Late {
			t.Errorf("ack = %+v", a)
		}
	}

	t.Run("thread reply", func(t *testing.T) {
		reply := s.PostUserMessage("C1", "U2", "more", ts)
		e := next(t, events)
		m := e.Data.(slackevents.EventsAPIEvent).InnerEvent.Data.(*slackevents.MessageEvent)
		if m.TimeStamp != reply || m.ThreadTimeStamp != ts {
			t.Errorf("reply event ts %s thread_ts %s, want %s in %s", m.TimeStamp, m.ThreadTimeStamp, reply, ts)
		}
		_ = sm.Ack(*e.Request)
		waitFor(t, s, "ack", func(s *Server) bool { return len(s.Unacked()) == 0 })
		if n := len(s.Envelopes()); n != 3 {
			t.Errorf("%d envelopes, want 3 (no app_mention without a mention)", n)
		}
	})

	t.Run("file share", func(t *testing.T) {
		data := []byte("name,score\nada,10\n")
		fts := s.ShareFile("C1", "U1", ts, "scores.csv", data)
		e := next(t, events)
		_ = sm.Ack(*e.Request)
		m := e.Data.(slackevents.EventsAPIEvent).InnerEvent.Data.(*slackevents.MessageEvent)
		if m.SubType != "file_share" || m.TimeStamp != fts || m.ThreadTimeStamp != ts || len(m.Message.Files) != 1 {
			t.Fatalf("file_share event = %+v", m)
		}
		var buf bytes.Buffer
		if err := client(s).GetFileContext(testCtx(t), m.Message.Files[0].URLPrivate, &buf); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), data) {
			t.Errorf("downloaded %q", buf.Bytes())
		}
		if f := s.Files("C1"); len(f) != 1 || f[0].User != "U1" || f[0].Name != "scores.csv" {
			t.Errorf("Files = %+v", f)
		}
	})
}

func TestSocketModeRedelivery(t *testing.T) {
	t.Run("redelivered until acked", func(t *testing.T) {
		s := newServer(t, Options{AckTimeout: 200 * time.Millisecond})
		sm, events := runSocket(t, s)
		s.PostUserMessage("C1", "U1", "hello", "")

		first := next(t, events)
		second := next(t, events)
		if first.Request.RetryAttempt != 0 || second.Request.RetryAttempt != 1 || second.Request.RetryReason != "timeout" {
			t.Errorf("attempts %d, %d (%q); want 0, 1 (timeout)", first.Request.RetryAttempt, second.Request.RetryAttempt, second.Request.RetryReason)
		}
		if first.Request.EnvelopeID == second.Request.EnvelopeID {
			t.Error("redelivery reused the envelope ID")
		}
		id := func(e socketmode.Event) string {
			return e.Data.(slackevents.EventsAPIEvent).Data.(*slackevents.EventsAPICallbackEvent).EventID
		}
		if id(first) != id(second) {
			t.Errorf("event IDs %s, %s; want the same", id(first), id(second))
		}
		if u := s.Unacked(); len(u) != 1 || u[0].EnvelopeID != second.Request.EnvelopeID {
			t.Errorf("Unacked = %+v, want the second envelope", u)
		}
		_ = sm.Ack(*second.Request)
		waitFor(t, s, "ack", func(s *Server) bool { return len(s.Unacked()) == 0 })
		time.Sleep(600 * time.Millisecond)
		if n := len(s.Envelopes()); n != 2 {
			t.Errorf("%d envelopes after the ack, want 2", n)
		}
	})

	t.Run("three retries at most", func(t *testing.T) {
		s := newServer(t, Options{AckTimeout: 100 * time.Millisecond})
		_, events := runSocket(t, s)
		s.PostUserMessage("C1", "U1", "hello", "")
		var attempts []int
		for range 4 {
			attempts = append(attempts, next(t, events).Request.RetryAttempt)
		}
		if !slices.Equal(attempts, []int{0, 1, 2, 3}) {
			t.Errorf("retry attempts %v", attempts)
		}
		time.Sleep(500 * time.Millisecond)
		if n := len(s.Envelopes()); n != 4 {
			t.Errorf("%d envelopes, want 4", n)
		}
		if u := s.Unacked(); len(u) != 1 || u[0].RetryAttempt != 3 {
			t.Errorf("Unacked = %+v", u)
		}
	})

	t.Run("slash commands are not redelivered", func(t *testing.T) {
		s := newServer(t, Options{AckTimeout: 100 * time.Millisecond})
		_, events := runSocket(t, s)
		s.SlashCommand("C1", "U1", "status")
		next(t, events)
		time.Sleep(400 * time.Millisecond)
		if n := len(s.Envelopes()); n != 1 {
			t.Errorf("%d envelopes, want 1", n)
		}
		if n := len(s.Unacked()); n != 1 {
			t.Errorf("%d unacked, want 1", n)
		}
	})
}

func TestSocketModeReconnect(t *testing.T) {
	tests := []struct {
		name    string
		disrupt func(*Server)
	}{
		{"disconnect refresh_requested", func(s *Server) { s.Disconnect("refresh_requested") }},
		{"dropped connection", (*Server).DropConnections},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, Options{})
			sm, events := runSocket(t, s)
			waitFor(t, s, "connect", func(s *Server) bool { return s.Connections() == 1 })
			tt.disrupt(s)
			waitFor(t, s, "reconnect", func(s *Server) bool { return s.Connects() == 2 && s.Connections() == 1 })
			ts := s.PostUserMessage("C1", "U1", "after", "")
			e := next(t, events)
			_ = sm.Ack(*e.Request)
			if m := e.Data.(slackevents.EventsAPIEvent).InnerEvent.Data.(*slackevents.MessageEvent); m.TimeStamp != ts {
				t.Errorf("event ts %s, want %s", m.TimeStamp, ts)
			}
			if n := s.Calls("apps.connections.open"); n != 2 {
				t.Errorf("apps.connections.open called %d times, want 2", n)
			}
		})
	}

	t.Run("pings keep a short ping interval alive", func(t *testing.T) {
		s := newServer(t, Options{PingInterval: 100 * time.Millisecond})
		runSocket(t, s, socketmode.OptionPingInterval(500*time.Millisecond))
		waitFor(t, s, "connect", func(s *Server) bool { return s.Connections() == 1 })
		time.Sleep(1500 * time.Millisecond)
		if n := s.Connects(); n != 1 {
			t.Errorf("%d connections opened, want 1 (the client timed out waiting for pings)", n)
		}
	})
}

func TestSocketModeSlashAndInteractions(t *testing.T) {
	s := newServer(t, Options{})
	ctx := testCtx(t)
	api := client(s)
	sm, events := runSocket(t, s)

	t.Run("slash command", func(t *testing.T) {
		s.SlashCommand("C1", "U1", "new docker my title")
		e := nextOf(t, sm, events, socketmode.EventTypeSlashCommand)
		cmd := e.Data.(slack.SlashCommand)
		if cmd.Command != "/agent" || cmd.Text != "new docker my title" || cmd.ChannelID != "C1" || cmd.UserID != "U1" ||
			cmd.TeamID != "T0001" || cmd.TriggerID == "" || cmd.APIAppID != "A0001" {
			t.Errorf("slash command = %+v", cmd)
		}
		if !e.Request.AcceptsResponsePayload {
			t.Error("accepts_response_payload = false")
		}
		if err := sm.Ack(*e.Request, map[string]any{"text": "starting"}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, s, "ack response", func(s *Server) bool { return len(s.Responses()) == 1 })
		if r := s.Responses()[0]; r.Via != "ack" || r.Text != "starting" || r.User != "U1" {
			t.Errorf("response = %+v", r)
		}
		if eph := s.Ephemerals("C1"); len(eph) != 1 || eph[0].Recipient != "U1" || eph[0].Text != "starting" {
			t.Errorf("Ephemerals = %+v", eph)
		}

		_, _, err := api.PostMessageContext(ctx, "C1",
			slack.MsgOptionResponseURL(cmd.ResponseURL, slack.ResponseTypeInChannel), slack.MsgOptionText("session started", false))
		if err != nil {
			t.Fatalf("response_url: %v", err)
		}
		r := s.Responses()
		if len(r) != 2 || r[1].Via != "response_url" || r[1].ResponseType != "in_channel" || r[1].URL != cmd.ResponseURL {
			t.Errorf("responses = %+v", r)
		}
		if m := s.Messages("C1"); len(m) != 1 || m[0].Text != "session started" || m[0].BotID != "BBOT" {
			t.Errorf("Messages = %+v", m)
		}
	})

	blocks := []slack.Block{
		slack.NewSectionBlock(slack.NewTextBlockObject("mrkdwn", "Session *demo*", false, false), nil, nil),
		slack.NewActionBlock("controls",
			slack.NewButtonBlockElement("stop", "wf1", slack.NewTextBlockObject("plain_text", "Stop", false, false)),
			slack.NewOptionsSelectBlockElement("static_select", slack.NewTextBlockObject("plain_text", "Backend", false, false), "backend",
				slack.NewOptionBlockObject("local", slack.NewTextBlockObject("plain_text", "local", false, false), nil),
				slack.NewOptionBlockObject("docker", slack.NewTextBlockObject("plain_text", "docker", false, false), nil)),
		),
	}
	_, status, err := api.PostMessageContext(ctx, "C2", slack.MsgOptionText("status", false), slack.MsgOptionBlocks(blocks...))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("select", func(t *testing.T) {
		s.BlockAction("C2", "U1", status, "backend", "docker")
		e := nextOf(t, sm, events, socketmode.EventTypeInteractive)
		_ = sm.Ack(*e.Request)
		a := e.Data.(slack.InteractionCallback).ActionCallback.BlockActions[0]
		if a.Type != "static_select" || a.SelectedOption.Value != "docker" || a.SelectedOption.Text.Text != "docker" {
			t.Errorf("action = %+v", a)
		}
	})

	t.Run("button", func(t *testing.T) {
		s.BlockAction("C2", "U1", status, "stop", "wf1")
		e := nextOf(t, sm, events, socketmode.EventTypeInteractive)
		_ = sm.Ack(*e.Request)
		cb := e.Data.(slack.InteractionCallback)
		if cb.Type != slack.InteractionTypeBlockActions || len(cb.ActionCallback.BlockActions) != 1 {
			t.Fatalf("callback = %+v", cb)
		}
		a := cb.ActionCallback.BlockActions[0]
		if a.ActionID != "stop" || a.Value != "wf1" || a.BlockID != "controls" || a.Type != "button" || a.Text.Text != "Stop" {
			t.Errorf("action = %+v", a)
		}
		if cb.Container.MessageTs != status || cb.Container.ChannelID != "C2" || cb.Channel.ID != "C2" ||
			cb.User.ID != "U1" || cb.Message.Timestamp != status || cb.ResponseURL == "" || cb.TriggerID == "" {
			t.Errorf("callback = %+v", cb)
		}

		if _, _, err := api.PostMessageContext(ctx, "C2", slack.MsgOptionReplaceOriginal(cb.ResponseURL), slack.MsgOptionText("stopped", false)); err != nil {
			t.Fatalf("replace_original: %v", err)
		}
		if m := s.Messages("C2"); len(m) != 1 || m[0].Text != "stopped" || m[0].Edits != 1 {
			t.Errorf("after replace_original: %+v", m)
		}
	})

	t.Run("message shortcut", func(t *testing.T) {
		root := s.PostUserMessage("C3", "U1", "start", "")
		reply := s.PostUserMessage("C3", "U1", "fork from here", root)
		s.MessageShortcut("C3", "U2", reply, root, "fork_here")
		e := nextOf(t, sm, events, socketmode.EventTypeInteractive)
		_ = sm.Ack(*e.Request)
		cb := e.Data.(slack.InteractionCallback)
		if cb.Type != slack.InteractionTypeMessageAction || cb.CallbackID != "fork_here" || cb.MessageTs != reply ||
			cb.Message.ThreadTimestamp != root || cb.Message.Text != "fork from here" || cb.User.ID != "U2" || cb.Channel.ID != "C3" {
			t.Errorf("callback = %+v", cb)
		}
	})
}

func TestEchoBotMessages(t *testing.T) {
	s := newServer(t, Options{EchoBotMessages: true})
	sm, events := runSocket(t, s)
	_, ts, err := client(s).PostMessageContext(testCtx(t), "C1", slack.MsgOptionText("from the bot", false))
	if err != nil {
		t.Fatal(err)
	}
	e := next(t, events)
	_ = sm.Ack(*e.Request)
	m := e.Data.(slackevents.EventsAPIEvent).InnerEvent.Data.(*slackevents.MessageEvent)
	if m.BotID != "BBOT" || m.User != "UBOT" || m.TimeStamp != ts {
		t.Errorf("echo = %+v", m)
	}
}
