package agentflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/agentbot/agentbot/sandboxes"
	"github.com/agentbot/agentbot/store"
)

// The reaper removes what sessions leave behind: sandboxes no session
// points to any more (a switch whose destroy of the old sandbox failed, a
// destroy that never finished, a create whose session moved on), and blobs
// of sessions that ended longer than the retention ago. ReaperWorkflow does
// one sweep; a Temporal Schedule (EnsureReaper) runs it every interval, one
// per namespace.

// Labels of every sandbox a session creates (EnsureSandbox).
const (
	// LabelSession holds the session's workflow ID.
	LabelSession = "agentbot.session"
	// LabelNamespace holds the ID (not the name) of the Temporal namespace
	// the session runs in. IDs are unique per namespace and cluster, so
	// the reaper of one deployment never judges the sandboxes of another
	// that shares the Docker engine or the cloud account (whose sessions
	// it cannot see), nor those made before the label existed.
	LabelNamespace = "agentbot.namespace"
)

// Names and defaults of the reaper.
const (
	// ReaperWorkflowName is the registered name of ReaperWorkflow.
	ReaperWorkflowName = "ReaperWorkflow"
	// ReaperScheduleID is the ID of the schedule that runs it, one per
	// namespace.
	ReaperScheduleID = "agentbot-reaper"
	// DefaultReapInterval is how often the schedule sweeps.
	DefaultReapInterval = 10 * time.Minute
	// DefaultReapGrace is how old a sandbox must be before it may be
	// reaped: a sandbox an EnsureSandbox has just made is in no session's
	// state until the activity has returned.
	DefaultReapGrace = 10 * time.Minute
	// DefaultRetention is how long the blobs of a session that ended stay.
	DefaultRetention = 7 * 24 * time.Hour
)

// ensureActivity is the activity type whose pending run keeps the reaper
// off a session's sandboxes.
const ensureActivity = "EnsureSandbox"

// ReaperInput configures one sweep. Zero values mean the defaults.
type ReaperInput struct {
	// Grace: sandboxes created less than Grace ago are never reaped.
	Grace time.Duration `json:"grace"`
	// Retention: the blobs of a session are deleted once it ended (its
	// workflow closed) longer than Retention ago, or, for a session
	// Temporal does not know (never started, or deleted after the
	// namespace's own retention), once its newest blob is older than
	// Retention.
	Retention time.Duration `json:"retention"`
}

func (in ReaperInput) withDefaults() ReaperInput {
	if in.Grace <= 0 {
		in.Grace = DefaultReapGrace
	}
	if in.Retention <= 0 {
		in.Retention = DefaultRetention
	}
	return in
}

// ReaperResult says what one sweep did.
type ReaperResult struct {
	// SandboxesListed counts the sandboxes of this namespace's sessions
	// the backends listed; SandboxesDestroyed those the sweep destroyed.
	SandboxesListed    int `json:"sandboxes_listed"`
	SandboxesDestroyed int `json:"sandboxes_destroyed"`
	// SessionsDeleted counts the sessions whose blobs were deleted.
	SessionsDeleted int `json:"sessions_deleted"`
	// Errors counts what could not be judged or removed (a backend that
	// could not list, a session Temporal could not describe, a failed
	// destroy); each is logged, and the next sweep tries again.
	Errors int `json:"errors"`
}

// ReaperWorkflow is one sweep: the sandboxes, then the blob store.
func ReaperWorkflow(ctx workflow.Context, in ReaperInput) (ReaperResult, error) {
	in = in.withDefaults()
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Minute,
		HeartbeatTimeout:    time.Minute,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: 10 * time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute,
			MaximumAttempts: 3, NonRetryableErrorTypes: nonRetryable,
		},
	})
	var a *Activities
	var res, data ReaperResult
	if err := workflow.ExecuteActivity(ctx, a.ReapSandboxes, in).Get(ctx, &res); err != nil {
		return res, err
	}
	if err := workflow.ExecuteActivity(ctx, a.ReapSessionData, in).Get(ctx, &data); err != nil {
		return res, err
	}
	res.SessionsDeleted = data.SessionsDeleted
	res.Errors += data.Errors
	return res, nil
}

// ReaperOptions configure the schedule EnsureReaper makes. Zero values mean
// the defaults.
type ReaperOptions struct {
	Interval  time.Duration
	Grace     time.Duration
	Retention time.Duration
}

// EnsureReaper creates the schedule ReaperScheduleID that runs
// ReaperWorkflow every opts.Interval in tc's namespace, or updates it to
// opts when it exists: every worker calls it at start, and the last one to
// start sets the interval, grace and retention. Sweeps never overlap (a
// sweep still running when the next is due makes the schedule skip it).
func EnsureReaper(ctx context.Context, tc client.Client, opts ReaperOptions) error {
	if opts.Interval <= 0 {
		opts.Interval = DefaultReapInterval
	}
	in := ReaperInput{Grace: opts.Grace, Retention: opts.Retention}.withDefaults()
	spec := client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: opts.Interval}}}
	action := &client.ScheduleWorkflowAction{
		ID: ReaperScheduleID, Workflow: ReaperWorkflowName, Args: []any{in}, TaskQueue: TaskQueue,
		// A sweep that takes longer than the interval is cut off; the
		// next one starts over.
		WorkflowRunTimeout: max(opts.Interval, time.Hour),
	}
	sc := tc.ScheduleClient()
	_, err := sc.Create(ctx, client.ScheduleOptions{
		ID: ReaperScheduleID, Spec: spec, Action: action,
		Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_SKIP, CatchupWindow: opts.Interval,
		Note: "agentbot: destroys orphaned sandboxes and deletes ended sessions' data past the retention",
	})
	if !errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
		if err != nil {
			return fmt.Errorf("creating the reaper schedule: %w", err)
		}
		return nil
	}
	err = sc.GetHandle(ctx, ReaperScheduleID).Update(ctx, client.ScheduleUpdateOptions{
		DoUpdate: func(cur client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
			s := cur.Description.Schedule
			s.Spec, s.Action = &spec, action
			if s.Policy == nil {
				s.Policy = &client.SchedulePolicies{}
			}
			s.Policy.Overlap, s.Policy.CatchupWindow = enumspb.SCHEDULE_OVERLAP_POLICY_SKIP, opts.Interval
			return &client.ScheduleUpdate{Schedule: &s}, nil
		},
	})
	if err != nil {
		return fmt.Errorf("updating the reaper schedule: %w", err)
	}
	return nil
}

// sandboxKey is the Spec.Key of the sandbox EnsureSandbox creates: the same
// for a retry of the same input, different for another session, backend,
// root or generation.
func sandboxKey(in EnsureSandboxInput) string {
	data, _ := json.Marshal([]any{in.SessionID, in.Backend, in.Root, in.Generation}) // cannot fail
	key := string(data)
	if len(key) > sandboxes.MaxKeyLen {
		// A very long root: backends hash the key anyway.
		key = "sha256:" + sandboxes.KeyHash(key)
	}
	return key
}

// namespaceID returns the ID of the namespace the calling activity runs
// in, or "" outside an activity or without a Temporal client (tests that
// call activities directly). IDs are cached per namespace name.
func (a *Activities) namespaceID(ctx context.Context) (string, error) {
	if a.Temporal == nil || !activity.IsActivity(ctx) {
		return "", nil
	}
	name := activity.GetInfo(ctx).Namespace
	a.nsMu.Lock()
	id, ok := a.nsIDs[name]
	a.nsMu.Unlock()
	if ok {
		return id, nil
	}
	resp, err := a.Temporal.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: name})
	if err != nil {
		return "", fmt.Errorf("describing namespace %s: %w", name, err)
	}
	id = resp.GetNamespaceInfo().GetId()
	if id == "" {
		return "", fmt.Errorf("namespace %s has no ID", name)
	}
	a.nsMu.Lock()
	if a.nsIDs == nil {
		a.nsIDs = map[string]string{}
	}
	a.nsIDs[name] = id
	a.nsMu.Unlock()
	return id, nil
}

// session is what Temporal says of a session's workflow.
type session struct {
	// known: the workflow exists (running or closed). A workflow
	// Temporal does not know was never started, or was closed and then
	// deleted after the namespace's retention.
	known, running bool
	closed         time.Time
	// ensuring: an EnsureSandbox is pending, so a sandbox it made may be
	// in no state yet.
	ensuring bool
}

func (a *Activities) describeSession(ctx context.Context, id string) (session, error) {
	desc, err := a.Temporal.DescribeWorkflow(ctx, id, "")
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return session{}, nil
	}
	if err != nil {
		return session{}, fmt.Errorf("describing session %s: %w", id, err)
	}
	d := desc.RawResponse
	// Without a run ID the server describes the latest run: a session
	// that continued as new shows its running successor.
	info := d.GetWorkflowExecutionInfo()
	s := session{known: true, running: info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING}
	if !s.running {
		s.closed = info.GetCloseTime().AsTime()
	}
	for _, p := range d.GetPendingActivities() {
		if p.GetActivityType().GetName() == ensureActivity {
			s.ensuring = true
		}
	}
	return s, nil
}

// currentSandbox asks a running session which sandbox it points to ("" for
// none) and whether it is destroyed.
func (a *Activities) currentSandbox(ctx context.Context, id string) (sandboxID string, destroyed bool, err error) {
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := a.Temporal.QueryWorkflow(qctx, id, "", QueryState)
	if err != nil {
		return "", false, fmt.Errorf("asking session %s for its sandbox: %w", id, err)
	}
	var v SessionView
	if err := resp.Get(&v); err != nil {
		return "", false, fmt.Errorf("reading the state of session %s: %w", id, err)
	}
	return v.SandboxID, v.Status == StatusDestroyed, nil
}

// ReapSandboxes destroys the sandboxes of this namespace's sessions that
// no session needs: those of a session that ended (its workflow is closed,
// or unknown to Temporal), or of a running session that points to another
// sandbox. It never touches a sandbox created less than in.Grace ago, one
// of a session with an EnsureSandbox pending, one whose session it cannot
// ask, or one without this namespace's LabelNamespace (another
// deployment's, or made before the label existed). Backends that cannot
// list are skipped.
func (a *Activities) ReapSandboxes(ctx context.Context, in ReaperInput) (res ReaperResult, err error) {
	defer a.redactOut(&res, &err)
	defer heartbeat(ctx)()
	in = in.withDefaults()
	ns, err := a.namespaceID(ctx)
	if err != nil {
		return res, err
	}
	if ns == "" || a.Temporal == nil {
		return res, permanent("the reaper runs only as an activity with a Temporal client", nil)
	}
	type verdict struct {
		s         session
		current   string
		destroyed bool
		err       error
	}
	verdicts := map[string]*verdict{}
	judge := func(id string) *verdict {
		if v, ok := verdicts[id]; ok {
			return v
		}
		v := &verdict{}
		v.s, v.err = a.describeSession(ctx, id)
		if v.err == nil && v.s.running && !v.s.ensuring {
			v.current, v.destroyed, v.err = a.currentSandbox(ctx, id)
		}
		verdicts[id] = v
		return v
	}
	now := time.Now()
	for _, backend := range a.Sandboxes.Names() {
		list, err := a.Sandboxes.List(ctx, backend)
		if errors.Is(err, sandboxes.ErrUnsupported) {
			continue
		}
		if err != nil {
			res.Errors++
			a.log().WarnContext(ctx, "reaper: listing sandboxes failed", "backend", backend, "error", err)
			continue
		}
		for _, l := range list {
			if err := ctx.Err(); err != nil {
				return res, err
			}
			id := l.Labels[LabelSession]
			if id == "" || l.Labels[LabelNamespace] != ns {
				continue
			}
			res.SandboxesListed++
			if l.Created.IsZero() || now.Sub(l.Created) < in.Grace {
				continue
			}
			v := judge(id)
			var why string
			switch {
			case v.err != nil:
				res.Errors++
				a.log().WarnContext(ctx, "reaper: cannot tell whether a sandbox is in use", "workflow_id", id, "sandbox_id", l.ID, "error", v.err)
				continue
			case !v.s.known:
				why = "its session is unknown to Temporal"
			case !v.s.running:
				why = "its session ended"
			case v.s.ensuring:
				continue
			case v.destroyed:
				why = "its session is destroyed"
			case v.current == l.ID:
				continue
			default:
				why = "its session points to another sandbox"
			}
			err := a.Sandboxes.Destroy(ctx, l.State)
			if err != nil && !errors.Is(err, sandboxes.ErrNotFound) {
				res.Errors++
				a.log().WarnContext(ctx, "reaper: destroying an orphaned sandbox failed", "workflow_id", id, "sandbox_id", l.ID, "backend", backend, "error", err)
				continue
			}
			res.SandboxesDestroyed++
			a.log().InfoContext(ctx, "reaper: destroyed a sandbox", "workflow_id", id, "sandbox_id", l.ID, "backend", backend,
				"reason", why, "created", l.Created)
		}
	}
	return res, nil
}

// ReapSessionData deletes the blobs (snapshots, transcripts, large texts)
// of sessions that ended longer than in.Retention ago, and of sessions
// Temporal does not know whose newest blob is older than in.Retention. A
// running session's blobs are never deleted, however old. Destroy deletes
// a session's blobs at once; this catches what survives it (a failed
// delete, a write that raced the destroy, a fork that never started, a
// session terminated from outside, kept for the retention so that an
// operator can still reset it).
//
// The blob store must belong to one namespace: a session of another
// namespace is unknown here, and its data would be deleted once idle for
// the retention.
func (a *Activities) ReapSessionData(ctx context.Context, in ReaperInput) (res ReaperResult, err error) {
	defer a.redactOut(&res, &err)
	defer heartbeat(ctx)()
	in = in.withDefaults()
	if a.Temporal == nil {
		return res, permanent("the reaper needs a Temporal client", nil)
	}
	ids, err := a.Blobs.Sessions(ctx)
	if err != nil {
		return res, err
	}
	now := time.Now()
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		s, err := a.describeSession(ctx, id)
		if err != nil {
			res.Errors++
			a.log().WarnContext(ctx, "reaper: cannot tell whether a session ended", "workflow_id", id, "error", err)
			continue
		}
		if s.running || (s.known && now.Sub(s.closed) < in.Retention) {
			continue
		}
		newest, has, err := a.newestBlob(ctx, id)
		if err != nil {
			res.Errors++
			a.log().WarnContext(ctx, "reaper: listing a session's data failed", "workflow_id", id, "error", err)
			continue
		}
		if !has || (!s.known && now.Sub(newest) < in.Retention) {
			continue
		}
		if err := a.deleteSession(ctx, id); err != nil {
			res.Errors++
			a.log().WarnContext(ctx, "reaper: deleting a session's data failed", "workflow_id", id, "error", err)
			continue
		}
		res.SessionsDeleted++
		a.log().InfoContext(ctx, "reaper: deleted the data of a session past the retention", "workflow_id", id,
			"known", s.known, "closed", s.closed, "newest", newest)
	}
	return res, nil
}

// newestBlob returns the time of a session's newest blob, and false when it
// has none.
func (a *Activities) newestBlob(ctx context.Context, id string) (time.Time, bool, error) {
	var newest time.Time
	found := false
	for _, p := range []string{store.SessionPrefix(id), store.SnapshotPrefix(id)} {
		t, ok, err := a.Blobs.Newest(ctx, p)
		if err != nil {
			return time.Time{}, false, err
		}
		if ok && (!found || t.After(newest)) {
			newest, found = t, true
		}
	}
	return newest, found, nil
}

// deleteSession deletes both prefixes of a session.
func (a *Activities) deleteSession(ctx context.Context, id string) error {
	if err := a.Blobs.DeletePrefix(ctx, store.SnapshotPrefix(id)); err != nil {
		return err
	}
	return a.Blobs.DeletePrefix(ctx, store.SessionPrefix(id))
}
