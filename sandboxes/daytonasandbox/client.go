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
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentbot/agentbot/sandboxes"
)

// Retry policy of every HTTP call.
const (
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
	hc      *http.Client
	key     string
	apiURL  string
	timeout time.Duration // one attempt of a call without its own timeout
}

// request is one call: body is replayed on every attempt.
type request struct {
	method, url string
	body        []byte
	contentType string
	accept      string
	timeout     time.Duration // per attempt; 0 means client.timeout
	// idempotent marks a POST whose repetition does no harm (an upload
	// to a fixed path, a start or stop). Other POSTs, such as an execute,
	// are sent again only when they provably did not reach the server.
	idempotent bool
}

// replayable reports whether r may be sent again after it may have
// reached the server.
func (r request) replayable() bool {
	switch r.method {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete, http.MethodOptions:
		return true
	}
	return r.idempotent
}

// retryable reports whether an answer with this status is worth another
// attempt. A request that may not be repeated is retried only on 429 and
// 503, with which a rate limiter or an overloaded server refuses a request
// it did not process; a 500, 502 or 504 may come after the work was done.
func retryable(status int, replayable bool) bool {
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		return true
	}
	return replayable && status >= 500
}

// neverSent reports whether err, from an attempt that got no connection,
// is a failure to connect (a dial, DNS or proxy error), so that the server
// cannot have seen the request.
func neverSent(err error, gotConn bool) bool {
	if gotConn {
		return false
	}
	var oe *net.OpError
	var de *net.DNSError
	return errors.As(err, &de) || (errors.As(err, &oe) && (oe.Op == "dial" || oe.Op == "proxyconnect"))
}

// do runs r and returns the body of a 2xx answer. Other answers give an
// *apiError (401/403 give errRejected). It retries with backoff on 429,
// 5xx and connection errors, except that a request that is not
// replayable (a POST that starts a command) is sent again only when the
// server provably did not act on it: its connection was never made, or it
// was refused with 429 or 503. After a timeout or a connection lost
// mid-answer the command may be running, and a second attempt would run it
// again.
func (c *client) do(ctx context.Context, r request) ([]byte, error) {
	replay := r.replayable()
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
		body, status, gotConn, err := c.once(ctx, r)
		switch {
		case err == nil && status/100 == 2:
			return body, nil
		case err != nil:
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			var ne net.Error
			if !errors.As(err, &ne) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "connection") {
				return nil, err
			}
			if !replay && !neverSent(err, gotConn) {
				return nil, fmt.Errorf("not sent again, as the server may have acted on it: %w", err)
			}
			last = err
		case status == http.StatusUnauthorized || status == http.StatusForbidden:
			return nil, errRejected(status)
		default:
			last = &apiError{Status: status, Msg: message(body)}
			if !retryable(status, replay) {
				return nil, last
			}
		}
	}
	return nil, last
}

// once makes one attempt. gotConn reports whether a connection was made
// for it, after which the server may have seen the request.
func (c *client) once(ctx context.Context, r request) (body []byte, status int, gotConn bool, err error) {
	t := r.timeout
	if t == 0 {
		t = c.timeout
	}
	ctx, cancel := context.WithTimeout(ctx, t)
	defer cancel()
	var conn atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { conn.Store(true) }})
	var rd io.Reader
	if r.body != nil {
		rd = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, r.url, rd)
	if err != nil {
		return nil, 0, false, fmt.Errorf("daytona: building request: %w", err)
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
		return nil, 0, conn.Load(), fmt.Errorf("daytona: %s %s: %w", r.method, redactURL(r.url), unwrapURLErr(err))
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	if err != nil {
		return nil, 0, true, fmt.Errorf("daytona: reading answer of %s %s: %w", r.method, redactURL(r.url), err)
	}
	return body, resp.StatusCode, true, nil
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
	return c.jsonRequest(ctx, request{method: method, url: url}, in, out)
}

// jsonRequest sends r with in as its JSON body (none when nil) and decodes
// the answer into out (when not nil).
func (c *client) jsonRequest(ctx context.Context, r request, in, out any) error {
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
			return fmt.Errorf("daytona: decoding answer of %s %s: %w", r.method, redactURL(r.url), err)
		}
	}
	return nil
}
