package main

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/internal/secretenv/secretenvtest"
	"github.com/agentbot/agentbot/internal/testenv"
)

// midCommand is a real worker binary on a dev server of its own, running
// a session's shell command: the start of the tests that stop or lose the
// worker while a command runs.
type midCommand struct {
	bin    string
	env    []string
	worker *secretenvtest.Process
	cl     *agentflow.Client
	thread string
}

// startMidCommand starts the worker (with extra environment) and sends
// thread the message "long" with command, and returns once the command
// runs.
func startMidCommand(t *testing.T, ctx context.Context, thread, command string, extra ...string) *midCommand {
	t.Helper()
	srv := startTemporal(t)
	state := t.TempDir()
	m := &midCommand{bin: secretenvtest.Build(t, "."), thread: thread, env: append([]string{
		"HOME=" + state, "PATH=" + os.Getenv("PATH"), "OPENAI_BASE_URL=fake",
		"TEMPORAL_ADDRESS=" + srv.FrontendHostPort(), "AGENTBOT_STATE_DIR=" + state, "AGENTBOT_BACKENDS=local",
		"AGENTBOT_HTTP_ADDR=127.0.0.1:0",
	}, extra...)}
	m.worker = secretenvtest.Start(t, m.bin, m.env)
	m.worker.WaitOutput(t, "worker started", time.Minute)
	tc, err := client.Dial(client.Options{HostPort: srv.FrontendHostPort(), Logger: testenv.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	m.cl = agentflow.NewClient(tc)
	if _, err := m.cl.Send(ctx, agentflow.AgentInput{ThreadKey: thread, Backend: "local"},
		agentflow.MessageRequest{ID: "long", Text: "sh: " + command}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		v, err := m.cl.State(ctx, thread)
		if err == nil && len(v.Tools) > 0 && v.Tools[0].State == "running" {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("the command never ran: %+v %v", v, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// takeOver starts a second worker and returns the long message's result.
func (m *midCommand) takeOver(t *testing.T, ctx context.Context) *agentflow.TurnResult {
	t.Helper()
	second := secretenvtest.Start(t, m.bin, m.env)
	second.WaitOutput(t, "worker started", time.Minute)
	res, err := m.cl.Wait(ctx, m.thread, "long")
	if err != nil {
		t.Fatal(err)
	}
	if res.Result == nil {
		t.Fatal("no result")
	}
	return res.Result
}

// TestDrainOnSIGTERM: a deploy sends the worker SIGTERM while a shell
// command runs. The worker stops taking work, lets the command finish
// within the drain period, and exits; a new worker finishes the turn, and
// the model sees the command's real output — it ran once, to the end.
func TestDrainOnSIGTERM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	m := startMidCommand(t, ctx, "term:drain", "echo started >> runs.txt; sleep 4; echo drained-ok", "AGENTBOT_DRAIN_TIMEOUT=1m")
	if err := m.worker.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.worker.Done():
	case <-time.After(2 * time.Minute):
		t.Fatal("the worker did not exit after SIGTERM")
	}
	res := m.takeOver(t, ctx)
	if res.Status != agentflow.TurnDone || !strings.Contains(res.Answer, "drained-ok") {
		t.Fatalf("the turn after the drain: %+v\nfirst worker's log:\n%s", res, m.worker.Output())
	}
	if strings.Count(res.Answer, "started") > 1 {
		t.Fatalf("the command ran more than once: %s", res.Answer)
	}
}

// TestLostWorkerTellsTheTruth: the worker running a shell command is killed
// (SIGKILL) mid-command; another worker takes the session over. The
// command is not run again, and the model is told the truth: it may have
// run, and its outcome is unknown — not that it "could not run", which
// invites a second run.
func TestLostWorkerTellsTheTruth(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	m := startMidCommand(t, ctx, "term:lost-worker", "echo ran >> runs.txt; sleep 3; echo finished")
	if err := m.worker.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-m.worker.Done()
	res := m.takeOver(t, ctx)
	if a := res.Answer; !strings.Contains(a, "may have run") || strings.Contains(a, "could not run") {
		t.Fatalf("the model was not told that the command may have run:\n%s\n%+v", a, res)
	}
}
