package agentflow_test

import (
	"strings"
	"testing"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/agentflow/llm"
)

// TestWorkflowModelUnreachable: a model endpoint that cannot be reached is
// told to the user as a sentence, with a reference to the log line that
// holds the details — never the raw Go error with internal addresses.
func TestWorkflowModelUnreachable(t *testing.T) {
	p := newParts(t, nil)
	dead, err := llm.New(llm.Config{BaseURL: "http://127.0.0.1:1/v1"})
	if err != nil {
		t.Fatal(err)
	}
	p.acts.Model = dead
	e := p.newEnv("term:unreachable")
	err = e.runAgent(agentflow.AgentInput{},
		e.turn("m1", "hello", func(r agentflow.TurnResult) {
			if r.Status != agentflow.TurnFailed {
				t.Errorf("turn against a dead endpoint: %+v", r)
			}
			expectIn(t, "answer", r.Answer, "the model endpoint could not be reached", "ref ")
			for _, leak := range []string{"127.0.0.1", "dial tcp", "connect:", "Post \""} {
				if strings.Contains(r.Answer, leak) {
					t.Errorf("the answer shows %q:\n%s", leak, r.Answer)
				}
			}
		}),
		e.destroy(),
	)
	if err != nil {
		t.Fatal(err)
	}
	expectIn(t, "log", p.logs.String(), "127.0.0.1:1")
}
