package agentflow_test

import (
	"context"
	"strings"
	"testing"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/internal/fakeopenai"
)

// TestWorkflowReset: a conversation the model refuses for good (here: any
// request whose history holds a poisoned message) leaves the user a way
// out. The failure says to `reset`; reset (owner or admin only) keeps the
// workspace, archives the old transcript in the blob store and starts a
// fresh conversation, and the next turn works.
func TestWorkflowReset(t *testing.T) {
	p := newParts(t, func(ctx context.Context, c fakeopenai.Call) (fakeopenai.Reply, error) {
		for _, m := range c.Messages {
			if strings.Contains(m.Content, "poison") {
				return fakeopenai.Fail(400, "invalid_request_error"), nil
			}
		}
		return fakeopenai.DirectiveScript()(ctx, c)
	})
	e := p.newEnv("term:reset")
	var archived string
	err := e.runAgent(agentflow.AgentInput{Requester: "alice"},
		e.turn("m1", "write: keep.txt <<< kept", func(r agentflow.TurnResult) {
			if r.Status != agentflow.TurnDone {
				t.Errorf("first turn: %+v", r)
			}
		}),
		e.turn("m2", "poison", func(r agentflow.TurnResult) {
			if r.Status != agentflow.TurnFailed {
				t.Errorf("poisoned turn: %+v", r)
			}
			expectIn(t, "failure", r.Answer, "say `reset` to start a fresh conversation on the same workspace")
		}),
		e.turn("m3", "hello", func(r agentflow.TurnResult) {
			if r.Status != agentflow.TurnFailed {
				t.Errorf("the conversation is poisoned for good, yet: %+v", r)
			}
		}),
		e.rejected(agentflow.UpdateReset, agentflow.ResetRequest{By: "mallory"}, "only the person who started this session"),
		call(e, agentflow.UpdateReset, agentflow.ResetRequest{By: "alice"}, func(r agentflow.ResetResult, err error) {
			if err != nil || r.Archived == "" {
				t.Errorf("reset: %+v %v", r, err)
			}
			archived = r.Archived
		}),
		e.do(func() {
			if !p.exists(archived) {
				t.Errorf("the archived transcript %q is not in the blob store", archived)
			}
		}),
		e.turn("m4", "sh: cat keep.txt", func(r agentflow.TurnResult) {
			if r.Status != agentflow.TurnDone || !strings.Contains(r.Answer, "kept") {
				t.Errorf("turn after the reset: %+v", r)
			}
			reqs := p.chatRequests()
			if got := userTexts(reqs[len(reqs)-1]); len(got) != 1 || got[0] != "sh: cat keep.txt" {
				t.Errorf("the conversation after the reset is not fresh: %q", got)
			}
		}),
		call(e, agentflow.UpdateDestroy, agentflow.DestroyRequest{By: "alice"}, func(v agentflow.SessionView, err error) {
			if err != nil {
				t.Error(err)
			}
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
}
