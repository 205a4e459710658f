package agentflow

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Bounds of the manager's control state.
const (
	// maxAuditKept is how many audit entries the manager's state holds;
	// past it the oldest auditChunk go to the blob store.
	maxAuditKept = 400
	auditChunk   = 200
	// auditPageSize is the entries of one page of the audit verb.
	auditPageSize = 20
	// maxSlotAge drops a running turn's slot that was never given back (its
	// session was terminated from outside).
	maxSlotAge = 6 * time.Hour
)

// errTypeRefused marks a session's refusal of a handed-over request.
const errTypeRefused = "Refused"

func (m *manager) registerControl(ctx workflow.Context) error {
	if err := workflow.SetUpdateHandlerWithOptions(ctx, ManagerUpdateControl, m.control,
		workflow.UpdateHandlerOptions{Validator: m.validateControl}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, ManagerUpdateRegister, m.admit,
		workflow.UpdateHandlerOptions{Validator: m.validateEntry}); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(ctx, ManagerQueryPolicy, func() (TenantPolicy, error) {
		return m.effective(), nil
	}); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(ctx, ManagerQueryUsage, func(user string) (UsageView, error) {
		day := dayOf(workflow.Now(ctx))
		return UsageView{User: user, Day: day, Tokens: m.usage(user, day), Budget: m.effective().UserTokensPerDay}, nil
	}); err != nil {
		return err
	}
	return workflow.SetQueryHandler(ctx, ManagerQueryAudit, func(q AuditQuery) (AuditPage, error) {
		if !m.effective().IsAdmin(q.By) {
			return AuditPage{}, errors.New("only an admin can read the audit log")
		}
		return m.auditPage(q.Page), nil
	})
}

// effective is the policy in force: the configured one with the keys
// admins set.
func (m *manager) effective() TenantPolicy { return applyOverrides(m.Configured, m.Overrides) }

func (m *manager) validateControl(ctx workflow.Context, r ControlRequest) error {
	if r.RequestID == "" || len(r.RequestID) > 256 {
		return errors.New("a control request needs a request ID")
	}
	switch r.Verb {
	case ControlPolicy:
	case ControlNew, ControlSwitch, ControlFork, ControlTitle, ControlPause, ControlDestroy, ControlStop, ControlReset, ControlModel,
		ControlApprove, ControlApprovals:
		if r.Thread == "" {
			return fmt.Errorf("%s needs a session's thread", r.Verb)
		}
	default:
		return fmt.Errorf("unknown control verb %q", r.Verb)
	}
	if r.Thread != "" {
		if p, t := Tenant(r.Thread); p != m.Platform || t != m.Tenant {
			return fmt.Errorf("thread %q belongs to another tenant than %s:%s", r.Thread, m.Platform, m.Tenant)
		}
	}
	if r.Verb == ControlNew && r.Start == nil {
		return errors.New("new needs the session's settings")
	}
	return nil
}

// control decides one control request, records it in the audit log and,
// for a session's verbs, hands it to the session. It never waits for a
// turn: the session accepts the request and posts its outcome.
func (m *manager) control(ctx workflow.Context, r ControlRequest) (ControlResult, error) {
	if m.draining {
		// Refused by the handler, not the validator: an update a
		// validator rejects leaves a workflow task the server drops,
		// and under a stream of them the worker's view of the history
		// goes stale ("premature end of stream", temporalio/temporal#7741),
		// failing workflow tasks. Client.Control asks again.
		return ControlResult{}, errors.New(ErrRestartingText)
	}
	m.updates++
	if r.Config != nil {
		m.syncConfig(ctx, *r.Config)
	}
	for i := len(m.Audit) - 1; i >= 0; i-- {
		if a := m.Audit[i]; a.RequestID == r.RequestID && a.Thread == r.Thread && a.Verb == r.Verb {
			// A repeated request (a platform's retry in a later run): the
			// first answer stands.
			if a.Outcome == AuditRefused {
				return ControlResult{}, errors.New(a.Reason)
			}
			return ControlResult{Accepted: a.Outcome == AuditAccepted, Thread: a.Thread, Stop: a.Stop}, nil
		}
	}
	res, err := m.decide(ctx, r)
	m.record(ctx, r, res, err)
	return res, err
}

// syncConfig takes the gateway's configured policy as the base; sessions
// learn of a change in force.
func (m *manager) syncConfig(ctx workflow.Context, c TenantPolicy) {
	if m.Configured.equal(c) {
		return
	}
	before := m.effective()
	m.Configured = c
	if !before.equal(m.effective()) {
		m.broadcast(ctx)
		m.promote(ctx)
	}
}

func (m *manager) decide(ctx workflow.Context, r ControlRequest) (ControlResult, error) {
	p := m.effective()
	switch r.Verb {
	case ControlPolicy:
		return m.policyVerb(ctx, r, p)
	case ControlNew:
		return m.newSession(ctx, r, p)
	}
	e := m.find(r.Thread)
	if e != nil && e.Status == StatusDestroyed {
		return ControlResult{}, errors.New(ErrDestroyedText)
	}
	// A session this window does not know is checked by the session
	// itself, which refuses anyone but its owner and admins.
	if e != nil && e.Requester != "" && r.By != e.Requester && !p.IsAdmin(r.By) {
		return ControlResult{}, errors.New(ErrNotOwnerText)
	}
	switch r.Verb {
	case ControlSwitch:
		if !p.BackendAllowed(r.Backend) {
			return ControlResult{}, backendRefusal(r.Backend, p)
		}
		return m.handOver(ctx, r, UpdateSwitch, SwitchRequest{Backend: r.Backend, Root: r.Root, By: r.By, Notify: true})
	case ControlFork:
		if r.Backend != "" && !p.BackendAllowed(r.Backend) {
			return ControlResult{}, backendRefusal(r.Backend, p)
		}
		if err := m.capCheck(p, r.By, ""); err != nil {
			return ControlResult{}, err
		}
		return m.handOver(ctx, r, UpdateFork, ForkRequest{SourceThread: r.Thread, Backend: r.Backend, Root: r.Root, Title: r.Title,
			Requester: r.By, RequestID: r.RequestID, Notify: true})
	case ControlTitle:
		return m.handOver(ctx, r, UpdateTitle, TitleRequest{Title: r.Title, By: r.By, Notify: true})
	case ControlApprove:
		return m.handOver(ctx, r, UpdateApprove, ApproveRequest{ID: r.ApprovalID, Decision: r.Decision, All: r.All, By: r.By, Notify: true})
	case ControlApprovals:
		return m.handOver(ctx, r, UpdateApprovals, ApprovalsRequest{Mode: r.Mode, By: r.By, Notify: true})
	case ControlPause:
		return m.handOver(ctx, r, UpdatePause, PauseRequest{By: r.By, Notify: true})
	case ControlDestroy:
		return m.handOver(ctx, r, UpdateDestroy, DestroyRequest{By: r.By, Notify: true})
	case ControlStop:
		return m.handOver(ctx, r, UpdateStop, StopRequest{By: r.By, Notify: true})
	case ControlReset:
		return m.handOver(ctx, r, UpdateReset, ResetRequest{By: r.By, Notify: true})
	case ControlModel:
		if !p.ModelAllowed(r.Model) {
			return ControlResult{}, modelRefusal(r.Model, p)
		}
		return m.handOver(ctx, r, UpdateModel, ModelRequest{Model: r.Model, By: r.By, Notify: true})
	}
	return ControlResult{}, fmt.Errorf("unknown control verb %q", r.Verb)
}

func backendRefusal(backend string, p TenantPolicy) error {
	return fmt.Errorf("the `%s` backend is not allowed in this workspace (allowed: %s)", backend, strings.Join(p.Backends, ", "))
}

func modelRefusal(model string, p TenantPolicy) error {
	allowed := "only the default model"
	if len(p.Models) > 0 {
		allowed = "the default, " + strings.Join(p.Models, ", ")
	}
	return fmt.Errorf("the model `%s` is not allowed in this workspace (allowed: %s)", model, allowed)
}

// capCheck says whether one more live session, owned by user, fits the
// tenant's caps; except is a thread not to count (the one registering).
func (m *manager) capCheck(p TenantPolicy, user, except string) error {
	if p.MaxSessions <= 0 && p.MaxSessionsPerUser <= 0 {
		return nil
	}
	live, mine := 0, 0
	for _, e := range m.Sessions {
		if e.Status == StatusDestroyed || e.ThreadKey == except {
			continue
		}
		live++
		if user != "" && e.Requester == user {
			mine++
		}
	}
	if p.MaxSessions > 0 && live >= p.MaxSessions {
		return fmt.Errorf("this workspace already has %d live sessions, the most its policy allows; destroy one first (`list` shows them)", live)
	}
	if p.MaxSessionsPerUser > 0 && user != "" && mine >= p.MaxSessionsPerUser {
		return fmt.Errorf("you already have %d live sessions, the most one person may have here; destroy one first (`list --mine` shows them)", mine)
	}
	return nil
}

// handOver gives a request to the session's workflow as an update (the
// session checks it again: it is the authority over its own state and
// order) and returns once the session accepted it.
func (m *manager) handOver(ctx workflow.Context, r ControlRequest, name string, arg any) (ControlResult, error) {
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		ScheduleToCloseTimeout: time.Minute,
		StartToCloseTimeout:    15 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: 200 * time.Millisecond, BackoffCoefficient: 2, MaximumInterval: 5 * time.Second,
			NonRetryableErrorTypes: []string{errTypeRefused},
		},
	})
	var out HandOverResult
	err := workflow.ExecuteLocalActivity(lctx, handOverActivity, HandOverInput{
		WorkflowID: AgentWorkflowID(r.Thread), Name: name, UpdateID: "ctl/" + r.RequestID, Arg: arg,
	}).Get(ctx, &out)
	if err != nil {
		var app *temporal.ApplicationError
		if errors.As(err, &app) && app.Type() == errTypeRefused {
			return ControlResult{}, errors.New(app.Message())
		}
		return ControlResult{}, fmt.Errorf("the session did not answer: %s", userError(err))
	}
	return ControlResult{Accepted: !out.Done, Thread: r.Thread, Stop: out.Stop}, nil
}

// handOverActivity and startSessionActivity are local activities, called
// by name (they need the worker's Temporal client).
const (
	handOverActivity     = "HandOver"
	startSessionActivity = "StartSession"
	putAuditActivity     = "PutAudit"
)

// newSession starts a session in r.Thread, if the tenant's caps allow one
// more.
func (m *manager) newSession(ctx workflow.Context, r ControlRequest, p TenantPolicy) (ControlResult, error) {
	in := *r.Start
	in.ThreadKey, in.Requester, in.DefaultBackend = r.Thread, r.By, false
	in.Carry = nil
	if r.Backend == "" && p.DefaultBackend != "" {
		in.Backend = p.DefaultBackend
	}
	if in.Backend == "" {
		in.Backend = "local"
	}
	if !p.BackendAllowed(in.Backend) {
		return ControlResult{}, backendRefusal(in.Backend, p)
	}
	if in.Model != "" && !p.ModelAllowed(in.Model) {
		return ControlResult{}, modelRefusal(in.Model, p)
	}
	if e := m.find(r.Thread); e != nil {
		if e.Status == StatusDestroyed {
			return ControlResult{}, errors.New(ErrDestroyedText)
		}
		return ControlResult{Thread: r.Thread, Message: "exists"}, nil
	}
	if err := m.capCheck(p, r.By, r.Thread); err != nil {
		return ControlResult{}, err
	}
	in.Policy = &p
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		ScheduleToCloseTimeout: time.Minute, StartToCloseTimeout: 15 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, MaximumInterval: 5 * time.Second,
			NonRetryableErrorTypes: []string{errTypeRefused}},
	})
	var out StartSessionResult
	if err := workflow.ExecuteLocalActivity(lctx, startSessionActivity, in).Get(ctx, &out); err != nil {
		var app *temporal.ApplicationError
		if errors.As(err, &app) && app.Type() == errTypeRefused {
			return ControlResult{}, errors.New(app.Message())
		}
		return ControlResult{}, fmt.Errorf("could not start the session: %s", userError(err))
	}
	if m.find(r.Thread) == nil {
		now := workflow.Now(ctx)
		m.Sessions = append(m.Sessions, SessionEntry{ThreadKey: r.Thread, WorkflowID: AgentWorkflowID(r.Thread),
			Title: in.Title, Backend: in.Backend, Requester: r.By, Parent: in.Parent, Created: now, Updated: now,
			Status: StatusIdle, Model: in.Model})
	}
	return ControlResult{Thread: r.Thread}, nil
}

// admit registers a session that started (by a message, or from new or
// fork): it is admitted if the tenant's caps allow one more, and gets the
// policy. Sessions register one at a time, so two at once cannot both
// take the last place.
func (m *manager) admit(ctx workflow.Context, e SessionEntry) (Admission, error) {
	m.updates++
	p := m.effective()
	adm := Admission{Admitted: true, Policy: &p, Backend: p.DefaultBackend}
	if old := m.find(e.ThreadKey); old != nil {
		if old.Status == StatusDestroyed {
			return Admission{Reason: ErrDestroyedText}, nil
		}
		_, _ = m.upsert(ctx, e)
		return adm, nil
	}
	r := ControlRequest{RequestID: "register/" + e.ThreadKey, Verb: ControlNew, Thread: e.ThreadKey, By: e.Requester, Backend: e.Backend}
	if err := m.capCheck(p, e.Requester, e.ThreadKey); err != nil {
		m.record(ctx, r, ControlResult{}, err)
		return Admission{Reason: err.Error()}, nil
	}
	_, _ = m.upsert(ctx, e)
	m.record(ctx, r, ControlResult{}, nil)
	return adm, nil
}

// policyVerb shows the policy, or (admins) sets or resets keys of it.
func (m *manager) policyVerb(ctx workflow.Context, r ControlRequest, p TenantPolicy) (ControlResult, error) {
	if r.PolicyKey == "" && !r.PolicyReset {
		return ControlResult{Policy: &p}, nil
	}
	if !p.IsAdmin(r.By) {
		return ControlResult{}, errors.New("only an admin can change the policy")
	}
	if r.PolicyReset {
		if r.PolicyKey == "" {
			m.Overrides = nil
		} else {
			if !slices.Contains(PolicyKeys, r.PolicyKey) {
				return ControlResult{}, fmt.Errorf("unknown policy key %q; the keys are %s", r.PolicyKey, strings.Join(PolicyKeys, ", "))
			}
			m.Overrides = slices.DeleteFunc(m.Overrides, func(o PolicyOverride) bool { return o.Key == r.PolicyKey })
		}
	} else {
		next := p
		if err := next.Set(r.PolicyKey, r.PolicyValue); err != nil {
			return ControlResult{}, err
		}
		if err := next.Check(); err != nil {
			return ControlResult{}, err
		}
		m.Overrides = slices.DeleteFunc(m.Overrides, func(o PolicyOverride) bool { return o.Key == r.PolicyKey })
		m.Overrides = append(m.Overrides, PolicyOverride{Key: r.PolicyKey, Value: next.Get(r.PolicyKey), By: r.By})
	}
	np := m.effective()
	sent := m.broadcast(ctx)
	m.promote(ctx)
	// Answer once the sessions have the new policy in their histories (a
	// request that follows is then checked against it), or after a few
	// seconds for a large tenant: the rest get it all the same.
	if workflow.GetVersion(ctx, changePolicyDelivery, workflow.DefaultVersion, 1) >= 1 {
		if _, err := workflow.AwaitWithTimeout(ctx, policyDeliveryWait, func() bool { return *sent == 0 }); err != nil {
			return ControlResult{}, err
		}
	}
	return ControlResult{Policy: &np}, nil
}

// policyDeliveryWait bounds how long a policy change waits for the
// sessions to receive it.
const policyDeliveryWait = 5 * time.Second

// broadcast sends the policy in force to every live session the registry
// holds. The signals go out in the background (the run continues as new
// only once all were sent); the count it returns falls to zero when every
// one was delivered or failed.
func (m *manager) broadcast(ctx workflow.Context) *int {
	p := m.effective()
	pending := new(int)
	for _, e := range m.Sessions {
		if e.Status == StatusDestroyed {
			continue
		}
		*pending++
		m.signalThen(ctx, e.WorkflowID, SignalPolicy, p, func() { *pending-- })
	}
	return pending
}

// signal sends a signal to a session without waiting for it; a session
// that ended is no error.
func (m *manager) signal(ctx workflow.Context, workflowID, name string, arg any) {
	m.signalThen(ctx, workflowID, name, arg, nil)
}

// signalThen is signal, calling done (if not nil) once the signal was
// delivered or failed.
func (m *manager) signalThen(ctx workflow.Context, workflowID, name string, arg any, done func()) {
	f := workflow.SignalExternalWorkflow(ctx, workflowID, "", name, arg)
	m.signalling++
	workflow.Go(ctx, func(ctx workflow.Context) {
		defer func() { m.signalling-- }()
		if err := f.Get(ctx, nil); err != nil {
			workflow.GetLogger(ctx).Debug("signalling a session failed", "workflow_id", workflowID, "signal", name, "error", err)
		}
		if done != nil {
			done()
		}
	})
}

// record appends a request and its outcome to the audit log; past
// maxAuditKept entries the oldest go to the blob store.
func (m *manager) record(ctx workflow.Context, r ControlRequest, res ControlResult, err error) {
	m.AuditSeq++
	e := AuditEntry{Seq: m.AuditSeq, At: workflow.Now(ctx), RequestID: r.RequestID, Verb: r.Verb, Thread: r.Thread,
		By: r.By, Detail: detailOf(r), Outcome: AuditDone}
	switch {
	case err != nil:
		e.Outcome, e.Reason = AuditRefused, cut(err.Error(), 300)
	case res.Accepted:
		e.Outcome = AuditAccepted
	}
	e.Stop = res.Stop
	m.Audit = append(m.Audit, e)
	if len(m.Audit) <= maxAuditKept || m.archiving {
		return
	}
	// One chunk at a time (handlers run concurrently; the archive waits on
	// the blob store): the entries archived are dropped by number after.
	m.archiving = true
	defer func() { m.archiving = false }()
	chunk := slices.Clone(m.Audit[:auditChunk])
	last := chunk[len(chunk)-1].Seq
	key := fmt.Sprintf("audit/%s:%s/%08d-%08d.json", m.Platform, m.Tenant, chunk[0].Seq, last)
	actx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		ScheduleToCloseTimeout: time.Minute, StartToCloseTimeout: 20 * time.Second,
	})
	if err := workflow.ExecuteLocalActivity(actx, putAuditActivity, AuditChunk{Key: key, Entries: chunk}).Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("archiving the audit log failed; keeping it", "error", err)
		if len(m.Audit) <= 2*maxAuditKept {
			return
		}
		key = "" // past twice the bound, the oldest go unarchived
	}
	m.Audit = slices.DeleteFunc(m.Audit, func(a AuditEntry) bool { return a.Seq <= last })
	if key != "" {
		m.AuditArchives = append(m.AuditArchives, key)
	}
}

// AuditChunk is a part of the audit log moved to the blob store.
type AuditChunk struct {
	Key     string       `json:"key"`
	Entries []AuditEntry `json:"entries"`
}

func detailOf(r ControlRequest) string {
	switch r.Verb {
	case ControlSwitch:
		return strings.TrimSpace(r.Backend + " " + r.Root)
	case ControlFork:
		return strings.TrimSpace(r.Backend + " " + cut(r.Title, 60))
	case ControlTitle:
		return cut(r.Title, 60)
	case ControlModel:
		return r.Model
	case ControlApprove:
		d := strings.TrimSpace(r.Decision + " " + r.ApprovalID)
		if r.All {
			d += " --all"
		}
		return d
	case ControlApprovals:
		return r.Mode
	case ControlNew:
		return r.Backend
	case ControlPolicy:
		switch {
		case r.PolicyReset:
			return "reset " + r.PolicyKey
		case r.PolicyKey != "":
			return r.PolicyKey + "=" + cut(r.PolicyValue, 100)
		}
		return "show"
	}
	return ""
}

func (m *manager) auditPage(page int) AuditPage {
	if page < 1 {
		page = 1
	}
	n := len(m.Audit)
	pages := max(1, (n+auditPageSize-1)/auditPageSize)
	out := AuditPage{Page: page, Pages: pages, Archived: slices.Clone(m.AuditArchives)}
	hi := n - (page-1)*auditPageSize
	lo := max(0, hi-auditPageSize)
	for i := hi - 1; i >= lo && i >= 0; i-- {
		out.Entries = append(out.Entries, m.Audit[i])
	}
	return out
}

// startTickets serves ManagerSignalTurn.
func (m *manager) startTickets(ctx workflow.Context) {
	m.tickets = workflow.GetSignalChannel(ctx, ManagerSignalTurn)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var t TurnTicket
			if !m.tickets.Receive(ctx, &t) {
				return
			}
			m.ticket(ctx, t)
		}
	})
}

func (m *manager) drainTickets(ctx workflow.Context) {
	for {
		var t TurnTicket
		if !m.tickets.ReceiveAsync(&t) {
			return
		}
		m.ticket(ctx, t)
	}
}

// ticket hands out turn slots in order, and counts what turns used.
func (m *manager) ticket(ctx workflow.Context, t TurnTicket) {
	m.updates++
	p := m.effective()
	now := workflow.Now(ctx)
	day := dayOf(now)
	grant := func(g TurnGrant) {
		g.Turn = t.Turn
		m.signal(ctx, AgentWorkflowID(t.Thread), SignalTurnGrant, g)
	}
	same := func(s TurnSlot) bool { return s.Thread == t.Thread && s.Turn == t.Turn }
	switch t.Phase {
	case TicketRequest:
		if slices.ContainsFunc(m.Running, same) {
			grant(TurnGrant{Granted: true})
			return
		}
		if i := slices.IndexFunc(m.Waiting, same); i >= 0 {
			grant(TurnGrant{Behind: len(m.Running) + i})
			return
		}
		if p.UserTokensPerDay > 0 && t.User != "" {
			if used := m.usage(t.User, day); used >= p.UserTokensPerDay {
				grant(TurnGrant{Refused: fmt.Sprintf("you have used %d tokens today, your daily budget here is %d; it renews at 00:00 UTC", used, p.UserTokensPerDay)})
				return
			}
		}
		m.Running = slices.DeleteFunc(m.Running, func(s TurnSlot) bool {
			return now.Sub(s.Since) > maxSlotAge || s.Thread == t.Thread // a session runs one turn at a time
		})
		slot := TurnSlot{Thread: t.Thread, Turn: t.Turn, User: t.User, Since: now}
		if p.MaxRunningTurns <= 0 || (len(m.Running) < p.MaxRunningTurns && len(m.Waiting) == 0) {
			m.Running = append(m.Running, slot)
			grant(TurnGrant{Granted: true})
			return
		}
		m.Waiting = append(m.Waiting, slot)
		grant(TurnGrant{Behind: len(m.Running) + len(m.Waiting) - 1})
	case TicketDone:
		m.Running = slices.DeleteFunc(m.Running, same)
		m.Waiting = slices.DeleteFunc(m.Waiting, same)
		if t.Tokens > 0 && t.User != "" {
			m.addUsage(t.User, day, t.Tokens)
		}
		m.promote(ctx)
	}
}

// promote grants waiting turns the slots that are free.
func (m *manager) promote(ctx workflow.Context) {
	p := m.effective()
	for len(m.Waiting) > 0 && (p.MaxRunningTurns <= 0 || len(m.Running) < p.MaxRunningTurns) {
		s := m.Waiting[0]
		m.Waiting = m.Waiting[1:]
		s.Since = workflow.Now(ctx)
		m.Running = append(m.Running, s)
		m.signal(ctx, AgentWorkflowID(s.Thread), SignalTurnGrant, TurnGrant{Turn: s.Turn, Granted: true})
	}
	if len(m.Waiting) == 0 {
		m.Waiting = nil
	}
}

// releaseThread gives back the slots of a session that ended.
func (m *manager) releaseThread(ctx workflow.Context, thread string) {
	n := len(m.Running) + len(m.Waiting)
	m.Running = slices.DeleteFunc(m.Running, func(s TurnSlot) bool { return s.Thread == thread })
	m.Waiting = slices.DeleteFunc(m.Waiting, func(s TurnSlot) bool { return s.Thread == thread })
	if len(m.Running)+len(m.Waiting) != n {
		m.promote(ctx)
	}
}

func (m *manager) usage(user, day string) int64 {
	for _, u := range m.Usage {
		if u.User == user && u.Day == day {
			return u.Tokens
		}
	}
	return 0
}

// addUsage counts tokens of a person's day; only today's and yesterday's
// counts are kept.
func (m *manager) addUsage(user, day string, tokens int64) {
	m.Usage = slices.DeleteFunc(m.Usage, func(u UserDay) bool { return u.Day < dayBefore(day) })
	for i := range m.Usage {
		if m.Usage[i].User == user && m.Usage[i].Day == day {
			m.Usage[i].Tokens += tokens
			return
		}
	}
	m.Usage = append(m.Usage, UserDay{User: user, Day: day, Tokens: tokens})
}

func dayOf(t time.Time) string { return t.UTC().Format(time.DateOnly) }

func dayBefore(day string) string {
	t, err := time.Parse(time.DateOnly, day)
	if err != nil {
		return day
	}
	return t.AddDate(0, 0, -1).Format(time.DateOnly)
}
