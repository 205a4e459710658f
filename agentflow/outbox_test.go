package agentflow_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/agentbot/agentbot/agentflow"
)

// chatFault wraps the real (terminal) sender of a test's parts and lets a
// test hold or fail chosen deliveries.
type chatFault struct {
	next agentflow.ChatSender
	// hold blocks deliveries it returns true for until release is closed.
	hold    func(agentflow.Outbound) bool
	release chan struct{}
	// fail fails deliveries it returns true for, for good.
	fail func(agentflow.Outbound) bool

	mu        sync.Mutex
	seen      []agentflow.Outbound
	holdEnded bool
}

func (c *chatFault) Deliver(ctx context.Context, m agentflow.Outbound) error {
	c.mu.Lock()
	c.seen = append(c.seen, m)
	c.mu.Unlock()
	if c.hold != nil && c.hold(m) {
		defer func() {
			c.mu.Lock()
			c.holdEnded = true
			c.mu.Unlock()
		}()
		select {
		case <-c.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if c.fail != nil && c.fail(m) {
		return temporal.NewNonRetryableApplicationError("the chat refused the message", "Permanent", nil)
	}
	return c.next.Deliver(ctx, m)
}

func (c *chatFault) delivered(kind agentflow.OutboundKind) []agentflow.Outbound {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []agentflow.Outbound
	for _, m := range c.seen {
		if m.Kind == kind {
			out = append(out, m)
		}
	}
	return out
}

// TestWorkflowOutboxLanes: a delivery that has to wait (a thread rename
// held by the platform's rate limit) holds neither the answers nor the
// progress of later turns.
func TestWorkflowOutboxLanes(t *testing.T) {
	p := newParts(t, nil)
	fault := &chatFault{next: p.acts.Chat["term"], release: make(chan struct{}),
		hold: func(m agentflow.Outbound) bool { return m.Kind == agentflow.OutboundTitle }}
	p.acts.Chat = map[string]agentflow.ChatSender{"term": fault}
	t.Cleanup(func() {
		select {
		case <-fault.release:
		default:
			close(fault.release)
		}
	})
	e := p.newEnv("term:lanes")
	var held time.Time
	err := e.runAgent(agentflow.AgentInput{},
		call(e, agentflow.UpdateTitle, agentflow.TitleRequest{Title: "renamed"}, func(v agentflow.SessionView, err error) {
			if err != nil {
				t.Error(err)
			}
			held = time.Now()
		}),
		e.turn("m1", "sh: echo answered", func(r agentflow.TurnResult) {
			if r.Status != agentflow.TurnDone || !strings.Contains(r.Answer, "answered") {
				t.Errorf("turn behind a held rename: %+v", r)
			}
			fault.mu.Lock()
			ended := fault.holdEnded
			fault.mu.Unlock()
			if ended {
				t.Error("the answer was delivered only after the held rename gave up")
			}
			close(fault.release)
		}),
		e.destroy(),
	)
	if err != nil {
		t.Fatal(err)
	}
	if held.IsZero() {
		t.Fatal("the title update never returned")
	}
}

// TestWorkflowUndeliveredAnswer: an answer the chat refuses is kept, status
// says so, and the next answer that gets through is preceded by a notice
// with the export hint.
func TestWorkflowUndeliveredAnswer(t *testing.T) {
	p := newParts(t, nil)
	fault := &chatFault{next: p.acts.Chat["term"],
		fail: func(m agentflow.Outbound) bool { return m.Kind == agentflow.OutboundAnswer && m.Turn == 1 }}
	p.acts.Chat = map[string]agentflow.ChatSender{"term": fault}
	e := p.newEnv("term:undelivered")
	err := e.runAgent(agentflow.AgentInput{},
		e.turn("m1", "sh: echo first-answer", func(r agentflow.TurnResult) {
			if r.Status != agentflow.TurnDone {
				t.Errorf("first turn: %+v", r)
			}
			v := e.state()
			if len(v.Undelivered) != 1 || v.Undelivered[0].Turn != 1 || !strings.Contains(v.Undelivered[0].Preview, "first-answer") {
				t.Errorf("status does not show the undelivered answer: %+v", v.Undelivered)
			}
		}),
		e.turn("m2", "sh: echo second-answer", func(r agentflow.TurnResult) {
			if v := e.state(); len(v.Undelivered) != 0 {
				t.Errorf("still undelivered after a delivery went through: %+v", v.Undelivered)
			}
		}),
		e.destroy(),
	)
	if err != nil {
		t.Fatal(err)
	}
	var notice string
	for _, m := range fault.delivered(agentflow.OutboundNotice) {
		notice += m.Text.Inline
	}
	expectIn(t, "notice", notice, "an earlier answer (turn 1) could not be delivered", "first-answer", "export")
}

// TestWorkflowAnswerNotBehindPacedEdit: a turn's last progress edit waits
// for its second (one edit a second per message), and the next turn, sent
// at once, neither posts its progress message nor its answer behind that
// wait. Before changePacePerMessage the progress lane slept on the first
// queued edit, holding every later turn's progress, and so its answer, up
// to a second (a third of a quick turn's time in agentbench's P1).
func TestWorkflowAnswerNotBehindPacedEdit(t *testing.T) {
	p := newParts(t, nil)
	fault := &chatFault{next: p.acts.Chat["term"]}
	p.acts.Chat = map[string]agentflow.ChatSender{"term": fault}
	e := p.newEnv("term:paced")
	ok := func(r agentflow.TurnResult) {
		if r.Status != agentflow.TurnDone {
			t.Errorf("turn %d: %+v", r.Turn, r)
		}
	}
	if err := e.runAgent(agentflow.AgentInput{},
		e.turn("m1", "sh: true", ok),
		e.turn("m2", "sh: true", ok),
		e.destroy(),
	); err != nil {
		t.Fatal(err)
	}
	fault.mu.Lock()
	seen := slices.Clone(fault.seen)
	fault.mu.Unlock()
	at := func(what string, match func(m agentflow.Outbound) bool) int {
		t.Helper()
		i := slices.IndexFunc(seen, match)
		if i < 0 {
			t.Fatalf("no %s among the deliveries", what)
		}
		return i
	}
	lastEdit1 := at("final progress edit of turn 1", func(m agentflow.Outbound) bool {
		return m.Kind == agentflow.OutboundProgress && m.Turn == 1 && m.Final
	})
	progress2 := at("progress message of turn 2", func(m agentflow.Outbound) bool {
		return m.Kind == agentflow.OutboundProgress && m.Turn == 2
	})
	answer2 := at("answer of turn 2", func(m agentflow.Outbound) bool {
		return m.Kind == agentflow.OutboundAnswer && m.Turn == 2
	})
	if progress2 > lastEdit1 || answer2 > lastEdit1 {
		var order []string
		for _, m := range seen {
			order = append(order, fmt.Sprintf("%s/%d/final=%v", m.Kind, m.Turn, m.Final))
		}
		t.Fatalf("turn 2's progress (#%d) and answer (#%d) waited for turn 1's paced last edit (#%d): %v",
			progress2, answer2, lastEdit1, order)
	}
}
