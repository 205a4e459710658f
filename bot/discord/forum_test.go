package discordbot

import (
	"fmt"
	"slices"
	"testing"

	"github.com/agentbot/agentbot/bot"
	"github.com/agentbot/agentbot/internal/fakediscord"
)

// TestInboundForumPost: a mention in a forum post (a thread of a forum
// channel) starts a session keyed by the post, as a thread is; the
// answer goes to the post, no thread is opened (not even with
// ThreadPerSession), the allowlists see the forum, and a plain message in
// the post goes to its session.
func TestInboundForumPost(t *testing.T) {
	for _, perSession := range []bool{false, true} {
		t.Run(fmt.Sprintf("thread per session %v", perSession), func(t *testing.T) {
			srv := newFake(t)
			rec := newRecorder()
			rec.setAnswer(func(ev bot.Event) *bot.Response {
				if ev.Kind == bot.KindMention {
					return &bot.Response{Text: "on it: " + ev.Text}
				}
				return nil
			})
			startInbound(t, srv, rec, func(c *InboundConfig) { c.ThreadPerSession = perSession })
			o := srv.Options()
			forum := srv.AddChannel("help", fakediscord.ChannelForum)
			post := srv.UserForumPost(forum, "42", "build broken", "<@"+o.BotUserID+"> fix the build", []string{"R1"})
			key := ThreadKey(o.GuildID, post)

			ev := rec.next(t)
			if ev.Kind != bot.KindMention || ev.Text != "fix the build" || ev.ThreadKey != key || ev.NewThreadKey != key {
				t.Fatalf("event %+v; want a mention in %s", ev, key)
			}
			if ev.Channel != forum || ev.User != "42" || !slices.Equal(ev.Roles, []string{"R1"}) || ev.MessageID != post || ev.ThreadStarted.IsZero() {
				t.Fatalf("event %+v", ev)
			}
			waitFor(t, srv, func(s *fakediscord.Server) bool {
				for _, m := range s.Messages(post) {
					if m.Bot && m.ReferenceID == post && m.Content == "on it: fix the build" {
						return true
					}
				}
				return false
			})
			if th := srv.Threads(forum); len(th) != 1 || th[0].ID != post {
				t.Fatalf("threads of the forum %+v, want only the post", th)
			}

			srv.UserMessage(post, "42", "and the tests", nil)
			if ev := rec.next(t); ev.Kind != bot.KindMessage || ev.ThreadKey != key || ev.Channel != forum {
				t.Fatalf("event %+v", ev)
			}
		})
	}
}
