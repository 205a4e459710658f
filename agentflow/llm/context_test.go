package llm_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/agentbot/agentbot/agentflow/llm"
	"github.com/agentbot/agentbot/internal/fakeopenai"
)

// TestContextLengthErrors checks which failures match ErrContextLength: the
// code OpenAI gives, and the words of OpenAI-compatible servers that give
// none; and that other 400s about something too long do not.
func TestContextLengthErrors(t *testing.T) {
	tests := []struct {
		name           string
		status         int
		code, typ, msg string
		context        bool
		window, size   int // ContextTokens, RequestTokens
	}{
		{name: "openai", status: 400, code: "context_length_exceeded", typ: "invalid_request_error",
			msg:     "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens. Please reduce the length of the messages.",
			context: true, window: 8192, size: 9000},
		{name: "openai with completion", status: 400, code: "context_length_exceeded",
			msg:     "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.",
			context: true, window: 4096, size: 5000},
		{name: "openai responses", status: 400, code: "context_length_exceeded",
			msg: "Your input exceeds the context window of this model. Please adjust your input and try again.", context: true},
		{name: "vllm without code", status: 400, typ: "BadRequestError",
			msg:     "This model's maximum context length is 32768 tokens. However, you requested 40000 tokens in the messages, Please reduce the length of the messages.",
			context: true, window: 32768, size: 40000},
		{name: "vllm decoder prompt", status: 400,
			msg:     "The decoder prompt (length 9000) is longer than the maximum model length of 8192. Make sure that `max_model_len` is no smaller than the number of text tokens.",
			context: true, window: 8192, size: 9000},
		{name: "llama.cpp", status: 400, typ: "exceed_context_size_error",
			msg: "request (4476 tokens) exceeds the available context size (4096 tokens), try increasing it", context: true, window: 4096, size: 4476},
		{name: "ollama", status: 500, msg: "the input length exceeds the context length", context: true},
		{name: "anthropic compatibility", status: 400, typ: "invalid_request_error",
			msg: "prompt is too long: 201266 tokens > 200000 maximum", context: true, window: 200000, size: 201266},
		{name: "gemini compatibility", status: 400,
			msg:     "The input token count (35868) exceeds the maximum number of tokens allowed (32768).",
			context: true, window: 32768, size: 35868},
		{name: "litellm", status: 400, code: "400",
			msg: "litellm.ContextWindowExceededError: litellm.BadRequestError: ContextWindowExceededError: OpenAIException - too long", context: true},
		{name: "proxy body limit", status: 413, msg: "Request Entity Too Large", context: true},

		{name: "duplicate tool call", status: 400, typ: "invalid_request_error",
			msg: "Invalid parameter: Duplicate value for 'tool_call_id' of call_1 in messages[3]. Please ensure the tool_call_id is unique across all messages."},
		{name: "id too long", status: 400, code: "string_above_max_length",
			msg: "Invalid 'messages[2].tool_calls[0].id': string too long. Expected a string with maximum length 40, but got a string with length 64 instead."},
		{name: "rate limit", status: 429, code: "rate_limit_exceeded", msg: "Rate limit reached for requests."},
		{name: "server error", status: 500, msg: "The server had an error while processing your request."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := fakeopenai.New(fakeopenai.Options{Script: replyError(&fakeopenai.HTTPError{
				Status: tt.status, Code: tt.code, Type: tt.typ, Message: tt.msg})})
			defer srv.Close()
			_, err := newClient(t, srv, llm.APIChat, nil).Complete(context.Background(), userRequest("hi"))
			if got := errors.Is(err, llm.ErrContextLength); got != tt.context {
				t.Fatalf("errors.Is(%v, ErrContextLength) = %v, want %v", err, got, tt.context)
			}
			var apiErr *llm.APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("err = %v, want an *APIError", err)
			}
			if apiErr.ContextTokens != tt.window || apiErr.RequestTokens != tt.size {
				t.Errorf("ContextTokens, RequestTokens = %d, %d; want %d, %d", apiErr.ContextTokens, apiErr.RequestTokens, tt.window, tt.size)
			}
			if tt.context && !llm.IsPermanent(err) {
				t.Errorf("a context-length error is not permanent: %v", err)
			}
		})
	}
}

// TestContextLengthLlamaCpp checks llama.cpp's error body as it is: its
// code is a number, not OpenAI's string.
func TestContextLengthLlamaCpp(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":{"code":400,"message":"request (4476 tokens) exceeds the available context size (4096 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":4476,"n_ctx":4096}}`))
	}))
	defer srv.Close()
	c, err := llm.New(llm.Config{BaseURL: srv.URL + "/v1"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Complete(context.Background(), userRequest("hi"))
	var apiErr *llm.APIError
	if !errors.Is(err, llm.ErrContextLength) || !errors.As(err, &apiErr) || apiErr.ContextTokens != 4096 || apiErr.RequestTokens != 4476 {
		t.Errorf("err = %v (%+v), want ErrContextLength with 4096 and 4476 tokens", err, apiErr)
	}
}

// TestContextLengthResponsesFailed checks a Responses API answer that
// failed during generation because the context ran out.
func TestContextLengthResponsesFailed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"resp_1","object":"response","status":"failed","output":[],"error":{"code":"context_length_exceeded","message":"Your input exceeds the context window of this model."}}`))
	}))
	defer srv.Close()
	c, err := llm.New(llm.Config{BaseURL: srv.URL + "/v1", API: llm.APIResponses})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Complete(context.Background(), userRequest("hi"))
	if !errors.Is(err, llm.ErrContextLength) || !llm.IsPermanent(err) {
		t.Errorf("err = %v, want a permanent ErrContextLength", err)
	}
}
