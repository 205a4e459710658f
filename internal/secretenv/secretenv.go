// Package secretenv keeps a program's secrets (API keys, bot tokens) out of
// its environment block: the environment it was started with, which the
// kernel shows in /proc/<pid>/environ for as long as it runs, to every
// process of the same user and to root. os.Unsetenv cannot help there: it
// changes the Go runtime's copy, never that block.
//
// cmd/bot and cmd/worker call Protect first thing in main. Hide
// re-executes the program (same process ID) without the secret variables,
// handing their values over through an inherited pipe, and the new image
// reads them back for its configuration. Then SetNotDumpable makes
// /proc/<pid>/environ, mem and the like unreadable to other processes of
// the same user, and forbids them to ptrace it, as a second line.
//
// Limits, plainly:
//   - Root, and anyone with CAP_SYS_PTRACE, can still read the secrets out
//     of the process's memory. A worker running as root does not protect
//     them from a root sandbox command; run it as an ordinary user, or use
//     the docker backend.
//   - The processes that started the program may hold the same variables
//     in their own environment blocks, out of our reach: make and go run
//     do (make run), an interactive shell that exported them does. A shell
//     assignment in front of the command (KEY=... ./bot) does not put it
//     in the shell's own block; neither do systemd's Environment= or a
//     container's environment (the program is the container's first
//     process).
//   - Variables that libraries read from the environment themselves are
//     put back with Restore into the Go runtime's copy only; child
//     processes started with the inherited environment (exec.Cmd with a
//     nil Env) after that receive them. agentbot's local sandbox never
//     inherits the environment.
//   - Elsewhere than Linux, Hide and SetNotDumpable do nothing.
package secretenv

import (
	"os"
	"strings"
)

// fdVar names, in the re-executed program's environment, the descriptor to
// read the secrets from. The number is no secret.
const fdVar = "AGENTBOT_SECRETENV_FD"

// maxPayload bounds what the re-executed program reads back.
const maxPayload = 1 << 20

// lookup returns the value of the last name= entry of environ, as the
// configuration (a map filled in order) reads it.
func lookup(environ []string, name string) (string, bool) {
	v, found := "", false
	for _, kv := range environ {
		if k, val, _ := strings.Cut(kv, "="); k == name {
			v, found = val, true
		}
	}
	return v, found
}

// split returns environ without the entries whose name isSecret accepts,
// and those entries, in order.
func split(environ []string, isSecret func(string) bool) (rest, secrets []string) {
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if isSecret(k) {
			secrets = append(secrets, kv)
		} else {
			rest = append(rest, kv)
		}
	}
	return rest, secrets
}

// Restore sets each of names that environ (as Hide returned it) sets into
// the Go runtime's copy of the environment (os.Setenv), for libraries that
// read the environment themselves, such as the AWS SDK behind s3://
// blob stores. /proc/<pid>/environ never shows them; child processes
// started with the inherited environment receive them.
func Restore(environ []string, names []string) error {
	for _, name := range names {
		if v, ok := lookup(environ, name); ok {
			if err := os.Setenv(name, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// Protect is what main calls first: Hide the variables named in secret
// (re-executing the program when one is set), then SetNotDumpable. It
// returns the environment for the configuration, secrets included. Call
// Restore after it for those that libraries read from the environment.
func Protect(environ, args, secret []string) ([]string, error) {
	environ, err := Hide(environ, args, secret)
	if err != nil {
		return nil, err
	}
	return environ, SetNotDumpable()
}
