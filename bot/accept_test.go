package bot_test

import (
	"strings"
	"testing"
	"time"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
	"github.com/agentbot/agentbot/internal/testenv"
)

// TestControlsAnswerOnAcceptance: switch, pause (done), reset and fork wait
// for the running turn, which can take far longer than a chat platform
// gives a handler. The gateway answers as soon as the session has accepted
// the request, while the turn still runs, and the session posts the
// outcome to the thread when it happens.
func TestControlsAnswerOnAcceptance(t *testing.T) {
	chat := &testenv.Buffer{}
	s := startOwnStack(t, stackOptions{chat: chat})
	r := s.router(t, nil)
	const thread = "term:accept"
	s.say(t, r, bot.KindMention, thread, alice, "sh: echo ready")

	otherRoot := t.TempDir()
	for _, c := range []struct {
		command, ack, outcome string
	}{
		{"switch local " + otherRoot, "after the current turn", "Switched local → local"},
		{"reset", "after the current turn", "Started a fresh conversation"},
		{"done", "after the current turn", "Paused"},
	} {
		t.Run(strings.Fields(c.command)[0], func(t *testing.T) {
			long := s.event(bot.KindMessage, thread, alice, "sleep: 60")
			if got := handle(t, r, long); len(got) != 0 {
				t.Fatalf("the long message was answered %+v", got)
			}
			waitUntil(t, "the long command runs", func() bool {
				for _, tool := range s.state(t, thread).Tools {
					if tool.State == "running" {
						return true
					}
				}
				return false
			})
			got := texts(handle(t, r, s.event(bot.KindCommand, thread, alice, c.command)))
			if v := s.state(t, thread); v.Status != agentflow.StatusRunning {
				t.Fatalf("%s answered only once the turn had ended (session %s): %q", c.command, v.Status, got)
			}
			if !strings.Contains(got, c.ack) {
				t.Errorf("%s answered %q, want an acknowledgement with %q", c.command, got, c.ack)
			}
			// Let the turn end; the session then does the work and says
			// how it went in the thread.
			handle(t, r, s.event(bot.KindCommand, thread, alice, "stop"))
			waitUntil(t, "the outcome of "+c.command+" in the thread", func() bool {
				return strings.Contains(chat.String(), c.outcome)
			})
		})
	}
	handle(t, r, s.event(bot.KindCommand, thread, alice, "destroy"))
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
