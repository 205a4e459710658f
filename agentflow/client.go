package agentflow

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/agentbot/agentbot/agentflow/llm"
	"github.com/agentbot/agentbot/store"
)

// Errors of Client.
var (
	// ErrNoSession means the thread has no session (yet).
	ErrNoSession = errors.New("no session in this thread")
	// ErrDestroyed means the thread's session was destroyed.
	ErrDestroyed = errors.New(ErrDestroyedText)
	// ErrUnavailable means Temporal did not answer: it is down, restarting
	// or unreachable, or did not answer in time. Nothing was refused: the
	// same request may succeed later. It wraps Temporal's own error.
	ErrUnavailable = errors.New("temporal is not answering")
)

// Client is the chat side's handle on sessions: every call is one Temporal
// request (an update, an update-with-start or a query). It holds no state of
// its own, so any bot replica can serve any thread. Safe for concurrent use.
type Client struct {
	tc client.Client
	// Policy is the configured tenant policy: Control hands it to the
	// manager (the base that admins' changes apply to).
	Policy *TenantPolicy
	// DataConverter decodes what the client reads outside the SDK's own
	// calls (the sessions' memos, in List): the one tc was made with
	// (nil: Temporal's default).
	DataConverter converter.DataConverter
}

// NewClient wraps a Temporal client.
func NewClient(tc client.Client) *Client { return &Client{tc: tc} }

// Temporal returns the underlying Temporal client.
func (c *Client) Temporal() client.Client { return c.tc }

func agentStart(c client.Client, in AgentInput) client.WithStartWorkflowOperation {
	return c.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID: AgentWorkflowID(in.ThreadKey), TaskQueue: TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		// A destroyed session's ID is never reused: its thread answers
		// that it was destroyed.
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
	}, AgentWorkflowName, in)
}

// Send gives a user message to the session of start.ThreadKey, starting the
// session (with start's settings) if the thread has none. The message's ID
// makes it idempotent: a platform retry starts no second turn.
//
// A message with an ID is sent as a signal with start: once Send returns,
// the message is in the session's history — durable, whether or not a
// worker runs (the turn runs when one does). Its result then says nothing
// more (Wait tells what became of it); a message the session cannot take
// (too many waiting) is told to the thread. A message without an ID goes
// as an update, answered by the session's validator.
func (c *Client) Send(ctx context.Context, start AgentInput, m MessageRequest) (MessageResult, error) {
	if m.Trace == "" {
		m.Trace = traceParentOf(ctx)
	}
	if m.ID != "" {
		_, err := c.tc.SignalWithStartWorkflow(ctx, AgentWorkflowID(start.ThreadKey), SignalMessage, m, client.StartWorkflowOptions{
			ID: AgentWorkflowID(start.ThreadKey), TaskQueue: TaskQueue,
			// A destroyed session's ID is never reused.
			WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		}, AgentWorkflowName, start)
		if err != nil {
			return MessageResult{}, c.translate(err)
		}
		return MessageResult{}, nil
	}
	opts := client.UpdateWorkflowOptions{
		UpdateName: UpdateMessage, Args: []any{m}, WaitForStage: client.WorkflowUpdateStageCompleted,
	}
	h, err := c.tc.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: agentStart(c.tc, start),
		UpdateOptions:          opts,
	})
	if err != nil {
		return MessageResult{}, c.translate(err)
	}
	var res MessageResult
	if err := h.Get(ctx, &res); err != nil {
		return res, c.translate(err)
	}
	return res, nil
}

// Wait waits until the turn that handles message id of the thread's session
// has finished and its answer was delivered to the chat, and returns what
// it gave. It asks the session (QueryMessage: update handlers never block
// on turns) after 20 ms, then twice as long each time up to every 500 ms;
// ctx bounds the wait.
func (c *Client) Wait(ctx context.Context, threadKey, id string) (MessageResult, error) {
	return c.wait(ctx, threadKey, id, 20*time.Millisecond, true)
}

// WaitEvery is Wait asking every interval (the first time after half of
// it): a turn of T seconds costs about T/interval + 1 queries.
func (c *Client) WaitEvery(ctx context.Context, threadKey, id string, interval time.Duration) (MessageResult, error) {
	return c.wait(ctx, threadKey, id, interval, false)
}

func (c *Client) wait(ctx context.Context, threadKey, id string, delay time.Duration, doubling bool) (MessageResult, error) {
	if !doubling {
		if err := sleepCtx(ctx, delay/2); err != nil {
			return MessageResult{}, fmt.Errorf("waiting for message %s: %w", id, err)
		}
	}
	for {
		res, done, err := c.Answered(ctx, threadKey, id)
		if done || err != nil {
			return res, err
		}
		if doubling {
			if err := sleepCtx(ctx, delay); err != nil {
				return res, err
			}
			delay = min(delay*2, 500*time.Millisecond)
		} else if err := sleepCtx(ctx, delay); err != nil {
			return res, err
		}
	}
}

// Answered asks the session of threadKey once whether message id was
// answered: done when its turn finished and the answer was delivered, or
// the session forgot the message. A query that fails while the session is
// still there (a busy worker, a retried workflow task) is not an error:
// done is false, ask again. A destroyed or missing session, a refusal and
// ctx ending are errors.
func (c *Client) Answered(ctx context.Context, threadKey, id string) (res MessageResult, done bool, err error) {
	resp, err := c.tc.QueryWorkflow(ctx, AgentWorkflowID(threadKey), "", QueryMessage, id)
	switch {
	case err == nil:
		if err := resp.Get(&res); err != nil {
			return res, false, err
		}
		return res, (res.Result != nil && res.Result.Delivered) || res.Forgotten, nil
	case ctx.Err() != nil:
		return res, false, fmt.Errorf("waiting for message %s: %w", id, ctx.Err())
	}
	err = c.translate(err)
	var refused *RefusedError
	if errors.Is(err, ErrDestroyed) || errors.Is(err, ErrNoSession) || errors.As(err, &refused) {
		return res, false, err
	}
	return res, false, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// SendAndWait is Send followed by Wait for the same message: for the
// terminal and tests (chat platforms get answers through their ChatSender).
func (c *Client) SendAndWait(ctx context.Context, start AgentInput, m MessageRequest) (MessageResult, error) {
	if m.ID == "" {
		return MessageResult{}, errors.New("SendAndWait needs a message ID")
	}
	first, err := c.Send(ctx, start, m)
	if err != nil {
		return first, err
	}
	res, err := c.Wait(ctx, start.ThreadKey, m.ID)
	res.Duplicate = first.Duplicate
	return res, err
}

// Start starts the session of in.ThreadKey without a message (the "new"
// command). Starting a session that exists changes nothing and is not an
// error; it returns the session's state.
//
// Starting needs no worker: the workflow exists, durably, once the call
// returns. The state is then asked for a moment (a query needs a worker);
// if no worker answers, the view is made from in and Waiting is set.
func (c *Client) Start(ctx context.Context, in AgentInput) (SessionView, error) {
	if err := c.start(ctx, in); err != nil {
		return SessionView{}, err
	}
	qctx, cancel := context.WithTimeout(ctx, startQueryWait)
	defer cancel()
	v, err := c.State(qctx, in.ThreadKey)
	if err == nil {
		return v, nil
	}
	if ctx.Err() != nil {
		return SessionView{}, ctx.Err()
	}
	return waitingView(in), nil
}

// StartWaiting is Start for when no worker answers (the caller knows): it
// starts the session and returns its view from in, Waiting set, without
// asking the session.
func (c *Client) StartWaiting(ctx context.Context, in AgentInput) (SessionView, error) {
	if err := c.start(ctx, in); err != nil {
		return SessionView{}, err
	}
	return waitingView(in), nil
}

// start starts the session's workflow; one that runs is kept as it is, a
// destroyed one is never started again.
func (c *Client) start(ctx context.Context, in AgentInput) error {
	_, err := c.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: AgentWorkflowID(in.ThreadKey), TaskQueue: TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
	}, AgentWorkflowName, in)
	return c.translate(err)
}

func waitingView(in AgentInput) SessionView {
	backend := in.Backend
	if backend == "" {
		backend = "local"
	}
	return SessionView{ThreadKey: in.ThreadKey, WorkflowID: AgentWorkflowID(in.ThreadKey), Title: in.Title,
		Backend: backend, Status: StatusIdle, Requester: in.Requester, Waiting: true}
}

// startQueryWait is how long Start waits for a worker to answer for a
// session it started.
const startQueryWait = 3 * time.Second

func (c *Client) update(ctx context.Context, threadKey, name string, arg, out any) error {
	h, err := c.tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: AgentWorkflowID(threadKey), UpdateName: name, Args: []any{arg},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return c.translate(err)
	}
	return c.translate(h.Get(ctx, out))
}

// Submission says what became of a request handed over with Submit.
type Submission int

// Submissions.
const (
	// Accepted: the session took the request and works on it (it may wait
	// for the running turn); it posts the outcome to the thread.
	Accepted Submission = iota + 1
	// Done: the request was carried out at once; its outcome is posted
	// all the same.
	Done
)

// Submit hands a control request to the session of threadKey (update name
// with arg, whose Notify the caller sets) and returns as soon as the
// session has accepted it — never waiting for a turn, so that a chat
// handler answers within the platform's time. A refusal (a validator's, or
// a destroyed session) is an error as with the blocking calls. id makes the
// request idempotent: a platform retry of the same event is the same
// update.
func (c *Client) Submit(ctx context.Context, threadKey, name, id string, arg any) (Submission, error) {
	return c.submit(ctx, AgentWorkflowID(threadKey), name, id, arg)
}

// SubmitFork is Submit for a fork, handed to the tenant's session manager.
func (c *Client) SubmitFork(ctx context.Context, r ForkRequest) (Submission, error) {
	return c.submit(ctx, ManagerWorkflowID(r.SourceThread), ManagerUpdateFork, "fork/"+r.RequestID, r)
}

func (c *Client) submit(ctx context.Context, workflowID, name, id string, arg any) (Submission, error) {
	h, err := c.tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: workflowID, UpdateName: name, UpdateID: id, Args: []any{arg},
		WaitForStage: client.WorkflowUpdateStageAccepted,
	})
	if err != nil {
		return 0, c.translate(err)
	}
	// A rejected update, or one that finished within the same workflow
	// task, comes back already decided: its Get answers without asking
	// the server, so a cancelled context tells the two cases apart.
	done, cancel := context.WithCancel(ctx)
	cancel()
	err = h.Get(done, nil)
	var waiting *client.WorkflowUpdateServiceTimeoutOrCanceledError
	switch {
	case err == nil:
		return Done, nil
	case (errors.Is(err, context.Canceled) || errors.As(err, &waiting)) && ctx.Err() == nil:
		return Accepted, nil
	}
	return 0, c.translate(err)
}

// Switch moves the session to another backend; the workspace comes along.
// A switch during a turn waits for the turn to end.
func (c *Client) Switch(ctx context.Context, threadKey string, r SwitchRequest) (SwitchResult, error) {
	var res SwitchResult
	err := c.update(ctx, threadKey, UpdateSwitch, r, &res)
	return res, err
}

// Title renames the session.
func (c *Client) Title(ctx context.Context, threadKey string, r TitleRequest) (SessionView, error) {
	var v SessionView
	err := c.update(ctx, threadKey, UpdateTitle, r, &v)
	return v, err
}

// Stop cancels the running turn, if any, and returns once it has ended.
func (c *Client) Stop(ctx context.Context, threadKey string, r StopRequest) (StopResult, error) {
	var res StopResult
	err := c.update(ctx, threadKey, UpdateStop, r, &res)
	return res, err
}

// Pause snapshots the workspace and stops the sandbox; the next message
// resumes it.
func (c *Client) Pause(ctx context.Context, threadKey string, r PauseRequest) (SessionView, error) {
	var v SessionView
	err := c.update(ctx, threadKey, UpdatePause, r, &v)
	return v, err
}

// Destroy deletes the session's sandbox and data and ends the session.
func (c *Client) Destroy(ctx context.Context, threadKey string, r DestroyRequest) (SessionView, error) {
	var v SessionView
	err := c.update(ctx, threadKey, UpdateDestroy, r, &v)
	return v, err
}

// Fork forks a session into a new thread through the tenant's session
// manager and returns the new session.
func (c *Client) Fork(ctx context.Context, r ForkRequest) (ForkResult, error) {
	h, err := c.tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: ManagerWorkflowID(r.SourceThread), UpdateName: ManagerUpdateFork,
		UpdateID: "fork/" + r.RequestID, Args: []any{r}, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return ForkResult{}, c.translate(err)
	}
	var res ForkResult
	return res, c.translate(h.Get(ctx, &res))
}

// State returns the session's state.
func (c *Client) State(ctx context.Context, threadKey string) (SessionView, error) {
	var v SessionView
	err := c.query(ctx, AgentWorkflowID(threadKey), QueryState, &v)
	return v, err
}

// Transcript returns the session's recent turns. by is who asks (a user
// ID): the session answers only its requester and its admins, and refuses
// others with a RefusedError.
func (c *Client) Transcript(ctx context.Context, threadKey, by string) ([]TurnSummary, error) {
	var t []TurnSummary
	err := c.query(ctx, AgentWorkflowID(threadKey), QueryTranscript, &t, by)
	// A query handler's error reaches the client as QueryFailed, not as
	// an application error: here it is the session's refusal.
	var failed *serviceerror.QueryFailed
	if errors.As(err, &failed) {
		if failed.Message == ErrDestroyedText {
			return nil, ErrDestroyed
		}
		return nil, &RefusedError{Msg: failed.Message, err: err}
	}
	return t, err
}

// MaxList bounds what List returns.
const MaxList = 1000

// List returns the sessions of the tenant that threadKey belongs to, oldest
// first, at most MaxList of them (the newest). It reads Temporal's
// visibility: each session keeps its registry entry in its memo
// (MemoSession), so the list depends neither on the session manager's state
// (a bounded window) nor on its reports. A session that ended is listed as
// destroyed. Visibility lags the sessions by a moment.
func (c *Client) List(ctx context.Context, threadKey string) ([]SessionEntry, error) {
	platform, tenant := Tenant(threadKey)
	prefix := AgentWorkflowID(platform + ":" + tenant + ":")
	if platform == "term" {
		prefix = AgentWorkflowID("term:")
	}
	query := fmt.Sprintf("WorkflowType = '%s' AND WorkflowId STARTS_WITH '%s'", AgentWorkflowName, strings.ReplaceAll(prefix, "'", "''"))
	var out []SessionEntry
	seen := map[string]bool{}
	var token []byte
	for {
		resp, err := c.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token, PageSize: 200})
		if err != nil {
			return nil, fmt.Errorf("listing the sessions: %w", err)
		}
		for _, ex := range resp.Executions {
			id := ex.GetExecution().GetWorkflowId()
			if seen[id] { // one entry per session: its newest run comes first
				continue
			}
			seen[id] = true
			e := SessionEntry{ThreadKey: strings.TrimPrefix(id, "agent/"), WorkflowID: id, Status: StatusIdle}
			if f := ex.GetMemo().GetFields()[MemoSession]; f != nil {
				if err := cmp.Or(c.DataConverter, converter.GetDefaultDataConverter()).FromPayload(f, &e); err != nil {
					return nil, fmt.Errorf("reading the memo of %s: %w", id, err)
				}
			}
			if e.Created.IsZero() {
				e.Created = ex.GetStartTime().AsTime()
			}
			if st := ex.GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING && st != enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
				e.Status = StatusDestroyed
			}
			out = append(out, e)
		}
		token = resp.NextPageToken
		if len(token) == 0 || len(out) >= 2*MaxList {
			break
		}
	}
	slices.SortStableFunc(out, func(a, b SessionEntry) int { return a.Created.Compare(b.Created) })
	if len(out) > MaxList {
		out = out[len(out)-MaxList:]
	}
	return out, nil
}

// Presence is whether a thread has a session, as Temporal knows it.
type Presence int

// Presences of Describe.
const (
	// PresenceNone: no session was ever started in the thread.
	PresenceNone Presence = iota
	// PresenceRunning: the thread's session is running (idle, busy or
	// paused: it takes messages).
	PresenceRunning
	// PresenceEnded: the thread's session was destroyed (its workflow
	// closed); the thread never gets another one.
	PresenceEnded
)

// String names p for logs.
func (p Presence) String() string {
	switch p {
	case PresenceNone:
		return "none"
	case PresenceRunning:
		return "running"
	case PresenceEnded:
		return "ended"
	}
	return fmt.Sprintf("Presence(%d)", int(p))
}

// Describe says whether the thread has a session by describing its
// workflow, AgentWorkflowID(threadKey): the workflow is the session, so
// this is the source of truth. The session manager's registry is not: it
// is a view that agents update by reports, and a report can fail. Describe
// needs no worker. Errors are Temporal's (the server unreachable, ctx
// done).
func (c *Client) Describe(ctx context.Context, threadKey string) (Presence, error) {
	d, err := c.tc.DescribeWorkflow(ctx, AgentWorkflowID(threadKey), "")
	var notFound *serviceerror.NotFound
	switch {
	case errors.As(err, &notFound):
		return PresenceNone, nil
	case err != nil:
		return PresenceNone, fmt.Errorf("describing the session of %s: %w", threadKey, c.translate(err))
	}
	// Without a run ID the server describes the latest run, so a session
	// that continued as new shows its running successor. Only destroy ends
	// a session; a workflow that failed or was terminated from outside
	// cannot be started again (REJECT_DUPLICATE) and is as good as
	// destroyed.
	if d.Status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return PresenceRunning, nil
	}
	return PresenceEnded, nil
}

// Lookup returns the registry entry of a thread, or ErrNoSession. The
// registry serves list and fork; whether a thread has a session is
// Describe's to say.
func (c *Client) Lookup(ctx context.Context, threadKey string) (SessionEntry, error) {
	var e *SessionEntry
	resp, err := c.tc.QueryWorkflow(ctx, ManagerWorkflowID(threadKey), "", ManagerQueryLookup, threadKey)
	if err != nil {
		return SessionEntry{}, c.translate(err)
	}
	if err := resp.Get(&e); err != nil {
		return SessionEntry{}, err
	}
	if e == nil {
		return SessionEntry{}, ErrNoSession
	}
	return *e, nil
}

func (c *Client) query(ctx context.Context, workflowID, name string, out any, args ...any) error {
	resp, err := c.tc.QueryWorkflow(ctx, workflowID, "", name, args...)
	if err != nil {
		return c.translate(err)
	}
	return resp.Get(out)
}

// translate maps Temporal's errors onto this package's: a session that does
// not exist, or that ended (only destroy ends one), or a Temporal that does
// not answer (ErrUnavailable).
func (c *Client) translate(err error) error {
	if err == nil {
		return nil
	}
	var notFound *serviceerror.NotFound
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	var appErr *temporal.ApplicationError
	var unavailable *serviceerror.Unavailable
	var late *serviceerror.DeadlineExceeded
	switch {
	case errors.As(err, &appErr):
		// A handler or validator refused: its message is for the user.
		if appErr.Message() == ErrDestroyedText {
			return ErrDestroyed
		}
		return &RefusedError{Msg: appErr.Message(), err: err}
	case errors.As(err, &started):
		return ErrDestroyed
	case errors.As(err, &notFound):
		if isCompleted(err) {
			return ErrDestroyed
		}
		return ErrNoSession
	case errors.As(err, &unavailable) || errors.As(err, &late) || errors.Is(err, context.DeadlineExceeded):
		// Temporal is down or restarting (the SDK retries a call for its
		// RPC timeout, 10 s, then gives up) or slow.
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// RefusedError is a session's refusal of a request (a validator or handler
// error); Msg is a sentence for the user.
type RefusedError struct {
	Msg string
	err error
}

func (e *RefusedError) Error() string { return e.Msg }

// Unwrap returns Temporal's error.
func (e *RefusedError) Unwrap() error { return e.err }

func isCompleted(err error) bool {
	return strings.Contains(err.Error(), "already completed")
}

// Conversation returns the session's whole conversation — the user's
// messages, the model's answers and tool calls, the tools' outputs — read
// from blobs, the blob store the session's worker writes
// (AGENTBOT_BLOB_URL). by is who asks: as for Transcript, only the
// session's requester and its admins get it (a RefusedError otherwise).
// Errors: ErrNoSession, ErrDestroyed, the blob store's (a store this
// process cannot read says so).
func (c *Client) Conversation(ctx context.Context, blobs *store.Blobs, threadKey, by string) ([]llm.Message, error) {
	var conv Conversation
	err := c.query(ctx, AgentWorkflowID(threadKey), QueryConversation, &conv, by)
	var failed *serviceerror.QueryFailed
	if errors.As(err, &failed) {
		if failed.Message == ErrDestroyedText {
			return nil, ErrDestroyed
		}
		return nil, &RefusedError{Msg: failed.Message, err: err}
	}
	if err != nil {
		return nil, err
	}
	var msgs []llm.Message
	if conv.Transcript.Key != "" {
		r, err := blobs.NewReader(ctx, conv.Transcript.Key)
		if err != nil {
			return nil, fmt.Errorf("reading the conversation of %s: %w", threadKey, err)
		}
		defer r.Close()
		if err := json.NewDecoder(r).Decode(&msgs); err != nil {
			return nil, fmt.Errorf("reading the conversation of %s: %w", threadKey, err)
		}
	}
	return append(msgs, conv.Pending...), nil
}
