// Package localsandbox is the "local" sandbox backend: every sandbox is a
// directory on this machine, and its commands run as this OS user.
//
// It is NOT isolated. Commands run directly on the host, as the user that
// runs the program, and can read, change and reach whatever that user can:
// files outside the workspace, the network, other processes. The only
// protection is that commands never inherit the host's environment (so
// secrets held in environment variables do not leak), that a command's
// parent process is a shell started with the command's environment rather
// than the program running the backend (so $PPID's /proc/<pid>/environ
// holds no secret either; keeping the program's own environment block
// clean is its main's job, see internal/secretenv), and that the file
// operations of the sandbox (ReadFile, WriteFile, Archive, Restore) never
// leave the workspace, symbolic links included. Use it where the agent is
// trusted as much as its user, such as the embedded development setup.
//
// Each sandbox lives in its own directory under Options.BaseDir:
//
//	<BaseDir>/<id>/sandbox.json  metadata: the sandbox's State and who owns its root
//	<BaseDir>/<id>/workspace/    the workspace, unless Spec.Root chose one
//
// A sandbox created with a Spec.Key has the ID "loc-" plus 24 hex digits
// of the key's sandboxes.KeyHash instead of 12 random ones, and is built in
// a ".creating-*" directory under BaseDir that is renamed to its ID when
// complete (see Create).
//
// A workspace chosen with Spec.Root belongs to the user: Destroy removes the
// sandbox's directory under BaseDir but never deletes that workspace, and a
// Restore into it works in a hidden ".agentbot-restore-*" directory inside it
// that Archive leaves out. Restore still replaces the workspace's contents,
// as the contract of sandboxes.Instance says.
//
// # Processes
//
// Every command runs in a process group of its own, and with the
// environment variable AGENTBOT_SANDBOX (MarkerEnv) set to
// "<sandbox id>/<exec nonce>", a value new for every Exec; it marks every
// process the command starts, since children inherit it, and it is not a
// secret. When an Exec's context is done, its process group and every
// process of this user still carrying its marker are killed (frozen with
// SIGSTOP first, then killed with SIGKILL, looking again until none is
// left), so processes that left the group (setsid, double-forking daemons)
// die with it. Stop and Destroy kill the process groups of the commands the
// same *Backend value started (in this process) and every process of this
// user whose marker names the sandbox, whichever process started it.
//
// This is a best effort, not containment. The marker is found by reading
// /proc/<pid>/environ, on Linux only; elsewhere only process groups are
// killed. A process that clears its environment (env -i), drops or
// rewrites the marker, or overwrites its environment in memory, and leaves
// the command's process group (setsid, a double fork) as well, still
// escapes and keeps running on the host; so does one that runs as another
// user (sudo, setuid programs). The local backend is not isolated: use the
// docker backend for isolation.
package localsandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentbot/agentbot/sandboxes"
)

// Name is the name the local backend is registered under, and the Backend
// of the States it makes.
const Name = "local"

const (
	metaFile      = "sandbox.json"
	workspaceDir  = "workspace"
	metaVersion   = 1
	shell         = "/bin/sh"
	idPrefix      = "loc-"
	stagingPrefix = ".agentbot-restore-" // Restore's staging area inside a user's root
	oldPrefix     = ".agentbot-old-"     // Restore's old entries inside a user's root
)

// idRE matches sandbox IDs: 12 random hex digits, or 24 of the KeyHash of
// the sandbox's Spec.Key.
var idRE = regexp.MustCompile(`^loc-[0-9a-f]{12}(?:[0-9a-f]{12})?$`)

// creatingPrefix names the directory a keyed sandbox is built in before it
// is renamed to its ID, so that it appears whole or not at all.
const creatingPrefix = ".creating-"

// Options configures the local backend.
type Options struct {
	// BaseDir is the absolute directory under which sandboxes live, one
	// directory each. Empty means $XDG_STATE_HOME/agentbot/sandboxes, or
	// ~/.local/state/agentbot/sandboxes when XDG_STATE_HOME is unset or
	// not absolute. It is created when needed.
	BaseDir string
}

// Backend is the local sandbox backend. It implements sandboxes.Backend and
// sandboxes.Lister. Make one with New; it is safe for concurrent use. Keep
// one *Backend per BaseDir in a process: it tracks the commands it runs, so
// that Stop and Destroy can kill them.
type Backend struct {
	baseDir string

	mu        sync.Mutex
	sandboxes map[string]*tracker // by sandbox ID
}

var (
	_ sandboxes.Backend = (*Backend)(nil)
	_ sandboxes.Lister  = (*Backend)(nil)
	_ sandboxes.Remover = (*Backend)(nil)
)

// New returns a local backend keeping its sandboxes under opts.BaseDir. It
// fails when BaseDir is relative, or empty and no default can be found (no
// home directory). It does not touch the file system: Available says
// whether BaseDir is usable.
func New(opts Options) (*Backend, error) {
	dir := opts.BaseDir
	if dir == "" {
		var err error
		if dir, err = defaultBaseDir(); err != nil {
			return nil, err
		}
	}
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("localsandbox: base directory %q is not an absolute path", dir)
	}
	return &Backend{baseDir: filepath.Clean(dir), sandboxes: make(map[string]*tracker)}, nil
}

func defaultBaseDir() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "agentbot", "sandboxes"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("localsandbox: no default base directory: %w", err)
	}
	return filepath.Join(home, ".local", "state", "agentbot", "sandboxes"), nil
}

// Description says what the backend is and, plainly, that it does not
// isolate anything.
func (b *Backend) Description() string {
	return "local: a directory on this machine (" + b.baseDir + "); NOT isolated: commands run as this OS user " +
		"on this machine and can reach whatever that user can (files, network, processes); only the environment is scrubbed"
}

// Available returns nil when the base directory can be created and written
// and a POSIX shell is at /bin/sh; otherwise an error matching
// sandboxes.ErrUnavailable that says what is wrong.
func (b *Backend) Available(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := os.MkdirAll(b.baseDir, 0o700); err != nil {
		return fmt.Errorf("%w: cannot create the sandbox directory %s: %w", sandboxes.ErrUnavailable, b.baseDir, err)
	}
	f, err := os.CreateTemp(b.baseDir, ".probe-*")
	if err != nil {
		return fmt.Errorf("%w: cannot write in the sandbox directory %s: %w", sandboxes.ErrUnavailable, b.baseDir, err)
	}
	f.Close()
	if err := os.Remove(f.Name()); err != nil {
		return fmt.Errorf("%w: cannot remove files in the sandbox directory %s: %w", sandboxes.ErrUnavailable, b.baseDir, err)
	}
	if _, err := os.Stat(shell); err != nil {
		return fmt.Errorf("%w: no shell at %s: %w", sandboxes.ErrUnavailable, shell, err)
	}
	return nil
}

// metadata is what BaseDir/<id>/sandbox.json holds.
type metadata struct {
	Version int             `json:"version"`
	State   sandboxes.State `json:"state"`
	// UserRoot says State.Root is a directory the user chose: Destroy
	// never deletes it.
	UserRoot bool              `json:"user_root,omitempty"`
	Name     string            `json:"name,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	Created  time.Time         `json:"created"`
	// Key is the Spec.Key the sandbox was created with; its ID is made
	// from it.
	Key string `json:"key,omitempty"`
}

// Create makes a new sandbox directory and returns the sandbox. Its
// workspace is a fresh directory under BaseDir, or spec.Root: an existing,
// writable, absolute directory that is not "/" and neither lies inside
// BaseDir nor contains it (a symbolic link is resolved first, and State.Root
// is the resolved path, and State.Meta["user_root"] is "true"). A
// spec.Root that is not so, a spec.Image (the local backend has no images)
// or a malformed spec.Env name give an error matching sandboxes.ErrInvalid.
// spec.Name and spec.Labels are kept in the metadata file only.
//
// With spec.Key the sandbox's ID is "loc-" and 24 hex digits of
// sandboxes.KeyHash(spec.Key): an existing sandbox with that ID (and that
// key) is returned instead of a new one. A keyed sandbox is built in a
// directory of its own and renamed to its ID when complete, so it is found
// whole or not at all, and of two Creates at once one makes it and the
// other finds it.
func (b *Backend) Create(ctx context.Context, spec sandboxes.Spec) (sandboxes.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if spec.Image != "" {
		return nil, sandboxes.Invalidf("the local backend has no images (got %q)", spec.Image)
	}
	for k, v := range spec.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return nil, sandboxes.Invalidf("bad environment variable %q", k)
		}
	}
	if err := os.MkdirAll(b.baseDir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: cannot create the sandbox directory %s: %w", sandboxes.ErrUnavailable, b.baseDir, err)
	}
	root, userRoot := "", spec.Root != ""
	if userRoot {
		var err error
		if root, err = b.checkRoot(spec.Root); err != nil {
			return nil, err
		}
	}

	if spec.Key != "" {
		return b.createKeyed(ctx, spec, root, userRoot)
	}
	id, dir, err := b.mkdirID()
	if err != nil {
		return nil, err
	}
	md, err := b.build(dir, id, spec, root, userRoot)
	if err != nil {
		forceRemoveAll(dir)
		return nil, err
	}
	return b.newInstance(md, true), nil
}

// build fills the new directory dir of sandbox id (whose final place is
// BaseDir/id): the workspace, unless the user chose root, and the metadata.
func (b *Backend) build(dir, id string, spec sandboxes.Spec, root string, userRoot bool) (metadata, error) {
	if !userRoot {
		if err := os.Mkdir(filepath.Join(dir, workspaceDir), 0o755); err != nil {
			return metadata{}, fmt.Errorf("creating the workspace: %w", err)
		}
		root = filepath.Join(b.baseDir, id, workspaceDir)
	}
	st := sandboxes.State{Backend: Name, ID: id, Root: root, Env: maps.Clone(spec.Env)}
	if userRoot {
		st.Meta = map[string]string{"user_root": "true"}
	}
	md := metadata{
		Version:  metaVersion,
		State:    st,
		UserRoot: userRoot,
		Name:     spec.Name,
		Labels:   maps.Clone(spec.Labels),
		Created:  time.Now().UTC(),
		Key:      spec.Key,
	}
	return md, writeMetadata(dir, md)
}

// createKeyed is Create with a Spec.Key: find the sandbox of the key, or
// build it aside and rename it into place.
func (b *Backend) createKeyed(ctx context.Context, spec sandboxes.Spec, root string, userRoot bool) (sandboxes.Instance, error) {
	id := idPrefix + sandboxes.KeyHash(spec.Key)[:24]
	if inst, err := b.findKeyed(ctx, id, spec.Key); err == nil || !errors.Is(err, sandboxes.ErrNotFound) {
		return inst, err
	}
	tmp, err := os.MkdirTemp(b.baseDir, creatingPrefix)
	if err != nil {
		return nil, fmt.Errorf("creating the sandbox directory: %w", err)
	}
	md, err := b.build(tmp, id, spec, root, userRoot)
	if err == nil {
		err = os.Rename(tmp, filepath.Join(b.baseDir, id))
		if err == nil {
			return b.newInstance(md, true), nil
		}
	}
	forceRemoveAll(tmp)
	if errors.Is(err, fs.ErrExist) {
		// Another Create of the key renamed its directory first.
		return b.findKeyed(ctx, id, spec.Key)
	}
	return nil, fmt.Errorf("creating the sandbox directory: %w", err)
}

// findKeyed returns the sandbox id made for key, started, or an error
// matching sandboxes.ErrNotFound when there is none. One whose workspace is
// gone is destroyed and reported missing, so that a new one is made.
func (b *Backend) findKeyed(ctx context.Context, id, key string) (sandboxes.Instance, error) {
	md, err := b.readMetadata(id)
	if err != nil {
		return nil, err
	}
	if md.Key != key {
		return nil, fmt.Errorf("sandbox %s was made for another key (a hash collision)", id)
	}
	if fi, err := os.Stat(md.State.Root); err != nil || !fi.IsDir() {
		if err := b.newInstance(md, false).Destroy(ctx); err != nil && !errors.Is(err, sandboxes.ErrNotFound) {
			return nil, fmt.Errorf("removing sandbox %s, whose workspace is gone: %w", id, err)
		}
		return nil, sandboxes.NotFoundError(id)
	}
	return b.newInstance(md, true), nil
}

// checkRoot validates a user's chosen root and returns it resolved.
func (b *Backend) checkRoot(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", sandboxes.Invalidf("root %q is not an absolute path", p)
	}
	real, err := filepath.EvalSymlinks(filepath.Clean(p))
	if errors.Is(err, fs.ErrNotExist) {
		return "", sandboxes.Invalidf("root %q does not exist", p)
	}
	if err != nil {
		return "", fmt.Errorf("%w: root %q cannot be resolved: %w", sandboxes.ErrInvalid, p, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("%w: root %q: %w", sandboxes.ErrInvalid, p, err)
	}
	if !fi.IsDir() {
		return "", sandboxes.Invalidf("root %q is not a directory", p)
	}
	if real == string(filepath.Separator) {
		return "", sandboxes.Invalidf("root %q is the file system root", p)
	}
	const wOK, xOK = 0x2, 0x1 // access(2) modes, the same on every Unix
	if err := syscall.Access(real, wOK|xOK); err != nil {
		return "", sandboxes.Invalidf("root %q is not writable by this user (%v)", p, err)
	}
	base, err := filepath.EvalSymlinks(b.baseDir)
	if err != nil {
		return "", fmt.Errorf("resolving the sandbox directory: %w", err)
	}
	switch {
	case within(base, real):
		return "", sandboxes.Invalidf("root %q is inside the sandbox directory %s", p, b.baseDir)
	case within(real, base):
		// Restore would move the sandbox directory aside, and Archive
		// would carry every sandbox along.
		return "", sandboxes.Invalidf("root %q contains the sandbox directory %s", p, b.baseDir)
	}
	return real, nil
}

// within reports whether p is dir or below it. Both are clean and absolute.
func within(dir, p string) bool {
	if p == dir {
		return true
	}
	if dir == string(filepath.Separator) {
		return true
	}
	return strings.HasPrefix(p, dir+string(filepath.Separator))
}

// mkdirID creates the directory of a new sandbox under a fresh random ID.
func (b *Backend) mkdirID() (id, dir string, err error) {
	for range 5 {
		id = idPrefix + randHex(6)
		dir = filepath.Join(b.baseDir, id)
		err = os.Mkdir(dir, 0o700)
		if err == nil {
			return id, dir, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	return "", "", fmt.Errorf("creating the sandbox directory: %w", err)
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

func writeMetadata(dir string, md metadata) error {
	data, err := json.MarshalIndent(md, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding metadata: %w", err)
	}
	tmp := filepath.Join(dir, "."+metaFile+".tmp")
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing metadata: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, metaFile)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing metadata: %w", err)
	}
	return nil
}

// readMetadata reads the metadata of sandbox id; a missing sandbox gives
// sandboxes.NotFoundError.
func (b *Backend) readMetadata(id string) (metadata, error) {
	if !idRE.MatchString(id) {
		return metadata{}, sandboxes.NotFoundError(id)
	}
	data, err := os.ReadFile(filepath.Join(b.baseDir, id, metaFile))
	if errors.Is(err, fs.ErrNotExist) {
		return metadata{}, sandboxes.NotFoundError(id)
	}
	if err != nil {
		return metadata{}, fmt.Errorf("reading metadata: %w", err)
	}
	var md metadata
	if err := json.Unmarshal(data, &md); err != nil {
		return metadata{}, fmt.Errorf("reading metadata of %s: %w", id, err)
	}
	if md.Version != metaVersion {
		return metadata{}, fmt.Errorf("metadata of %s has version %d, want %d", id, md.Version, metaVersion)
	}
	if md.State.ID != id || !filepath.IsAbs(md.State.Root) {
		return metadata{}, fmt.Errorf("metadata of %s is inconsistent (id %q, root %q)", id, md.State.ID, md.State.Root)
	}
	return md, nil
}

// Attach returns the sandbox that state names, from the metadata on disk
// (which wins over the rest of state). A stopped sandbox can run commands
// again. A sandbox whose directory or workspace is gone gives an error
// matching sandboxes.ErrNotFound.
func (b *Backend) Attach(ctx context.Context, state sandboxes.State) (sandboxes.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	md, err := b.readMetadata(state.ID)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(md.State.Root)
	if err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("workspace %s is gone: %w", md.State.Root, sandboxes.NotFoundError(state.ID))
	}
	return b.newInstance(md, true), nil
}

// List returns every sandbox under BaseDir, with its labels and creation
// time, sorted by ID. Directories without readable metadata are left out.
// A missing BaseDir means no sandboxes.
func (b *Backend) List(ctx context.Context) ([]sandboxes.Listed, error) {
	entries, err := os.ReadDir(b.baseDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing sandboxes: %w", err)
	}
	var out []sandboxes.Listed
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !e.IsDir() || !idRE.MatchString(e.Name()) {
			continue
		}
		md, err := b.readMetadata(e.Name())
		if err != nil {
			continue
		}
		out = append(out, sandboxes.Listed{State: md.State, Labels: md.Labels, Created: md.Created})
	}
	slices.SortFunc(out, func(a, b sandboxes.Listed) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Remove implements sandboxes.Remover: it destroys the sandbox of state.ID
// as Instance.Destroy does, also when its workspace is gone (which Attach
// refuses).
func (b *Backend) Remove(ctx context.Context, state sandboxes.State) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	md, err := b.readMetadata(state.ID)
	if err != nil {
		return err
	}
	return b.newInstance(md, false).Destroy(ctx)
}
