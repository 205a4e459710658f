package fakeopenai_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/agentbot/agentbot/internal/fakeopenai"
)

// TestSequentialIDs checks the option that numbers tool calls from call_1
// per server, as some servers do.
func TestSequentialIDs(t *testing.T) {
	for _, path := range []string{"/chat/completions", "/responses"} {
		t.Run(path, func(t *testing.T) {
			for range 2 {
				srv := fakeopenai.New(fakeopenai.Options{SequentialIDs: true})
				for i := 1; i <= 2; i++ {
					if id := firstCallID(t, srv, path); id != fmt.Sprintf("call_%d", i) {
						t.Errorf("call %d of a server: ID %q", i, id)
					}
				}
				srv.Close()
			}
		})
	}
}

// TestContextWindow checks that a request past Options.ContextTokens is
// refused as OpenAI refuses it, and one within it answered.
func TestContextWindow(t *testing.T) {
	// 4 + 2 tokens for "hi", 4 + 250 for 1,000 bytes.
	long := strings.Repeat("x", 1000)
	small := fakeopenai.Call{Messages: []fakeopenai.Message{{Role: "user", Content: "hi"}}}
	if n := small.Tokens(); n != 5 {
		t.Errorf("Tokens of a 2-byte message = %d, want 5", n)
	}
	big := fakeopenai.Call{Messages: []fakeopenai.Message{
		{Role: "user", Content: long},
		{Role: "assistant", ToolCalls: []fakeopenai.ToolCall{{ID: "c", Name: "shell", Arguments: `{"command":"ls"}`}}},
	}}
	if n := big.Tokens(); n != 4+250+4+6 {
		t.Errorf("Tokens = %d, want %d", n, 4+250+4+6)
	}

	tests := []struct {
		name, path string
		body       map[string]any
		window     int
		param      string
		msg        string // the whole message; "" means the request is answered
	}{
		{"chat within", "/chat/completions", chatBody(user(long)), 254, "", ""},
		{"chat past", "/chat/completions", chatBody(user(long)), 253, "messages",
			"This model's maximum context length is 253 tokens. However, your messages resulted in 254 tokens. Please reduce the length of the messages."},
		{"chat past with completion", "/chat/completions", withParam(chatBody(user(long)), "max_completion_tokens", 100), 300, "messages",
			"This model's maximum context length is 300 tokens. However, you requested 354 tokens (254 in the messages, 100 in the completion). Please reduce the length of the messages or completion."},
		{"responses within", "/responses", respBody(user(long)), 254, "", ""},
		{"responses past", "/responses", respBody(user(long)), 253, "input",
			"Your input exceeds the context window of this model. Please adjust your input and try again."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := fakeopenai.New(fakeopenai.Options{ContextTokens: tt.window})
			defer srv.Close()
			status, out := post(t, srv.URL()+tt.path, tt.body, nil)
			if tt.msg == "" {
				if status != 200 {
					t.Errorf("status %d: %v", status, out)
				}
				return
			}
			if status != 400 {
				t.Fatalf("status %d, want 400: %v", status, out)
			}
			e := errorOf(t, out)
			if e["type"] != "invalid_request_error" || e["code"] != "context_length_exceeded" || e["param"] != tt.param || e["message"] != tt.msg {
				t.Errorf("error = %v", e)
			}
		})
	}
}

func withParam(body map[string]any, key string, v any) map[string]any {
	body[key] = v
	return body
}
