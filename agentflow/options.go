package agentflow

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Error types of non-retryable application errors raised by the activities.
// Workflows and the chat layer test them with ApplicationError.Type().
const (
	// errTypePermanent: retrying cannot help (bad API key, unknown model,
	// invalid spec, unknown backend).
	errTypePermanent = "Permanent"
	// errTypeSandboxGone: the sandbox was destroyed outside the session.
	errTypeSandboxGone = "SandboxGone"
	// errTypeSandboxLost: the sandbox vanished while a tool call ran in it.
	errTypeSandboxLost = "SandboxLost"
)

var nonRetryable = []string{errTypePermanent, errTypeSandboxGone, errTypeSandboxLost}

// ModelStepTimeout bounds one attempt of the ModelStep activity. The model
// call's own timeout (llm.Config.Timeout, AGENTBOT_MODEL_TIMEOUT) must stay
// under it, so that a hung call ends with the client's clear error and is
// retried, rather than with the activity's timeout.
const ModelStepTimeout = 5 * time.Minute

// modelMaxInterval is the longest wait between two attempts of a model
// step, also when the endpoint asks for longer (Retry-After).
const modelMaxInterval = 30 * time.Second

// modelCtx: model calls retry on transient errors (rate limits, 5xx) with
// backoff, or after the wait the endpoint asked for (see ModelStep); the
// activity heartbeats so a stop reaches it.
func modelCtx(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: ModelStepTimeout,
		HeartbeatTimeout:    30 * time.Second,
		WaitForCancellation: true,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: modelMaxInterval,
			MaximumAttempts: 6, NonRetryableErrorTypes: nonRetryable,
		},
	})
}

// toolCtx: a shell command is not idempotent, so it runs at most once: a
// worker lost mid-command gives the model an error to act on, never a
// second run. File reads and writes are idempotent and retry.
func toolCtx(ctx workflow.Context, tool string, timeout time.Duration) workflow.Context {
	attempts := int32(3)
	if tool == "shell" {
		attempts = 1
	}
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: MaxToolTimeout + 2*time.Minute,
		HeartbeatTimeout:    20 * time.Second,
		WaitForCancellation: true,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 10 * time.Second,
			MaximumAttempts: attempts, NonRetryableErrorTypes: nonRetryable,
		},
	})
}

// sandboxCtx: sandbox lifecycle operations (create, restore, snapshot,
// stop, destroy) are idempotent or checked, and retry a few times.
func sandboxCtx(ctx workflow.Context, limit time.Duration) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: limit,
		HeartbeatTimeout:    time.Minute,
		WaitForCancellation: true,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: 2 * time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second,
			MaximumAttempts: 4, NonRetryableErrorTypes: nonRetryable,
		},
	})
}

// storeCtx: blob store copies and deletes.
func storeCtx(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Minute,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second,
			MaximumAttempts: 5, NonRetryableErrorTypes: nonRetryable,
		},
	})
}

// deliverCtx: chat messages are retried for a while (platform outages, rate
// limits); each carries an idempotency key, so a retry edits rather than
// posts twice.
func deliverCtx(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second,
			MaximumAttempts: 8, NonRetryableErrorTypes: nonRetryable,
		},
	})
}

// localDeliverCtx: chat delivery as a local activity, retried as
// deliverCtx's activity is (the SDK backs a long retry off with a timer, so
// a rate-limited platform does not hold the workflow task).
func localDeliverCtx(ctx workflow.Context) workflow.Context {
	return workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		ScheduleToCloseTimeout: 10 * time.Minute, StartToCloseTimeout: time.Minute,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second,
			MaximumAttempts: 8, NonRetryableErrorTypes: nonRetryable,
		},
	})
}

// reportCtx: registry reports to the session manager.
func reportCtx(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 10 * time.Second,
			MaximumAttempts: 5, NonRetryableErrorTypes: nonRetryable,
		},
	})
}
