package sandboxtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/agentbot/agentbot/sandboxes"
)

// The environment of a child process of the test binary, started by the
// attach-after-exit test: which harness to use, where to write the sandbox's
// State, and what to write into the sandbox so the parent knows it is the
// sandbox of this run.
const (
	childHarnessEnv = "AGENTBOT_SANDBOXTEST_CHILD"
	childOutEnv     = "AGENTBOT_SANDBOXTEST_CHILD_OUT"
	childNonceEnv   = "AGENTBOT_SANDBOXTEST_CHILD_NONCE"
)

// childFile is the workspace file the child writes and the parent reads back
// after attaching.
const childFile = "from-child/hello.txt"

// Main is the TestMain of a backend's test package. When the process was
// started by the suite as a child (see Run's AttachAfterExit subtest), it
// does the child's job with the harness named in its environment and exits;
// otherwise it runs the tests. hs are the harnesses the package passes to
// Run and RunCross.
func Main(m *testing.M, hs ...Harness) {
	name := os.Getenv(childHarnessEnv)
	if name == "" {
		os.Exit(m.Run())
	}
	for _, h := range hs {
		if h.Name == name {
			if err := runChild(h, os.Getenv(childOutEnv), os.Getenv(childNonceEnv)); err != nil {
				fmt.Fprintf(os.Stderr, "sandboxtest child (%s): %v\n", name, err)
				os.Exit(2)
			}
			os.Exit(0)
		}
	}
	fmt.Fprintf(os.Stderr, "sandboxtest child: no harness named %q passed to sandboxtest.Main\n", name)
	os.Exit(2)
}

// runChild creates a sandbox, writes childFile into it and the sandbox's
// State to out, and returns without destroying the sandbox: the parent
// attaches to it after this process is gone.
func runChild(h Harness, out, nonce string) error {
	if out == "" || nonce == "" {
		return fmt.Errorf("%s and %s must be set", childOutEnv, childNonceEnv)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := h.NewBackend()
	if err != nil {
		return fmt.Errorf("new backend: %w", err)
	}
	reg := sandboxes.NewRegistry()
	if err := reg.Register(h.Name, b); err != nil {
		return err
	}
	sb, err := reg.Create(ctx, h.Name, specFor(h, "sandboxtest-child"))
	if err != nil {
		return err
	}
	if err := sb.WriteFile(ctx, childFile, []byte(nonce), 0o644); err != nil {
		_ = sb.Destroy(ctx) // nobody else knows about it
		return err
	}
	data, err := json.Marshal(sb.State())
	if err == nil {
		err = os.WriteFile(out, data, 0o600)
	}
	if err != nil {
		_ = sb.Destroy(ctx)
		return fmt.Errorf("writing state: %w", err)
	}
	return nil
}
