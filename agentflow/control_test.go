package agentflow_test

// Tests of who may control a session and in what order its requests take
// effect. The workflow decides both, by construction: these run the real
// workflow code in the SDK's test environment over real activities (see
// workflow_test.go), and the ordering tests run again in a child process with
// the SDK flag that changes how AwaitWithTimeout yields
// (TestControlOrderWithSDKFlag6), so that order never depends on a
// scheduling quirk of the SDK.

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/internal/fakeopenai"
)

// TestWorkflowOwnership: every control update and the export query are for
// the session's requester and its admins only, whatever the gateway did.
func TestWorkflowOwnership(t *testing.T) {
	p := newParts(t, nil)
	e := p.newEnv("term:owned")
	const refusal = "only the person who started this session"
	otherRoot := t.TempDir()
	err := e.runAgent(agentflow.AgentInput{Requester: "alice", Admins: []string{"root"}},
		e.turn("m1", "write: notes.txt <<< alice's", func(r agentflow.TurnResult) {
			if r.Status != agentflow.TurnDone {
				t.Errorf("alice's turn: %+v", r)
			}
		}),
		// Anyone allowed in the thread may talk to the agent...
		e.send(agentflow.MessageRequest{ID: "m2", Author: "mallory", Text: "hi"}, func(_ agentflow.MessageResult, err error) {
			if err != nil {
				t.Errorf("mallory's message: %v", err)
			}
		}),
		e.resultOf("m2", func(agentflow.TurnResult) {}),
		// ...but no one else may change or end the session, nor one who
		// does not say who they are.
		e.rejected(agentflow.UpdateSwitch, agentflow.SwitchRequest{Backend: "local", Root: otherRoot, By: "mallory"}, refusal),
		e.rejected(agentflow.UpdateTitle, agentflow.TitleRequest{Title: "pwned", By: "mallory"}, refusal),
		e.rejected(agentflow.UpdateStop, agentflow.StopRequest{By: "mallory"}, refusal),
		e.rejected(agentflow.UpdatePause, agentflow.PauseRequest{By: "mallory"}, refusal),
		e.rejected(agentflow.UpdateDestroy, agentflow.DestroyRequest{By: "mallory"}, refusal),
		e.rejected(agentflow.UpdateDestroy, agentflow.DestroyRequest{}, refusal),
		e.rejected(agentflow.UpdateForkSource, agentflow.ForkSourceRequest{ForkThreadKey: "term:owned-fork", By: "mallory"}, refusal),
		e.do(func() {
			if _, err := e.env.QueryWorkflow(agentflow.QueryTranscript, "mallory"); err == nil || !strings.Contains(err.Error(), refusal) {
				t.Errorf("mallory's export: %v", err)
			}
			if v := e.state(); v.Title == "pwned" || v.Root == otherRoot || v.Status == agentflow.StatusPaused || v.Requester != "alice" {
				t.Errorf("mallory changed the session: %+v", v)
			}
		}),
		// The owner and an admin may.
		call(e, agentflow.UpdateTitle, agentflow.TitleRequest{Title: "alice's session", By: "alice"}, func(v agentflow.SessionView, err error) {
			if err != nil || v.Title != "alice's session" {
				t.Errorf("alice's title: %+v %v", v, err)
			}
		}),
		call(e, agentflow.UpdateSwitch, agentflow.SwitchRequest{Backend: "local", Root: otherRoot, By: "root"}, func(r agentflow.SwitchResult, err error) {
			if err != nil || !r.Changed {
				t.Errorf("admin's switch: %+v %v", r, err)
			}
		}),
		e.do(func() {
			var ts []agentflow.TurnSummary
			e.query(agentflow.QueryTranscript, &ts, "alice")
			if len(ts) != 2 {
				t.Errorf("alice's export: %+v", ts)
			}
		}),
		call(e, agentflow.UpdateDestroy, agentflow.DestroyRequest{By: "root"}, func(v agentflow.SessionView, err error) {
			if err != nil || v.Status != agentflow.StatusDestroyed {
				t.Errorf("admin's destroy: %+v %v", v, err)
			}
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
}

// TestWorkflowPauseHoldsTheLock: a message queued while a pause runs starts
// its turn after the pause, and that turn holds the session: status says
// running, stop stops it, and nothing releases it from under the turn.
func TestWorkflowPauseHoldsTheLock(t *testing.T) {
	p := newParts(t, nil)
	e := p.newEnv("term:pause-lock")
	var during agentflow.SessionView
	var stop agentflow.StopResult
	var stopErr error
	queued := &latch{n: 1}
	err := e.runAgent(agentflow.AgentInput{},
		e.turn("m1", "write: a.txt <<< one", func(agentflow.TurnResult) {}),
		func(next func()) {
			// While the pause saves the workspace, a message arrives.
			onStart(e, "SnapshotSandbox", func(agentflow.SnapshotInput) bool { return true }, func() {
				e.update(agentflow.UpdateMessage, agentflow.MessageRequest{ID: "m2", Text: "sleep: 30"}, nil, func(_ []byte, err error) {
					if err != nil {
						t.Errorf("message during the pause: %v", err)
					}
					queued.done()
				})
			})
			// When that message's command runs, look and stop it.
			onStart(e, "RunTool", func(in agentflow.ToolInput) bool { return in.Call.Name == "shell" }, func() {
				e.env.RegisterDelayedCallback(func() {
					during = e.state()
					e.update(agentflow.UpdateStop, agentflow.StopRequest{}, nil, func(raw []byte, err error) {
						stopErr = err
						if err == nil {
							_ = json.Unmarshal(raw, &stop)
						}
					})
				}, 300*time.Millisecond)
			})
			call(e, agentflow.UpdatePause, agentflow.PauseRequest{}, func(v agentflow.SessionView, err error) {
				if err != nil {
					t.Errorf("pause: %v", err)
				}
			})(next)
		},
		queued.wait(),
		e.resultOf("m2", func(r agentflow.TurnResult) {
			if during.Status != agentflow.StatusRunning {
				t.Errorf("status while the resumed turn ran its command: %q, want running", during.Status)
			}
			if stopErr != nil || !stop.Stopped {
				t.Errorf("stop of the resumed turn: %+v %v", stop, stopErr)
			}
			if r.Status != agentflow.TurnStopped {
				t.Errorf("the resumed turn: %+v", r)
			}
		}),
		e.destroy(),
	)
	if err != nil {
		t.Fatal(err)
	}
}

// TestWorkflowControlOrder: requests take effect in the order they arrived.
// A switch sent before a message applies before that message's turn; a
// message sent before a destroy never runs (destroy goes first, and no turn
// starts once it is accepted).
func TestWorkflowControlOrder(t *testing.T) {
	t.Run("switch before message", func(t *testing.T) {
		g := newGate()
		p := newParts(t, g.first(fakeopenai.DirectiveScript()))
		t.Cleanup(g.open)
		e := p.newEnv("term:order-switch")
		otherRoot := t.TempDir()
		switched := &latch{n: 1}
		onStart(e, "ModelStep", isModelStep, func() {
			e.update(agentflow.UpdateSwitch, agentflow.SwitchRequest{Backend: "local", Root: otherRoot}, nil, func(raw []byte, err error) {
				if err != nil {
					t.Errorf("switch: %v", err)
				}
				switched.done()
			})
			e.update(agentflow.UpdateMessage, agentflow.MessageRequest{ID: "m2", Text: "sh: pwd"}, nil, func([]byte, error) {})
			g.open()
		})
		err := e.runAgent(agentflow.AgentInput{},
			e.turn("m1", "sh: pwd", func(r agentflow.TurnResult) {
				expectIn(t, "first turn", r.Answer, "/workspace\n")
			}),
			switched.wait(),
			e.resultOf("m2", func(r agentflow.TurnResult) {
				if !strings.Contains(r.Answer, otherRoot) {
					t.Errorf("the message sent after the switch ran before it: %+v", r)
				}
			}),
			e.destroy(),
		)
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Run("message before destroy", func(t *testing.T) {
		g := newGate()
		p := newParts(t, g.first(fakeopenai.DirectiveScript()))
		t.Cleanup(g.open)
		e := p.newEnv("term:order-destroy")
		destroyed := &latch{n: 1}
		onStart(e, "ModelStep", isModelStep, func() {
			e.update(agentflow.UpdateMessage, agentflow.MessageRequest{ID: "m2", Text: "write: late.txt <<< ran after destroy"}, nil, func([]byte, error) {})
			e.update(agentflow.UpdateDestroy, agentflow.DestroyRequest{}, nil, func(_ []byte, err error) {
				if err != nil {
					t.Errorf("destroy: %v", err)
				}
				destroyed.done()
			})
			g.open()
		})
		err := e.runAgent(agentflow.AgentInput{},
			e.send(agentflow.MessageRequest{ID: "m1", Text: "sh: echo first"}, func(_ agentflow.MessageResult, err error) {
				if err != nil {
					t.Error(err)
				}
			}),
			destroyed.wait(),
		)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.chatRequests() {
			for _, u := range userTexts(r) {
				if strings.Contains(u, "late.txt") {
					t.Fatalf("a turn started after the destroy was accepted: %q", u)
				}
			}
		}
	})
}

// TestControlOrderWithSDKFlag6 runs the ordering tests again in a child
// process with TEMPORAL_SDK_FLAG_6=1 (AwaitWithTimeout cancels its timer
// and does not yield once when its condition already holds): the SDK reads
// the flag once, at init.
func TestControlOrderWithSDKFlag6(t *testing.T) {
	if os.Getenv("TEMPORAL_SDK_FLAG_6") != "" {
		t.Skip("already running with TEMPORAL_SDK_FLAG_6 set")
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^(TestWorkflowControlOrder|TestWorkflowPauseHoldsTheLock|TestWorkflowOrdering|TestWorkflowOwnership)$", "-test.count=1")
	cmd.Env = append(os.Environ(), "TEMPORAL_SDK_FLAG_6=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("with TEMPORAL_SDK_FLAG_6=1: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "PASS") {
		t.Fatalf("with TEMPORAL_SDK_FLAG_6=1, no test ran:\n%s", out)
	}
}

// TestWorkflowStopWhileCancelled: a stop waiting for its turn to end when
// the workflow is cancelled returns an error instead of panicking.
func TestWorkflowStopWhileCancelled(t *testing.T) {
	p := newParts(t, nil)
	e := p.newEnv("term:stop-cancel")
	var stopErr error
	stopDone := false
	onStart(e, "RunTool", func(in agentflow.ToolInput) bool { return in.Call.Name == "shell" }, func() {
		e.env.RegisterDelayedCallback(func() {
			e.update(agentflow.UpdateStop, agentflow.StopRequest{}, nil, func(_ []byte, err error) {
				stopErr, stopDone = err, true
			})
			e.env.CancelWorkflow()
		}, 300*time.Millisecond)
	})
	e.env.RegisterDelayedCallback(func() {
		e.update(agentflow.UpdateMessage, agentflow.MessageRequest{ID: "m1", Text: "sleep: 30"}, nil, func([]byte, error) {})
	}, time.Millisecond)
	e.env.ExecuteWorkflow(agentflow.AgentWorkflowName, agentflow.AgentInput{ThreadKey: "term:stop-cancel"})
	if !e.env.IsWorkflowCompleted() {
		t.Fatal("the workflow did not complete")
	}
	werr := e.env.GetWorkflowError()
	if !temporal.IsCanceledError(werr) {
		t.Fatalf("workflow error %v, want a cancellation", werr)
	}
	if stopDone && stopErr != nil && !strings.Contains(stopErr.Error(), "cancel") {
		t.Fatalf("stop: %v, want a cancellation", stopErr)
	}
}

// TestWorkflowRegistersAfterAFailedReport: when the session manager could
// not be told of a new session, the session asks again (its admission
// decides whether it may run) instead of believing it registered; its
// first message waits in the queue meanwhile, and is answered.
func TestWorkflowRegistersAfterAFailedReport(t *testing.T) {
	p := newParts(t, nil)
	e := p.newEnv("term:register")
	var mu sync.Mutex
	var registers []bool // outcome of each registration
	e.reportHook = func(in agentflow.ReportInput) error {
		mu.Lock()
		defer mu.Unlock()
		if in.Update != agentflow.ManagerUpdateRegister {
			return nil
		}
		ok := len(registers) >= 2
		registers = append(registers, ok)
		if !ok {
			return errors.New("the session manager is unreachable")
		}
		return nil
	}
	err := e.runAgent(agentflow.AgentInput{},
		e.turn("m1", "sh: echo hello", func(agentflow.TurnResult) {}),
		e.turn("m2", "sh: echo again", func(agentflow.TurnResult) {}),
		e.destroy(),
	)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(registers, []bool{false, false, true}) {
		t.Fatalf("registrations %v, want two failures and then one that got through", registers)
	}
}

// TestForkKeepsOptions: a fork runs with its source's options (step limit,
// idle and tool timeouts), not the defaults. End to end on the dev server:
// the fork's workflow is started by the ForkSession activity.
func TestForkKeepsOptions(t *testing.T) {
	r := newRig(t, rigOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const thread = "term:fork-options"
	opts := agentflow.AgentOptions{MaxSteps: 3, IdleTimeout: 7 * time.Minute, ToolTimeout: 11 * time.Second, MaxTurnsPerRun: 50}
	if _, err := r.cl.Start(ctx, agentflow.AgentInput{ThreadKey: thread, Backend: "local", Options: opts}); err != nil {
		t.Fatal(err)
	}
	r.send(thread, "write: a.txt <<< x")
	fork, err := r.cl.Fork(ctx, agentflow.ForkRequest{SourceThread: thread, RequestID: "fork-options"})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.state(fork.ThreadKey).Options; got != opts {
		t.Errorf("the fork's options: %+v, want the source's %+v", got, opts)
	}
	for _, th := range []string{thread, fork.ThreadKey} {
		if _, err := r.cl.Destroy(ctx, th, agentflow.DestroyRequest{}); err != nil {
			t.Fatal(err)
		}
	}
}
