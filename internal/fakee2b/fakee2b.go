// Package fakee2b is an in-process fake of the E2B control plane and of
// envd, the agent inside each sandbox, for tests. It implements the subset
// agentbot uses with real behaviour: sandboxes with a state (running or
// paused), a per-sandbox temporary directory as the filesystem, commands
// really run with the given cmd/args in a process group of their own, with
// only the environment given, SendSignal, and /files upload and download.
//
// Every request to and response from the REST parts (the control plane and
// envd's /files) is validated against the OpenAPI files in the specs
// directory with kin-openapi; the Connect endpoints are checked by hand
// against e2b-envd-connect.md. A violation makes the fake answer 500 with
// the reason and is recorded: see Failures.
//
// Faults can be injected: FailNext answers a request with an error status
// unhandled, DropNext handles it and closes the connection unanswered.
//
// Limits: commands run on the host as the test's user, not in a VM;
// "paused" stops the sandbox's process groups with SIGSTOP (processes that
// left their group are not frozen); timeouts are recorded, not enforced.
package fakee2b

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// SpecsDirEnv overrides where the spec files are looked for.
const SpecsDirEnv = "AGENTBOT_SPECS_DIR"

// DefaultSpecsDir returns $AGENTBOT_SPECS_DIR, or ../../../shared/specs
// relative to the working directory (a package directory at test time).
func DefaultSpecsDir() string {
	if d := os.Getenv(SpecsDirEnv); d != "" {
		return d
	}
	return filepath.Join("..", "..", "..", "shared", "specs")
}

// Options configure a Server.
type Options struct {
	// APIKey is the key the control plane accepts in X-API-Key.
	APIKey string
	// SpecsDir holds e2b-openapi.yml and e2b-envd-openapi.yml. Empty
	// means no validation.
	SpecsDir string
	// BaseDir is where sandbox directories go; empty means a new
	// temporary directory, removed by Close.
	BaseDir string
}

// Server is a running fake.
type Server struct {
	// URL is the control plane's base URL.
	URL    string
	apiKey string
	srv    *httptest.Server
	base   string
	ownDir bool

	ctrl, envd *validator

	mu       sync.Mutex
	sbx      map[string]*sandbox
	failures []string
	faults   []fault
	drops    []fault
}

type fault struct {
	method, path string
	status       int
}

// discardWriter is the ResponseWriter of a request whose answer is dropped.
type discardWriter struct{ h http.Header }

func (d discardWriter) Header() http.Header         { return d.h }
func (d discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d discardWriter) WriteHeader(int)             {}

type sandbox struct {
	id, dir, token, template string
	state                    string
	meta, env                map[string]string
	started, end             time.Time
	procs                    map[int]*exec.Cmd
}

type validator struct {
	doc    *openapi3.T
	router routers.Router
}

// New starts a fake. A SpecsDir whose files cannot be loaded is an error.
func New(opts Options) (*Server, error) {
	s := &Server{apiKey: opts.APIKey, sbx: map[string]*sandbox{}, base: opts.BaseDir}
	if s.base == "" {
		d, err := os.MkdirTemp("", "fakee2b-")
		if err != nil {
			return nil, err
		}
		s.base, s.ownDir = d, true
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	if opts.SpecsDir != "" {
		var err error
		if s.ctrl, err = loadValidator(filepath.Join(opts.SpecsDir, "e2b-openapi.yml"), s.URL); err == nil {
			s.envd, err = loadValidator(filepath.Join(opts.SpecsDir, "e2b-envd-openapi.yml"), s.URL)
		}
		if err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// Validating reports whether requests and responses are checked against
// the specs.
func (s *Server) Validating() bool { return s.ctrl != nil }

func loadValidator(file, serverURL string) (*validator, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(file)
	if err != nil {
		return nil, fmt.Errorf("fakee2b: loading %s: %w", file, err)
	}
	doc.Servers = openapi3.Servers{{URL: serverURL}}
	r, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("fakee2b: router for %s: %w", file, err)
	}
	return &validator{doc: doc, router: r}, nil
}

// Close stops the server, kills every sandbox's processes and removes the
// directories the fake made.
func (s *Server) Close() {
	s.srv.Close()
	s.mu.Lock()
	for _, sb := range s.sbx {
		sb.killAll()
	}
	s.mu.Unlock()
	if s.ownDir {
		os.RemoveAll(s.base)
	}
}

// Failures returns the spec violations seen so far.
func (s *Server) Failures() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.failures...)
}

// FailNext makes the next request with this method and path (the path
// without the envd prefix for envd) answer status with an E2B error body,
// for testing retries. Injected answers are not validated.
func (s *Server) FailNext(method, path string, status int) {
	s.mu.Lock()
	s.faults = append(s.faults, fault{method, path, status})
	s.mu.Unlock()
}

// DropNext makes the next request with this method and path (as for
// FailNext) be handled in full (a command it starts runs to its end) and
// then closes its connection without an answer, as when a connection
// resets after the server acted.
func (s *Server) DropNext(method, path string) {
	s.mu.Lock()
	s.drops = append(s.drops, fault{method, path, 0})
	s.mu.Unlock()
}

// EnvdURL is the envd base URL of a sandbox of this fake.
func (s *Server) EnvdURL(id string) string { return s.URL + "/sbx/" + id }

// Exists reports whether the sandbox is known or its directory is left.
func (s *Server) Exists(id string) bool {
	s.mu.Lock()
	_, ok := s.sbx[id]
	s.mu.Unlock()
	if ok {
		return true
	}
	_, err := os.Lstat(filepath.Join(s.base, id))
	return err == nil
}

func (s *Server) fail(format string, args ...any) string {
	msg := fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.failures = append(s.failures, msg)
	s.mu.Unlock()
	return msg
}

func (s *Server) takeFault(method, path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return take(&s.faults, method, path)
}

func (s *Server) takeDrop(method, path string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return take(&s.drops, method, path) >= 0
}

// take removes the first fault of *faults matching the request and returns
// its status, or -1 when none matches; s.mu is held.
func take(faults *[]fault, method, path string) int {
	for i, f := range *faults {
		if f.method == method && f.path == path {
			*faults = append((*faults)[:i], (*faults)[i+1:]...)
			return f.status
		}
	}
	return -1
}

// serve routes a request: /sbx/<id>/... is envd, the rest the control plane.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	var id string
	v := s.ctrl
	if rest, ok := strings.CutPrefix(p, "/sbx/"); ok {
		id, p, _ = strings.Cut(rest, "/")
		p = "/" + p
		v = s.envd
	}
	if s.takeDrop(r.Method, p) {
		s.serve(discardWriter{h: http.Header{}}, r)
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
		return
	}
	if st := s.takeFault(r.Method, p); st > 0 {
		writeJSON(w, st, map[string]any{"code": st, "message": "injected fault"})
		return
	}
	if id != "" && (strings.HasPrefix(p, "/process.Process/") || strings.HasPrefix(p, "/filesystem.Filesystem/")) {
		s.serveConnect(w, r, id, p)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "reading body: "+err.Error(), http.StatusBadRequest)
		return
	}
	// The request as the spec sees it.
	vr := r.Clone(r.Context())
	vu, _ := url.Parse(s.URL + p)
	vu.RawQuery = r.URL.RawQuery
	vr.URL, vr.Host, vr.RequestURI = vu, vu.Host, ""
	vr.Body = io.NopCloser(bytes.NewReader(body))
	var in *openapi3filter.RequestValidationInput
	if v != nil {
		route, params, err := v.router.FindRoute(vr)
		if err != nil {
			http.Error(w, s.fail("fakee2b: %s %s: no such operation in the spec: %v", r.Method, p, err), http.StatusInternalServerError)
			return
		}
		in = &openapi3filter.RequestValidationInput{Request: vr, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: checkAuthHeader}}
		if err := openapi3filter.ValidateRequest(r.Context(), in); err != nil {
			http.Error(w, s.fail("fakee2b: request %s %s violates the spec: %v", r.Method, p, err), http.StatusInternalServerError)
			return
		}
	}
	rec := httptest.NewRecorder()
	r2 := r.Clone(r.Context())
	r2.Body = io.NopCloser(bytes.NewReader(body))
	if id != "" {
		s.serveEnvd(rec, r2, id, p)
	} else {
		s.serveControl(rec, r2, p)
	}
	res := rec.Result()
	if in != nil {
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: res.StatusCode,
			Header: res.Header, Body: io.NopCloser(bytes.NewReader(rec.Body.Bytes()))}
		if err := openapi3filter.ValidateResponse(r.Context(), out); err != nil {
			http.Error(w, s.fail("fakee2b: response %d to %s %s violates the spec: %v", res.StatusCode, r.Method, p, err), http.StatusInternalServerError)
			return
		}
	}
	for k, vv := range res.Header {
		w.Header()[k] = vv
	}
	w.WriteHeader(res.StatusCode)
	w.Write(rec.Body.Bytes())
}

// checkAuthHeader accepts a security scheme when its header is present
// (the handlers check the values).
func checkAuthHeader(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	ss := in.SecurityScheme
	if ss == nil || ss.Type != "apiKey" || ss.In != "header" {
		return fmt.Errorf("scheme %s not used by the fake", in.SecuritySchemeName)
	}
	if in.RequestValidationInput.Request.Header.Get(ss.Name) == "" {
		return fmt.Errorf("no %s header", ss.Name)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func apiErr(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"code": status, "message": msg})
}

func newID(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// ---- control plane ----

func (s *Server) serveControl(w http.ResponseWriter, r *http.Request, p string) {
	if r.Header.Get("X-API-Key") != s.apiKey || s.apiKey == "" {
		apiErr(w, http.StatusUnauthorized, "Invalid API key")
		return
	}
	parts := strings.Split(strings.Trim(p, "/"), "/")
	switch {
	case p == "/sandboxes" && r.Method == http.MethodPost:
		s.create(w, r)
	case p == "/v2/sandboxes" && r.Method == http.MethodGet:
		s.list(w, r)
	case len(parts) >= 2 && parts[0] == "sandboxes":
		s.mu.Lock()
		sb := s.sbx[parts[1]]
		s.mu.Unlock()
		if sb == nil {
			apiErr(w, http.StatusNotFound, fmt.Sprintf("sandbox %q not found", parts[1]))
			return
		}
		op := ""
		if len(parts) == 3 {
			op = parts[2]
		}
		s.sandboxOp(w, r, sb, op)
	default:
		apiErr(w, http.StatusNotFound, "not implemented by the fake")
	}
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var req struct {
		TemplateID string            `json:"templateID"`
		Timeout    *int              `json:"timeout"`
		Metadata   map[string]string `json:"metadata"`
		EnvVars    map[string]string `json:"envVars"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		apiErr(w, http.StatusBadRequest, err.Error())
		return
	}
	timeout := 15
	if req.Timeout != nil {
		timeout = *req.Timeout
	}
	id := "i" + newID(8)
	sb := &sandbox{id: id, dir: filepath.Join(s.base, id), token: newID(16), template: req.TemplateID,
		state: "running", meta: req.Metadata, env: req.EnvVars, started: time.Now().UTC(),
		end: time.Now().UTC().Add(time.Duration(timeout) * time.Second), procs: map[int]*exec.Cmd{}}
	if err := os.MkdirAll(filepath.Join(sb.dir, "home", "user"), 0o755); err != nil {
		apiErr(w, http.StatusInternalServerError, err.Error())
		return
	}
	s.mu.Lock()
	s.sbx[id] = sb
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, s.sandboxJSON(sb))
}

func (s *Server) sandboxJSON(sb *sandbox) map[string]any {
	return map[string]any{"templateID": sb.template, "sandboxID": sb.id, "clientID": "fake",
		"envdVersion": "0.4.0", "envdAccessToken": sb.token, "domain": nil}
}

func (s *Server) detailJSON(sb *sandbox, withToken bool) map[string]any {
	m := map[string]any{"templateID": sb.template, "sandboxID": sb.id, "clientID": "fake",
		"startedAt": sb.started.Format(time.RFC3339Nano), "endAt": sb.end.Format(time.RFC3339),
		"cpuCount": 2, "memoryMB": 512, "diskSizeMB": 1024, "state": sb.state, "envdVersion": "0.4.0"}
	if sb.meta != nil {
		m["metadata"] = sb.meta
	}
	if withToken {
		m["envdAccessToken"] = sb.token
	}
	return m
}

// list serves GET /v2/sandboxes: the metadata filter ("k=v&k2=v2", each
// part URL-encoded), the state filter (comma-separated), and pages of
// limit sandboxes (oldest first), the next page's token in X-Next-Token.
func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	want, err := url.ParseQuery(q.Get("metadata"))
	if err != nil {
		apiErr(w, http.StatusBadRequest, "bad metadata filter: "+err.Error())
		return
	}
	states := map[string]bool{}
	for _, st := range strings.Split(q.Get("state"), ",") {
		if st != "" {
			states[st] = true
		}
	}
	limit := 100
	if l := q.Get("limit"); l != "" {
		if n, err := strconv.Atoi(l); err == nil && n > 0 {
			limit = n
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var match []*sandbox
	for _, sb := range s.sbx {
		ok := len(states) == 0 || states[sb.state]
		for k := range want {
			if sb.meta[k] != want.Get(k) {
				ok = false
			}
		}
		if ok {
			match = append(match, sb)
		}
	}
	slices.SortFunc(match, func(a, b *sandbox) int {
		if c := a.started.Compare(b.started); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	start := 0
	if tok := q.Get("nextToken"); tok != "" {
		n, err := strconv.Atoi(tok)
		if err != nil || n < 0 || n > len(match) {
			apiErr(w, http.StatusBadRequest, "bad nextToken")
			return
		}
		start = n
	}
	end := min(start+limit, len(match))
	out := []any{}
	for _, sb := range match[start:end] {
		out = append(out, s.detailJSON(sb, false))
	}
	if end < len(match) {
		w.Header().Set("X-Next-Token", strconv.Itoa(end))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) sandboxOp(w http.ResponseWriter, r *http.Request, sb *sandbox, op string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case op == "" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, s.detailJSON(sb, true))
	case op == "" && r.Method == http.MethodDelete:
		sb.killAll()
		delete(s.sbx, sb.id)
		os.RemoveAll(sb.dir)
		w.WriteHeader(http.StatusNoContent)
	case op == "timeout" && r.Method == http.MethodPost:
		var req struct{ Timeout int }
		json.NewDecoder(r.Body).Decode(&req)
		sb.end = time.Now().UTC().Add(time.Duration(req.Timeout) * time.Second)
		w.WriteHeader(http.StatusNoContent)
	case op == "pause" && r.Method == http.MethodPost:
		if sb.state != "running" {
			apiErr(w, http.StatusConflict, "sandbox is not running")
			return
		}
		sb.signalAll(syscall.SIGSTOP)
		sb.state = "paused"
		w.WriteHeader(http.StatusNoContent)
	case op == "connect" && r.Method == http.MethodPost:
		var req struct{ Timeout int }
		json.NewDecoder(r.Body).Decode(&req)
		sb.end = time.Now().UTC().Add(time.Duration(req.Timeout) * time.Second)
		status := http.StatusOK
		if sb.state == "paused" {
			sb.signalAll(syscall.SIGCONT)
			sb.state, status = "running", http.StatusCreated
		}
		writeJSON(w, status, s.sandboxJSON(sb))
	default:
		apiErr(w, http.StatusNotFound, "not implemented by the fake")
	}
}

// signalAll signals the process groups of the sandbox's commands. s.mu held.
func (sb *sandbox) signalAll(sig syscall.Signal) {
	for pid := range sb.procs {
		syscall.Kill(-pid, sig)
	}
}

func (sb *sandbox) killAll() {
	sb.signalAll(syscall.SIGKILL)
	sb.signalAll(syscall.SIGCONT)
}

// ---- envd ----

// envdSandbox returns the running sandbox of an envd request after checking
// its access token, or answers the request.
func (s *Server) envdSandbox(w http.ResponseWriter, r *http.Request, id string, connect bool) *sandbox {
	s.mu.Lock()
	sb := s.sbx[id]
	var state string
	if sb != nil {
		state = sb.state
	}
	s.mu.Unlock()
	errOut := func(status int, code, msg string) {
		if connect {
			writeJSON(w, status, map[string]any{"code": code, "message": msg})
		} else {
			writeJSON(w, status, map[string]any{"code": status, "message": msg})
		}
	}
	switch {
	case sb == nil || state != "running":
		// What the edge proxy answers for a sandbox that is not running.
		http.Error(w, "sandbox not running", http.StatusBadGateway)
		return nil
	case r.Header.Get("X-Access-Token") != sb.token:
		errOut(http.StatusUnauthorized, "unauthenticated", "invalid access token")
		return nil
	}
	return sb
}

// resolve maps a sandbox path (absolute, or relative to the user's home)
// to the host, refusing what is outside the sandbox's directory.
func (sb *sandbox) resolve(p string) (string, error) {
	if p == "" {
		p = "."
	}
	home := filepath.Join(sb.dir, "home", "user")
	if !filepath.IsAbs(p) {
		p = filepath.Join(home, p)
	}
	p = filepath.Clean(p)
	if p != sb.dir && !strings.HasPrefix(p, sb.dir+string(filepath.Separator)) {
		return "", fmt.Errorf("path %q is outside the fake sandbox %s", p, sb.dir)
	}
	return p, nil
}

func (s *Server) serveEnvd(w http.ResponseWriter, r *http.Request, id, p string) {
	sb := s.envdSandbox(w, r, id, false)
	if sb == nil {
		return
	}
	if p != "/files" {
		apiErr(w, http.StatusNotFound, "not implemented by the fake")
		return
	}
	if u := r.URL.Query().Get("username"); u != "" && u != "user" {
		apiErr(w, http.StatusUnauthorized, "invalid user")
		return
	}
	file, err := sb.resolve(r.URL.Query().Get("path"))
	if err != nil {
		apiErr(w, http.StatusBadRequest, err.Error())
		return
	}
	switch r.Method {
	case http.MethodGet:
		f, err := os.Open(file)
		if errors.Is(err, os.ErrNotExist) {
			apiErr(w, http.StatusNotFound, "file not found")
			return
		} else if err != nil {
			apiErr(w, http.StatusInternalServerError, err.Error())
			return
		}
		defer f.Close()
		if fi, err := f.Stat(); err != nil || fi.IsDir() {
			apiErr(w, http.StatusBadRequest, "path is a directory")
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusOK)
		io.Copy(w, f)
	case http.MethodPost:
		var src io.Reader = r.Body
		mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		switch mt {
		case "application/octet-stream":
		case "multipart/form-data":
			// The fake takes one part named file, written to path.
			mr, err := r.MultipartReader()
			if err != nil {
				apiErr(w, http.StatusBadRequest, err.Error())
				return
			}
			part, err := mr.NextPart()
			if err != nil || part.FormName() != "file" {
				apiErr(w, http.StatusBadRequest, "the fake wants one part named file")
				return
			}
			src = part
		default:
			apiErr(w, http.StatusBadRequest, "unsupported upload type "+mt)
			return
		}
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			apiErr(w, http.StatusBadRequest, err.Error())
			return
		}
		f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			apiErr(w, http.StatusBadRequest, err.Error())
			return
		}
		_, err = io.Copy(f, src)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			apiErr(w, http.StatusInternalServerError, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, []any{map[string]any{"name": filepath.Base(file), "type": "file", "path": file}})
	default:
		apiErr(w, http.StatusMethodNotAllowed, "method not allowed")
	}
}

// ---- Connect RPC ----

func (s *Server) connectErr(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"code": code, "message": msg})
}

func (s *Server) serveConnect(w http.ResponseWriter, r *http.Request, id, p string) {
	if r.Method != http.MethodPost {
		s.connectErr(w, http.StatusMethodNotAllowed, "unimplemented", "POST only")
		return
	}
	if v := r.Header.Get("Connect-Protocol-Version"); v != "1" {
		s.connectErr(w, http.StatusBadRequest, "invalid_argument", s.fail("fakee2b: %s without Connect-Protocol-Version: 1 (got %q)", p, v))
		return
	}
	sb := s.envdSandbox(w, r, id, true)
	if sb == nil {
		return
	}
	switch p {
	case "/process.Process/Start":
		s.start(w, r, sb)
	case "/process.Process/SendSignal":
		s.sendSignal(w, r, sb)
	default:
		s.connectErr(w, http.StatusNotImplemented, "unimplemented", p+" is not implemented by the fake")
	}
}

func (s *Server) start(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	if ct := r.Header.Get("Content-Type"); ct != "application/connect+json" {
		s.connectErr(w, http.StatusUnsupportedMediaType, "invalid_argument", s.fail("fakee2b: Start with Content-Type %q, want application/connect+json", ct))
		return
	}
	if a := r.Header.Get("Authorization"); a != "" && a != "Basic "+base64.StdEncoding.EncodeToString([]byte("user:")) {
		s.connectErr(w, http.StatusUnauthorized, "unauthenticated", "unknown user")
		return
	}
	if v := r.Header.Get("Keepalive-Ping-Interval"); v != "" {
		if _, err := strconv.Atoi(v); err != nil {
			s.fail("fakee2b: Keepalive-Ping-Interval %q is not an integer", v)
		}
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	if len(body) < 5 || body[0] != 0 || int(binary.BigEndian.Uint32(body[1:5])) != len(body)-5 {
		s.connectErr(w, http.StatusBadRequest, "invalid_argument", s.fail("fakee2b: Start request is not exactly one data envelope (%d bytes)", len(body)))
		return
	}
	var req struct {
		Process *struct {
			Cmd  string            `json:"cmd"`
			Args []string          `json:"args"`
			Envs map[string]string `json:"envs"`
			Cwd  *string           `json:"cwd"`
		} `json:"process"`
		Pty   json.RawMessage `json:"pty"`
		Tag   *string         `json:"tag"`
		Stdin *bool           `json:"stdin"`
	}
	dec := json.NewDecoder(bytes.NewReader(body[5:]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.Process == nil || req.Process.Cmd == "" {
		s.connectErr(w, http.StatusBadRequest, "invalid_argument", s.fail("fakee2b: bad StartRequest %s: %v", body[5:], err))
		return
	}
	if req.Pty != nil || req.Stdin == nil || *req.Stdin {
		s.connectErr(w, http.StatusBadRequest, "invalid_argument", s.fail("fakee2b: the fake supports only stdin:false without a pty"))
		return
	}
	cwd := filepath.Join(sb.dir, "home", "user")
	if req.Process.Cwd != nil && *req.Process.Cwd != "" {
		if cwd, err = sb.resolve(*req.Process.Cwd); err != nil {
			s.connectErr(w, http.StatusBadRequest, "invalid_argument", err.Error())
			return
		}
	}
	cmd := exec.Command(req.Process.Cmd, req.Process.Args...)
	cmd.Dir = cwd
	cmd.Env = []string{}
	for k, v := range req.Process.Envs {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 500 * time.Millisecond

	// From here on errors go in the stream.
	w.Header().Set("Content-Type", "application/connect+json")
	w.WriteHeader(http.StatusOK)
	sw := &streamWriter{w: w}
	cmd.Stdout = &dataWriter{sw: sw, key: "stdout"}
	cmd.Stderr = &dataWriter{sw: sw, key: "stderr"}
	s.mu.Lock()
	err = cmd.Start()
	if err == nil {
		sb.procs[cmd.Process.Pid] = cmd
	}
	s.mu.Unlock()
	if err != nil {
		sw.end(map[string]any{"error": map[string]any{"code": "invalid_argument", "message": err.Error()}})
		return
	}
	pid := cmd.Process.Pid
	sw.event(map[string]any{"start": map[string]any{"pid": pid}})
	sw.event(map[string]any{"keepalive": map[string]any{}}) // clients must ignore it
	werr := cmd.Wait()
	s.mu.Lock()
	delete(sb.procs, pid)
	s.mu.Unlock()
	end := map[string]any{"exited": cmd.ProcessState != nil && cmd.ProcessState.Exited()}
	if cmd.ProcessState != nil {
		end["status"] = cmd.ProcessState.String()
		if c := cmd.ProcessState.ExitCode(); c > 0 {
			end["exitCode"] = c
		} else if c < 0 {
			end["exitCode"] = -1
		}
	}
	if werr != nil && !errors.As(werr, new(*exec.ExitError)) {
		end["error"] = werr.Error()
	}
	sw.event(map[string]any{"end": end})
	sw.end(map[string]any{})
}

type streamWriter struct {
	mu sync.Mutex
	w  http.ResponseWriter
}

func (sw *streamWriter) envelope(flags byte, v any) {
	data, _ := json.Marshal(v)
	var hdr [5]byte
	hdr[0] = flags
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(data)))
	sw.mu.Lock()
	defer sw.mu.Unlock()
	sw.w.Write(hdr[:])
	sw.w.Write(data)
	http.NewResponseController(sw.w).Flush()
}

func (sw *streamWriter) event(ev any) { sw.envelope(0, map[string]any{"event": ev}) }
func (sw *streamWriter) end(v any)    { sw.envelope(2, v) }

type dataWriter struct {
	sw  *streamWriter
	key string
}

func (d *dataWriter) Write(p []byte) (int, error) {
	d.sw.event(map[string]any{"data": map[string]any{d.key: base64.StdEncoding.EncodeToString(p)}})
	return len(p), nil
}

func (s *Server) sendSignal(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		s.connectErr(w, http.StatusUnsupportedMediaType, "invalid_argument", s.fail("fakee2b: SendSignal with Content-Type %q, want application/json", ct))
		return
	}
	var req struct {
		Process struct {
			Pid *int    `json:"pid"`
			Tag *string `json:"tag"`
		} `json:"process"`
		Signal json.RawMessage `json:"signal"`
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.Process.Pid == nil {
		s.connectErr(w, http.StatusBadRequest, "invalid_argument", s.fail("fakee2b: bad SendSignalRequest: %v", err))
		return
	}
	var sig syscall.Signal
	switch strings.Trim(string(req.Signal), `"`) {
	case "SIGNAL_SIGKILL", "9":
		sig = syscall.SIGKILL
	case "SIGNAL_SIGTERM", "15":
		sig = syscall.SIGTERM
	default:
		s.connectErr(w, http.StatusBadRequest, "invalid_argument", s.fail("fakee2b: bad signal %s", req.Signal))
		return
	}
	s.mu.Lock()
	cmd := sb.procs[*req.Process.Pid]
	s.mu.Unlock()
	if cmd == nil {
		s.connectErr(w, http.StatusNotFound, "not_found", fmt.Sprintf("process with pid %d not found", *req.Process.Pid))
		return
	}
	// Like envd, the signal goes to the process, not its group.
	cmd.Process.Signal(sig)
	writeJSON(w, http.StatusOK, map[string]any{})
}
