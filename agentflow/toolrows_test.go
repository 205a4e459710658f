package agentflow_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/agentflow/llm"
)

// TestToolRowsAndConversation: what a terminal shows of a running turn
// comes from the session. A finished command's row carries the first line
// of its output, how many lines it printed and how long it ran; a running
// one when it started. The whole conversation — tool calls with their
// arguments and outputs — is readable by the session's owner only.
func TestToolRowsAndConversation(t *testing.T) {
	r := newRig(t, rigOptions{})
	ctx := context.Background()
	const thread = "term:toolrows"
	_, err := r.cl.Send(ctx, agentflow.AgentInput{ThreadKey: thread, Backend: "local", Requester: "owner"},
		agentflow.MessageRequest{ID: "rows-1", Author: "owner", Text: "sh: printf '\\n  alpha one\\nbeta\\ngamma\\n' && sleep 0.3\nsleep: 60"})
	if err != nil {
		t.Fatal(err)
	}
	var rows []agentflow.ToolStatus
	waitFor(t, "the first command is done and the sleep runs", func() bool {
		rows = r.state(thread).Tools
		return len(rows) == 2 && rows[0].State == "done" && rows[1].State == "running"
	})
	if first := rows[0]; first.Head != "alpha one" || first.Lines != 4 || first.Elapsed < 300*time.Millisecond || first.Started.IsZero() {
		t.Fatalf("finished row: %+v", first)
	}
	if second := rows[1]; second.Started.IsZero() || second.Elapsed != 0 || second.Head != "" {
		t.Fatalf("running row: %+v", second)
	}
	if _, err := r.cl.Stop(ctx, thread, agentflow.StopRequest{By: "owner"}); err != nil {
		t.Fatal(err)
	}

	msgs, err := r.cl.Conversation(ctx, r.blobs, thread, "owner")
	if err != nil {
		t.Fatal(err)
	}
	var call llm.ToolCall
	var output string
	for _, m := range msgs {
		for _, c := range m.ToolCalls {
			if c.ID == rows[0].ID {
				call = c
			}
		}
		if m.Role == llm.RoleTool && m.ToolCallID == rows[0].ID {
			output = m.Content
		}
	}
	if !strings.Contains(call.Arguments, "alpha one") || !strings.Contains(output, "alpha one\nbeta\ngamma") {
		t.Fatalf("the conversation lacks the first call (%+v) or its output (%q):\n%+v", call, output, msgs)
	}
	var refused *agentflow.RefusedError
	if _, err := r.cl.Conversation(ctx, r.blobs, thread, "mallory"); !errors.As(err, &refused) {
		t.Fatalf("a stranger read the conversation: %v", err)
	}
}

// TestActivityWhileBusy: the state says what keeps a busy session busy.
func TestActivityWhileBusy(t *testing.T) {
	r := newRig(t, rigOptions{docker: true})
	ctx := context.Background()
	const thread = "term:activity"
	r.send(thread, "sh: echo ready")
	// The switch waits for the running turn, then holds the session as
	// "switch" while it makes the container and restores the workspace
	// there (seconds: long enough to be seen).
	if _, err := r.cl.Send(ctx, agentflow.AgentInput{ThreadKey: thread}, agentflow.MessageRequest{ID: "act-sleep", Text: "sleep: 2"}); err != nil {
		t.Fatal(err)
	}
	sub, err := r.cl.Submit(ctx, thread, agentflow.UpdateSwitch, "act-switch", agentflow.SwitchRequest{Backend: "docker"})
	if err != nil {
		t.Fatalf("submit switch: %+v %v", sub, err)
	}
	seen := map[string]bool{}
	waitFor(t, "the switch is seen and done", func() bool {
		v := r.state(thread)
		if v.Status == agentflow.StatusBusy {
			seen[v.Activity] = true
		} else if v.Activity != "" {
			t.Fatalf("activity %q while %s", v.Activity, v.Status)
		}
		return seen["switch"] && v.Status == agentflow.StatusIdle && v.Backend == "docker"
	})
}
