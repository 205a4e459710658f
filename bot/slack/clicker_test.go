package slackbot

import (
	"context"
	"strings"
	"testing"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
	"github.com/agentbot/agentbot/internal/fakeslack"
)

// TestControlsActAsTheClicker: the status message's controls and the
// "Fork from here" shortcut reach the Router as commands of the person who
// clicked, never of whoever wrote the message they are on (the session's
// owner, or the bot): the Router and the session check that person.
func TestControlsActAsTheClicker(t *testing.T) {
	const clicker = "U2"
	for _, mode := range []string{"socket", "http"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, fakeslack.Options{})
			e.fake.SetUser(fakeslack.User{ID: clicker, Name: "bob", RealName: "Bob"})
			if mode == "socket" {
				e.socket(t)
			} else {
				e.http(t)
			}
			// The owner writes in a thread; the bot answers with the
			// session's status message and its controls.
			// The answer is in place before the message is posted: over
			// Socket Mode the event can be handled before PostUserMessage
			// returns.
			e.h.setAnswer(func(ctx context.Context, ev bot.Event, r bot.Replier) error {
				if ev.Text != "the owner's message" {
					return nil
				}
				v := agentflow.SessionView{ThreadKey: ev.ThreadKey, Title: "t", Backend: "local", Status: agentflow.StatusIdle, Requester: testUser}
				return r.Reply(ctx, bot.Response{Text: "Session *t* on `local`.", Session: &v})
			})
			root := e.fake.PostUserMessage(testChan, testUser, "a thread", "")
			own := e.fake.PostUserMessage(testChan, testUser, "the owner's message", root)
			if ev := e.h.next(t); ev.User != testUser || ev.MessageID != own {
				t.Fatalf("the owner's message: %+v", ev)
			}
			e.waitFor(t, "the status message", func(s *fakeslack.Server) bool { return len(s.Thread(testChan, root)) == 3 })
			status := e.fake.Thread(testChan, root)[2]
			e.h.setAnswer(nil)

			tests := []struct{ action, value, want string }{
				{ActionSwitch, "docker", "switch docker"},
				{ActionFork, e.key(root), "fork"},
				{ActionStop, e.key(root), "stop"},
				{ActionDone, e.key(root), "done"},
			}
			for _, tt := range tests {
				e.fake.BlockAction(testChan, clicker, status.TS, tt.action, tt.value)
				ev := e.h.next(t)
				if ev.Kind != bot.KindCommand || ev.Text != tt.want || ev.ThreadKey != e.key(root) ||
					ev.User != clicker || ev.UserName != "bob" || !strings.HasSuffix(ev.ID, ":"+clicker) {
					t.Errorf("%s clicked by %s: %+v", tt.action, clicker, ev)
				}
			}
			// The shortcut on the owner's message forks as the clicker.
			e.fake.MessageShortcut(testChan, clicker, own, root, ShortcutForkFromID)
			if ev := e.h.next(t); ev.Kind != bot.KindCommand || ev.Text != "fork" || ev.ThreadKey != e.key(root) ||
				ev.User != clicker || ev.UserName != "bob" {
				t.Errorf("shortcut by %s on %s's message: %+v", clicker, testUser, ev)
			}
		})
	}
}
