package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"
)

// callLog notes the requests a chat fake receives, with their time: the
// platforms' rate limits count them so.
type callLog struct {
	mu    sync.Mutex
	calls []chatCall
}

// chatCall is one request to a chat fake.
type chatCall struct {
	At     time.Time
	Method string // Slack API method ("chat.update") or "PATCH /channels/…"
}

// client returns an HTTP client whose every request is noted: a chat
// sender's calls, as the platform counts them.
func (l *callLog) client() *http.Client {
	return &http.Client{Transport: recording{l, http.DefaultTransport.(*http.Transport).Clone()}}
}

type recording struct {
	l    *callLog
	next http.RoundTripper
}

func (t recording) RoundTrip(r *http.Request) (*http.Response, error) {
	t.l.mu.Lock()
	t.l.calls = append(t.l.calls, chatCall{At: time.Now(), Method: r.Method + " " + r.URL.Path})
	t.l.mu.Unlock()
	return t.next.RoundTrip(r)
}

// measureChatCalls is P8: one turn of 30 shell commands (0.1 s each) in a
// Slack thread and in a Discord channel; the fakes count the calls. Slack
// allows about one chat.update per second per message (Tier 3 is ~50 per
// minute per workspace, bursts tolerated); Discord's per-channel bucket is
// 5 requests per 5 s.
func measureChatCalls(ctx context.Context, e *benchEnv, r *report) error {
	e.setLatency(0)
	var lines []string
	for i := 0; i < 30; i++ {
		lines = append(lines, "sh: sleep 0.1")
	}
	text := strings.Join(lines, "\n")
	type platform struct {
		name, thread string
		limit        float64 // calls per second per message the platform tolerates
		edits        func(since time.Time) []time.Time
	}
	// The Slack thread: a root message posted as a person would.
	_, ts, err := slack.New(e.slack.Options().BotToken, slack.OptionAPIURL(e.slack.APIURL())).
		PostMessageContext(ctx, "C0BENCH", slack.MsgOptionText("bench thread", false))
	if err != nil {
		return fmt.Errorf("slack: posting the thread's root: %w", err)
	}
	platforms := []platform{
		{"Slack", "slack:" + e.slack.Options().TeamID + ":C0BENCH:" + ts, 1, func(since time.Time) []time.Time { return e.chatCalls.edits(since, "/api/chat.update") }},
		{"Discord", "discord:G0BENCH:" + e.discordChan, 1, func(since time.Time) []time.Time { return e.chatCalls.edits(since, "PATCH") }},
	}
	for _, p := range platforms {
		var perSec, maxWindow, total sample
		for run := 0; run < max(e.s.runs/2, 1); run++ {
			t0 := time.Now()
			d, err := e.productTurn(ctx, p.thread, text)
			if err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
			// Edits of the progress message arrive with the turn; the
			// last may follow the answer by a moment.
			time.Sleep(1500 * time.Millisecond)
			edits := p.edits(t0)
			total = append(total, float64(len(edits)))
			perSec = append(perSec, float64(len(edits))/d.Seconds())
			maxWindow = append(maxWindow, float64(maxInWindow(edits, time.Second)))
		}
		x := row{ID: "P8", Measure: fmt.Sprintf("%s: edits of the progress message during a 30-tool turn", p.name),
			Baseline: "platform limit: 1 edit/s per message", Unit: "edits/s", Prod: perSec, Ratio: maxWindow, Target: "≤ 1 edit in any 1 s"}
		ok := maxWindow.Max() <= 1
		x.Met = &ok
		x.Note = fmt.Sprintf("%s: %s edits per turn; at most %s in any one-second window (ratio column).", p.name, num(total.Median()), num(maxWindow.Max()))
		r.add(x)
	}
	return nil
}

// edits returns the times of the recorded calls since t whose method
// contains what.
func (l *callLog) edits(since time.Time, what string) []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []time.Time
	for _, c := range l.calls {
		if !c.At.Before(since) && strings.Contains(c.Method, what) {
			out = append(out, c.At)
		}
	}
	return out
}

// maxInWindow is the most events within any window of length d.
func maxInWindow(ts []time.Time, d time.Duration) int {
	best := 0
	for i := range ts {
		n := 0
		for j := i; j < len(ts) && ts[j].Sub(ts[i]) < d; j++ {
			n++
		}
		best = max(best, n)
	}
	return best
}
