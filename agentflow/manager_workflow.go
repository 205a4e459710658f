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
	next := m.ManagerInput
	next.Sessions = pruneDestroyed(next.Sessions, maxDestroyedKept)
	return workflow.NewContinueAsNewError(ctx, SessionManagerWorkflowName, next)
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
	return workflow.SetUpdateHandlerWithOptions(ctx, ManagerUpdateFork, m.fork,
		workflow.UpdateHandlerOptions{Validator: m.validateFork})
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
	src := m.find(r.SourceThread)
	if src == nil {
		return fmt.Errorf("no session in thread %s", r.SourceThread)
	}
	if src.Status == StatusDestroyed {
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
	src := m.find(r.SourceThread)
	src.Forks++
	number := src.Forks
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
		if s := m.find(r.SourceThread); s != nil {
			s.Forks--
		}
		return res, fmt.Errorf("fork failed: %s", userError(err))
	}
	if m.find(res.ThreadKey) == nil {
		m.Sessions = append(m.Sessions, SessionEntry{
			ThreadKey: res.ThreadKey, WorkflowID: res.WorkflowID, Title: res.Title, Backend: res.Backend,
			Parent: r.SourceThread, Requester: r.Requester, Created: workflow.Now(ctx), Status: StatusIdle,
		})
	}
	m.Forks = append(m.Forks, ForkRecord{RequestID: r.RequestID, Result: res})
	if len(m.Forks) > maxForkRecords {
		m.Forks = m.Forks[len(m.Forks)-maxForkRecords:]
	}
	return res, nil
}
