// Package e2bsandbox is the E2B backend of package sandboxes: one E2B cloud
// sandbox (a Firecracker microVM) per sandbox, driven through a thin
// net/http client of the E2B control plane (https://api.<domain>) and of
// envd, the agent in each sandbox (https://49983-<id>.<domain>).
//
// The workspace root is "workspace" below the default user's home
// directory, as the sandbox resolves it (/home/user/workspace on E2B's
// images); it is found once at Create (or Attach of a State without a
// Root) with `pwd -P`. Commands run as the user "user" with /bin/sh -c.
//
// Killing: envd's SendSignal signals one process, not its group, so on a
// timeout or cancellation the backend sends SIGKILL to the command's pid
// and then runs a sweep that kills every process whose environment holds
// this command's sandboxes.MarkerEnv value (found through /proc; it needs
// GNU grep -z, which E2B's Debian-based images have). Stop and Destroy
// sweep every process of the sandbox the same way. A process that cleared
// its environment escapes the sweep.
//
// Files go through envd's /files. ReadFile and WriteFile first resolve the
// path in the sandbox with realpath -m (GNU coreutils) and refuse one that
// leads out of the workspace; a link changed between the check and the
// transfer is not caught. WriteFile uploads to a temporary name next to the
// file, then sets the mode and renames it in place. Archive runs tar into
// a temporary file beside the workspace and downloads it; Restore uploads
// the tar beside the workspace, extracts it into a staging directory and
// swaps it in with two renames, so a failure leaves the workspace as it
// was.
//
// Control-plane and unary envd calls have a time limit per attempt
// (Options.CallTimeout); the command stream (process Start) is bounded by
// the command's own context instead, as it stays open while the command
// runs. Idempotent calls (GET, DELETE, connect, pause, timeout,
// SendSignal) are retried with backoff and jitter on 429, 5xx and
// connection errors. A Start, or a sandbox create, is sent again only when
// it provably did not reach the server: its connection was never made
// (dial, DNS, proxy error), or it was refused with 429 or 503. After a
// timeout or a connection lost mid-answer the command may be running, and
// a second Start would run it twice. Uploads from a stream are not
// retried. 401/403 are permanent and match sandboxes.ErrUnavailable. The API key and the envd access token are never
// put into errors or State.
package e2bsandbox

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
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentbot/agentbot/sandboxes"
)

// Name is the registry name of the backend.
const Name = "e2b"

// Options configure the backend.
type Options struct {
	// APIKey is the E2B API key (e2b_...). Empty makes the backend
	// unavailable.
	APIKey string
	// Domain is the E2B domain; default "e2b.app".
	Domain string
	// APIURL is the control plane's base URL; default https://api.<Domain>.
	APIURL string
	// EnvdURL returns the envd base URL of a sandbox; default
	// https://49983-<id>.<domain>, the domain being the one the control
	// plane returned for the sandbox, or Domain.
	EnvdURL func(sandboxID string) string
	// Template is the default template; default "base".
	Template string
	// Timeout is the sandbox lifetime set at create, attach and resume;
	// default 1h.
	Timeout time.Duration
	// HTTPClient is the client to use; default one with a clone of
	// http.DefaultTransport.
	HTTPClient *http.Client
	// CallTimeout bounds one attempt of each control-plane and unary envd
	// call, not the command stream (bounded by the command's context);
	// default 30s.
	CallTimeout time.Duration
	// Retries is how many times a retryable call is retried; default 4.
	Retries int
}

// Backend is the E2B backend.
type Backend struct {
	opts Options
	hc   *http.Client
}

var (
	_ sandboxes.Backend  = (*Backend)(nil)
	_ sandboxes.Lister   = (*Backend)(nil)
	_ sandboxes.Remover  = (*Backend)(nil)
	_ sandboxes.Instance = (*instance)(nil)
	_ sandboxes.Pauser   = (*instance)(nil)
)

// New returns a backend. It does not contact E2B.
func New(opts Options) (*Backend, error) {
	if opts.Domain == "" {
		opts.Domain = "e2b.app"
	}
	if opts.APIURL == "" {
		opts.APIURL = "https://api." + opts.Domain
	}
	opts.APIURL = strings.TrimRight(opts.APIURL, "/")
	if _, err := url.Parse(opts.APIURL); err != nil {
		return nil, fmt.Errorf("e2b: bad API URL: %w", err)
	}
	if opts.Template == "" {
		opts.Template = "base"
	}
	if opts.Timeout <= 0 {
		opts.Timeout = time.Hour
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = 30 * time.Second
	}
	if opts.Retries <= 0 {
		opts.Retries = 4
	}
	hc := opts.HTTPClient
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.ResponseHeaderTimeout = 2 * time.Minute
		hc = &http.Client{Transport: tr}
	}
	return &Backend{opts: opts, hc: hc}, nil
}

// Description implements sandboxes.Backend.
func (b *Backend) Description() string {
	return "e2b: one E2B cloud microVM per sandbox (template " + b.opts.Template + "), workspace in ~/workspace"
}

// Available implements sandboxes.Backend. It checks the key is set, not
// that E2B accepts it.
func (b *Backend) Available(ctx context.Context) error {
	if b.opts.APIKey == "" {
		return fmt.Errorf("%w: no E2B_API_KEY", sandboxes.ErrUnavailable)
	}
	return nil
}

func (b *Backend) envdURL(id, domain string) string {
	if b.opts.EnvdURL != nil {
		return strings.TrimRight(b.opts.EnvdURL(id), "/")
	}
	if domain == "" {
		domain = b.opts.Domain
	}
	return "https://49983-" + id + "." + domain
}

// ---- HTTP core ----

// apiError is a non-2xx answer.
type apiError struct {
	status  int
	message string
	perm    error // ErrUnavailable for a rejected key
}

func (e *apiError) Error() string {
	if e.message == "" {
		return fmt.Sprintf("E2B answered HTTP %d", e.status)
	}
	return fmt.Sprintf("E2B answered HTTP %d: %s", e.status, e.message)
}

func (e *apiError) Unwrap() error { return e.perm }

// retryable reports whether an answer with this status is worth another
// attempt. A call that may not be repeated is retried only on 429 and 503,
// with which a rate limiter or an overloaded server refuses a request it
// did not process; a 500 or 504 may come after the work was done.
func retryable(status int, replayable bool) bool {
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		return true
	}
	return replayable && status >= 500 && status != http.StatusNotImplemented
}

// call is one request.
type call struct {
	method, url string
	header      http.Header
	body        []byte // nil: no body
	ctype       string
	envd        bool // envd, not the control plane: 401 means the token
	// idempotent marks a POST whose repetition does no harm (connect,
	// pause, timeout, SendSignal). Other POSTs (a create, a process
	// Start) are sent again only when they provably did not reach the
	// server.
	idempotent bool
}

// replayable reports whether c may be sent again after it may have
// reached the server.
func (c call) replayable() bool {
	switch c.method {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete, http.MethodOptions:
		return true
	}
	return c.idempotent
}

// do sends c with retries and returns a 2xx response (whose body the caller
// closes) or an error. The response's context stays alive until the body
// is closed when stream is set; otherwise the call has CallTimeout.
//
// Retries, with backoff and jitter, follow 429, 5xx and connection errors,
// except that a call that is not replayable (a process Start, a create) is
// sent again only when the server provably did not act on it: its
// connection was never made, or it was refused with 429 or 503. After a
// timeout or a connection lost mid-answer the process may be running, and
// a second Start would run the command again.
func (b *Backend) do(ctx context.Context, c call, stream bool) (*http.Response, error) {
	replay := c.replayable()
	var lastErr error
	for attempt := 0; attempt <= b.opts.Retries; attempt++ {
		if attempt > 0 {
			d := time.Duration(100<<min(attempt, 6)) * time.Millisecond
			d = d/2 + rand.N(d)
			select {
			case <-ctx.Done():
				return nil, errors.Join(ctx.Err(), lastErr)
			case <-time.After(d):
			}
		}
		resp, gotConn, err := b.once(ctx, c, stream)
		if err == nil {
			return resp, nil
		}
		lastErr = err
		var ae *apiError
		switch {
		case ctx.Err() != nil:
			return nil, err
		case errors.As(err, &ae):
			if !retryable(ae.status, replay) || (c.envd && ae.status == http.StatusBadGateway) {
				return nil, err
			}
		case isConnErr(err):
			if !replay && !neverSent(err, gotConn) {
				return nil, fmt.Errorf("not sent again, as the server may have acted on it: %w", err)
			}
		default:
			return nil, err
		}
	}
	return nil, lastErr
}

func isConnErr(err error) bool {
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &oe) || errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
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

type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelBody) Close() error { err := c.ReadCloser.Close(); c.cancel(); return err }

// once makes one attempt. gotConn reports whether a connection was made
// for it, after which the server may have seen the request.
func (b *Backend) once(ctx context.Context, c call, stream bool) (resp *http.Response, gotConn bool, err error) {
	var cancel context.CancelFunc
	if stream {
		ctx, cancel = context.WithCancel(ctx)
	} else {
		ctx, cancel = context.WithTimeout(ctx, b.opts.CallTimeout)
	}
	var conn atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { conn.Store(true) }})
	var body io.Reader
	if c.body != nil {
		body = bytes.NewReader(c.body)
	}
	req, err := http.NewRequestWithContext(ctx, c.method, c.url, body)
	if err != nil {
		cancel()
		return nil, false, err
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	if c.ctype != "" {
		req.Header.Set("Content-Type", c.ctype)
	}
	if !c.envd {
		req.Header.Set("X-API-Key", b.opts.APIKey)
	}
	resp, err = b.hc.Do(req)
	if err != nil {
		cancel()
		return nil, conn.Load(), b.redact(err)
	}
	if resp.StatusCode/100 == 2 {
		if stream {
			resp.Body = cancelBody{resp.Body, cancel}
			return resp, true, nil
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		if err != nil {
			return nil, true, b.redact(err)
		}
		resp.Body = io.NopCloser(bytes.NewReader(data))
		return resp, true, nil
	}
	defer cancel()
	defer resp.Body.Close()
	return nil, true, b.respError(resp, c.envd)
}

func (b *Backend) respError(resp *http.Response, envd bool) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var e struct {
		Message string `json:"message"`
	}
	msg := strings.TrimSpace(string(data))
	if json.Unmarshal(data, &e) == nil && e.Message != "" {
		msg = e.Message
	}
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	ae := &apiError{status: resp.StatusCode, message: b.redactString(msg)}
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		what := "E2B rejected the API key"
		if envd {
			what = "E2B envd rejected the sandbox's access token"
		}
		ae.perm = fmt.Errorf("%w: %s", sandboxes.ErrUnavailable, what)
		ae.message = what + " (" + ae.message + ")"
	}
	return ae
}

func (b *Backend) redactString(s string) string {
	if b.opts.APIKey != "" {
		s = strings.ReplaceAll(s, b.opts.APIKey, "[redacted]")
	}
	return s
}

type redacted struct {
	msg string
	err error
}

func (r *redacted) Error() string { return r.msg }
func (r *redacted) Unwrap() error { return r.err }

func (b *Backend) redact(err error) error {
	if err == nil || b.opts.APIKey == "" || !strings.Contains(err.Error(), b.opts.APIKey) {
		return err
	}
	return &redacted{b.redactString(err.Error()), err}
}

// jsonCall sends a control-plane call with a JSON body and decodes the
// answer into out (when not nil). A POST is taken as not idempotent.
func (b *Backend) jsonCall(ctx context.Context, method, path string, in, out any) (int, error) {
	return b.jsonDo(ctx, call{method: method, url: b.opts.APIURL + path}, in, out)
}

// idempotentPost is jsonCall for a POST whose repetition does no harm, so
// that it is retried like a GET.
func (b *Backend) idempotentPost(ctx context.Context, path string, in, out any) (int, error) {
	return b.jsonDo(ctx, call{method: http.MethodPost, url: b.opts.APIURL + path, idempotent: true}, in, out)
}

func (b *Backend) jsonDo(ctx context.Context, c call, in, out any) (int, error) {
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return 0, err
		}
		c.body, c.ctype = data, "application/json"
	}
	resp, err := b.do(ctx, c, false)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return resp.StatusCode, fmt.Errorf("decoding E2B's answer to %s %s: %w", c.method, strings.TrimPrefix(c.url, b.opts.APIURL), err)
		}
	}
	return resp.StatusCode, nil
}

func isStatus(err error, status int) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.status == status
}

// ---- control plane ----

type sandboxJSON struct {
	TemplateID      string            `json:"templateID"`
	SandboxID       string            `json:"sandboxID"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken"`
	Domain          *string           `json:"domain"`
	State           string            `json:"state"`
	Metadata        map[string]string `json:"metadata"`
	StartedAt       time.Time         `json:"startedAt"`
}

// Metadata keys the backend sets on every sandbox, besides the Spec's
// labels.
const (
	metaAgentbot = "agentbot"      // "1": made by agentbot; List filters on it
	metaName     = "agentbot.name" // Spec.Name
	metaKey      = "agentbot.key"  // sandboxes.KeyHash(Spec.Key)
)

func (b *Backend) timeoutSecs() int { return int(b.opts.Timeout / time.Second) }

// Create implements sandboxes.Backend.
//
// With spec.Key the sandbox carries the metadata agentbot.key (the key's
// sandboxes.KeyHash), and Create first lists the running and paused
// sandboxes with it: if there is one, it attaches to it (resuming it)
// instead of creating. E2B has no unique names, so two Creates of one key
// at once may both create; each then lists again, and all keep the
// sandbox started first (the smaller ID on a tie), the others killing what
// they made. That holds as far as E2B's list shows a sandbox as soon as it
// is created.
func (b *Backend) Create(ctx context.Context, spec sandboxes.Spec) (sandboxes.Instance, error) {
	if err := b.Available(ctx); err != nil {
		return nil, err
	}
	if spec.Root != "" {
		return nil, sandboxes.Invalidf("the e2b backend chooses its workspace root (~/workspace); Spec.Root %q cannot be honoured", spec.Root)
	}
	tmpl := spec.Image
	if tmpl == "" {
		tmpl = b.opts.Template
	}
	meta := map[string]string{}
	for k, v := range spec.Labels {
		meta[k] = v
	}
	meta[metaAgentbot] = "1"
	if spec.Name != "" {
		meta[metaName] = spec.Name
	}
	keyHash := ""
	if spec.Key != "" {
		keyHash = sandboxes.KeyHash(spec.Key)
		meta[metaKey] = keyHash
		first, err := b.keyed(ctx, keyHash)
		if err != nil {
			return nil, err
		}
		if first != nil {
			return b.Attach(ctx, sandboxes.State{Backend: Name, ID: first.ID, Image: tmpl, Env: spec.Env})
		}
	}
	body := map[string]any{"templateID": tmpl, "timeout": b.timeoutSecs(), "metadata": meta}
	if len(spec.Env) > 0 {
		body["envVars"] = spec.Env
	}
	var sb sandboxJSON
	// Not idempotent: a repeated create would make a second sandbox, so it
	// is sent again only when the first provably did not reach E2B.
	if _, err := b.jsonCall(ctx, http.MethodPost, "/sandboxes", body, &sb); err != nil {
		return nil, fmt.Errorf("creating an E2B sandbox: %w", err)
	}
	inst := b.newInstance(sb, sandboxes.State{Backend: Name, ID: sb.SandboxID, Image: tmpl, Env: spec.Env})
	if keyHash != "" {
		first, err := b.keyed(ctx, keyHash)
		if err == nil && first != nil && first.ID != sb.SandboxID {
			// Another Create of the key made one first: keep that one.
			_ = inst.kill(context.WithoutCancel(ctx))
			return b.Attach(ctx, sandboxes.State{Backend: Name, ID: first.ID, Image: tmpl, Env: spec.Env})
		}
	}
	if err := inst.findRoot(ctx); err != nil {
		_ = inst.kill(context.WithoutCancel(ctx))
		return nil, err
	}
	return inst, nil
}

// keyed returns the sandbox of keyHash that was started first, or nil when
// there is none.
func (b *Backend) keyed(ctx context.Context, keyHash string) (*sandboxes.Listed, error) {
	list, err := b.list(ctx, url.Values{metaAgentbot: {"1"}, metaKey: {keyHash}})
	if err != nil {
		return nil, fmt.Errorf("looking for the sandbox of the key: %w", err)
	}
	var first *sandboxes.Listed
	for i, l := range list {
		if first == nil || l.Created.Before(first.Created) || (l.Created.Equal(first.Created) && l.ID < first.ID) {
			first = &list[i]
		}
	}
	return first, nil
}

func (b *Backend) newInstance(sb sandboxJSON, st sandboxes.State) *instance {
	domain := ""
	if sb.Domain != nil {
		domain = *sb.Domain
	}
	st.Meta = map[string]string{}
	if domain != "" {
		st.Meta["domain"] = domain
	}
	if sb.EnvdVersion != "" {
		st.Meta["envdVersion"] = sb.EnvdVersion
	}
	return &instance{b: b, st: st, token: sb.EnvdAccessToken, envd: b.envdURL(st.ID, domain)}
}

// connect resumes or reconnects to a sandbox.
func (b *Backend) connect(ctx context.Context, id string) (sandboxJSON, error) {
	var sb sandboxJSON
	_, err := b.idempotentPost(ctx, "/sandboxes/"+url.PathEscape(id)+"/connect", map[string]any{"timeout": b.timeoutSecs()}, &sb)
	if isStatus(err, http.StatusNotFound) {
		return sb, sandboxes.NotFoundError(id)
	}
	return sb, err
}

// Attach implements sandboxes.Backend: it connects to the sandbox,
// resuming it when paused.
func (b *Backend) Attach(ctx context.Context, st sandboxes.State) (sandboxes.Instance, error) {
	if err := b.Available(ctx); err != nil {
		return nil, err
	}
	if st.ID == "" {
		return nil, sandboxes.Invalidf("no sandbox ID in the state")
	}
	sb, err := b.connect(ctx, st.ID)
	if err != nil {
		return nil, err
	}
	st.Backend = Name
	inst := b.newInstance(sb, st)
	if st.Root == "" {
		if err := inst.findRoot(ctx); err != nil {
			return nil, err
		}
	}
	return inst, nil
}

// Get returns the sandbox's state as E2B reports it ("running", "paused").
func (b *Backend) Get(ctx context.Context, id string) (string, error) {
	var sb sandboxJSON
	_, err := b.jsonCall(ctx, http.MethodGet, "/sandboxes/"+url.PathEscape(id), nil, &sb)
	if isStatus(err, http.StatusNotFound) {
		return "", sandboxes.NotFoundError(id)
	}
	return sb.State, err
}

// SetTimeout sets how long from now the sandbox lives.
func (b *Backend) SetTimeout(ctx context.Context, id string, d time.Duration) error {
	_, err := b.idempotentPost(ctx, "/sandboxes/"+url.PathEscape(id)+"/timeout", map[string]any{"timeout": int(d / time.Second)}, nil)
	if isStatus(err, http.StatusNotFound) {
		return sandboxes.NotFoundError(id)
	}
	return err
}

// List implements sandboxes.Lister: the running and paused sandboxes with
// agentbot's metadata, page by page. Their States have no Root; Attach
// finds it. Created is when the sandbox was last started (E2B reports no
// other time), which is never earlier than its creation.
func (b *Backend) List(ctx context.Context) ([]sandboxes.Listed, error) {
	return b.list(ctx, url.Values{metaAgentbot: {"1"}})
}

// list lists the running and paused sandboxes whose metadata holds meta.
func (b *Backend) list(ctx context.Context, meta url.Values) ([]sandboxes.Listed, error) {
	if err := b.Available(ctx); err != nil {
		return nil, err
	}
	var out []sandboxes.Listed
	next := ""
	for range 1000 {
		q := url.Values{"metadata": {meta.Encode()}, "state": {"running,paused"}, "limit": {"100"}}
		if next != "" {
			q.Set("nextToken", next)
		}
		resp, err := b.do(ctx, call{method: http.MethodGet, url: b.opts.APIURL + "/v2/sandboxes?" + q.Encode()}, false)
		if err != nil {
			return nil, fmt.Errorf("listing E2B sandboxes: %w", err)
		}
		var page []sandboxJSON
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("decoding E2B's list of sandboxes: %w", err)
		}
		for _, sb := range page {
			l := sandboxes.Listed{
				State:   sandboxes.State{Backend: Name, ID: sb.SandboxID, Image: sb.TemplateID, Meta: map[string]string{}},
				Labels:  map[string]string{},
				Created: sb.StartedAt,
			}
			if sb.State != "" {
				l.Meta["state"] = sb.State
			}
			for k, v := range sb.Metadata {
				if k != metaAgentbot && k != metaName && k != metaKey {
					l.Labels[k] = v
				}
			}
			out = append(out, l)
		}
		next = resp.Header.Get("X-Next-Token")
		if next == "" || len(page) == 0 {
			return out, nil
		}
	}
	return out, nil
}

// Remove implements sandboxes.Remover: it kills the sandbox of state.ID
// without connecting to it (which would resume a paused one).
func (b *Backend) Remove(ctx context.Context, state sandboxes.State) error {
	if err := b.Available(ctx); err != nil {
		return err
	}
	return (&instance{b: b, st: state}).kill(ctx)
}
