package slackbot

import (
	"context"
	"testing"
	"time"

	"github.com/agentbot/agentbot/internal/fakeslack"
)

// driveTicks makes s's status loops tick when the test sends on the
// returned channel (one tick reaches one loop).
func driveTicks(s *Sender) chan time.Time {
	ch := make(chan time.Time)
	s.status.tick = func(time.Duration) (<-chan time.Time, func()) { return ch, func() {} }
	return ch
}

func waitStatusCalls(t *testing.T, fake *fakeslack.Server, n int) []fakeslack.StatusCall {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := fake.WaitFor(ctx, func(f *fakeslack.Server) bool { return len(f.StatusCalls()) >= n }); err != nil {
		t.Fatalf("want %d setStatus calls, have %+v: %v", n, fake.StatusCalls(), err)
	}
	return fake.StatusCalls()
}

func TestSenderThreadStatus(t *testing.T) {
	e := newSenderEnv(t)
	s := e.sender(t)
	t.Cleanup(s.Close)
	tick := driveTicks(s)
	ctx := context.Background()

	if err := s.Deliver(ctx, progressMsg(e.thread, false, "running")); err != nil {
		t.Fatal(err)
	}
	calls := waitStatusCalls(t, e.fake, 1)
	if want := "is working… (shell: step 0)"; calls[0].Status != want || calls[0].ThreadTS != e.rootTS {
		t.Errorf("first status %+v, want %q in the thread", calls[0], want)
	}
	if got := e.fake.ThreadStatus(testChannel, e.rootTS); got != "is working… (shell: step 0)" {
		t.Errorf("thread shows %q", got)
	}
	// The same progress again sets nothing; a tick sets it again.
	if err := s.Deliver(ctx, progressMsg(e.thread, false, "running")); err != nil {
		t.Fatal(err)
	}
	if n := len(e.fake.StatusCalls()); n != 1 {
		t.Errorf("%d calls after an unchanged progress, want 1", n)
	}
	tick <- time.Now()
	tick <- time.Now()
	calls = waitStatusCalls(t, e.fake, 3)
	for _, c := range calls[1:] {
		if c.Status != calls[0].Status {
			t.Errorf("re-set status %q, want %q", c.Status, calls[0].Status)
		}
	}
	// A new tool changes it.
	if err := s.Deliver(ctx, progressMsg(e.thread, false, "done", "running")); err != nil {
		t.Fatal(err)
	}
	if calls = waitStatusCalls(t, e.fake, 4); calls[3].Status != "is working… (shell: step 1)" {
		t.Errorf("status after a new tool %q", calls[3].Status)
	}
	// The answer clears it and stops the loop.
	if err := s.Deliver(ctx, answerMsg(e.thread, "agent/st/1/answer", "Done.")); err != nil {
		t.Fatal(err)
	}
	calls = waitStatusCalls(t, e.fake, 5)
	if calls[len(calls)-1].Status != "" {
		t.Errorf("last status call %+v, want a clear", calls[len(calls)-1])
	}
	if got := e.fake.ThreadStatus(testChannel, e.rootTS); got != "" {
		t.Errorf("thread still shows %q", got)
	}
	select {
	case tick <- time.Now():
		t.Error("a status loop still runs after the answer")
	case <-time.After(100 * time.Millisecond):
	}
	if n := len(e.fake.StatusCalls()); n != 5 {
		t.Errorf("%d status calls, want 5", n)
	}
}

func TestSenderThreadStatusFinalProgressClears(t *testing.T) {
	e := newSenderEnv(t)
	s := e.sender(t)
	t.Cleanup(s.Close)
	ctx := context.Background()
	if err := s.Deliver(ctx, progressMsg(e.thread, false, "running")); err != nil {
		t.Fatal(err)
	}
	if err := s.Deliver(ctx, progressMsg(e.thread, true, "done")); err != nil {
		t.Fatal(err)
	}
	if err := s.Deliver(ctx, answerMsg(e.thread, "agent/st/2/answer", "Done.")); err != nil {
		t.Fatal(err)
	}
	calls := e.fake.StatusCalls()
	if len(calls) != 2 || calls[1].Status != "" {
		t.Errorf("status calls %+v, want one set and one clear", calls)
	}
}

func TestSenderThreadStatusRefused(t *testing.T) {
	for _, code := range []string{"missing_scope", "not_allowed_token_type", "method_deprecated", "feature_not_enabled"} {
		t.Run(code, func(t *testing.T) {
			e := newSenderEnv(t)
			e.fake.Refuse("assistant.threads.setStatus", code)
			s := e.sender(t)
			t.Cleanup(s.Close)
			ctx := context.Background()
			for i, states := range [][]string{{"running"}, {"done", "running"}, {"done", "done"}} {
				if err := s.Deliver(ctx, progressMsg(e.thread, i == 2, states...)); err != nil {
					t.Fatalf("progress %d: %v", i, err)
				}
			}
			if err := s.Deliver(ctx, answerMsg(e.thread, "agent/st/3/answer", "Still **answered**.")); err != nil {
				t.Fatal(err)
			}
			if n := e.fake.Calls("assistant.threads.setStatus"); n != 1 {
				t.Errorf("setStatus called %d times, want 1 (never again once refused)", n)
			}
			got := e.replies()
			if md, ok := markdownOf(t, got[len(got)-1]); !ok || md != "Still **answered**." {
				t.Errorf("the answer was not posted: %+v", got[len(got)-1])
			}
		})
	}
}

func TestSenderThreadStatusBound(t *testing.T) {
	e := newSenderEnv(t)
	s := e.sender(t, func(c *SenderConfig) { c.StatusFor = 50 * time.Millisecond })
	t.Cleanup(s.Close)
	tick := driveTicks(s)
	if err := s.Deliver(context.Background(), progressMsg(e.thread, false, "running")); err != nil {
		t.Fatal(err)
	}
	// With no news past StatusFor, the loop ends by itself: no one takes
	// the tick.
	deadline := time.After(5 * time.Second)
	for {
		s.status.mu.Lock()
		n := len(s.status.loops)
		s.status.mu.Unlock()
		if n == 0 {
			break
		}
		select {
		case <-deadline:
			t.Fatal("the status loop outlived StatusFor")
		case <-time.After(10 * time.Millisecond):
		}
	}
	select {
	case tick <- time.Now():
		t.Error("a tick was taken after the loop ended")
	case <-time.After(100 * time.Millisecond):
	}
}
