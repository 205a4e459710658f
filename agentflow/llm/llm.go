// Package llm is the model client of agentbot: one Complete call that sends a
// conversation and the tools on offer to an OpenAI-compatible endpoint and
// returns the model's next message (a final text or tool calls).
//
// It speaks either the Chat Completions API (the default, which OpenAI, Azure
// OpenAI, Ollama, vLLM and LiteLLM all serve) or the Responses API, through
// github.com/openai/openai-go/v3. Both are used statelessly: every call sends
// the whole conversation, so a call can be retried, or moved to another
// worker, without server-side state.
//
// The client does not retry by default: the agent's model call runs in a
// Temporal activity, and Temporal retries it. IsPermanent tells the activity
// which failures are not worth retrying (a bad key, an unknown model, a
// malformed request). Error messages are short, fit for a chat user, and never
// contain the API key.
//
// The package reads no environment variables of its own (the program passes a
// Config), except what Go's HTTP stack reads: the proxy variables
// (HTTPS_PROXY, HTTP_PROXY, NO_PROXY) and the system's CA configuration
// (SSL_CERT_FILE, SSL_CERT_DIR).
package llm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// Role says who wrote a Message.
type Role string

// The roles of a conversation.
const (
	// RoleSystem is the operator's instructions to the model.
	RoleSystem Role = "system"
	// RoleUser is a message from a person in the chat.
	RoleUser Role = "user"
	// RoleAssistant is a message from the model: text, tool calls, or both.
	RoleAssistant Role = "assistant"
	// RoleTool is the result of one tool call, answering the assistant's
	// ToolCall with the same ID (Message.ToolCallID).
	RoleTool Role = "tool"
)

// Message is one entry of a conversation, in a form independent of the wire
// API. It is plain data, safe to keep in workflow state or a transcript.
type Message struct {
	// Role says who wrote the message.
	Role Role `json:"role"`
	// Content is the text. For a tool message it is the tool's output; for
	// an assistant message with tool calls it may be empty.
	Content string `json:"content,omitempty"`
	// ToolCalls are the tools the assistant asked to run (assistant
	// messages only).
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID is the ID of the ToolCall this message answers (tool
	// messages only).
	ToolCallID string `json:"tool_call_id,omitempty"`
}

// ToolCall is the model's request to run one tool.
type ToolCall struct {
	// ID identifies the call; the tool message that answers it carries the
	// same ID. It is chosen by the model endpoint.
	ID string `json:"id"`
	// Name is the name of the tool, one of Request.Tools.
	Name string `json:"name"`
	// Arguments is the raw JSON object the model wrote, not validated: the
	// model may produce malformed JSON, and the tool must say so in its
	// result rather than fail the turn.
	Arguments string `json:"arguments"`
}

// Tool describes a function the model may call.
type Tool struct {
	// Name is what the model calls the tool by: letters, digits, '_' and
	// '-', at most 64 characters.
	Name string `json:"name"`
	// Description tells the model what the tool does and when to use it.
	Description string `json:"description,omitempty"`
	// Parameters is the JSON schema of the arguments object; nil means the
	// tool takes no arguments.
	Parameters map[string]any `json:"parameters,omitempty"`
}

// Request is one model call: the whole conversation so far and the tools on
// offer.
type Request struct {
	// Model is the model name, as the endpoint knows it ("gpt-5.2",
	// "llama3.1:8b", an Azure deployment name). Required.
	Model string `json:"model"`
	// Messages is the conversation, oldest first. Required.
	Messages []Message `json:"messages"`
	// Tools are the functions the model may call; none means text only.
	Tools []Tool `json:"tools,omitempty"`
	// MaxOutputTokens caps the tokens the model may generate (sent as
	// max_completion_tokens or max_output_tokens); 0 leaves it to the
	// endpoint.
	MaxOutputTokens int64 `json:"max_output_tokens,omitempty"`
}

// Usage counts the tokens of one or more model calls, as the endpoint
// reported them.
type Usage struct {
	// InputTokens is the size of the prompt (conversation and tools).
	InputTokens int64 `json:"input_tokens"`
	// OutputTokens is what the model generated, reasoning included.
	OutputTokens int64 `json:"output_tokens"`
	// TotalTokens is the sum of the two, as the endpoint reported it.
	TotalTokens int64 `json:"total_tokens"`
}

// Add adds o to u, so a turn can sum the usage of its model calls.
func (u *Usage) Add(o Usage) {
	u.InputTokens += o.InputTokens
	u.OutputTokens += o.OutputTokens
	u.TotalTokens += o.TotalTokens
}

// Response is the model's answer to a Request.
type Response struct {
	// Message is the assistant's message: a final text, tool calls to run,
	// or both. Its Role is RoleAssistant.
	Message Message `json:"message"`
	// Usage is the token count of this call.
	Usage Usage `json:"usage"`
	// FinishReason says why the model stopped, in the Chat Completions
	// vocabulary whichever API was used: "stop" (a final answer),
	// "tool_calls", "length" (MaxOutputTokens or the context window ran
	// out; the message may be cut short) or "content_filter".
	FinishReason string `json:"finish_reason"`
}

// The finish reasons of a Response.
const (
	FinishStop          = "stop"
	FinishToolCalls     = "tool_calls"
	FinishLength        = "length"
	FinishContentFilter = "content_filter"
)

// API selects the wire protocol of the model endpoint.
type API string

// The supported APIs.
const (
	// APIChat is the Chat Completions API (POST {base}/chat/completions),
	// served by OpenAI and most compatible servers. It is the default.
	APIChat API = "chat"
	// APIResponses is OpenAI's Responses API (POST {base}/responses), used
	// statelessly: store=false and the full input on every call.
	APIResponses API = "responses"
)

// DefaultBaseURL is the endpoint used when Config.BaseURL is empty.
const DefaultBaseURL = "https://api.openai.com/v1"

// DefaultTimeout bounds one Complete call when Config.Timeout is zero.
// Reasoning models can think for minutes before answering.
const DefaultTimeout = 10 * time.Minute

// Config configures a Client. The program builds it (from its environment or
// flags); this package reads no environment variable itself.
type Config struct {
	// BaseURL is the API root including its version path, e.g.
	// "https://api.openai.com/v1", "http://localhost:11434/v1" (Ollama) or
	// "https://<resource>.openai.azure.com/openai/v1". Empty means
	// DefaultBaseURL. It must be http or https, without credentials, query
	// or fragment.
	BaseURL string
	// APIKey is sent as "Authorization: Bearer <key>". It may be empty for
	// local endpoints that need none (Ollama, vLLM).
	APIKey string
	// API selects Chat Completions (APIChat, the default when empty) or the
	// Responses API (APIResponses).
	API API
	// HTTPClient makes the requests. Nil means a client over a clone of
	// http.DefaultTransport, which honours HTTPS_PROXY, HTTP_PROXY,
	// NO_PROXY and the system's CA certificates (SSL_CERT_FILE,
	// SSL_CERT_DIR). A client whose transport skips TLS verification is
	// refused.
	HTTPClient *http.Client
	// Timeout bounds one Complete call, retries included. Zero means
	// DefaultTimeout.
	Timeout time.Duration
	// MaxRetries is how many times openai-go retries a failed request
	// itself (408, 409, 429, 5xx, connection errors). Zero, the default,
	// means no retry: the Temporal activity that calls Complete retries
	// instead, with its own policy and visible in the workflow history.
	MaxRetries int
}

// Client calls one model endpoint. It is safe for concurrent use.
type Client struct {
	api      API
	apiKey   string
	baseURL  string
	timeout  time.Duration
	chat     openai.ChatCompletionService
	response responses.ResponseService
}

// New validates cfg and returns a Client. It makes no request: a wrong key or
// model shows up on the first Complete.
func New(cfg Config) (*Client, error) {
	api := cfg.API
	switch api {
	case "":
		api = APIChat
	case APIChat, APIResponses:
	default:
		return nil, fmt.Errorf("llm config: unknown API %q (want %q or %q)", cfg.API, APIChat, APIResponses)
	}
	base := cfg.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	u, err := url.Parse(base)
	if err != nil {
		// The parse error quotes the URL; say what is wrong without it, in
		// case a key was pasted into it.
		return nil, errors.New("llm config: base URL is not a valid URL")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("llm config: base URL must start with http:// or https://, got scheme %q", u.Scheme)
	case u.Host == "":
		return nil, errors.New("llm config: base URL has no host")
	case u.User != nil:
		return nil, errors.New("llm config: base URL must not contain credentials; set the API key instead")
	case u.RawQuery != "" || u.Fragment != "":
		return nil, errors.New("llm config: base URL must not have a query or fragment")
	}
	if strings.ContainsFunc(cfg.APIKey, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		// Typically a trailing newline from a secret file.
		return nil, errors.New("llm config: API key contains whitespace or control characters")
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("llm config: negative timeout %s", cfg.Timeout)
	}
	if cfg.MaxRetries < 0 {
		return nil, fmt.Errorf("llm config: negative max retries %d", cfg.MaxRetries)
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = defaultHTTPClient()
	} else if t, ok := hc.Transport.(*http.Transport); ok && t.TLSClientConfig != nil && t.TLSClientConfig.InsecureSkipVerify {
		return nil, errors.New("llm config: HTTP client skips TLS certificate verification; trust the CA through SSL_CERT_FILE instead")
	}
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}

	// The services are built directly rather than through openai.NewClient,
	// which would also read OPENAI_API_KEY, OPENAI_BASE_URL, OPENAI_ORG_ID,
	// OPENAI_CUSTOM_HEADERS... from the environment behind the program's
	// back (and could send a key meant for one endpoint to another).
	opts := []option.RequestOption{
		option.WithBaseURL(u.String()),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(cfg.MaxRetries),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	return &Client{
		api:      api,
		apiKey:   cfg.APIKey,
		baseURL:  u.Redacted(),
		timeout:  timeout,
		chat:     openai.NewChatCompletionService(opts...),
		response: responses.NewResponseService(opts...),
	}, nil
}

// defaultHTTPClient clones http.DefaultTransport so the proxy variables and
// the system's CA configuration apply, as for every outbound client of
// agentbot, without sharing the program-wide transport's connection pool.
func defaultHTTPClient() *http.Client {
	if t, ok := http.DefaultTransport.(*http.Transport); ok {
		return &http.Client{Transport: t.Clone()}
	}
	// Someone wrapped the default transport (tracing, for instance): keep
	// the wrapper.
	return &http.Client{Transport: http.DefaultTransport}
}

// Complete sends req and returns the model's next message. ctx bounds the
// call (as does Config.Timeout); cancelling it aborts the request at once.
//
// A failure reported by the endpoint is an *APIError. Permanent failures (an
// invalid request, a rejected key, an unknown model) match ErrPermanent;
// IsPermanent tells them from those worth retrying (rate limits, server
// errors, network errors, timeouts). A conversation too long for the model
// also matches ErrContextLength.
func (c *Client) Complete(ctx context.Context, req Request) (Response, error) {
	if err := validate(req); err != nil {
		return Response{}, err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, c.timeout, ErrTimeout)
	defer cancel()

	if c.api == APIResponses {
		return c.completeResponses(ctx, req)
	}
	return c.completeChat(ctx, req)
}

// validate catches, before any request, what every endpoint would reject.
func validate(req Request) error {
	if req.Model == "" {
		return invalidf("no model given")
	}
	if len(req.Messages) == 0 {
		return invalidf("no messages")
	}
	for i, m := range req.Messages {
		switch m.Role {
		case RoleSystem, RoleUser:
			if len(m.ToolCalls) > 0 || m.ToolCallID != "" {
				return invalidf("message %d: a %s message cannot carry tool calls", i, m.Role)
			}
		case RoleAssistant:
			for j, tc := range m.ToolCalls {
				if tc.ID == "" || tc.Name == "" {
					return invalidf("message %d: tool call %d has no ID or name", i, j)
				}
			}
		case RoleTool:
			if m.ToolCallID == "" {
				return invalidf("message %d: a tool message needs the ID of the call it answers", i)
			}
		default:
			return invalidf("message %d: unknown role %q", i, m.Role)
		}
	}
	for i, t := range req.Tools {
		if t.Name == "" {
			return invalidf("tool %d has no name", i)
		}
	}
	if req.MaxOutputTokens < 0 {
		return invalidf("negative max output tokens")
	}
	return nil
}
