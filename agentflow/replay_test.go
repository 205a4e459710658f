package agentflow_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/internal/fakeopenai"
)

// TestReplayHistories replays every saved history under testdata/ against
// the current workflow code: a change that would break running sessions (a
// command added, removed or reordered without workflow.GetVersion) fails
// here. The histories come from real runs (TestRecordHistories), one
// directory per commit that recorded them. They are never re-recorded:
// a new recording goes into a new directory beside the old ones, and the
// old ones stay as long as a session started on that code may run.
//
// Files named *.unversioned-*.json hold histories that a past change broke
// without a version marker; TestReplayKnownBreaks covers them.
func TestReplayHistories(t *testing.T) {
	files := historyFiles(t)
	commits := map[string]bool{}
	for _, file := range files {
		commits[filepath.Base(filepath.Dir(file))] = true
		t.Run(filepath.ToSlash(strings.TrimPrefix(file, "testdata"+string(filepath.Separator))), func(t *testing.T) {
			events := readHistory(t, file)
			typ := events[0].GetWorkflowExecutionStartedEventAttributes().GetWorkflowType().GetName()
			if typ != agentflow.AgentWorkflowName && typ != agentflow.SessionManagerWorkflowName {
				t.Fatalf("history of an unknown workflow type %q", typ)
			}
			if err := replay(file); err != nil {
				t.Fatalf("replaying %s (%d events of %s): %v", file, len(events), typ, err)
			}

			// The replayer is not vacuous: a workflow that does nothing
			// under the same names does not match the history.
			stub := worker.NewWorkflowReplayer()
			stub.RegisterWorkflowWithOptions(func(ctx workflow.Context, _ agentflow.AgentInput) error {
				return workflow.Await(ctx, func() bool { return false })
			}, workflow.RegisterOptions{Name: agentflow.AgentWorkflowName})
			stub.RegisterWorkflowWithOptions(func(ctx workflow.Context, _ agentflow.ManagerInput) error {
				return workflow.Await(ctx, func() bool { return false })
			}, workflow.RegisterOptions{Name: agentflow.SessionManagerWorkflowName})
			if err := stub.ReplayWorkflowHistoryFromJSONFile(quietLogger(), file); err == nil {
				t.Fatalf("a do-nothing workflow replayed %s without error", file)
			}
		})
	}
	if len(commits) < 2 {
		t.Errorf("histories from %d commits; the corpus keeps those of every released change (at least two)", len(commits))
	}
}

// TestReplayKnownBreaks: commit dc784e2 added the delivery of a rename to
// the chat without a version marker, so a session renamed on that code
// cannot replay on code that versions the change (the sessions of the code
// before it can, and those are what the marker protects). This pins down
// that the break is exactly there and nowhere else — at the Deliver right
// after the title update — which is what an operator needs to know: such a
// session is reset to the workflow task before its rename
// (docs/architecture.md, "Deploying new code").
func TestReplayKnownBreaks(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*", "*.unversioned-*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no known breaks in testdata/")
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			events := readHistory(t, file)
			err := replay(file)
			if err == nil {
				t.Fatalf("%s replayed; if the break was fixed, move the file back into the corpus", file)
			}
			m := regexp.MustCompile(`scheduledEventID to activityID: scheduleEventID: (\d+)`).FindStringSubmatch(err.Error())
			if m == nil {
				t.Fatalf("replaying %s failed, but not at an activity the code no longer schedules: %v", file, err)
			}
			id, _ := strconv.ParseInt(m[1], 10, 64)
			ev := events[id-1]
			if name := ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName(); name != "Deliver" {
				t.Fatalf("the break is at event %d (%s %s), not at a Deliver", id, ev.GetEventType(), name)
			}
			var in agentflow.Outbound
			payload := ev.GetActivityTaskScheduledEventAttributes().GetInput().GetPayloads()[0]
			if err := converter.GetDefaultDataConverter().FromPayload(payload, &in); err != nil {
				t.Fatal(err)
			}
			if in.Kind != agentflow.OutboundTitle {
				t.Fatalf("the break is at the delivery of a %q, not of a title", in.Kind)
			}
		})
	}
}

func historyFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "*", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	files = slices.DeleteFunc(files, func(f string) bool { return strings.Contains(filepath.Base(f), ".unversioned-") })
	if len(files) == 0 {
		t.Fatal("no histories in testdata/: record them with AGENTBOT_RECORD_HISTORIES=1 go test -run TestRecordHistories ./agentflow/")
	}
	return files
}

func quietLogger() tlog.Logger {
	return tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// replay replays one saved history against the current workflow code.
func replay(file string) error {
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(agentflow.AgentWorkflow, workflow.RegisterOptions{Name: agentflow.AgentWorkflowName})
	r.RegisterWorkflowWithOptions(agentflow.SessionManagerWorkflow, workflow.RegisterOptions{Name: agentflow.SessionManagerWorkflowName})
	return r.ReplayWorkflowHistoryFromJSONFile(quietLogger(), file)
}

// readHistory reads a saved history and checks that it is one whole run.
func readHistory(t *testing.T, file string) []*historypb.HistoryEvent {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var h historypb.History
	if err := protojson.Unmarshal(data, &h); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if len(h.Events) < 10 || h.Events[0].GetWorkflowExecutionStartedEventAttributes() == nil {
		t.Fatalf("%s: %d events, not starting with WorkflowExecutionStarted", file, len(h.Events))
	}
	return h.Events
}

// TestRecordHistories makes histories for testdata/ from real runs on the
// dev server: a session through turns with tools, a failed turn, a title, a
// fork, a pause and a resumed turn, a switch to another local root, a stop
// during a sleep, an idle stop and the turn that resumes it, continue-as-new
// (after every few turns, so later runs start from carried state) and a
// destroy; the fork's session; and the session manager that recorded all of
// it. It is a generator, not a check: it runs only with
// AGENTBOT_RECORD_HISTORIES set to the name of a new directory (the short
// commit the code is at), and refuses to write into one that exists —
// recorded histories are never replaced.
//
//	AGENTBOT_RECORD_HISTORIES=$(git rev-parse --short HEAD) go test -run TestRecordHistories ./agentflow/
//
// Run it alone: the manager's history would otherwise also hold the reports
// of the other tests' sessions.
func TestRecordHistories(t *testing.T) {
	dir := os.Getenv("AGENTBOT_RECORD_HISTORIES")
	if dir == "" {
		t.Skip("set AGENTBOT_RECORD_HISTORIES=<new directory name> to record histories into testdata/")
	}
	dir = filepath.Join("testdata", filepath.Base(dir))
	if _, err := os.Stat(dir); err == nil {
		t.Fatalf("%s exists: recorded histories are never replaced; record into a new directory", dir)
	}
	const failWord = "please-fail-this-turn"
	script := fakeopenai.DirectiveScript()
	r := newRig(t, rigOptions{script: func(ctx context.Context, c fakeopenai.Call) (fakeopenai.Reply, error) {
		if u := userTexts(fakeopenai.RecordedRequest{Call: c}); len(u) > 0 && strings.Contains(u[len(u)-1], failWord) {
			last := c.Messages[len(c.Messages)-1]
			if last.Role == "user" {
				return fakeopenai.Reply{Error: &fakeopenai.HTTPError{Status: 400, Type: "invalid_request_error",
					Message: "this turn fails on purpose"}}, nil
			}
		}
		return script(ctx, c)
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const thread = "term:record"
	const idle = 4 * time.Second
	// Control requests go through the tenant's manager, as the gateway
	// sends them; "admin" administers the tenant.
	r.cl.Policy = &agentflow.TenantPolicy{Admins: []string{"admin"}, Models: []string{"fake-model-2"}}
	control := func(verb string, req agentflow.ControlRequest) agentflow.ControlResult {
		t.Helper()
		req.Verb, req.Thread, req.RequestID = verb, cmp.Or(req.Thread, thread), "record-"+verb+"-"+strconv.Itoa(time.Now().Nanosecond())
		req.By = cmp.Or(req.By, "tester")
		res, err := r.cl.Control(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", verb, err)
		}
		return res
	}
	if _, err := r.cl.Start(ctx, agentflow.AgentInput{ThreadKey: thread, Backend: "local", Requester: "tester",
		Admins: []string{"admin"}, Options: agentflow.AgentOptions{MaxTurnsPerRun: 4, IdleTimeout: idle}}); err != nil {
		t.Fatal(err)
	}

	for _, text := range []string{
		"write: notes.txt <<< recorded\\nwith two lines",
		"sh: cat notes.txt && ls -a",
		"read: notes.txt\nsh: echo third > three.txt",
	} {
		if res := r.send(thread, text); res.Status != agentflow.TurnDone {
			t.Fatalf("turn %q: %+v", text, res)
		}
	}
	if res := r.send(thread, "sh: echo before the failure\n"+failWord); res.Status != agentflow.TurnFailed {
		t.Fatalf("the failing turn: %+v", res)
	}
	control(agentflow.ControlTitle, agentflow.ControlRequest{Title: "recorded session"})
	waitFor(t, "the title", func() bool { return r.state(thread).Title == "recorded session" })
	control(agentflow.ControlPolicy, agentflow.ControlRequest{By: "admin", PolicyKey: agentflow.PolicyMaxSessions, PolicyValue: "10"})
	control(agentflow.ControlModel, agentflow.ControlRequest{Model: "fake-model-2"})
	waitFor(t, "the model", func() bool { return r.state(thread).Model == "fake-model-2" })
	control(agentflow.ControlFork, agentflow.ControlRequest{By: "admin"})
	var fork agentflow.SessionEntry
	waitFor(t, "the fork", func() bool {
		l, _ := r.cl.List(ctx, thread)
		for _, e := range l {
			if e.Parent == thread {
				fork = e
			}
		}
		return fork.ThreadKey != ""
	})
	mustContain(t, "fork", r.send(fork.ThreadKey, "sh: cat notes.txt").Answer, "recorded")
	control(agentflow.ControlPause, agentflow.ControlRequest{})
	waitFor(t, "the pause", func() bool { return r.state(thread).Status == agentflow.StatusPaused })
	mustContain(t, "resumed", r.send(thread, "sh: cat three.txt").Answer, "third")
	root := t.TempDir()
	control(agentflow.ControlSwitch, agentflow.ControlRequest{Backend: "local", Root: root, By: "admin"})
	waitFor(t, "the switch", func() bool { return r.state(thread).Root == root })
	mustContain(t, "switched", r.send(thread, "sh: cat notes.txt three.txt").Answer, "recorded", "third")

	// Idle: the sandbox is saved and stopped; the next turn resumes it.
	stops := countActivities(t, r.tc, agentflow.AgentWorkflowID(thread), "StopSandbox")
	waitFor(t, "the idle stop", func() bool {
		return countActivities(t, r.tc, agentflow.AgentWorkflowID(thread), "StopSandbox") > stops
	})
	mustContain(t, "after idle", r.send(thread, "sh: cat notes.txt").Answer, "recorded")

	// Stop during a sleep; the next turn runs.
	if _, err := r.cl.Send(ctx, agentflow.AgentInput{ThreadKey: thread}, agentflow.MessageRequest{ID: "record-sleep", Text: "sleep: 30"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the sleep is running", func() bool {
		for _, tool := range r.state(thread).Tools {
			if tool.State == "running" {
				return true
			}
		}
		return false
	})
	control(agentflow.ControlStop, agentflow.ControlRequest{})
	waitFor(t, "the stop", func() bool {
		res, err := r.cl.Wait(ctx, thread, "record-sleep")
		return err == nil && res.Result != nil && res.Result.Status == agentflow.TurnStopped
	})
	mustContain(t, "after stop", r.send(thread, "sh: echo after-stop").Answer, "after-stop")

	// A reset answered on acceptance, its outcome posted by the session.
	control(agentflow.ControlReset, agentflow.ControlRequest{})
	waitFor(t, "the reset's notice", func() bool { return strings.Contains(r.terminal.String(), "Started a fresh conversation") })
	mustContain(t, "after reset", r.send(thread, "sh: cat notes.txt").Answer, "recorded")

	// Approvals: a risky command waits, is approved and runs; another is
	// denied.
	control(agentflow.ControlPolicy, agentflow.ControlRequest{By: "admin", PolicyKey: agentflow.PolicyApprovals, PolicyValue: agentflow.ApprovalRisky})
	waitFor(t, "the session's approval mode", func() bool { return r.state(thread).Approvals == agentflow.ApprovalRisky })
	for i, decision := range []string{agentflow.DecisionApprove, agentflow.DecisionDeny} {
		id := "record-risky-" + strconv.Itoa(i)
		if _, err := r.cl.Send(ctx, agentflow.AgentInput{ThreadKey: thread}, agentflow.MessageRequest{ID: id, Text: "sh: sudo -n true; echo risky-" + decision}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the approval", func() bool { v := r.state(thread).Approval; return v != nil && v.State == agentflow.ApprovalWaiting })
		control(agentflow.ControlApprove, agentflow.ControlRequest{Decision: decision})
		waitFor(t, "the approved or denied turn", func() bool {
			res, err := r.cl.Wait(ctx, thread, id)
			return err == nil && res.Result != nil
		})
	}
	control(agentflow.ControlPolicy, agentflow.ControlRequest{By: "admin", PolicyKey: agentflow.PolicyApprovals, PolicyValue: agentflow.ApprovalNever})

	for _, th := range []string{thread, fork.ThreadKey} {
		control(agentflow.ControlDestroy, agentflow.ControlRequest{Thread: th, By: "admin"})
	}
	waitFor(t, "the registry has both destroyed", func() bool {
		l, _ := r.cl.List(ctx, thread)
		n := 0
		for _, e := range l {
			if e.Status == agentflow.StatusDestroyed {
				n++
			}
		}
		return n == 2
	})

	// A destroyed session's workflow ends once its last messages are sent:
	// record whole histories.
	for _, th := range []string{thread, fork.ThreadKey} {
		if err := r.tc.GetWorkflow(ctx, agentflow.AgentWorkflowID(th), "").Get(ctx, nil); err != nil {
			t.Fatalf("the session of %s did not end well: %v", th, err)
		}
	}
	if runs := len(histories(t, r.tc, agentflow.AgentWorkflowID(thread))); runs < 2 {
		t.Fatalf("the session ran in %d run(s); the recording must cover continue-as-new", runs)
	}

	writeHistories(t, r.tc, dir, agentflow.AgentWorkflowID(thread), "agent_lifecycle")
	writeHistories(t, r.tc, dir, agentflow.AgentWorkflowID(fork.ThreadKey), "agent_fork")
	writeHistories(t, r.tc, dir, agentflow.ManagerWorkflowID(thread), "manager")
}

// countActivities counts the activities of the given type that any run of
// the workflow scheduled.
func countActivities(t *testing.T, tc client.Client, workflowID, activity string) int {
	n := 0
	for _, run := range histories(t, tc, workflowID) {
		for _, ev := range run {
			if ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == activity {
				n++
			}
		}
	}
	return n
}

// writeHistories writes every run of a workflow as <dir>/<name>.json (the
// first run) and <dir>/<name>-run<N>.json (runs after continue-as-new), in
// the JSON form the replayer reads.
func writeHistories(t *testing.T, tc client.Client, dir, workflowID, name string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, events := range histories(t, tc, workflowID) {
		data, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(&historypb.History{Events: events})
		if err != nil {
			t.Fatal(err)
		}
		// protojson's output is deliberately unstable in its spacing; pass
		// it through encoding/json for files that diff well.
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			t.Fatal(err)
		}
		if data, err = json.MarshalIndent(v, "", "  "); err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(dir, name+".json")
		if i > 0 {
			file = filepath.Join(dir, fmt.Sprintf("%s-run%d.json", name, i+1))
		}
		if err := os.WriteFile(file, append(data, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d events of %s", file, len(events), workflowID)
	}
}
