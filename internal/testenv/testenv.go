// Package testenv starts the real services agentbot's tests run against: a
// Temporal dev server (the temporal CLI, through the SDK's
// testsuite.StartDevServer) and, where needed, checks for the Docker engine
// and its test image. Nothing here skips: a missing service is a test
// failure with a message that says how to get it (scripts/setup.sh --test).
package testenv

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/docker/docker/client"
	tclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/agentbot/agentbot/internal/devserver"
)

// TemporalOptions tune StartTemporal.
type TemporalOptions struct {
	// DynamicConfig sets server dynamic config values ("key=value"), e.g.
	// "limit.historyCount.suggestContinueAsNew=400".
	DynamicConfig []string
	// Log receives the server's output; nil discards it.
	Log io.Writer
}

// StartTemporal starts a dev server on a free port with an in-memory
// database. Call Stop on the result when done (TestMain).
func StartTemporal(ctx context.Context, opts TemporalOptions) (*testsuite.DevServer, error) {
	bin, err := devserver.FindBinary(os.Getenv("AGENTBOT_TEMPORAL_BIN"))
	if err != nil {
		return nil, fmt.Errorf("the tests need the temporal CLI (run scripts/setup.sh --test): %w", err)
	}
	var extra []string
	for _, kv := range opts.DynamicConfig {
		extra = append(extra, "--dynamic-config-value", kv)
	}
	out := opts.Log
	if out == nil {
		out = io.Discard
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	srv, err := testsuite.StartDevServer(ctx, testsuite.DevServerOptions{
		ExistingPath:  bin,
		LogLevel:      "error",
		ExtraArgs:     extra,
		Stdout:        out,
		Stderr:        out,
		ClientOptions: &tclient.Options{Namespace: "default", Logger: quietLogger{}},
	})
	if err != nil {
		return nil, fmt.Errorf("starting the Temporal dev server (%s): %w", bin, err)
	}
	return srv, nil
}

// TestImage is the Docker image of sandbox tests (scripts/build-test-image.sh
// builds it).
func TestImage() string {
	if img := os.Getenv("AGENTBOT_TEST_IMAGE"); img != "" {
		return img
	}
	return "agentbot-sandbox-test:latest"
}

// CheckDocker returns an error unless the Docker engine answers and has the
// test image.
func CheckDocker(ctx context.Context) error {
	c, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.Ping(ctx); err != nil {
		return fmt.Errorf("the Docker engine does not answer (these tests need it; is dockerd running?): %w", err)
	}
	if _, err := c.ImageInspect(ctx, TestImage()); err != nil {
		return fmt.Errorf("the test image %s is missing (run scripts/build-test-image.sh): %w", TestImage(), err)
	}
	return nil
}

// quietLogger drops the SDK's client logs in tests.
type quietLogger struct{}

func (quietLogger) Debug(string, ...any) {}
func (quietLogger) Info(string, ...any)  {}
func (quietLogger) Warn(msg string, kv ...any) {
	if strings.Contains(msg, "Failed") {
		fmt.Fprintln(os.Stderr, "temporal client:", msg, kv)
	}
}
func (quietLogger) Error(msg string, kv ...any) { fmt.Fprintln(os.Stderr, "temporal client:", msg, kv) }

// Logger is a Temporal SDK logger for tests: it prints only errors and
// failure warnings.
func Logger() quietLogger { return quietLogger{} }

// WorkerOptions are the worker options of tests. Tests run with the race
// detector on two loaded cores, where a workflow task can be kept off the CPU
// for longer than the SDK's default deadlock detection (1 s) allows; the
// workflow code never blocks, so the detector would only report the load.
// For the same reason a sticky workflow task may wait longer than the
// default 5 s for the worker: the server would then hand it to the normal
// queue, the worker would fetch the whole history, and a history with an
// update's speculative workflow task in it comes back short ("premature
// end of stream", temporalio/temporal#7741), failing the task.
func WorkerOptions() worker.Options {
	return worker.Options{DeadlockDetectionTimeout: 15 * time.Second, StickyScheduleToStartTimeout: 30 * time.Second}
}
