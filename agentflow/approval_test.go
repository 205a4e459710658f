package agentflow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/worker"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/internal/agentworker"
	"github.com/agentbot/agentbot/internal/testenv"
)

// approvalRig is a session of a tenant of its own (a Slack team, so that
// its policy touches no other test) whose owner is "owner" and admin
// "root", with the tenant's approval policy set by root.
type approvalRig struct {
	*rig
	thread string
	seq    int
}

func newApprovalRig(t *testing.T, team string, policy map[string]string) *approvalRig {
	t.Helper()
	r := &approvalRig{rig: newRig(t, rigOptions{}), thread: "slack:" + team + ":C1:1700000000.000100"}
	for _, k := range []string{agentflow.PolicyApprovals, agentflow.PolicyApprovalTimeout, agentflow.PolicyApprovalTwoPerson, agentflow.PolicyApprovalPatterns} {
		v, ok := policy[k]
		if !ok {
			continue
		}
		if _, err := r.control(agentflow.ControlRequest{Verb: agentflow.ControlPolicy, By: "root", PolicyKey: k, PolicyValue: v}); err != nil {
			t.Fatalf("policy set %s %s: %v", k, v, err)
		}
	}
	return r
}

func (r *approvalRig) control(req agentflow.ControlRequest) (agentflow.ControlResult, error) {
	r.seq++
	req.RequestID = fmt.Sprintf("%s-%d-%d", r.t.Name(), r.seq, time.Now().UnixNano())
	req.Thread = r.thread
	req.Config = &agentflow.TenantPolicy{Admins: []string{"root"}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return r.cl.Control(ctx, req)
}

// message sends text as the owner and returns its ID; the turn runs in the
// background.
func (r *approvalRig) message(text string) string {
	r.t.Helper()
	r.seq++
	id := fmt.Sprintf("msg-%d-%d", r.seq, time.Now().UnixNano())
	_, err := r.cl.Send(context.Background(), agentflow.AgentInput{ThreadKey: r.thread, Backend: "local", Requester: "owner", Admins: []string{"root"}},
		agentflow.MessageRequest{ID: id, Author: "owner", User: "owner", Text: text})
	if err != nil {
		r.t.Fatal(err)
	}
	return id
}

// waiting waits until a command waits for approval and returns it.
func (r *approvalRig) waiting() agentflow.ApprovalView {
	r.t.Helper()
	var v agentflow.SessionView
	waitFor(r.t, "a command waits for approval", func() bool {
		v = r.state(r.thread)
		return v.Approval != nil && v.Approval.State == agentflow.ApprovalWaiting
	})
	return *v.Approval
}

func (r *approvalRig) answer(id string) string {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := r.cl.Wait(ctx, r.thread, id)
	if err != nil || res.Result == nil {
		r.t.Fatalf("waiting for the answer: %+v %v", res, err)
	}
	return res.Result.Answer
}

func (r *approvalRig) decide(by, decision string, all bool) error {
	_, err := r.control(agentflow.ControlRequest{Verb: agentflow.ControlApprove, By: by, Decision: decision, All: all})
	return err
}

// risky downloads a script and runs it (pipe-to-shell): from a port where
// nothing listens, so it does nothing but count that it ran.
const risky = "sh: echo ran >> count.txt; curl -s http://127.0.0.1:9/ | sh; cat count.txt"

// TestApprovalApprove: with the tenant's mode risky, a risky command waits
// and says why; a stranger's approval is refused (by the manager and, were
// it to reach it, by the session); the owner's runs it exactly once, the
// model reads who approved it, and the manager's audit log has both.
func TestApprovalApprove(t *testing.T) {
	r := newApprovalRig(t, "TAPPROVE", map[string]string{agentflow.PolicyApprovals: "risky"})
	safe := r.message("sh: echo harmless")
	if a := r.answer(safe); !strings.Contains(a, "harmless") || strings.Contains(a, "approved") {
		t.Fatalf("a safe command was held or marked: %q", a)
	}
	id := r.message(risky)
	v := r.waiting()
	if !strings.Contains(v.Command, "curl -s http://127.0.0.1:9/ | sh") || v.Need != 1 || v.Mode != agentflow.ApprovalRisky ||
		len(v.Findings) == 0 || v.Findings[0].Rule != "pipe-to-shell" || !v.Expires.After(time.Now().Add(9*time.Minute)) {
		t.Fatalf("the waiting approval: %+v", v)
	}
	var refused *agentflow.RefusedError
	if err := r.decide("mallory", agentflow.DecisionApprove, false); !errors.As(err, &refused) || refused.Msg != agentflow.ErrNotOwnerText {
		t.Fatalf("a stranger's approval: %v", err)
	}
	if got := r.state(r.thread).Approval; got == nil || got.State != agentflow.ApprovalWaiting {
		t.Fatalf("the stranger's click changed the approval: %+v", got)
	}
	// The session refuses a stranger too, whoever lets the request through.
	_, err := r.cl.Submit(context.Background(), r.thread, agentflow.UpdateApprove, "direct-mallory",
		agentflow.ApproveRequest{Decision: agentflow.DecisionApprove, By: "mallory"})
	if !errors.As(err, &refused) || refused.Msg != agentflow.ErrNotOwnerText {
		t.Fatalf("the session took a stranger's approval: %v", err)
	}
	if err := r.decide("owner", agentflow.DecisionApprove, false); err != nil {
		t.Fatal(err)
	}
	a := r.answer(id)
	if strings.Count(a, "ran") != 1 || !strings.Contains(a, "(approved by owner at") {
		t.Fatalf("the approved command did not run exactly once, or the model was not told who approved it: %q", a)
	}
	if err := r.decide("owner", agentflow.DecisionApprove, false); !errors.As(err, &refused) || refused.Msg != agentflow.ErrNoApprovalText {
		t.Fatalf("an answer with nothing waiting: %v", err)
	}
	page, err := r.cl.Audit(context.Background(), r.thread, "root", 1)
	if err != nil {
		t.Fatal(err)
	}
	var log []string
	for _, e := range page.Entries {
		if e.Verb == agentflow.ControlApprove {
			log = append(log, e.By+" "+e.Outcome+" "+e.Detail)
		}
	}
	// Newest first.
	if len(log) != 3 || !strings.HasPrefix(log[0], "owner refused") || log[1] != "owner done approve" || !strings.HasPrefix(log[2], "mallory refused") {
		t.Fatalf("the audit log of the approvals: %q", log)
	}
}

// TestApprovalDenyAndExpire: a denial, and no answer in time, both leave
// the command unrun and tell the model why; the session goes on.
func TestApprovalDenyAndExpire(t *testing.T) {
	r := newApprovalRig(t, "TDENY", map[string]string{agentflow.PolicyApprovals: "risky", agentflow.PolicyApprovalTimeout: "10s"})
	id := r.message(risky)
	r.waiting()
	if err := r.decide("root", agentflow.DecisionDeny, false); err != nil {
		t.Fatal(err)
	}
	a := r.answer(id)
	if strings.Contains(a, "ran") || !strings.Contains(a, "not run: root denied this command") || !strings.Contains(a, "pipe-to-shell") {
		t.Fatalf("after a denial: %q", a)
	}
	id = r.message(risky)
	r.waiting()
	a = r.answer(id) // nobody answers: 10 s
	if strings.Contains(a, "ran") || !strings.Contains(a, "not run: no one approved this command within 10s") {
		t.Fatalf("after the time ran out: %q", a)
	}
	if a := r.answer(r.message("sh: echo still-here")); !strings.Contains(a, "still-here") {
		t.Fatalf("the session did not go on: %q", a)
	}
}

// TestApprovalStopAndWorkerLoss: the wait is the workflow's: a worker
// that stops while a command waits is replaced by another and the command
// still waits (and runs once approved); a stop cancels a waiting approval
// at once and the command never runs.
func TestApprovalStopAndWorkerLoss(t *testing.T) {
	r := newApprovalRig(t, "TSTOP", map[string]string{agentflow.PolicyApprovals: "always"})
	id := r.message("sh: echo ran >> count.txt; cat count.txt")
	r.waiting()
	r.worker.Stop()
	w := worker.New(r.tc, agentflow.TaskQueue, testenv.WorkerOptions())
	agentworker.Register(w, r.acts)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	r.worker = w
	// The new worker replays the session: still waiting, same approval.
	v := r.waiting()
	if err := r.decide("owner", agentflow.DecisionApprove, false); err != nil {
		t.Fatal(err)
	}
	if a := r.answer(id); strings.Count(a, "ran") != 1 {
		t.Fatalf("after the worker changed: %q (approval %s)", a, v.ID)
	}

	id = r.message("sh: echo ran >> count.txt")
	r.waiting()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if st, err := r.cl.Stop(ctx, r.thread, agentflow.StopRequest{By: "owner"}); err != nil || !st.Stopped {
		t.Fatalf("stop: %+v %v", st, err)
	}
	if a := r.answer(id); !strings.HasSuffix(a, "Stopped.") {
		t.Fatalf("the stopped turn's answer: %q", a)
	}
	if a := r.answer(r.message("read: count.txt")); strings.Count(a, "ran") != 1 {
		t.Fatalf("the stopped command ran: %q", a)
	}
	if v := r.state(r.thread); v.Approval != nil {
		t.Fatalf("an approval is left after the stop: %+v", v.Approval)
	}
}

// TestApprovalTwoPersonAndAll: in mode always with the two-person rule, a
// command needs two different approvers (the same person twice is
// refused); "approve --all" covers the rest of the turn; a session may be
// made stricter than its tenant, never laxer.
func TestApprovalTwoPersonAndAll(t *testing.T) {
	r := newApprovalRig(t, "TTWO", map[string]string{agentflow.PolicyApprovals: "risky", agentflow.PolicyApprovalTwoPerson: "on"})
	// The session asks for always: stricter, so it holds.
	if _, err := r.control(agentflow.ControlRequest{Verb: agentflow.ControlApprovals, By: "owner", Mode: agentflow.ApprovalAlways}); err == nil {
		t.Fatal("approvals on a session not started yet")
	}
	if a := r.answer(r.message("sh: echo started")); !strings.Contains(a, "started") {
		t.Fatalf("first turn: %q", a)
	}
	if _, err := r.control(agentflow.ControlRequest{Verb: agentflow.ControlApprovals, By: "owner", Mode: agentflow.ApprovalAlways}); err != nil {
		t.Fatal(err)
	}
	if got := r.state(r.thread).Approvals; got != agentflow.ApprovalAlways {
		t.Fatalf("the session's mode: %q", got)
	}
	id := r.message("sh: echo one\nsh: echo two")
	v := r.waiting()
	if v.Need != 2 || len(v.Findings) != 0 {
		t.Fatalf("a two-person approval: %+v", v)
	}
	if err := r.decide("owner", agentflow.DecisionApprove, true); err != nil {
		t.Fatal(err)
	}
	var refused *agentflow.RefusedError
	if err := r.decide("owner", agentflow.DecisionApprove, true); !errors.As(err, &refused) || !strings.Contains(refused.Msg, "second, different person") {
		t.Fatalf("the same approver twice: %v", err)
	}
	if v := r.waiting(); len(v.Approvers) != 1 || v.Approvers[0] != "owner" {
		t.Fatalf("after one approval of two: %+v", v)
	}
	if err := r.decide("root", agentflow.DecisionApprove, true); err != nil {
		t.Fatal(err)
	}
	// "two" runs without a second wait: --all covered the turn.
	a := r.answer(id)
	if !strings.Contains(a, "one") || !strings.Contains(a, "two") || !strings.Contains(a, "(approved with the rest of turn") {
		t.Fatalf("approve --all: %q", a)
	}
	// Laxer than the tenant: the session stays at the tenant's risky.
	if _, err := r.control(agentflow.ControlRequest{Verb: agentflow.ControlApprovals, By: "owner", Mode: agentflow.ApprovalNever}); err != nil {
		t.Fatal(err)
	}
	if got := r.state(r.thread).Approvals; got != agentflow.ApprovalRisky {
		t.Fatalf("a session made laxer than its tenant: %q", got)
	}
	if a := r.answer(r.message("sh: echo free")); !strings.Contains(a, "free") {
		t.Fatalf("a safe command under risky: %q", a)
	}
}
