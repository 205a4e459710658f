package daytonasandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/agentbot/agentbot/sandboxes"
)

// Retry and timeout policy of every HTTP call.
const (
	callTimeout = 2 * time.Minute // one attempt of one call, unless ctx is shorter
	maxAttempts = 5
	baseBackoff = 200 * time.Millisecond
	maxBackoff  = 5 * time.Second
)

// apiError is a non-2xx answer of the Daytona API or toolbox. Its text holds
// the status and the server's message, never the request's headers.
type apiError struct {
	Status int
	Msg    string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("daytona: HTTP %d: %s", e.Status, e.Msg)
}

// errRejected is the error of a 401 or 403: permanent, never retried.
func errRejected(status int) error {
	return fmt.Errorf("%w: Daytona rejected the API key (HTTP %d)", sandboxes.ErrUnavailable, status)
}

// client is a thin HTTP client with bearer auth and retries.
type client struct {
	hc     *http.Client
	key    string
	apiURL string
}

// request is one call: body is replayed on every attempt.
type request struct {
	method, url string
	body        []byte
	contentType string
	accept      string
	timeout     time.Duration // per attempt; 0 means callTimeout
}

func retryable(status int) bool {
	return status == http.StatusTooManyRequests || status >= 500
}

// do runs r with retries on 429, 5xx and connection errors, and returns the
// body of a 2xx answer. Other answers give an *apiError (401/403 give
// errRejected).
func (c *client) do(ctx context.Context, r request) ([]byte, error) {
	var last error
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if attempt > 0 {
			d := min(baseBackoff<<(attempt-1), maxBackoff)
			d = d/2 + rand.N(d/2+1) // jitter
			select {
			case <-ctx.Done():
				return nil, errors.Join(ctx.Err(), last)
			case <-time.After(d):
			}
		}
		body, status, err := c.once(ctx, r)
		switch {
		case err == nil && status/100 == 2:
			return body, nil
		case err != nil:
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			var ne net.Error
			if errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || strings.Contains(err.Error(), "connection") {
				last = err
				continue
			}
			return nil, err
		case status == http.StatusUnauthorized || status == http.StatusForbidden:
			return nil, errRejected(status)
		default:
			last = &apiError{Status: status, Msg: message(body)}
			if !retryable(status) {
				return nil, last
			}
		}
	}
	return nil, last
}

func (c *client) once(ctx context.Context, r request) ([]byte, int, error) {
	t := r.timeout
	if t == 0 {
		t = callTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, t)
	defer cancel()
	var rd io.Reader
	if r.body != nil {
		rd = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, r.url, rd)
	if err != nil {
		return nil, 0, fmt.Errorf("daytona: building request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	if r.accept != "" {
		req.Header.Set("Accept", r.accept)
	} else {
		req.Header.Set("Accept", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		// *url.Error holds the URL (no key); strip nothing else.
		return nil, 0, fmt.Errorf("daytona: %s %s: %w", r.method, redactURL(r.url), unwrapURLErr(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, 0, fmt.Errorf("daytona: reading answer of %s %s: %w", r.method, redactURL(r.url), err)
	}
	return body, resp.StatusCode, nil
}

func unwrapURLErr(err error) error {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) {
		if inner := ue.Unwrap(); inner != nil {
			return inner
		}
	}
	return err
}

// redactURL drops the query string, which may hold paths, from messages.
func redactURL(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i]
	}
	return u
}

// message extracts a server message from an error body.
func message(body []byte) string {
	var m struct {
		Message any    `json:"message"`
		Error   string `json:"error"`
	}
	if json.Unmarshal(body, &m) == nil {
		if m.Message != nil {
			return fmt.Sprint(m.Message)
		}
		if m.Error != "" {
			return m.Error
		}
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

func (c *client) json(ctx context.Context, method, url string, in, out any) error {
	r := request{method: method, url: url}
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		r.body, r.contentType = b, "application/json"
	}
	body, err := c.do(ctx, r)
	if err != nil {
		return err
	}
	if out != nil && len(body) > 0 {
		if err := json.Unmarshal(body, out); err != nil {
			return fmt.Errorf("daytona: decoding answer of %s %s: %w", method, redactURL(url), err)
		}
	}
	return nil
}
