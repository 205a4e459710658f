// Package fakedaytona is an in-process fake of the Daytona API and toolbox
// for tests: sandboxes whose states take time to change, a temp directory
// per sandbox as its filesystem (and home directory), /process/execute
// running /bin/sh -c in it for real, and file upload and download. As with
// the real daemon, execute answers only when the command ended, and a
// client that leaves does not stop the command: a client that gives up on
// an execute and sends it again runs the command twice. Faults can be
// injected (FailNext, RefuseNext, DropNext). Every
// request and response is validated against the offline OpenAPI specs
// (/work/shared/specs, found at AGENTBOT_SPECS_DIR or ../../../shared/specs
// from the test's working directory); a validation failure answers 500 and
// is recorded in Errors.
//
// The main API is served under <URL>/api, the toolbox under
// <URL>/toolbox/<id>, and toolboxProxyUrl is <URL>/toolbox.
package fakedaytona

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// SpecsDirEnv names the directory of the spec files.
const SpecsDirEnv = "AGENTBOT_SPECS_DIR"

// Options configures the fake.
type Options struct {
	// Key is the API key the fake accepts; default "fake-daytona-key".
	Key string
	// StateDelay is how long a transition (creating → started, starting →
	// started, stopping → stopped) takes; default 200ms.
	StateDelay time.Duration
	// BaseDir holds the sandboxes' directories; default a new temp dir,
	// removed by Close.
	BaseDir string
	// SpecsDir overrides the spec lookup.
	SpecsDir string
	// Logf, if set, receives notes (e.g. specs missing).
	Logf func(format string, args ...any)
}

// Server is a running fake.
type Server struct {
	*httptest.Server
	opts       Options
	ownBase    bool
	apiRouter  routers.Router
	tbRouter   routers.Router
	validating bool

	mu        sync.Mutex
	sandboxes map[string]*sandbox
	nextID    int
	faults    []int // statuses to answer the next API requests with
	refuse    []pathFault
	drop      []pathFault
	errs      []string
	requests  int
	rejected  int
}

// pathFault is a fault injected into the next request with this method and
// path (the API path, or the toolbox path below the sandbox).
type pathFault struct {
	method, path string
	status       int
}

type sandbox struct {
	ID, Snapshot, Name string
	Env, Labels        map[string]string
	CPU, Mem, Disk     float64
	Dir                string
	Created            time.Time
	state, target      string
	changeAt           time.Time
	pgids              map[int]bool
}

// New starts a fake.
func New(opts Options) (*Server, error) {
	if opts.Key == "" {
		opts.Key = "fake-daytona-key"
	}
	if opts.StateDelay == 0 {
		opts.StateDelay = 200 * time.Millisecond
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	s := &Server{opts: opts, sandboxes: map[string]*sandbox{}}
	if s.opts.BaseDir == "" {
		d, err := os.MkdirTemp("", "fakedaytona-")
		if err != nil {
			return nil, err
		}
		s.opts.BaseDir, s.ownBase = d, true
	}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.Start()
	if err := s.loadSpecs(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// APIURL is the base URL of the main API, for daytonasandbox.Options.
func (s *Server) APIURL() string { return s.URL + "/api" }

// Key is the accepted API key.
func (s *Server) Key() string { return s.opts.Key }

// Validating reports whether the specs were found and are enforced.
func (s *Server) Validating() bool { return s.validating }

// Errors returns the validation failures so far.
func (s *Server) Errors() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.errs...)
}

// FailNext makes the next len(statuses) main-API requests answer with the
// given statuses (after the auth check).
func (s *Server) FailNext(statuses ...int) {
	s.mu.Lock()
	s.faults = append(s.faults, statuses...)
	s.mu.Unlock()
}

// RefuseNext makes the next request with this method and path answer
// status without being handled, as a rate limiter or an overloaded proxy
// in front of the server does. path is an API path ("/api/sandbox") or a
// toolbox path below the sandbox ("/process/execute").
func (s *Server) RefuseNext(method, path string, status int) {
	s.mu.Lock()
	s.refuse = append(s.refuse, pathFault{method, path, status})
	s.mu.Unlock()
}

// DropNext makes the next request with this method and path be handled in
// full (a command it starts runs to its end) and then closes its
// connection without an answer, as when a connection resets after the
// server acted. path is as for RefuseNext.
func (s *Server) DropNext(method, path string) {
	s.mu.Lock()
	s.drop = append(s.drop, pathFault{method, path, 0})
	s.mu.Unlock()
}

// take removes and returns the first fault of *faults matching the
// request; s.mu is held.
func take(faults *[]pathFault, method, path string) (pathFault, bool) {
	for i, f := range *faults {
		if f.method == method && f.path == path {
			*faults = append((*faults)[:i], (*faults)[i+1:]...)
			return f, true
		}
	}
	return pathFault{}, false
}

// Requests counts the main-API requests answered so far.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// Rejected counts the requests refused for a wrong or missing key.
func (s *Server) Rejected() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rejected
}

// Exists reports whether the sandbox id exists or its directory is left.
func (s *Server) Exists(id string) bool {
	s.mu.Lock()
	sb := s.sandboxes[id]
	s.mu.Unlock()
	if sb != nil {
		return true
	}
	_, err := os.Lstat(filepath.Join(s.opts.BaseDir, id))
	return err == nil
}

// SetState forces a sandbox's state (e.g. "error").
func (s *Server) SetState(id, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.sandboxes[id]; sb != nil {
		sb.state, sb.target = state, state
	}
}

// Close stops the server, kills the sandboxes' processes and removes the
// directories it made.
func (s *Server) Close() {
	s.mu.Lock()
	for _, sb := range s.sandboxes {
		sb.killAll()
	}
	s.mu.Unlock()
	s.Server.Close()
	if s.ownBase {
		os.RemoveAll(s.opts.BaseDir)
	}
}

func (s *Server) loadSpecs() error {
	dir := s.opts.SpecsDir
	if dir == "" {
		dir = os.Getenv(SpecsDirEnv)
	}
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "shared", "specs")
	}
	apiPath := filepath.Join(dir, "daytona-api-openapi.yaml")
	tbPath := filepath.Join(dir, "daytona-toolbox-openapi.yaml")
	if _, err := os.Stat(apiPath); err != nil {
		s.opts.Logf("fakedaytona: specs not found at %s (set %s): running WITHOUT validation", dir, SpecsDirEnv)
		fmt.Fprintf(os.Stderr, "fakedaytona: specs not found at %s (set %s): running WITHOUT validation\n", dir, SpecsDirEnv)
		return nil
	}
	load := func(p, server string) (routers.Router, error) {
		l := openapi3.NewLoader()
		doc, err := l.LoadFromFile(p)
		if err != nil {
			return nil, fmt.Errorf("fakedaytona: loading %s: %w", p, err)
		}
		doc.Servers = openapi3.Servers{{URL: server}}
		r, err := gorillamux.NewRouter(doc)
		if err != nil {
			return nil, fmt.Errorf("fakedaytona: router of %s: %w", p, err)
		}
		return r, nil
	}
	var err error
	if s.apiRouter, err = load(apiPath, s.URL+"/api"); err != nil {
		return err
	}
	if s.tbRouter, err = load(tbPath, s.URL+"/tb"); err != nil {
		return err
	}
	s.validating = true
	return nil
}

func (s *Server) recordErr(format string, args ...any) {
	s.mu.Lock()
	s.errs = append(s.errs, fmt.Sprintf(format, args...))
	s.mu.Unlock()
}

var validateOpts = &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}

// serve authenticates, validates the request, dispatches, and validates the
// response.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if r.Header.Get("Authorization") != "Bearer "+s.opts.Key {
		s.mu.Lock()
		s.rejected++
		s.mu.Unlock()
		writeJSON(w, http.StatusUnauthorized, map[string]any{"statusCode": 401, "message": "Unauthorized"})
		return
	}
	var router routers.Router
	vreq := r.Clone(r.Context())
	vreq.Body = io.NopCloser(bytes.NewReader(body))
	vreq.URL.Scheme, vreq.URL.Host = "http", r.Host
	isAPI := len(r.URL.Path) >= 4 && r.URL.Path[:4] == "/api"
	faultPath := r.URL.Path
	if _, rest, ok := splitToolbox(r.URL.Path); ok && !isAPI {
		faultPath = rest
	}
	s.mu.Lock()
	refused, refuse := take(&s.refuse, r.Method, faultPath)
	_, drop := take(&s.drop, r.Method, faultPath)
	s.mu.Unlock()
	if refuse {
		writeJSON(w, refused.status, map[string]any{"statusCode": refused.status, "message": "injected fault"})
		return
	}
	if isAPI {
		router = s.apiRouter
		s.mu.Lock()
		s.requests++
		var fault int
		if len(s.faults) > 0 {
			fault, s.faults = s.faults[0], s.faults[1:]
		}
		s.mu.Unlock()
		if fault != 0 {
			writeJSON(w, fault, map[string]any{"statusCode": fault, "message": "injected fault"})
			return
		}
	} else if id, rest, ok := splitToolbox(r.URL.Path); ok && id != "" {
		router = s.tbRouter
		vreq.URL.Path, vreq.URL.RawPath = "/tb"+rest, ""
	}

	var input *openapi3filter.RequestValidationInput
	if s.validating && router != nil {
		route, params, err := router.FindRoute(vreq)
		if err != nil {
			s.recordErr("%s %s: no route in the spec: %v", r.Method, r.URL.Path, err)
			http.Error(w, "fakedaytona: no route in the spec", http.StatusInternalServerError)
			return
		}
		input = &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route, Options: validateOpts}
		if err := openapi3filter.ValidateRequest(r.Context(), input); err != nil {
			s.recordErr("%s %s: request invalid: %v", r.Method, r.URL.Path, err)
			http.Error(w, "fakedaytona: request does not match the spec", http.StatusInternalServerError)
			return
		}
	}
	rec := httptest.NewRecorder()
	s.dispatch(rec, r)
	if input != nil {
		rin := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: input, Status: rec.Code, Header: rec.Header(),
			Body: io.NopCloser(bytes.NewReader(rec.Body.Bytes())), Options: validateOpts,
		}
		if err := openapi3filter.ValidateResponse(r.Context(), rin); err != nil {
			s.recordErr("%s %s: response invalid: %v", r.Method, r.URL.Path, err)
			http.Error(w, "fakedaytona: response does not match the spec", http.StatusInternalServerError)
			return
		}
	}
	if drop {
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
		return
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
}

// splitToolbox splits /toolbox/<id>/<rest>.
func splitToolbox(p string) (id, rest string, ok bool) {
	const pre = "/toolbox/"
	if len(p) <= len(pre) || p[:len(pre)] != pre {
		return "", "", false
	}
	p = p[len(pre):]
	for i := 0; i < len(p); i++ {
		if p[i] == '/' {
			return p[:i], p[i:], true
		}
	}
	return p, "/", true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func notFound(w http.ResponseWriter, what string) {
	writeJSON(w, http.StatusNotFound, map[string]any{"statusCode": 404, "message": what + " not found", "error": "Not Found"})
}

func (s *Server) dispatch(w http.ResponseWriter, r *http.Request) {
	m := http.NewServeMux()
	m.HandleFunc("GET /api/sandbox", s.list)
	m.HandleFunc("POST /api/sandbox", s.create)
	m.HandleFunc("GET /api/sandbox/{id}", s.withSandbox(s.get))
	m.HandleFunc("DELETE /api/sandbox/{id}", s.withSandbox(s.delete))
	m.HandleFunc("POST /api/sandbox/{id}/start", s.withSandbox(s.start))
	m.HandleFunc("POST /api/sandbox/{id}/stop", s.withSandbox(s.stop))
	m.HandleFunc("GET /toolbox/{id}/user-home-dir", s.withStarted(s.homeDir))
	m.HandleFunc("POST /toolbox/{id}/process/execute", s.withStarted(s.execute))
	m.HandleFunc("POST /toolbox/{id}/files/upload", s.withStarted(s.upload))
	m.HandleFunc("GET /toolbox/{id}/files/download", s.withStarted(s.download))
	m.ServeHTTP(w, r)
}

// advance applies a due state change; s.mu is held.
func (sb *sandbox) advance() {
	if sb.state != sb.target && !time.Now().Before(sb.changeAt) {
		sb.state = sb.target
	}
}

func (s *Server) dto(sb *sandbox) map[string]any {
	return map[string]any{
		"id": sb.ID, "organizationId": "fake-org", "name": sb.Name, "snapshot": sb.Snapshot, "user": "daytona",
		"env": nonNil(sb.Env), "labels": nonNil(sb.Labels), "public": false, "networkBlockAll": false,
		"target": "local", "cpu": sb.CPU, "gpu": 0, "memory": sb.Mem, "disk": sb.Disk, "state": sb.state,
		"toolboxProxyUrl": s.URL + "/toolbox", "createdAt": sb.Created.Format(time.RFC3339Nano),
	}
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func (s *Server) withSandbox(h func(http.ResponseWriter, *http.Request, *sandbox)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		sb := s.sandboxes[r.PathValue("id")]
		if sb != nil {
			sb.advance()
		}
		s.mu.Unlock()
		if sb == nil {
			notFound(w, "sandbox "+r.PathValue("id"))
			return
		}
		h(w, r, sb)
	}
}

func (s *Server) withStarted(h func(http.ResponseWriter, *http.Request, *sandbox)) http.HandlerFunc {
	return s.withSandbox(func(w http.ResponseWriter, r *http.Request, sb *sandbox) {
		s.mu.Lock()
		st := sb.state
		s.mu.Unlock()
		if st != "started" {
			writeJSON(w, http.StatusConflict, map[string]any{"statusCode": 409, "message": "sandbox is " + st})
			return
		}
		h(w, r, sb)
	})
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name     string            `json:"name"`
		Snapshot string            `json:"snapshot"`
		Env      map[string]string `json:"env"`
		Labels   map[string]string `json:"labels"`
		CPU      float64           `json:"cpu"`
		Memory   float64           `json:"memory"`
		Disk     float64           `json:"disk"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"statusCode": 400, "message": err.Error()})
		return
	}
	s.mu.Lock()
	s.nextID++
	id := fmt.Sprintf("fake-%d-%d", os.Getpid(), s.nextID)
	s.mu.Unlock()
	dir := filepath.Join(s.opts.BaseDir, id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		writeJSON(w, 500, map[string]any{"statusCode": 500, "message": err.Error()})
		return
	}
	sb := &sandbox{ID: id, Name: req.Name, Snapshot: req.Snapshot, Env: req.Env, Labels: req.Labels,
		CPU: or(req.CPU, 1), Mem: or(req.Memory, 1), Disk: or(req.Disk, 3), Dir: dir, Created: time.Now().UTC(),
		state: "creating", target: "started", changeAt: time.Now().Add(s.opts.StateDelay), pgids: map[int]bool{}}
	if sb.Name == "" {
		sb.Name = id
	}
	s.mu.Lock()
	s.sandboxes[id] = sb
	d := s.dto(sb)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, d)
}

func or(v, d float64) float64 {
	if v == 0 {
		return d
	}
	return v
}

func (s *Server) get(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	s.mu.Lock()
	d := s.dto(sb)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	var want map[string]string
	if l := r.URL.Query().Get("labels"); l != "" {
		if err := json.Unmarshal([]byte(l), &want); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]any{"statusCode": 400, "message": "bad labels"})
			return
		}
	}
	items := []map[string]any{}
	s.mu.Lock()
outer:
	for _, sb := range s.sandboxes {
		for k, v := range want {
			if sb.Labels[k] != v {
				continue outer
			}
		}
		sb.advance()
		d := s.dto(sb)
		delete(d, "env")
		delete(d, "networkBlockAll")
		items = append(items, d)
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"items": items, "nextCursor": nil})
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	s.mu.Lock()
	delete(s.sandboxes, sb.ID)
	sb.killAll()
	sb.state = "destroyed"
	d := s.dto(sb)
	s.mu.Unlock()
	os.RemoveAll(sb.Dir)
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) start(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	s.mu.Lock()
	switch sb.state {
	case "stopped", "archived":
		sb.state, sb.target, sb.changeAt = "starting", "started", time.Now().Add(s.opts.StateDelay)
	case "started", "starting", "creating":
	default:
		st := sb.state
		s.mu.Unlock()
		writeJSON(w, http.StatusBadRequest, map[string]any{"statusCode": 400, "message": "cannot start a sandbox in state " + st})
		return
	}
	d := s.dto(sb)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) stop(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	s.mu.Lock()
	switch sb.state {
	case "started":
		sb.killAll()
		sb.state, sb.target, sb.changeAt = "stopping", "stopped", time.Now().Add(s.opts.StateDelay)
	case "stopped", "stopping":
	default:
		st := sb.state
		s.mu.Unlock()
		writeJSON(w, http.StatusBadRequest, map[string]any{"statusCode": 400, "message": "cannot stop a sandbox in state " + st})
		return
	}
	d := s.dto(sb)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, d)
}

// killAll kills the process groups of the sandbox's running executes; s.mu
// is held. Processes that left their group survive, as the backend must
// handle.
func (sb *sandbox) killAll() {
	for pg := range sb.pgids {
		syscall.Kill(-pg, syscall.SIGKILL)
	}
}

func (s *Server) homeDir(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	writeJSON(w, http.StatusOK, map[string]any{"dir": sb.Dir})
}

func (s *Server) execute(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	var req struct {
		Command string            `json:"command"`
		Cwd     string            `json:"cwd"`
		Envs    map[string]string `json:"envs"`
		Timeout *int              `json:"timeout"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Command == "" {
		writeJSON(w, http.StatusBadRequest, map[string]any{"statusCode": 400, "message": "bad request"})
		return
	}
	timeout := 10 * time.Second
	if req.Timeout != nil && *req.Timeout > 0 {
		timeout = time.Duration(*req.Timeout) * time.Second
	}
	// Not tied to the request: like the daemon, a dropped client does not
	// stop the command; only the timeout does.
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", req.Command)
	cmd.Dir = sb.Dir
	if req.Cwd != "" {
		cmd.Dir = req.Cwd
	}
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=" + sb.Dir}
	for k, v := range req.Envs {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		writeJSON(w, http.StatusOK, map[string]any{"exitCode": -1, "result": err.Error()})
		return
	}
	pg := cmd.Process.Pid
	s.mu.Lock()
	sb.pgids[pg] = true
	s.mu.Unlock()
	err := cmd.Wait()
	s.mu.Lock()
	delete(sb.pgids, pg)
	s.mu.Unlock()
	code := 0
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		code = -1
	}
	if ctx.Err() != nil {
		code = -1
	}
	writeJSON(w, http.StatusOK, map[string]any{"exitCode": code, "result": out.String()})
}

func (s *Server) upload(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	p := r.URL.Query().Get("path")
	if !filepath.IsAbs(p) {
		p = filepath.Join(sb.Dir, p)
	}
	f, _, err := r.FormFile("file")
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"statusCode": 400, "message": "no file: " + err.Error()})
		return
	}
	defer f.Close()
	os.MkdirAll(filepath.Dir(p), 0o755)
	out, err := os.Create(p)
	if err == nil {
		_, err = io.Copy(out, f)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"statusCode": 400, "message": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{})
}

func (s *Server) download(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	p := r.URL.Query().Get("path")
	if !filepath.IsAbs(p) {
		p = filepath.Join(sb.Dir, p)
	}
	data, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		notFound(w, "file")
		return
	}
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"statusCode": 400, "message": err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(http.StatusOK)
	w.Write(data)
}
