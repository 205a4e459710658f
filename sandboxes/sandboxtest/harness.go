// Package sandboxtest is the conformance suite of sandbox backends, in the
// manner of gocloud.dev's drivertest: every backend runs the same subtests
// from its own test package.
//
//	func TestMain(m *testing.M) { sandboxtest.Main(m, harness()) }
//	func TestConformance(t *testing.T) { sandboxtest.Run(t, harness()) }
//
// Run covers the exec contract (exit codes, separate streams, working
// directory, environment without the host's, timeouts and cancellation that
// kill the whole process tree, children detached with setsid included,
// output caps, a huge output that reaches the caller's writers as head,
// Skip and tail, a command that outlasts the client's per-request timeout
// running exactly once), files (byte-exact round trips, modes, paths and symbolic
// links that would leave the workspace), snapshots (a round trip of every
// kind of entry, unportable entries and sandboxes.OutputsDir left out,
// unsafe and corrupt archives refused with the workspace untouched), and
// the life cycle (attach from
// another process, concurrent exec, stop and attach, destroy and NotFound,
// background processes, detached ones included, killed by Stop and
// Destroy). RunCross carries a workspace from one backend to another and
// back.
//
// The sandboxes must have, besides a POSIX shell, /proc and the usual
// tools: sed, tr, head, yes, kill, sleep and setsid (busybox has them all).
//
// Every subtest fails rather than skips: a backend under test that is not
// available here is a failure. The attach test runs the test binary again
// as a child, with AGENTBOT_SANDBOXTEST_CHILD naming the harness; Main
// recognises it, so TestMain must call Main with every harness the package
// passes to Run or RunCross, and NewBackend must work in a fresh process.
package sandboxtest

import (
	"context"
	"testing"
	"time"

	"github.com/agentbot/agentbot/sandboxes"
)

// Harness tells the suite how to make and inspect one backend.
type Harness struct {
	// Name is the backend's registry name ("local", "docker").
	Name string
	// NewBackend builds the backend under test. It is called in the test
	// process and, for the attach-after-restart test, in a child process
	// of the test binary (see Main), so it must not depend on state made
	// by the test.
	NewBackend func() (sandboxes.Backend, error)
	// Spec is the spec of the sandboxes the suite creates (an image, say).
	// The suite adds labels and environment of its own.
	Spec sandboxes.Spec
	// Exists reports whether anything of the sandbox is left on the
	// machine (a directory, a container). The suite checks it is false
	// after Destroy.
	Exists func(ctx context.Context, t testing.TB, st sandboxes.State) bool
	// RequestTimeout is the longest one request of the backend's client
	// may take before the client gives up on it (and may try again): the
	// timeout the harness gave NewBackend's client, kept small so the
	// suite can run a command that outlasts it (LongExecRunsOnce). A
	// backend without such a timeout (local, docker) gives a small value
	// anyway; the subtest must pass all the same.
	RequestTimeout time.Duration
}

// registry returns a registry holding only the harness's backend.
func (h Harness) registry(t testing.TB) *sandboxes.Registry {
	t.Helper()
	b, err := h.NewBackend()
	if err != nil {
		t.Fatalf("%s backend: %v", h.Name, err)
	}
	if err := b.Available(context.Background()); err != nil {
		// Never skip: a backend the suite is asked to test must run.
		t.Fatalf("%s backend is not available here: %v", h.Name, err)
	}
	r := sandboxes.NewRegistry()
	if err := r.Register(h.Name, b); err != nil {
		t.Fatal(err)
	}
	return r
}
