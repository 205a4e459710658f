package fakeopenai

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// Script is the fake's model: given the decoded conversation, it returns the
// next reply. ctx is the HTTP request's context, done when the client goes
// away. A Script may be called concurrently. An error that is (or wraps) an
// *HTTPError is answered as that error; any other error as a 500.
type Script func(ctx context.Context, call Call) (Reply, error)

// Call is a model request in a form common to both APIs.
type Call struct {
	// API is the endpoint the request came to.
	API API
	// Model is the requested model.
	Model string
	// Messages is the conversation. Responses API input items are folded
	// into it: "instructions" becomes a first system message,
	// function_call items become the ToolCalls of an assistant message,
	// function_call_output items become tool messages.
	Messages []Message
	// Tools are the names of the function tools offered, in order.
	Tools []string
	// MaxOutputTokens is max_completion_tokens (or max_tokens) in Chat
	// Completions, max_output_tokens in Responses; 0 if absent.
	MaxOutputTokens int64
	// Stream says the client asked for a streamed answer ("stream":
	// true): unless it is an error, the answer is an event stream shaped
	// by Reply.Stream.
	Stream bool
}

// Tokens counts the conversation's tokens as Options.ContextTokens does: a
// token per 4 bytes (rounded up) of each message's content and of its tool
// calls' names and arguments, and 4 more per message for its role and
// framing. Tool definitions are not counted. It is an estimate in the
// spirit of OpenAI's count, stable so that tests can aim at a window.
func (c Call) Tokens() int {
	n := 0
	for _, m := range c.Messages {
		b := len(m.Content)
		for _, tc := range m.ToolCalls {
			b += len(tc.Name) + len(tc.Arguments)
		}
		n += 4 + (b+3)/4
	}
	return n
}

// LastUserMessage returns the index and the text of the last user message,
// or -1 and "" when there is none.
func (c Call) LastUserMessage() (int, string) {
	for i := len(c.Messages) - 1; i >= 0; i-- {
		if c.Messages[i].Role == "user" {
			return i, c.Messages[i].Content
		}
	}
	return -1, ""
}

// Message is one message of a Call.
type Message struct {
	// Role is "system", "developer", "user", "assistant" or "tool".
	Role string
	// Content is the text; the text parts of a multi-part content joined.
	Content string
	// ToolCalls are an assistant message's tool calls.
	ToolCalls []ToolCall
	// ToolCallID is, in a tool message, the ID of the call it answers.
	ToolCallID string
}

// ToolCall is a tool call in a Call's conversation.
type ToolCall struct {
	// ID is the tool call ID (call_id in the Responses API).
	ID string
	// Name is the function name.
	Name string
	// Arguments is the JSON text of the arguments, as sent.
	Arguments string
}

// Reply is what a Script answers: a text, tool calls (with optional text
// before them), or an HTTP error.
type Reply struct {
	// Text is the assistant's text.
	Text string
	// ToolCalls are the tools to call, each given an ID by the server (a
	// random one, or see Options.SequentialIDs). Each must be one of Call.Tools, as a real model's would be,
	// or the server answers 500.
	ToolCalls []ReplyToolCall
	// Truncated answers as a model cut short by max_output_tokens:
	// finish_reason "length" in Chat Completions, status "incomplete" with
	// reason max_output_tokens in the Responses API.
	Truncated bool
	// Usage overrides the token counts; nil means counting words: the
	// words of all the conversation's contents and tool arguments in, the
	// words of the reply out.
	Usage *Usage
	// Error, when set, is answered instead of a completion.
	Error *HTTPError
	// Stream shapes a streamed answer: pauses, a dropped connection, a
	// stall or an error mid-stream. Ignored when the request does not
	// stream.
	Stream Streaming
}

// ReplyToolCall is a tool call a Script makes.
type ReplyToolCall struct {
	// Name is the function name.
	Name string
	// Arguments is marshalled with encoding/json (a json.RawMessage is
	// sent as is); nil means {}.
	Arguments any
}

func (tc ReplyToolCall) marshalArguments() ([]byte, error) {
	if tc.Arguments == nil {
		return []byte("{}"), nil
	}
	return json.Marshal(tc.Arguments)
}

// Usage is a token count a Script reports.
type Usage struct {
	InputTokens, OutputTokens int64
}

// Text returns a Reply with a final text.
func Text(text string) Reply { return Reply{Text: text} }

// Invoke returns a Reply that calls one tool.
func Invoke(name string, arguments any) Reply {
	return Reply{ToolCalls: []ReplyToolCall{{Name: name, Arguments: arguments}}}
}

// Fail returns a Reply that is an HTTP error with the given status and
// OpenAI error code (which may be empty); the type and message are those
// OpenAI gives for the status.
func Fail(status int, code string) Reply {
	return Reply{Error: &HTTPError{Status: status, Code: code}}
}

// HTTPError is an error answer in OpenAI's envelope. Empty fields get the
// values OpenAI uses for the status.
type HTTPError struct {
	// Status is the HTTP status; 0 means 500.
	Status int
	// Type is the error type ("invalid_request_error", "server_error",
	// "requests" for rate limits, ...).
	Type string
	// Code is the error code ("invalid_api_key", "model_not_found",
	// "rate_limit_exceeded", "context_length_exceeded", ...); may be empty.
	Code string
	// Param names the offending request parameter; may be empty.
	Param string
	// Message is the human-readable explanation.
	Message string
	// RetryAfter, when set, is sent as the Retry-After header, as a rate
	// limit (429) or an overloaded server (503) does: a number of seconds
	// ("2") or an HTTP date (time.RFC1123, in GMT). It is sent as it is,
	// so a test may also send a malformed one.
	RetryAfter string
}

// Error returns the status and the message.
func (e *HTTPError) Error() string {
	env := e.envelope()
	if e.Code != "" {
		return fmt.Sprintf("fake openai: %d %s: %s", e.Status, e.Code, env["message"])
	}
	return fmt.Sprintf("fake openai: %d: %s", e.Status, env["message"])
}

const typeInvalidRequest = "invalid_request_error"

// envelope returns the "error" object of OpenAI's error body, with null for
// an absent param or code.
func (e *HTTPError) envelope() map[string]any {
	typ, msg := e.Type, e.Message
	if typ == "" || msg == "" {
		dt, dm := defaultError(e.Status, e.Code)
		if typ == "" {
			typ = dt
		}
		if msg == "" {
			msg = dm
		}
	}
	env := map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}
	if e.Param != "" {
		env["param"] = e.Param
	}
	if e.Code != "" {
		env["code"] = e.Code
	}
	return env
}

func defaultError(status int, code string) (typ, msg string) {
	switch {
	case code == "insufficient_quota":
		return "insufficient_quota", "You exceeded your current quota, please check your plan and billing details."
	case code == "context_length_exceeded":
		return typeInvalidRequest, "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens. Please reduce the length of the messages."
	case status == http.StatusTooManyRequests:
		return "requests", "Rate limit reached for requests. Please try again in 1s."
	case status == http.StatusUnauthorized:
		return typeInvalidRequest, "Incorrect API key provided."
	case status == http.StatusNotFound:
		return typeInvalidRequest, "The model does not exist or you do not have access to it."
	case status >= 500 || status == 0:
		return "server_error", "The server had an error while processing your request. Sorry about that!"
	default:
		return typeInvalidRequest, http.StatusText(status)
	}
}
