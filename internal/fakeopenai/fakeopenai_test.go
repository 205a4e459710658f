package fakeopenai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentbot/agentbot/internal/fakeopenai"
)

var shellSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"command":         map[string]any{"type": "string"},
		"timeout_seconds": map[string]any{"type": "integer"},
	},
	"required": []any{"command"},
}

var chatTools = []any{
	map[string]any{"type": "function", "function": map[string]any{"name": "shell", "parameters": shellSchema}},
	map[string]any{"type": "function", "function": map[string]any{"name": "read_file"}},
	map[string]any{"type": "function", "function": map[string]any{"name": "write_file"}},
}

var responsesTools = []any{
	map[string]any{"type": "function", "name": "shell", "parameters": shellSchema, "strict": false},
	map[string]any{"type": "function", "name": "read_file", "strict": false},
	map[string]any{"type": "function", "name": "write_file", "strict": false},
}

// post sends body as JSON and decodes the JSON answer.
func post(t *testing.T, url string, body any, header map[string]string) (int, map[string]any) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("decoding the answer: %v", err)
	}
	return resp.StatusCode, out
}

// errorOf checks that out is an OpenAI error envelope and returns it.
func errorOf(t *testing.T, out map[string]any) map[string]any {
	t.Helper()
	e, ok := out["error"].(map[string]any)
	if !ok {
		t.Fatalf("no error envelope in %v", out)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := e[k]; !ok {
			t.Errorf("error envelope lacks %q: %v", k, e)
		}
	}
	if msg, _ := e["message"].(string); msg == "" {
		t.Errorf("error without a message: %v", e)
	}
	return e
}

func chatBody(messages ...any) map[string]any {
	return map[string]any{"model": "m", "messages": messages, "tools": chatTools}
}

func user(text string) map[string]any { return map[string]any{"role": "user", "content": text} }

func assistantCalls(ids ...string) map[string]any {
	var calls []any
	for _, id := range ids {
		calls = append(calls, map[string]any{"id": id, "type": "function", "function": map[string]any{"name": "shell", "arguments": "{}"}})
	}
	return map[string]any{"role": "assistant", "content": nil, "tool_calls": calls}
}

func toolResult(id string) map[string]any {
	return map[string]any{"role": "tool", "tool_call_id": id, "content": "out"}
}

func respBody(input ...any) map[string]any {
	return map[string]any{"model": "m", "input": input, "tools": responsesTools}
}

func fnCall(id string) map[string]any {
	return map[string]any{"type": "function_call", "call_id": id, "name": "shell", "arguments": "{}"}
}

func fnOutput(id string) map[string]any {
	return map[string]any{"type": "function_call_output", "call_id": id, "output": "out"}
}

func TestValidation(t *testing.T) {
	tests := []struct {
		name  string
		path  string
		body  any
		param any // want; nil means JSON null
		msg   string
	}{
		{"chat: no model", "/chat/completions", map[string]any{"messages": []any{user("hi")}}, "model", "you must provide a model parameter"},
		{"chat: no messages", "/chat/completions", map[string]any{"model": "m", "messages": []any{}}, "messages", "empty array"},
		{"chat: unknown parameter", "/chat/completions", map[string]any{"model": "m", "messages": []any{user("hi")}, "temprature": 1}, "temprature", "Unrecognized request argument supplied: temprature"},
		{"chat: stream_options without stream", "/chat/completions", map[string]any{"model": "m", "messages": []any{user("hi")}, "stream_options": map[string]any{"include_usage": true}}, "stream_options", "The 'stream_options' parameter is only allowed when 'stream' is enabled."},
		{"chat: bad role", "/chat/completions", chatBody(map[string]any{"role": "robot", "content": "x"}), "messages[0].role", "Invalid value: 'robot'"},
		{"chat: no content", "/chat/completions", chatBody(map[string]any{"role": "user"}), "messages[0].content", "Missing required parameter"},
		{"chat: content of a wrong type", "/chat/completions", chatBody(map[string]any{"role": "user", "content": 3}), "messages[0].content", "got a number"},
		{"chat: tool result without a call", "/chat/completions", chatBody(user("hi"), toolResult("call_1")), "messages[1].role", "must be a response to a preceeding message with 'tool_calls'"},
		{"chat: tool result for another call", "/chat/completions", chatBody(user("hi"), assistantCalls("call_1"), toolResult("call_2")), "messages[2].role", "must be a response"},
		{"chat: tool result answered twice", "/chat/completions", chatBody(user("hi"), assistantCalls("call_1"), toolResult("call_1"), toolResult("call_1")), "messages[3].role", "must be a response"},
		{"chat: missing tool result", "/chat/completions", chatBody(user("hi"), assistantCalls("call_1", "call_2"), toolResult("call_1"), user("and?")), "messages[3].role", "did not have response messages: call_2"},
		{"chat: missing tool result at the end", "/chat/completions", chatBody(user("hi"), assistantCalls("call_1")), "messages[1].role", "did not have response messages: call_1"},
		{"chat: duplicate tool call id", "/chat/completions", chatBody(user("hi"), assistantCalls("call_1"), toolResult("call_1"), assistantCalls("call_1"), toolResult("call_1")), "messages[3].tool_calls", "Duplicate value for 'tool_call_id' of call_1"},
		{"chat: tool call without id", "/chat/completions", chatBody(user("hi"), assistantCalls("")), "messages[1].tool_calls[0].id", "Missing required parameter"},
		{"chat: tool_calls on a user message", "/chat/completions", chatBody(map[string]any{"role": "user", "content": "x", "tool_calls": []any{map[string]any{"id": "c"}}}), "messages[0].tool_calls", "only allowed"},
		{"chat: bad tool name", "/chat/completions", map[string]any{"model": "m", "messages": []any{user("hi")}, "tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "run shell"}}}}, "tools[0].function.name", "does not match pattern"},
		{"chat: duplicate tool", "/chat/completions", map[string]any{"model": "m", "messages": []any{user("hi")}, "tools": append(append([]any{}, chatTools...), chatTools[0])}, "tools[3].function.name", "Duplicate function name 'shell'"},
		{"chat: schema not an object", "/chat/completions", map[string]any{"model": "m", "messages": []any{user("hi")}, "tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "f", "parameters": map[string]any{"type": "string"}}}}}, "tools[0].function.parameters", "must be a JSON Schema of 'type: \"object\"'"},
		{"chat: strict schema with optional property", "/chat/completions", map[string]any{"model": "m", "messages": []any{user("hi")}, "tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "shell", "parameters": shellSchema, "strict": true}}}}, "tools[0].function.parameters", "'additionalProperties' is required"},
		{"chat: not JSON", "/chat/completions", json.RawMessage(`[1,2]`), nil, "could not parse the JSON body"},

		{"responses: no model", "/responses", map[string]any{"input": "hi"}, "model", "Missing required parameter: 'model'"},
		{"responses: no input", "/responses", map[string]any{"model": "m"}, "input", "Missing required parameter: 'input'"},
		{"responses: empty input", "/responses", map[string]any{"model": "m", "input": []any{}}, "input", "empty array"},
		{"responses: unknown parameter", "/responses", map[string]any{"model": "m", "input": "hi", "messages": []any{}}, "messages", "Unrecognized request argument supplied: messages"},
		{"responses: previous_response_id", "/responses", map[string]any{"model": "m", "input": "hi", "previous_response_id": "resp_1"}, "previous_response_id", "Previous response with id 'resp_1' not found."},
		{"responses: output without a call", "/responses", respBody(user("hi"), fnOutput("call_1")), "input", "No tool call found for function call output with call_id call_1."},
		{"responses: output answered twice", "/responses", respBody(user("hi"), fnCall("call_1"), fnOutput("call_1"), fnOutput("call_1")), "input", "No tool call found"},
		{"responses: call without output", "/responses", respBody(user("hi"), fnCall("call_1"), fnCall("call_2"), fnOutput("call_2")), "input", "No tool output found for function call call_1."},
		{"responses: duplicate call id", "/responses", respBody(user("hi"), fnCall("call_1"), fnOutput("call_1"), fnCall("call_1"), fnOutput("call_1")), "input[3].call_id", "Duplicate function call with call_id call_1"},
		{"responses: call without call_id", "/responses", respBody(user("hi"), fnCall("")), "input[1].call_id", "Missing required parameter"},
		{"responses: item reference", "/responses", respBody(map[string]any{"type": "item_reference", "id": "msg_1"}), "input[0].id", "Item with id 'msg_1' not found."},
		{"responses: bad role", "/responses", respBody(map[string]any{"role": "tool", "content": "x"}), "input[0].role", "Invalid value: 'tool'"},
		{"responses: bad part type", "/responses", respBody(map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "x"}}}), "input[0].content[0].type", "Invalid value: 'text'"},
		{"responses: strict by default", "/responses", map[string]any{"model": "m", "input": "hi", "tools": []any{map[string]any{"type": "function", "name": "shell", "parameters": shellSchema}}}, "tools[0].parameters", "'additionalProperties' is required"},
		{"responses: strict needs every property required", "/responses", map[string]any{"model": "m", "input": "hi", "tools": []any{map[string]any{"type": "function", "name": "shell", "strict": true, "parameters": map[string]any{
			"type": "object", "additionalProperties": false, "properties": shellSchema["properties"], "required": []any{"command"},
		}}}}, "tools[0].parameters", "Missing 'timeout_seconds'"},
	}
	srv := fakeopenai.New(fakeopenai.Options{})
	defer srv.Close()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, out := post(t, srv.URL()+tt.path, tt.body, nil)
			if status != http.StatusBadRequest {
				t.Fatalf("status = %d, want 400 (%v)", status, out)
			}
			e := errorOf(t, out)
			if e["type"] != "invalid_request_error" {
				t.Errorf("type = %v", e["type"])
			}
			if e["param"] != tt.param {
				t.Errorf("param = %v, want %v", e["param"], tt.param)
			}
			if msg := e["message"].(string); !strings.Contains(msg, tt.msg) {
				t.Errorf("message = %q, want it to contain %q", msg, tt.msg)
			}
		})
	}
}

// TestValidRequests checks conversations the real API accepts.
func TestValidRequests(t *testing.T) {
	tests := []struct {
		name string
		path string
		body any
	}{
		{"chat: parallel tool calls", "/chat/completions", chatBody(user("hi"), assistantCalls("a", "b"), toolResult("b"), toolResult("a"), user("more"))},
		{"chat: assistant text and calls", "/chat/completions", chatBody(user("hi"), map[string]any{"role": "assistant", "content": "let me see", "tool_calls": assistantCalls("a")["tool_calls"]}, toolResult("a"))},
		{"chat: developer role and parts", "/chat/completions", chatBody(map[string]any{"role": "developer", "content": []any{map[string]any{"type": "text", "text": "rules"}}}, user("hi"))},
		{"chat: optional parameters", "/chat/completions", map[string]any{"model": "m", "messages": []any{user("hi")}, "temperature": 0.2, "max_completion_tokens": 10, "parallel_tool_calls": true}},
		{"responses: string input", "/responses", map[string]any{"model": "m", "input": "hi"}},
		{"responses: calls with ids and reasoning", "/responses", respBody(user("hi"),
			map[string]any{"type": "reasoning", "id": "rs_1", "summary": []any{}},
			map[string]any{"type": "message", "role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": "ok"}}},
			map[string]any{"type": "function_call", "id": "fc_1", "call_id": "a", "name": "shell", "arguments": "{}", "status": "completed"},
			fnCall("b"), fnOutput("b"), fnOutput("a"))},
		{"responses: strict schema", "/responses", map[string]any{"model": "m", "input": "hi", "tools": []any{map[string]any{"type": "function", "name": "shell", "strict": true, "parameters": map[string]any{
			"type": "object", "additionalProperties": false, "properties": shellSchema["properties"], "required": []any{"command", "timeout_seconds"},
		}}}}},
		{"responses: built-in tool", "/responses", map[string]any{"model": "m", "input": "hi", "tools": []any{map[string]any{"type": "web_search"}}}},
	}
	srv := fakeopenai.New(fakeopenai.Options{Script: func(context.Context, fakeopenai.Call) (fakeopenai.Reply, error) {
		return fakeopenai.Text("fine"), nil
	}})
	defer srv.Close()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if status, out := post(t, srv.URL()+tt.path, tt.body, nil); status != http.StatusOK {
				t.Errorf("status = %d: %v", status, out)
			}
		})
	}
}

func TestAuth(t *testing.T) {
	const key = "sk-right-0123456789"
	srv := fakeopenai.New(fakeopenai.Options{APIKey: key})
	defer srv.Close()
	body := chatBody(user("hi"))
	tests := []struct {
		name   string
		header map[string]string
		status int
		code   any
	}{
		{"no key", nil, 401, nil},
		{"wrong key", map[string]string{"Authorization": "Bearer sk-wrong-0123456789"}, 401, "invalid_api_key"},
		{"not bearer", map[string]string{"Authorization": "Basic " + key}, 401, "invalid_api_key"},
		{"right key", map[string]string{"Authorization": "Bearer " + key}, 200, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, out := post(t, srv.URL()+"/chat/completions", body, tt.header)
			if status != tt.status {
				t.Fatalf("status = %d, want %d (%v)", status, tt.status, out)
			}
			if status == 200 {
				return
			}
			e := errorOf(t, out)
			if e["code"] != tt.code || e["type"] != "invalid_request_error" {
				t.Errorf("error = %v", e)
			}
			if strings.Contains(e["message"].(string), "wrong-0123") {
				t.Errorf("the message echoes the key unmasked: %v", e["message"])
			}
		})
	}
}

func TestUnknownModel(t *testing.T) {
	srv := fakeopenai.New(fakeopenai.Options{Models: []string{"gpt-a", "gpt-b"}})
	defer srv.Close()
	for _, path := range []string{"/chat/completions", "/responses"} {
		t.Run(path, func(t *testing.T) {
			body := map[string]any{"model": "gpt-x", "messages": []any{user("hi")}}
			if path == "/responses" {
				body = map[string]any{"model": "gpt-x", "input": "hi"}
			}
			status, out := post(t, srv.URL()+path, body, nil)
			e := errorOf(t, out)
			if status != 404 || e["code"] != "model_not_found" || !strings.Contains(e["message"].(string), "gpt-x") {
				t.Errorf("status %d, error %v", status, e)
			}
			body["model"] = "gpt-b"
			if status, out := post(t, srv.URL()+path, body, nil); status != 200 {
				t.Errorf("known model: status %d: %v", status, out)
			}
		})
	}
}

func TestPaths(t *testing.T) {
	srv := fakeopenai.New(fakeopenai.Options{})
	defer srv.Close()
	root := strings.TrimSuffix(srv.URL(), "/v1")
	tests := []struct {
		url    string
		body   any
		status int
	}{
		{root + "/v1/chat/completions", chatBody(user("hi")), 200},
		{root + "/chat/completions", chatBody(user("hi")), 200},
		{root + "/v1/responses", map[string]any{"model": "m", "input": "hi"}, 200},
		{root + "/responses", map[string]any{"model": "m", "input": "hi"}, 200},
		{root + "/v1/completions", map[string]any{"model": "m", "prompt": "hi"}, 404},
		{root + "/v2/chat/completions", chatBody(user("hi")), 404},
	}
	for _, tt := range tests {
		t.Run(strings.TrimPrefix(tt.url, root), func(t *testing.T) {
			status, out := post(t, tt.url, tt.body, nil)
			if status != tt.status {
				t.Errorf("status = %d, want %d: %v", status, tt.status, out)
			}
			if status != 200 {
				errorOf(t, out)
			}
		})
	}
	t.Run("GET", func(t *testing.T) {
		resp, err := http.Get(srv.URL() + "/chat/completions")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("status = %d", resp.StatusCode)
		}
	})
	t.Run("not JSON content type", func(t *testing.T) {
		resp, err := http.Post(srv.URL()+"/chat/completions", "text/plain", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("status = %d", resp.StatusCode)
		}
	})
}

func TestReplies(t *testing.T) {
	tests := []struct {
		name   string
		script fakeopenai.Script
		status int
		check  func(t *testing.T, api string, out map[string]any)
	}{
		{
			name:   "rate limit",
			script: reply(fakeopenai.Fail(429, "rate_limit_exceeded")),
			status: 429,
			check: func(t *testing.T, _ string, out map[string]any) {
				if e := errorOf(t, out); e["code"] != "rate_limit_exceeded" || e["type"] != "requests" {
					t.Errorf("error = %v", e)
				}
			},
		},
		{
			name:   "server error",
			script: reply(fakeopenai.Fail(503, "")),
			status: 503,
			check: func(t *testing.T, _ string, out map[string]any) {
				if e := errorOf(t, out); e["code"] != nil || e["type"] != "server_error" {
					t.Errorf("error = %v", e)
				}
			},
		},
		{
			name: "error returned by the script",
			script: func(context.Context, fakeopenai.Call) (fakeopenai.Reply, error) {
				return fakeopenai.Reply{}, fmt.Errorf("wrapped: %w", &fakeopenai.HTTPError{Status: 400, Code: "context_length_exceeded", Param: "messages"})
			},
			status: 400,
			check: func(t *testing.T, _ string, out map[string]any) {
				if e := errorOf(t, out); e["code"] != "context_length_exceeded" || e["param"] != "messages" {
					t.Errorf("error = %v", e)
				}
			},
		},
		{
			name: "script failure",
			script: func(context.Context, fakeopenai.Call) (fakeopenai.Reply, error) {
				return fakeopenai.Reply{}, errors.New("boom")
			},
			status: 500,
			check: func(t *testing.T, _ string, out map[string]any) {
				if e := errorOf(t, out); !strings.Contains(e["message"].(string), "boom") {
					t.Errorf("error = %v", e)
				}
			},
		},
		{
			name:   "tool not offered",
			script: reply(fakeopenai.Invoke("format_disk", nil)),
			status: 500,
			check: func(t *testing.T, _ string, out map[string]any) {
				if e := errorOf(t, out); !strings.Contains(e["message"].(string), `"format_disk"`) {
					t.Errorf("error = %v", e)
				}
			},
		},
		{
			name: "text and tool call, usage counted in words",
			script: reply(fakeopenai.Reply{Text: "two words", ToolCalls: []fakeopenai.ReplyToolCall{
				{Name: "read_file", Arguments: map[string]string{"path": "x"}},
			}}),
			status: 200,
			check: func(t *testing.T, api string, out map[string]any) {
				usage := out["usage"].(map[string]any)
				// in: "three little words"; out: "two words" and `{"path":"x"}`
				in, outTokens := "prompt_tokens", "completion_tokens"
				if api == "responses" {
					in, outTokens = "input_tokens", "output_tokens"
				}
				if usage[in] != 3.0 || usage[outTokens] != 3.0 || usage["total_tokens"] != 6.0 {
					t.Errorf("usage = %v", usage)
				}
				if api == "chat" {
					choice := out["choices"].([]any)[0].(map[string]any)
					msg := choice["message"].(map[string]any)
					if choice["finish_reason"] != "tool_calls" || msg["content"] != "two words" || len(msg["tool_calls"].([]any)) != 1 {
						t.Errorf("choice = %v", choice)
					}
				} else {
					output := out["output"].([]any)
					if len(output) != 2 || output[0].(map[string]any)["type"] != "message" || output[1].(map[string]any)["arguments"] != `{"path":"x"}` {
						t.Errorf("output = %v", output)
					}
				}
			},
		},
		{
			name:   "usage given",
			script: reply(fakeopenai.Reply{Text: "x", Usage: &fakeopenai.Usage{InputTokens: 1000, OutputTokens: 7}}),
			status: 200,
			check: func(t *testing.T, api string, out map[string]any) {
				if total := out["usage"].(map[string]any)["total_tokens"]; total != 1007.0 {
					t.Errorf("total = %v", total)
				}
			},
		},
	}
	for _, tt := range tests {
		srv := fakeopenai.New(fakeopenai.Options{Script: tt.script})
		for _, api := range []string{"chat", "responses"} {
			t.Run(tt.name+"/"+api, func(t *testing.T) {
				path, body := "/chat/completions", chatBody(user("three little words"))
				if api == "responses" {
					path, body = "/responses", respBody(user("three little words"))
				}
				status, out := post(t, srv.URL()+path, body, nil)
				if status != tt.status {
					t.Fatalf("status = %d, want %d: %v", status, tt.status, out)
				}
				tt.check(t, api, out)
			})
		}
		srv.Close()
	}
}

// TestRetryAfter: an error with RetryAfter carries it as the Retry-After
// header, as given, on both APIs, alongside the usual error body; one
// without sends no such header.
func TestRetryAfter(t *testing.T) {
	date := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC).Format(http.TimeFormat)
	tests := []struct {
		name       string
		err        fakeopenai.HTTPError
		wantHeader string
	}{
		{"seconds on a rate limit", fakeopenai.HTTPError{Status: 429, Code: "rate_limit_exceeded", RetryAfter: "2"}, "2"},
		{"a date on an overloaded server", fakeopenai.HTTPError{Status: 503, RetryAfter: date}, date},
		{"none", fakeopenai.HTTPError{Status: 429, Code: "rate_limit_exceeded"}, ""},
	}
	for _, tt := range tests {
		srv := fakeopenai.New(fakeopenai.Options{Script: reply(fakeopenai.Reply{Error: &tt.err})})
		for _, api := range []string{"chat", "responses"} {
			t.Run(tt.name+"/"+api, func(t *testing.T) {
				path, body := "/chat/completions", chatBody(user("hi"))
				if api == "responses" {
					path, body = "/responses", respBody(user("hi"))
				}
				b, err := json.Marshal(body)
				if err != nil {
					t.Fatal(err)
				}
				resp, err := http.Post(srv.URL()+path, "application/json", bytes.NewReader(b))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var out map[string]any
				if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != tt.err.Status {
					t.Errorf("status = %d, want %d", resp.StatusCode, tt.err.Status)
				}
				errorOf(t, out)
				got, present := resp.Header.Get("Retry-After"), len(resp.Header.Values("Retry-After")) > 0
				if got != tt.wantHeader || present != (tt.wantHeader != "") {
					t.Errorf("Retry-After = %q (present %v), want %q", got, present, tt.wantHeader)
				}
			})
		}
		srv.Close()
	}
}

func TestRequests(t *testing.T) {
	srv := fakeopenai.New(fakeopenai.Options{APIKey: "k", Script: reply(fakeopenai.Text("hi"))})
	defer srv.Close()
	post(t, srv.URL()+"/chat/completions", map[string]any{
		"model": "m", "max_tokens": 5, "tools": chatTools,
		"messages": []any{map[string]any{"role": "system", "content": "s"}, user("u"), assistantCalls("c1"), toolResult("c1")},
	}, map[string]string{"Authorization": "Bearer k"})
	post(t, srv.URL()+"/responses", map[string]any{"model": "m", "instructions": "s", "input": "u", "max_output_tokens": 9}, nil)

	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	chat, resp := reqs[0], reqs[1]
	if chat.API != fakeopenai.APIChat || chat.Status != 200 || chat.Path != "/v1/chat/completions" || chat.Header.Get("Authorization") != "Bearer k" {
		t.Errorf("chat request = %+v", chat)
	}
	wantChat := fakeopenai.Call{
		API: fakeopenai.APIChat, Model: "m", MaxOutputTokens: 5, Tools: []string{"shell", "read_file", "write_file"},
		Messages: []fakeopenai.Message{
			{Role: "system", Content: "s"},
			{Role: "user", Content: "u"},
			{Role: "assistant", ToolCalls: []fakeopenai.ToolCall{{ID: "c1", Name: "shell", Arguments: "{}"}}},
			{Role: "tool", Content: "out", ToolCallID: "c1"},
		},
	}
	if !equal(chat.Call, wantChat) {
		t.Errorf("chat call = %+v\nwant %+v", chat.Call, wantChat)
	}
	if resp.API != fakeopenai.APIResponses || resp.Status != 401 {
		t.Errorf("responses request without key = %+v", resp)
	}
	if !json.Valid(chat.Body) {
		t.Errorf("body not recorded: %q", chat.Body)
	}
}

func TestLatency(t *testing.T) {
	srv := fakeopenai.New(fakeopenai.Options{Latency: time.Minute})
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	b, _ := json.Marshal(chatBody(user("hi")))
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL()+"/chat/completions", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("answered despite a minute of latency: %d", resp.StatusCode)
	}
	// Close waits for the handler, which gives up with the client.
	srv.Close()
	if reqs := srv.Requests(); len(reqs) != 1 || reqs[0].Status != 499 {
		t.Errorf("requests = %+v", reqs)
	}
}

func TestTLS(t *testing.T) {
	srv := fakeopenai.New(fakeopenai.Options{TLS: true})
	defer srv.Close()
	if !strings.HasPrefix(srv.URL(), "https://127.0.0.1:") || srv.Certificate() == nil {
		t.Fatalf("URL %s, certificate %v", srv.URL(), srv.Certificate())
	}
	b, _ := json.Marshal(chatBody(user("hi")))
	resp, err := srv.Client().Post(srv.URL()+"/chat/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("status = %d", resp.StatusCode)
	}
}

func reply(r fakeopenai.Reply) fakeopenai.Script {
	return func(context.Context, fakeopenai.Call) (fakeopenai.Reply, error) { return r, nil }
}

func equal(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}
