package discordbot

import (
	"net/http/httptest"
	"testing"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
	"github.com/agentbot/agentbot/internal/fakediscord"
)

// TestControlsActAsTheClicker: a click on a status message's controls
// reaches the Router as a command of the member who clicked (with their
// roles), over the gateway and over HTTP interactions alike, never as the
// session's owner who wrote in the thread: the Router and the session
// check that member.
func TestControlsActAsTheClicker(t *testing.T) {
	const owner, clicker = "42", "43"
	for _, mode := range []string{"gateway", "http"} {
		t.Run(mode, func(t *testing.T) {
			srv := newFake(t)
			rec := newRecorder()
			in := startInbound(t, srv, rec, nil)
			if mode == "http" {
				hs := httptest.NewServer(in.HTTPHandler())
				t.Cleanup(hs.Close)
				srv.SetInteractionsURL(hs.URL + "/discord/interactions")
			}
			o := srv.Options()
			ch := srv.AddChannel("general", fakediscord.ChannelText)
			key := ThreadKey(o.GuildID, ch)

			// The owner asks for the status; the answer carries the
			// controls.
			rec.setAnswer(func(ev bot.Event) *bot.Response {
				if ev.User != owner {
					return nil
				}
				v := agentflow.SessionView{ThreadKey: key, Title: "t", Backend: "local", Status: agentflow.StatusIdle, Requester: owner}
				return &bot.Response{Text: "Session *t* on `local`.", Session: &v}
			})
			id := srv.UserMessage(ch, owner, "<@"+o.BotUserID+"> status", nil)
			if ev := rec.next(t); ev.User != owner || ev.Text != "status" {
				t.Fatalf("the owner's command: %+v", ev)
			}
			var status string
			waitFor(t, srv, func(s *fakediscord.Server) bool {
				for _, m := range s.Messages(ch) {
					if m.ReferenceID == id {
						status = m.ID
						return true
					}
				}
				return false
			})

			tests := []struct {
				custom string
				values []string
				want   string
			}{
				{ActionSwitch, []string{"docker"}, "switch docker"},
				{ActionFork, nil, "fork"},
				{ActionStop, nil, "stop"},
				{ActionDone, nil, "done"},
			}
			for _, tt := range tests {
				inv, err := srv.ComponentClick(ch, status, clicker, []string{"R2"}, tt.custom, tt.values...)
				if err != nil {
					t.Fatal(err)
				}
				ev := rec.next(t)
				if ev.Kind != bot.KindCommand || ev.Text != tt.want || ev.ThreadKey != key || ev.ID != inv.ID ||
					ev.User != clicker || len(ev.Roles) != 1 || ev.Roles[0] != "R2" {
					t.Errorf("%s clicked by %s: %+v", tt.custom, clicker, ev)
				}
			}
		})
	}
}
