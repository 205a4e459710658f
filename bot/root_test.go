package bot_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
	"github.com/agentbot/agentbot/internal/testenv"
)

// TestNewWithRoot: "new local --root <dir> <title>" starts a session whose
// workspace is dir: its state says so and its commands run there. A root
// the local backend refuses ("/") is refused, as switch's is, by the
// backend when the session's sandbox is made (the gateway need not run on
// the host the root names): the first turn fails with the very reason that
// "switch local /" is refused with.
func TestNewWithRoot(t *testing.T) {
	chat := &testenv.Buffer{}
	s := startOwnStack(t, stackOptions{chat: chat})
	r := s.router(t, nil)

	const thread = "term:newroot"
	dir := t.TempDir()
	got := texts(handle(t, r, s.event(bot.KindCommand, thread, alice, "new local --root "+dir+" the root test")))
	if !strings.Contains(got, "Session *the root test* on `local`") {
		t.Fatalf("new answered %q", got)
	}
	t.Cleanup(func() { handle(t, r, s.event(bot.KindCommand, thread, alice, "destroy")) })
	if v := s.state(t, thread); v.Root != dir || v.Backend != "local" || v.Title != "the root test" || v.Requester != alice {
		t.Fatalf("session state: root %q, backend %q, title %q, requester %q; want %q, local, the root test, %s",
			v.Root, v.Backend, v.Title, v.Requester, dir, alice)
	}
	res := s.say(t, r, bot.KindMessage, thread, alice, "sh: echo made-here > here.txt && pwd")
	if !strings.Contains(res.Answer, dir) {
		t.Errorf("the turn ran elsewhere than the root %s: %q", dir, res.Answer)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "here.txt")); err != nil || strings.TrimSpace(string(b)) != "made-here" {
		t.Errorf("here.txt in the root: %q, %v", b, err)
	}

	// A forbidden root: the session starts, its sandbox does not.
	const badThread = "term:newroot-bad"
	got = texts(handle(t, r, s.event(bot.KindCommand, badThread, alice, "new local --root / doomed")))
	if !strings.Contains(got, "Session *doomed*") {
		t.Fatalf("new with root / answered %q", got)
	}
	t.Cleanup(func() { handle(t, r, s.event(bot.KindCommand, badThread, alice, "destroy")) })
	ev := s.event(bot.KindMessage, badThread, alice, "sh: echo should-not-run")
	if got := handle(t, r, ev); len(got) != 0 {
		t.Fatalf("the message was answered %+v", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	turn, err := s.cl.Wait(ctx, badThread, ev.MessageID)
	if err != nil || turn.Result == nil || turn.Result.Status != agentflow.TurnFailed {
		t.Fatalf("the turn of a session rooted at /: %+v, %v", turn.Result, err)
	}

	// What switch says of the same root, in the good session's thread.
	got = texts(handle(t, r, s.event(bot.KindCommand, thread, alice, "switch local /")))
	if !strings.Contains(got, "Switching to `local`") {
		t.Fatalf("switch answered %q", got)
	}
	const still = "still on local: "
	var reason string
	waitUntil(t, "the switch's refusal in the thread", func() bool {
		_, after, ok := strings.Cut(chat.String(), still)
		reason, _, _ = strings.Cut(after, "\n")
		reason = strings.TrimSuffix(strings.TrimSpace(reason), ".") // the end of the sentence
		return ok
	})
	if !strings.Contains(reason, `"/"`) {
		t.Fatalf("switch refused / for %q", reason)
	}
	if !strings.Contains(turn.Result.Error, reason) {
		t.Errorf("new with root / failed with %q; switch refuses / with %q", turn.Result.Error, reason)
	}
	if v := s.state(t, thread); v.Root != dir {
		t.Errorf("the refused switch moved the session to %q", v.Root)
	}
}
