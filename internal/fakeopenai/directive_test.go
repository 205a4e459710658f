package fakeopenai_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/agentbot/agentbot/internal/fakeopenai"
)

func TestParseDirectives(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    []fakeopenai.Directive
		wantErr string
	}{
		{name: "none", text: "hello there\nhow are you?", want: nil},
		{name: "empty", text: "", want: nil},
		{name: "shell", text: "sh: ls -la | wc -l", want: []fakeopenai.Directive{
			{Line: 1, Tool: "shell", Arguments: `{"command":"ls -la | wc -l","timeout_seconds":60}`},
		}},
		{name: "colons in the command", text: "sh: echo a:b", want: []fakeopenai.Directive{
			{Line: 1, Tool: "shell", Arguments: `{"command":"echo a:b","timeout_seconds":60}`},
		}},
		{name: "sleep", text: "sleep: 5", want: []fakeopenai.Directive{
			{Line: 1, Tool: "shell", Arguments: `{"command":"sleep 5","timeout_seconds":65}`},
		}},
		{name: "fractional sleep", text: "sleep: 0.5", want: []fakeopenai.Directive{
			{Line: 1, Tool: "shell", Arguments: `{"command":"sleep 0.5","timeout_seconds":61}`},
		}},
		{name: "read", text: "read:  dir/a b.txt ", want: []fakeopenai.Directive{
			{Line: 1, Tool: "read_file", Arguments: `{"path":"dir/a b.txt"}`},
		}},
		{name: "write", text: "write: hello.py <<< print('hi')\\nprint(\"x\")\\n", want: []fakeopenai.Directive{
			{Line: 1, Tool: "write_file", Arguments: `{"path":"hello.py","content":"print('hi')\nprint(\"x\")\n"}`},
		}},
		{name: "write escapes", text: `write: a.txt <<< tab\there\\n stays \q`, want: []fakeopenai.Directive{
			{Line: 1, Tool: "write_file", Arguments: `{"path":"a.txt","content":"tab\there\\n stays \\q"}`},
		}},
		{name: "write empty", text: "write: empty.txt <<<", want: []fakeopenai.Directive{
			{Line: 1, Tool: "write_file", Arguments: `{"path":"empty.txt","content":""}`},
		}},
		{name: "write keeps inner spaces", text: "write: s.txt <<<  two", want: []fakeopenai.Directive{
			{Line: 1, Tool: "write_file", Arguments: `{"path":"s.txt","content":" two"}`},
		}},
		{
			name: "mixed with prose",
			text: "Please do this:\r\n  sh: make test\nthen\n\tread: out.log\nnote: not a directive\nwrite: b <<< x",
			want: []fakeopenai.Directive{
				{Line: 2, Tool: "shell", Arguments: `{"command":"make test","timeout_seconds":60}`},
				{Line: 4, Tool: "read_file", Arguments: `{"path":"out.log"}`},
				{Line: 6, Tool: "write_file", Arguments: `{"path":"b","content":"x"}`},
			},
		},
		{name: "case-sensitive", text: "SH: ls\nRead: x", want: nil},
		{name: "empty command", text: "ok\nsh:   ", wantErr: "line 2: sh: needs a command"},
		{name: "empty path", text: "read:", wantErr: "line 1: read: needs a path"},
		{name: "write without marker", text: "write: a.txt hello", wantErr: `line 1: write: needs "<path> <<< <content>"`},
		{name: "write without path", text: "write: <<< hello", wantErr: `line 1: write: needs`},
		{name: "sleep not a number", text: "sleep: soon", wantErr: `line 1: sleep: needs a number of seconds, got "soon"`},
		{name: "sleep negative", text: "sleep: -1", wantErr: "line 1: sleep: needs a number"},
		{name: "sleep injection", text: "sleep: 1; rm -rf /", wantErr: "line 1: sleep: needs a number"},
		{name: "sleep hex", text: "sleep: 0x10", wantErr: "line 1: sleep: needs a number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := fakeopenai.ParseDirectives(tt.text)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// TestDirectiveScript drives the script directly through a conversation.
func TestDirectiveScript(t *testing.T) {
	script := fakeopenai.DirectiveScript()
	tools := []string{"shell", "read_file", "write_file"}
	ctx := context.Background()

	t.Run("echo", func(t *testing.T) {
		r, err := script(ctx, fakeopenai.Call{Tools: tools, Messages: []fakeopenai.Message{
			{Role: "user", Content: "sh: old directive"},
			{Role: "assistant", Content: "old answer"},
			{Role: "user", Content: "just chatting"},
		}})
		if err != nil || r.Text != "echo: just chatting" || len(r.ToolCalls) != 0 {
			t.Errorf("reply = %+v, %v", r, err)
		}
	})
	t.Run("malformed", func(t *testing.T) {
		r, _ := script(ctx, fakeopenai.Call{Tools: tools, Messages: []fakeopenai.Message{{Role: "user", Content: "write: x"}}})
		if !strings.HasPrefix(r.Text, "directive error: line 1: write:") {
			t.Errorf("reply = %q", r.Text)
		}
	})
	t.Run("tool not offered", func(t *testing.T) {
		r, _ := script(ctx, fakeopenai.Call{Tools: []string{"shell"}, Messages: []fakeopenai.Message{{Role: "user", Content: "read: x"}}})
		if !strings.HasPrefix(r.Text, `cannot run line 1: the request offers no "read_file" tool`) || len(r.ToolCalls) != 0 {
			t.Errorf("reply = %+v", r)
		}
	})
	t.Run("steps", func(t *testing.T) {
		call := fakeopenai.Call{Tools: tools, Messages: []fakeopenai.Message{
			{Role: "system", Content: "be brief"},
			{Role: "user", Content: "sh: echo one\nwrite: f.txt <<< a\\nb\nread: f.txt"},
		}}
		wantCalls := []struct{ name, args, output string }{
			{"shell", `{"command":"echo one","timeout_seconds":60}`, "one\n"},
			{"write_file", `{"path":"f.txt","content":"a\nb"}`, "wrote 3 bytes"},
			{"read_file", `{"path":"f.txt"}`, "a\nb"},
		}
		for i, want := range wantCalls {
			r, err := script(ctx, call)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.ToolCalls) != 1 || r.ToolCalls[0].Name != want.name {
				t.Fatalf("step %d: reply = %+v", i, r)
			}
			args, _ := json.Marshal(r.ToolCalls[0].Arguments)
			if string(args) != want.args {
				t.Errorf("step %d: args = %s, want %s", i, args, want.args)
			}
			id := fmt.Sprintf("call_%d", i)
			call.Messages = append(call.Messages,
				fakeopenai.Message{Role: "assistant", ToolCalls: []fakeopenai.ToolCall{{ID: id, Name: want.name, Arguments: string(args)}}},
				fakeopenai.Message{Role: "tool", ToolCallID: id, Content: want.output})
		}
		r, err := script(ctx, call)
		if err != nil {
			t.Fatal(err)
		}
		if want := "done.\n[shell] one\n\n[write_file] wrote 3 bytes\n[read_file] a\nb"; r.Text != want || len(r.ToolCalls) != 0 {
			t.Errorf("final = %q, want %q", r.Text, want)
		}
	})
}

// TestDirectiveConversation runs a multi-step conversation over HTTP in
// each API's wire format, as a client that knows nothing of the fake would.
func TestDirectiveConversation(t *testing.T) {
	srv := fakeopenai.New(fakeopenai.Options{})
	defer srv.Close()
	text := "set up:\nwrite: hello.sh <<< #!/bin/sh\\necho hello\nsh: sh hello.sh\nsleep: 1"
	wantArgs := []string{
		`{"path":"hello.sh","content":"#!/bin/sh\necho hello"}`,
		`{"command":"sh hello.sh","timeout_seconds":60}`,
		`{"command":"sleep 1","timeout_seconds":61}`,
	}
	outputs := []string{"ok", "hello", ""}

	t.Run("chat", func(t *testing.T) {
		messages := []any{
			map[string]any{"role": "system", "content": "You run commands."},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": text}}},
		}
		for step := 0; ; step++ {
			status, resp := post(t, srv.URL()+"/chat/completions", map[string]any{
				"model": "m", "messages": messages, "tools": chatTools,
			}, nil)
			if status != 200 {
				t.Fatalf("step %d: status %d: %v", step, status, resp)
			}
			msg := resp["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
			finish := resp["choices"].([]any)[0].(map[string]any)["finish_reason"]
			calls, _ := msg["tool_calls"].([]any)
			if step == len(wantArgs) {
				if finish != "stop" || msg["content"] != "done.\n[write_file] ok\n[shell] hello\n[shell] " {
					t.Fatalf("final: finish %v, content %q", finish, msg["content"])
				}
				return
			}
			if finish != "tool_calls" || len(calls) != 1 || msg["content"] != nil {
				t.Fatalf("step %d: finish %v, message %v", step, finish, msg)
			}
			fn := calls[0].(map[string]any)["function"].(map[string]any)
			if fn["arguments"] != wantArgs[step] {
				t.Errorf("step %d: arguments %v, want %s", step, fn["arguments"], wantArgs[step])
			}
			id := calls[0].(map[string]any)["id"]
			messages = append(messages, msg, map[string]any{"role": "tool", "tool_call_id": id, "content": outputs[step]})
		}
	})

	t.Run("responses", func(t *testing.T) {
		input := []any{map[string]any{"role": "user", "content": text}}
		for step := 0; ; step++ {
			status, resp := post(t, srv.URL()+"/responses", map[string]any{
				"model": "m", "instructions": "You run commands.", "input": input, "tools": responsesTools, "store": false,
			}, nil)
			if status != 200 {
				t.Fatalf("step %d: status %d: %v", step, status, resp)
			}
			output := resp["output"].([]any)
			item := output[0].(map[string]any)
			if step == len(wantArgs) {
				content := item["content"].([]any)[0].(map[string]any)
				if item["type"] != "message" || content["text"] != "done.\n[write_file] ok\n[shell] hello\n[shell] " {
					t.Fatalf("final: %v", item)
				}
				return
			}
			if len(output) != 1 || item["type"] != "function_call" || item["arguments"] != wantArgs[step] {
				t.Fatalf("step %d: output %v", step, output)
			}
			input = append(input, item, map[string]any{"type": "function_call_output", "call_id": item["call_id"], "output": outputs[step]})
		}
	})
}
