package agentflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
)

// refused is a session's (or the manager's) refusal: not retried, its
// message for the user.
func refused(msg string) error {
	return temporal.NewNonRetryableApplicationError(msg, errTypeRefused, nil)
}

// HandOver gives a control request to a session's workflow as an update and
// returns once the session accepted it (or finished it at once). The
// session's validator's refusal comes back as a Refused error; the update
// ID makes a retry the same request.
func (a *Activities) HandOver(ctx context.Context, in HandOverInput) (res HandOverResult, err error) {
	defer a.redactOut(&res, &err)
	if a.Temporal == nil {
		return res, permanent("no Temporal client for control requests", nil)
	}
	h, err := a.Temporal.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: in.WorkflowID, UpdateID: in.UpdateID, UpdateName: in.Name, Args: []any{in.Arg},
		WaitForStage: client.WorkflowUpdateStageAccepted,
	})
	if err != nil {
		return res, sessionRefusal(err)
	}
	// A request the session finished within the same workflow task (or
	// refused) is decided already: Get answers without asking the server.
	done, cancel := context.WithCancel(ctx)
	cancel()
	var stop StopResult
	var out any
	if in.Name == UpdateStop {
		out = &stop
	}
	err = h.Get(done, out)
	var waiting *client.WorkflowUpdateServiceTimeoutOrCanceledError
	switch {
	case err == nil:
		res = HandOverResult{Done: true}
		if in.Name == UpdateStop {
			res.Stop = &stop
		}
		return res, nil
	case (errors.Is(err, context.Canceled) || errors.As(err, &waiting)) && ctx.Err() == nil:
		return HandOverResult{}, nil
	}
	return res, sessionRefusal(err)
}

// sessionRefusal maps what a session answered to a refusal for the user,
// or keeps a transport error (retried).
func sessionRefusal(err error) error {
	var notFound *serviceerror.NotFound
	var app *temporal.ApplicationError
	switch {
	case errors.As(err, &app):
		return refused(app.Message())
	case errors.As(err, &notFound):
		if isCompleted(err) {
			return refused(ErrDestroyedText)
		}
		return refused("there is no session in this thread")
	}
	return err
}

// StartSession starts a session's workflow for the manager (new). It is
// no error if the thread has one already; a destroyed thread is refused.
func (a *Activities) StartSession(ctx context.Context, in AgentInput) (res StartSessionResult, err error) {
	defer a.redactOut(&res, &err)
	if a.Temporal == nil {
		return res, permanent("no Temporal client for new sessions", nil)
	}
	_, err = a.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: AgentWorkflowID(in.ThreadKey), TaskQueue: TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
	}, AgentWorkflowName, in)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	switch {
	case errors.As(err, &started):
		return res, refused(ErrDestroyedText)
	case err != nil:
		return res, err
	}
	return StartSessionResult{Created: true}, nil
}

// PutAudit writes a chunk of a manager's audit log to the blob store.
func (a *Activities) PutAudit(ctx context.Context, c AuditChunk) (err error) {
	defer a.redactOut(nil, &err)
	data, err := json.Marshal(c.Entries)
	if err != nil {
		return err
	}
	return a.putBlob(ctx, c.Key, "application/json", data)
}

// Register registers a new session with its tenant's manager (starting the
// manager if needed) and returns the manager's admission.
func (a *Activities) Register(ctx context.Context, e SessionEntry) (adm Admission, err error) {
	defer a.redactOut(&adm, &err)
	if a.Temporal == nil {
		return adm, permanent("no Temporal client for reports", nil)
	}
	platform, tenant := Tenant(e.ThreadKey)
	start := a.Temporal.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID: ManagerWorkflowID(e.ThreadKey), TaskQueue: TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, SessionManagerWorkflowName, ManagerInput{Platform: platform, Tenant: tenant, Configured: a.Policy})
	h, err := a.Temporal.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateName: ManagerUpdateRegister, Args: []any{e}, WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	if err != nil {
		return adm, err
	}
	err = h.Get(ctx, &adm)
	return adm, err
}

// OpenForkThread opens the chat thread of a fork; requestID makes it
// idempotent.
func (a *Activities) OpenForkThread(ctx context.Context, in OpenThreadInput) (thread string, err error) {
	defer a.redactOut(&thread, &err)
	creator, ok := a.Chat[Platform(in.Source)].(ThreadCreator)
	if !ok {
		return "", permanent(fmt.Sprintf("forking is not supported on %s", Platform(in.Source)), nil)
	}
	thread, err = creator.CreateThread(ctx, in.Source, in.Title, in.RequestID)
	if err != nil {
		return "", fmt.Errorf("opening the fork's thread: %w", err)
	}
	return thread, nil
}

// OpenThreadInput names the thread a fork opens.
type OpenThreadInput struct {
	Source    string `json:"source"`
	Title     string `json:"title"`
	RequestID string `json:"request_id"`
}

// StartFork starts a fork's workflow with its seed and links the two
// threads; each step is idempotent.
func (a *Activities) StartFork(ctx context.Context, in AgentInput) (err error) {
	defer a.redactOut(nil, &err)
	if a.Temporal == nil {
		return permanent("no Temporal client for forks", nil)
	}
	id := AgentWorkflowID(in.ThreadKey)
	_, err = a.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: id, TaskQueue: TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
	}, AgentWorkflowName, in)
	if err != nil {
		return fmt.Errorf("starting the fork: %w", err)
	}
	parentTitle := ""
	if in.Seed != nil {
		parentTitle = in.Seed.ParentTitle
	}
	notes := []Outbound{
		{Thread: in.ThreadKey, Key: id + "/forked-from", Kind: OutboundNotice,
			Text: Text{Inline: fmt.Sprintf("Forked from %s (%q) onto %s, with its own copy of the conversation and workspace.", LinkThread(in.Parent), parentTitle, in.Backend)}},
		{Thread: in.Parent, Key: AgentWorkflowID(in.Parent) + "/fork/" + in.ThreadKey, Kind: OutboundNotice,
			Text: Text{Inline: fmt.Sprintf("Forked into %s (%q) on %s.", LinkThread(in.ThreadKey), in.Title, in.Backend)}},
	}
	for _, n := range notes {
		if err := a.Deliver(ctx, n); err != nil {
			return err
		}
	}
	return nil
}
