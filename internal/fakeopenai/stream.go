package fakeopenai

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"time"
)

// Streaming shapes how a Reply is streamed to a request that asks for it
// ("stream": true). The zero value sends the whole stream at once, or at
// Options.StreamDelay. The counts are of events (data lines) sent after
// the answer's headers; one larger than the answer's events acts just
// before its end, so that the end is always missing.
//
// Errors a Script wants answered before the stream starts are Reply.Error,
// as without streaming: an HTTP status and a JSON body.
type Streaming struct {
	// Delay is a pause before each event after the first, as a slow
	// model's; it overrides Options.StreamDelay. A client that goes away
	// meanwhile ends the answer, recorded as status 499.
	Delay time.Duration
	// CutAfter, when above 0, drops the connection after that many events
	// without ending the stream (no "[DONE]" in Chat Completions, no
	// response.completed in the Responses API), as a crashed server or a
	// broken proxy does: the client reads an unexpected EOF.
	CutAfter int
	// StallAfter, when above 0, sends nothing more after that many events
	// and keeps the connection open until the client goes away (recorded
	// as status 499), as a hung model does. The client needs a timeout.
	StallAfter int
	// Error, when set, is sent in the stream after ErrorAfter events
	// instead of the rest of the answer, as OpenAI reports a failure once
	// the answer has started: a data line {"error": {...}} in Chat
	// Completions, an "error" event {"type": "error", "code", "message",
	// "param"} in the Responses API. The stream then ends, without
	// "[DONE]" or response.completed. Its Status and RetryAfter are not
	// sent: the status line is already 200.
	Error *HTTPError
	// ErrorAfter is the number of events before Error.
	ErrorAfter int
}

// defaultStreamChunk is Options.StreamChunk's default: about a token.
const defaultStreamChunk = 4

// streamOptions are the settings of a request's stream_options.
type streamOptions struct {
	usage       bool // include_usage: a last chunk with the usage (Chat Completions)
	obfuscation bool // include_obfuscation: random padding on deltas, on unless false
}

// The keys of stream_options in each API.
var (
	chatStreamKeys      = []string{"include_obfuscation", "include_usage"}
	responsesStreamKeys = []string{"include_obfuscation"}
)

// decodeStreamOptions checks a request's stream_options as OpenAI does (an
// object of known boolean settings, and only when stream is true) and
// returns its settings.
func decodeStreamOptions(body []byte, stream bool, known []string) (streamOptions, *HTTPError) {
	opts := streamOptions{obfuscation: true}
	var req struct {
		StreamOptions json.RawMessage `json:"stream_options"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return opts, invalidRequest("", "", "Invalid request body: %v", err)
	}
	raw := req.StreamOptions
	if len(raw) == 0 || string(raw) == "null" {
		return opts, nil
	}
	if !stream {
		return opts, invalidRequest("stream_options", "", "The 'stream_options' parameter is only allowed when 'stream' is enabled.")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return opts, invalidRequest("stream_options", "invalid_type", "Invalid type for 'stream_options': expected an object, but got %s instead.", jsonKind(raw))
	}
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		param := "stream_options." + name
		if !slices.Contains(known, name) {
			return opts, invalidRequest(param, "unknown_parameter", "Unknown parameter: '%s'.", param)
		}
		var v bool
		if err := json.Unmarshal(fields[name], &v); err != nil {
			return opts, invalidRequest(param, "invalid_type", "Invalid type for '%s': expected a boolean, but got %s instead.", param, jsonKind(fields[name]))
		}
		switch name {
		case "include_usage":
			opts.usage = v
		case "include_obfuscation":
			opts.obfuscation = v
		}
	}
	return opts, nil
}

// sseEvent is one server-sent event: an optional event name and its data.
type sseEvent struct {
	name string
	data []byte
}

func (e sseEvent) bytes() []byte {
	var b bytes.Buffer
	if e.name != "" {
		fmt.Fprintf(&b, "event: %s\n", e.name)
	}
	b.WriteString("data: ")
	b.Write(e.data)
	b.WriteString("\n\n")
	return b.Bytes()
}

// marshalEvent encodes v as an event's data, without escaping HTML as
// OpenAI does not.
func marshalEvent(name string, v any) sseEvent {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only maps and structs of plain values are encoded here.
		panic(fmt.Sprintf("fakeopenai: encoding a stream event: %v", err))
	}
	return sseEvent{name: name, data: bytes.TrimSuffix(b.Bytes(), []byte("\n"))}
}

// pieces splits s into pieces of n runes each (the last may be shorter);
// an empty s gives none.
func pieces(s string, n int) []string {
	var out []string
	runes := []rune(s)
	for len(runes) > 0 {
		k := min(n, len(runes))
		out = append(out, string(runes[:k]))
		runes = runes[k:]
	}
	return out
}

// obfuscation returns padding of random length, as OpenAI adds to streamed
// deltas so that their sizes do not give the text away.
func obfuscation() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, 1+rand.IntN(16))
	for i := range b {
		b[i] = alphabet[rand.IntN(len(alphabet))]
	}
	return string(b)
}

// stream answers call with reply as an event stream. The request was
// checked; body is its raw form, for its stream_options.
func (s *Server) stream(ctx context.Context, ex *exchange, call Call, reply Reply, body []byte) {
	chunk := s.opts.StreamChunk
	if chunk <= 0 {
		chunk = defaultStreamChunk
	}
	var (
		events   []sseEvent
		end      []sseEvent
		failWith func(seq int, e *HTTPError) sseEvent
	)
	if call.API == APIChat {
		opts, _ := decodeStreamOptions(body, true, chatStreamKeys) // checked by decodeChat
		events, end = s.chatEvents(call, reply, opts, chunk)
		failWith = func(_ int, e *HTTPError) sseEvent {
			return marshalEvent("", map[string]any{"error": e.envelope()})
		}
	} else {
		opts, _ := decodeStreamOptions(body, true, responsesStreamKeys) // checked by decodeResponses
		events = s.responseEvents(call, reply, body, opts, chunk)
		// The last event, response.completed or response.incomplete, is
		// the end of the stream.
		events, end = events[:len(events)-1], events[len(events)-1:]
		failWith = func(seq int, e *HTTPError) sseEvent {
			env := e.envelope()
			return marshalEvent("error", map[string]any{
				"type": "error", "sequence_number": seq,
				"code": env["code"], "message": env["message"], "param": env["param"],
			})
		}
	}

	plan := reply.Stream
	delay := plan.Delay
	if delay == 0 {
		delay = s.opts.StreamDelay
	}
	// at says whether something planned after n events happens once i
	// events are sent.
	at := func(n, i int) bool { return n > 0 && min(n, len(events)) == i }

	rc := http.NewResponseController(ex.w)
	h := ex.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	ex.rec.Status = http.StatusOK
	ex.w.WriteHeader(http.StatusOK)
	write := func(i int, e sseEvent) bool {
		if i > 0 && delay > 0 {
			if err := sleepCtx(ctx, delay); err != nil {
				ex.rec.Status = statusClientClosed
				return false
			}
		}
		if _, err := ex.w.Write(e.bytes()); err != nil {
			ex.rec.Status = statusClientClosed
			return false
		}
		if err := rc.Flush(); err != nil {
			ex.rec.Status = statusClientClosed
			return false
		}
		return true
	}
	if err := rc.Flush(); err != nil { // the headers, before a first delay
		ex.rec.Status = statusClientClosed
		return
	}

	for i := 0; ; i++ {
		switch {
		case plan.Error != nil && min(max(plan.ErrorAfter, 0), len(events)) == i:
			write(i, failWith(i, plan.Error))
			return
		case at(plan.CutAfter, i):
			// The server closes the connection without the chunked
			// encoding's last chunk: the client's read fails with an
			// unexpected EOF. serveHTTP's deferred recording still runs.
			panic(http.ErrAbortHandler)
		case at(plan.StallAfter, i):
			<-ctx.Done()
			ex.rec.Status = statusClientClosed
			return
		case i == len(events):
			for j, e := range end {
				if !write(i+j, e) {
					return
				}
			}
			return
		}
		if !write(i, events[i]) {
			return
		}
	}
}

// chatChunkJSON is a chat.completion.chunk object.
type chatChunkJSON struct {
	ID                string                `json:"id"`
	Object            string                `json:"object"`
	Created           int64                 `json:"created"`
	Model             string                `json:"model"`
	ServiceTier       string                `json:"service_tier"`
	SystemFingerprint string                `json:"system_fingerprint"`
	Choices           []chatChunkChoiceJSON `json:"choices"`
	// Usage is absent without include_usage, else null but in the
	// last chunk.
	Usage       any    `json:"usage,omitempty"`
	Obfuscation string `json:"obfuscation,omitempty"`
}

type chatChunkChoiceJSON struct {
	Index        int            `json:"index"`
	Delta        map[string]any `json:"delta"`
	Logprobs     any            `json:"logprobs"`
	FinishReason *string        `json:"finish_reason"`
}

// chatEvents renders reply as the chunks of a streamed chat completion, as
// OpenAI sends them: a first chunk with the role (and an empty content, or
// the first tool call's ID and name), the content in pieces, each tool call
// opened by a chunk with its ID and name and then its arguments in pieces,
// a chunk with the finish reason, and with include_usage a chunk without
// choices but with the usage. end is "[DONE]".
func (s *Server) chatEvents(call Call, reply Reply, opts streamOptions, chunk int) (events, end []sseEvent) {
	id, created := newID("chatcmpl-"), time.Now().Unix()
	add := func(choices []chatChunkChoiceJSON, usage any) {
		c := chatChunkJSON{
			ID: id, Object: "chat.completion.chunk", Created: created, Model: call.Model,
			ServiceTier: "default", SystemFingerprint: "fp_fakeopenai",
			Choices: choices, Usage: usage,
		}
		if opts.usage && usage == nil {
			c.Usage = json.RawMessage("null")
		}
		if opts.obfuscation {
			c.Obfuscation = obfuscation()
		}
		events = append(events, marshalEvent("", c))
	}
	delta := func(d map[string]any, finish *string) {
		add([]chatChunkChoiceJSON{{Index: 0, Delta: d, FinishReason: finish}}, nil)
	}

	first := map[string]any{"role": "assistant", "content": "", "refusal": nil}
	if reply.Text == "" && len(reply.ToolCalls) > 0 {
		first["content"] = nil
	}
	texts := pieces(reply.Text, chunk)
	finish := "stop"
	type openCall struct {
		header map[string]any
		args   []string
	}
	var calls []openCall
	for i, tc := range reply.ToolCalls {
		args, _ := tc.marshalArguments() // checked by checkReply
		calls = append(calls, openCall{
			header: map[string]any{
				"index": i, "id": s.toolCallID(), "type": "function",
				"function": map[string]any{"name": tc.Name, "arguments": ""},
			},
			args: pieces(string(args), chunk),
		})
		finish = "tool_calls"
	}
	if reply.Truncated {
		finish = "length"
	}

	if len(texts) == 0 && len(calls) > 0 {
		// The first call opens in the first chunk.
		first["tool_calls"] = []any{calls[0].header}
		calls[0].header = nil
	}
	delta(first, nil)
	for _, t := range texts {
		delta(map[string]any{"content": t}, nil)
	}
	for i, c := range calls {
		if c.header != nil {
			delta(map[string]any{"tool_calls": []any{c.header}}, nil)
		}
		for _, a := range c.args {
			delta(map[string]any{"tool_calls": []any{map[string]any{
				"index": i, "function": map[string]any{"arguments": a},
			}}}, nil)
		}
	}
	delta(map[string]any{}, &finish)
	if opts.usage {
		in, out := usage(call, reply)
		add([]chatChunkChoiceJSON{}, chatUsageJSON{
			PromptTokens: in, CompletionTokens: out, TotalTokens: in + out,
			PromptTokensDetails:     map[string]int64{"cached_tokens": 0, "audio_tokens": 0},
			CompletionTokensDetails: map[string]int64{"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
		})
	}
	return events, []sseEvent{{data: []byte("[DONE]")}}
}

// responseEvents renders reply as the events of a streamed response, each
// named by its type and numbered from 0 (sequence_number): response.created
// and response.in_progress with the response so far; for each output item
// response.output_item.added, its text (content_part.added,
// output_text.delta in pieces, output_text.done, content_part.done) or its
// arguments (function_call_arguments.delta in pieces,
// function_call_arguments.done), and response.output_item.done; last
// response.completed, or response.incomplete for a truncated reply, with
// the whole response, as the API answers without streaming.
func (s *Server) responseEvents(call Call, reply Reply, body []byte, opts streamOptions, chunk int) []sseEvent {
	final := s.response(call, reply, body)
	var events []sseEvent
	add := func(typ string, fields map[string]any) {
		fields["type"] = typ
		fields["sequence_number"] = len(events)
		events = append(events, marshalEvent(typ, fields))
	}
	withDelta := func(fields map[string]any) map[string]any {
		if opts.obfuscation {
			fields["obfuscation"] = obfuscation()
		}
		return fields
	}

	started := make(map[string]any, len(final))
	for k, v := range final {
		started[k] = v
	}
	started["status"] = "in_progress"
	started["output"] = []any{}
	started["usage"] = nil
	started["completed_at"] = nil
	started["incomplete_details"] = nil
	add("response.created", map[string]any{"response": started})
	add("response.in_progress", map[string]any{"response": started})

	for i, it := range final["output"].([]any) {
		item := it.(map[string]any)
		itemID := item["id"]
		switch item["type"] {
		case "message":
			part := item["content"].([]any)[0].(map[string]any)
			text := part["text"].(string)
			add("response.output_item.added", map[string]any{"output_index": i, "item": map[string]any{
				"id": itemID, "type": "message", "status": "in_progress", "role": "assistant", "content": []any{},
			}})
			add("response.content_part.added", map[string]any{"item_id": itemID, "output_index": i, "content_index": 0,
				"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}, "logprobs": []any{}}})
			for _, p := range pieces(text, chunk) {
				add("response.output_text.delta", withDelta(map[string]any{
					"item_id": itemID, "output_index": i, "content_index": 0, "delta": p, "logprobs": []any{},
				}))
			}
			add("response.output_text.done", map[string]any{"item_id": itemID, "output_index": i, "content_index": 0,
				"text": text, "logprobs": []any{}})
			add("response.content_part.done", map[string]any{"item_id": itemID, "output_index": i, "content_index": 0, "part": part})
		case "function_call":
			args := item["arguments"].(string)
			add("response.output_item.added", map[string]any{"output_index": i, "item": map[string]any{
				"id": itemID, "type": "function_call", "status": "in_progress",
				"call_id": item["call_id"], "name": item["name"], "arguments": "",
			}})
			for _, p := range pieces(args, chunk) {
				add("response.function_call_arguments.delta", withDelta(map[string]any{
					"item_id": itemID, "output_index": i, "delta": p,
				}))
			}
			add("response.function_call_arguments.done", map[string]any{"item_id": itemID, "output_index": i, "arguments": args})
		}
		add("response.output_item.done", map[string]any{"output_index": i, "item": item})
	}
	last := "response.completed"
	if final["status"] == "incomplete" {
		last = "response.incomplete"
	}
	add(last, map[string]any{"response": final})
	return events
}
