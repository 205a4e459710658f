package agentflow_test

// Tests of what ModelStep makes of the model's transcript: tool-call IDs
// that stay unique when the endpoint reuses its own, and conversations that
// outgrow the model's context window. They run in the SDK's test
// environment of workflow_test.go.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/agentflow/llm"
	"github.com/agentbot/agentbot/internal/fakeopenai"
)

// useModel starts a fake model with opts (the test's API key, and
// DirectiveScript unless opts has a script) and points the activities at
// it, through the given API; the session's next model call goes there.
func (p *parts) useModel(opts fakeopenai.Options, api llm.API) *fakeopenai.Server {
	p.t.Helper()
	opts.APIKey = unitKey
	srv := fakeopenai.New(opts)
	p.t.Cleanup(srv.Close)
	mc, err := llm.New(llm.Config{BaseURL: srv.URL(), APIKey: unitKey, API: api})
	if err != nil {
		p.t.Fatal(err)
	}
	p.acts.Model = mc
	return srv
}

// callIDs returns the tool-call IDs of a request's conversation, in order.
func callIDs(r fakeopenai.RecordedRequest) []string {
	var ids []string
	for _, m := range r.Call.Messages {
		for _, c := range m.ToolCalls {
			ids = append(ids, c.ID)
		}
	}
	return ids
}

// TestModelStepRestartedEndpoint runs one session across a "restart" of
// its model endpoint: two servers that each number their tool calls from
// call_1, as the built-in scripted model did in every process. The second
// server's IDs are those the transcript already holds; the session must
// not send them back twice (every API refuses that with a 400, for good).
func TestModelStepRestartedEndpoint(t *testing.T) {
	p := newParts(t, nil)
	first := p.useModel(fakeopenai.Options{SequentialIDs: true}, llm.APIChat)
	var second *fakeopenai.Server
	e := p.newEnv("term:restart")
	done := func(what, want string) func(agentflow.TurnResult) {
		return func(r agentflow.TurnResult) {
			if r.Status != agentflow.TurnDone || !strings.Contains(r.Answer, want) {
				t.Errorf("%s: %+v", what, r)
			}
		}
	}
	err := e.runAgent(agentflow.AgentInput{},
		e.turn("m1", "sh: echo one\nsh: echo two", done("turn 1", "two")),
		e.do(func() { second = p.useModel(fakeopenai.Options{SequentialIDs: true}, llm.APIChat) }),
		e.turn("m2", "sh: echo three", done("turn 2, after the restart", "three")),
		e.turn("m3", "sh: echo four\nread: nothing-here", done("turn 3", "four")),
		e.destroy(),
	)
	if err != nil {
		t.Fatal(err)
	}
	for _, srv := range []*fakeopenai.Server{first, second} {
		for _, r := range srv.Requests() {
			if r.Status != http.StatusOK {
				t.Errorf("the model answered %d to:\n%s", r.Status, r.Body)
			}
		}
	}
	reqs := second.Requests()
	if len(reqs) == 0 {
		t.Fatal("the second server got no request")
	}
	ids := callIDs(reqs[len(reqs)-1])
	if len(ids) != 5 {
		t.Errorf("the last request holds %d tool calls, want 5: %q", len(ids), ids)
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Errorf("tool-call ID %q appears twice in %q", id, ids)
		}
		seen[id] = true
		// The session's own IDs, whichever server answered.
		if !strings.HasPrefix(id, "call_") || strings.TrimLeft(strings.TrimPrefix(id, "call_"), "0123456789") == "" {
			t.Errorf("tool-call ID %q is the endpoint's, not the session's", id)
		}
	}
}

// TestModelStepHealsDuplicateIDs gives ModelStep a transcript written
// before the session chose its tool-call IDs, holding the endpoint's call_1
// twice (what a restart made of a session): the step must succeed, and
// the transcript it records be valid for the next one.
func TestModelStepHealsDuplicateIDs(t *testing.T) {
	p := newParts(t, nil)
	ctx := context.Background()
	call := func(id, cmd string) llm.Message {
		return llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: id, Name: "shell", Arguments: fmt.Sprintf(`{"command":%q}`, cmd)}}}
	}
	result := func(id, out string) llm.Message { return llm.Message{Role: llm.RoleTool, ToolCallID: id, Content: out} }
	broken := []llm.Message{
		{Role: llm.RoleUser, Content: "sh: echo a"},
		call("call_1", "echo a"), result("call_1", "a"),
		{Role: llm.RoleAssistant, Content: "done.\n[shell] a"},
		{Role: llm.RoleUser, Content: "sh: echo b\nsh: echo c"},
		call("call_1", "echo b"), result("call_1", "b"),
		call("call_2", "echo c"),
	}
	data, err := json.Marshal(broken)
	if err != nil {
		t.Fatal(err)
	}
	const key = "legacy/transcript.json"
	w, err := p.blobs.NewWriter(ctx, key, "application/json")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivity(p.acts)
	val, err := env.ExecuteActivity(p.acts.ModelStep, agentflow.ModelStepInput{
		SessionID: "agent/term:legacy", Turn: 2, Step: 3,
		Transcript: agentflow.TranscriptRef{Key: key, Version: 1, Messages: len(broken)},
		Append:     []llm.Message{result("call_2", "c")},
		Backend:    "local", Root: "/tmp/x",
	})
	if err != nil {
		t.Fatalf("ModelStep over a transcript with a duplicate ID: %v", err)
	}
	var res agentflow.ModelStepResult
	if err := val.Get(&res); err != nil {
		t.Fatal(err)
	}
	if len(res.ToolCalls) != 0 || res.Answer.Inline != "done.\n[shell] b\n[shell] c" {
		t.Errorf("result: %+v", res)
	}
	reqs := p.chatRequests()
	if len(reqs) != 1 {
		t.Fatalf("%d model requests, want 1", len(reqs))
	}
	if ids := callIDs(reqs[0]); len(ids) != 3 || ids[0] != "call_1" || ids[1] == "call_1" || ids[2] != "call_2" {
		t.Errorf("tool-call IDs sent: %q, want call_1, a new name for the second call_1, call_2", ids)
	}
	// The healed transcript is what was recorded.
	rd, err := p.blobs.NewReader(ctx, res.Transcript.Key)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var saved []llm.Message
	if err := json.NewDecoder(rd).Decode(&saved); err != nil {
		t.Fatal(err)
	}
	if len(saved) != len(broken)+2 || saved[5].ToolCalls[0].ID != saved[6].ToolCallID || saved[5].ToolCalls[0].ID == "call_1" {
		t.Errorf("recorded transcript: %+v", saved)
	}
}

// TestModelStepContextWindow runs a turn whose tool outputs overflow a
// small model's context window (what a session built for a larger model,
// or a fork, meets), then another turn.
func TestModelStepContextWindow(t *testing.T) {
	const window = 12_000 // tokens: about three 16 KiB tool outputs
	var cmds []string
	for i := range 8 {
		// The tail's marker is not in the command, which progress
		// messages show.
		cmds = append(cmds, fmt.Sprintf("sh: yes %d | head -c 20000; printf '\\ntail-of-%%s\\n' %d", i, i))
	}
	tests := []struct {
		name string
		api  llm.API
		// budget is Activities.ContextChars; 0 is the default, far above
		// the window: the model's refusals must be answered.
		budget int
	}{
		{"chat", llm.APIChat, 0},
		{"responses", llm.APIResponses, 0},
		// A budget set for the model (4 characters a token, and room
		// for the tools) is kept from the start: nothing is refused.
		{"budget set", llm.APIChat, window * 4 * 3 / 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newParts(t, nil)
			p.acts.ContextChars = tt.budget
			model := p.useModel(fakeopenai.Options{ContextTokens: window}, tt.api)
			e := p.newEnv("term:window-" + tt.name)
			err := e.runAgent(agentflow.AgentInput{},
				e.turn("big", strings.Join(cmds, "\n"), func(r agentflow.TurnResult) {
					if r.Status != agentflow.TurnDone || r.Steps != len(cmds)+1 {
						t.Errorf("the turn that overflows the window: %+v", r)
					}
					// The whole answer (the result keeps only its head)
					// quotes the outputs the model read last: their
					// tails survived the cuts.
					expectIn(t, "answer", r.Answer, "done.")
					expectIn(t, "terminal", p.term.String(), "tail-of-7")
				}),
				e.turn("next", "sh: echo after-the-big-one", func(r agentflow.TurnResult) {
					if r.Status != agentflow.TurnDone || !strings.Contains(r.Answer, "after-the-big-one") {
						t.Errorf("the turn after: %+v", r)
					}
				}),
				e.destroy(),
			)
			if err != nil {
				t.Fatal(err)
			}
			refused, answered := 0, 0
			for _, r := range model.Requests() {
				switch {
				case r.Status == http.StatusOK:
					answered++
					if n := r.Call.Tokens(); n > window {
						t.Errorf("a request of %d tokens was answered", n)
					}
				case r.Status == http.StatusBadRequest:
					refused++
				default:
					t.Errorf("the model answered %d", r.Status)
				}
			}
			// Each step of turn 1 and the first of turn 2.
			if answered != len(cmds)+3 {
				t.Errorf("%d requests answered, want %d", answered, len(cmds)+3)
			}
			switch {
			case tt.budget == 0 && refused == 0:
				t.Error("no request was refused: the window does not bite, the test tests nothing")
			case tt.budget > 0 && refused > 0:
				t.Errorf("%d requests refused within the budget", refused)
			}
		})
	}
}

// TestModelStepRetryAfter runs ModelStep against a model that fails with
// and without Retry-After: a retryable failure with a wait asks Temporal
// to retry after it (NextRetryDelay), bounded by the retry policy's
// longest interval (30 s); one without leaves the delay to the policy;
// a permanent one is not retried whatever it says.
func TestModelStepRetryAfter(t *testing.T) {
	tests := []struct {
		name         string
		err          fakeopenai.HTTPError
		wantDelay    time.Duration
		nonRetryable bool
	}{
		{"rate limit", fakeopenai.HTTPError{Status: 429, Code: "rate_limit_exceeded", RetryAfter: "7"}, 7 * time.Second, false},
		{"overloaded, as a date", fakeopenai.HTTPError{Status: 503,
			RetryAfter: time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)}, 30 * time.Second, false},
		{"longer than the policy waits", fakeopenai.HTTPError{Status: 429, RetryAfter: "600"}, 30 * time.Second, false},
		{"no wait said", fakeopenai.HTTPError{Status: 429, Code: "rate_limit_exceeded"}, 0, false},
		{"server error without", fakeopenai.HTTPError{Status: 500}, 0, false},
		{"rejected key", fakeopenai.HTTPError{Status: 401, Code: "invalid_api_key", RetryAfter: "5"}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newParts(t, nil)
			e := tt.err
			p.useModel(fakeopenai.Options{Script: func(context.Context, fakeopenai.Call) (fakeopenai.Reply, error) {
				return fakeopenai.Reply{Error: &e}, nil
			}}, llm.APIChat)
			var suite testsuite.WorkflowTestSuite
			env := suite.NewTestActivityEnvironment()
			env.RegisterActivity(p.acts)
			_, err := env.ExecuteActivity(p.acts.ModelStep, agentflow.ModelStepInput{
				SessionID: "agent/term:retry-after", Turn: 1, Step: 1,
				Append:  []llm.Message{{Role: llm.RoleUser, Content: "hello"}},
				Backend: "local", Root: "/tmp/x",
			})
			var appErr *temporal.ApplicationError
			if !errors.As(err, &appErr) {
				t.Fatalf("err = %v, want an application error", err)
			}
			if appErr.NonRetryable() != tt.nonRetryable {
				t.Errorf("non-retryable = %v, want %v: %v", appErr.NonRetryable(), tt.nonRetryable, err)
			}
			if got := appErr.NextRetryDelay(); got != tt.wantDelay {
				t.Errorf("next retry delay = %v, want %v: %v", got, tt.wantDelay, err)
			}
			if !strings.Contains(appErr.Error(), fmt.Sprintf("(%d)", tt.err.Status)) {
				t.Errorf("the error does not name the status %d: %v", tt.err.Status, err)
			}
		})
	}
}
