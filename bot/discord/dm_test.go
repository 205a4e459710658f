package discordbot

import (
	"bytes"
	"context"
	"testing"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
	"github.com/agentbot/agentbot/internal/fakediscord"
)

// TestInboundDM: a direct message is addressed to the bot without a
// mention and is a session of its own, keyed "discord:@me:<dm channel>",
// with the user and no roles; the answer (with the session's controls)
// goes to the DM; a click on a control and a slash command there are
// commands of the same session, from the user who made them; the Sender
// posts in the DM and opens no thread there.
func TestInboundDM(t *testing.T) {
	srv := newFake(t)
	rec := newRecorder()
	rec.setAnswer(func(ev bot.Event) *bot.Response {
		if ev.Kind == bot.KindMention {
			return &bot.Response{Text: "Session *dm* on `local`.", Session: &agentflow.SessionView{Backend: "local"}}
		}
		return nil
	})
	startInbound(t, srv, rec, nil)
	dm := srv.DMChannel("42")
	key := "discord:@me:" + dm
	if got := ThreadKey("", dm); got != key {
		t.Fatalf("ThreadKey of a DM = %q, want %q", got, key)
	}

	id := srv.UserMessage(dm, "42", "hello there", nil)
	ev := rec.next(t)
	if ev.Kind != bot.KindMention || ev.Text != "hello there" || ev.ThreadKey != key || ev.NewThreadKey != key {
		t.Fatalf("event %+v; want a mention in %s", ev, key)
	}
	if ev.User != "42" || ev.Channel != dm || len(ev.Roles) != 0 || ev.MessageID != id {
		t.Fatalf("event %+v", ev)
	}
	var reply fakediscord.Message
	waitFor(t, srv, func(s *fakediscord.Server) bool {
		for _, m := range s.Messages(dm) {
			if m.Bot && m.ReferenceID == id {
				reply = m
				return true
			}
		}
		return false
	})
	if !bytes.Contains(reply.Components, []byte(ActionStop)) {
		t.Fatalf("the DM answer has no controls: %+v", reply)
	}

	t.Run("control click", func(t *testing.T) {
		if _, err := srv.ComponentClick(dm, reply.ID, "42", nil, ActionStop); err != nil {
			t.Fatal(err)
		}
		if ev := rec.next(t); ev.Kind != bot.KindCommand || ev.Text != "stop" || ev.ThreadKey != key || ev.User != "42" || len(ev.Roles) != 0 {
			t.Fatalf("event %+v", ev)
		}
	})
	t.Run("slash command", func(t *testing.T) {
		srv.SlashCommand(dm, "42", nil, CommandName, fakediscord.SubCommand("status"))
		if ev := rec.next(t); ev.Kind != bot.KindCommand || ev.Text != "status" || ev.ThreadKey != key || ev.User != "42" || ev.Channel != dm {
			t.Fatalf("event %+v", ev)
		}
	})
	t.Run("sender", func(t *testing.T) {
		s := newTestSender(t, srv)
		if err := s.Deliver(context.Background(), answer(key, "dm-answer", "answer in the DM")); err != nil {
			t.Fatal(err)
		}
		msgs := srv.Messages(dm)
		if last := msgs[len(msgs)-1]; !last.Bot || findMarker(last.Content) != Marker("dm-answer/part-1") {
			t.Fatalf("last DM message %+v", last)
		}
		if _, err := s.CreateThread(context.Background(), key, "fork", "r1"); err == nil {
			t.Fatal("CreateThread in a DM succeeded")
		}
		rec.none(t) // the bot's own posts are not events
	})
}
