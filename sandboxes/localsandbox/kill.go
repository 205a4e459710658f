package localsandbox

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"syscall"

	"github.com/agentbot/agentbot/sandboxes"
)

// MarkerEnv is the environment variable that marks every process of a local
// sandbox. Exec sets it, over anything the sandbox's or the request's
// environment says, to "<sandbox id>/<exec nonce>": the nonce is random and
// new for every Exec. Processes inherit it, so it follows a command's
// processes that leave its process group (setsid, a double-forking daemon),
// and the backend finds them by it in /proc/<pid>/environ: on Linux, for
// processes of its own user. It is not a secret.
const MarkerEnv = sandboxes.MarkerEnv

// Bounds of reap: how many times it freezes, kills and looks again, and how
// many scans of /proc one freeze may take (each scan after the first only
// runs because the one before found a process not frozen yet).
const (
	reapRounds   = 10
	freezePasses = 100
)

// marker is the value of MarkerEnv for one Exec of sandbox id.
func marker(id, nonce string) string { return id + "/" + nonce }

// exactMarker matches the processes of one Exec.
func exactMarker(m string) func(string) bool {
	return func(v string) bool { return v == m }
}

// sandboxMarker matches the processes of every Exec of sandbox id.
func sandboxMarker(id string) func(string) bool {
	prefix := id + "/"
	return func(v string) bool { return strings.HasPrefix(v, prefix) }
}

// reap kills the process groups pgids and every process of this user whose
// MarkerEnv value match accepts (see scanMarked; none where /proc cannot be
// read). To keep forking processes from outrunning the scan, it first
// freezes them all with SIGSTOP: the groups, then what the scan finds,
// scanning again until a scan finds nothing new, and only then kills them
// all with SIGKILL. It looks again after the kill, and repeats, a bounded
// number of times, until a scan finds nothing. Processes that exit or
// disappear meanwhile are ignored.
//
// It returns os.ErrProcessDone when none of the groups existed when it
// began, else the error of signalling the first group that failed, if any
// (for exec.Cmd.Cancel).
func reap(pgids []int, match func(string) bool) error {
	var firstErr error
	alive := false
	for round := range reapRounds {
		for _, g := range pgids {
			err := syscall.Kill(-g, syscall.SIGSTOP)
			if round > 0 {
				continue
			}
			switch {
			case err == nil:
				alive = true
			case !errors.Is(err, syscall.ESRCH) && firstErr == nil:
				firstErr = err
			}
		}
		frozen := make(map[int]bool)
		for range freezePasses {
			found := false
			for _, pid := range scanMarked(match) {
				if !frozen[pid] {
					frozen[pid] = true
					found = true
					syscall.Kill(pid, syscall.SIGSTOP)
				}
			}
			if !found {
				break
			}
		}
		for _, g := range pgids {
			syscall.Kill(-g, syscall.SIGKILL)
		}
		for pid := range frozen {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		// A killed process is a zombie at most, with an empty
		// environment: a round that froze nothing found nothing alive.
		if len(frozen) == 0 {
			break
		}
	}
	switch {
	case firstErr != nil:
		return firstErr
	case !alive && len(pgids) > 0:
		return os.ErrProcessDone
	}
	return nil
}

// markedIn reports whether environ, the NUL-separated contents of
// /proc/<pid>/environ, sets MarkerEnv to a value that match accepts.
func markedIn(environ []byte, match func(string) bool) bool {
	const key = MarkerEnv + "="
	for len(environ) > 0 {
		entry := environ
		if i := bytes.IndexByte(environ, 0); i >= 0 {
			entry, environ = environ[:i], environ[i+1:]
		} else {
			environ = nil
		}
		if bytes.HasPrefix(entry, []byte(key)) && match(string(entry[len(key):])) {
			return true
		}
	}
	return false
}
