package agentflow

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
)

// Errors of Client.
var (
	// ErrNoSession means the thread has no session (yet).
	ErrNoSession = errors.New("no session in this thread")
	// ErrDestroyed means the thread's session was destroyed.
	ErrDestroyed = errors.New(ErrDestroyedText)
)

// Client is the chat side's handle on sessions: every call is one Temporal
// request (an update, an update-with-start or a query). It holds no state of
// its own, so any bot replica can serve any thread. Safe for concurrent use.
type Client struct {
	tc client.Client
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
// makes it idempotent: a platform retry gets the first result and starts no
// second turn.
func (c *Client) Send(ctx context.Context, start AgentInput, m MessageRequest) (MessageResult, error) {
	opts := client.UpdateWorkflowOptions{
		UpdateName: UpdateMessage, Args: []any{m}, WaitForStage: client.WorkflowUpdateStageCompleted,
	}
	if m.ID != "" {
		opts.UpdateID = "msg/" + m.ID
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
// it gave. It polls QueryMessage (update
// handlers never block on turns); ctx bounds the wait.
func (c *Client) Wait(ctx context.Context, threadKey, id string) (MessageResult, error) {
	delay := 20 * time.Millisecond
	for {
		var res MessageResult
		resp, err := c.tc.QueryWorkflow(ctx, AgentWorkflowID(threadKey), "", QueryMessage, id)
		switch {
		case err == nil:
			if err := resp.Get(&res); err != nil {
				return res, err
			}
			if (res.Result != nil && res.Result.Delivered) || res.Forgotten {
				return res, nil
			}
		case ctx.Err() != nil:
			return res, fmt.Errorf("waiting for message %s: %w", id, ctx.Err())
		default:
			err = c.translate(err)
			var refused *RefusedError
			if errors.Is(err, ErrDestroyed) || errors.Is(err, ErrNoSession) || errors.As(err, &refused) {
				return res, err
			}
			// A query can time out or fail while the worker is busy or a
			// workflow task is being retried; the session is still there,
			// so ask again (ctx bounds the wait).
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(delay*2, 500*time.Millisecond)
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
func (c *Client) Start(ctx context.Context, in AgentInput) (SessionView, error) {
	if _, err := c.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: AgentWorkflowID(in.ThreadKey), TaskQueue: TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
	}, AgentWorkflowName, in); err != nil {
		return SessionView{}, c.translate(err)
	}
	return c.State(ctx, in.ThreadKey)
}

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

// Transcript returns the session's recent turns.
func (c *Client) Transcript(ctx context.Context, threadKey string) ([]TurnSummary, error) {
	var t []TurnSummary
	err := c.query(ctx, AgentWorkflowID(threadKey), QueryTranscript, &t)
	return t, err
}

// List returns the sessions of the tenant that threadKey belongs to.
func (c *Client) List(ctx context.Context, threadKey string) ([]SessionEntry, error) {
	var l []SessionEntry
	err := c.query(ctx, ManagerWorkflowID(threadKey), ManagerQueryList, &l)
	if errors.Is(err, ErrNoSession) {
		return nil, nil
	}
	return l, err
}

// Lookup returns the registry entry of a thread, or ErrNoSession.
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

func (c *Client) query(ctx context.Context, workflowID, name string, out any) error {
	resp, err := c.tc.QueryWorkflow(ctx, workflowID, "", name)
	if err != nil {
		return c.translate(err)
	}
	return resp.Get(out)
}

// translate maps Temporal's errors onto this package's: a session that does
// not exist, or that ended (only destroy ends one).
func (c *Client) translate(err error) error {
	if err == nil {
		return nil
	}
	var notFound *serviceerror.NotFound
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	var appErr *temporal.ApplicationError
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
