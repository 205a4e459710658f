package discordbot

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
	"github.com/agentbot/agentbot/internal/fakediscord"
)

type wireEmbed struct {
	Title  string
	Fields []struct{ Name, Value string }
}

func embedsOf(t *testing.T, raw json.RawMessage) []wireEmbed {
	t.Helper()
	var out []wireEmbed
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("embeds %s: %v", raw, err)
		}
	}
	return out
}

func checkStatusEmbed(t *testing.T, es []wireEmbed) {
	t.Helper()
	if len(es) != 1 || es[0].Title != "fix the build" || len(es[0].Fields) != 3 {
		t.Fatalf("embeds %+v, want one titled after the session with three fields", es)
	}
	got := map[string]string{}
	for _, f := range es[0].Fields {
		got[f.Name] = f.Value
	}
	if got["Backend"] != "docker" || got["State"] != "running" || got["Turn"] != "3" {
		t.Fatalf("fields %v", got)
	}
}

// TestStatusEmbed: an answer about a session carries a card (title,
// backend, state, turn) under its text, with the controls of the same
// custom IDs, both as a reply to a message and as an interaction's
// answer; an answer without a session has no card.
func TestStatusEmbed(t *testing.T) {
	srv := newFake(t)
	rec := newRecorder()
	view := &agentflow.SessionView{Title: "fix the build", Backend: "docker", Status: agentflow.StatusRunning, Turn: 3}
	rec.setAnswer(func(ev bot.Event) *bot.Response {
		if strings.Contains(ev.Text, "plain") {
			return &bot.Response{Text: "no session here"}
		}
		return &bot.Response{Text: "Session *fix the build* on `docker`.", Session: view}
	})
	startInbound(t, srv, rec, nil)
	ch := srv.AddChannel("general", fakediscord.ChannelText)
	mention := "<@" + srv.Options().BotUserID + "> "

	t.Run("reply", func(t *testing.T) {
		id := srv.UserMessage(ch, "42", mention+"status", nil)
		rec.next(t)
		var reply fakediscord.Message
		waitFor(t, srv, func(s *fakediscord.Server) bool {
			for _, m := range s.Messages(ch) {
				if m.Bot && m.ReferenceID == id {
					reply = m
					return true
				}
			}
			return false
		})
		checkStatusEmbed(t, embedsOf(t, reply.Embeds))
		if !strings.Contains(reply.Content, "Session *fix the build*") {
			t.Fatalf("content %q", reply.Content)
		}
		for _, id := range []string{ActionSwitch, ActionFork, ActionStop, ActionDone} {
			if !strings.Contains(string(reply.Components), `"`+id+`"`) {
				t.Errorf("no control %s in %s", id, reply.Components)
			}
		}
	})
	t.Run("no session", func(t *testing.T) {
		id := srv.UserMessage(ch, "42", mention+"plain", nil)
		rec.next(t)
		waitFor(t, srv, func(s *fakediscord.Server) bool {
			for _, m := range s.Messages(ch) {
				if m.Bot && m.ReferenceID == id {
					if es := embedsOf(t, m.Embeds); len(es) != 0 {
						t.Errorf("embeds without a session: %+v", es)
					}
					return true
				}
			}
			return false
		})
	})
	t.Run("interaction", func(t *testing.T) {
		inv := srv.SlashCommand(ch, "42", nil, CommandName, fakediscord.SubCommand("status"))
		rec.next(t)
		var edit fakediscord.InteractionResponse
		waitFor(t, srv, func(s *fakediscord.Server) bool {
			rs := responses(s, inv, "edit_original")
			if len(rs) == 0 {
				return false
			}
			edit = rs[0]
			return true
		})
		var body struct{ Embeds json.RawMessage }
		if err := json.Unmarshal(edit.Body, &body); err != nil || edit.Error != "" {
			t.Fatalf("edit %+v: %v", edit, err)
		}
		checkStatusEmbed(t, embedsOf(t, body.Embeds))
	})
}
