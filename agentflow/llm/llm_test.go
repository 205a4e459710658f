package llm_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentbot/agentbot/agentflow/llm"
	"github.com/agentbot/agentbot/internal/fakeopenai"
)

const testKey = "sk-test-0123456789abcdef"

var apis = []llm.API{llm.APIChat, llm.APIResponses}

// agentTools are the tools as the agent declares them.
var agentTools = []llm.Tool{
	{
		Name:        "shell",
		Description: "Run a shell command in the workspace.",
		Parameters: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"command":         map[string]any{"type": "string"},
				"timeout_seconds": map[string]any{"type": "integer"},
			},
			"required": []string{"command"},
		},
	},
	{
		Name: "read_file",
		Parameters: map[string]any{
			"type":       "object",
			"properties": map[string]any{"path": map[string]any{"type": "string"}},
			"required":   []string{"path"},
		},
	},
	{
		Name: "write_file",
		Parameters: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"path":    map[string]any{"type": "string"},
				"content": map[string]any{"type": "string"},
			},
			"required": []string{"path", "content"},
		},
	},
}

func newClient(t *testing.T, srv *fakeopenai.Server, api llm.API, edit func(*llm.Config)) *llm.Client {
	t.Helper()
	cfg := llm.Config{BaseURL: srv.URL(), APIKey: testKey, API: api}
	if edit != nil {
		edit(&cfg)
	}
	c, err := llm.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func userRequest(text string) llm.Request {
	return llm.Request{
		Model: "gpt-test",
		Messages: []llm.Message{
			{Role: llm.RoleSystem, Content: "You are a test."},
			{Role: llm.RoleUser, Content: text},
		},
		Tools: agentTools,
	}
}

func TestPlainAnswer(t *testing.T) {
	for _, api := range apis {
		t.Run(string(api), func(t *testing.T) {
			srv := fakeopenai.New(fakeopenai.Options{
				APIKey: testKey,
				Models: []string{"gpt-test"},
				Script: func(_ context.Context, call fakeopenai.Call) (fakeopenai.Reply, error) {
					r := fakeopenai.Text("hello, " + call.Messages[len(call.Messages)-1].Content)
					r.Usage = &fakeopenai.Usage{InputTokens: 17, OutputTokens: 3}
					return r, nil
				},
			})
			defer srv.Close()
			c := newClient(t, srv, api, nil)

			req := userRequest("world")
			req.MaxOutputTokens = 99
			resp, err := c.Complete(context.Background(), req)
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
			want := llm.Response{
				Message:      llm.Message{Role: llm.RoleAssistant, Content: "hello, world"},
				Usage:        llm.Usage{InputTokens: 17, OutputTokens: 3, TotalTokens: 20},
				FinishReason: llm.FinishStop,
			}
			if !equalJSON(t, resp, want) {
				t.Errorf("response = %+v, want %+v", resp, want)
			}

			reqs := srv.Requests()
			if len(reqs) != 1 {
				t.Fatalf("server saw %d requests, want 1", len(reqs))
			}
			got := reqs[0]
			if got.API != fakeopenai.API(api) {
				t.Errorf("endpoint = %q, want %q", got.API, api)
			}
			if h := got.Header.Get("Authorization"); h != "Bearer "+testKey {
				t.Errorf("Authorization = %q", h)
			}
			if got.Call.MaxOutputTokens != 99 {
				t.Errorf("max output tokens = %d, want 99", got.Call.MaxOutputTokens)
			}
			if names := strings.Join(got.Call.Tools, ","); names != "shell,read_file,write_file" {
				t.Errorf("tools offered = %s", names)
			}
			if len(got.Call.Messages) != 2 || got.Call.Messages[0].Role != "system" || got.Call.Messages[1].Content != "world" {
				t.Errorf("conversation = %+v", got.Call.Messages)
			}
			var body map[string]any
			if err := json.Unmarshal(got.Body, &body); err != nil {
				t.Fatal(err)
			}
			if api == llm.APIResponses {
				// Stateless: nothing stored, nothing referenced.
				if body["store"] != false {
					t.Errorf("store = %v, want false", body["store"])
				}
				if _, ok := body["previous_response_id"]; ok {
					t.Error("previous_response_id sent")
				}
			}
		})
	}
}

func TestToolCallRoundTrip(t *testing.T) {
	for _, api := range apis {
		t.Run(string(api), func(t *testing.T) {
			srv := fakeopenai.New(fakeopenai.Options{APIKey: testKey})
			defer srv.Close()
			c := newClient(t, srv, api, nil)
			ctx := context.Background()

			req := userRequest("run these:\nsh: echo hi\nread: notes.txt")
			var total llm.Usage
			outputs := []string{"hi\n", "a note"}
			for step := range outputs {
				resp, err := c.Complete(ctx, req)
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				total.Add(resp.Usage)
				if resp.FinishReason != llm.FinishToolCalls || len(resp.Message.ToolCalls) != 1 {
					t.Fatalf("step %d: want one tool call, got %+v (finish %s)", step, resp.Message, resp.FinishReason)
				}
				tc := resp.Message.ToolCalls[0]
				if tc.ID == "" {
					t.Fatalf("step %d: tool call without ID", step)
				}
				req.Messages = append(req.Messages, resp.Message,
					llm.Message{Role: llm.RoleTool, ToolCallID: tc.ID, Content: outputs[step]})
			}
			calls := []llm.ToolCall{req.Messages[2].ToolCalls[0], req.Messages[4].ToolCalls[0]}
			if calls[0].Name != "shell" || !jsonEq(t, calls[0].Arguments, `{"command":"echo hi","timeout_seconds":60}`) {
				t.Errorf("first call = %+v", calls[0])
			}
			if calls[1].Name != "read_file" || !jsonEq(t, calls[1].Arguments, `{"path":"notes.txt"}`) {
				t.Errorf("second call = %+v", calls[1])
			}
			if calls[0].ID == calls[1].ID {
				t.Errorf("tool call IDs repeat: %q", calls[0].ID)
			}

			final, err := c.Complete(ctx, req)
			if err != nil {
				t.Fatalf("final: %v", err)
			}
			total.Add(final.Usage)
			if want := "done.\n[shell] hi\n\n[read_file] a note"; final.Message.Content != want {
				t.Errorf("final = %q, want %q", final.Message.Content, want)
			}
			if final.FinishReason != llm.FinishStop || len(final.Message.ToolCalls) != 0 {
				t.Errorf("final finish = %s, calls = %v", final.FinishReason, final.Message.ToolCalls)
			}
			if total.InputTokens == 0 || total.OutputTokens == 0 || total.TotalTokens != total.InputTokens+total.OutputTokens {
				t.Errorf("usage = %+v", total)
			}

			// The server saw the results as answers to its own calls.
			reqs := srv.Requests()
			last := reqs[len(reqs)-1].Call.Messages
			if len(last) != 6 || last[5].Role != "tool" || last[5].ToolCallID != calls[1].ID || last[3].ToolCallID != calls[0].ID {
				t.Errorf("last conversation seen by the server = %+v", last)
			}
		})
	}
}

// TestAssistantTextWithToolCalls sends a history whose assistant message has
// both text and tool calls, which each API encodes differently.
func TestAssistantTextWithToolCalls(t *testing.T) {
	for _, api := range apis {
		t.Run(string(api), func(t *testing.T) {
			srv := fakeopenai.New(fakeopenai.Options{
				Script: func(_ context.Context, call fakeopenai.Call) (fakeopenai.Reply, error) {
					b, _ := json.Marshal(call.Messages)
					return fakeopenai.Text(string(b)), nil
				},
			})
			defer srv.Close()
			c := newClient(t, srv, api, nil)
			req := userRequest("go")
			req.Messages = append(req.Messages,
				llm.Message{Role: llm.RoleAssistant, Content: "Looking.", ToolCalls: []llm.ToolCall{
					{ID: "call_a", Name: "shell", Arguments: `{"command":"ls"}`},
					{ID: "call_b", Name: "read_file", Arguments: `{"path":"x"}`},
				}},
				llm.Message{Role: llm.RoleTool, ToolCallID: "call_a", Content: "x"},
				llm.Message{Role: llm.RoleTool, ToolCallID: "call_b", Content: ""},
				llm.Message{Role: llm.RoleAssistant, Content: "Done."},
				llm.Message{Role: llm.RoleUser, Content: "thanks"},
			)
			resp, err := c.Complete(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			var seen []fakeopenai.Message
			if err := json.Unmarshal([]byte(resp.Message.Content), &seen); err != nil {
				t.Fatal(err)
			}
			want := []fakeopenai.Message{
				{Role: "system", Content: "You are a test."},
				{Role: "user", Content: "go"},
				{Role: "assistant", Content: "Looking.", ToolCalls: []fakeopenai.ToolCall{
					{ID: "call_a", Name: "shell", Arguments: `{"command":"ls"}`},
					{ID: "call_b", Name: "read_file", Arguments: `{"path":"x"}`},
				}},
				{Role: "tool", ToolCallID: "call_a", Content: "x"},
				{Role: "tool", ToolCallID: "call_b", Content: ""},
				{Role: "assistant", Content: "Done."},
				{Role: "user", Content: "thanks"},
			}
			if !equalJSON(t, seen, want) {
				t.Errorf("server saw\n%+v\nwant\n%+v", seen, want)
			}
		})
	}
}

func TestTruncated(t *testing.T) {
	for _, api := range apis {
		t.Run(string(api), func(t *testing.T) {
			srv := fakeopenai.New(fakeopenai.Options{Script: script(fakeopenai.Reply{Text: "the answer is", Truncated: true})})
			defer srv.Close()
			c := newClient(t, srv, api, nil)
			resp, err := c.Complete(context.Background(), userRequest("hi"))
			if err != nil {
				t.Fatal(err)
			}
			if resp.FinishReason != llm.FinishLength || resp.Message.Content != "the answer is" {
				t.Errorf("response = %+v", resp)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name      string
		opts      fakeopenai.Options
		key       string // API key of the client; testKey if empty
		model     string
		permanent bool
		status    int
		msg       string // the whole message, if set
		contains  string // a part of the message, if set
	}{
		{
			name: "wrong key", opts: fakeopenai.Options{APIKey: testKey}, key: "sk-wrong-key-987654321",
			permanent: true, status: 401, msg: "model endpoint rejected the API key (401)",
		},
		{
			name: "unknown model", opts: fakeopenai.Options{Models: []string{"gpt-test"}}, model: "gpt-x",
			permanent: true, status: 404, msg: `unknown model "gpt-x" (404)`,
		},
		{
			name: "bad request", opts: fakeopenai.Options{Script: replyError(&fakeopenai.HTTPError{
				Status: 400, Message: "Invalid 'messages': your key " + testKey + " is not welcome here.",
			})},
			permanent: true, status: 400,
			msg: "model endpoint rejected the request (400): Invalid 'messages': your key [redacted] is not welcome here.",
		},
		{
			name: "forbidden", opts: fakeopenai.Options{Script: replyError(&fakeopenai.HTTPError{Status: 403, Code: "unsupported_country_region_territory", Message: "Country not supported."})},
			permanent: true, status: 403, contains: "(403)",
		},
		{
			name: "unprocessable", opts: fakeopenai.Options{Script: script(fakeopenai.Fail(422, ""))},
			permanent: true, status: 422, contains: "(422)",
		},
		{
			name: "context too long", opts: fakeopenai.Options{Script: script(fakeopenai.Fail(400, "context_length_exceeded"))},
			permanent: true, status: 400, contains: `conversation is too long for model "gpt-test" (400)`,
		},
		{
			name: "rate limited", opts: fakeopenai.Options{Script: script(fakeopenai.Fail(429, "rate_limit_exceeded"))},
			permanent: false, status: 429, contains: "rate limit reached (429)",
		},
		{
			name: "out of quota", opts: fakeopenai.Options{Script: script(fakeopenai.Fail(429, "insufficient_quota"))},
			permanent: true, status: 429, contains: "out of quota (429)",
		},
		{
			name: "server error", opts: fakeopenai.Options{Script: script(fakeopenai.Fail(500, ""))},
			permanent: false, status: 500, contains: "model endpoint failed (500)",
		},
		{
			name: "overloaded", opts: fakeopenai.Options{Script: script(fakeopenai.Fail(503, ""))},
			permanent: false, status: 503, contains: "(503)",
		},
		{
			name: "request timeout", opts: fakeopenai.Options{Script: script(fakeopenai.Fail(408, ""))},
			permanent: false, status: 408, contains: "status 408",
		},
		{
			name: "conflict", opts: fakeopenai.Options{Script: script(fakeopenai.Fail(409, ""))},
			permanent: false, status: 409, contains: "status 409",
		},
		{
			name: "script failure", opts: fakeopenai.Options{Script: func(context.Context, fakeopenai.Call) (fakeopenai.Reply, error) {
				return fakeopenai.Reply{}, errors.New("boom")
			}},
			permanent: false, status: 500,
		},
	}
	for _, api := range apis {
		for _, tt := range tests {
			t.Run(string(api)+"/"+tt.name, func(t *testing.T) {
				srv := fakeopenai.New(tt.opts)
				defer srv.Close()
				key := tt.key
				if key == "" {
					key = testKey
				}
				c := newClient(t, srv, api, func(cfg *llm.Config) { cfg.APIKey = key })
				req := userRequest("hi")
				if tt.model != "" {
					req.Model = tt.model
				}
				_, err := c.Complete(context.Background(), req)
				if err == nil {
					t.Fatal("Complete succeeded, want an error")
				}
				if got := llm.IsPermanent(err); got != tt.permanent {
					t.Errorf("IsPermanent = %v, want %v (err: %v)", got, tt.permanent, err)
				}
				if got := errors.Is(err, llm.ErrPermanent); got != tt.permanent {
					t.Errorf("errors.Is(err, ErrPermanent) = %v, want %v", got, tt.permanent)
				}
				var apiErr *llm.APIError
				if !errors.As(err, &apiErr) || apiErr.StatusCode != tt.status {
					t.Errorf("err = %#v, want an *APIError with status %d", err, tt.status)
				}
				if tt.msg != "" && err.Error() != tt.msg {
					t.Errorf("message = %q, want %q", err.Error(), tt.msg)
				}
				if tt.contains != "" && !strings.Contains(err.Error(), tt.contains) {
					t.Errorf("message = %q, want it to contain %q", err.Error(), tt.contains)
				}
				for _, k := range []string{key, testKey, key[:12], key[len(key)-4:]} {
					if strings.Contains(err.Error(), k) {
						t.Errorf("message %q contains (part of) the key %q", err.Error(), k)
					}
				}
				if got := errors.Is(err, llm.ErrContextLength); got != (tt.name == "context too long") {
					t.Errorf("errors.Is(err, ErrContextLength) = %v", got)
				}
			})
		}
	}
}

func TestMissingKey(t *testing.T) {
	srv := fakeopenai.New(fakeopenai.Options{APIKey: testKey})
	defer srv.Close()
	c := newClient(t, srv, llm.APIChat, func(cfg *llm.Config) { cfg.APIKey = "" })
	_, err := c.Complete(context.Background(), userRequest("hi"))
	if !llm.IsPermanent(err) || err.Error() != "model endpoint requires an API key (401)" {
		t.Errorf("err = %v", err)
	}
	if h := srv.Requests()[0].Header.Get("Authorization"); h != "" {
		t.Errorf("Authorization sent without a key: %q", h)
	}
}

// TestEnvironmentIgnored checks that openai-go's own environment variables do
// not leak into a client configured explicitly.
func TestEnvironmentIgnored(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-from-env")
	t.Setenv("OPENAI_ADMIN_KEY", "sk-admin-from-env")
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
	t.Setenv("OPENAI_ORG_ID", "org-env")
	t.Setenv("OPENAI_CUSTOM_HEADERS", "X-From-Env: 1")
	srv := fakeopenai.New(fakeopenai.Options{Script: script(fakeopenai.Text("ok"))})
	defer srv.Close()
	c := newClient(t, srv, llm.APIChat, func(cfg *llm.Config) { cfg.APIKey = "" })
	if _, err := c.Complete(context.Background(), userRequest("hi")); err != nil {
		t.Fatal(err)
	}
	h := srv.Requests()[0].Header
	for _, name := range []string{"Authorization", "OpenAI-Organization", "X-From-Env"} {
		if v := h.Get(name); v != "" {
			t.Errorf("%s: %q sent from the environment", name, v)
		}
	}
}

func TestCancel(t *testing.T) {
	for _, api := range apis {
		t.Run(string(api), func(t *testing.T) {
			started := make(chan struct{})
			srv := fakeopenai.New(fakeopenai.Options{
				// The model thinks until the client goes away.
				Script: func(ctx context.Context, _ fakeopenai.Call) (fakeopenai.Reply, error) {
					close(started)
					<-ctx.Done()
					return fakeopenai.Reply{}, ctx.Err()
				},
			})
			defer srv.Close()
			c := newClient(t, srv, api, nil)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := c.Complete(ctx, userRequest("hi"))
				done <- err
			}()
			select {
			case <-started:
			case err := <-done:
				t.Fatalf("Complete returned before the model was asked: %v", err)
			}
			cancel()
			var err error
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("Complete did not return after cancel")
			}
			if !errors.Is(err, context.Canceled) {
				t.Errorf("err = %v, want context.Canceled", err)
			}
			if llm.IsPermanent(err) || errors.Is(err, llm.ErrTimeout) {
				t.Errorf("cancellation is permanent or a timeout: %v", err)
			}
		})
	}
}

func TestTimeout(t *testing.T) {
	srv := fakeopenai.New(fakeopenai.Options{Latency: time.Minute})
	defer srv.Close()
	c := newClient(t, srv, llm.APIChat, func(cfg *llm.Config) { cfg.Timeout = 50 * time.Millisecond })
	_, err := c.Complete(context.Background(), userRequest("hi"))
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, llm.ErrTimeout) || llm.IsPermanent(err) {
		t.Errorf("err = %v, want a retryable deadline error matching ErrTimeout", err)
	}
	if err != nil && !strings.Contains(err.Error(), "did not answer within 50ms") {
		t.Errorf("message = %q", err.Error())
	}
}

func TestRetries(t *testing.T) {
	tests := []struct {
		name       string
		maxRetries int
		want       int // requests made
	}{
		{"none by default", 0, 1},
		{"as configured", 2, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := fakeopenai.New(fakeopenai.Options{Script: func(context.Context, fakeopenai.Call) (fakeopenai.Reply, error) {
				r := fakeopenai.Fail(500, "")
				return r, nil
			}})
			defer srv.Close()
			c := newClient(t, srv, llm.APIChat, func(cfg *llm.Config) { cfg.MaxRetries = tt.maxRetries })
			if _, err := c.Complete(context.Background(), userRequest("hi")); err == nil {
				t.Fatal("want an error")
			}
			if got := len(srv.Requests()); got != tt.want {
				t.Errorf("requests = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestRetryAfter: the wait an endpoint asks for with its error is in
// APIError.RetryAfter, through both APIs, whatever the status: Retry-After
// in seconds or as an HTTP date, OpenAI's retry-after-ms (preferred), and
// nothing for a missing, malformed or past value.
func TestRetryAfter(t *testing.T) {
	t.Run("fake model", func(t *testing.T) {
		for _, api := range apis {
			for _, status := range []int{429, 503} {
				t.Run(fmt.Sprintf("%s/%d", api, status), func(t *testing.T) {
					srv := fakeopenai.New(fakeopenai.Options{Script: replyError(&fakeopenai.HTTPError{Status: status, RetryAfter: "2"})})
					defer srv.Close()
					_, err := newClient(t, srv, api, nil).Complete(context.Background(), userRequest("hi"))
					var apiErr *llm.APIError
					if !errors.As(err, &apiErr) || apiErr.StatusCode != status || apiErr.RetryAfter != 2*time.Second {
						t.Fatalf("err = %#v, want an *APIError %d with RetryAfter 2s", err, status)
					}
					if llm.IsPermanent(err) {
						t.Errorf("a %d with Retry-After is permanent: %v", status, err)
					}
				})
			}
		}
	})
	soon := func() string { return time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat) }
	tests := []struct {
		name     string
		header   func() http.Header
		min, max time.Duration
	}{
		{"seconds", func() http.Header { return http.Header{"Retry-After": {"7"}} }, 7 * time.Second, 7 * time.Second},
		{"fractional seconds", func() http.Header { return http.Header{"Retry-After": {"1.5"}} }, 1500 * time.Millisecond, 1500 * time.Millisecond},
		// An HTTP date has whole seconds: the wait is within a second of 90 s.
		{"HTTP date", func() http.Header { return http.Header{"Retry-After": {soon()}} }, 88 * time.Second, 90 * time.Second},
		{"milliseconds preferred", func() http.Header {
			return http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"9"}}
		}, 250 * time.Millisecond, 250 * time.Millisecond},
		{"malformed milliseconds fall back to seconds", func() http.Header {
			return http.Header{"Retry-After-Ms": {"soon"}, "Retry-After": {"3"}}
		}, 3 * time.Second, 3 * time.Second},
		{"huge", func() http.Header { return http.Header{"Retry-After": {"1e300"}} }, 24 * time.Hour, 24 * time.Hour},
		{"none", func() http.Header { return http.Header{} }, 0, 0},
		{"malformed", func() http.Header { return http.Header{"Retry-After": {"later"}} }, 0, 0},
		{"negative", func() http.Header { return http.Header{"Retry-After": {"-5"}} }, 0, 0},
		{"a date past", func() http.Header {
			return http.Header{"Retry-After": {time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)}}
		}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tt.header() {
					w.Header()[k] = v
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusTooManyRequests)
				_, _ = w.Write([]byte(`{"error":{"message":"Rate limit reached.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`))
			}))
			defer srv.Close()
			c, err := llm.New(llm.Config{BaseURL: srv.URL + "/v1", APIKey: testKey})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Complete(context.Background(), userRequest("hi"))
			var apiErr *llm.APIError
			if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("err = %#v, want an *APIError with status 429", err)
			}
			if apiErr.RetryAfter < tt.min || apiErr.RetryAfter > tt.max {
				t.Errorf("RetryAfter = %v, want %v to %v", apiErr.RetryAfter, tt.min, tt.max)
			}
		})
	}
}

func TestNonJSONErrorBody(t *testing.T) {
	// A proxy or load balancer in front of the model answers in HTML.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte("<html><body>502 Bad Gateway</body></html>"))
	}))
	defer srv.Close()
	c, err := llm.New(llm.Config{BaseURL: srv.URL + "/v1", APIKey: testKey})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Complete(context.Background(), userRequest("hi"))
	var apiErr *llm.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadGateway || llm.IsPermanent(err) {
		t.Errorf("err = %v, want a retryable *APIError with status 502", err)
	}
}

func TestUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there now
	c, err := llm.New(llm.Config{BaseURL: url + "/v1", APIKey: testKey})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Complete(context.Background(), userRequest("hi"))
	if err == nil || llm.IsPermanent(err) {
		t.Fatalf("err = %v, want a retryable error", err)
	}
	if !strings.Contains(err.Error(), url) || strings.Contains(err.Error(), testKey) {
		t.Errorf("message = %q", err.Error())
	}
}

func TestBadBaseURLPath(t *testing.T) {
	srv := fakeopenai.New(fakeopenai.Options{})
	defer srv.Close()
	c, err := llm.New(llm.Config{BaseURL: strings.TrimSuffix(srv.URL(), "/v1") + "/openai/v9"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Complete(context.Background(), userRequest("hi"))
	if !llm.IsPermanent(err) || !strings.Contains(err.Error(), "check the base URL") {
		t.Errorf("err = %v", err)
	}
}

func TestInvalidRequest(t *testing.T) {
	tests := []struct {
		name string
		edit func(*llm.Request)
	}{
		{"no model", func(r *llm.Request) { r.Model = "" }},
		{"no messages", func(r *llm.Request) { r.Messages = nil }},
		{"unknown role", func(r *llm.Request) { r.Messages[1].Role = "robot" }},
		{"tool message without ID", func(r *llm.Request) {
			r.Messages = append(r.Messages, llm.Message{Role: llm.RoleTool, Content: "x"})
		}},
		{"tool call without name", func(r *llm.Request) {
			r.Messages = append(r.Messages, llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "c1"}}})
		}},
		{"user with tool calls", func(r *llm.Request) {
			r.Messages[1].ToolCalls = []llm.ToolCall{{ID: "c1", Name: "shell"}}
		}},
		{"tool without name", func(r *llm.Request) { r.Tools = append(r.Tools, llm.Tool{}) }},
		{"negative max tokens", func(r *llm.Request) { r.MaxOutputTokens = -1 }},
	}
	srv := fakeopenai.New(fakeopenai.Options{})
	defer srv.Close()
	c := newClient(t, srv, llm.APIChat, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := userRequest("hi")
			tt.edit(&req)
			_, err := c.Complete(context.Background(), req)
			if !llm.IsPermanent(err) || !strings.HasPrefix(err.Error(), "invalid model request: ") {
				t.Errorf("err = %v, want a permanent invalid request error", err)
			}
		})
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("%d requests sent for invalid requests", n)
	}
}

func TestNew(t *testing.T) {
	insecure := &http.Client{Transport: &http.Transport{}}
	insecure.Transport.(*http.Transport).TLSClientConfig = insecureTLS()
	tests := []struct {
		name    string
		cfg     llm.Config
		wantErr string
	}{
		{"defaults", llm.Config{}, ""},
		{"ollama without key", llm.Config{BaseURL: "http://localhost:11434/v1"}, ""},
		{"responses", llm.Config{API: llm.APIResponses}, ""},
		{"unknown API", llm.Config{API: "completions"}, `unknown API "completions"`},
		{"bad scheme", llm.Config{BaseURL: "ftp://example.com/v1"}, "http:// or https://"},
		{"no scheme", llm.Config{BaseURL: "api.openai.com/v1"}, "http:// or https://"},
		{"no host", llm.Config{BaseURL: "http:///v1"}, "no host"},
		{"credentials in URL", llm.Config{BaseURL: "https://user:" + testKey + "@example.com/v1"}, "must not contain credentials"},
		{"query", llm.Config{BaseURL: "https://example.com/v1?api-version=1"}, "query or fragment"},
		{"key with newline", llm.Config{APIKey: testKey + "\n"}, "whitespace or control characters"},
		{"negative timeout", llm.Config{Timeout: -time.Second}, "negative timeout"},
		{"negative retries", llm.Config{MaxRetries: -1}, "negative max retries"},
		{"insecure client", llm.Config{HTTPClient: insecure}, "skips TLS certificate verification"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := llm.New(tt.cfg)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), testKey) {
				t.Errorf("message %q contains the key", err)
			}
		})
	}
}

func TestUsageAdd(t *testing.T) {
	u := llm.Usage{InputTokens: 1, OutputTokens: 2, TotalTokens: 3}
	u.Add(llm.Usage{InputTokens: 10, OutputTokens: 20, TotalTokens: 30})
	if u != (llm.Usage{InputTokens: 11, OutputTokens: 22, TotalTokens: 33}) {
		t.Errorf("sum = %+v", u)
	}
}

func script(r fakeopenai.Reply) fakeopenai.Script {
	return func(context.Context, fakeopenai.Call) (fakeopenai.Reply, error) { return r, nil }
}

func replyError(e *fakeopenai.HTTPError) fakeopenai.Script {
	return script(fakeopenai.Reply{Error: e})
}

func insecureTLS() *tls.Config { return &tls.Config{InsecureSkipVerify: true} }

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(ja) == string(jb)
}

func jsonEq(t *testing.T, a, b string) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal([]byte(a), &va); err != nil {
		t.Fatalf("%q: %v", a, err)
	}
	if err := json.Unmarshal([]byte(b), &vb); err != nil {
		t.Fatalf("%q: %v", b, err)
	}
	return equalJSON(t, va, vb)
}
