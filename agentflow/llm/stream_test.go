package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentbot/agentbot/agentflow/llm"
	"github.com/agentbot/agentbot/internal/fakeopenai"
)

// TestStream reads streamed answers of both APIs from the fake endpoint's
// server-sent events: the deltas, in order, make the answer; tool calls
// and usage come whole; a stream that breaks off is a retryable error, an
// error before the stream is the same error as without streaming.
func TestStream(t *testing.T) {
	text := "Here is the answer, written a few characters at a time, with ünïcödé and a `code span`."
	for _, api := range apis {
		t.Run(string(api), func(t *testing.T) {
			cases := []struct {
				name  string
				reply fakeopenai.Reply
				check func(t *testing.T, deltas []string, resp llm.Response, err error)
			}{
				{"text", fakeopenai.Reply{Text: text, Usage: &fakeopenai.Usage{InputTokens: 11, OutputTokens: 7}},
					func(t *testing.T, deltas []string, resp llm.Response, err error) {
						if err != nil {
							t.Fatal(err)
						}
						if len(deltas) < 5 || strings.Join(deltas, "") != text || resp.Message.Content != text {
							t.Errorf("deltas %q, content %q", deltas, resp.Message.Content)
						}
						if resp.FinishReason != llm.FinishStop || resp.Usage != (llm.Usage{InputTokens: 11, OutputTokens: 7, TotalTokens: 18}) {
							t.Errorf("finish %q usage %+v", resp.FinishReason, resp.Usage)
						}
					}},
				{"tool call", fakeopenai.Reply{ToolCalls: []fakeopenai.ReplyToolCall{{Name: "shell", Arguments: json.RawMessage(`{"command":"ls -la /tmp"}`)}}},
					func(t *testing.T, deltas []string, resp llm.Response, err error) {
						if err != nil {
							t.Fatal(err)
						}
						if len(deltas) != 0 {
							t.Errorf("deltas %q for a tool call", deltas)
						}
						tc := resp.Message.ToolCalls
						if len(tc) != 1 || tc[0].Name != "shell" || tc[0].Arguments != `{"command":"ls -la /tmp"}` || tc[0].ID == "" || resp.FinishReason != llm.FinishToolCalls {
							t.Errorf("%+v", resp)
						}
					}},
				{"cut", fakeopenai.Reply{Text: text, Stream: fakeopenai.Streaming{CutAfter: 6}},
					func(t *testing.T, deltas []string, resp llm.Response, err error) {
						if err == nil || llm.IsPermanent(err) {
							t.Fatalf("err %v, want a retryable error", err)
						}
						if got := strings.Join(deltas, ""); got == text || !strings.HasPrefix(text, got) {
							t.Errorf("deltas before the cut: %q", got)
						}
					}},
				{"refused before the stream", fakeopenai.Reply{Error: &fakeopenai.HTTPError{Status: 429, Type: "requests", Code: "rate_limit_exceeded", Message: "slow down", RetryAfter: "2"}},
					func(t *testing.T, deltas []string, resp llm.Response, err error) {
						var apiErr *llm.APIError
						if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.RetryAfter != 2*time.Second || llm.IsPermanent(err) {
							t.Fatalf("err %#v", err)
						}
					}},
				{"error in the stream", fakeopenai.Reply{Text: text, Stream: fakeopenai.Streaming{ErrorAfter: 4,
					Error: &fakeopenai.HTTPError{Type: "server_error", Message: "the model crashed"}}},
					func(t *testing.T, deltas []string, resp llm.Response, err error) {
						if err == nil || !strings.Contains(err.Error(), "the model crashed") {
							t.Fatalf("err %v", err)
						}
						if strings.Contains(err.Error(), testKey) {
							t.Errorf("the key in %v", err)
						}
					}},
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					reply := tc.reply
					srv := fakeopenai.New(fakeopenai.Options{APIKey: testKey, StreamChunk: 3,
						Script: func(context.Context, fakeopenai.Call) (fakeopenai.Reply, error) { return reply, nil }})
					t.Cleanup(srv.Close)
					c := newClient(t, srv, api, nil)
					var deltas []string
					resp, err := c.Stream(context.Background(), userRequest("go"), func(d string) { deltas = append(deltas, d) })
					tc.check(t, deltas, resp, err)
					// The server records a call when its handler ends,
					// which may be after the client gave up on the
					// stream: Close waits for the handlers.
					srv.Close()
					reqs := srv.Requests()
					if len(reqs) != 1 || !reqs[0].Call.Stream {
						t.Errorf("requests %+v, want one streamed", reqs)
					}
				})
			}
		})
	}
}

// TestStreamTimeout: a stream that stalls is abandoned at the client's
// timeout, as a call that does not answer.
func TestStreamTimeout(t *testing.T) {
	srv := fakeopenai.New(fakeopenai.Options{APIKey: testKey,
		Script: func(context.Context, fakeopenai.Call) (fakeopenai.Reply, error) {
			return fakeopenai.Reply{Text: "never finished, never finished", Stream: fakeopenai.Streaming{StallAfter: 3}}, nil
		}})
	t.Cleanup(srv.Close)
	c := newClient(t, srv, llm.APIChat, func(cfg *llm.Config) { cfg.Timeout = 500 * time.Millisecond })
	_, err := c.Stream(context.Background(), userRequest("go"), nil)
	if err == nil || llm.IsPermanent(err) || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("err %v, want a retryable time-out", err)
	}
}
