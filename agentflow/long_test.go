package agentflow_test

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/proto"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/internal/fakeopenai"
)

// outputScript makes every turn one shell call that prints 10 KB, then a
// short answer.
func outputScript(ctx context.Context, call fakeopenai.Call) (fakeopenai.Reply, error) {
	idx, _ := call.LastUserMessage()
	if idx == len(call.Messages)-1 {
		return fakeopenai.Invoke("shell", map[string]any{"command": "head -c 10240 /dev/zero | tr '\\0' x"}), nil
	}
	last := call.Messages[len(call.Messages)-1]
	return fakeopenai.Text(fmt.Sprintf("printed %d bytes", len(last.Content))), nil
}

// longTurns is how many turns TestLongSession runs: enough for several
// continue-as-new runs in CI; `make long` runs it at 600.
var longTurns = flag.Int("long-turns", 120, "turns of TestLongSession")

// TestLongSession runs -long-turns turns with 10 KB tool outputs and checks
// the history: no payload over 512 KiB, continue-as-new happened (suggested
// by the server), and the history bytes of a turn do not grow with the
// length of the conversation (the transcript stays in the blob store).

func TestLongSession(t *testing.T) {
	turns := *longTurns
	if testing.Short() {
		turns = 60
	}
	r := newRig(t, rigOptions{script: outputScript})
	const thread = "term:long"
	for i := 1; i <= turns; i++ {
		res := r.send(thread, fmt.Sprintf("turn %d", i))
		if res.Status != agentflow.TurnDone || !strings.Contains(res.Answer, "printed") {
			t.Fatalf("turn %d: %+v", i, res)
		}
	}
	v := r.state(thread)
	if v.Turn != turns {
		t.Fatalf("turn count %d, want %d", v.Turn, turns)
	}

	runs := histories(t, r.tc, agentflow.AgentWorkflowID(thread))
	if len(runs) < 2 {
		t.Fatalf("%d runs: continue-as-new never happened", len(runs))
	}
	var perTurn []int // history bytes of each turn, in order
	maxEvent, maxType := 0, ""
	for _, events := range runs {
		cur := -1
		for _, e := range events {
			size := proto.Size(e)
			if size > maxEvent {
				maxEvent, maxType = size, e.GetEventType().String()
			}
			// A message arrives as a signal (Client.Send) or, in older
			// code, as an update.
			if a, sig := e.GetWorkflowExecutionUpdateAcceptedEventAttributes(), e.GetWorkflowExecutionSignaledEventAttributes(); (a != nil &&
				a.GetAcceptedRequest().GetInput().GetName() == agentflow.UpdateMessage) || sig.GetSignalName() == agentflow.SignalMessage {
				perTurn = append(perTurn, 0)
				cur = len(perTurn) - 1
			}
			if cur >= 0 {
				perTurn[cur] += size
			}
		}
	}
	t.Logf("%d runs, %d turns seen in history, largest event %d bytes (%s)", len(runs), len(perTurn), maxEvent, maxType)
	if maxEvent > 512<<10 {
		t.Fatalf("an event of %d bytes (%s): over 512 KiB", maxEvent, maxType)
	}
	if len(perTurn) != turns {
		t.Fatalf("found %d turns in the history, want %d", len(perTurn), turns)
	}
	n := turns / 6
	first, last := avg(perTurn[1:1+n]), avg(perTurn[len(perTurn)-n:])
	t.Logf("history bytes per turn: first %d turns %.0f, last %d turns %.0f", n, first, n, last)
	if last > first*1.15+512 {
		t.Fatalf("history per turn grows with the conversation: %.0f bytes early, %.0f late", first, last)
	}
}

func avg(xs []int) float64 {
	sum := 0
	for _, x := range xs {
		sum += x
	}
	return float64(sum) / float64(len(xs))
}

// histories returns the events of every run of a workflow, oldest run
// first, following the continue-as-new chain back from the current run.
func histories(t *testing.T, tc client.Client, id string) [][]*historypb.HistoryEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var runs [][]*historypb.HistoryEvent
	runID := ""
	for {
		it := tc.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		var events []*historypb.HistoryEvent
		for it.HasNext() {
			e, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			events = append(events, e)
		}
		runs = append([][]*historypb.HistoryEvent{events}, runs...)
		prev := events[0].GetWorkflowExecutionStartedEventAttributes().GetContinuedExecutionRunId()
		if prev == "" {
			return runs
		}
		runID = prev
	}
}
