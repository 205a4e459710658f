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

// TestDrainOnSIGTERM: a deploy sends the worker SIGTERM while a shell
// command runs. The worker stops taking work, lets the command finish
// within the drain period, and exits; a new worker finishes the turn, and
// the model sees the command's real output — it ran once, to the end.
func TestDrainOnSIGTERM(t *testing.T) {
	srv := startTemporal(t)
	bin := secretenvtest.Build(t, ".")
	state := t.TempDir()
	env := []string{
		"HOME=" + state, "PATH=" + os.Getenv("PATH"), "OPENAI_BASE_URL=fake",
		"TEMPORAL_ADDRESS=" + srv.FrontendHostPort(), "AGENTBOT_STATE_DIR=" + state, "AGENTBOT_BACKENDS=local",
		"AGENTBOT_DRAIN_TIMEOUT=1m",
	}
	first := secretenvtest.Start(t, bin, env)
	first.WaitOutput(t, "worker started", time.Minute)

	tc, err := client.Dial(client.Options{HostPort: srv.FrontendHostPort(), Logger: testenv.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	cl := agentflow.NewClient(tc)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const thread = "term:drain"
	if _, err := cl.Send(ctx, agentflow.AgentInput{ThreadKey: thread, Backend: "local"},
		agentflow.MessageRequest{ID: "long", Text: "sh: echo started >> runs.txt; sleep 4; echo drained-ok"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		v, err := cl.State(ctx, thread)
		if err == nil && len(v.Tools) > 0 && v.Tools[0].State == "running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the command never ran: %+v %v", v, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := first.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first.Done():
	case <-time.After(2 * time.Minute):
		t.Fatal("the worker did not exit after SIGTERM")
	}

	second := secretenvtest.Start(t, bin, env)
	second.WaitOutput(t, "worker started", time.Minute)
	res, err := cl.Wait(ctx, thread, "long")
	if err != nil {
		t.Fatal(err)
	}
	if res.Result == nil || res.Result.Status != agentflow.TurnDone || !strings.Contains(res.Result.Answer, "drained-ok") {
		t.Fatalf("the turn after the drain: %+v\nfirst worker's log:\n%s", res.Result, first.Output())
	}
	if strings.Count(res.Result.Answer, "started") > 1 {
		t.Fatalf("the command ran more than once: %s", res.Result.Answer)
	}
}

// TestLostWorkerTellsTheTruth: the worker running a shell command is killed
// (SIGKILL) mid-command; another worker takes the session over. The
// command is not run again, and the model is told the truth: it may have
// run, and its outcome is unknown — not that it "could not run", which
// invites a second run.
func TestLostWorkerTellsTheTruth(t *testing.T) {
	srv := startTemporal(t)
	bin := secretenvtest.Build(t, ".")
	state := t.TempDir()
	env := []string{
		"HOME=" + state, "PATH=" + os.Getenv("PATH"), "OPENAI_BASE_URL=fake",
		"TEMPORAL_ADDRESS=" + srv.FrontendHostPort(), "AGENTBOT_STATE_DIR=" + state, "AGENTBOT_BACKENDS=local",
	}
	first := secretenvtest.Start(t, bin, env)
	first.WaitOutput(t, "worker started", time.Minute)

	tc, err := client.Dial(client.Options{HostPort: srv.FrontendHostPort(), Logger: testenv.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	cl := agentflow.NewClient(tc)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const thread = "term:lost-worker"
	if _, err := cl.Send(ctx, agentflow.AgentInput{ThreadKey: thread, Backend: "local"},
		agentflow.MessageRequest{ID: "long", Text: "sh: echo ran >> runs.txt; sleep 3; echo finished"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		v, err := cl.State(ctx, thread)
		if err == nil && len(v.Tools) > 0 && v.Tools[0].State == "running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the command never ran: %+v %v", v, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := first.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-first.Done()

	second := secretenvtest.Start(t, bin, env)
	second.WaitOutput(t, "worker started", time.Minute)
	res, err := cl.Wait(ctx, thread, "long")
	if err != nil {
		t.Fatal(err)
	}
	if res.Result == nil {
		t.Fatal("no result")
	}
	if a := res.Result.Answer; !strings.Contains(a, "may have run") || strings.Contains(a, "could not run") {
		t.Fatalf("the model was not told that the command may have run:\n%s\n%+v", a, res.Result)
	}
}
