package agentflow_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/agentbot/agentbot/agentflow"
)

// TestReplayHistories replays every saved history in testdata/ against the
// current workflow code: a change that would break running sessions (a
// command added, removed or reordered without workflow.GetVersion) fails
// here. The histories come from real runs (TestRecordHistories); when a
// change is meant to break them, version it, or regenerate them and say why.
func TestReplayHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no histories in testdata/: record them with AGENTBOT_RECORD_HISTORIES=1 go test -run TestRecordHistories ./agentflow/")
	}
	quiet := tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			events := readHistory(t, file)
			typ := events[0].GetWorkflowExecutionStartedEventAttributes().GetWorkflowType().GetName()
			if typ != agentflow.AgentWorkflowName && typ != agentflow.SessionManagerWorkflowName {
				t.Fatalf("history of an unknown workflow type %q", typ)
			}

			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(agentflow.AgentWorkflow, workflow.RegisterOptions{Name: agentflow.AgentWorkflowName})
			r.RegisterWorkflowWithOptions(agentflow.SessionManagerWorkflow, workflow.RegisterOptions{Name: agentflow.SessionManagerWorkflowName})
			if err := r.ReplayWorkflowHistoryFromJSONFile(quiet, file); err != nil {
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
			if err := stub.ReplayWorkflowHistoryFromJSONFile(quiet, file); err == nil {
				t.Fatalf("a do-nothing workflow replayed %s without error", file)
			}
		})
	}
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

// TestRecordHistories makes the histories of testdata/ from real runs on the
// dev server: a session through three turns with tools, a title, a fork, a
// pause and a resumed turn, a switch to another local root, a stop during a
// sleep and a destroy; the fork's session; and the session manager that
// recorded all of it. It is a generator, not a check: it runs only with
// AGENTBOT_RECORD_HISTORIES=1, and overwrites the files.
//
//	AGENTBOT_RECORD_HISTORIES=1 go test -run TestRecordHistories ./agentflow/
//
// Run it alone: the manager's history would otherwise also hold the reports
// of the other tests' sessions.
func TestRecordHistories(t *testing.T) {
	if os.Getenv("AGENTBOT_RECORD_HISTORIES") != "1" {
		t.Skip("set AGENTBOT_RECORD_HISTORIES=1 to record the histories of testdata/")
	}
	r := newRig(t, rigOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const thread = "term:record"

	for _, text := range []string{
		"write: notes.txt <<< recorded\\nwith two lines",
		"sh: cat notes.txt && ls -a",
		"read: notes.txt\nsh: echo third > three.txt",
	} {
		if res := r.send(thread, text); res.Status != agentflow.TurnDone {
			t.Fatalf("turn %q: %+v", text, res)
		}
	}
	if _, err := r.cl.Title(ctx, thread, agentflow.TitleRequest{Title: "recorded session", By: "tester"}); err != nil {
		t.Fatal(err)
	}
	fork, err := r.cl.Fork(ctx, agentflow.ForkRequest{SourceThread: thread, RequestID: "record-fork", Requester: "tester"})
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "fork", r.send(fork.ThreadKey, "sh: cat notes.txt").Answer, "recorded")
	if v, err := r.cl.Pause(ctx, thread, agentflow.PauseRequest{By: "tester"}); err != nil || v.Status != agentflow.StatusPaused {
		t.Fatalf("pause: %+v %v", v, err)
	}
	mustContain(t, "resumed", r.send(thread, "sh: cat three.txt").Answer, "third")
	if sw, err := r.cl.Switch(ctx, thread, agentflow.SwitchRequest{Backend: "local", Root: t.TempDir(), By: "tester"}); err != nil || !sw.Changed {
		t.Fatalf("switch: %+v %v", sw, err)
	}
	mustContain(t, "switched", r.send(thread, "sh: cat notes.txt three.txt").Answer, "recorded", "third")

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
	if st, err := r.cl.Stop(ctx, thread, agentflow.StopRequest{By: "tester"}); err != nil || !st.Stopped {
		t.Fatalf("stop: %+v %v", st, err)
	}
	mustContain(t, "after stop", r.send(thread, "sh: echo after-stop").Answer, "after-stop")

	for _, th := range []string{thread, fork.ThreadKey} {
		if _, err := r.cl.Destroy(ctx, th, agentflow.DestroyRequest{By: "tester"}); err != nil {
			t.Fatal(err)
		}
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

	writeHistories(t, r.tc, agentflow.AgentWorkflowID(thread), "agent_lifecycle")
	writeHistories(t, r.tc, agentflow.AgentWorkflowID(fork.ThreadKey), "agent_fork")
	writeHistories(t, r.tc, agentflow.ManagerWorkflowID(thread), "manager")
}

// writeHistories writes every run of a workflow as testdata/<name>.json (the
// first run) and testdata/<name>-run<N>.json (runs after continue-as-new),
// in the JSON form the replayer reads.
func writeHistories(t *testing.T, tc client.Client, workflowID, name string) {
	t.Helper()
	old, err := filepath.Glob(filepath.Join("testdata", name+"*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll("testdata", 0o755); err != nil {
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
		file := filepath.Join("testdata", name+".json")
		if i > 0 {
			file = filepath.Join("testdata", fmt.Sprintf("%s-run%d.json", name, i+1))
		}
		if err := os.WriteFile(file, append(data, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d events of %s", file, len(events), workflowID)
	}
}
