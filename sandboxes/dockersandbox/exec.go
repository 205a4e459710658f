package dockersandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/agentbot/agentbot/sandboxes"
)

// execMarker prefixes the $0 of the wrapper shell of every command, so the
// killer finds that shell by its command line.
const execMarker = "agentbot-exec-"

// wrapperScript runs the command in a child shell and stays its parent, so
// the marker in its own command line lives as long as the command. It is a
// session leader (docker exec calls setsid), so the command's processes are
// in its session and process group unless they leave them.
//
// Its arguments are the names of variables to unset, then the command. The
// image's ENV and Docker's HOSTNAME would otherwise reach the command: exec
// adds the container's environment under the one we give. The loop uses
// positional parameters only, so no variable of the command's environment
// is touched. `command` keeps a failing unset (a read-only or odd name)
// from ending the shell.
const wrapperScript = `while [ "$#" -gt 1 ]; do command unset -v "$1" 2>/dev/null; shift; done
/bin/sh -c "$1"
exit $?`

// killScript kills the whole process tree of one command. $1 is the
// command's token. It finds the wrapper shell by its marker (a session
// leader whose parent is outside the container, as for every exec), then
// stops, repeatedly until nothing new appears, every process in the
// wrapper's session or process group and every descendant of those (which
// catches processes that called setsid while their parent lived), and
// finally kills them all with SIGKILL. Stopping first means nothing can fork
// out of the set between finding and killing. It prints the killed PIDs.
//
// /proc/PID/stat is parsed after the last ") " because the command name in
// parentheses may hold spaces and parentheses.
const killScript = `mark="` + execMarker + `$1"
envmark="` + sandboxes.MarkerEnv + `=$2"
self=$$
p=
for d in /proc/[0-9]*; do
	q=${d#/proc/}
	if [ "$q" = "$self" ] || [ "$q" = 1 ]; then continue; fi
	read -r line 2>/dev/null <"$d/stat" || continue
	set -- ${line##*) }
	[ "$2" = 0 ] && [ "$4" = "$q" ] || continue
	tr '\0' '\n' <"$d/cmdline" 2>/dev/null | grep -qxF -e "$mark" || continue
	p=$q
	break
done
seen=" "
if [ -n "$p" ]; then
	kill -STOP "$p" 2>/dev/null
	seen=" $p "
fi
more=1
while [ -n "$more" ]; do
	more=
	for d in /proc/[0-9]*; do
		q=${d#/proc/}
		if [ "$q" = "$self" ] || [ "$q" = 1 ]; then continue; fi
		case $seen in *" $q "*) continue ;; esac
		read -r line 2>/dev/null <"$d/stat" || continue
		set -- ${line##*) }
		case $seen in
		*" $2 "*) ;;
		*)
			if [ -z "$p" ] || { [ "$4" != "$p" ] && [ "$3" != "$p" ]; }; then
				tr '\0' '\n' <"$d/environ" 2>/dev/null | grep -qxF -e "$envmark" || continue
			fi
			;;
		esac
		kill -STOP "$q" 2>/dev/null
		seen="$seen$q "
		more=1
	done
done
kill -KILL $seen 2>/dev/null
echo $seen`

// exitGrace is how long Exec waits for the output stream to end once the
// command has exited. Background processes that keep the command's
// stdout or stderr open would otherwise hold the stream (the daemon gives
// up after about two seconds; other daemons may not). The wait restarts
// whenever output arrives.
const exitGrace = time.Second

// Exec runs req.Command with /bin/sh -c as the exec user, in Root or
// req.Dir below it, with exactly this environment: PATH=DefaultPath,
// HOME=/workspace, LANG=C.UTF-8, TERM=dumb, then State.Env, then req.Env
// (later ones win). The image's ENV and Docker's HOSTNAME are removed; the
// shell itself adds PWD (and busybox's SHLVL). HOME is the workspace because
// it is the one directory the user can surely write to, and so that tools'
// dotfiles move with the workspace like on the local backend.
//
// When ctx is done, Exec kills the command's whole process tree inside the
// container (see killScript) and returns -1 and ctx.Err(). Processes that
// the command left running in the background after it exited are not
// killed, and do not hold Exec up for longer than a moment.
func (s *sandbox) Exec(ctx context.Context, req sandboxes.ExecRequest, stdout, stderr io.Writer) (int, error) {
	wd := Root
	if req.Dir != "" && req.Dir != "." {
		var st container.PathStat
		var err error
		wd, st, err = s.resolve(ctx, req.Dir)
		switch {
		case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
			return -1, sandboxes.Invalidf("working directory %q does not exist", req.Dir)
		case err != nil:
			return -1, fmt.Errorf("checking working directory %q: %w", req.Dir, err)
		case !st.Mode.IsDir():
			return -1, sandboxes.Invalidf("working directory %q is not a directory", req.Dir)
		}
	}
	token := randHex(12)
	env := s.execEnv(req.Env)
	// Set last, so no spec or request can replace it: it finds the
	// command's processes that left its session (double-forked daemons).
	env[sandboxes.MarkerEnv] = s.marker(token)
	cmd := []string{"/bin/sh", "-c", wrapperScript, execMarker + token}
	for _, k := range s.imageEnv {
		if _, ours := env[k]; !ours {
			cmd = append(cmd, k)
		}
	}
	cmd = append(cmd, req.Command)

	created, err := s.cli.ContainerExecCreate(ctx, s.id, container.ExecOptions{
		User:         s.user.spec,
		WorkingDir:   wd,
		Env:          envList(env),
		Cmd:          cmd,
		AttachStdout: true,
		AttachStderr: true,
	})
	if err != nil {
		if ctx.Err() != nil {
			return -1, ctx.Err()
		}
		return -1, s.opErr(ctx, fmt.Errorf("creating exec: %w", err))
	}
	hj, err := s.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		if ctx.Err() != nil {
			// The start request may have reached the daemon.
			s.killTree(ctx, created.ID, token)
			return -1, ctx.Err()
		}
		return -1, s.opErr(ctx, fmt.Errorf("starting exec: %w", err))
	}
	defer hj.Close()

	var progress atomic.Int64
	// The daemon writes why a command could not start (a missing user,
	// say) to its stdout; head keeps that for the error.
	outW := &countWriter{w: stdout, n: &progress, head: make([]byte, 0, 512)}
	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(outW, &countWriter{w: stderr, n: &progress}, hj.Reader)
		copied <- err
	}()
	// stop ends the output copy and waits for it, so nothing writes to
	// stdout or stderr after Exec returns.
	stop := func() {
		hj.Close()
		<-copied
	}

	poll := time.NewTimer(100 * time.Millisecond)
	defer poll.Stop()
	interval := 100 * time.Millisecond
	var exitedAt time.Time
	var seen int64
	for {
		select {
		case <-ctx.Done():
			s.killTree(ctx, created.ID, token)
			stop()
			return -1, ctx.Err()
		case cerr := <-copied:
			code, err := s.exitCode(ctx, created.ID)
			if errors.Is(err, errNotStarted) {
				return -1, fmt.Errorf("%w: %s", err, strings.TrimSpace(string(outW.head)))
			}
			if err != nil {
				if ctx.Err() != nil {
					s.killTree(ctx, created.ID, token)
					return -1, ctx.Err()
				}
				return -1, err
			}
			if cerr != nil && !isClosedErr(cerr) {
				return code, fmt.Errorf("reading command output: %w", cerr)
			}
			return code, nil
		case <-poll.C:
			ins, err := s.cli.ContainerExecInspect(ctx, created.ID)
			if err == nil && !ins.Running && ins.Pid != 0 {
				// The command exited; its output stream is held open
				// by something it left behind.
				if n := progress.Load(); exitedAt.IsZero() || n != seen {
					exitedAt, seen = time.Now(), n
				} else if time.Since(exitedAt) >= exitGrace {
					stop()
					return ins.ExitCode, nil
				}
				interval = 100 * time.Millisecond
			} else {
				interval = min(interval*2, time.Second)
			}
			poll.Reset(interval)
		}
	}
}

// errNotStarted says an exec ended without ever running (the daemon could
// not start its process).
var errNotStarted = errors.New("the command could not be started")

// exitCode waits for the daemon to record the exit of an exec whose output
// stream has ended.
func (s *sandbox) exitCode(ctx context.Context, execID string) (int, error) {
	for wait := 5 * time.Millisecond; ; wait = min(wait*2, 200*time.Millisecond) {
		ins, err := s.cli.ContainerExecInspect(ctx, execID)
		if err != nil {
			return -1, s.opErr(ctx, fmt.Errorf("inspecting exec: %w", err))
		}
		if !ins.Running {
			if ins.Pid == 0 {
				return -1, errNotStarted
			}
			return ins.ExitCode, nil
		}
		select {
		case <-ctx.Done():
			return -1, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// killTree kills the process tree of the exec with the given token. ctx is
// done already; the kill gets its own time. It runs the killer as the exec
// user (root without CAP_KILL could not signal that user's processes) until
// the exec is seen to have exited, or to have never started.
func (s *sandbox) killTree(ctx context.Context, execID, token string) {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	start := time.Now()
	for wait := 20 * time.Millisecond; kctx.Err() == nil; wait = min(wait*2, 500*time.Millisecond) {
		_, _, _, err := s.run(kctx, s.user, killScript, token, s.marker(token))
		if errors.Is(err, sandboxes.ErrStopped) || errors.Is(err, sandboxes.ErrNotFound) {
			return // paused, stopped or gone: nothing can run, nor kill
		}
		ins, err := s.cli.ContainerExecInspect(kctx, execID)
		if err != nil || !ins.Running && (ins.Pid != 0 || time.Since(start) > 2*time.Second) {
			return
		}
		select {
		case <-kctx.Done():
		case <-time.After(wait):
		}
	}
}

// run runs an internal script (not a user command) as u in "/", with only
// PATH set, and returns its output and exit code. The working directory is
// "/" so it works while /workspace is being swapped.
func (s *sandbox) run(ctx context.Context, u execUser, script string, args ...string) (stdout, stderr string, code int, err error) {
	created, err := s.cli.ContainerExecCreate(ctx, s.id, container.ExecOptions{
		User:         u.spec,
		WorkingDir:   "/",
		Env:          []string{"PATH=" + DefaultPath},
		Cmd:          append([]string{"/bin/sh", "-c", script, "agentbot"}, args...),
		AttachStdout: true,
		AttachStderr: true,
	})
	if err != nil {
		return "", "", -1, s.opErr(ctx, err)
	}
	hj, err := s.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return "", "", -1, s.opErr(ctx, err)
	}
	var out, errOut bytes.Buffer
	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(&out, &errOut, hj.Reader)
		copied <- err
	}()
	select {
	case err = <-copied:
		hj.Close()
	case <-ctx.Done():
		hj.Close()
		<-copied
		return out.String(), errOut.String(), -1, ctx.Err()
	}
	if err != nil && !isClosedErr(err) {
		return out.String(), errOut.String(), -1, err
	}
	code, err = s.exitCode(ctx, created.ID)
	if errors.Is(err, errNotStarted) {
		err = fmt.Errorf("%w: %s", err, strings.TrimSpace(out.String()))
	}
	return out.String(), errOut.String(), code, err
}

// runOK is run that fails unless the script exits 0.
func (s *sandbox) runOK(ctx context.Context, u execUser, script string, args ...string) error {
	_, stderr, code, err := s.run(ctx, u, script, args...)
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("exit code %d: %s", code, strings.TrimSpace(stderr))
	}
	return nil
}

// execEnv is the environment of a command; see Exec.
func (s *sandbox) execEnv(reqEnv map[string]string) map[string]string {
	env := map[string]string{
		"PATH": DefaultPath,
		"HOME": Root,
		"LANG": "C.UTF-8",
		"TERM": "dumb",
	}
	maps.Copy(env, s.state.Env)
	maps.Copy(env, reqEnv)
	return env
}

// marker is the value of sandboxes.MarkerEnv for one command.
func (s *sandbox) marker(token string) string {
	return shortID(s.id) + "/" + token
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// countWriter counts what passes, to tell a stream still in use, and keeps
// the first cap(head) bytes.
type countWriter struct {
	w    io.Writer
	n    *atomic.Int64
	head []byte
}

func (c *countWriter) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	if room := cap(c.head) - len(c.head); room > 0 {
		c.head = append(c.head, p[:min(room, len(p))]...)
	}
	return c.w.Write(p)
}

// isClosedErr tells the error of reading a hijacked connection that Exec
// closed itself.
func isClosedErr(err error) bool {
	return err == nil || errors.Is(err, net.ErrClosed)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}
