package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/proto"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
)

var msgSeq atomic.Int64

// productTurn sends text to the session of thread through the gateway's
// router, as a chat platform would, and waits for the answer to reach the
// chat sender. It returns the time between the two.
func (e *benchEnv) productTurn(ctx context.Context, thread, text string) (time.Duration, error) {
	id := fmt.Sprintf("bench-%d", msgSeq.Add(1))
	answer := e.answers.expect(thread)
	t0 := time.Now()
	platform, _, _ := strings.Cut(thread, ":")
	err := e.router.Handle(ctx, bot.Event{ID: id, Platform: platform, Kind: bot.KindMention, ThreadKey: thread,
		User: "U-bench", UserName: "bench", Text: text, MessageID: id}, bot.ReplierFunc(func(context.Context, bot.Response) error { return nil }))
	if err != nil {
		return 0, err
	}
	if _, err := await(ctx, answer, 5*time.Minute, thread); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// bareTimed is one bare turn, timed.
func (e *benchEnv) bareTimed(ctx context.Context, id, text string) (time.Duration, error) {
	t0 := time.Now()
	_, err := bareTurn(ctx, e.bareClient, id, text)
	return time.Since(t0), err
}

// measureTurnOverhead is P1 (and the history row), and gathers P9's
// gateway counts for the chat platforms' path.
func measureTurnOverhead(ctx context.Context, e *benchEnv, r *report) error {
	e.setLatency(0)
	const text = "sh: true"
	thread, bareID := "term:p1", "bare-p1"
	if _, err := e.productTurn(ctx, thread, text); err != nil {
		return err
	}
	if _, err := e.bareTimed(ctx, bareID, text); err != nil {
		return err
	}
	runs := max(3*e.s.runs, 5)
	var base, prod []time.Duration
	var calls sample
	for i := 0; i < runs; i++ {
		b, err := e.bareTimed(ctx, bareID, text)
		if err != nil {
			return err
		}
		e.gatewayCalls.reset()
		p, err := e.productTurn(ctx, thread, text)
		if err != nil {
			return err
		}
		n, by := e.gatewayCalls.reset()
		calls = append(calls, float64(n))
		if e.s.verbose {
			fmt.Fprintf(os.Stderr, "   P1 run %d: bare %s, agentbot %s, gateway calls %v\n", i+1, b, p, by)
		}
		base, prod = append(base, b), append(prod, p)
	}
	x := row{ID: "P1", Measure: "one-tool turn, instant model, local", Baseline: "bare workflow, same activities", Unit: "ms",
		Base: ms(base), Prod: ms(prod), Target: "≤ 1.3×"}
	for i := range base {
		x.Ratio = append(x.Ratio, float64(prod[i])/float64(base[i]))
	}
	verdict(&x, 1.3, false)
	r.add(x)
	e.p9Router = calls

	// History per turn, from the two workflows' histories so far.
	pe, pb, pt, err := historySize(ctx, e.workerClient, agentflow.AgentWorkflowID(thread))
	if err != nil {
		return err
	}
	be, bb, bt, err := historySize(ctx, e.bareClient, bareID)
	if err != nil {
		return err
	}
	if e.s.verbose {
		fmt.Fprintf(os.Stderr, "   P1 agentbot history: %s\n   P1 bare history: %s\n", sortedKeys(pt), sortedKeys(bt))
		for _, w := range []struct {
			name string
			c    client.Client
			id   string
		}{{"agentbot", e.workerClient, agentflow.AgentWorkflowID(thread)}, {"bare", e.bareClient, bareID}} {
			if tl, err := lastTurnTimeline(ctx, w.c, w.id); err == nil {
				fmt.Fprintf(os.Stderr, "   P1 %s: the last turn's events\n%s", w.name, tl)
			}
		}
	}
	turnsP, turnsB := float64(runs+1), float64(runs+1)
	h := row{ID: "P1", Measure: "history per turn: events / KB", Baseline: "bare workflow",
		Base: sample{be / turnsB, bb / turnsB / 1024}, Prod: sample{pe / turnsP, pb / turnsP / 1024}}
	h.Note = fmt.Sprintf("history per turn: agentbot %.0f events, %.1f KB; bare %.0f events, %.1f KB (whole histories over %d turns, session start included).",
		pe/turnsP, pb/turnsP/1024, be/turnsB, bb/turnsB/1024, runs+1)
	h.Base, h.Prod = nil, nil
	h.Ratio = sample{(pe / turnsP) / (be / turnsB)}
	r.add(h)
	return nil
}

// historySize sums a workflow's history (all runs of its chain are not
// followed: the measures stay below continue-as-new).
func historySize(ctx context.Context, c client.Client, id string) (events, bytes float64, kinds map[string]int, err error) {
	kinds = map[string]int{}
	it := c.GetWorkflowHistory(ctx, id, "", false, 0)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return 0, 0, nil, err
		}
		events++
		bytes += float64(proto.Size(ev))
		kinds[ev.GetEventType().String()]++
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			kinds["activity "+a.GetActivityType().GetName()]++
		}
	}
	return events, bytes, kinds, nil
}

// measureThroughput is P7: n sessions each get one message at once; the
// throughput is n over the time until the last answer. Levels of
// concurrency give the plot.
func measureThroughput(ctx context.Context, e *benchEnv, r *report) error {
	e.setLatency(100 * time.Millisecond)
	defer e.setLatency(0)
	levels := []int{1, 10, 25, 50}
	if e.s.quick {
		levels = []int{1, 5}
	}
	const text = "sh: true"
	var bareS, prodS series
	bareS.Name, prodS.Name = "bare workflow", "agentbot"
	var top row
	for _, n := range levels {
		threads := make([]string, n)
		bares := make([]string, n)
		for i := range threads {
			threads[i] = fmt.Sprintf("term:p7-%d-%d", n, i)
			bares[i] = fmt.Sprintf("bare-p7-%d-%d", n, i)
		}
		// Warm up: every session exists and has its sandbox.
		if err := parallel(n, func(i int) error { _, err := e.productTurn(ctx, threads[i], text); return err }); err != nil {
			return err
		}
		if err := parallel(n, func(i int) error { _, err := e.bareTimed(ctx, bares[i], text); return err }); err != nil {
			return err
		}
		var base, prod sample
		for run := 0; run < e.s.runs; run++ {
			t0 := time.Now()
			if err := parallel(n, func(i int) error { _, err := e.bareTimed(ctx, bares[i], text); return err }); err != nil {
				return err
			}
			base = append(base, float64(n)/time.Since(t0).Seconds())
			t0 = time.Now()
			if err := parallel(n, func(i int) error { _, err := e.productTurn(ctx, threads[i], text); return err }); err != nil {
				return err
			}
			prod = append(prod, float64(n)/time.Since(t0).Seconds())
		}
		bareS.X, bareS.Y = append(bareS.X, float64(n)), append(bareS.Y, base.Median())
		prodS.X, prodS.Y = append(prodS.X, float64(n)), append(prodS.Y, prod.Median())
		top = row{ID: "P7", Measure: fmt.Sprintf("%d turns at once in %d sessions, model 100 ms", n, n), Baseline: "bare workflow, same pattern",
			Unit: "turns/s", Base: base, Prod: prod, Target: "≥ 0.8×"}
		for i := range base {
			top.Ratio = append(top.Ratio, prod[i]/base[i])
		}
		if e.s.verbose {
			fmt.Fprintf(os.Stderr, "   P7 %d at once: bare %s, agentbot %s turns/s\n", n, stat(base, ""), stat(prod, ""))
		}
	}
	verdict(&top, 0.8, true)
	r.add(top)
	r.charts = append(r.charts, chart{Title: "P7: throughput vs concurrency (model 100 ms)", XLabel: "turns at once (one per session)", YLabel: "turns/s",
		Series: []series{bareS, prodS}})
	return nil
}

// parallel runs f(0..n-1) at once and returns the first error.
func parallel(n int, f func(i int) error) error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// measureBigWorkspace is P2: the same turn in an empty session and in one
// holding the big tree, for a turn that changes nothing and one that
// changes one file.
func measureBigWorkspace(ctx context.Context, e *benchEnv, r *report) error {
	e.setLatency(0)
	tree, err := e.tree()
	if err != nil {
		return err
	}
	empty, big := "term:p2-empty", "term:p2-big"
	if _, err := e.productTurn(ctx, empty, "sh: true"); err != nil {
		return err
	}
	if _, err := e.productTurn(ctx, big, "sh: cp -a "+tree+"/. ."); err != nil {
		return err
	}
	kinds := []struct{ name, text string }{
		{"changes nothing", "sh: true"},
		{"changes one file", "sh: date +%s%N > changed.txt"},
	}
	for _, k := range kinds {
		var base, prod []time.Duration
		for run := 0; run < max(2*e.s.runs, 5); run++ {
			b, err := e.productTurn(ctx, empty, k.text)
			if err != nil {
				return err
			}
			p, err := e.productTurn(ctx, big, k.text)
			if err != nil {
				return err
			}
			base, prod = append(base, b), append(prod, p)
		}
		x := row{ID: "P2", Measure: fmt.Sprintf("turn, %d MB workspace, %s", e.s.treeMB, k.name), Baseline: "same turn, empty workspace",
			Unit: "ms", Base: ms(base), Prod: ms(prod), Target: "≤ 1.1×"}
		for i := range base {
			x.Ratio = append(x.Ratio, float64(prod[i])/float64(base[i]))
		}
		verdict(&x, 1.1, false)
		r.add(x)
	}
	return nil
}

// measureRoundTrips is P9: the gateway's Temporal calls per message until
// the answer is shown, on the chat platforms' path (counted during P1) and
// on the terminal's.
func measureRoundTrips(ctx context.Context, e *benchEnv, r *report) error {
	if len(e.p9Router) == 0 {
		e.setLatency(0)
		var calls sample
		for i := 0; i < e.s.runs; i++ {
			e.gatewayCalls.reset()
			if _, err := e.productTurn(ctx, "term:p9", "sh: true"); err != nil {
				return err
			}
			n, _ := e.gatewayCalls.reset()
			calls = append(calls, float64(n))
		}
		e.p9Router = calls
	}
	x := row{ID: "P9", Measure: "gateway → Temporal calls per message (Slack, Discord path)", Baseline: "one signal-with-start, then push",
		Unit: "calls", Ratio: e.p9Router, Target: "≤ 2"}
	ok := e.p9Router.Max() <= 2
	x.Met = &ok
	x.Prod = e.p9Router
	r.add(x)
	return measureTerminalRoundTrips(ctx, e, r)
}

// sortedKeys lists a count map for a note.
func sortedKeys(m map[string]int) string {
	var ks []string
	for k, v := range m {
		ks = append(ks, fmt.Sprintf("%s×%d", k, v))
	}
	sort.Strings(ks)
	return strings.Join(ks, ", ")
}

// lastTurnTimeline lists the events of a workflow's history from its last
// message in (signal or update) to its end, each with its time from the
// first of them: where a turn's time goes, for -v.
func lastTurnTimeline(ctx context.Context, c client.Client, id string) (string, error) {
	var evs []*historypb.HistoryEvent
	it := c.GetWorkflowHistory(ctx, id, "", false, 0)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return "", err
		}
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
			evs = evs[:0]
		}
		evs = append(evs, ev)
	}
	if len(evs) == 0 {
		return "", nil
	}
	var b strings.Builder
	t0 := evs[0].GetEventTime().AsTime()
	for _, ev := range evs {
		what := strings.TrimPrefix(ev.GetEventType().String(), "EVENT_TYPE_")
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			what += " " + a.GetActivityType().GetName()
		}
		if a := ev.GetMarkerRecordedEventAttributes(); a != nil {
			what += " " + a.GetMarkerName()
		}
		if a := ev.GetTimerStartedEventAttributes(); a != nil {
			what += " " + a.GetStartToFireTimeout().AsDuration().String()
		}
		fmt.Fprintf(&b, "     %7.1f ms  %s\n", float64(ev.GetEventTime().AsTime().Sub(t0).Microseconds())/1000, what)
	}
	return b.String(), nil
}
