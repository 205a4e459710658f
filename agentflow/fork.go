package agentflow

import (
	"context"
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
)

// ForkSession makes a fork of a session: it opens the fork's chat thread,
// has the source hand over its own copies of transcript and workspace,
// starts the fork's workflow and links the two threads. Each step is
// idempotent, so a retry finishes a half-done fork instead of making a
// second one.
func (a *Activities) ForkSession(ctx context.Context, in ForkSessionInput) (res ForkResult, err error) {
	defer a.redactOut(&res, &err)
	defer heartbeat(ctx)()
	r := in.Request
	if a.Temporal == nil {
		return ForkResult{}, permanent("no Temporal client for forks", nil)
	}
	sender := a.Chat[Platform(r.SourceThread)]
	creator, ok := sender.(ThreadCreator)
	if !ok {
		return ForkResult{}, permanent(fmt.Sprintf("forking is not supported on %s", Platform(r.SourceThread)), nil)
	}
	srcID := AgentWorkflowID(r.SourceThread)
	q, err := a.Temporal.QueryWorkflow(ctx, srcID, "", QueryState)
	var notFound *serviceerror.NotFound
	switch {
	case errors.As(err, &notFound):
		return ForkResult{}, permanent(fmt.Sprintf("no session in thread %s", r.SourceThread), err)
	case err != nil:
		return ForkResult{}, fmt.Errorf("reading the source session: %w", err)
	}
	var src SessionView
	if err := q.Get(&src); err != nil {
		return ForkResult{}, err
	}
	backend := r.Backend
	if backend == "" {
		backend = src.Backend
	}
	n := in.Number
	if n == 0 { // the manager's window did not know the source
		n = src.Forks + 1
	}
	title := forkTitle(r.Title, src.Title, src.Backend, backend, n)

	thread, err := creator.CreateThread(ctx, r.SourceThread, title, r.RequestID)
	if err != nil {
		return ForkResult{}, fmt.Errorf("opening the fork's thread: %w", err)
	}
	h, err := a.Temporal.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: srcID, UpdateID: "fork/" + r.RequestID, UpdateName: UpdateForkSource,
		Args:         []any{ForkSourceRequest{ForkThreadKey: thread, Backend: backend, By: r.Requester}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return ForkResult{}, fmt.Errorf("copying the session: %w", err)
	}
	var seed ForkSeed
	if err := h.Get(ctx, &seed); err != nil {
		return ForkResult{}, permanent(fmt.Sprintf("the source session refused the fork: %v", err), err)
	}
	id := AgentWorkflowID(thread)
	_, err = a.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: id, TaskQueue: TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
	}, AgentWorkflowName, AgentInput{
		ThreadKey: thread, Title: title, Backend: backend, Root: r.Root, Requester: r.Requester,
		Admins: seed.Admins, Parent: r.SourceThread, Seed: &seed, Options: seed.Options,
	})
	if err != nil {
		return ForkResult{}, fmt.Errorf("starting the fork: %w", err)
	}
	notes := []Outbound{
		{Thread: thread, Key: id + "/forked-from", Kind: OutboundNotice,
			Text: Text{Inline: fmt.Sprintf("Forked from %s (%q) onto %s, with its own copy of the conversation and workspace.", LinkThread(r.SourceThread), src.Title, backend)}},
		{Thread: r.SourceThread, Key: srcID + "/fork/" + r.RequestID, Kind: OutboundNotice,
			Text: Text{Inline: fmt.Sprintf("Forked into %s (%q) on %s.", LinkThread(thread), title, backend)}},
	}
	for _, n := range notes {
		if err := a.Deliver(ctx, n); err != nil {
			return ForkResult{}, err
		}
	}
	return ForkResult{ThreadKey: thread, WorkflowID: id, Title: title, Backend: backend}, nil
}

// LinkThread is how a thread is named in a message: a token "<thread:KEY>"
// that each chat platform's sender turns into a link.
func LinkThread(threadKey string) string { return "<thread:" + threadKey + ">" }

// forkTitle is the title of a fork: the one asked for, else the source's
// with the new backend or the fork's number.
func forkTitle(asked, srcTitle, srcBackend, backend string, n int) string {
	title := asked
	switch {
	case title != "":
	case backend != srcBackend:
		title = fmt.Sprintf("%s [%s]", srcTitle, backend)
	default:
		title = fmt.Sprintf("%s (fork #%d)", srcTitle, n)
	}
	if t, err := cleanTitle(title); err == nil {
		return t
	}
	return cut(title, MaxTitleRunes)
}
