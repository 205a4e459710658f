package agentflow

import (
	"context"
	"errors"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
)

// Control sends a control request to the tenant's session manager
// (starting it if the tenant has none yet) and returns its answer: done,
// or accepted by the session, which then posts the outcome to the thread.
// Refusals (not the owner, the policy, a destroyed session) are
// RefusedErrors with a sentence for the user. The manager answers at once
// (it never waits for a turn); while it continues as new it asks to be
// asked again, which Control does.
func (c *Client) Control(ctx context.Context, r ControlRequest) (ControlResult, error) {
	if r.Config == nil && c.Policy != nil {
		p := *c.Policy
		r.Config = &p
	}
	key := r.Thread
	if key == "" {
		return ControlResult{}, errors.New("a control request needs a thread of the tenant")
	}
	platform, tenant := Tenant(key)
	delay := 50 * time.Millisecond
	for {
		res, err := c.control(ctx, platform, tenant, r)
		var refused *RefusedError
		var waiting *client.WorkflowUpdateServiceTimeoutOrCanceledError
		switch {
		case err == nil:
			return res, nil
		case errors.As(err, &refused) && refused.Msg == ErrRestartingText:
		case errors.As(err, &waiting) && ctx.Err() == nil:
			// The server gave up waiting for a busy manager: ask again
			// (the same update ID: it is the same request).
		default:
			return res, err
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}

func (c *Client) control(ctx context.Context, platform, tenant string, r ControlRequest) (ControlResult, error) {
	// The manager usually runs: a plain update. Only a tenant without one
	// needs update-with-start.
	h, err := c.tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: ManagerWorkflowID(r.Thread), UpdateName: ManagerUpdateControl, UpdateID: controlUpdateID(r),
		Args: []any{r}, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var notFound *serviceerror.NotFound
	switch {
	case err == nil:
		var res ControlResult
		err = h.Get(ctx, &res)
		return res, c.translate(err)
	case !errors.As(err, &notFound):
		return ControlResult{}, c.translate(err)
	}
	in := ManagerInput{Platform: platform, Tenant: tenant}
	if r.Config != nil {
		in.Configured = *r.Config
	}
	start := c.tc.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID: ManagerWorkflowID(r.Thread), TaskQueue: TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, SessionManagerWorkflowName, in)
	h, err = c.tc.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateName: ManagerUpdateControl, UpdateID: controlUpdateID(r), Args: []any{r},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	if err != nil {
		return ControlResult{}, c.translate(err)
	}
	var res ControlResult
	err = h.Get(ctx, &res)
	return res, c.translate(err)
}

// TenantPolicy returns the policy in force in the tenant of threadKey (the
// configured one when the tenant has no manager yet).
func (c *Client) TenantPolicy(ctx context.Context, threadKey string) (TenantPolicy, error) {
	var p TenantPolicy
	err := c.query(ctx, ManagerWorkflowID(threadKey), ManagerQueryPolicy, &p)
	if errors.Is(err, ErrNoSession) && c.Policy != nil {
		return *c.Policy, nil
	}
	return p, err
}

// Audit returns a page of the audit log of the tenant of threadKey; by
// must be an admin.
func (c *Client) Audit(ctx context.Context, threadKey, by string, page int) (AuditPage, error) {
	var out AuditPage
	err := c.query(ctx, ManagerWorkflowID(threadKey), ManagerQueryAudit, &out, AuditQuery{By: by, Page: page})
	var failed *serviceerror.QueryFailed
	if errors.As(err, &failed) {
		return out, &RefusedError{Msg: failed.Message, err: err}
	}
	if errors.Is(err, ErrNoSession) {
		return AuditPage{Page: 1, Pages: 1}, nil
	}
	return out, err
}

// Usage returns one person's token use today in the tenant of threadKey.
func (c *Client) Usage(ctx context.Context, threadKey, user string) (UsageView, error) {
	var u UsageView
	err := c.query(ctx, ManagerWorkflowID(threadKey), ManagerQueryUsage, &u, user)
	if errors.Is(err, ErrNoSession) {
		return UsageView{User: user}, nil
	}
	return u, err
}

// controlUpdateID names the update of a control request: the request ID
// (a platform's event) in its thread, so that a retry is the same update
// and the same event ID in another thread is another request.
func controlUpdateID(r ControlRequest) string {
	return "ctl/" + r.Thread + "/" + r.RequestID
}
