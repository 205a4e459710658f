package agentflow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/agentbot/agentbot/agentflow/llm"
	"github.com/agentbot/agentbot/internal/redact"
	"github.com/agentbot/agentbot/sandboxes"
	"github.com/agentbot/agentbot/store"
)

// Model is what the activities need of a model client (*llm.Client).
type Model interface {
	Complete(ctx context.Context, req llm.Request) (llm.Response, error)
}

// ChatSender posts a session's outbound messages to one chat platform. The
// worker hands the activities one per platform (bot/slack, bot/discord,
// bot/terminal implement it); agentflow never imports a chat platform.
//
// Deliver must be idempotent per Outbound.Key: a retried call edits the
// message it already posted instead of posting again where the platform
// allows. Outbound.Text is resolved (inline, whole) when Deliver is called.
// A non-retryable failure is returned as a temporal ApplicationError marked
// non-retryable.
type ChatSender interface {
	Deliver(ctx context.Context, m Outbound) error
}

// ThreadCreator is an optional interface of a ChatSender that can open a
// new thread (for forks). requestID makes the call idempotent: the same ID
// returns the same thread.
type ThreadCreator interface {
	CreateThread(ctx context.Context, sourceThread, title, requestID string) (threadKey string, err error)
}

// Activities are the activities of agentflow, as methods on the struct that
// holds their dependencies. Register it with worker.RegisterActivity.
type Activities struct {
	// Sandboxes are the backends this worker can run.
	Sandboxes *sandboxes.Registry
	// Blobs holds snapshots, transcripts and large texts.
	Blobs *store.Blobs
	// Model answers the agent; ModelName is the model to ask.
	Model     Model
	ModelName string
	// Chat maps a platform ("slack", "discord", "term") to its sender.
	// Messages for a platform with no sender are dropped with a log line.
	Chat map[string]ChatSender
	// Temporal is the client used to talk to other workflows (the session
	// manager, forks).
	Temporal client.Client
	// Policy is the tenants' policy of the configuration: a session
	// manager that this worker starts begins with it.
	Policy TenantPolicy
	// Logger receives the activities' logs; nil means slog.Default.
	Logger *slog.Logger
	// ContextChars is the model's context budget in characters of
	// transcript; older turns are left out past it (default 300,000).
	ContextChars int
	// Secrets are values (API keys, chat tokens) that must never leave the
	// worker: every activity replaces them (see internal/redact) in what
	// it returns to the workflow, errors included, so Temporal's history
	// never holds one; ModelStep in the transcript it writes; Deliver in
	// everything it hands a chat. Values shorter than redact.MinLen are
	// ignored.
	Secrets []string
	// Meter makes the activities' instruments (model calls and tokens,
	// tool calls, sandbox operations and snapshot sizes: see metrics.go);
	// nil records nothing.
	Meter metric.Meter
	// TraceContent lets message text and command output into the
	// attributes of the activities' spans (redacted, cut to 4 KiB); off,
	// spans carry IDs, names and counts only. The spans themselves come
	// from the tracing interceptor of the worker's client: without one,
	// nothing is traced.
	TraceContent bool
	// StreamAnswers shows answers while the model writes them, where the
	// Model streams (StreamingModel) and the thread's ChatSender is an
	// AnswerStreamer; otherwise, or off, an answer appears whole at the
	// end of its turn.
	StreamAnswers bool

	insOnce sync.Once
	ins     *instruments

	// rd is the Redactor of Secrets, made once: with every piece of
	// every secret it is not cheap to build (see redact.New).
	rdOnce sync.Once
	rd     *redact.Redactor

	// nsIDs caches the IDs of Temporal namespaces by name (see
	// namespaceID).
	nsMu  sync.Mutex
	nsIDs map[string]string
}

func (a *Activities) redactor() *redact.Redactor {
	a.rdOnce.Do(func() { a.rd = redact.New(a.Secrets...) })
	return a.rd
}

// redactOut replaces known secrets in an activity's result (res, a pointer;
// nil for none) and error before they are recorded in the workflow's
// history. Activities defer it on their named results, so that every
// return path passes it.
func (a *Activities) redactOut(res any, err *error) {
	rd := a.redactor()
	if rd.Empty() {
		return
	}
	if res != nil {
		rd.Walk(res)
	}
	*err = redactErr(rd, *err)
}

// redactErr returns err with known secrets replaced in its message and in
// the messages of the errors it wraps (Temporal records the whole chain as
// failures). An error that holds no secret is returned as it is, so
// cancellations, timeouts and sentinel errors keep their meaning; an
// ApplicationError keeps its type and retryability (its details, which
// agentflow never sets, are dropped).
func redactErr(rd *redact.Redactor, err error) error {
	if err == nil || !leaks(rd, err) {
		return err
	}
	cause := redactErr(rd, errors.Unwrap(err))
	if appErr, ok := err.(*temporal.ApplicationError); ok {
		return temporal.NewApplicationErrorWithOptions(rd.String(appErr.Message()), appErr.Type(),
			temporal.ApplicationErrorOptions{NonRetryable: appErr.NonRetryable(), Cause: cause,
				NextRetryDelay: appErr.NextRetryDelay(), Category: appErr.Category()})
	}
	return &redactedError{msg: rd.String(err.Error()), cause: cause}
}

// leaks reports whether err or an error it wraps mentions a known secret.
func leaks(rd *redact.Redactor, err error) bool {
	for ; err != nil; err = errors.Unwrap(err) {
		if rd.Contains(err.Error()) {
			return true
		}
	}
	return false
}

// redactedError is an error whose message had secrets replaced; its cause
// is the redacted cause of the original.
type redactedError struct {
	msg   string
	cause error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.cause }

func (a *Activities) log() *slog.Logger {
	if a.Logger != nil {
		return a.Logger
	}
	return slog.Default()
}

// permanent marks an error non-retryable, with a message fit for the user.
func permanent(msg string, err error) error {
	return temporal.NewNonRetryableApplicationError(msg, errTypePermanent, err)
}

// sandboxErr translates a sandbox error: argument and availability errors
// cannot be retried; a missing sandbox is reported as gone.
func sandboxErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sandboxes.ErrNotFound):
		return temporal.NewNonRetryableApplicationError("the sandbox no longer exists", errTypeSandboxGone, err)
	case errors.Is(err, sandboxes.ErrInvalid), errors.Is(err, sandboxes.ErrUnavailable),
		errors.Is(err, sandboxes.ErrUnsafeArchive), errors.Is(err, sandboxes.ErrUnsupported):
		return permanent(err.Error(), err)
	default:
		return err
	}
}

// heartbeat records a heartbeat every few seconds until the returned stop
// is called, so that long calls notice cancellation (a stop) and a lost
// worker is detected.
func heartbeat(ctx context.Context) (stop func()) {
	if !activity.IsActivity(ctx) {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx)
			}
		}
	}()
	return func() { close(done) }
}

// EnsureSandbox returns a running sandbox for a session: the current one,
// attached (and started if stopped), or a new one restored from the last
// snapshot when there is none or the current one is gone.
//
// A new sandbox is created under a key made of the session, backend, root
// and generation (see sandboxKey), so a retried call finds the sandbox an
// earlier attempt made instead of making another. Such a sandbox may hold
// what that attempt left half-way, so the snapshot is restored again, from
// scratch (Restore replaces the whole workspace), before it is handed out.
// Inputs without a generation (recorded before it existed) create without
// a key, as before. Every new sandbox carries LabelSession and
// LabelNamespace, which the reaper goes by.
func (a *Activities) EnsureSandbox(ctx context.Context, in EnsureSandboxInput) (res EnsureSandboxResult, err error) {
	defer a.redactOut(&res, &err)
	defer heartbeat(ctx)()
	if in.Current != nil {
		began := time.Now()
		sb, err := a.Sandboxes.Attach(ctx, *in.Current)
		a.sandboxOp(ctx, in.Current.Backend, "attach", began, err)
		if err == nil {
			res.State = sb.State()
			return res, nil
		}
		if !errors.Is(err, sandboxes.ErrNotFound) {
			return res, sandboxErr(err)
		}
		a.log().WarnContext(ctx, "sandbox lost; recreating", "sandbox_id", in.Current.ID, "workflow_id", in.SessionID)
		res.Lost = true
	}
	labels := map[string]string{LabelSession: in.SessionID}
	// Without the namespace label the reaper never touches the sandbox: a
	// leak at worst, which beats failing the session's turn.
	if ns, err := a.namespaceID(ctx); err != nil {
		a.log().WarnContext(ctx, "creating a sandbox the reaper will not know as this namespace's", "workflow_id", in.SessionID, "error", err)
	} else if ns != "" {
		labels[LabelNamespace] = ns
	}
	spec := sandboxes.Spec{Name: in.Title, Root: in.Root, Labels: labels}
	if in.Generation > 0 {
		spec.Key = sandboxKey(in)
	}
	began := time.Now()
	sb, err := a.Sandboxes.Create(ctx, in.Backend, spec)
	a.sandboxOp(ctx, in.Backend, "create", began, err)
	if err != nil {
		return res, sandboxErr(err)
	}
	res.Created = true
	if in.SnapshotKey != "" {
		info, err := a.restore(ctx, sb, in.SnapshotKey)
		if err != nil {
			// Never hand out a half-made sandbox. When this attempt
			// was abandoned (its context is done), a retry may be
			// restoring into the same keyed sandbox already: leave it
			// to that retry, or to the reaper.
			if ctx.Err() == nil {
				if derr := sb.Destroy(context.WithoutCancel(ctx)); derr != nil {
					a.log().WarnContext(ctx, "removing a sandbox after a failed restore", "sandbox_id", sb.ID(), "error", derr)
				}
			}
			if errors.Is(err, store.ErrNotFound) {
				return res, permanent("the workspace snapshot is missing from the blob store", err)
			}
			return res, sandboxErr(err)
		}
		res.Restored, res.Info = true, info
	}
	res.State = sb.State()
	return res, nil
}

func (a *Activities) restore(ctx context.Context, sb *sandboxes.Sandbox, key string) (sandboxes.SnapshotInfo, error) {
	r, err := a.Blobs.NewReader(ctx, key)
	if err != nil {
		return sandboxes.SnapshotInfo{}, err
	}
	defer r.Close()
	began := time.Now()
	info, err := sb.Restore(ctx, r)
	a.sandboxOp(ctx, sb.State().Backend, "restore", began, err)
	return info, err
}

// SnapshotSandbox streams a sandbox's workspace into the blob store. The
// blob appears only when the whole snapshot was written.
func (a *Activities) SnapshotSandbox(ctx context.Context, in SnapshotInput) (res SnapshotResult, err error) {
	defer a.redactOut(&res, &err)
	defer heartbeat(ctx)()
	sb, err := a.Sandboxes.Attach(ctx, in.State)
	if err != nil {
		return SnapshotResult{}, sandboxErr(err)
	}
	// Most turns change nothing a snapshot keeps: a walk of the tree's
	// metadata tells, for a fraction of a snapshot's cost.
	fp := ""
	if f, err := sb.Fingerprint(ctx); err == nil {
		fp = sb.ID() + ":" + f
	} else if !errors.Is(err, errors.ErrUnsupported) {
		a.log().WarnContext(ctx, "fingerprinting the workspace failed; taking the snapshot", "sandbox_id", sb.ID(), "error", err)
	}
	if fp != "" && in.Previous != "" && fp == in.Fingerprint {
		return SnapshotResult{Key: in.Previous, Unchanged: true, Fingerprint: fp}, nil
	}
	w, err := a.Blobs.NewWriter(ctx, in.Key, sandboxes.SnapshotContentType)
	if err != nil {
		return SnapshotResult{}, err
	}
	cw := &countWriter{w: w}
	began := time.Now()
	info, err := sb.Snapshot(ctx, cw)
	a.sandboxOp(ctx, in.State.Backend, "snapshot", began, err)
	if err != nil {
		w.Abort(err)
		return SnapshotResult{}, sandboxErr(err)
	}
	if err := w.Close(); err != nil {
		return SnapshotResult{}, err
	}
	a.metrics().snapshotSize.Record(ctx, cw.n, metric.WithAttributes(attribute.String("backend", in.State.Backend)))
	if in.Previous != "" && in.Previous != in.Key {
		if err := a.Blobs.Delete(ctx, in.Previous); err != nil && !errors.Is(err, store.ErrNotFound) {
			a.log().WarnContext(ctx, "deleting the previous snapshot", "key", in.Previous, "error", err)
		}
	}
	return SnapshotResult{Key: in.Key, Size: cw.n, Info: info, Fingerprint: fp}, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// StopSandbox stops a sandbox's compute. A sandbox already gone is fine.
func (a *Activities) StopSandbox(ctx context.Context, in SandboxInput) (err error) {
	defer a.redactOut(nil, &err)
	sb, err := a.Sandboxes.Attach(ctx, in.State)
	if errors.Is(err, sandboxes.ErrNotFound) {
		return nil
	}
	if err != nil {
		return sandboxErr(err)
	}
	began := time.Now()
	err = sb.Stop(ctx)
	a.sandboxOp(ctx, in.State.Backend, "stop", began, err)
	return sandboxErr(err)
}

// DestroySandbox deletes a sandbox. A sandbox already gone is fine. It
// goes through Registry.Destroy, so a stopped container or a paused cloud
// sandbox is removed without being started first.
func (a *Activities) DestroySandbox(ctx context.Context, in SandboxInput) (err error) {
	defer a.redactOut(nil, &err)
	defer heartbeat(ctx)()
	began := time.Now()
	err = a.Sandboxes.Destroy(ctx, in.State)
	a.sandboxOp(ctx, in.State.Backend, "destroy", began, err)
	if errors.Is(err, sandboxes.ErrNotFound) {
		return nil
	}
	return sandboxErr(err)
}

// CopyBlob copies a blob to a new key (a fork's own copy).
func (a *Activities) CopyBlob(ctx context.Context, in CopyInput) (err error) {
	defer a.redactOut(nil, &err)
	err = a.Blobs.Copy(ctx, in.Dst, in.Src)
	if errors.Is(err, store.ErrNotFound) {
		return permanent("the data to copy is missing from the blob store", err)
	}
	return err
}

// DeleteBlob deletes one blob; a missing one is fine.
func (a *Activities) DeleteBlob(ctx context.Context, key string) (err error) {
	defer a.redactOut(nil, &err)
	err = a.Blobs.Delete(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}

// DeleteSessionData deletes every blob of a session (snapshots,
// transcripts, large texts).
func (a *Activities) DeleteSessionData(ctx context.Context, sessionID string) (err error) {
	defer a.redactOut(nil, &err)
	return a.deleteSession(ctx, sessionID)
}

// Report tells the tenant's session manager about a session, starting the
// manager if it does not run yet.
func (a *Activities) Report(ctx context.Context, in ReportInput) (err error) {
	defer a.redactOut(nil, &err)
	if a.Temporal == nil {
		return permanent("no Temporal client for reports", nil)
	}
	platform, tenant := Tenant(in.Entry.ThreadKey)
	start := a.Temporal.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID: ManagerWorkflowID(in.Entry.ThreadKey), TaskQueue: TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, SessionManagerWorkflowName, ManagerInput{Platform: platform, Tenant: tenant, Configured: a.Policy})
	h, err := a.Temporal.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateName: in.Update, Args: []any{in.Entry}, WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	if err != nil {
		return err
	}
	return h.Get(ctx, nil)
}

// Deliver posts or edits one outbound chat message through the platform's
// sender. Known secrets are redacted from every field of the message (the
// text, resolved from its claim check first, which is also what a sender
// uploads as a file; progress tool lines; the title), so neither a chat nor
// a platform's thread name ever shows one, whatever the workflow queued.
func (a *Activities) Deliver(ctx context.Context, m Outbound) (err error) {
	defer a.redactOut(nil, &err)
	sender := a.Chat[Platform(m.Thread)]
	if sender == nil {
		a.log().DebugContext(ctx, "no chat sender for platform; message dropped", "thread", m.Thread, "key", m.Key)
		return nil
	}
	if m.Text.Ref != "" {
		r, err := a.Blobs.NewReader(ctx, m.Text.Ref)
		if err != nil {
			return err
		}
		var b bytes.Buffer
		_, err = b.ReadFrom(r)
		r.Close()
		if err != nil {
			return err
		}
		m.Text = Text{Inline: b.String(), Size: b.Len()}
	}
	a.redactor().Walk(&m)
	return sender.Deliver(ctx, m)
}

// putText returns t inline when small, else stores it under key and returns
// a claim check with a preview.
func (a *Activities) putText(ctx context.Context, key, t string) (Text, error) {
	if len(t) <= MaxInlineText {
		return Text{Inline: t, Size: len(t)}, nil
	}
	if err := a.putBlob(ctx, key, "text/plain; charset=utf-8", []byte(t)); err != nil {
		return Text{}, err
	}
	return Text{Inline: cut(t, MaxResultAnswer), Ref: key, Size: len(t)}, nil
}

func (a *Activities) putBlob(ctx context.Context, key, contentType string, data []byte) error {
	w, err := a.Blobs.NewWriter(ctx, key, contentType)
	if err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		w.Abort(err)
		return err
	}
	return w.Close()
}

func (a *Activities) getBlob(ctx context.Context, key string) ([]byte, error) {
	r, err := a.Blobs.NewReader(ctx, key)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

func (a *Activities) getJSON(ctx context.Context, key string, v any) error {
	data, err := a.getBlob(ctx, key)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return permanent(fmt.Sprintf("blob %s is corrupt", key), err)
	}
	return nil
}
