package slackbot

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/slack-go/slack"

	"github.com/agentbot/agentbot/agentflow"
)

const (
	// DefaultStatusEvery is how often a running turn's thread status is set
	// again: Slack clears a status after two minutes without a message.
	DefaultStatusEvery = 90 * time.Second
	// DefaultStatusFor bounds how long a status is kept up with no news of
	// the turn, so that a turn whose end never reaches this process leaks
	// nothing.
	DefaultStatusFor = 30 * time.Minute

	statusCallTimeout = 10 * time.Second
	maxStatusTool     = 60 // characters of the running tool's summary
)

// statusRefusals are the errors of assistant.threads.setStatus that say
// the app may not use it at all (not the thread): after one, the team's
// threads get no status from this process again.
var statusRefusals = []string{
	"missing_scope", "not_allowed_token_type", "method_deprecated", "deprecated_endpoint",
	"feature_not_enabled", "access_denied", "no_permission", "unknown_method", "not_allowed",
	"enterprise_is_restricted", "is_bot",
}

// statusKeeper shows a running turn in its thread with
// assistant.threads.setStatus ("agentbot is working… (shell: go test)"):
// set at the turn's progress, set again every `every` while the turn runs
// (Slack drops a status after two minutes), and cleared by the final
// progress or the answer. Each thread with a status has one goroutine,
// which ends with the turn, after `bound` without news, or at Close.
// Safe for concurrent use.
type statusKeeper struct {
	api   *slack.Client
	log   *slog.Logger
	every time.Duration
	bound time.Duration
	// tick makes the re-set ticker; tests replace it to drive the ticks.
	tick func(time.Duration) (<-chan time.Time, func())

	mu      sync.Mutex
	refused map[string]string // team → the error that refused the method
	loops   map[string]*statusLoop
	wg      sync.WaitGroup
}

// statusLoop keeps one thread's status up.
type statusLoop struct {
	team, channel, ts string
	text              string
	news              chan struct{} // a progress arrived: the bound starts over
	cancel            context.CancelFunc
}

func newStatusKeeper(api *slack.Client, log *slog.Logger, every, bound time.Duration) *statusKeeper {
	return &statusKeeper{
		api: api, log: log, every: every, bound: bound,
		tick: func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		},
		refused: map[string]string{}, loops: map[string]*statusLoop{},
	}
}

// statusText is the status of a running turn: "is working…" and the
// running tool's summary, cut short.
func statusText(m agentflow.Outbound) string {
	text := "is working…"
	for i := len(m.Tools) - 1; i >= 0; i-- {
		if t := m.Tools[i]; t.State == "running" {
			summary := t.Summary
			if summary == "" {
				summary = t.Name
			}
			if summary = oneLine(summary, maxStatusTool); summary != "" {
				text += " (" + summary + ")"
			}
			break
		}
	}
	return text
}

// progress sets the thread's status for a progress message m of a turn,
// or clears it when m is the turn's final progress. Failures are logged,
// never returned: the status is a nicety.
func (k *statusKeeper) progress(ctx context.Context, m agentflow.Outbound, channel, threadTS string) {
	team, _, _, err := ParseThreadKey(m.Thread)
	if err != nil {
		return
	}
	if m.Final {
		k.answered(ctx, m.Thread, channel, threadTS)
		return
	}
	text := statusText(m)
	k.mu.Lock()
	if _, no := k.refused[team]; no {
		k.mu.Unlock()
		return
	}
	loop := k.loops[m.Thread]
	if loop != nil {
		select {
		case loop.news <- struct{}{}:
		default:
		}
		if loop.text == text {
			k.mu.Unlock()
			return
		}
		loop.text = text
	} else {
		lctx, cancel := context.WithCancel(context.Background())
		loop = &statusLoop{team: team, channel: channel, ts: threadTS, text: text, news: make(chan struct{}, 1), cancel: cancel}
		k.loops[m.Thread] = loop
		k.wg.Add(1)
		go k.run(lctx, m.Thread, loop)
	}
	k.mu.Unlock()
	k.set(ctx, team, channel, threadTS, text)
}

// answered stops the thread's status loop, if any, and clears its status.
func (k *statusKeeper) answered(ctx context.Context, thread, channel, threadTS string) {
	k.mu.Lock()
	loop := k.loops[thread]
	if loop != nil {
		delete(k.loops, thread)
		loop.cancel()
	}
	k.mu.Unlock()
	if loop != nil {
		k.set(ctx, loop.team, channel, threadTS, "")
	}
}

// run sets the status again every k.every until the loop is stopped or
// k.bound passes with no progress.
func (k *statusKeeper) run(ctx context.Context, thread string, loop *statusLoop) {
	defer k.wg.Done()
	tick, stop := k.tick(k.every)
	defer stop()
	bound := time.NewTimer(k.bound)
	defer bound.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-loop.news:
			bound.Reset(k.bound)
		case <-bound.C:
			k.mu.Lock()
			if k.loops[thread] == loop {
				delete(k.loops, thread)
			}
			k.mu.Unlock()
			loop.cancel()
			k.log.Debug("no news of a turn; its thread status is left to expire", "thread", thread)
			return
		case <-tick:
			k.mu.Lock()
			text := loop.text
			k.mu.Unlock()
			k.set(ctx, loop.team, loop.channel, loop.ts, text)
		}
	}
}

// set calls assistant.threads.setStatus, unless the team refused it; a
// refusal is remembered and stops the team's loops.
func (k *statusKeeper) set(ctx context.Context, team, channel, threadTS, text string) {
	k.mu.Lock()
	_, no := k.refused[team]
	k.mu.Unlock()
	if no {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), statusCallTimeout)
	defer cancel()
	err := k.api.SetAssistantThreadsStatusContext(ctx, slack.AssistantThreadsSetStatusParameters{
		ChannelID: channel, ThreadTS: threadTS, Status: text,
	})
	switch {
	case err == nil:
	case isSlackError(err, statusRefusals...):
		k.mu.Lock()
		k.refused[team] = err.Error()
		for thread, loop := range k.loops {
			if loop.team == team {
				delete(k.loops, thread)
				loop.cancel()
			}
		}
		k.mu.Unlock()
		k.log.Info("slack refused assistant.threads.setStatus; threads of this team show no status", "team", team, "error", err)
	default:
		k.log.Debug("setting a thread status failed", "channel", channel, "thread_ts", threadTS, "error", err)
	}
}

// close stops every loop and waits for them.
func (k *statusKeeper) close() {
	k.mu.Lock()
	for thread, loop := range k.loops {
		delete(k.loops, thread)
		loop.cancel()
	}
	k.mu.Unlock()
	k.wg.Wait()
}

// Close stops the goroutines that keep running turns' thread statuses up
// (they end by themselves within StatusFor otherwise) and the one that
// publishes App Homes (homes not yet published are dropped). The Sender
// may be used after Close; a later progress starts a status again.
func (s *Sender) Close() {
	s.status.close()
	s.home.close()
}
