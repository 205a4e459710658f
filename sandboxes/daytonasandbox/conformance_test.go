package daytonasandbox_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/agentbot/agentbot/internal/fakedaytona"
	"github.com/agentbot/agentbot/sandboxes"
	"github.com/agentbot/agentbot/sandboxes/daytonasandbox"
	"github.com/agentbot/agentbot/sandboxes/sandboxtest"
)

// Environment a child process of the suite inherits: the URL and key of the
// parent's fake, so that the whole package run shares one fake.
const (
	fakeURLEnv = "AGENTBOT_FAKEDAYTONA_URL"
	fakeKeyEnv = "AGENTBOT_FAKEDAYTONA_KEY"
)

// requestTimeout is the client's per-request timeout in the suite: short,
// so that LongExecRunsOnce runs a command that outlasts it, and long
// enough for any call to the fake on a loaded machine.
const requestTimeout = 5 * time.Second

// fake is this process's fake, nil in a child process.
var fake *fakedaytona.Server

func harness() sandboxtest.Harness {
	return sandboxtest.Harness{
		Name: daytonasandbox.Name,
		NewBackend: func() (sandboxes.Backend, error) {
			return daytonasandbox.New(daytonasandbox.Options{APIKey: os.Getenv(fakeKeyEnv), APIURL: os.Getenv(fakeURLEnv),
				RequestTimeout: requestTimeout})
		},
		Exists: func(ctx context.Context, t testing.TB, st sandboxes.State) bool {
			return fake.Exists(st.ID)
		},
		RequestTimeout: requestTimeout,
	}
}

func TestMain(m *testing.M) {
	if os.Getenv(fakeURLEnv) == "" {
		var err error
		fake, err = fakedaytona.New(fakedaytona.Options{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Setenv(fakeURLEnv, fake.APIURL())
		os.Setenv(fakeKeyEnv, fake.Key())
	}
	code := 0
	func() {
		defer func() {
			if fake != nil {
				if errs := fake.Errors(); len(errs) > 0 {
					fmt.Fprintf(os.Stderr, "fakedaytona: %d spec validation failures:\n", len(errs))
					for _, e := range errs {
						fmt.Fprintln(os.Stderr, "  ", e)
					}
					code = 1
				}
				fake.Close()
			}
		}()
		// sandboxtest.Main calls os.Exit, which would skip the checks
		// above, so the parent runs m itself.
		code = runMain(m)
	}()
	os.Exit(code)
}

// runMain runs the tests, or the suite's child job (which exits).
func runMain(m *testing.M) int {
	if os.Getenv("AGENTBOT_SANDBOXTEST_CHILD") != "" {
		sandboxtest.Main(m, harness()) // exits
	}
	return m.Run()
}

func TestConformance(t *testing.T) {
	sandboxtest.Run(t, harness())
	if !fake.Validating() {
		t.Log("fakedaytona ran WITHOUT spec validation (specs not found)")
	}
}
