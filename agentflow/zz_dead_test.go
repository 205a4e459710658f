package agentflow_test

import (
	"testing"
	"time"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/internal/fakeopenai"
)

// A switch typed after a queued message, when the turn before them ends the
// run (MaxTurnsPerRun): the run waits for the switch to finish before
// continuing as new; the switch waits for the queue to empty; the queue
// empties only in the next run.
func TestZZCANDeadlock(t *testing.T) {
	g := newGate()
	p := newParts(t, g.first(fakeopenai.DirectiveScript()))
	t.Cleanup(g.open)
	e := p.newEnv("term:dead")
	e.env.SetTestTimeout(5 * time.Second)
	held := &latch{n: 1}
	onStart(e, "ModelStep", isModelStep, held.done)
	err := e.runAgent(agentflow.AgentInput{Options: agentflow.AgentOptions{MaxTurnsPerRun: 1}},
		e.send(agentflow.MessageRequest{ID: "m1", Text: "hello"}, func(agentflow.MessageResult, error) {}),
		held.wait(),
		e.send(agentflow.MessageRequest{ID: "m2", Text: "second"}, func(agentflow.MessageResult, error) {}),
		func(next func()) {
			e.update(agentflow.UpdateSwitch, agentflow.SwitchRequest{Backend: "local", Root: t.TempDir()}, nil, func(raw []byte, err error) {
				t.Logf("switch answered: %s %v", raw, err)
			})
			g.open()
			next()
		},
	)
	t.Logf("workflow: %v", err)
}
