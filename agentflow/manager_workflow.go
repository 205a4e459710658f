package agentflow

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// SessionManagerWorkflow keeps the registry of one tenant's sessions (one
// Slack team, one Discord guild, the terminal). Agents report to it; the
// chat layer lists and looks up sessions through it and forks through it.
// Its workflow ID is ManagerWorkflowID(threadKey).
func SessionManagerWorkflow(ctx workflow.Context, in ManagerInput) error {
	m := &manager{ManagerInput: in}
	if m.MaxUpdatesPerRun <= 0 {
		m.MaxUpdatesPerRun = 1000
	}
	if err := m.register(ctx); err != nil {
		return err
	}
	m.startTickets(ctx)
	// Serve until the history asks for a fresh run; handlers do the work.
	if err := workflow.Await(ctx, func() bool {
		return m.updates >= m.MaxUpdatesPerRun || workflow.GetInfo(ctx).GetContinueAsNewSuggested()
	}); err != nil {
		return err
	}
	m.draining = true
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return err
	}
	// Tickets sent meanwhile are handled here, not lost with this run, and
	// every signal this run sends has gone out.
	m.drainTickets(ctx)
	if err := workflow.Await(ctx, func() bool { return m.signalling == 0 }); err != nil {
		return err
	}
	next := m.ManagerInput
	next.Sessions = keepRecent(pruneDestroyed(next.Sessions, maxDestroyedKept), maxRegistryKept)
	return workflow.NewContinueAsNewError(ctx, SessionManagerWorkflowName, next)
}

// maxRegistryKept bounds the entries a manager carries through
// continue-as-new, whatever the size of the tenant: the ones changed most
// recently are kept. The registry here is a window for fork bookkeeping;
// the list of a tenant's sessions comes from Temporal's visibility (each
// session keeps its entry in its own memo), and whether a thread has a
// session from the thread's workflow.
const maxRegistryKept = 1000

// keepRecent keeps at most keep entries, in their order: live sessions
// first (the tenant's caps count them), the ones changed most recently
// (Updated, or Created for entries from before Updated) before older ones.
func keepRecent(sessions []SessionEntry, keep int) []SessionEntry {
	if len(sessions) <= keep {
		return sessions
	}
	last := func(e SessionEntry) time.Time {
		if e.Updated.After(e.Created) {
			return e.Updated
		}
		return e.Created
	}
	order := make([]int, len(sessions))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		la, lb := sessions[a].Status != StatusDestroyed, sessions[b].Status != StatusDestroyed
		if la != lb {
			if la {
				return -1
			}
			return 1
		}
		return last(sessions[b]).Compare(last(sessions[a]))
	})
	kept := make([]bool, len(sessions))
	for _, i := range order[:keep] {
		kept[i] = true
	}
	out := make([]SessionEntry, 0, keep)
	for i, e := range sessions {
		if kept[i] {
			out = append(out, e)
		}
	}
	return out
}

// maxDestroyedKept bounds the destroyed sessions a registry remembers, so
// that what continue-as-new carries stays small: live sessions are all
// kept, destroyed ones only the newest.
const maxDestroyedKept = 200

// pruneDestroyed drops all but the newest keep destroyed entries; the
// order of the rest is kept.
func pruneDestroyed(sessions []SessionEntry, keep int) []SessionEntry {
	destroyed := 0
	for _, e := range sessions {
		if e.Status == StatusDestroyed {
			destroyed++
		}
	}
	drop := destroyed - keep
	if drop <= 0 {
		return sessions
	}
	out := make([]SessionEntry, 0, len(sessions)-drop)
	for _, e := range sessions { // oldest first: the first ones go
		if e.Status == StatusDestroyed && drop > 0 {
			drop--
			continue
		}
		out = append(out, e)
	}
	return out
}

type manager struct {
	ManagerInput
	updates  int
	draining bool
	// tickets receives ManagerSignalTurn; signalling counts signals sent
	// and not yet confirmed.
	tickets    workflow.ReceiveChannel
	signalling int
	// archiving says an audit chunk is on its way to the blob store.
	archiving bool
}

const maxForkRecords = 64

func (m *manager) register(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, ManagerQueryList, func() ([]SessionEntry, error) {
		return append([]SessionEntry(nil), m.Sessions...), nil
	}); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(ctx, ManagerQueryLookup, func(threadKey string) (*SessionEntry, error) {
		if e := m.find(threadKey); e != nil {
			cp := *e
			return &cp, nil
		}
		return nil, nil
	}); err != nil {
		return err
	}
	for _, name := range []string{ManagerUpdateCreate, ManagerUpdateSwitch, ManagerUpdateRename, ManagerUpdateDestroy} {
		if err := workflow.SetUpdateHandlerWithOptions(ctx, name, m.upsert,
			workflow.UpdateHandlerOptions{Validator: m.validateEntry}); err != nil {
			return err
		}
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, ManagerUpdateFork, m.fork,
		workflow.UpdateHandlerOptions{Validator: m.validateFork}); err != nil {
		return err
	}
	return m.registerControl(ctx)
}

func (m *manager) find(threadKey string) *SessionEntry {
	for i := range m.Sessions {
		if m.Sessions[i].ThreadKey == threadKey {
			return &m.Sessions[i]
		}
	}
	return nil
}

func (m *manager) validateEntry(ctx workflow.Context, e SessionEntry) error {
	if e.ThreadKey == "" {
		return errors.New("session entry without a thread key")
	}
	if p, t := Tenant(e.ThreadKey); p != m.Platform || t != m.Tenant {
		return fmt.Errorf("thread %q belongs to another tenant than %s:%s", e.ThreadKey, m.Platform, m.Tenant)
	}
	return nil
}

// upsert records what an agent reports. A destroyed session stays destroyed
// (a late report of an older state cannot revive it).
func (m *manager) upsert(ctx workflow.Context, e SessionEntry) (SessionEntry, error) {
	m.updates++
	if e.WorkflowID == "" {
		e.WorkflowID = AgentWorkflowID(e.ThreadKey)
	}
	e.Updated = workflow.Now(ctx)
	old := m.find(e.ThreadKey)
	if old == nil {
		if e.Created.IsZero() {
			e.Created = workflow.Now(ctx)
		}
		m.Sessions = append(m.Sessions, e)
		slices.SortStableFunc(m.Sessions, func(a, b SessionEntry) int { return a.Created.Compare(b.Created) })
		return e, nil
	}
	if old.Status == StatusDestroyed {
		return *old, nil
	}
	if e.Status == StatusDestroyed {
		m.releaseThread(ctx, e.ThreadKey)
	}
	if e.Created.IsZero() {
		e.Created = old.Created
	}
	if e.Forks < old.Forks {
		e.Forks = old.Forks
	}
	*old = e
	return e, nil
}

func (m *manager) validateFork(ctx workflow.Context, r ForkRequest) error {
	if m.draining {
		return errors.New("the session manager is restarting; try again")
	}
	if r.RequestID == "" {
		return errors.New("fork needs a request ID")
	}
	// A source this window does not know may still exist (the registry
	// carries only recent entries): ForkSession asks the source itself.
	if src := m.find(r.SourceThread); src != nil && src.Status == StatusDestroyed {
		return errors.New("that session was destroyed; it cannot be forked")
	}
	if r.Title != "" {
		if _, err := cleanTitle(r.Title); err != nil {
			return err
		}
	}
	return nil
}

// fork runs the fork in an activity (it creates a chat thread and talks to
// two agent workflows) and records the new session. A repeated request ID
// returns the first result.
func (m *manager) fork(ctx workflow.Context, r ForkRequest) (ForkResult, error) {
	m.updates++
	for _, rec := range m.Forks {
		if rec.RequestID == r.RequestID {
			return rec.Result, nil
		}
	}
	// number is the fork's number for its title; 0 when this window does
	// not know the source (ForkSession then counts from the source).
	number := 0
	if src := m.find(r.SourceThread); src != nil {
		src.Forks++
		number = src.Forks
	}
	var a *Activities
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 45 * time.Minute,
		HeartbeatTimeout:    time.Minute,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: 2 * time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second,
			MaximumAttempts: 5, NonRetryableErrorTypes: nonRetryable,
		},
	})
	var res ForkResult
	if err := workflow.ExecuteActivity(actx, a.ForkSession, ForkSessionInput{Request: r, Number: number}).Get(ctx, &res); err != nil {
		if s := m.find(r.SourceThread); s != nil && number > 0 {
			s.Forks--
		}
		failure := fmt.Errorf("fork failed: %s", userError(err))
		if r.Notify {
			// The gateway answered on acceptance; tell the thread.
			text := capitalize(failure.Error()) + "."
			n := Outbound{Thread: r.SourceThread, Kind: OutboundNotice, Key: AgentWorkflowID(r.SourceThread) + "/fork-failed/" + r.RequestID,
				Text: Text{Inline: text, Size: len(text)}}
			if derr := workflow.ExecuteActivity(deliverCtx(ctx), a.Deliver, n).Get(ctx, nil); derr != nil {
				workflow.GetLogger(ctx).Warn("telling the thread that a fork failed", "error", derr)
			}
		}
		return res, failure
	}
	if m.find(res.ThreadKey) == nil {
		m.Sessions = append(m.Sessions, SessionEntry{
			ThreadKey: res.ThreadKey, WorkflowID: res.WorkflowID, Title: res.Title, Backend: res.Backend,
			Parent: r.SourceThread, Requester: r.Requester, Created: workflow.Now(ctx), Updated: workflow.Now(ctx), Status: StatusIdle,
		})
	}
	m.Forks = append(m.Forks, ForkRecord{RequestID: r.RequestID, Result: res})
	if len(m.Forks) > maxForkRecords {
		m.Forks = m.Forks[len(m.Forks)-maxForkRecords:]
	}
	return res, nil
}
