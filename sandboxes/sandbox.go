package sandboxes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"time"
)

// Sandbox is a live sandbox as callers use it. It validates arguments,
// applies the exec contract and wraps errors with the operation, backend and
// sandbox ID. Get one from Registry.Create or Registry.Attach. It is safe for
// concurrent use.
type Sandbox struct {
	backend string
	inst    Instance
}

// New wraps a backend's Instance; backend is the name it is registered
// under. Most callers use a Registry instead.
func New(backend string, inst Instance) *Sandbox {
	return &Sandbox{backend: backend, inst: inst}
}

// State returns the serialisable description of the sandbox, to keep and
// Attach to later.
func (s *Sandbox) State() State {
	st := s.inst.State()
	st.Backend = s.backend
	return st
}

// ID returns the sandbox's ID within its backend.
func (s *Sandbox) ID() string { return s.inst.State().ID }

// Backend returns the name of the sandbox's backend.
func (s *Sandbox) Backend() string { return s.backend }

// Instance returns the backend's instance, for type assertions on optional
// interfaces a backend offers beyond this package's.
func (s *Sandbox) Instance() Instance { return s.inst }

func (s *Sandbox) err(op string, err error) error {
	return wrap(op, s.backend, s.ID(), err)
}

// Skipper is implemented by the writers Sandbox.Exec hands a backend's
// Instance.Exec, and may be implemented by ExecRequest.Stdout and Stderr.
// Skip(n) says that n bytes of the stream were left out at this point: a
// backend that does not fetch the middle of a long stream calls it
// between the head and the tail it writes, and Sandbox.Exec calls it on
// the request's writers where it cut a stream to MaxStream.
type Skipper interface {
	Skip(n int64)
}

// OutputsDir is the workspace directory where callers keep what commands
// printed (agentflow's output files). Those are records of the sandbox's
// past, not part of the work: Snapshot leaves the directory out, so they
// are not carried into every snapshot, fork and switch, and backends may
// skip it when they archive.
const OutputsDir = ".agentbot/outputs"

// Exec runs req.Command in the sandbox and returns what it did.
//
// A non-zero exit code is not an error. When the request's Timeout passes,
// the command's process tree is killed and Exec returns the result so far
// (TimedOut set, ExitCode -1) together with an error matching ErrTimeout.
// When ctx is done first, it returns the result so far and ctx's error.
// Other errors mean the command could not be run at all.
func (s *Sandbox) Exec(ctx context.Context, req ExecRequest) (ExecResult, error) {
	if strings.TrimSpace(req.Command) == "" {
		return ExecResult{}, s.err("exec", Invalidf("empty command"))
	}
	if req.Timeout < 0 || req.MaxOutput < 0 || req.MaxStream < 0 {
		return ExecResult{}, s.err("exec", Invalidf("negative timeout or output cap"))
	}
	if req.Dir != "" {
		dir, err := CleanPath(req.Dir)
		if err != nil {
			return ExecResult{}, s.err("exec", err)
		}
		req.Dir = dir
	}
	for k := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return ExecResult{}, s.err("exec", Invalidf("bad environment variable name %q", k))
		}
	}
	if req.Timeout == 0 {
		req.Timeout = DefaultExecTimeout
	}
	if req.MaxOutput == 0 {
		req.MaxOutput = DefaultMaxOutput
	}
	if req.MaxStream == 0 {
		req.MaxStream = DefaultMaxStream
	}
	// Every stream goes through a capWriter for the result and a
	// capStream for the caller's writer, whatever the backend does, so
	// no command's output can grow what the caller keeps past MaxStream.
	stdout := newExecStream(req.MaxOutput, req.Stdout, req.MaxStream)
	stderr := newExecStream(req.MaxOutput, req.Stderr, req.MaxStream)
	// A backend that leaves out the middle of a stream must still give
	// both: the result its MaxOutput head and tail, the writers theirs.
	ireq := req
	ireq.MaxStream = max(req.MaxStream, req.MaxOutput)

	tctx, cancel := context.WithTimeoutCause(ctx, req.Timeout, ErrTimeout)
	defer cancel()
	start := time.Now()
	code, err := s.inst.Exec(tctx, ireq, stdout, stderr)
	// The backend is done writing: the caller's writers get the tails.
	if cerr := errors.Join(stdout.close(), stderr.close()); cerr != nil && err == nil {
		err = fmt.Errorf("writing the output: %w", cerr)
	}
	res := ExecResult{
		ExitCode: code,
		Stdout:   stdout.keep.Output(),
		Stderr:   stderr.keep.Output(),
		Duration: time.Since(start),
	}
	if err == nil {
		return res, nil
	}
	res.ExitCode = -1
	switch {
	case ctx.Err() != nil:
		return res, s.err("exec", ctx.Err())
	case errors.Is(context.Cause(tctx), ErrTimeout):
		res.TimedOut = true
		return res, s.err("exec", fmt.Errorf("command ran past %s: %w", req.Timeout, ErrTimeout))
	default:
		return res, s.err("exec", err)
	}
}

// ReadFile returns the contents of the file at path (relative to the
// workspace root, or absolute inside it). It reads at most max bytes and
// fails with ErrInvalid when the file is larger; max <= 0 means no limit.
func (s *Sandbox) ReadFile(ctx context.Context, p string, max int64) ([]byte, error) {
	rel, err := s.rel(p)
	if err != nil {
		return nil, s.err("read", err)
	}
	rc, err := s.inst.ReadFile(ctx, rel)
	if err != nil {
		return nil, s.err("read", err)
	}
	defer rc.Close()
	var buf bytes.Buffer
	r := io.Reader(rc)
	if max > 0 {
		r = io.LimitReader(rc, max+1)
	}
	if _, err := buf.ReadFrom(r); err != nil {
		return nil, s.err("read", err)
	}
	if max > 0 && int64(buf.Len()) > max {
		return nil, s.err("read", Invalidf("%s is larger than %d bytes", rel, max))
	}
	return buf.Bytes(), nil
}

// OpenFile opens the file at path for streaming reads. The caller closes
// it.
func (s *Sandbox) OpenFile(ctx context.Context, p string) (io.ReadCloser, error) {
	rel, err := s.rel(p)
	if err != nil {
		return nil, s.err("read", err)
	}
	rc, err := s.inst.ReadFile(ctx, rel)
	return rc, s.err("read", err)
}

// WriteFile creates or replaces the file at path with data and the
// permission bits of mode (0 means 0644), creating parent directories.
func (s *Sandbox) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	return s.WriteFileFrom(ctx, p, bytes.NewReader(data), mode)
}

// WriteFileFrom is WriteFile from a stream.
func (s *Sandbox) WriteFileFrom(ctx context.Context, p string, r io.Reader, mode fs.FileMode) error {
	rel, err := s.rel(p)
	if err != nil {
		return s.err("write", err)
	}
	if rel == "." {
		return s.err("write", Invalidf("path %q is the workspace root", p))
	}
	if mode == 0 {
		mode = 0o644
	}
	return s.err("write", s.inst.WriteFile(ctx, rel, r, mode.Perm()))
}

// Stop releases the sandbox's compute; Registry.Attach starts it again.
func (s *Sandbox) Stop(ctx context.Context) error {
	return s.err("stop", s.inst.Stop(ctx))
}

// Destroy deletes the sandbox and its workspace. A sandbox that is already
// gone gives an error matching ErrNotFound.
func (s *Sandbox) Destroy(ctx context.Context) error {
	return s.err("destroy", s.inst.Destroy(ctx))
}

// Pause freezes the sandbox where the backend can (see Pauser); otherwise
// it returns an error matching ErrUnsupported.
func (s *Sandbox) Pause(ctx context.Context) error {
	p, ok := s.inst.(Pauser)
	if !ok {
		return s.err("pause", ErrUnsupported)
	}
	return s.err("pause", p.Pause(ctx))
}

// Resume thaws a paused sandbox (see Pauser).
func (s *Sandbox) Resume(ctx context.Context) error {
	p, ok := s.inst.(Pauser)
	if !ok {
		return s.err("resume", ErrUnsupported)
	}
	return s.err("resume", p.Resume(ctx))
}

// rel turns a caller's path into a clean workspace-relative one. An
// absolute path is accepted when it is inside the workspace root.
func (s *Sandbox) rel(p string) (string, error) {
	if path.IsAbs(p) {
		root := path.Clean(s.inst.State().Root)
		cp := path.Clean(p)
		switch {
		case cp == root:
			p = "."
		case root == "/":
			p = strings.TrimPrefix(cp, "/")
		case strings.HasPrefix(cp, root+"/"):
			p = strings.TrimPrefix(cp, root+"/")
		default:
			return "", Invalidf("path %q is outside the workspace %s", p, root)
		}
	}
	return CleanPath(p)
}

// CleanPath cleans a workspace-relative, slash-separated path and refuses
// one that is empty, absolute, holds a NUL byte or climbs out with "..".
// The workspace root itself is ".".
func CleanPath(p string) (string, error) {
	if p == "" {
		return "", Invalidf("empty path")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", Invalidf("path %q holds a NUL byte", p)
	}
	if path.IsAbs(p) {
		return "", Invalidf("path %q is absolute", p)
	}
	c := path.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", Invalidf("path %q leaves the workspace", p)
	}
	return c, nil
}
