package localsandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentbot/agentbot/sandboxes"
)

// defaultPath is the PATH of every command unless the sandbox's or the
// request's environment sets one.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// waitDelay is how long Exec waits, once the shell has exited or been
// killed, for the rest of the output of processes still holding its
// pipes (a background job). After that the output is no longer copied to
// the caller; it is read and discarded so that the job can go on writing.
const waitDelay = 2 * time.Second

// parentScript is what the shell that Exec starts runs: the command in a
// second shell, waited for, then that shell's exit status. The command's
// parent ($PPID) is then a shell started with the sandbox's environment
// only, not the program running the backend, whose /proc/<pid>/environ a
// process of the same user can read and which may have been started with
// API keys and tokens in it. The "; exit $?" keeps the shell from exec'ing
// into the command, as shells do with a last simple command.
const parentScript = `"$0" -c "$1"; exit $?`

// lingerPoll is how often a process group left running by a finished
// command is checked, to forget it once it is gone.
const lingerPoll = time.Second

// tracker is the per-process state of one sandbox, shared by every
// instance of it made by one Backend.
type tracker struct {
	mu        sync.Mutex
	stopped   bool                  // Stop ran and no Attach since
	gone      bool                  // Destroy ran
	running   map[*command]struct{} // commands whose shell has not exited
	lingering map[int]chan struct{} // process groups of finished commands still alive, with a channel to end their poller

	// fsMu orders Restore's swap (write) against file operations and
	// Archive (read), so neither sees a half-swapped workspace.
	fsMu sync.RWMutex
	// restoreMu lets one Restore run at a time.
	restoreMu sync.Mutex
}

// command is one running shell.
type command struct {
	pgid   int
	killed atomic.Bool   // by Stop or Destroy
	done   chan struct{} // closed when Exec has finished with it
}

func (b *Backend) tracker(id string) *tracker {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.sandboxes[id]
	if t == nil {
		t = &tracker{running: make(map[*command]struct{}), lingering: make(map[int]chan struct{})}
		b.sandboxes[id] = t
	}
	return t
}

// forget drops the tracker of a destroyed sandbox; its instances keep it,
// marked gone.
func (b *Backend) forget(id string, t *tracker) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sandboxes[id] == t {
		delete(b.sandboxes, id)
	}
}

func (b *Backend) newInstance(md metadata, start bool) *instance {
	t := b.tracker(md.State.ID)
	if start {
		t.mu.Lock()
		t.stopped, t.gone = false, false
		t.mu.Unlock()
	}
	st := md.State
	st.Backend = Name
	return &instance{
		b:        b,
		t:        t,
		st:       st,
		dir:      filepath.Join(b.baseDir, st.ID),
		userRoot: md.UserRoot,
	}
}

// instance is one local sandbox. It implements sandboxes.Instance.
type instance struct {
	b        *Backend
	t        *tracker
	st       sandboxes.State // never changed
	dir      string          // BaseDir/<id>
	userRoot bool            // st.Root is the user's, not ours to delete
}

var _ sandboxes.Instance = (*instance)(nil)

func (in *instance) State() sandboxes.State {
	st := in.st
	st.Env = maps.Clone(st.Env)
	st.Meta = maps.Clone(st.Meta)
	return st
}

// usable returns nil when the sandbox can run commands and be changed.
func (in *instance) usable(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	in.t.mu.Lock()
	defer in.t.mu.Unlock()
	return in.t.usableLocked(in.st.ID)
}

func (t *tracker) usableLocked(id string) error {
	switch {
	case t.gone:
		return sandboxes.NotFoundError(id)
	case t.stopped:
		return sandboxes.ErrStopped
	}
	return nil
}

// Exec runs req.Command with /bin/sh -c in the workspace (or req.Dir below
// it, which must resolve inside the workspace, symbolic links included),
// as the child of another /bin/sh that waits for it (see parentScript), so
// that the command's parent holds nothing but the command's environment.
//
// The environment is exactly PATH (a standard default), HOME (the
// workspace), LANG=C.UTF-8 and TERM=dumb, then the sandbox's Env, then
// req.Env; nothing of the host's environment is inherited. Last comes
// MarkerEnv, set to "<sandbox id>/<a nonce new for this Exec>" whatever
// the other environments say.
//
// The shell runs in a process group of its own. When ctx is done, Exec
// kills with SIGKILL that whole group and every process still carrying
// this Exec's marker (see reap: they are frozen first, and looked for
// again until none is left), which catches those that left the group
// (setsid, double-forking daemons); then it returns ctx.Err(). Processes
// the command leaves running (background jobs, daemons) outlive it, as in
// a container, until Stop or Destroy kill them; their output after the
// shell has exited (and waitDelay has passed) is discarded, so they can
// never keep Exec from returning. A shell killed by a signal other than
// ours gives 128 plus the signal number, as shells report it; a command
// killed by Stop or Destroy gives an error matching sandboxes.ErrStopped.
func (in *instance) Exec(ctx context.Context, req sandboxes.ExecRequest, stdout, stderr io.Writer) (int, error) {
	if err := in.usable(ctx); err != nil {
		return -1, err
	}
	dir, err := in.workdir(req.Dir)
	if err != nil {
		return -1, err
	}
	// Pipes of our own rather than os/exec's copying: once the shell has
	// exited, a background job may keep its end open; we then stop
	// copying but go on reading, so the job is not killed by SIGPIPE.
	outR, outW, err := os.Pipe()
	if err != nil {
		return -1, fmt.Errorf("creating pipes: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return -1, fmt.Errorf("creating pipes: %w", err)
	}

	mark := marker(in.st.ID, randHex(8))
	cmd := exec.CommandContext(ctx, shell, "-c", parentScript, shell, req.Command)
	cmd.Dir = dir
	cmd.Env = in.environ(req.Env, mark)
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return reap([]int{cmd.Process.Pid}, exactMarker(mark)) }
	cmd.WaitDelay = waitDelay

	c, err := in.t.start(in.st.ID, cmd)
	outW.Close() // the shell has its own copies
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return -1, err
	}
	defer close(c.done)
	outD, errD := startDrain(outR, stdout), startDrain(errR, stderr)

	werr := cmd.Wait()

	expired := make(chan struct{})
	timer := time.AfterFunc(waitDelay, func() { close(expired) })
	for _, d := range []*drain{outD, errD} {
		select {
		case <-d.done:
		case <-expired:
		}
	}
	timer.Stop()
	copyErr := errors.Join(outD.detach(), errD.detach())

	in.t.finish(c, ctx.Err() == nil && (werr == nil || isExit(werr)))

	if ctx.Err() != nil && werr != nil {
		return -1, ctx.Err()
	}
	if werr != nil && !isExit(werr) {
		return -1, fmt.Errorf("running the shell: %w", werr)
	}
	code := cmd.ProcessState.ExitCode()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		if c.killed.Load() {
			return -1, fmt.Errorf("command killed: %w", sandboxes.ErrStopped)
		}
		code = 128 + int(ws.Signal())
	}
	if copyErr != nil {
		return code, fmt.Errorf("copying the output: %w", copyErr)
	}
	return code, nil
}

// isExit reports whether a Wait error only says how the shell exited.
func isExit(err error) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee)
}

// start starts cmd unless the sandbox is stopped or gone, and tracks it.
// Both happen under the lock, so Stop never misses a command.
func (t *tracker) start(id string, cmd *exec.Cmd) (*command, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.usableLocked(id); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the shell: %w", err)
	}
	c := &command{pgid: cmd.Process.Pid, done: make(chan struct{})}
	t.running[c] = struct{}{}
	return c, nil
}

// finish stops tracking c as running. When the shell exited on its own
// and its process group lives on (background jobs), the group is tracked
// until it is gone, so that Stop can still kill it.
func (t *tracker) finish(c *command, exited bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.running, c)
	if !exited || c.killed.Load() || !groupAlive(c.pgid) {
		return
	}
	if _, dup := t.lingering[c.pgid]; dup {
		return
	}
	quit := make(chan struct{})
	t.lingering[c.pgid] = quit
	go t.watch(c.pgid, quit)
}

// watch forgets a lingering process group once it is gone, so that a
// later Stop never signals a reused process group ID.
func (t *tracker) watch(pgid int, quit chan struct{}) {
	tick := time.NewTicker(lingerPoll)
	defer tick.Stop()
	for {
		select {
		case <-quit:
			return
		case <-tick.C:
		}
		if groupAlive(pgid) {
			continue
		}
		t.mu.Lock()
		if t.lingering[pgid] == quit {
			delete(t.lingering, pgid)
		}
		t.mu.Unlock()
		return
	}
}

// kill kills every process of sandbox id: the process groups of its
// commands, running or left running, and every process of this user that
// carries the sandbox's marker (see reap), whoever started it, this
// process or an earlier one. Then it waits, until ctx is done, for the
// Execs running here to return. gone marks the sandbox destroyed, else
// stopped. It holds the lock throughout, so that no Attach and Exec
// through this Backend can start a command meanwhile that the scan would
// kill.
func (t *tracker) kill(ctx context.Context, id string, gone bool) error {
	t.mu.Lock()
	if gone {
		t.gone = true
	} else {
		t.stopped = true
	}
	var waits []chan struct{}
	var pgids []int
	for c := range t.running {
		c.killed.Store(true)
		pgids = append(pgids, c.pgid)
		waits = append(waits, c.done)
	}
	for pgid, quit := range t.lingering {
		pgids = append(pgids, pgid)
		close(quit)
		delete(t.lingering, pgid)
	}
	reap(pgids, sandboxMarker(id))
	t.mu.Unlock()
	for _, done := range waits {
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func groupAlive(pgid int) bool {
	return syscall.Kill(-pgid, 0) == nil
}

// drain copies a pipe to a writer until detached, and reads (and drops)
// the rest until the pipe's writers are gone.
type drain struct {
	mu   sync.Mutex
	w    io.Writer // nil once detached
	err  error     // first error of w
	done chan struct{}
}

func startDrain(r *os.File, w io.Writer) *drain {
	d := &drain{w: w, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		defer r.Close()
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				d.mu.Lock()
				if d.w != nil && d.err == nil {
					_, d.err = d.w.Write(buf[:n])
				}
				d.mu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}()
	return d
}

// detach stops writing to w, for good, and returns w's first error.
func (d *drain) detach() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.w = nil
	return d.err
}

// environ builds a command's environment from nothing but the defaults,
// the sandbox's Env and the request's, and sets MarkerEnv to mark.
func (in *instance) environ(reqEnv map[string]string, mark string) []string {
	env := map[string]string{
		"PATH": defaultPath,
		"HOME": in.st.Root,
		"LANG": "C.UTF-8",
		"TERM": "dumb",
	}
	maps.Copy(env, in.st.Env)
	maps.Copy(env, reqEnv)
	env[MarkerEnv] = mark
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// workdir resolves a command's directory: the workspace, or dir below it.
// dir is opened through os.Root, so a symbolic link cannot lead it out,
// and the path handed to the shell is checked to be that same directory.
func (in *instance) workdir(dir string) (string, error) {
	if dir == "" || dir == "." {
		return in.st.Root, nil
	}
	r, err := os.OpenRoot(in.st.Root)
	if err != nil {
		return "", fmt.Errorf("opening the workspace: %w", err)
	}
	defer r.Close()
	f, err := r.Open(filepath.FromSlash(dir))
	if err != nil {
		return "", pathErr("working directory", dir, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("working directory %q: %w", dir, err)
	}
	if !fi.IsDir() {
		return "", sandboxes.Invalidf("working directory %q is not a directory", dir)
	}
	real, err := filepath.EvalSymlinks(filepath.Join(in.st.Root, filepath.FromSlash(dir)))
	if err != nil {
		return "", fmt.Errorf("working directory %q: %w", dir, err)
	}
	realRoot, err := filepath.EvalSymlinks(in.st.Root)
	if err != nil {
		return "", fmt.Errorf("resolving the workspace: %w", err)
	}
	rfi, err := os.Stat(real)
	if err != nil || !within(realRoot, real) || !os.SameFile(fi, rfi) {
		return "", sandboxes.Invalidf("working directory %q changed while it was resolved", dir)
	}
	return real, nil
}

// errPathEscapes is the text of os.Root's error for a path that leaves
// the root; os does not export the error itself.
const errPathEscapes = "path escapes from parent"

// pathErr describes an error of os.Root about path p. A path that leads
// out of the workspace (through a symbolic link) matches
// sandboxes.ErrInvalid.
func pathErr(what, p string, err error) error {
	if errors.Is(err, sandboxes.ErrInvalid) {
		return err
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if e.Error() == errPathEscapes {
			return fmt.Errorf("%w: %s %q leads outside the workspace", sandboxes.ErrInvalid, what, p)
		}
	}
	return fmt.Errorf("%s %q: %w", what, p, err)
}

// ReadFile opens the regular file at p through os.Root: a symbolic link on
// the way is followed only while it stays inside the workspace; one that
// leads out gives an error matching sandboxes.ErrInvalid, and so does a
// path that is not a regular file.
func (in *instance) ReadFile(ctx context.Context, p string) (io.ReadCloser, error) {
	if err := in.usable(ctx); err != nil {
		return nil, err
	}
	in.t.fsMu.RLock()
	defer in.t.fsMu.RUnlock()
	r, err := os.OpenRoot(in.st.Root)
	if err != nil {
		return nil, fmt.Errorf("opening the workspace: %w", err)
	}
	defer r.Close()
	f, err := openRegular(r, filepath.FromSlash(p), os.O_RDONLY, 0)
	if err != nil {
		return nil, pathErr("file", p, err)
	}
	return f, nil
}

// openRegular opens a regular file in r, refusing anything else without
// blocking on it (a FIFO).
func openRegular(r *os.Root, name string, flag int, perm fs.FileMode) (*os.File, error) {
	f, err := r.OpenFile(name, flag|syscall.O_NONBLOCK, perm)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		what := "not a regular file"
		if fi.IsDir() {
			what = "a directory"
		}
		return nil, fmt.Errorf("%w: %q is %s", sandboxes.ErrInvalid, filepath.ToSlash(name), what)
	}
	return f, nil
}

// WriteFile writes r to a temporary file beside p and renames it over p,
// so readers see the old file or the new one, never a part; parents are
// created (0755 before the umask) and the file gets exactly mode's
// permission bits. Everything goes through os.Root, so nothing is written
// outside the workspace. When p is a symbolic link that stays inside the
// workspace, its target is written in place (not atomically); one that
// leads out gives an error matching sandboxes.ErrInvalid.
func (in *instance) WriteFile(ctx context.Context, p string, r io.Reader, mode fs.FileMode) error {
	if err := in.usable(ctx); err != nil {
		return err
	}
	in.t.fsMu.RLock()
	defer in.t.fsMu.RUnlock()
	rt, err := os.OpenRoot(in.st.Root)
	if err != nil {
		return fmt.Errorf("opening the workspace: %w", err)
	}
	defer rt.Close()

	name := filepath.FromSlash(p)
	if name == "." {
		return sandboxes.Invalidf("path %q is the workspace root", p)
	}
	dir, base := filepath.Split(name)
	if dir != "" {
		if err := rt.MkdirAll(dir, 0o755); err != nil {
			return pathErr("directory", filepath.ToSlash(filepath.Clean(dir)), err)
		}
	}
	if fi, err := rt.Lstat(name); err == nil {
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			return writeThrough(ctx, rt, name, p, r, mode)
		case fi.IsDir():
			return sandboxes.Invalidf("path %q is a directory", p)
		}
	}

	tmp := filepath.Join(dir, "."+base+".agentbot-tmp-"+randHex(6))
	f, err := rt.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return pathErr("file", p, err)
	}
	err = fillFile(ctx, f, r, mode)
	if err == nil {
		err = rt.Rename(tmp, name)
	}
	if err != nil {
		rt.Remove(tmp)
		return fmt.Errorf("writing %q: %w", p, err)
	}
	return nil
}

// writeThrough writes the target of the symbolic link name in place.
func writeThrough(ctx context.Context, rt *os.Root, name, p string, r io.Reader, mode fs.FileMode) error {
	f, err := openRegular(rt, name, os.O_WRONLY|os.O_CREATE, mode.Perm())
	if err != nil {
		return pathErr("file", p, err)
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return fmt.Errorf("writing %q: %w", p, err)
	}
	if err := fillFile(ctx, f, r, mode); err != nil {
		return fmt.Errorf("writing %q: %w", p, err)
	}
	return nil
}

// fillFile copies r into f, sets its mode and closes it.
func fillFile(ctx context.Context, f *os.File, r io.Reader, mode fs.FileMode) error {
	_, err := io.Copy(f, ctxReader{ctx, r})
	if err == nil {
		err = f.Chmod(mode.Perm())
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// ctxReader fails reads once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// Stop kills every command of the sandbox started through the same
// *Backend, by any instance of it (their whole process groups, background
// jobs included), and every process of this user carrying the sandbox's
// MarkerEnv, even one started by another process (see the package
// documentation for what escapes), and waits, until ctx is done, for the
// Execs running here to return. Files are kept. Until the sandbox is attached again through that
// Backend, the methods of its instances other than State, Stop and Destroy
// return sandboxes.ErrStopped. Stopping a stopped sandbox is not an error.
func (in *instance) Stop(ctx context.Context) error {
	return in.t.kill(ctx, in.st.ID, false)
}

// Destroy kills the sandbox's commands (as Stop) and deletes its directory
// under BaseDir, which holds the workspace unless the user chose it: a
// workspace chosen with Spec.Root is never deleted. A sandbox that does
// not exist gives sandboxes.NotFoundError.
func (in *instance) Destroy(ctx context.Context) error {
	// Kill first even when the sandbox is gone (destroyed by another
	// process): our commands in it have nowhere left to run.
	if err := in.t.kill(ctx, in.st.ID, true); err != nil {
		return err
	}
	if _, err := os.Lstat(filepath.Join(in.dir, metaFile)); errors.Is(err, fs.ErrNotExist) {
		return sandboxes.NotFoundError(in.st.ID)
	}
	in.t.fsMu.Lock()
	defer in.t.fsMu.Unlock()
	// Renaming first makes the sandbox vanish at once for Attach and
	// List, even when deleting its files takes long or fails half-way.
	trash := filepath.Join(in.b.baseDir, ".destroyed-"+in.st.ID+"-"+randHex(4))
	if err := os.Rename(in.dir, trash); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return sandboxes.NotFoundError(in.st.ID)
		}
		return fmt.Errorf("removing the sandbox directory: %w", err)
	}
	in.b.forget(in.st.ID, in.t)
	if err := forceRemoveAll(trash); err != nil {
		return fmt.Errorf("removing the sandbox directory: %w", err)
	}
	return nil
}

// forceRemoveAll is os.RemoveAll that also empties directories without
// write permission (a Go module cache makes such), by granting it first.
func forceRemoveAll(p string) error {
	err := os.RemoveAll(p)
	if err == nil {
		return nil
	}
	filepath.WalkDir(p, func(q string, d fs.DirEntry, werr error) error {
		if werr == nil && d.IsDir() {
			os.Chmod(q, 0o700)
		}
		return nil
	})
	if err := os.RemoveAll(p); err != nil {
		return err
	}
	return nil
}

// isStaging reports whether a top-level name of a workspace is Restore's.
func isStaging(name string) bool {
	return strings.HasPrefix(name, stagingPrefix) || strings.HasPrefix(name, oldPrefix)
}
