package fakeopenai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/agentbot/agentbot/internal/fakeopenai"
)

// sdkOptions points openai-go at srv, as agentflow/llm does: no retries
// (an error must show at once), nothing from the environment.
func sdkOptions(srv *fakeopenai.Server) []option.RequestOption {
	return []option.RequestOption{
		option.WithBaseURL(srv.URL()),
		option.WithHTTPClient(srv.Client()),
		option.WithMaxRetries(0),
		option.WithAPIKey("sk-test-key"),
	}
}

func sdkChatParams(text string, includeUsage bool) openai.ChatCompletionNewParams {
	p := openai.ChatCompletionNewParams{
		Model:    "gpt-test",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)},
		Tools: []openai.ChatCompletionToolUnionParam{
			openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "shell", Parameters: shellSchema}),
			openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "read_file"}),
		},
	}
	if includeUsage {
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	}
	return p
}

func sdkResponseParams(text string) responses.ResponseNewParams {
	return responses.ResponseNewParams{
		Model: "gpt-test",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(text)},
		Tools: []responses.ToolUnionParam{
			{OfFunction: &responses.FunctionToolParam{Name: "shell", Parameters: shellSchema, Strict: openai.Bool(false)}},
			{OfFunction: &responses.FunctionToolParam{Name: "read_file", Strict: openai.Bool(false)}},
		},
	}
}

// readChat reads a chat stream to its end, accumulating the chunks.
func readChat(t *testing.T, stream *ssestream.Stream[openai.ChatCompletionChunk]) ([]openai.ChatCompletionChunk, *openai.ChatCompletionAccumulator, error) {
	t.Helper()
	defer stream.Close()
	var (
		chunks []openai.ChatCompletionChunk
		acc    openai.ChatCompletionAccumulator
	)
	for stream.Next() {
		chunk := stream.Current()
		if !acc.AddChunk(chunk) {
			t.Errorf("the accumulator refused chunk %d: %s", len(chunks), chunk.RawJSON())
		}
		chunks = append(chunks, chunk)
	}
	return chunks, &acc, stream.Err()
}

// readResponses reads a Responses stream to its end.
func readResponses(stream *ssestream.Stream[responses.ResponseStreamEventUnion]) ([]responses.ResponseStreamEventUnion, error) {
	defer stream.Close()
	var events []responses.ResponseStreamEventUnion
	for stream.Next() {
		events = append(events, stream.Current())
	}
	return events, stream.Err()
}

// rawKeys returns the top-level keys of a JSON object and their values.
func rawKeys(t *testing.T, raw string) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		t.Fatalf("not a JSON object: %q: %v", raw, err)
	}
	return m
}

func runeCount(s string) int { return len([]rune(s)) }

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// TestStreamChat drives the fake with openai-go's streaming client and
// its ChatCompletionAccumulator: the assembled message is the scripted
// one, made of several deltas of StreamChunk runes.
func TestStreamChat(t *testing.T) {
	shell := fakeopenai.ReplyToolCall{Name: "shell", Arguments: map[string]any{"command": "ls -la /tmp", "timeout_seconds": 60}}
	read := fakeopenai.ReplyToolCall{Name: "read_file", Arguments: map[string]any{"path": "/etc/hosts"}}
	tests := []struct {
		name       string
		reply      fakeopenai.Reply
		chunk      int // Options.StreamChunk
		usage      bool
		wantFinish string
	}{
		{name: "text in pieces", reply: fakeopenai.Text("Hello, streaming world!"), chunk: 5, wantFinish: "stop"},
		{name: "default piece size", reply: fakeopenai.Text("four runes each, by default"), wantFinish: "stop"},
		{name: "runes kept whole", reply: fakeopenai.Text("héllo wörld ✓ 日本語のテキスト"), chunk: 3, wantFinish: "stop"},
		{name: "empty text", reply: fakeopenai.Text(""), wantFinish: "stop"},
		{name: "tool calls", reply: fakeopenai.Reply{ToolCalls: []fakeopenai.ReplyToolCall{shell, read}}, chunk: 6, wantFinish: "tool_calls"},
		{name: "text then a tool call", reply: fakeopenai.Reply{Text: "Let me look.", ToolCalls: []fakeopenai.ReplyToolCall{read}}, chunk: 4, wantFinish: "tool_calls"},
		{name: "truncated", reply: fakeopenai.Reply{Text: "cut short by max tokens", Truncated: true}, wantFinish: "length"},
		{name: "usage counted", reply: fakeopenai.Text("two words"), usage: true, wantFinish: "stop"},
		{name: "usage given", reply: fakeopenai.Reply{Text: "x", Usage: &fakeopenai.Usage{InputTokens: 1000, OutputTokens: 7}}, usage: true, wantFinish: "stop"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := fakeopenai.New(fakeopenai.Options{Script: reply(tt.reply), StreamChunk: tt.chunk, SequentialIDs: true})
			defer srv.Close()
			chat := openai.NewChatCompletionService(sdkOptions(srv)...)
			chunks, acc, err := readChat(t, chat.NewStreaming(context.Background(), sdkChatParams("three little words", tt.usage)))
			if err != nil {
				t.Fatalf("stream: %v", err)
			}
			if len(chunks) < 2 {
				t.Fatalf("%d chunks", len(chunks))
			}
			chunkSize := tt.chunk
			if chunkSize == 0 {
				chunkSize = 4
			}

			// The envelope: one ID, the chunk object, the role first, the
			// finish reason once, in the last chunk with choices.
			var finishes []string
			lastWithChoices := -1
			for i, c := range chunks {
				if c.ID != chunks[0].ID || c.ID == "" || c.Object != "chat.completion.chunk" || c.Model != "gpt-test" || c.Created != chunks[0].Created {
					t.Errorf("chunk %d: id %q object %q model %q created %d", i, c.ID, c.Object, c.Model, c.Created)
				}
				if len(c.Choices) > 0 {
					lastWithChoices = i
					if fr := c.Choices[0].FinishReason; fr != "" {
						finishes = append(finishes, fr)
					}
				}
			}
			if len(chunks[0].Choices) != 1 || chunks[0].Choices[0].Delta.Role != "assistant" {
				t.Errorf("first chunk = %s, want the assistant role", chunks[0].RawJSON())
			}
			if len(finishes) != 1 || finishes[0] != tt.wantFinish || chunks[lastWithChoices].Choices[0].FinishReason != tt.wantFinish {
				t.Errorf("finish reasons %v, want one %q in the last chunk with choices", finishes, tt.wantFinish)
			}

			// The text: assembled from as many deltas as it has pieces.
			msg := acc.Choices[0].Message
			if msg.Content != tt.reply.Text {
				t.Errorf("content = %q, want %q", msg.Content, tt.reply.Text)
			}
			if acc.Choices[0].FinishReason != tt.wantFinish {
				t.Errorf("accumulated finish reason = %q", acc.Choices[0].FinishReason)
			}
			var textDeltas int
			argDeltas := map[int64]int{}
			for _, c := range chunks {
				for _, ch := range c.Choices {
					if ch.Delta.Content != "" {
						textDeltas++
						if n := runeCount(ch.Delta.Content); n > chunkSize {
							t.Errorf("delta %q has %d runes, more than %d", ch.Delta.Content, n, chunkSize)
						}
					}
					for _, tc := range ch.Delta.ToolCalls {
						if tc.Function.Arguments != "" {
							argDeltas[tc.Index]++
						}
					}
				}
			}
			if want := ceilDiv(runeCount(tt.reply.Text), chunkSize); textDeltas != want {
				t.Errorf("%d text deltas, want %d", textDeltas, want)
			}

			// The tool calls: IDs, names and arguments, the arguments in
			// pieces.
			if len(msg.ToolCalls) != len(tt.reply.ToolCalls) {
				t.Fatalf("%d tool calls, want %d: %+v", len(msg.ToolCalls), len(tt.reply.ToolCalls), msg.ToolCalls)
			}
			for i, want := range tt.reply.ToolCalls {
				got := msg.ToolCalls[i]
				wantArgs, err := json.Marshal(want.Arguments)
				if err != nil {
					t.Fatal(err)
				}
				wantID := fmt.Sprintf("call_%d", i+1)
				if got.ID != wantID || got.Type != "function" || got.Function.Name != want.Name || got.Function.Arguments != string(wantArgs) {
					t.Errorf("tool call %d = %+v, want %s %s(%s)", i, got, wantID, want.Name, wantArgs)
				}
				if n, want := argDeltas[int64(i)], ceilDiv(len(wantArgs), chunkSize); n != want {
					t.Errorf("tool call %d: %d argument deltas, want %d", i, n, want)
				}
			}

			// The usage: only with include_usage, in a last chunk without
			// choices; null before.
			last := chunks[len(chunks)-1]
			for i, c := range chunks {
				u, present := rawKeys(t, c.RawJSON())["usage"]
				switch {
				case !tt.usage && present:
					t.Errorf("chunk %d has a usage without include_usage: %s", i, c.RawJSON())
				case tt.usage && i < len(chunks)-1 && string(u) != "null":
					t.Errorf("chunk %d: usage %s, want null", i, u)
				}
			}
			if tt.usage {
				in, out := int64(3), int64(len(strings.Fields(tt.reply.Text)))
				if tt.reply.Usage != nil {
					in, out = tt.reply.Usage.InputTokens, tt.reply.Usage.OutputTokens
				}
				if len(last.Choices) != 0 || !last.JSON.Usage.Valid() {
					t.Errorf("last chunk = %s, want a usage without choices", last.RawJSON())
				}
				if u := acc.Usage; u.PromptTokens != in || u.CompletionTokens != out || u.TotalTokens != in+out {
					t.Errorf("usage = %+v, want %d in, %d out", u, in, out)
				}
			}
		})
	}
}

// TestStreamWire checks the bytes: the media type, each event a "data:"
// line (named by an "event:" line in the Responses API) and a blank line,
// Chat Completions ending with [DONE] and the Responses API with
// response.completed; obfuscation padding unless turned off; the request
// recorded as streamed.
func TestStreamWire(t *testing.T) {
	tests := []struct {
		name        string
		path        string
		body        map[string]any
		obfuscation bool
	}{
		{"chat", "/chat/completions", map[string]any{"model": "m", "messages": []any{user("hi")}, "stream": true}, true},
		{"chat without obfuscation", "/chat/completions", map[string]any{"model": "m", "messages": []any{user("hi")}, "stream": true,
			"stream_options": map[string]any{"include_obfuscation": false, "include_usage": true}}, false},
		{"responses", "/responses", map[string]any{"model": "m", "input": "hi", "stream": true}, true},
		{"responses without obfuscation", "/responses", map[string]any{"model": "m", "input": "hi", "stream": true,
			"stream_options": map[string]any{"include_obfuscation": false}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := fakeopenai.New(fakeopenai.Options{Script: reply(fakeopenai.Text("a reply long enough for several deltas")), StreamChunk: 8})
			defer srv.Close()
			b, err := json.Marshal(tt.body)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.Post(srv.URL()+tt.path, "application/json", bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("reading the stream: %v", err)
			}
			if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); resp.StatusCode != 200 || mt != "text/event-stream" {
				t.Fatalf("status %d, Content-Type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), raw)
			}
			if !bytes.HasSuffix(raw, []byte("\n\n")) {
				t.Errorf("stream does not end with a blank line: %q", raw)
			}
			blocks := strings.Split(strings.TrimSuffix(string(raw), "\n\n"), "\n\n")
			chat := tt.path == "/chat/completions"
			if chat {
				if blocks[len(blocks)-1] != "data: [DONE]" {
					t.Errorf("last event %q, want data: [DONE]", blocks[len(blocks)-1])
				}
				blocks = blocks[:len(blocks)-1]
			}
			var deltas, padded int
			for i, block := range blocks {
				data := block
				if !chat {
					name, rest, ok := strings.Cut(block, "\n")
					typ, _ := strings.CutPrefix(name, "event: ")
					if !ok || typ == name {
						t.Fatalf("event %d has no event line: %q", i, block)
					}
					data = rest
					if got := rawKeys(t, strings.TrimPrefix(data, "data: "))["type"]; string(got) != `"`+typ+`"` {
						t.Errorf("event %d named %q has type %s", i, typ, got)
					}
					if i == len(blocks)-1 && typ != "response.completed" {
						t.Errorf("last event %q, want response.completed", typ)
					}
				}
				payload, ok := strings.CutPrefix(data, "data: ")
				if !ok || strings.Contains(payload, "\n") {
					t.Fatalf("event %d is not one data line: %q", i, block)
				}
				fields := rawKeys(t, payload)
				if chat || bytes.HasSuffix(fields["type"], []byte(`.delta"`)) {
					deltas++
				}
				if _, ok := fields["obfuscation"]; ok {
					padded++
				}
			}
			want := deltas
			if !tt.obfuscation {
				want = 0
			}
			if deltas == 0 || padded != want {
				t.Errorf("%d of %d delta events padded, want %d", padded, deltas, want)
			}

			srv.Close()
			reqs := srv.Requests()
			if len(reqs) != 1 || reqs[0].Status != 200 || !reqs[0].Call.Stream {
				t.Errorf("recorded %+v, want one streamed call answered 200", reqs)
			}
		})
	}
}

// TestStreamResponses drives the fake with openai-go's Responses streaming
// client: numbered events from response.created to response.completed,
// whose deltas add up to the final response's text and arguments.
func TestStreamResponses(t *testing.T) {
	tests := []struct {
		name      string
		reply     fakeopenai.Reply
		wantLast  string
		wantState string
	}{
		{"text", fakeopenai.Text("Hello from the Responses API!"), "response.completed", "completed"},
		{"tool calls", fakeopenai.Reply{Text: "Looking.", ToolCalls: []fakeopenai.ReplyToolCall{
			{Name: "shell", Arguments: map[string]any{"command": "uname -a"}},
			{Name: "read_file", Arguments: map[string]any{"path": "/etc/os-release"}},
		}}, "response.completed", "completed"},
		{"truncated", fakeopenai.Reply{Text: "cut short", Truncated: true}, "response.incomplete", "incomplete"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := fakeopenai.New(fakeopenai.Options{Script: reply(tt.reply), StreamChunk: 3, SequentialIDs: true})
			defer srv.Close()
			rs := responses.NewResponseService(sdkOptions(srv)...)
			events, err := readResponses(rs.NewStreaming(context.Background(), sdkResponseParams("three little words")))
			if err != nil {
				t.Fatalf("stream: %v", err)
			}
			if len(events) < 4 {
				t.Fatalf("%d events", len(events))
			}
			for i, e := range events {
				if e.SequenceNumber != int64(i) {
					t.Errorf("event %d (%s) has sequence_number %d", i, e.Type, e.SequenceNumber)
				}
			}
			first, last := events[0], events[len(events)-1]
			if first.Type != "response.created" || first.Response.Status != "in_progress" || len(first.Response.Output) != 0 || events[1].Type != "response.in_progress" {
				t.Errorf("first events %s, %s (status %q)", first.Type, events[1].Type, first.Response.Status)
			}
			final := last.Response
			if last.Type != tt.wantLast || string(final.Status) != tt.wantState || final.ID != first.Response.ID {
				t.Fatalf("last event %s, status %q, id %q (created %q)", last.Type, final.Status, final.ID, first.Response.ID)
			}
			if final.OutputText() != tt.reply.Text {
				t.Errorf("final text %q, want %q", final.OutputText(), tt.reply.Text)
			}
			if final.Usage.TotalTokens == 0 {
				t.Errorf("final response without usage: %s", final.RawJSON())
			}

			// Deltas add up, item by item, to the final output.
			text := map[string]string{}
			args := map[string]string{}
			var textDeltas int
			added := map[string]responses.ResponseOutputItemUnion{}
			for _, e := range events {
				switch e.Type {
				case "response.output_text.delta":
					text[e.ItemID] += e.Delta
					textDeltas++
				case "response.output_text.done":
					if e.Text != text[e.ItemID] {
						t.Errorf("output_text.done %q, deltas %q", e.Text, text[e.ItemID])
					}
				case "response.function_call_arguments.delta":
					args[e.ItemID] += e.Delta
				case "response.function_call_arguments.done":
					if e.Arguments != args[e.ItemID] {
						t.Errorf("function_call_arguments.done %q, deltas %q", e.Arguments, args[e.ItemID])
					}
				case "response.output_item.added":
					added[e.Item.ID] = e.Item
				}
			}
			if want := ceilDiv(runeCount(tt.reply.Text), 3); textDeltas != want {
				t.Errorf("%d text deltas, want %d", textDeltas, want)
			}
			var calls int
			for _, item := range final.Output {
				a, ok := added[item.ID]
				if !ok || a.Type != item.Type {
					t.Errorf("final item %s (%s) was not added in the stream", item.ID, item.Type)
				}
				switch item.Type {
				case "message":
					if text[item.ID] != tt.reply.Text {
						t.Errorf("message %s: deltas %q", item.ID, text[item.ID])
					}
				case "function_call":
					want := tt.reply.ToolCalls[calls]
					wantArgs, _ := json.Marshal(want.Arguments)
					wantID := fmt.Sprintf("call_%d", calls+1)
					calls++
					if item.CallID != wantID || a.CallID != wantID || item.Name != want.Name || a.Name != want.Name ||
						item.Arguments.OfString != string(wantArgs) || args[item.ID] != string(wantArgs) {
						t.Errorf("call %s: %s %s(%s), added as %s, deltas %q; want %s %s(%s)",
							item.ID, item.CallID, item.Name, item.Arguments.OfString, a.CallID, args[item.ID], wantID, want.Name, wantArgs)
					}
				}
			}
			if calls != len(tt.reply.ToolCalls) {
				t.Errorf("%d function calls in the final output, want %d", calls, len(tt.reply.ToolCalls))
			}
		})
	}
}

// TestStreamCut: a stream cut mid-way is an unexpected EOF for the client,
// after the events before the cut, with either API; the recorded status
// is still the 200 already sent.
func TestStreamCut(t *testing.T) {
	tests := []struct {
		name     string
		cutAfter int
		want     int // events the client sees
	}{
		{"after three events", 3, 3},
		{"just before the end", 1000, -1}, // all but the end
	}
	for _, tt := range tests {
		for _, api := range []string{"chat", "responses"} {
			t.Run(tt.name+"/"+api, func(t *testing.T) {
				r := fakeopenai.Text("a reply cut short somewhere in the middle")
				r.Stream.CutAfter = tt.cutAfter
				srv := fakeopenai.New(fakeopenai.Options{Script: reply(r)})
				defer srv.Close()
				var (
					n, total int
					err      error
				)
				if api == "chat" {
					var chunks []openai.ChatCompletionChunk
					chat := openai.NewChatCompletionService(sdkOptions(srv)...)
					chunks, _, err = readChat(t, chat.NewStreaming(context.Background(), sdkChatParams("hi", false)))
					// role, 11 pieces, finish
					n, total = len(chunks), 1+ceilDiv(runeCount(r.Text), 4)+1
				} else {
					var events []responses.ResponseStreamEventUnion
					rs := responses.NewResponseService(sdkOptions(srv)...)
					events, err = readResponses(rs.NewStreaming(context.Background(), sdkResponseParams("hi")))
					for _, e := range events {
						if e.Type == "response.completed" {
							t.Errorf("a cut stream got to response.completed")
						}
					}
					// created, in_progress, item added, part added, 11
					// pieces, text done, part done, item done
					n, total = len(events), 2+2+ceilDiv(runeCount(r.Text), 4)+3
				}
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Errorf("error = %v, want an unexpected EOF", err)
				}
				want := tt.want
				if want < 0 {
					want = total
				}
				if n != want {
					t.Errorf("%d events before the cut, want %d", n, want)
				}
				srv.Close()
				if reqs := srv.Requests(); len(reqs) != 1 || reqs[0].Status != 200 {
					t.Errorf("recorded %+v", reqs)
				}
			})
		}
	}
}

// TestStreamError: an error once the stream has started comes in-band, as
// OpenAI sends it: an error data line that openai-go reports as a
// StreamError in Chat Completions, an "error" event in the Responses API.
func TestStreamError(t *testing.T) {
	failure := &fakeopenai.HTTPError{Status: 500, Type: "server_error", Code: "server_error", Message: "The model crashed mid-answer."}
	for _, after := range []int{0, 2} {
		for _, api := range []string{"chat", "responses"} {
			t.Run(fmt.Sprintf("%s/after %d", api, after), func(t *testing.T) {
				r := fakeopenai.Text("never finished")
				r.Stream = fakeopenai.Streaming{Error: failure, ErrorAfter: after}
				srv := fakeopenai.New(fakeopenai.Options{Script: reply(r)})
				defer srv.Close()
				if api == "chat" {
					chat := openai.NewChatCompletionService(sdkOptions(srv)...)
					chunks, _, err := readChat(t, chat.NewStreaming(context.Background(), sdkChatParams("hi", false)))
					var serr *ssestream.StreamError
					if !errors.As(err, &serr) || !strings.Contains(serr.Message, failure.Message) || !strings.Contains(serr.Message, `"server_error"`) {
						t.Fatalf("error = %v, want a stream error with %q", err, failure.Message)
					}
					if len(chunks) != after {
						t.Errorf("%d chunks before the error, want %d", len(chunks), after)
					}
					return
				}
				rs := responses.NewResponseService(sdkOptions(srv)...)
				events, err := readResponses(rs.NewStreaming(context.Background(), sdkResponseParams("hi")))
				if err != nil {
					t.Fatalf("stream: %v", err)
				}
				if len(events) != after+1 {
					t.Fatalf("%d events, want %d and the error", len(events), after)
				}
				e := events[after]
				if e.Type != "error" || e.Code != "server_error" || e.Message != failure.Message || e.SequenceNumber != int64(after) {
					t.Errorf("last event = %s", e.RawJSON())
				}
			})
		}
	}
}

// TestStreamErrorBeforeStart: an error reply to a streaming request is an
// ordinary HTTP error, status, body and Retry-After, as without streaming.
func TestStreamErrorBeforeStart(t *testing.T) {
	r := fakeopenai.Reply{Error: &fakeopenai.HTTPError{Status: 429, Code: "rate_limit_exceeded", RetryAfter: "2"}}
	srv := fakeopenai.New(fakeopenai.Options{Script: reply(r)})
	defer srv.Close()
	for _, api := range []string{"chat", "responses"} {
		t.Run(api, func(t *testing.T) {
			var err error
			if api == "chat" {
				chat := openai.NewChatCompletionService(sdkOptions(srv)...)
				_, _, err = readChat(t, chat.NewStreaming(context.Background(), sdkChatParams("hi", true)))
			} else {
				rs := responses.NewResponseService(sdkOptions(srv)...)
				_, err = readResponses(rs.NewStreaming(context.Background(), sdkResponseParams("hi")))
			}
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("error = %v, want an API error", err)
			}
			if apiErr.StatusCode != 429 || apiErr.Code != "rate_limit_exceeded" || apiErr.Type != "requests" || apiErr.Response.Header.Get("Retry-After") != "2" {
				t.Errorf("error = %d %s %s, Retry-After %q", apiErr.StatusCode, apiErr.Type, apiErr.Code, apiErr.Response.Header.Get("Retry-After"))
			}
		})
	}
}

// TestStreamSlow: a delay between events or a stall holds the rest of the
// stream back until the client gives up, which the server records as 499.
// The client cancels as soon as it has the events that come first, so no
// timing decides the outcome.
func TestStreamSlow(t *testing.T) {
	tests := []struct {
		name   string
		opts   fakeopenai.Options
		stream fakeopenai.Streaming
		before int // events that come before the pause
	}{
		{name: "delay of the reply", stream: fakeopenai.Streaming{Delay: time.Hour}, before: 1},
		{name: "delay of the server", opts: fakeopenai.Options{StreamDelay: time.Hour}, before: 1},
		{name: "stall", stream: fakeopenai.Streaming{StallAfter: 3}, before: 3},
	}
	for _, tt := range tests {
		for _, api := range []string{"chat", "responses"} {
			t.Run(tt.name+"/"+api, func(t *testing.T) {
				r := fakeopenai.Text("a slow answer of several pieces")
				r.Stream = tt.stream
				opts := tt.opts
				opts.Script = reply(r)
				srv := fakeopenai.New(opts)
				defer srv.Close()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()

				var next func() bool
				var errf func() error
				if api == "chat" {
					chat := openai.NewChatCompletionService(sdkOptions(srv)...)
					s := chat.NewStreaming(ctx, sdkChatParams("hi", false))
					defer s.Close()
					next, errf = s.Next, s.Err
				} else {
					rs := responses.NewResponseService(sdkOptions(srv)...)
					s := rs.NewStreaming(ctx, sdkResponseParams("hi"))
					defer s.Close()
					next, errf = s.Next, s.Err
				}
				n := 0
				for n < tt.before && next() {
					n++
				}
				if n != tt.before {
					t.Fatalf("%d events, want %d before the pause: %v", n, tt.before, errf())
				}
				cancel()
				for next() {
					n++
				}
				if n != tt.before {
					t.Errorf("%d events, want %d: the pause let more through", n, tt.before)
				}
				if err := errf(); !errors.Is(err, context.Canceled) {
					t.Errorf("error = %v, want the cancellation", err)
				}
				// Close waits for the handler, which gives up with the
				// client.
				srv.Close()
				if reqs := srv.Requests(); len(reqs) != 1 || reqs[0].Status != 499 {
					t.Errorf("recorded %+v, want status 499", reqs)
				}
			})
		}
	}
}

// TestStreamOptions checks stream_options as OpenAI does: only with
// stream, an object of the API's boolean settings.
func TestStreamOptions(t *testing.T) {
	msgs := []any{user("hi")}
	tests := []struct {
		name  string
		path  string
		body  map[string]any
		param any
		code  any
		msg   string
	}{
		{"chat: without stream", "/chat/completions", map[string]any{"model": "m", "messages": msgs, "stream_options": map[string]any{"include_usage": true}},
			"stream_options", nil, "The 'stream_options' parameter is only allowed when 'stream' is enabled."},
		{"chat: with stream false", "/chat/completions", map[string]any{"model": "m", "messages": msgs, "stream": false, "stream_options": map[string]any{}},
			"stream_options", nil, "only allowed when 'stream' is enabled"},
		{"chat: not an object", "/chat/completions", map[string]any{"model": "m", "messages": msgs, "stream": true, "stream_options": "usage"},
			"stream_options", "invalid_type", "expected an object, but got a string"},
		{"chat: unknown setting", "/chat/completions", map[string]any{"model": "m", "messages": msgs, "stream": true, "stream_options": map[string]any{"include_everything": true}},
			"stream_options.include_everything", "unknown_parameter", "Unknown parameter: 'stream_options.include_everything'."},
		{"chat: not a boolean", "/chat/completions", map[string]any{"model": "m", "messages": msgs, "stream": true, "stream_options": map[string]any{"include_usage": "yes"}},
			"stream_options.include_usage", "invalid_type", "expected a boolean, but got a string"},
		{"responses: without stream", "/responses", map[string]any{"model": "m", "input": "hi", "stream_options": map[string]any{"include_obfuscation": false}},
			"stream_options", nil, "only allowed when 'stream' is enabled"},
		{"responses: no include_usage", "/responses", map[string]any{"model": "m", "input": "hi", "stream": true, "stream_options": map[string]any{"include_usage": true}},
			"stream_options.include_usage", "unknown_parameter", "Unknown parameter"},
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
			if e["type"] != "invalid_request_error" || e["param"] != tt.param || e["code"] != tt.code {
				t.Errorf("error = %v, want param %v code %v", e, tt.param, tt.code)
			}
			if msg := e["message"].(string); !strings.Contains(msg, tt.msg) {
				t.Errorf("message = %q, want it to contain %q", msg, tt.msg)
			}
		})
	}

	t.Run("null without stream", func(t *testing.T) {
		body := map[string]any{"model": "m", "messages": msgs, "stream_options": nil}
		if status, out := post(t, srv.URL()+"/chat/completions", body, nil); status != http.StatusOK {
			t.Errorf("status = %d: %v", status, out)
		}
	})

	// openai-go sends stream_options whenever it is set; without
	// streaming that is the client's mistake, in OpenAI's error shape.
	t.Run("openai-go without streaming", func(t *testing.T) {
		chat := openai.NewChatCompletionService(sdkOptions(srv)...)
		_, err := chat.New(context.Background(), sdkChatParams("hi", true))
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) {
			t.Fatalf("error = %v, want an API error", err)
		}
		if apiErr.StatusCode != 400 || apiErr.Type != "invalid_request_error" || apiErr.Param != "stream_options" || apiErr.Code != "" ||
			!strings.Contains(apiErr.Message, "only allowed when 'stream' is enabled") {
			t.Errorf("error = %d %s param %q code %q: %s", apiErr.StatusCode, apiErr.Type, apiErr.Param, apiErr.Code, apiErr.Message)
		}
	})
}
