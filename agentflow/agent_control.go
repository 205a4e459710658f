package agentflow

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/agentbot/agentbot/agentflow/llm"
)

// memoActiveEvery is how often, at most, a turn records in the session's
// memo that the session was active (list shows it).
const memoActiveEvery = time.Minute

// admitSession registers a new session with its tenant's manager and waits
// for the admission: the tenant's caps are checked there, one session at a
// time. It returns why the session was refused, or "". The messages that
// arrive meanwhile wait in the queue.
func (w *agent) admitSession(ctx workflow.Context) string {
	w.upsertMemo(ctx)
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second,
			NonRetryableErrorTypes: nonRetryable,
		},
	})
	var a *Activities
	var adm Admission
	if err := workflow.ExecuteActivity(actx, a.Register, w.entry()).Get(ctx, &adm); err != nil {
		// Only a permanent error ends up here (the activity retries
		// otherwise): run without the tenant's policy rather than never.
		w.logger.Error("registering with the session manager failed; running without the tenant's policy", "error", err)
		w.Registered = true
		return ""
	}
	if !adm.Admitted {
		return adm.Reason
	}
	w.Registered = true
	if adm.Policy != nil {
		p := *adm.Policy
		w.Policy = &p
	}
	if w.DefaultBackend && adm.Backend != "" && adm.Backend != w.Backend && w.Sandbox == nil {
		w.Backend = adm.Backend
		if err := w.report(ctx, ManagerUpdateSwitch); err != nil {
			w.logger.Warn("reporting the tenant's default backend failed", "error", err)
		}
	}
	w.DefaultBackend = false
	if w.Policy != nil && !w.Policy.BackendAllowed(w.Backend) && w.Sandbox == nil {
		return backendRefusal(w.Backend, *w.Policy).Error()
	}
	return ""
}

// refuseSession ends a session the manager did not admit: its waiting
// messages are answered with the reason, and the thread keeps no session.
func (w *agent) refuseSession(ctx workflow.Context, reason string) error {
	w.Turn++
	res := TurnResult{Turn: w.Turn, Status: TurnRefused, Error: reason, Delivered: true}
	for _, m := range w.Queue {
		res.MessageIDs = append(res.MessageIDs, m.ID)
		if s := w.seen(m.ID); s != nil {
			s.Turn = w.Turn
		}
	}
	text := "Sorry — " + reason + "."
	res.Answer = text
	w.addResult(res, combine(w.Queue))
	w.Queue = nil
	w.Destroyed = true
	w.deliver(ctx, Outbound{Kind: OutboundAnswer, Turn: w.Turn, Key: w.workflowID + "/refused", Text: Text{Inline: text, Size: len(text)}, Status: TurnRefused})
	w.upsertMemo(ctx)
	if err := w.report(ctx, ManagerUpdateDestroy); err != nil {
		w.logger.Warn("reporting the refusal to the session manager failed", "error", err)
	}
	return workflow.Await(ctx, func() bool { return w.outboxIdle() && workflow.AllHandlersFinished(ctx) })
}

// startPolicySignals receives the tenant's policy (SignalPolicy) and the
// manager's answers to turn tickets (SignalTurnGrant).
func (w *agent) startPolicySignals(ctx workflow.Context) {
	w.policies = workflow.GetSignalChannel(ctx, SignalPolicy)
	w.grants = workflow.GetSignalChannel(ctx, SignalTurnGrant)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var p TenantPolicy
			if !w.policies.Receive(ctx, &p) {
				return
			}
			w.Policy = &p
		}
	})
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var g TurnGrant
			if !w.grants.Receive(ctx, &g) {
				return
			}
			if g.Turn == w.Turn && w.turnRunning() {
				w.slot = &g
			}
		}
	})
}

// drainPolicies takes a policy signalled but not yet received, before the
// run hands over; grants are for turns, and none runs then.
func (w *agent) drainPolicies() {
	for {
		var p TenantPolicy
		if !w.policies.ReceiveAsync(&p) {
			break
		}
		w.Policy = &p
	}
	for {
		var g TurnGrant
		if !w.grants.ReceiveAsync(&g) {
			return
		}
	}
}

// awaitSlot asks the manager for a turn slot and waits for it, telling the
// thread when the turn is queued behind others. It returns the manager's
// refusal (a budget is spent), or "" once granted or stopped.
func (w *agent) awaitSlot(ctx, turnCtx workflow.Context, turn int, user string) string {
	w.slot = nil
	t := TurnTicket{Phase: TicketRequest, Thread: w.ThreadKey, Turn: turn, User: user}
	if err := workflow.SignalExternalWorkflow(ctx, ManagerWorkflowID(w.ThreadKey), "", ManagerSignalTurn, t).Get(ctx, nil); err != nil {
		// No manager to ask (it cannot be started from here): run.
		w.logger.Warn("asking the session manager for a turn slot failed; running the turn", "error", err)
		return ""
	}
	told := false
	for {
		if err := workflow.Await(turnCtx, func() bool { return w.slot != nil }); err != nil {
			return "" // stopped
		}
		g := *w.slot
		switch {
		case g.Refused != "":
			return g.Refused
		case g.Granted:
			return ""
		}
		if !told {
			told = true
			text := fmt.Sprintf("Queued behind %d %s: this workspace runs at most %d turns at once. I'll start as soon as one finishes.",
				g.Behind, plural(g.Behind, "session", "sessions"), w.Policy.MaxRunningTurns)
			w.deliver(ctx, Outbound{Kind: OutboundNotice, Turn: turn, Key: fmt.Sprintf("%s/%d/queued", w.workflowID, turn), Text: Text{Inline: text, Size: len(text)}})
		}
		w.slot = nil
		if err := workflow.Await(turnCtx, func() bool { return w.slot != nil }); err != nil {
			return ""
		}
	}
}

// returnSlot gives the turn's slot back and counts its tokens against the
// person's daily budget.
func (w *agent) returnSlot(ctx workflow.Context, turn int, user string, tokens int64) {
	w.slot = nil
	t := TurnTicket{Phase: TicketDone, Thread: w.ThreadKey, Turn: turn, User: user, Tokens: tokens}
	if err := workflow.SignalExternalWorkflow(ctx, ManagerWorkflowID(w.ThreadKey), "", ManagerSignalTurn, t).Get(ctx, nil); err != nil {
		w.logger.Warn("giving the turn slot back failed", "error", err)
	}
}

// budgetRefusal says why the session may not ask the model again: its
// token budget is spent.
func (w *agent) budgetRefusal() string {
	if w.Policy == nil || w.Policy.SessionTokens <= 0 {
		return ""
	}
	if used := usedTokens(w.Usage); used >= w.Policy.SessionTokens {
		return fmt.Sprintf("this session has used %d tokens of its budget of %d; an admin can raise it (`policy set session-tokens <n>`), or `reset` and `fork` start afresh only with an admin's change", used, w.Policy.SessionTokens)
	}
	return ""
}

// turnModel is the model of the turn: the session's, unless the policy no
// longer allows it.
func (w *agent) turnModel() string {
	if w.Model == "" || w.Policy == nil || w.Policy.ModelAllowed(w.Model) {
		return w.Model
	}
	w.notice(fmt.Sprintf("(The model `%s` is no longer allowed here; this turn used the default model.)", w.Model))
	return ""
}

// turnUser is whose turn it is, for the daily budget: the author of the
// newest message.
func turnUser(msgs []QueuedMessage) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].User != "" {
			return msgs[i].User
		}
	}
	return ""
}

func usedTokens(u llm.Usage) int64 {
	if u.TotalTokens > 0 {
		return u.TotalTokens
	}
	return u.InputTokens + u.OutputTokens
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func (w *agent) validateModel(ctx workflow.Context, r ModelRequest) error {
	if err := w.controlBy(r.By); err != nil {
		return err
	}
	if r.Model != "" && !validName(r.Model) {
		return fmt.Errorf("%q is not a model name", r.Model)
	}
	if w.Policy != nil && !w.Policy.ModelAllowed(r.Model) {
		return modelRefusal(r.Model, *w.Policy)
	}
	return nil
}

// onModel sets the session's model: the next model call uses it.
func (w *agent) onModel(ctx workflow.Context, r ModelRequest) (SessionView, error) {
	w.Model = r.Model
	if r.Notify {
		text := fmt.Sprintf("Model set to `%s`; the next step uses it.", r.Model)
		if r.Model == "" {
			text = "Model set to the default; the next step uses it."
		}
		w.notifyOutcome(ctx, nil, text)
	}
	w.upsertMemo(ctx)
	return w.view(), nil
}

func (w *agent) validateFork(ctx workflow.Context, r ForkRequest) error {
	if err := w.controlBy(r.Requester); err != nil {
		return err
	}
	if r.RequestID == "" {
		return errors.New("fork needs a request ID")
	}
	if r.Backend != "" && w.Policy != nil && !w.Policy.BackendAllowed(r.Backend) {
		return backendRefusal(r.Backend, *w.Policy)
	}
	if r.Title != "" {
		if _, err := cleanTitle(r.Title); err != nil {
			return err
		}
	}
	return nil
}

// onFork forks the session into a new thread, after the turns and requests
// that came before it: the session opens the thread, hands the fork its
// own copies of the transcript and the workspace, and starts it. The fork
// registers with the manager itself (with this session as its parent).
func (w *agent) onFork(ctx workflow.Context, r ForkRequest) (ForkResult, error) {
	res, err := w.fork(ctx, r)
	if err != nil && r.Notify {
		w.notifyOutcome(ctx, fmt.Errorf("fork failed: %s", err.Error()), "")
	}
	return res, err
}

func (w *agent) fork(ctx workflow.Context, r ForkRequest) (ForkResult, error) {
	holder, err := w.acquire(ctx, "fork")
	if err != nil {
		return ForkResult{}, err
	}
	defer w.lock.release(holder)
	backend := r.Backend
	if backend == "" {
		backend = w.Backend
	}
	title := forkTitle(r.Title, w.Title, w.Backend, backend, w.Forks+1)
	var a *Activities
	var thread string
	if err := workflow.ExecuteActivity(deliverCtx(ctx), a.OpenForkThread,
		OpenThreadInput{Source: w.ThreadKey, Title: title, RequestID: r.RequestID}).Get(ctx, &thread); err != nil {
		return ForkResult{}, errors.New(userError(err))
	}
	var seed ForkSeed
	found := false
	for _, rec := range w.ForkSeeds {
		if rec.ForkThreadKey == thread { // a retried fork: the same copies
			seed, found = rec.Seed, true
			seed.Turns = append([]TurnSummary(nil), w.Summaries...)
			seed.Pending = append([]llm.Message(nil), w.Pending...)
		}
	}
	if !found {
		if seed, err = w.makeSeed(ctx, thread); err != nil {
			return ForkResult{}, err
		}
	}
	seed.Model, seed.Policy = w.Model, w.Policy
	in := AgentInput{ThreadKey: thread, Title: title, Backend: backend, Root: r.Root, Requester: r.Requester,
		Admins: seed.Admins, Parent: w.ThreadKey, Seed: &seed, Options: seed.Options, Policy: w.Policy, Model: w.Model}
	if err := workflow.ExecuteActivity(storeCtx(ctx), a.StartFork, in).Get(ctx, nil); err != nil {
		return ForkResult{}, errors.New(userError(err))
	}
	return ForkResult{ThreadKey: thread, WorkflowID: AgentWorkflowID(thread), Title: title, Backend: backend}, nil
}
