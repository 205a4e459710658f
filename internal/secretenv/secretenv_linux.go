package secretenv

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Hide returns environ, the program's environment (os.Environ()), with the
// variables named in names in it, for the configuration to read.
//
// When environ sets one of names to a non-empty value, Hide does not return
// on success: it re-executes the program (/proc/self/exe with args, in the
// same process, so the process ID, the parent and the open standard
// streams stay) with an environment from which every variable of names is
// gone, and hands their values over through a pipe the new image inherits.
// Hide, called again there, reads them back, closes the pipe, and returns
// them appended to the environment. The running program's environment
// block therefore never holds them, and neither does os.Environ(), so
// processes it starts with the inherited environment do not receive them.
//
// An error means the program could not re-execute itself or read the
// values back; the caller should stop rather than run with its secrets in
// view.
func Hide(environ, args, names []string) ([]string, error) {
	if fd, ok := lookup(environ, fdVar); ok {
		// Children must not take the closed descriptor for a handover.
		os.Unsetenv(fdVar)
		secrets, err := receive(fd)
		if err != nil {
			return nil, err
		}
		rest, _ := split(environ, func(k string) bool { return k == fdVar })
		return append(rest, secrets...), nil
	}
	rest, secrets := split(environ, func(k string) bool { return slices.Contains(names, k) })
	if !slices.ContainsFunc(secrets, func(kv string) bool { return !strings.HasSuffix(kv, "=") }) {
		return environ, nil // nothing to hide
	}
	fd, err := send(secrets)
	if err != nil {
		return nil, err
	}
	err = syscall.Exec("/proc/self/exe", args, append(rest, fdVar+"="+strconv.Itoa(fd)))
	syscall.Close(fd)
	return nil, fmt.Errorf("secretenv: re-executing the program without its secrets in the environment: %w", err)
}

// send writes secrets into a new pipe and returns its read end, left open
// across exec. The write end is closed, so the reader sees the end. The
// pipe's buffer (64 KiB by default) must hold them all: the writer is
// gone by the time anyone reads.
func send(secrets []string) (int, error) {
	var payload bytes.Buffer
	for _, kv := range secrets {
		payload.WriteString(kv)
		payload.WriteByte(0)
	}
	p := make([]int, 2)
	if err := syscall.Pipe2(p, syscall.O_CLOEXEC); err != nil {
		return -1, fmt.Errorf("secretenv: creating the handover pipe: %w", err)
	}
	r, w := p[0], p[1]
	defer syscall.Close(w)
	if payload.Len() > 4096 {
		// A pipe may start with one page when the user's pipes are over
		// their quota; ask for room (the answer is checked by the write).
		syscall.Syscall(syscall.SYS_FCNTL, uintptr(w), syscall.F_SETPIPE_SZ, uintptr(payload.Len()))
	}
	// A full pipe must fail rather than block forever: no one reads yet.
	if err := syscall.SetNonblock(w, true); err != nil {
		syscall.Close(r)
		return -1, fmt.Errorf("secretenv: %w", err)
	}
	for b := payload.Bytes(); len(b) > 0; {
		n, err := syscall.Write(w, b)
		if err != nil {
			syscall.Close(r)
			return -1, fmt.Errorf("secretenv: %d bytes of secrets do not fit in the handover pipe: %w", payload.Len(), err)
		}
		b = b[n:]
	}
	// The read end goes across exec.
	if _, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(r), syscall.F_SETFD, 0); errno != 0 {
		syscall.Close(r)
		return -1, fmt.Errorf("secretenv: keeping the handover pipe open across exec: %w", errno)
	}
	return r, nil
}

// receive reads the secrets from the pipe that descriptor s names, and
// closes it.
func receive(s string) ([]string, error) {
	fd, err := strconv.Atoi(s)
	if err != nil || fd < 0 {
		return nil, fmt.Errorf("secretenv: %s=%q is not a file descriptor", fdVar, s)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		return nil, fmt.Errorf("secretenv: %s=%d is not the handover pipe", fdVar, fd)
	}
	f := os.NewFile(uintptr(fd), "secretenv")
	defer f.Close()
	payload, err := io.ReadAll(io.LimitReader(f, maxPayload+1))
	if err != nil {
		return nil, fmt.Errorf("secretenv: reading the secrets back: %w", err)
	}
	if len(payload) > maxPayload {
		return nil, errors.New("secretenv: the handover pipe holds too much")
	}
	var secrets []string
	for _, kv := range bytes.Split(payload, []byte{0}) {
		if len(kv) > 0 {
			secrets = append(secrets, string(kv))
		}
	}
	return secrets, nil
}

// SetNotDumpable marks the process not dumpable (prctl PR_SET_DUMPABLE 0):
// its /proc/<pid>/environ, mem, maps and fd entries belong to root, other
// processes of the same user can no longer read them or ptrace it, and it
// leaves no core dump. Root (CAP_SYS_PTRACE) still can. Programs it
// executes are dumpable again: the flag does not survive exec.
func SetNotDumpable() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0); errno != 0 {
		return fmt.Errorf("secretenv: prctl(PR_SET_DUMPABLE, 0): %w", errno)
	}
	return nil
}
