package bot_test

import (
	"context"
	"strings"
	"testing"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
)

// TestListFromVisibility: `list` shows the tenant's sessions from
// Temporal's visibility (each session keeps its registry entry in its
// memo), not from the session manager's state, which carries only a bounded
// window of a large tenant: a session the manager never heard of is listed,
// with its title, backend and state, and a destroyed one as destroyed.
func TestListFromVisibility(t *testing.T) {
	s := startOwnStack(t, stackOptions{noReports: true})
	r := s.router(t, nil)
	ctx := context.Background()
	const thread, gone = "term:listed", "term:listed-gone"
	s.say(t, r, bot.KindMention, thread, alice, "sh: echo listed")
	s.say(t, r, bot.KindMention, gone, alice, "sh: echo gone")
	handle(t, r, s.event(bot.KindCommand, thread, alice, "title the listed one"))
	handle(t, r, s.event(bot.KindCommand, gone, alice, "destroy"))
	if _, err := s.cl.Lookup(ctx, thread); err == nil {
		t.Fatal("the manager knows the session: this test needs one it never heard of")
	}
	waitUntil(t, "both sessions in the list", func() bool {
		l, err := s.cl.List(ctx, thread)
		if err != nil {
			t.Fatal(err)
		}
		var live, destroyed bool
		for _, e := range l {
			live = live || (e.ThreadKey == thread && e.Title == "the listed one" && e.Backend == "local" &&
				e.Status == agentflow.StatusIdle && e.Requester == alice)
			destroyed = destroyed || (e.ThreadKey == gone && e.Status == agentflow.StatusDestroyed)
		}
		return live && destroyed
	})
	got := texts(handle(t, r, s.event(bot.KindCommand, thread, alice, "list")))
	if !strings.Contains(got, "the listed one") {
		t.Errorf("list answered %q", got)
	}
}
