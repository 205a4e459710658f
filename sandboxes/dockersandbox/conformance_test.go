package dockersandbox_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/agentbot/agentbot/sandboxes"
	"github.com/agentbot/agentbot/sandboxes/dockersandbox"
	"github.com/agentbot/agentbot/sandboxes/localsandbox"
	"github.com/agentbot/agentbot/sandboxes/sandboxtest"
)

// dockerHarness runs the conformance suite on the test image. NewBackend
// does not check the engine: the suite calls Available and fails loudly.
func dockerHarness() sandboxtest.Harness {
	return sandboxtest.Harness{
		Name: dockersandbox.Name,
		NewBackend: func() (sandboxes.Backend, error) {
			return dockersandbox.New(dockersandbox.Options{Image: testImage()})
		},
		Spec: sandboxes.Spec{Image: testImage()},
		Exists: func(ctx context.Context, t testing.TB, st sandboxes.State) bool {
			_, err := dockerClient(t).ContainerInspect(ctx, st.ID)
			if cerrdefs.IsNotFound(err) {
				return false
			}
			if err != nil {
				t.Fatalf("inspecting container %s: %v", st.ID, err)
			}
			return true
		},
		// The engine's API has no per-request timeout here: a small value
		// all the same, so LongExecRunsOnce runs a command of a few seconds.
		RequestTimeout: time.Second,
	}
}

// localDir is the base directory of the local sandboxes of the cross-backend
// tests. It is fixed, not per process, because the suite's child process
// must find its parent's sandboxes.
func localDir() string {
	if d := os.Getenv("AGENTBOT_DOCKERSANDBOX_LOCAL_DIR"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "agentbot-dockersandbox-test-local")
}

func localHarness() sandboxtest.Harness {
	return sandboxtest.Harness{
		Name: localsandbox.Name,
		NewBackend: func() (sandboxes.Backend, error) {
			return localsandbox.New(localsandbox.Options{BaseDir: localDir()})
		},
		Exists: func(ctx context.Context, t testing.TB, st sandboxes.State) bool {
			_, err := os.Lstat(filepath.Join(localDir(), st.ID))
			if errors.Is(err, fs.ErrNotExist) {
				return false
			}
			if err != nil {
				t.Fatalf("checking local sandbox %s: %v", st.ID, err)
			}
			return true
		},
		// No client, so no request timeout: a small value all the same.
		RequestTimeout: time.Second,
	}
}

func TestMain(m *testing.M) { sandboxtest.Main(m, dockerHarness(), localHarness()) }

func TestConformance(t *testing.T) {
	requireDocker(t)
	sandboxtest.Run(t, dockerHarness())
}

// TestCrossBackend carries a workspace from Docker to a local sandbox and
// back, and the other way round.
func TestCrossBackend(t *testing.T) {
	requireDocker(t)
	t.Run("docker-local", func(t *testing.T) { sandboxtest.RunCross(t, dockerHarness(), localHarness()) })
	t.Run("local-docker", func(t *testing.T) { sandboxtest.RunCross(t, localHarness(), dockerHarness()) })
}
