package slackbot

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
)

// homeKeeper is the Sender's side of the App Home: it learns from the
// messages delivered which sessions changed, and publishes their owners'
// homes again — only for owners who opened theirs (Home.hasOpened), at most
// once per Home.every each (a change within that time is published at its
// end, so the last state always shows), from one background goroutine that
// runs while there is work. Delivery never waits for it. Safe for
// concurrent use.
type homeKeeper struct {
	home  *Home
	api   homePublisher
	links *Links
	log   *slog.Logger

	turns  *bot.Recent[bool]   // thread → whether a turn runs, as last delivered here
	owners *bot.Recent[string] // thread → who started its session

	mu      sync.Mutex
	ctx     context.Context // of the current goroutine; cancelled by close
	cancel  context.CancelFunc
	running bool            // the goroutine runs (until it is out of work, or close)
	closing bool            // close waits for the goroutine: changes are dropped
	threads map[string]bool // changed, not yet looked at
	wake    chan struct{}
	wg      sync.WaitGroup
}

func newHomeKeeper(home *Home, api homePublisher, links *Links, log *slog.Logger) *homeKeeper {
	k := &homeKeeper{home: home, api: api, links: links, log: log,
		turns: bot.NewRecent[bool](maxHomeOwners), owners: bot.NewRecent[string](maxHomeOwners),
		threads: map[string]bool{}, wake: make(chan struct{}, 1)}
	k.ctx, k.cancel = context.WithCancel(context.Background())
	return k
}

// changed notes that m was delivered and, if it says its session's state
// changed, hands the session to the background goroutine. It never
// blocks on the network.
func (k *homeKeeper) changed(m agentflow.Outbound) {
	team, _, _, err := ParseThreadKey(m.Thread)
	if err != nil || !k.home.anyOpened(team) || k.home.isRefused(team) {
		return
	}
	switch m.Kind {
	case agentflow.OutboundProgress, agentflow.OutboundAnswer:
		// Every tool call edits the progress message: only a turn that
		// starts or ends changes what the home shows.
		running := m.Kind == agentflow.OutboundProgress && !m.Final
		if was, ok := k.turns.Get(m.Thread); ok && was == running {
			return
		}
		k.turns.Put(m.Thread, running)
	case agentflow.OutboundTitle, agentflow.OutboundLifecycle, agentflow.OutboundNotice:
		// A title, a pause or a destroy, a switch of backend, a fork.
	default:
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closing {
		return
	}
	if len(k.threads) >= maxHomeThreads && !k.threads[m.Thread] {
		k.log.Debug("too many sessions changed at once; a home is not updated", "thread", m.Thread)
		return
	}
	k.threads[m.Thread] = true
	if !k.running {
		k.running = true
		k.wg.Add(1)
		go k.run(k.ctx)
	}
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// homeDue is a person whose home must be published again, and the
// sessions that changed meanwhile.
type homeDue struct {
	team, user string
	fresh      []string
}

// run looks up the owners of the changed sessions and publishes their
// homes, each no sooner than Home.every after its last publication, until
// nothing is left to do or ctx ends.
func (k *homeKeeper) run(ctx context.Context) {
	defer k.wg.Done()
	due := map[string]*homeDue{}
	last := map[string]time.Time{} // viewer key → last publication
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		k.mu.Lock()
		threads := k.threads
		k.threads = map[string]bool{}
		k.mu.Unlock()
		for thread := range threads {
			team, _, _, _ := ParseThreadKey(thread)
			owner := k.owner(ctx, thread)
			if owner == "" || !k.home.hasOpened(team, owner) {
				continue
			}
			key := viewerKey(team, owner)
			d := due[key]
			if d == nil {
				d = &homeDue{team: team, user: owner}
				due[key] = d
			}
			if !slices.Contains(d.fresh, thread) {
				d.fresh = append(d.fresh, thread)
			}
		}
		wait := time.Duration(-1)
		for key, d := range due {
			if ctx.Err() != nil {
				return
			}
			if left := k.home.every - time.Since(last[key]); left > 0 {
				if wait < 0 || left < wait {
					wait = left
				}
				continue
			}
			delete(due, key)
			last[key] = time.Now()
			if k.home.isRefused(d.team) {
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, homeCallTimeout)
			if err := k.home.publish(pctx, k.api, k.links, d.team, d.user, homeNote{}, d.fresh); err != nil && ctx.Err() == nil {
				k.log.Debug("publishing a home failed", "user", d.user, "error", err)
			}
			cancel()
		}
		for key, at := range last {
			if time.Since(at) >= k.home.every && due[key] == nil {
				delete(last, key)
			}
		}
		k.mu.Lock()
		if len(k.threads) == 0 && len(due) == 0 {
			k.running = false
			k.mu.Unlock()
			return
		}
		k.mu.Unlock()
		var tick <-chan time.Time
		if wait >= 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			tick = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-k.wake:
		case <-tick:
		}
		if timer != nil && !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// owner returns who started the session of thread: remembered, or asked
// of the session (its state), or read from the tenant's list (a destroyed
// session answers no query); "" when none says.
func (k *homeKeeper) owner(ctx context.Context, thread string) string {
	if o, ok := k.owners.Get(thread); ok {
		return o
	}
	ctx, cancel := context.WithTimeout(ctx, homeCallTimeout)
	defer cancel()
	owner := ""
	if v, err := k.home.src.State(ctx, thread); err == nil {
		owner = v.Requester
	} else if l, lerr := k.home.src.List(ctx, thread); lerr == nil {
		for _, e := range l {
			if e.ThreadKey == thread {
				owner = e.Requester
			}
		}
	} else {
		k.log.Debug("the owner of a changed session is unknown; no home is updated", "thread", thread, "error", err)
	}
	if owner != "" {
		k.owners.Put(thread, owner)
	}
	return owner
}

// close stops the goroutine and waits for it; what was left to publish
// is dropped. The keeper may be used after close.
func (k *homeKeeper) close() {
	if k == nil {
		return
	}
	k.mu.Lock()
	k.closing = true
	k.cancel()
	k.ctx, k.cancel = context.WithCancel(context.Background())
	k.mu.Unlock()
	k.wg.Wait()
	k.mu.Lock()
	k.running, k.closing = false, false
	clear(k.threads)
	k.mu.Unlock()
}
