package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/agentbot/agentbot/bot/terminal"
	"github.com/agentbot/agentbot/internal/testenv"
)

// measureTerminalRoundTrips is P9's terminal row: the terminal chat of
// the embedded default, driven line by line, its sender printing in the
// same process; the gateway's Temporal calls are counted from the line
// typed to the answer printed.
func measureTerminalRoundTrips(ctx context.Context, e *benchEnv, r *report) error {
	e.setLatency(0)
	out := &lineWatch{}
	sender := terminal.NewSender(out)
	e.answers.relay(sender)
	defer e.answers.relay(nil)
	inR, inW := io.Pipe()
	chat := &terminal.Chat{Router: e.router, Client: e.sessions, In: inR, Out: io.Discard, User: "U-bench",
		Thread: "p9-terminal", Answers: sender}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- chat.Run(ctx) }()
	defer func() { inW.Close(); cancel(); <-done }()
	var calls, secs sample
	for i := 0; i < e.s.runs+1; i++ {
		want := fmt.Sprintf("echo: round %d", i)
		e.gatewayCalls.reset()
		t0 := time.Now()
		if _, err := fmt.Fprintf(inW, "round %d\n", i); err != nil {
			return err
		}
		if err := out.wait(ctx, want, 2*time.Minute); err != nil {
			return err
		}
		d := time.Since(t0)
		// The chat's own wait ends with the answer; let it.
		time.Sleep(50 * time.Millisecond)
		n, _ := e.gatewayCalls.reset()
		if i == 0 {
			continue // the first starts the session
		}
		calls, secs = append(calls, float64(n)), append(secs, d.Seconds())
	}
	x := row{ID: "P9", Measure: "gateway → Temporal calls per message (terminal, embedded)", Baseline: "one signal-with-start, then push",
		Unit: "calls", Prod: calls, Ratio: calls, Target: "≤ 2"}
	ok := calls.Max() <= 2
	x.Met = &ok
	x.Note = fmt.Sprintf("turns of %ss (median); the terminal learns of answers from its sender in the same process, and asks the session only every 10 s to notice one that ended unanswered; with a worker elsewhere it asks every 500 ms (first after 250 ms): ≤ 2 + T/0.5 s calls for a turn of T seconds.", num(secs.Median()))
	r.add(x)
	return nil
}

// lineWatch is a terminal: it keeps what was printed and tells when a
// line appears.
type lineWatch struct{ testenv.Buffer }

func (w *lineWatch) wait(ctx context.Context, s string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for !strings.Contains(w.String(), s) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the terminal did not print %q in time", s)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	return nil
}
