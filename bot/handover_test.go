package bot_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
	"github.com/agentbot/agentbot/internal/testenv"
	"github.com/agentbot/agentbot/store"
)

// TestRetryAfterFailedHandOver: a gateway replica takes an event but cannot
// hand it to Temporal (here: its Temporal is unreachable; in production, it
// died right after acknowledging). The platform's retry of the event,
// taken by another replica sharing the same Redis, is handled: the event
// was never marked seen for good, because Temporal never got it.
func TestRetryAfterFailedHandOver(t *testing.T) {
	s := startOwnStack(t, stackOptions{})
	cache := redisCache(t)

	dead, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1", Logger: testenv.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dead.Close)
	broken := s.router(t, cache)
	broken.Sessions = agentflow.NewClient(dead)

	const thread = "term:handover"
	ev := s.event(bot.KindMention, thread, alice, "sh: echo handed-over")
	ev.ThreadKey, ev.NewThreadKey = "", thread
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var first liveReplies
	_ = broken.Handle(ctx, ev, &first)

	healthy := s.router(t, cache)
	got := handle(t, healthy, ev) // the platform's retry: same event ID
	if len(got) != 0 {
		t.Fatalf("the retry answered %+v", got)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), time.Minute)
	defer wcancel()
	res, err := s.cl.Wait(wctx, thread, ev.MessageID)
	if err != nil || res.Result == nil || !strings.Contains(res.Result.Answer, "handed-over") {
		t.Fatalf("the retried event never reached the session: %+v %v", res.Result, err)
	}
}

// TestRepliesRacingTheMention: twenty messages into ten new threads at
// once — in each, the mention that starts the session and a reply right
// after it, handled concurrently (the reply may be handled first). Every
// message reaches its session and is answered in its thread.
func TestRepliesRacingTheMention(t *testing.T) {
	s := startOwnStack(t, stackOptions{})
	cache := redisCache(t)
	r := s.router(t, cache)

	const threads = 10
	var wg sync.WaitGroup
	var mu sync.Mutex
	var sent []struct{ thread, id, want string }
	for i := range threads {
		thread := fmt.Sprintf("term:race-%d", i)
		mention := s.event(bot.KindMention, "", alice, fmt.Sprintf("sh: echo first-%d", i))
		mention.NewThreadKey = thread
		reply := s.event(bot.KindMessage, thread, alice, fmt.Sprintf("sh: echo second-%d", i))
		reply.ThreadStarted = time.Now()
		mu.Lock()
		sent = append(sent, struct{ thread, id, want string }{thread, mention.MessageID, fmt.Sprintf("first-%d", i)},
			struct{ thread, id, want string }{thread, reply.MessageID, fmt.Sprintf("second-%d", i)})
		mu.Unlock()
		for _, ev := range []bot.Event{reply, mention} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				var rec liveReplies
				if err := r.Handle(ctx, ev, &rec); err != nil {
					t.Errorf("Handle: %v", err)
				}
			}()
		}
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lost := 0
	for _, m := range sent {
		res, err := s.cl.Wait(ctx, m.thread, m.id)
		if err != nil || res.Result == nil || !strings.Contains(res.Result.Answer, m.want) {
			lost++
			t.Errorf("%s in %s was not answered: %+v %v", m.want, m.thread, res.Result, err)
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d messages lost", lost, len(sent))
	}
}

// redisCache is a thread cache on a real redis-server of the test's own.
func redisCache(t *testing.T) *store.RedisCache {
	redis := testenv.StartRedis(context.Background(), t)
	cache, err := store.NewRedisCache(redis.URL(), store.RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cache.Close() })
	return cache
}

// TestRetryAfterDeathWithinClaim: a replica claims an event and dies before
// handing it to Temporal; Slack's first retry comes at once, well within
// the claim. The retry is handled (a claim is not a hand-over); a mere
// duplicate delivery, not marked a retry, is still dropped.
func TestRetryAfterDeathWithinClaim(t *testing.T) {
	s := startOwnStack(t, stackOptions{})
	cache := redisCache(t)
	r := s.router(t, cache)
	const thread = "term:died-in-claim"
	ev := s.event(bot.KindMention, "", alice, "sh: echo survived")
	ev.NewThreadKey = thread
	// What the dead replica left: a claim, nothing in Temporal.
	if first, err := cache.FirstSeen(context.Background(), ev.Platform+":"+ev.ID, store.ClaimTTL); err != nil || !first {
		t.Fatalf("claiming: %v %v", first, err)
	}
	dup := ev
	if got := handle(t, r, dup); len(got) != 0 {
		t.Fatalf("the duplicate answered %+v", got)
	}
	if p, err := s.cl.Describe(context.Background(), thread); err != nil || p != agentflow.PresenceNone {
		t.Fatalf("a duplicate that is no retry was handled: %v %v", p, err)
	}
	retry := ev
	retry.Retry = true
	if got := handle(t, r, retry); len(got) != 0 {
		t.Fatalf("the retry answered %+v", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := s.cl.Wait(ctx, thread, ev.MessageID)
	if err != nil || res.Result == nil || !strings.Contains(res.Result.Answer, "survived") {
		t.Fatalf("the retry did not reach the session: %+v %v", res.Result, err)
	}
	// Now handed over: a further retry is dropped.
	if got := handle(t, r, retry); len(got) != 0 {
		t.Fatalf("a retry of a settled event answered %+v", got)
	}
	if v := s.state(t, thread); v.Turn != 1 {
		t.Fatalf("%d turns, want 1", v.Turn)
	}
}
