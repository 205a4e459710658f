package bot_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
)

// liveReplies records replies and whether the context they came with was
// still alive: a reply sent with an expired context never reaches a chat.
type liveReplies struct {
	mu   sync.Mutex
	rs   []bot.Response
	dead int
}

func (l *liveReplies) Reply(ctx context.Context, r bot.Response) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ctx.Err() != nil {
		l.dead++
		return ctx.Err()
	}
	l.rs = append(l.rs, r)
	return nil
}

// TestAdmitWithoutWorker: nothing the chat side does to create a session
// needs a worker. `new` while no worker runs answers that the session
// exists (it does: its workflow is started, durably) instead of failing
// after a timeout. And when a handler's time does run out (status needs a
// worker to answer its query), the person is still told, on a context of
// the reply's own.
func TestAdmitWithoutWorker(t *testing.T) {
	s := startOwnStack(t, stackOptions{noWorker: true})
	r := s.router(t, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var rec liveReplies
	if err := r.Handle(ctx, s.event(bot.KindCommand, "term:admit", alice, "new local the admitted one"), &rec); err != nil {
		t.Fatal(err)
	}
	if len(rec.rs) != 1 || !strings.Contains(rec.rs[0].Text, "the admitted one") {
		t.Fatalf("new without a worker answered %+v", rec.rs)
	}
	if p, err := s.cl.Describe(context.Background(), "term:admit"); err != nil || p != agentflow.PresenceRunning {
		t.Fatalf("the session does not exist: %v %v", p, err)
	}

	ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel2()
	var rec2 liveReplies
	_ = r.Handle(ctx2, s.event(bot.KindCommand, "term:admit", alice, "status"), &rec2)
	if rec2.dead > 0 || len(rec2.rs) != 1 {
		t.Fatalf("status with no worker: %d replies sent on an expired context, %d delivered: %+v", rec2.dead, len(rec2.rs), rec2.rs)
	}
}

// TestRefuseBeforeCreating: a mention too long to be a message is refused
// before anything exists: no session, no registry entry.
func TestRefuseBeforeCreating(t *testing.T) {
	s := startOwnStack(t, stackOptions{})
	r := s.router(t, nil)
	got := handle(t, r, s.event(bot.KindMention, "term:huge", alice, strings.Repeat("x", 100<<10)))
	if len(got) != 1 || !strings.Contains(got[0].Text, "too long") {
		t.Fatalf("a 100 KB mention answered %+v", got)
	}
	if p, err := s.cl.Describe(context.Background(), "term:huge"); err != nil || p != agentflow.PresenceNone {
		t.Fatalf("a refused mention left a session behind: %v %v", p, err)
	}
}
