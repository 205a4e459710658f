package dockersandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
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
// command's token, $2 its MarkerEnv value, $3 (optional) the PID of the exec
// server that runs it. It finds the wrapper shell, a session leader: the
// one with the token's marker among those whose parent is outside the
// container (as for every exec), or with $3 the server's child (the server
// has one child at a time, and no command can start a process under it).
// Then it
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
parent=${3:-0}
self=$$
p=
for d in /proc/[0-9]*; do
	q=${d#/proc/}
	if [ "$q" = "$self" ] || [ "$q" = 1 ]; then continue; fi
	read -r line 2>/dev/null <"$d/stat" || continue
	set -- ${line##*) }
	[ "$2" = "$parent" ] && [ "$4" = "$q" ] || continue
	if [ "$parent" = 0 ]; then
		tr '\0' '\n' <"$d/cmdline" 2>/dev/null | grep -qxF -e "$mark" || continue
	fi
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
// The command runs through an exec server of the container (see
// serverScript) where it can, else through a docker exec of its own; the
// two are alike to the command, down to its process tree and signals.
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
	// The wrapper's arguments: the variables to unset, then the command.
	args := []string{execMarker + token}
	for _, k := range s.imageEnv {
		if _, ours := env[k]; !ours {
			args = append(args, k)
		}
	}
	if code, err, ran := s.serverExec(ctx, wd, env, args, req.Command, stdout, stderr); ran {
		return code, err
	}
	return s.classicExec(ctx, wd, env, append(args, req.Command), stdout, stderr)
}

// classicExec runs the wrapper shell (args are its $0, the variables to
// unset and the command) in a docker exec of its own.
func (s *sandbox) classicExec(ctx context.Context, wd string, env map[string]string, args []string, stdout, stderr io.Writer) (int, error) {
	token := strings.TrimPrefix(args[0], execMarker)
	created, err := s.cli.ContainerExecCreate(ctx, s.id, container.ExecOptions{
		User:         s.user.spec,
		WorkingDir:   wd,
		Env:          envList(env),
		Cmd:          append([]string{"/bin/sh", "-c", wrapperScript}, args...),
		AttachStdout: true,
		AttachStderr: true,
	})
	if err != nil {
		if ctx.Err() != nil {
			return -1, ctx.Err()
		}
		return -1, s.opErr(ctx, fmt.Errorf("creating exec: %w", err))
	}
	exited := func(kctx context.Context, start time.Time) bool {
		ins, err := s.cli.ContainerExecInspect(kctx, created.ID)
		return err != nil || !ins.Running && (ins.Pid != 0 || time.Since(start) > 2*time.Second)
	}
	hj, err := s.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		if ctx.Err() != nil {
			// The start request may have reached the daemon.
			s.killTree(ctx, token, "", exited)
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
			s.killTree(ctx, token, "", exited)
			stop()
			return -1, ctx.Err()
		case cerr := <-copied:
			code, err := s.exitCode(ctx, created.ID)
			if errors.Is(err, errNotStarted) {
				return -1, fmt.Errorf("%w: %s", err, strings.TrimSpace(string(outW.head)))
			}
			if err != nil {
				if ctx.Err() != nil {
					s.killTree(ctx, token, "", exited)
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
	// The stream often ends a moment before the daemon has noted the
	// exit.
	for wait := 2 * time.Millisecond; ; wait = min(wait*2, 200*time.Millisecond) {
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

// killTree kills the process tree of the command with the given token,
// started by the exec server whose PID is parent, or by a docker exec of its
// own when parent is "". ctx is done already; the kill gets its own time.
// It runs the killer as the exec user (root without CAP_KILL could not
// signal that user's processes) until exited reports that the command has
// exited, or never started.
func (s *sandbox) killTree(ctx context.Context, token, parent string, exited func(kctx context.Context, start time.Time) bool) {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	start := time.Now()
	for wait := 20 * time.Millisecond; kctx.Err() == nil; wait = min(wait*2, 500*time.Millisecond) {
		_, _, _, err := s.run(kctx, s.user, killScript, token, s.marker(token), parent)
		if errors.Is(err, sandboxes.ErrStopped) || errors.Is(err, sandboxes.ErrNotFound) {
			return // paused, stopped or gone: nothing can run, nor kill
		}
		if exited(kctx, start) {
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

// A docker exec costs the daemon far more than the command it runs: `true`
// takes a hundred milliseconds or more, nearly all of it in the daemon
// and runc, against a few for the API requests. So commands run, where
// they can, through an exec server: one long-lived docker exec of
// serverScript per container and exec user, kept between commands, that
// forks each command it is sent. A server runs one command at a time;
// concurrent commands start more servers, and a few of them are kept idle
// (maxIdleServers, for idleServerTimeout).
//
// The protocol, on the server's streams (nonces are random per server or
// per command; only the hello's is in the server's arguments):
//
//	server stdout: H-nonce "H" pid "."        ready, with its shell's PID
//	client stdin:  request line               nonce, dir, env, wrapper args
//	server stdout: nonce "R"                  request read
//	client stdin:  nonce "\n"                 go
//	server stdout: <command's stdout> nonce "E" code "."
//	server stderr: <command's stderr> nonce "E"
//
// The go step makes sure a server frozen with its container (docker pause)
// never starts a command late, after Exec gave up on it: the client sends
// it only once the server answered. When the command left processes behind
// that hold its stdout or stderr (which are the server's), the server
// writes nonce "X" code "." on its stdout instead and exits, and the
// output goes on, as with a docker exec of its own, until those processes
// close it or exitGrace passes.
const (
	maxIdleServers    = 4
	idleServerTimeout = 5 * time.Minute
	// readyWait is how long Exec waits for a server's answer before it
	// asks the daemon whether the container is paused or stopped.
	readyWait = 250 * time.Millisecond
	// maxRequestLine bounds a request: the server's shell reads its
	// stdin a byte at a time. Longer commands get a docker exec of their
	// own.
	maxRequestLine = 64 << 10
	// unsupportedExit is the exit code of serverScript in a container
	// that lacks what it needs (setsid, /proc, a test with -ef): its
	// commands all get a docker exec of their own.
	unsupportedExit = 97
)

// serverScript is the exec server. $1 is the nonce of its hello, $2 the
// wrapper script. It runs each command as a docker exec would: the wrapper
// in a new session (setsid), in the foreground (a background job would
// start with SIGINT and SIGQUIT ignored), with stdin from /dev/null and
// the request's environment exported over its own (the wrapper unsets
// the rest, as after docker exec). While a command runs, the wrapper is
// the server's only child: that is how the killer finds it. After each
// command the server looks, without starting a process, for any process
// that still holds its stdout or stderr (test -ef on /proc/PID/fd/N): the
// command's output is the server's, so it cannot be used again while one
// does. It looks twice: a child started in the background (cmd >log &)
// may not have moved its output yet when the command's shell exits.
//
// A request is one line of words for eval: nonce, directory, NAME=value
// to export, "--", the wrapper's arguments (marker, names to unset,
// command).
const serverScript = `h=$1 w=$2
nl='
'
x=
for p in "$(command -v setsid 2>/dev/null)" /usr/bin/setsid /bin/setsid /usr/sbin/setsid /sbin/setsid; do
	case $p in /*) if [ -x "$p" ]; then x=$p; break; fi ;; esac
done
[ -n "$x" ] && [ /proc/$$/fd/1 -ef /proc/$$/fd/1 ] && ! [ /proc/$$/fd/0 -ef /proc/$$/fd/1 ] || exit 97
held() {
	for q in /proc/[0-9]*; do
		[ "$q" = "/proc/$$" ] && continue
		for f in "$q"/fd/*; do
			if [ "$f" -ef /proc/$$/fd/1 ] || [ "$f" -ef /proc/$$/fd/2 ]; then
				return 0
			fi
		done
	done
	return 1
}
printf '%sH%s.' "$h" "$$"
while IFS= read -r r; do
	eval "set -- $r" || exit 96
	[ "$#" -ge 5 ] || exit 96
	n=$1 d=$2
	shift 2
	set -- "$x" "$w" "$@"
	printf '%sR' "$n"
	IFS= read -r g && [ "$g" = "$n" ] || exit 0
	(
		cd -- "$d" || exit
		agentbot_setsid=$1 agentbot_wrapper=$2
		shift 2
		while [ "$#" -gt 2 ] && [ "$1" != -- ]; do
			command export "$1" 2>/dev/null
			shift
		done
		shift
		exec "$agentbot_setsid" /bin/sh -c "$agentbot_wrapper" "$@"
	) </dev/null
	c=$?
	if held && held; then
		printf '%sX%s.' "$n" "$c"
		exit "$c"
	fi
	printf '%sE%s.' "$n" "$c"
	printf '%sE' "$n" >&2
done`

// serverExec runs command through an exec server; args are those of the
// wrapper of classicExec (its marker, then the variables to unset). ran is
// false when the command was not started and can run through classicExec
// instead: the request does not fit the protocol, the container's image
// cannot have a server, or the server failed before the go step
// (classicExec then reports what is wrong, a stopped container say, as it
// always did).
func (s *sandbox) serverExec(ctx context.Context, wd string, env map[string]string, args []string, command string, stdout, stderr io.Writer) (code int, err error, ran bool) {
	line, ok := serverRequest(wd, env, args, command)
	if !ok {
		return -1, nil, false
	}
	token := strings.TrimPrefix(args[0], execMarker)
	pool := s.serverPool()
	v, err := pool.take(ctx, s)
	if err != nil {
		if ctx.Err() != nil {
			return -1, ctx.Err(), true
		}
		return -1, nil, false
	}
	var progress atomic.Int64
	c := v.begin(&countWriter{w: stdout, n: &progress}, &countWriter{w: stderr, n: &progress})
	if _, err := io.WriteString(v.hj.Conn, shQuote(c.nonce)+" "+line); err != nil {
		v.close()
		return -1, nil, false
	}
	ready := time.NewTimer(readyWait)
	defer ready.Stop()
	for waiting := true; waiting; {
		select {
		case <-c.ready:
			waiting = false
		case <-v.dead:
			v.close()
			return -1, nil, false
		case <-ctx.Done():
			v.close()
			return -1, ctx.Err(), true
		case <-ready.C:
			// Paused or stopped, the server cannot answer; once
			// closed, it never starts the command.
			if err := s.stateErr(ctx); err != nil {
				v.close()
				return -1, err, true
			}
			ready.Reset(4 * readyWait)
		}
	}
	if _, err := io.WriteString(v.hj.Conn, c.nonce+"\n"); err != nil {
		// The server goes on only after a whole line.
		v.close()
		return -1, nil, false
	}
	exited := func(context.Context, time.Time) bool { return c.hasExited() || v.isClosed() }
	select {
	case <-c.exited:
	case <-v.dead:
		v.close()
		if !c.hasExited() {
			// The server died before it could tell the exit code:
			// it is its own (killed, say).
			code, err := s.exitCode(ctx, v.execID)
			if err != nil && ctx.Err() != nil {
				return -1, ctx.Err(), true
			}
			return code, err, true
		}
		return c.result()
	case <-ctx.Done():
		s.killTree(ctx, token, v.pid, exited)
		v.close()
		return -1, ctx.Err(), true
	}
	if !c.held {
		select {
		case <-c.done:
			pool.put(v)
		case <-v.dead:
			v.close()
		case <-ctx.Done():
			// The command has exited; only the end of its
			// stderr is missing.
			v.close()
			return -1, ctx.Err(), true
		}
		return c.result()
	}
	// The command exited but left processes that hold its output (the
	// server has exited): it goes on until they close it, or until none
	// came for exitGrace.
	grace := time.NewTimer(exitGrace)
	defer grace.Stop()
	seen := progress.Load()
	for {
		select {
		case <-v.dead:
			v.close()
			return c.result()
		case <-ctx.Done():
			s.killTree(ctx, token, v.pid, exited)
			v.close()
			return -1, ctx.Err(), true
		case <-grace.C:
			if n := progress.Load(); n != seen {
				seen = n
				grace.Reset(exitGrace)
				continue
			}
			v.close()
			return c.result()
		}
	}
}

// serverRequest is the request line of a command, but for its nonce (see
// serverScript), with every word quoted for the server's eval, a line break
// as $nl, so that the request is one line. args are the wrapper's. ok is
// false when the command cannot go through a server: a name the shell
// cannot export, a NUL byte, or a request too long for the server to read
// quickly.
func serverRequest(wd string, env map[string]string, args []string, command string) (line string, ok bool) {
	var b strings.Builder
	b.WriteString(shQuote(wd))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if !shellName(k) || strings.HasPrefix(k, "agentbot_") {
			// The script's own variables start with agentbot_.
			return "", false
		}
		b.WriteString(" " + shQuote(k+"="+env[k]))
	}
	b.WriteString(" --")
	for _, a := range args {
		b.WriteString(" " + shQuote(a))
	}
	// The server's shell exports PWD and OLDPWD once it has changed
	// directory; after docker exec neither is set.
	for _, k := range []string{"OLDPWD", "PWD"} {
		if _, ours := env[k]; !ours && !slices.Contains(args[1:], k) {
			b.WriteString(" " + k)
		}
	}
	b.WriteString(" " + shQuote(command) + "\n")
	if b.Len() > maxRequestLine || strings.ContainsRune(b.String(), 0) {
		return "", false
	}
	return b.String(), true
}

// shellName reports whether k is a name the shell can export.
func shellName(k string) bool {
	if k == "" || k[0] >= '0' && k[0] <= '9' {
		return false
	}
	for _, r := range k {
		if r != '_' && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') {
			return false
		}
	}
	return true
}

// shQuote quotes s as one word for serverScript's eval, with line breaks
// written as $nl, which the script sets to one.
func shQuote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\'':
			b.WriteString(`'\''`)
		case '\n':
			b.WriteString(`'"$nl"'`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// stateErr says why commands cannot run in the container now (paused,
// stopped, gone), or returns nil when it is running.
func (s *sandbox) stateErr(ctx context.Context) error {
	ins, err := s.cli.ContainerInspect(ctx, s.id)
	switch {
	case cerrdefs.IsNotFound(err):
		return sandboxes.NotFoundError(s.id)
	case err != nil:
		return s.opErr(ctx, fmt.Errorf("inspecting container: %w", err))
	case ins.State == nil:
		return nil
	case ins.State.Paused:
		return fmt.Errorf("container is paused: %w", sandboxes.ErrStopped)
	case !ins.State.Running:
		return fmt.Errorf("container is %s: %w", ins.State.Status, sandboxes.ErrStopped)
	}
	return nil
}

// serverKey names the servers that can run a sandbox's commands: those of
// the same client (so of the same Backend), container and exec user.
// Instances of one container, such as a sandbox attached once per
// activity, share them; the environment comes with each request.
type serverKey struct {
	cli  *client.Client
	id   string
	user string
}

// serverPools holds the idle servers of every container this process ran
// commands in: a cache (a server that is not there is started), which the
// sandbox struct cannot hold because instances of a container come and go.
// Idle servers close after idleServerTimeout, and an entry goes with its
// last server.
var serverPools = struct {
	sync.Mutex
	m map[serverKey]*serverPool
}{m: make(map[serverKey]*serverPool)}

type serverPool struct {
	key         serverKey
	mu          sync.Mutex
	idle        []*execServer
	unsupported bool // the image cannot have a server
}

func (s *sandbox) serverPool() *serverPool {
	k := serverKey{cli: s.cli, id: s.id, user: s.user.spec}
	serverPools.Lock()
	defer serverPools.Unlock()
	p := serverPools.m[k]
	if p == nil {
		p = &serverPool{key: k}
		serverPools.m[k] = p
	}
	return p
}

// errNoServer says the container's image cannot have an exec server.
var errNoServer = errors.New("the image cannot run an exec server")

// take returns an idle server, or starts one.
func (p *serverPool) take(ctx context.Context, s *sandbox) (*execServer, error) {
	p.mu.Lock()
	if p.unsupported {
		p.mu.Unlock()
		return nil, errNoServer
	}
	for len(p.idle) > 0 {
		v := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		v.idleTimer.Stop()
		if v.unusable() {
			go v.close()
			continue
		}
		p.mu.Unlock()
		return v, nil
	}
	p.mu.Unlock()
	v, err := s.startServer(ctx, p)
	if errors.Is(err, errNoServer) {
		p.mu.Lock()
		p.unsupported = true
		p.mu.Unlock()
	}
	return v, err
}

// put keeps v for a later command, unless enough servers are idle.
func (p *serverPool) put(v *execServer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle) >= maxIdleServers || v.unusable() {
		go v.close()
		return
	}
	p.idle = append(p.idle, v)
	v.idleTimer = time.AfterFunc(idleServerTimeout, func() { p.drop(v) })
}

// drop closes v if it is idle, and forgets the pool once it is empty.
func (p *serverPool) drop(v *execServer) {
	p.mu.Lock()
	i := slices.Index(p.idle, v)
	if i >= 0 {
		p.idle = slices.Delete(p.idle, i, i+1)
	}
	empty := len(p.idle) == 0 && !p.unsupported
	p.mu.Unlock()
	if i >= 0 {
		v.close()
	}
	if empty {
		serverPools.Lock()
		p.mu.Lock()
		if serverPools.m[p.key] == p && len(p.idle) == 0 {
			delete(serverPools.m, p.key)
		}
		p.mu.Unlock()
		serverPools.Unlock()
	}
}

// execServer is one running serverScript, used by one command at a time.
type execServer struct {
	execID string
	hj     types.HijackedResponse
	pid    string        // of its shell, in the container
	dead   chan struct{} // closed when its output stream has ended
	// idleTimer drops it from its pool; set and stopped under the
	// pool's lock.
	idleTimer *time.Timer
	closeOnce sync.Once
	closed    atomic.Bool

	mu  sync.Mutex
	cur *serverCall // the reader's
	// stray is set when it wrote outside a command: something the held
	// check did not see writes into its streams.
	stray bool
}

// serverCall is what the reader goroutine knows of the command (or hello)
// the server runs, and tells Exec. Its other fields are the reader's until
// it closes a channel.
type serverCall struct {
	nonce          string
	stdout, stderr io.Writer
	out, err       markerScanner
	ready          chan struct{} // R (or H) came
	exited         chan struct{} // E or X came on stdout
	done           chan struct{} // E came on both streams
	pid            string        // of an H
	code           int           // of an E or X
	held           bool          // X: the server has exited
	ended          int           // streams that ended
	werr           error         // of a writer
}

// startServer starts a server in s's container and waits for its hello.
func (s *sandbox) startServer(ctx context.Context, p *serverPool) (*execServer, error) {
	hello := randHex(16)
	created, err := s.cli.ContainerExecCreate(ctx, s.id, container.ExecOptions{
		User:         s.user.spec,
		WorkingDir:   "/",
		Env:          []string{"PATH=" + DefaultPath},
		Cmd:          []string{"/bin/sh", "-c", serverScript, "agentbot-server", hello, wrapperScript},
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
	})
	if err != nil {
		return nil, err
	}
	hj, err := s.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return nil, err
	}
	v := &execServer{execID: created.ID, hj: hj, dead: make(chan struct{})}
	c := newServerCall(hello, io.Discard, io.Discard)
	v.cur = c
	go v.read(p)
	select {
	case <-c.ready:
		v.mu.Lock()
		v.cur = nil
		v.mu.Unlock()
		v.pid = c.pid
		return v, nil
	case <-v.dead:
		v.close()
		code, err := s.exitCode(ctx, created.ID)
		if err == nil && code == unsupportedExit {
			return nil, errNoServer
		}
		return nil, fmt.Errorf("exec server ended at start (exit code %d): %w", code, err)
	case <-ctx.Done():
		v.close()
		return nil, ctx.Err()
	}
}

func newServerCall(nonce string, stdout, stderr io.Writer) *serverCall {
	return &serverCall{
		nonce:  nonce,
		stdout: stdout,
		stderr: stderr,
		out:    markerScanner{nonce: []byte(nonce), args: "HEX"},
		err:    markerScanner{nonce: []byte(nonce)},
		ready:  make(chan struct{}),
		exited: make(chan struct{}),
		done:   make(chan struct{}),
		code:   -1,
	}
}

func (c *serverCall) hasExited() bool {
	select {
	case <-c.exited:
		return true
	default:
		return false
	}
}

// result is what Exec returns for a command that exited.
func (c *serverCall) result() (int, error, bool) {
	if c.werr != nil {
		return c.code, fmt.Errorf("reading command output: %w", c.werr), true
	}
	return c.code, nil, true
}

// write writes p to w, keeping the first error: the stream is read to its
// end all the same, for the protocol.
func (c *serverCall) write(w io.Writer, p []byte) {
	if len(p) > 0 && c.werr == nil {
		_, c.werr = w.Write(p)
	}
}

// begin hands the output that comes next to stdout and stderr.
func (v *execServer) begin(stdout, stderr io.Writer) *serverCall {
	c := newServerCall(randHex(16), stdout, stderr)
	v.mu.Lock()
	v.cur = c
	v.mu.Unlock()
	return c
}

// unusable reports whether v cannot take another command.
func (v *execServer) unusable() bool {
	if v.isClosed() {
		return true
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.stray
}

func (v *execServer) isClosed() bool {
	select {
	case <-v.dead:
		return true
	default:
		return v.closed.Load()
	}
}

// close ends the server (its shell reads the end of its stdin, or finds no
// reader of its output) and waits for the reader goroutine, so that nothing
// writes to a command's writers once it returns.
func (v *execServer) close() {
	v.closeOnce.Do(func() {
		v.closed.Store(true)
		v.hj.Close()
	})
	<-v.dead
}

// read demultiplexes the server's stream (stdcopy's format) into the
// current call's writers, cutting out the protocol's markers. It ends when
// the stream does, and then drops v from p.
func (v *execServer) read(p *serverPool) {
	defer func() {
		v.mu.Lock()
		if c := v.cur; c != nil {
			// What was held back as a possible marker was output.
			c.write(c.stdout, c.out.pending)
			c.write(c.stderr, c.err.pending)
		}
		v.mu.Unlock()
		close(v.dead)
		p.mu.Lock()
		if i := slices.Index(p.idle, v); i >= 0 {
			p.idle = slices.Delete(p.idle, i, i+1)
			v.idleTimer.Stop()
		}
		p.mu.Unlock()
	}()
	var hdr [8]byte
	buf := make([]byte, 32<<10)
	for {
		if _, err := io.ReadFull(v.hj.Reader, hdr[:]); err != nil {
			return
		}
		for n := int(binary.BigEndian.Uint32(hdr[4:])); n > 0; {
			m, err := io.ReadFull(v.hj.Reader, buf[:min(n, len(buf))])
			v.deliver(stdcopy.StdType(hdr[0]), buf[:m])
			if err != nil {
				return
			}
			n -= m
		}
	}
}

// deliver hands one piece of a stream to the current call.
func (v *execServer) deliver(stream stdcopy.StdType, p []byte) {
	v.mu.Lock()
	c := v.cur
	if c == nil {
		v.stray = true
	}
	v.mu.Unlock()
	if c == nil {
		return
	}
	sc, w := &c.out, c.stdout
	switch stream {
	case stdcopy.Stdout:
	case stdcopy.Stderr:
		sc, w = &c.err, c.stderr
	default:
		return
	}
	for len(p) > 0 {
		if sc.fin {
			// Output after the end of the command's: from something
			// the held check did not see.
			v.mu.Lock()
			v.stray = true
			v.mu.Unlock()
			return
		}
		var kind byte
		var arg string
		p, kind, arg = sc.scan(p, c, w)
		switch {
		case kind == 0:
		case sc == &c.err:
			if kind == 'E' {
				sc.fin = true
				v.ended(c)
			}
		case kind == 'H' || kind == 'R':
			c.pid = arg
			closeOnce(c.ready)
		case (kind == 'E' || kind == 'X') && !c.hasExited():
			c.code, _ = strconv.Atoi(arg)
			c.held = kind == 'X'
			close(c.exited)
			if c.held {
				// The server is gone; what comes is the output of
				// what the command left behind.
				c.out.off, c.err.off = true, true
			} else {
				sc.fin = true
				v.ended(c)
			}
		}
	}
}

// ended notes that one of c's streams ended; once both did, nothing more
// goes to c's writers.
func (v *execServer) ended(c *serverCall) {
	c.ended++
	if c.ended == 2 {
		v.mu.Lock()
		v.cur = nil
		v.mu.Unlock()
		close(c.done)
	}
}

// markerScanner finds the protocol's markers in one stream: the nonce, a
// letter, and for the letters in args a decimal number and ".".
type markerScanner struct {
	nonce   []byte
	args    string
	pending []byte // the start of what may be a marker
	off     bool   // no more markers: all is output
	fin     bool   // the stream's end marker came
}

// scan writes p to w up to the first marker and returns what follows the
// marker, with the marker's letter and number. Without a whole marker in
// p, it writes all but what may be the start of one, and returns kind 0.
func (m *markerScanner) scan(p []byte, c *serverCall, w io.Writer) (rest []byte, kind byte, arg string) {
	if m.off {
		c.write(w, m.pending)
		c.write(w, p)
		m.pending = nil
		return nil, 0, ""
	}
	buf := p
	if len(m.pending) > 0 {
		buf = append(m.pending, p...)
		m.pending = nil
	}
	i := bytes.Index(buf, m.nonce)
	if i < 0 {
		keep := 0
		for k := min(len(buf), len(m.nonce)-1); k > 0; k-- {
			if bytes.HasSuffix(buf, m.nonce[:k]) {
				keep = k
				break
			}
		}
		c.write(w, buf[:len(buf)-keep])
		m.pending = append([]byte(nil), buf[len(buf)-keep:]...)
		return nil, 0, ""
	}
	c.write(w, buf[:i])
	after := buf[i+len(m.nonce):]
	if len(after) == 0 {
		m.pending = append([]byte(nil), buf[i:]...)
		return nil, 0, ""
	}
	kind = after[0]
	if strings.IndexByte(m.args, kind) < 0 {
		return after[1:], kind, ""
	}
	j := bytes.IndexByte(after[1:], '.')
	if j < 0 && len(after) < 24 {
		m.pending = append([]byte(nil), buf[i:]...)
		return nil, 0, ""
	}
	if j < 0 {
		// Not a marker the server writes.
		c.write(w, m.nonce)
		return after, 0, ""
	}
	return after[2+j:], kind, string(after[1 : 1+j])
}

// closeOnce closes ch unless it is closed; only one goroutine may close it.
func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}
