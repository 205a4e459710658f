package sandboxes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"time"
)

// Backend is what a sandbox backend implements: a factory of sandboxes of
// one kind. Implementations live in their own packages and are registered in
// a Registry under a name. Their methods are called by this package only
// with validated arguments.
type Backend interface {
	// Description says in one line what the backend is and what it
	// isolates, for listings ("docker: one container per sandbox; ...").
	Description() string
	// Available reports whether the backend can run here. It returns nil
	// when it can, or an error that says why not (daemon unreachable, no
	// credentials) in a form fit for a user.
	Available(ctx context.Context) error
	// Create makes a new sandbox from spec and returns it running.
	Create(ctx context.Context, spec Spec) (Instance, error)
	// Attach returns the sandbox that state describes, created earlier,
	// perhaps by another process. A stopped sandbox is started again. A
	// sandbox that no longer exists gives an error matching ErrNotFound.
	Attach(ctx context.Context, state State) (Instance, error)
}

// Instance is one live sandbox of a backend. Paths given to its methods are
// already cleaned, relative to the workspace root, slash-separated, and do
// not start with "..": resolving them safely against the root (symbolic
// links included) is the backend's job.
//
// Every method must be safe for concurrent use; Exec in particular runs
// concurrently.
type Instance interface {
	// State returns the serialisable description of this sandbox.
	State() State
	// Exec runs req.Command through a POSIX shell in the workspace root
	// (or req.Dir below it) and copies its output to stdout and stderr as
	// it comes. The environment is built, never inherited from the host:
	// the backend's defaults (PATH, HOME, LANG=C.UTF-8, TERM=dumb), then
	// State.Env, then req.Env. It returns the exit code. When ctx is done
	// it kills the whole process tree the command started and returns
	// ctx.Err() (the caller tells a timeout from a cancellation).
	// Processes the command leaves running in the background may outlive
	// Exec (as with docker exec); Stop and Destroy kill them.
	//
	// A backend that fetches output from afar need not read all of a
	// stream longer than req.MaxStream: it may write the first
	// MaxStream/2 bytes, call Skip on the writer (stdout and stderr are
	// Skippers) with the number of bytes it left out, and write the last
	// MaxStream - MaxStream/2. It writes nothing after Exec returns.
	Exec(ctx context.Context, req ExecRequest, stdout, stderr io.Writer) (exitCode int, err error)
	// ReadFile opens the file at path for reading.
	ReadFile(ctx context.Context, path string) (io.ReadCloser, error)
	// WriteFile creates or replaces the file at path with the bytes of r
	// and the permission bits of mode, creating parent directories.
	WriteFile(ctx context.Context, path string, r io.Reader, mode fs.FileMode) error
	// Archive writes the workspace to w as an uncompressed tar stream
	// whose entry names are relative to the workspace root ("a/b.txt" or
	// "./a/b.txt"). It includes regular files, directories and symbolic
	// links; this package drops what is not portable.
	Archive(ctx context.Context, w io.Writer) error
	// Restore replaces the whole workspace with the tree in the tar stream
	// r: afterwards the workspace holds exactly the archive's entries. The
	// stream's entries are already checked (relative, clean, links that
	// stay inside), but r may fail at any point, when a later entry is
	// refused. On any error the workspace must be left as it was:
	// implementations extract into a staging area and swap at the end.
	Restore(ctx context.Context, r io.Reader) error
	// Stop releases the sandbox's compute (kills its processes, stops its
	// container) but keeps what a later Attach needs where the backend
	// can. Stopping a stopped sandbox is not an error. After Stop, the
	// sandbox's instances may fail with ErrStopped until the next Attach.
	Stop(ctx context.Context) error
	// Destroy deletes the sandbox and its workspace. Destroying a sandbox
	// that does not exist gives an error matching ErrNotFound.
	Destroy(ctx context.Context) error
}

// Pauser is an optional interface of an Instance that can freeze the
// sandbox and thaw it faster than Stop and Attach (Docker pause, E2B pause).
// Without it, Sandbox.Pause returns ErrUnsupported and callers fall back to
// snapshot and Stop.
type Pauser interface {
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
}

// Lister is an optional interface of a Backend that can list the sandboxes
// it created (containers labelled by agentbot, cloud sandboxes with our
// metadata), so orphans can be found and removed. Registry.List calls it,
// or returns ErrUnsupported for a backend without it.
type Lister interface {
	// List returns every sandbox of the backend, running or stopped,
	// with the labels it was created with. Sandboxes being destroyed
	// may or may not be listed.
	List(ctx context.Context) ([]Listed, error)
}

// Listed is one sandbox as a Lister reports it.
type Listed struct {
	State
	// Labels are the Spec.Labels the sandbox was created with (without
	// the backend's own).
	Labels map[string]string `json:"labels,omitempty"`
	// Created is when the sandbox was created (for E2B: last started),
	// or zero when the backend cannot tell.
	Created time.Time `json:"created,omitzero"`
}

// Remover is an optional interface of a Backend that can delete a sandbox
// from its State alone, without attaching to it first (which would start
// a stopped container, resume a paused VM, or need a Root a listing does
// not have). Registry.Destroy uses it, and falls back to Attach and
// Destroy for a backend without it.
type Remover interface {
	// Remove deletes the sandbox state names, as Instance.Destroy does.
	// A sandbox that does not exist gives an error matching ErrNotFound.
	Remove(ctx context.Context, state State) error
}

// State is the small, serialisable description of a sandbox that a workflow
// keeps across restarts. It holds no secrets and no handles.
type State struct {
	// Backend is the registered name of the backend ("local", "docker").
	Backend string `json:"backend"`
	// ID identifies the sandbox within its backend.
	ID string `json:"id"`
	// Root is the workspace root inside the sandbox ("/workspace", or a
	// host directory for the local backend).
	Root string `json:"root"`
	// Image is the image, template or snapshot the sandbox was made from,
	// where the backend has such a thing.
	Image string `json:"image,omitempty"`
	// Env is the environment the sandbox was created with; every exec
	// starts from it. It must not hold secrets.
	Env map[string]string `json:"env,omitempty"`
	// Meta holds backend-specific, non-secret details (a cloud domain).
	Meta map[string]string `json:"meta,omitempty"`
}

// Spec says what sandbox to create.
type Spec struct {
	// Name is a human hint (a session title or ID) that backends may use
	// in labels and directory names, sanitised. Optional.
	Name string
	// Root chooses the workspace root. For the local backend it is an
	// absolute host directory to use instead of a fresh one; backends
	// that cannot honour it refuse it with ErrInvalid. Optional.
	Root string
	// Image overrides the backend's default image, template or snapshot.
	Image string
	// Env is the base environment of every command. The host's
	// environment never leaks in: what is not here (or in the request)
	// is not set, except a default PATH, HOME, LANG and TERM.
	Env map[string]string
	// Labels are attached where the backend can (container labels, cloud
	// metadata), for finding sandboxes later.
	Labels map[string]string
	// Key, when set, names the sandbox for find-or-create: a Create with
	// the Key of a sandbox that exists returns that sandbox (started again
	// if it was stopped) instead of making another, so that a retried
	// Create makes one sandbox, not two. The rest of the spec is not
	// compared: the caller chooses keys that stand for the whole spec
	// (agentflow's stand for a session, a backend, a root and a
	// generation). A
	// sandbox that was destroyed frees its key. Backends store the key
	// hashed (see KeyHash); it must not hold secrets all the same.
	// Optional; at most MaxKeyLen bytes.
	Key string
}

// ExecRequest is one command to run in a sandbox.
type ExecRequest struct {
	// Command is a shell command line, run by /bin/sh -c.
	Command string
	// Dir is the working directory, relative to the workspace root.
	// Empty means the root.
	Dir string
	// Env is added to the sandbox's environment for this command.
	Env map[string]string
	// Timeout limits the command's run time; zero means
	// DefaultExecTimeout. When it passes, the process tree is killed and
	// the result says TimedOut.
	Timeout time.Duration
	// MaxOutput caps how many bytes of each stream the result keeps; the
	// head and the tail are kept and the cut is reported. Zero means
	// DefaultMaxOutput.
	MaxOutput int
	// MaxStream caps how many bytes of each stream Stdout and Stderr
	// receive. Of a longer stream they get the first MaxStream/2 bytes
	// as they come and the last MaxStream/2 once the command has ended;
	// between the two, a writer that implements Skipper is told how many
	// bytes it did not get. Zero means DefaultMaxStream. It bounds what a
	// caller keeps of a command that prints without end (yes), and what
	// a backend that fetches output from afar reads.
	MaxStream int
	// Stdout and Stderr, when set, also receive the output as it comes,
	// up to MaxStream bytes of each stream (for keeping the output in a
	// file, or live progress).
	Stdout, Stderr io.Writer
}

// ExecResult is the outcome of a command.
type ExecResult struct {
	// ExitCode is the command's exit status; -1 when it was killed before
	// it exited (timeout, cancellation).
	ExitCode int
	// Stdout and Stderr hold the captured output, at most MaxOutput bytes
	// each: the head and tail of the stream.
	Stdout, Stderr Output
	// TimedOut says the request's Timeout passed and the command was
	// killed.
	TimedOut bool
	// Duration is how long the command ran.
	Duration time.Duration
}

// Defaults of the exec contract.
const (
	DefaultExecTimeout = 2 * time.Minute
	DefaultMaxOutput   = 64 << 10
	DefaultMaxStream   = 8 << 20
)

// MaxKeyLen is the longest Spec.Key a Registry accepts.
const MaxKeyLen = 512

// KeyHash is the form in which backends store and look up a Spec.Key: 40
// lower-case hex digits (the first 160 bits of its SHA-256), short enough
// for container names and cloud labels, and the same for the same key in
// every process.
func KeyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:20])
}

// MarkerEnv is the environment variable a backend sets in every command it
// runs, to "<sandbox id>/<nonce>", so that it can find the command's
// processes that left its process group or session (setsid, double-forking
// daemons) when the command times out or the sandbox stops. It is not a
// secret; a process that clears its environment escapes it.
const MarkerEnv = "AGENTBOT_SANDBOX"
