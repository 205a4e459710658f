package e2bsandbox

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/agentbot/agentbot/internal/fakee2b"
	"github.com/agentbot/agentbot/sandboxes"
	"github.com/agentbot/agentbot/sandboxes/sandboxtest"
)

// fakeURLEnv passes the parent's fake to the suite's child process.
const fakeURLEnv = "AGENTBOT_E2B_FAKE_URL"

const testKey = "e2b_test_key_0123456789abcdef"

// requestTimeout is the client's CallTimeout in the suite: short, so that
// LongExecRunsOnce runs a command that outlasts it, and long enough for
// any call to the fake on a loaded machine.
const requestTimeout = 5 * time.Second

var (
	fakeOnce sync.Once
	fake     *fakee2b.Server
	fakeErr  error
	fakeNote string
)

// fakeURL starts this process's fake, or returns the parent's.
func fakeURL() (string, error) {
	if u := os.Getenv(fakeURLEnv); u != "" {
		return u, nil
	}
	fakeOnce.Do(func() {
		dir := fakee2b.DefaultSpecsDir()
		if _, err := os.Stat(dir); err != nil {
			fakeNote = fmt.Sprintf("specs directory %s not found (set %s): running the fake WITHOUT spec validation", dir, fakee2b.SpecsDirEnv)
			dir = ""
		}
		fake, fakeErr = fakee2b.New(fakee2b.Options{APIKey: testKey, SpecsDir: dir})
		if fakeErr == nil {
			os.Setenv(fakeURLEnv, fake.URL) // inherited by the suite's child
		}
	})
	if fakeErr != nil {
		return "", fakeErr
	}
	return fake.URL, nil
}

func newTestBackend(url string) (*Backend, error) {
	return New(Options{APIKey: testKey, APIURL: url, CallTimeout: requestTimeout,
		EnvdURL: func(id string) string { return url + "/sbx/" + id }})
}

func harness() sandboxtest.Harness {
	return sandboxtest.Harness{
		Name: Name,
		NewBackend: func() (sandboxes.Backend, error) {
			u, err := fakeURL()
			if err != nil {
				return nil, err
			}
			return newTestBackend(u)
		},
		Exists: func(ctx context.Context, t testing.TB, st sandboxes.State) bool {
			if fake == nil {
				t.Fatal("no fake in this process")
			}
			return fake.Exists(st.ID)
		},
		RequestTimeout: requestTimeout,
	}
}

// TestMain runs the suite's child when asked to. (Main exits the process, so
// the fake's spec violations are checked in each test's cleanup.)
func TestMain(m *testing.M) { sandboxtest.Main(m, harness()) }

func TestConformance(t *testing.T) {
	if _, err := fakeURL(); err != nil {
		t.Fatal(err)
	}
	if fakeNote != "" {
		t.Log(fakeNote)
	}
	t.Cleanup(func() { checkFake(t) }) // after the parallel subtests
	sandboxtest.Run(t, harness())
}

func checkFake(t *testing.T) {
	t.Helper()
	if fake == nil {
		return
	}
	for _, f := range fake.Failures() {
		t.Error(f)
	}
}
