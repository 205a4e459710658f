package llm

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"
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
	// ErrContextLength matches a conversation too long for the model's
	// context window (code context_length_exceeded). It is also permanent:
	// the caller must compact the conversation before calling again.
	ErrContextLength = errors.New("conversation too long for the model")
)

// errTimeout is the cause of the context that Config.Timeout bounds, so a
// timeout of the call tells itself apart from the caller's deadline.
var errTimeout = errors.New("model call timed out")

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
		return c.apiError(apiErr.StatusCode, apiErr.Code, apiErr.Type, apiErr.Message, model)
	}
	if ctx.Err() != nil {
		if errors.Is(context.Cause(ctx), errTimeout) {
			return fmt.Errorf("model call timed out after %s: %w", c.timeout, context.DeadlineExceeded)
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
	case code == "context_length_exceeded":
		e.permanent = true
		e.contextLength = true
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
