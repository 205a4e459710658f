package localsandbox

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbot/agentbot/sandboxes"
	"github.com/agentbot/agentbot/sandboxes/sandboxtest"
)

// conformanceDirEnv names the base directory of the conformance suite's
// sandboxes; unset, it is a fixed directory under os.TempDir(), so the
// suite's child process (which inherits the environment) finds the
// sandboxes of its parent.
const conformanceDirEnv = "AGENTBOT_LOCALSANDBOX_TEST_DIR"

func conformanceDir() string {
	if d := os.Getenv(conformanceDirEnv); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "agentbot-localsandbox-test")
}

func harness() sandboxtest.Harness {
	return sandboxtest.Harness{
		Name: Name,
		NewBackend: func() (sandboxes.Backend, error) {
			return New(Options{BaseDir: conformanceDir()})
		},
		Exists: func(ctx context.Context, t testing.TB, st sandboxes.State) bool {
			_, err := os.Lstat(filepath.Join(conformanceDir(), st.ID))
			if errors.Is(err, fs.ErrNotExist) {
				return false
			}
			if err != nil {
				t.Fatalf("checking sandbox %s: %v", st.ID, err)
			}
			return true
		},
		// No client, so no request timeout: a small value all the same,
		// so LongExecRunsOnce runs a command of a few seconds.
		RequestTimeout: time.Second,
	}
}

func TestMain(m *testing.M) { sandboxtest.Main(m, harness()) }

func TestConformance(t *testing.T) { sandboxtest.Run(t, harness()) }

// TestConformanceCross carries a workspace from a local sandbox to another
// and back.
func TestConformanceCross(t *testing.T) { sandboxtest.RunCross(t, harness(), harness()) }
