package llm

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/openai/openai-go/v3"
)

// The sentinel errors of this package, matched with errors.Is.
var (
	// ErrPermanent matches failures that the same call cannot fix by
	// trying again: the endpoint rejected the request (400, 413, 422), the
	// API key (401, 403), the model or the URL (404), or the account has no
	// quota left (429 insufficient_quota); the endpoint's TLS certificate
	// is not trusted; or the Request itself is invalid. A Temporal activity
	// turns these into non-retryable errors.
	ErrPermanent = errors.New("permanent model error")
	// ErrContextLength matches a request too long for the model's context
	// window: OpenAI's code context_length_exceeded, the messages of the
	// same failure from common OpenAI-compatible servers (vLLM, llama.cpp,
	// LiteLLM, Ollama, TGI, and the compatibility endpoints of Anthropic,
	// Gemini, Mistral and xAI), and any 413. It is also permanent: the
	// same call fails again, and the caller must send a shorter
	// conversation (APIError.ContextTokens and RequestTokens say by how
	// much when the endpoint did).
	ErrContextLength = errors.New("conversation too long for the model")
	// ErrTimeout matches a call that Config.Timeout ended: the endpoint
	// did not answer in time (a hung or overloaded server). It is not
	// permanent, and also matches context.DeadlineExceeded. It is the
	// cause of the context Config.Timeout bounds, so a timeout of the
	// call tells itself apart from the caller's deadline.
	ErrTimeout = errors.New("model call timed out")
)

// IsPermanent reports whether err is a failure not worth retrying (it matches
// ErrPermanent). Rate limits (429), server errors (5xx), 408, 409, network
// errors, timeouts and cancellations are not permanent.
func IsPermanent(err error) bool { return errors.Is(err, ErrPermanent) }

// APIError is a failure that the model endpoint reported with an HTTP status.
// Its message is short and safe to show a chat user: it names the status and
// the problem, and carries the endpoint's own explanation only where that
// helps and with the API key removed.
type APIError struct {
	// StatusCode is the HTTP status of the response: 200 for a Responses
	// API answer whose status is "failed" (an error during generation).
	StatusCode int
	// Code is the OpenAI error code when the endpoint gave one
	// ("invalid_api_key", "model_not_found", "rate_limit_exceeded",
	// "context_length_exceeded", ...), else empty.
	Code string
	// Type is the OpenAI error type when the endpoint gave one
	// ("invalid_request_error", "server_error", ...), else empty.
	Type string
	// ContextTokens and RequestTokens are, for an error matching
	// ErrContextLength, the model's context window and what the request
	// came to (the completion reserved included, where the endpoint
	// counted it), in tokens, when the endpoint's message said them;
	// else 0.
	ContextTokens, RequestTokens int
	// RetryAfter is how long the endpoint asked the client to wait before
	// trying again, from its Retry-After header (seconds or an HTTP date)
	// or OpenAI's retry-after-ms, the latter preferred; 0 when it gave
	// none, or a time already past. A wait over maxRetryAfter is reported
	// as maxRetryAfter. The caller decides how much of it to honour.
	RetryAfter time.Duration

	msg           string
	permanent     bool
	contextLength bool
}

// Error returns the safe summary.
func (e *APIError) Error() string { return e.msg }

// Is makes a permanent APIError match ErrPermanent, and one about the context
// window ErrContextLength.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrPermanent:
		return e.permanent
	case ErrContextLength:
		return e.contextLength
	}
	return false
}

// timeoutError is a call that Config.Timeout ended. Its message says so
// in words for a chat user; it matches ErrTimeout and
// context.DeadlineExceeded.
type timeoutError struct{ after time.Duration }

func (e *timeoutError) Error() string {
	return fmt.Sprintf("model call timed out: the endpoint did not answer within %s", e.after)
}

func (e *timeoutError) Is(target error) bool {
	return target == ErrTimeout || target == context.DeadlineExceeded
}

// invalidRequestError is a Request that no endpoint would accept.
type invalidRequestError struct{ msg string }

func (e *invalidRequestError) Error() string        { return "invalid model request: " + e.msg }
func (e *invalidRequestError) Is(target error) bool { return target == ErrPermanent }

func invalidf(format string, args ...any) error {
	return &invalidRequestError{msg: fmt.Sprintf(format, args...)}
}

// permanentError marks a non-API failure (an untrusted certificate, a
// malformed answer) as permanent while keeping its cause.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }
func (e *permanentError) Is(target error) bool {
	return target == ErrPermanent
}

// redactedError carries a message from which the API key was removed. Its
// cause stays available to errors.Is and errors.As.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// translate turns an error of openai-go into one of this package.
func (c *Client) translate(ctx context.Context, model string, err error) error {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		// The *openai.Error is not wrapped: it holds the request, whose
		// Authorization header carries the key.
		e := c.apiError(apiErr.StatusCode, apiErr.Code, apiErr.Type, apiErr.Message, model)
		if apiErr.Response != nil {
			e.RetryAfter = retryAfter(apiErr.Response.Header, time.Now())
		}
		return e
	}
	if ctx.Err() != nil {
		if errors.Is(context.Cause(ctx), ErrTimeout) {
			return &timeoutError{after: c.timeout}
		}
		return fmt.Errorf("model call aborted: %w", ctx.Err())
	}
	if isCertificateError(err) {
		return &permanentError{err: c.redact(fmt.Errorf("model endpoint %s has a TLS certificate this host does not trust (for a private CA or a TLS-inspecting proxy, add its certificate through SSL_CERT_FILE or SSL_CERT_DIR): %w", c.baseURL, err))}
	}
	return c.redact(fmt.Errorf("model call to %s failed: %w", c.baseURL, err))
}

func isCertificateError(err error) bool {
	var (
		verify    *tls.CertificateVerificationError
		authority x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
	)
	return errors.As(err, &verify) || errors.As(err, &authority) ||
		errors.As(err, &hostname) || errors.As(err, &invalid)
}

// apiError builds the safe error for an HTTP failure.
func (c *Client) apiError(status int, code, typ, serverMsg, model string) *APIError {
	e := &APIError{StatusCode: status, Code: code, Type: typ}
	detail := c.detail(serverMsg)
	switch {
	case status == http.StatusUnauthorized:
		// OpenAI echoes part of the key in this message: leave it out.
		e.permanent = true
		if c.apiKey == "" {
			e.msg = "model endpoint requires an API key (401)"
		} else {
			e.msg = "model endpoint rejected the API key (401)"
		}
	case status == http.StatusForbidden:
		e.permanent = true
		e.msg = "model endpoint refused access with this API key (403)" + detail
	case status == http.StatusNotFound:
		e.permanent = true
		if code == "model_not_found" || strings.Contains(strings.ToLower(serverMsg), "model") {
			e.msg = fmt.Sprintf("unknown model %q (404)", model)
		} else {
			e.msg = fmt.Sprintf("model endpoint not found (404): check the base URL %s", c.baseURL) + detail
		}
	case isContextLength(status, code, typ, serverMsg):
		e.permanent = true
		e.contextLength = true
		e.ContextTokens, e.RequestTokens = contextNumbers(serverMsg)
		e.msg = fmt.Sprintf("conversation is too long for model %q (%d)", model, status) + detail
	case status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge || status == http.StatusUnprocessableEntity:
		e.permanent = true
		e.msg = fmt.Sprintf("model endpoint rejected the request (%d)", status) + detail
	case status == http.StatusTooManyRequests && code == "insufficient_quota":
		// A 429 that waiting does not cure: the account's billing.
		e.permanent = true
		e.msg = "model endpoint account is out of quota (429)" + detail
	case status == http.StatusTooManyRequests:
		e.msg = "model endpoint rate limit reached (429)" + detail
	case status >= 500:
		e.msg = fmt.Sprintf("model endpoint failed (%d)", status) + detail
	default:
		e.msg = fmt.Sprintf("model endpoint returned status %d", status) + detail
	}
	return e
}

// maxRetryAfter bounds APIError.RetryAfter: an endpoint asking for longer
// is as good as down for a chat turn, and the bound keeps a huge header
// from overflowing a time.Duration.
const maxRetryAfter = 24 * time.Hour

// retryAfter reads how long a response asks the client to wait, as of now:
// retry-after-ms (milliseconds, OpenAI's), else Retry-After (seconds, or
// an HTTP date). Fractions are kept; a malformed, negative or past value
// counts as none (0); anything over maxRetryAfter is maxRetryAfter.
func retryAfter(h http.Header, now time.Time) time.Duration {
	for _, f := range []struct {
		name string
		unit time.Duration
	}{{"Retry-After-Ms", time.Millisecond}, {"Retry-After", time.Second}} {
		v := strings.TrimSpace(h.Get(f.name))
		if v == "" {
			continue
		}
		if n, err := strconv.ParseFloat(v, 64); err == nil || errors.Is(err, strconv.ErrRange) {
			if math.IsNaN(n) || n <= 0 {
				continue
			}
			if n >= float64(maxRetryAfter)/float64(f.unit) {
				return maxRetryAfter
			}
			return time.Duration(n * float64(f.unit))
		}
		if f.unit != time.Second {
			continue
		}
		if t, err := http.ParseTime(v); err == nil {
			if d := t.Sub(now); d > 0 {
				return min(d, maxRetryAfter)
			}
		}
	}
	return 0
}

// contextCodes are the error codes and types that say a request did not fit
// the model's context window: OpenAI's (also Azure's, DeepSeek's, Groq's
// and those of servers copying them), GitHub Copilot's, LiteLLM's
// exception name, llama.cpp's type.
var contextCodes = []string{
	"context_length_exceeded", "model_max_prompt_tokens_exceeded",
	"context_window_exceeded", "exceed_context_size_error",
}

// contextPhrases are what OpenAI-compatible servers that give no such code
// say of the same failure, lower case. They are specific on purpose: a 400
// about something else that is too long (a tool call ID, a tool's
// description) must stay an ordinary bad request, since shortening the
// conversation cannot fix it.
var contextPhrases = []string{
	"maximum context length",                  // OpenAI, vLLM, DeepSeek, Mistral, LiteLLM forwarding them
	"exceeds the context window",              // OpenAI Responses API
	"reduce the length of the messages",       // OpenAI, Groq
	"exceeds the available context size",      // llama.cpp server
	"exceeds the context length",              // Ollama
	"longer than the maximum model length",    // vLLM: "The decoder prompt (length N) is longer than ..."
	"is too long and exceeds limit of",        // vLLM: "Input prompt (N tokens) is too long and exceeds limit of M"
	"prompt is too long",                      // Anthropic's compatibility endpoint
	"exceed context limit",                    // Anthropic: "input length and `max_tokens` exceed context limit"
	"exceeds the maximum number of tokens",    // Gemini's compatibility endpoint
	"maximum prompt length",                   // xAI
	"contextwindowexceedederror",              // LiteLLM proxy
	"`inputs` tokens + `max_new_tokens` must", // Text Generation Inference
}

// isContextLength reports whether an HTTP failure says the request did not
// fit the model's context window. A 413 always counts, whoever sent it (the
// model or a proxy in front of it): the body is too large, and a shorter
// conversation is the remedy. The phrases count with any error status,
// since some servers (Ollama) say it with a 500, which retrying as it is
// would never cure.
func isContextLength(status int, code, typ, serverMsg string) bool {
	if slices.Contains(contextCodes, code) || slices.Contains(contextCodes, typ) {
		return true
	}
	if status == http.StatusRequestEntityTooLarge {
		return true
	}
	if status < 400 {
		return false
	}
	msg := strings.ToLower(serverMsg)
	for _, p := range contextPhrases {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// contextPatterns find the context window and the size of the request in
// the messages of context-length errors: each has two numbers, in the
// order its window field says.
var contextPatterns = []struct {
	re         *regexp.Regexp
	windowLast bool
}{
	// OpenAI, vLLM, DeepSeek: "This model's maximum context length is 8192
	// tokens. However, your messages resulted in 9000 tokens" or "...you
	// requested 9000 tokens (8000 in the messages, 1000 in the completion)".
	{regexp.MustCompile(`(?is)maximum context length is (\d+) tokens.*?(?:resulted in|requested) (\d+) tokens`), false},
	// llama.cpp: "request (4476 tokens) exceeds the available context size (4096 tokens)".
	{regexp.MustCompile(`(?i)\((\d+) tokens\) exceeds the available context size \((\d+) tokens\)`), true},
	// Anthropic: "prompt is too long: 201266 tokens > 200000 maximum".
	{regexp.MustCompile(`(?i)prompt is too long: (\d+) tokens > (\d+) maximum`), true},
	// Gemini: "The input token count (35868) exceeds the maximum number of tokens allowed (32768)".
	{regexp.MustCompile(`(?i)input token count \((\d+)\) exceeds the maximum number of tokens allowed \((\d+)\)`), true},
	// vLLM: "The decoder prompt (length 9000) is longer than the maximum model length of 8192".
	{regexp.MustCompile(`(?i)\(length (\d+)\) is longer than the maximum model length of (\d+)`), true},
	// vLLM: "Input prompt (9000 tokens) is too long and exceeds limit of 8192".
	{regexp.MustCompile(`(?i)\((\d+) tokens\) is too long and exceeds limit of (\d+)`), true},
	// xAI: "This model's maximum prompt length is 131072 but the request contains 136973 tokens".
	{regexp.MustCompile(`(?i)maximum prompt length is (\d+) but the request contains (\d+) tokens`), false},
}

// contextNumbers returns the context window and the request's size in
// tokens that a context-length error message states, or zeros.
func contextNumbers(msg string) (window, request int) {
	for _, p := range contextPatterns {
		m := p.re.FindStringSubmatch(msg)
		if m == nil {
			continue
		}
		a, errA := strconv.Atoi(m[1])
		b, errB := strconv.Atoi(m[2])
		if errA != nil || errB != nil {
			continue
		}
		if p.windowLast {
			a, b = b, a
		}
		return a, b
	}
	return 0, 0
}

// maxDetail bounds the endpoint's own explanation quoted in an error.
const maxDetail = 300

// detail returns ": " and the endpoint's message, on one line, cut to
// maxDetail bytes, with the API key removed; or "" when there is none.
func (c *Client) detail(msg string) string {
	msg = strings.Join(strings.Fields(c.redactString(msg)), " ")
	if msg == "" {
		return ""
	}
	if len(msg) > maxDetail {
		cut := maxDetail
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "…"
	}
	return ": " + msg
}

const redactedKey = "[redacted]"

func (c *Client) redactString(s string) string {
	if c.apiKey == "" {
		return s
	}
	return strings.ReplaceAll(s, c.apiKey, redactedKey)
}

// redact returns err, or a copy of its message without the API key when the
// message contains it.
func (c *Client) redact(err error) error {
	msg := err.Error()
	if safe := c.redactString(msg); safe != msg {
		return &redactedError{msg: safe, err: err}
	}
	return err
}
