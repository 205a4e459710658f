package agentflow_test

import (
	"strings"
	"testing"
	"time"

	"github.com/agentbot/agentbot/agentflow"
)

// B: fork of a session whose last turn was stopped during a tool.
func TestZZForkAfterStop(t *testing.T) {
	p := newParts(t, nil)
	parent := p.newEnv("term:zp")
	var seed agentflow.ForkSeed
	err := parent.runAgent(agentflow.AgentInput{},
		func(next func()) {
			both := &latch{n: 2, then: next}
			onStart(parent, "RunTool", func(in agentflow.ToolInput) bool { return true }, func() {
				parent.env.RegisterDelayedCallback(func() {
					parent.update(agentflow.UpdateStop, agentflow.StopRequest{}, nil, func([]byte, error) { both.done() })
				}, 300*time.Millisecond)
			})
			parent.turn("long", "sleep: 30", func(r agentflow.TurnResult) { t.Logf("parent turn: %s", r.Status) })(both.done)
		},
		call(parent, agentflow.UpdateForkSource, agentflow.ForkSourceRequest{ForkThreadKey: "term:zf"}, func(s agentflow.ForkSeed, err error) { seed = s }),
		parent.turn("p2", "sh: echo parent-ok", func(r agentflow.TurnResult) { t.Logf("parent after stop: %s %q", r.Status, r.Error) }),
		parent.destroy(),
	)
	if err != nil {
		t.Fatal(err)
	}
	fork := p.newEnv("term:zf")
	err = fork.runAgent(agentflow.AgentInput{ThreadKey: "term:zf", Seed: &seed},
		fork.turn("f1", "sh: echo in-fork", func(r agentflow.TurnResult) { t.Logf("FORK turn 1: %s %q", r.Status, r.Error) }),
		fork.turn("f2", "sh: echo in-fork-again", func(r agentflow.TurnResult) { t.Logf("FORK turn 2: %s %q", r.Status, r.Error) }),
		fork.destroy(),
	)
	if err != nil {
		t.Fatal(err)
	}
}

// C, E, F: reports after switch / resume; switch to an unknown backend before any turn.
func TestZZReports(t *testing.T) {
	p := newParts(t, nil)
	e := p.newEnv("term:zr")
	err := e.runAgent(agentflow.AgentInput{},
		call(e, agentflow.UpdateSwitch, agentflow.SwitchRequest{Backend: "nosuch"}, func(r agentflow.SwitchResult, err error) {
			t.Logf("E: switch to nosuch before any turn: %+v %v", r, err)
		}),
		e.turn("m1", "hello", func(r agentflow.TurnResult) { t.Logf("E: turn after: %s %q", r.Status, r.Error) }),
		call(e, agentflow.UpdateSwitch, agentflow.SwitchRequest{Backend: "local"}, func(r agentflow.SwitchResult, err error) {
			t.Logf("E: switch back: %+v %v", r, err)
		}),
		e.turn("m2", "write: a <<< x", func(r agentflow.TurnResult) {}),
		call(e, agentflow.UpdateSwitch, agentflow.SwitchRequest{Backend: "local", Root: t.TempDir()}, func(r agentflow.SwitchResult, err error) {}),
		call(e, agentflow.UpdatePause, agentflow.PauseRequest{}, func(v agentflow.SessionView, err error) { t.Logf("pause view status: %s", v.Status) }),
		e.turn("m3", "hello", func(r agentflow.TurnResult) {}),
		e.do(func() { t.Logf("state after resume: %s", e.state().Status) }),
	)
	_ = err
	for _, r := range e.reported() {
		t.Logf("report %s: status=%s backend=%s", r.Update, r.Entry.Status, r.Entry.Backend)
	}
}

// D: stop while the sandbox is being made; O: stop during the tail of a turn.
func TestZZStopEarly(t *testing.T) {
	p := newParts(t, nil)
	e := p.newEnv("term:zs")
	err := e.runAgent(agentflow.AgentInput{},
		func(next func()) {
			both := &latch{n: 2, then: next}
			onStart(e, "EnsureSandbox", func(agentflow.EnsureSandboxInput) bool { return true }, func() {
				e.update(agentflow.UpdateStop, agentflow.StopRequest{}, nil, func(raw []byte, err error) { t.Logf("D stop: %s %v", raw, err); both.done() })
			})
			e.turn("m1", "sh: echo hi", func(r agentflow.TurnResult) { t.Logf("D: turn stopped during EnsureSandbox: %s %q answer %q", r.Status, r.Error, r.Answer) })(both.done)
		},
		e.do(func() { t.Logf("D: LastError %q", e.state().LastError) }),
		func(next func()) {
			both := &latch{n: 2, then: next}
			onStart(e, "SnapshotSandbox", func(agentflow.SnapshotInput) bool { return true }, func() {
				e.update(agentflow.UpdateStop, agentflow.StopRequest{}, nil, func(raw []byte, err error) { t.Logf("O stop: %s %v", raw, err); both.done() })
			})
			e.turn("m2", "write: f <<< x", func(r agentflow.TurnResult) { t.Logf("O: turn: %s", r.Status) })(both.done)
		},
		e.destroy(),
	)
	_ = err
	_ = strings.Contains
}
