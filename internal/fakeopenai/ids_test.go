package fakeopenai_test

import (
	"testing"

	"github.com/agentbot/agentbot/internal/fakeopenai"
)

// firstCallID asks srv for one directive's tool call through API path and
// returns the call's ID.
func firstCallID(t *testing.T, srv *fakeopenai.Server, path string) string {
	t.Helper()
	var body map[string]any
	if path == "/chat/completions" {
		body = chatBody(user("sh: echo hi"))
	} else {
		body = respBody(user("sh: echo hi"))
	}
	status, out := post(t, srv.URL()+path, body, nil)
	if status != 200 {
		t.Fatalf("status %d: %v", status, out)
	}
	if path == "/chat/completions" {
		choices, _ := out["choices"].([]any)
		if len(choices) == 1 {
			msg, _ := choices[0].(map[string]any)["message"].(map[string]any)
			calls, _ := msg["tool_calls"].([]any)
			if len(calls) == 1 {
				id, _ := calls[0].(map[string]any)["id"].(string)
				return id
			}
		}
	} else {
		for _, item := range out["output"].([]any) {
			if it := item.(map[string]any); it["type"] == "function_call" {
				id, _ := it["call_id"].(string)
				return id
			}
		}
	}
	t.Fatalf("no tool call in %v", out)
	return ""
}

// TestToolCallIDsUnique checks that two servers (two processes, or the
// same program restarted) never give the same tool-call ID: a
// conversation carried from one to the other must stay valid.
func TestToolCallIDsUnique(t *testing.T) {
	for _, path := range []string{"/chat/completions", "/responses"} {
		t.Run(path, func(t *testing.T) {
			seen := map[string]bool{}
			for range 3 {
				srv := fakeopenai.New(fakeopenai.Options{})
				for range 2 {
					id := firstCallID(t, srv, path)
					if seen[id] || id == "" {
						t.Errorf("tool-call ID %q given twice", id)
					}
					seen[id] = true
				}
				srv.Close()
			}
		})
	}
}
