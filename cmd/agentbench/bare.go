package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/agentbot/agentbot/agentflow/llm"
)

// The baseline: a bare Temporal workflow doing what one agentbot turn with
// one tool call does, and nothing else — an update brings the message in,
// a model-step activity asks the model (the same fake, over HTTP), an exec
// activity runs the command with sh -c in a directory, a second model-step
// activity gets the answer, and the update returns it. No outbox, no
// sandbox bookkeeping, no snapshots, no transcript store.
const (
	bareQueue    = "agentbench-bare"
	bareWorkflow = "BareSession"
	bareUpdate   = "message"
	bareDone     = "done"
)

// bareTools is the one tool the baseline offers the model.
var bareTools = []llm.Tool{{Name: "shell", Description: "run a command", Parameters: map[string]any{
	"type": "object", "properties": map[string]any{
		"command":         map[string]any{"type": "string"},
		"timeout_seconds": map[string]any{"type": "integer"},
	}, "required": []any{"command"},
}}}

// BareSession is the baseline's workflow: one update per turn, turns one at
// a time, until signalled done.
func BareSession(ctx workflow.Context) error {
	busy := false
	var b *bareActivities
	err := workflow.SetUpdateHandler(ctx, bareUpdate, func(ctx workflow.Context, text string) (string, error) {
		if err := workflow.Await(ctx, func() bool { return !busy }); err != nil {
			return "", err
		}
		busy = true
		defer func() { busy = false }()
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 2 * time.Minute})
		msgs := []llm.Message{{Role: llm.RoleUser, Content: text}}
		for step := 0; step < 8; step++ {
			var resp llm.Response
			if err := workflow.ExecuteActivity(ctx, b.ModelStep, msgs).Get(ctx, &resp); err != nil {
				return "", err
			}
			msgs = append(msgs, resp.Message)
			if len(resp.Message.ToolCalls) == 0 {
				return resp.Message.Content, nil
			}
			for _, c := range resp.Message.ToolCalls {
				var out string
				if err := workflow.ExecuteActivity(ctx, b.Exec, c.Arguments).Get(ctx, &out); err != nil {
					return "", err
				}
				msgs = append(msgs, llm.Message{Role: llm.RoleTool, ToolCallID: c.ID, Content: out})
			}
		}
		return "", fmt.Errorf("no answer in 8 steps")
	})
	if err != nil {
		return err
	}
	done := workflow.GetSignalChannel(ctx, bareDone)
	done.Receive(ctx, nil)
	return workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
}

// bareActivities are the baseline's activities.
type bareActivities struct {
	model *llm.Client
	dir   string
}

// ModelStep asks the model for the next message.
func (b *bareActivities) ModelStep(ctx context.Context, msgs []llm.Message) (llm.Response, error) {
	return b.model.Complete(ctx, llm.Request{Model: "gpt-4.1-mini", Messages: msgs, Tools: bareTools})
}

// Exec runs a shell tool call's command with sh -c.
func (b *bareActivities) Exec(ctx context.Context, arguments string) (string, error) {
	var args struct {
		Command string `json:"command"`
	}
	if err := json.Unmarshal([]byte(arguments), &args); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", args.Command)
	cmd.Dir = b.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			return "", err
		}
	}
	activity.RecordHeartbeat(ctx)
	return string(out), nil
}

func newBareWorker(c client.Client, modelURL, dir string) worker.Worker {
	model, err := llm.New(llm.Config{BaseURL: modelURL, APIKey: "agentbench", API: llm.APIChat})
	if err != nil {
		panic(err) // a constant, valid configuration
	}
	w := worker.New(c, bareQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(BareSession, workflow.RegisterOptions{Name: bareWorkflow})
	w.RegisterActivity(&bareActivities{model: model, dir: dir})
	return w
}

// bareTurn sends one message to the bare session id (started if need be)
// and waits for its answer.
func bareTurn(ctx context.Context, c client.Client, id, text string) (string, error) {
	h, err := c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: c.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
			ID: id, TaskQueue: bareQueue, WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		}, bareWorkflow),
		UpdateOptions: client.UpdateWorkflowOptions{UpdateName: bareUpdate, Args: []any{text}, WaitForStage: client.WorkflowUpdateStageCompleted},
	})
	if err != nil {
		return "", err
	}
	var answer string
	err = h.Get(ctx, &answer)
	return answer, err
}
