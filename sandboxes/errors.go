package sandboxes

import (
	"errors"
	"fmt"
)

// The sentinel errors of this package. Every error a *Sandbox or a Registry
// returns is an *Error that wraps one of them (or a context error, or an
// error of the backend), so callers test with errors.Is.
var (
	// ErrNotFound means the sandbox does not exist (any more): it was
	// destroyed, its container was removed, its cloud sandbox expired.
	ErrNotFound = errors.New("sandbox not found")
	// ErrUnsupported means the backend cannot do this operation. It is
	// errors.ErrUnsupported, so either matches.
	ErrUnsupported = errors.ErrUnsupported
	// ErrTimeout means an operation ran past its own time limit (for Exec,
	// the request's Timeout; the result is still valid).
	ErrTimeout = errors.New("timed out")
	// ErrInvalid means the arguments were wrong: an empty command, a path
	// that leaves the workspace, a root that is not a usable directory.
	ErrInvalid = errors.New("invalid argument")
	// ErrUnavailable means the backend cannot run here: no daemon, no
	// credentials, not registered.
	ErrUnavailable = errors.New("backend unavailable")
	// ErrUnsafeArchive means a snapshot holds an entry that would land
	// outside the workspace (an absolute path, "..", a link that points
	// out) or is otherwise malformed. Restore refuses it whole.
	ErrUnsafeArchive = errors.New("unsafe archive")
	// ErrStopped means the sandbox is stopped and must be attached again
	// (Registry.Attach starts it) before use.
	ErrStopped = errors.New("sandbox stopped")
)

// Error is the error type of this package: an operation on one sandbox (or
// backend) that failed, and why.
type Error struct {
	Op      string // "exec", "create", "restore", ...
	Backend string // backend name, e.g. "docker"
	ID      string // sandbox ID; empty for backend-level operations
	Err     error  // the cause; matched by errors.Is and errors.As
}

func (e *Error) Error() string {
	target := e.Backend
	if e.ID != "" {
		target += "/" + e.ID
	}
	if target == "" {
		return fmt.Sprintf("sandbox %s: %v", e.Op, e.Err)
	}
	return fmt.Sprintf("sandbox %s %s: %v", e.Op, target, e.Err)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

func wrap(op, backend, id string, err error) error {
	if err == nil {
		return nil
	}
	var se *Error
	if errors.As(err, &se) && se.Op == op && se.ID == id {
		return err
	}
	return &Error{Op: op, Backend: backend, ID: id, Err: err}
}

// NotFoundError returns an error, for backends to return, that matches
// ErrNotFound and names the missing sandbox.
func NotFoundError(id string) error {
	return fmt.Errorf("%w: %q", ErrNotFound, id)
}

// Invalidf returns an error matching ErrInvalid with a formatted reason.
func Invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}
