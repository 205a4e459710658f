package agentflow_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/internal/fakeopenai"
)

// TestWorkflowPendingIsBounded: while the model refuses every request,
// each failed turn's input used to be appended to Pending, carried through
// continue-as-new and sent in every ModelStepInput until it crossed
// Temporal's payload limit. Now a failed turn's input goes into the
// transcript in the blob store: what a model step carries stays the size of
// one message, and when the model is back it sees every message, none lost.
func TestWorkflowPendingIsBounded(t *testing.T) {
	var down atomic.Bool
	down.Store(true)
	p := newParts(t, func(ctx context.Context, c fakeopenai.Call) (fakeopenai.Reply, error) {
		if down.Load() {
			return fakeopenai.Fail(400, "invalid_request_error"), nil
		}
		return fakeopenai.DirectiveScript()(ctx, c)
	})
	e := p.newEnv("term:pending")
	const turns, size = 8, 30 << 10
	var mu sync.Mutex
	var largest int
	e.hooks = append(e.hooks, func(info *activity.Info, args converter.EncodedValues) bool {
		if info.ActivityType.Name != "ModelStep" {
			return false
		}
		var in agentflow.ModelStepInput
		if err := args.Get(&in); err != nil {
			t.Error(err)
			return false
		}
		data, _ := json.Marshal(in)
		mu.Lock()
		largest = max(largest, len(data))
		mu.Unlock()
		return false // keep watching
	})
	var steps []step
	for i := range turns {
		text := fmt.Sprintf("message-%d %s", i, strings.Repeat("x", size))
		steps = append(steps, e.turn(fmt.Sprintf("m%d", i), text, func(r agentflow.TurnResult) {
			if r.Status != agentflow.TurnFailed {
				t.Errorf("turn %d while the model is down: %+v", i, r)
			}
		}))
	}
	steps = append(steps,
		e.do(func() { down.Store(false) }),
		e.turn("back", "the model is back", func(r agentflow.TurnResult) {
			if r.Status != agentflow.TurnDone {
				t.Errorf("turn after the outage: %+v", r)
			}
			reqs := p.chatRequests()
			got := strings.Join(userTexts(reqs[len(reqs)-1]), "\n")
			for i := range turns {
				if !strings.Contains(got, fmt.Sprintf("message-%d ", i)) {
					t.Errorf("message-%d was lost", i)
				}
			}
		}),
		e.destroy(),
	)
	if err := e.runAgent(agentflow.AgentInput{}, steps...); err != nil {
		t.Fatal(err)
	}
	// One message and its envelope; before, the eighth step carried all
	// eight (240 KiB).
	if limit := 2 * size; largest > limit {
		t.Errorf("the largest ModelStepInput was %d bytes (limit %d): failed turns' input accumulates in the payload", largest, limit)
	}
}
