package agentflow_test

// Unit tests of AgentWorkflow and SessionManagerWorkflow in the SDK's test
// environment (testsuite.TestWorkflowEnvironment: timers are skipped, no
// server), over REAL activities: a local sandbox registry on a temporary
// directory, a mem:// blob store, the model client against the fake OpenAI
// server (which refuses malformed transcripts with 400), and the terminal
// sender writing to a buffer. Only Report and ForkSession are replaced (with
// env.OnActivity), because they talk to a Temporal server and the test
// environment has none.
//
// This file is in package agentflow_test, not agentflow: bot/terminal
// imports agentflow, so an internal test importing it would be an import
// cycle. Everything these tests need is exported.
//
// Tests are driven by a chain of steps (see agentEnv.run): each step sends an
// update (or polls a query, as Client.Wait does) from the test environment's
// main loop and calls the next one when its answer arrives, so the order of
// events is fixed. Things that must happen "while a turn runs" are hooked on
// activity starts (onStart) and, where the activity must really be under
// way, on a short delayed callback (which fires in wall-clock time while an
// activity runs).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	commonpb "go.temporal.io/api/common/v1"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/agentflow/llm"
	"github.com/agentbot/agentbot/bot/terminal"
	"github.com/agentbot/agentbot/internal/agentworker"
	"github.com/agentbot/agentbot/internal/fakeopenai"
	"github.com/agentbot/agentbot/internal/testenv"
	"github.com/agentbot/agentbot/sandboxes"
	"github.com/agentbot/agentbot/sandboxes/localsandbox"
	"github.com/agentbot/agentbot/store"
)

const unitKey = "sk-unit-test-key"

// parts are the real dependencies behind the activities. Several test
// environments may share one (a run after continue-as-new, a fork), as
// several workers share one blob store and sandbox host.
type parts struct {
	t      *testing.T
	acts   *agentflow.Activities
	model  *fakeopenai.Server
	term   *testenv.Buffer
	blobs  *store.Blobs
	logs   *testenv.Buffer
	logger *slog.Logger
}

func newParts(t *testing.T, script fakeopenai.Script) *parts {
	t.Helper()
	ctx := context.Background()
	reg := sandboxes.NewRegistry()
	lb, err := localsandbox.New(localsandbox.Options{BaseDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(localsandbox.Name, lb); err != nil {
		t.Fatal(err)
	}
	blobs, err := store.OpenBlobs(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { blobs.Close() })
	if script == nil {
		script = fakeopenai.DirectiveScript()
	}
	model := fakeopenai.New(fakeopenai.Options{APIKey: unitKey, Script: script})
	t.Cleanup(model.Close)
	mc, err := llm.New(llm.Config{BaseURL: model.URL(), APIKey: unitKey})
	if err != nil {
		t.Fatal(err)
	}
	p := &parts{t: t, model: model, term: &testenv.Buffer{}, blobs: blobs, logs: &testenv.Buffer{}}
	p.logger = slog.New(slog.NewTextHandler(p.logs, nil))
	p.acts = &agentflow.Activities{
		Sandboxes: reg, Blobs: blobs, Model: mc, ModelName: "fake-model",
		Chat:   map[string]agentflow.ChatSender{"term": terminal.NewSender(p.term)},
		Logger: p.logger, Secrets: []string{unitKey},
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("terminal:\n%s\nlogs:\n%s", p.term.String(), p.logs.String())
		}
	})
	return p
}

// chatRequests returns the model requests received so far.
func (p *parts) chatRequests() []fakeopenai.RecordedRequest {
	var out []fakeopenai.RecordedRequest
	for _, r := range p.model.Requests() {
		if r.API == fakeopenai.APIChat {
			out = append(out, r)
		}
	}
	return out
}

func (p *parts) exists(key string) bool {
	ok, err := p.blobs.Exists(context.Background(), key)
	if err != nil {
		p.t.Errorf("blob %s: %v", key, err)
	}
	return ok
}

// expectIn is mustContain for callbacks of the test environment, where
// t.Fatal must not be called (it would stop the environment's main loop).
func expectIn(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s: want %q in:\n%s", what, w, got)
		}
	}
}

// safeError checks that a turn's error is the short sentence for the chat:
// it says why, without the SDK's wrapping.
func safeError(t *testing.T, got, why string) {
	t.Helper()
	if !strings.Contains(got, why) {
		t.Errorf("turn error %q does not say %q", got, why)
	}
	for _, noise := range []string{"activity error", "(type:", "scheduledEventID", "retryable", "ModelStep"} {
		if strings.Contains(got, noise) {
			t.Errorf("turn error %q has the SDK's wrapping (%q)", got, noise)
		}
	}
}

// inOrder checks that got contains wants, each after the one before.
func inOrder(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	rest := got
	for _, w := range wants {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Errorf("%s: want %q (after the previous parts) in:\n%s", what, w, got)
			return
		}
		rest = rest[i+len(w):]
	}
}

// userTexts returns the user messages of a request, in order.
func userTexts(r fakeopenai.RecordedRequest) []string {
	var out []string
	for _, m := range r.Call.Messages {
		if m.Role == "user" {
			out = append(out, m.Content)
		}
	}
	return out
}

// agentEnv is one test environment running AgentWorkflow (or the manager).
type agentEnv struct {
	*parts
	t       *testing.T
	env     *testsuite.TestWorkflowEnvironment
	thread  string
	mu      sync.Mutex
	reports []agentflow.ReportInput
	// reportHook, when set, answers the Report activity (called with mu
	// held).
	reportHook func(agentflow.ReportInput) error
	// hooks run, on the main loop, when an activity starts; a hook that
	// returns true is removed.
	hooks []func(info *activity.Info, args converter.EncodedValues) bool
}

func (p *parts) newEnv(thread string) *agentEnv {
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(tlog.NewStructuredLogger(p.logger))
	env := suite.NewTestWorkflowEnvironment()
	// Turns run real commands; the default idle limit of 3s is too short
	// for a gated model call or a sleep that is stopped.
	env.SetTestTimeout(2 * time.Minute)
	// The SDK's deadlock detector allows a workflow task 1s of wall time;
	// under -race on a loaded two-core machine a task can take longer
	// without anything being wrong. The real workers keep the default.
	env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: 15 * time.Second})
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: agentflow.AgentWorkflowID(thread), TaskQueue: agentflow.TaskQueue})
	agentworker.Register(env, p.acts)
	e := &agentEnv{parts: p, t: p.t, env: env, thread: thread}
	// Report updates the session manager through a Temporal client; there
	// is no server here, so it is replaced by a recorder.
	env.OnActivity(p.acts.Report, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in agentflow.ReportInput) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.reports = append(e.reports, in)
			if e.reportHook != nil {
				return e.reportHook(in)
			}
			return nil
		})
	// Register is a report that waits for the manager's admission.
	env.OnActivity(p.acts.Register, mock.Anything, mock.Anything).Return(
		func(_ context.Context, entry agentflow.SessionEntry) (agentflow.Admission, error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			in := agentflow.ReportInput{Update: agentflow.ManagerUpdateRegister, Entry: entry}
			e.reports = append(e.reports, in)
			if e.reportHook != nil {
				if err := e.reportHook(in); err != nil {
					return agentflow.Admission{}, err
				}
			}
			return agentflow.Admission{Admitted: true}, nil
		})
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, args converter.EncodedValues) {
		e.hooks = slices.DeleteFunc(e.hooks, func(h func(*activity.Info, converter.EncodedValues) bool) bool {
			return h(info, args)
		})
	})
	// Deliver runs as a local activity (changeLocalDelivery): its hooks
	// see the same encoded input.
	env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, args []any) {
		payloads, err := converter.GetDefaultDataConverter().ToPayloads(args...)
		if err != nil {
			e.t.Errorf("encoding the input of %s: %v", info.ActivityType.Name, err)
			return
		}
		values := encodedValues{payloads}
		e.hooks = slices.DeleteFunc(e.hooks, func(h func(*activity.Info, converter.EncodedValues) bool) bool {
			return h(info, values)
		})
	})
	return e
}

// encodedValues are a local activity's arguments, as an activity's.
type encodedValues struct{ p *commonpb.Payloads }

func (v encodedValues) HasValues() bool { return v.p != nil && len(v.p.Payloads) > 0 }
func (v encodedValues) Get(ptrs ...any) error {
	return converter.GetDefaultDataConverter().FromPayloads(v.p, ptrs...)
}

// onStart runs f, once, when the first activity of type name whose input
// matches starts (before it runs).
func onStart[T any](e *agentEnv, name string, match func(T) bool, f func()) {
	e.hooks = append(e.hooks, func(info *activity.Info, args converter.EncodedValues) bool {
		if info.ActivityType.Name != name {
			return false
		}
		var in T
		if err := args.Get(&in); err != nil {
			e.t.Errorf("decoding the input of %s: %v", name, err)
			return false
		}
		if !match(in) {
			return false
		}
		f()
		return true
	})
}

func (e *agentEnv) reported() []agentflow.ReportInput {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.reports)
}

// step is one link of a test's chain: it does its part and calls next when
// done (from a callback of the test environment, on its main loop).
type step func(next func())

// run starts the workflow with in and runs the steps in order; it returns
// the workflow's error. It fails the test when the workflow ends before the
// last step has finished.
func (e *agentEnv) run(wf string, in any, steps ...step) error {
	e.t.Helper()
	finished := false
	steps = append(steps, func(func()) { finished = true })
	i := 0
	var next func()
	next = func() {
		s := steps[i]
		i++
		s(next)
	}
	// Begin once the workflow has run its first task, so that the first
	// step may query it: callbacks registered with no delay run before that
	// (the test environment starts the workflow code lazily), a timer fires
	// only when the workflow is blocked.
	e.env.RegisterDelayedCallback(next, time.Millisecond)
	e.env.ExecuteWorkflow(wf, in)
	if !e.env.IsWorkflowCompleted() {
		e.t.Fatal("the workflow did not complete")
	}
	if !finished {
		e.t.Fatalf("the workflow ended during step %d of %d: %v", i, len(steps)-1, e.env.GetWorkflowError())
	}
	return e.env.GetWorkflowError()
}

func (e *agentEnv) runAgent(in agentflow.AgentInput, steps ...step) error {
	e.t.Helper()
	if in.ThreadKey == "" {
		in.ThreadKey = e.thread
	}
	return e.run(agentflow.AgentWorkflowName, in, steps...)
}

// update sends an update; done gets its JSON-encoded result or its
// rejection or failure.
func (e *agentEnv) update(name string, arg any, onAccept func(), done func(raw []byte, err error)) {
	e.env.UpdateWorkflow(name, "", &testsuite.TestUpdateCallback{
		OnAccept: func() {
			if onAccept != nil {
				onAccept()
			}
		},
		OnReject: func(err error) { done(nil, err) },
		OnComplete: func(v any, err error) {
			if err != nil {
				done(nil, err)
				return
			}
			raw, merr := json.Marshal(v)
			if merr != nil {
				e.t.Errorf("update %s: encoding the result: %v", name, merr)
			}
			done(raw, nil)
		},
	}, arg)
}

// call is a step sending one update and checking its typed result.
func call[T any](e *agentEnv, name string, arg any, check func(T, error)) step {
	return func(next func()) {
		e.update(name, arg, nil, func(raw []byte, err error) {
			var out T
			if err == nil {
				if uerr := json.Unmarshal(raw, &out); uerr != nil {
					e.t.Errorf("update %s: decoding %s: %v", name, raw, uerr)
				}
			}
			check(out, err)
			next()
		})
	}
}

func (e *agentEnv) send(m agentflow.MessageRequest, check func(agentflow.MessageResult, error)) step {
	return call(e, agentflow.UpdateMessage, m, check)
}

// turn sends a message and waits for its turn's result.
func (e *agentEnv) turn(id, text string, check func(r agentflow.TurnResult)) step {
	return func(next func()) {
		e.update(agentflow.UpdateMessage, agentflow.MessageRequest{ID: id, Author: "tester", Text: text}, nil,
			func(raw []byte, err error) {
				var res agentflow.MessageResult
				if err == nil {
					err = json.Unmarshal(raw, &res)
				}
				if err != nil || res.Duplicate {
					e.t.Errorf("message %s: %+v %v", id, res, err)
					next()
					return
				}
				e.result(id, func(r agentflow.TurnResult) {
					check(r)
					next()
				})
			})
	}
}

// result polls QueryMessage (as Client.Wait does) until the turn that
// handles message id has a result and its answer was delivered, and hands
// it to done. The polls are timers: they fire in wall-clock time while an
// activity runs, and first when the workflow is blocked (before its own,
// longer, timers).
func (e *agentEnv) result(id string, done func(agentflow.TurnResult)) {
	deadline := time.Now().Add(time.Minute)
	var poll func()
	poll = func() {
		var res agentflow.MessageResult
		val, err := e.env.QueryWorkflow(agentflow.QueryMessage, id)
		if err == nil {
			err = val.Get(&res)
		}
		switch {
		case err != nil:
			e.t.Errorf("query message %s: %v", id, err)
		case res.Result != nil && res.Result.Delivered:
			done(*res.Result)
			return
		case time.Now().After(deadline):
			e.t.Errorf("message %s: no result after a minute: %+v", id, res)
		default:
			e.env.RegisterDelayedCallback(poll, 10*time.Millisecond)
			return
		}
		done(agentflow.TurnResult{})
	}
	poll()
}

// resultOf is a step waiting for the result of message id.
func (e *agentEnv) resultOf(id string, check func(agentflow.TurnResult)) step {
	return func(next func()) {
		e.result(id, func(r agentflow.TurnResult) {
			check(r)
			next()
		})
	}
}

// rejected is a step sending an update that its validator must refuse with
// an error containing want.
func (e *agentEnv) rejected(name string, arg any, want string) step {
	return func(next func()) {
		accepted := false
		e.update(name, arg, func() { accepted = true }, func(_ []byte, err error) {
			switch {
			case accepted:
				e.t.Errorf("%s %+v: accepted, want a rejection with %q (outcome %v)", name, arg, want, err)
			case err == nil || !strings.Contains(err.Error(), want):
				e.t.Errorf("%s %+v: rejection %v, want one with %q", name, arg, err, want)
			}
			next()
		})
	}
}

func (e *agentEnv) do(f func()) step {
	return func(next func()) {
		f()
		next()
	}
}

func (e *agentEnv) destroy() step {
	return call(e, agentflow.UpdateDestroy, agentflow.DestroyRequest{By: "tester"}, func(v agentflow.SessionView, err error) {
		if err != nil || v.Status != agentflow.StatusDestroyed {
			e.t.Errorf("destroy: %+v %v", v, err)
		}
	})
}

func (e *agentEnv) state() agentflow.SessionView {
	var v agentflow.SessionView
	e.query(agentflow.QueryState, &v)
	return v
}

func (e *agentEnv) query(name string, out any, args ...any) {
	e.t.Helper()
	val, err := e.env.QueryWorkflow(name, args...)
	if err != nil {
		e.t.Errorf("query %s: %v", name, err)
		return
	}
	if err := val.Get(out); err != nil {
		e.t.Errorf("query %s: %v", name, err)
	}
}

// latch calls a waiting step's next once n events happened.
type latch struct {
	n    int
	then func()
}

func (l *latch) done() {
	l.n--
	if l.n == 0 && l.then != nil {
		f := l.then
		l.then = nil
		f()
	}
}

func (l *latch) wait() step {
	return func(next func()) {
		if l.n <= 0 {
			next()
			return
		}
		l.then = next
	}
}

// gate holds model calls until opened. Open it in a cleanup registered after
// the fake server's, so a failing test does not leave the server waiting.
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func newGate() *gate { return &gate{ch: make(chan struct{})} }

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

// first makes the first model call wait for the gate, then answers as s.
func (g *gate) first(s fakeopenai.Script) fakeopenai.Script {
	var calls atomic.Int32
	return func(ctx context.Context, c fakeopenai.Call) (fakeopenai.Reply, error) {
		if calls.Add(1) == 1 {
			select {
			case <-g.ch:
			case <-ctx.Done():
				return fakeopenai.Reply{}, ctx.Err()
			}
		}
		return s(ctx, c)
	}
}

func isModelStep(agentflow.ModelStepInput) bool { return true }

// TestWorkflowMessageValidator checks what the message update accepts and
// refuses, and that a repeated message ID starts no second turn.
func TestWorkflowMessageValidator(t *testing.T) {
	t.Run("refusals", func(t *testing.T) {
		p := newParts(t, nil)
		e := p.newEnv("term:refusals")
		err := e.runAgent(agentflow.AgentInput{},
			e.rejected(agentflow.UpdateMessage, agentflow.MessageRequest{ID: "blank", Text: " \n\t "}, "empty message"),
			e.rejected(agentflow.UpdateMessage, agentflow.MessageRequest{ID: "big", Text: strings.Repeat("x", agentflow.MaxMessageBytes+1)},
				fmt.Sprintf("message too long (%d bytes, at most %d); send it as a file", agentflow.MaxMessageBytes+1, agentflow.MaxMessageBytes)),
			e.rejected(agentflow.UpdateMessage, agentflow.MessageRequest{ID: strings.Repeat("i", 257), Text: "hi"}, "message ID too long"),
			// The largest message is accepted.
			e.turn("max", strings.Repeat("y", agentflow.MaxMessageBytes), func(r agentflow.TurnResult) {
				if r.Status != agentflow.TurnDone {
					t.Errorf("largest message: %+v", r)
				}
			}),
			// A refused message leaves no trace: its ID may be used again.
			e.turn("blank", "now with text", func(r agentflow.TurnResult) {
				if r.Status != agentflow.TurnDone || r.Answer != "echo: now with text" || r.Turn != 2 {
					t.Errorf("message after a refusal with the same ID: %+v", r)
				}
			}),
			// Destroy, and a message right behind it: the validator
			// refuses it while the destroy runs.
			func(next func()) {
				l := &latch{n: 2, then: next}
				e.update(agentflow.UpdateDestroy, agentflow.DestroyRequest{}, nil, func(_ []byte, err error) {
					if err != nil {
						t.Errorf("destroy: %v", err)
					}
					l.done()
				})
				e.rejected(agentflow.UpdateMessage, agentflow.MessageRequest{ID: "late", Text: "hello?"}, agentflow.ErrDestroyedText)(l.done)
			},
		)
		if err != nil {
			t.Fatalf("workflow: %v", err)
		}
		if n := len(p.chatRequests()); n != 2 {
			t.Errorf("%d model requests, want 2 (one per accepted message)", n)
		}
	})

	t.Run("too many queued", func(t *testing.T) {
		g := newGate()
		p := newParts(t, g.first(fakeopenai.DirectiveScript()))
		t.Cleanup(g.open)
		e := p.newEnv("term:queue")
		var queued []step
		for i := 1; i <= agentflow.MaxQueuedMessages; i++ {
			id := fmt.Sprintf("q%d", i)
			queued = append(queued, e.send(agentflow.MessageRequest{ID: id, Text: id}, func(r agentflow.MessageResult, err error) {
				if err != nil || r.Queued != i || r.Turn != 0 || r.Duplicate {
					t.Errorf("queueing %s: %+v %v", id, r, err)
				}
			}))
		}
		var turn1 agentflow.TurnResult
		held := &latch{n: 1}
		onStart(e, "ModelStep", isModelStep, held.done)
		steps := []step{
			// The first message's turn holds at its model call while the
			// queue fills.
			e.send(agentflow.MessageRequest{ID: "first", Text: "first"}, func(r agentflow.MessageResult, err error) {
				if err != nil || r.Queued != 1 {
					t.Errorf("first message: %+v %v", r, err)
				}
			}),
			held.wait(),
		}
		steps = append(steps, queued...)
		steps = append(steps,
			e.rejected(agentflow.UpdateMessage, agentflow.MessageRequest{ID: "one-too-many", Text: "more"},
				fmt.Sprintf("%d messages are already waiting; wait for the current turn to finish", agentflow.MaxQueuedMessages)),
			// A retry of a queued message is answered, though the queue is
			// full: it is waiting, 7th in line.
			e.send(agentflow.MessageRequest{ID: "q7", Text: "q7 again"}, func(r agentflow.MessageResult, err error) {
				if err != nil || !r.Duplicate || r.Turn != 0 || r.Queued != 7 || r.Result != nil {
					t.Errorf("retry of a queued message: %+v %v", r, err)
				}
			}),
			func(next func()) {
				g.open()
				next()
			},
			e.resultOf("first", func(r agentflow.TurnResult) { turn1 = r }),
			e.resultOf("q7", func(r agentflow.TurnResult) {
				if r.Turn != 2 || r.Status != agentflow.TurnDone || len(r.MessageIDs) != agentflow.MaxQueuedMessages {
					t.Errorf("the queue's turn: %+v", r)
				}
			}),
			e.destroy(),
		)
		if err := e.runAgent(agentflow.AgentInput{}, steps...); err != nil {
			t.Fatal(err)
		}
		if turn1.Turn != 1 || !slices.Equal(turn1.MessageIDs, []string{"first"}) {
			t.Errorf("first turn: %+v", turn1)
		}
		reqs := p.chatRequests()
		if len(reqs) != 2 {
			t.Fatalf("%d model requests, want 2 (one turn for the first message, one for the queue)", len(reqs))
		}
		var want []string
		for i := 1; i <= agentflow.MaxQueuedMessages; i++ {
			want = append(want, fmt.Sprintf("q%d", i))
		}
		users := userTexts(reqs[1])
		// q1 is in q10: look for each as a line of its own.
		for i := range want {
			want[i] = "\n" + want[i] + "\n"
		}
		inOrder(t, "the second turn's user message", "\n"+users[len(users)-1]+"\n", want...)
	})

	t.Run("duplicate ID", func(t *testing.T) {
		p := newParts(t, nil)
		e := p.newEnv("term:dup")
		var first agentflow.TurnResult
		requests := 0
		err := e.runAgent(agentflow.AgentInput{},
			e.turn("m1", "sh: echo first-run", func(r agentflow.TurnResult) {
				first = r
				requests = len(p.chatRequests())
				if r.Status != agentflow.TurnDone || !strings.Contains(r.Answer, "first-run") {
					t.Errorf("first turn: %+v", r)
				}
			}),
			// The same ID with other text (a platform retry, an edited
			// message): the first result, no turn.
			e.send(agentflow.MessageRequest{ID: "m1", Text: "sh: echo second-run"}, func(r agentflow.MessageResult, err error) {
				if err != nil || !r.Duplicate || r.Turn != 1 || r.Result == nil || r.Result.Answer != first.Answer {
					t.Errorf("duplicate: %+v %v", r, err)
				}
			}),
			e.send(agentflow.MessageRequest{ID: "m1", Author: "someone else", Text: "again"}, func(r agentflow.MessageResult, err error) {
				if err != nil || !r.Duplicate || r.Turn != 1 || r.Result == nil || r.Result.Status != agentflow.TurnDone {
					t.Errorf("second duplicate: %+v %v", r, err)
				}
				if n := len(p.chatRequests()); n != requests {
					t.Errorf("duplicates made %d more model requests", n-requests)
				}
				if v := e.state(); v.Turn != 1 || v.Queued != 0 {
					t.Errorf("state after duplicates: %+v", v)
				}
			}),
			e.destroy(),
		)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(p.term.String(), "second-run") {
			t.Errorf("the duplicate's text reached the chat:\n%s", p.term.String())
		}
	})
}

// TestWorkflowBatching sends three messages while a turn runs: they make one
// next turn, whose user message holds all three in order.
func TestWorkflowBatching(t *testing.T) {
	g := newGate()
	p := newParts(t, g.first(fakeopenai.DirectiveScript()))
	t.Cleanup(g.open)
	e := p.newEnv("term:batch")
	batch := []agentflow.MessageRequest{
		{ID: "b1", Author: "alice", Text: "one"},
		{ID: "b2", Author: "bob", Text: "two"},
		{ID: "b3", Author: "carol", Text: "three"},
	}
	var queued []int
	var second agentflow.TurnResult
	// When the first turn's model call starts (and is held by the gate),
	// send the batch; open the gate once all three are queued.
	onStart(e, "ModelStep", isModelStep, func() {
		for _, m := range batch {
			e.update(agentflow.UpdateMessage, m, nil, func(raw []byte, err error) {
				var r agentflow.MessageResult
				if err != nil {
					t.Errorf("batch message: %v", err)
				} else if err := json.Unmarshal(raw, &r); err != nil {
					t.Error(err)
				}
				if queued = append(queued, r.Queued); len(queued) == len(batch) {
					g.open()
				}
			})
		}
	})
	err := e.runAgent(agentflow.AgentInput{},
		e.turn("first", "first", func(r agentflow.TurnResult) {
			if r.Turn != 1 || r.Answer != "echo: first" || !slices.Equal(r.MessageIDs, []string{"first"}) {
				t.Errorf("first turn: %+v", r)
			}
		}),
		e.resultOf("b3", func(r agentflow.TurnResult) { second = r }),
		// Each message of the batch reports the one turn.
		e.do(func() {
			for _, m := range batch {
				var res agentflow.MessageResult
				e.query(agentflow.QueryMessage, &res, m.ID)
				if res.Turn != 2 || res.Result == nil || res.Result.Turn != 2 {
					t.Errorf("message %s: %+v", m.ID, res)
				}
			}
			if _, err := e.env.QueryWorkflow(agentflow.QueryMessage, "never-sent"); err == nil {
				t.Error("QueryMessage answered for an unknown ID")
			}
			if v := e.state(); v.Turn != 2 || v.Queued != 0 {
				t.Errorf("state: %+v", v)
			}
		}),
		e.destroy(),
	)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(queued, []int{1, 2, 3}) {
		t.Errorf("queue lengths when accepted: %v, want [1 2 3]", queued)
	}
	r := second
	if r.Turn != 2 || r.Status != agentflow.TurnDone || !slices.Equal(r.MessageIDs, []string{"b1", "b2", "b3"}) {
		t.Fatalf("batched turn: %+v", r)
	}
	reqs := p.chatRequests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	users := userTexts(reqs[1])
	if len(users) != 2 || users[0] != "first" {
		t.Fatalf("user messages of the second request: %q", users)
	}
	// One user message with the three, each with its author, in order.
	inOrder(t, "the batched user message", users[1], "alice", "one", "bob", "two", "carol", "three")
	if r.Answer != "echo: "+users[1] {
		t.Errorf("batched answer %q", r.Answer)
	}
	var summaries []agentflow.TurnSummary
	e.query(agentflow.QueryTranscript, &summaries)
	if len(summaries) != 2 || summaries[1].User != users[1] {
		t.Errorf("transcript: %+v", summaries)
	}
}

// toolScript writes a file, runs a shell command over it, then answers with
// the command's output, reporting fixed token counts (100/10, 200/20,
// 300/30).
func toolScript(ctx context.Context, c fakeopenai.Call) (fakeopenai.Reply, error) {
	last, _ := c.LastUserMessage()
	calls := 0
	for _, m := range c.Messages[last+1:] {
		if m.Role == "assistant" {
			calls++
		}
	}
	var r fakeopenai.Reply
	switch calls {
	case 0:
		r = fakeopenai.Invoke(fakeopenai.ToolWriteFile, map[string]any{"path": "src/hello.txt", "content": "hello tools\n"})
	case 1:
		r = fakeopenai.Invoke(fakeopenai.ToolShell, map[string]any{"command": "cat src/hello.txt && pwd"})
	default:
		r = fakeopenai.Text("all done:\n" + c.Messages[len(c.Messages)-1].Content)
	}
	n := int64(calls + 1)
	r.Usage = &fakeopenai.Usage{InputTokens: 100 * n, OutputTokens: 10 * n}
	return r, nil
}

// TestWorkflowToolTurn runs turns of write_file, shell and a final answer.
func TestWorkflowToolTurn(t *testing.T) {
	p := newParts(t, toolScript)
	e := p.newEnv("term:tools")
	perTurn := llm.Usage{InputTokens: 600, OutputTokens: 60, TotalTokens: 660}
	var root string
	err := e.runAgent(agentflow.AgentInput{Title: "tool test"},
		e.turn("t1", "make a file and show it", func(r agentflow.TurnResult) {
			if r.Status != agentflow.TurnDone || r.Steps != 3 || r.Usage != perTurn || r.Error != "" {
				t.Errorf("turn 1: %+v", r)
			}
			expectIn(t, "answer", r.Answer, "all done:", "exit code: 0", "hello tools")
			v := e.state()
			root = v.Root
			if v.Turn != 1 || v.Usage != perTurn || v.Status != agentflow.StatusIdle || v.SandboxID == "" ||
				v.Root == "" || v.Snapshot == "" || len(v.Tools) != 0 || v.Title != "tool test" {
				t.Errorf("state after turn 1: %+v", v)
			}
			expectIn(t, "answer", r.Answer, v.Root) // pwd ran in the workspace root
			if !p.exists(v.Snapshot) {
				t.Errorf("snapshot %s is not in the blob store", v.Snapshot)
			}
		}),
		e.turn("t2", "again", func(r agentflow.TurnResult) {
			if r.Status != agentflow.TurnDone || r.Turn != 2 || r.Usage != perTurn {
				t.Errorf("turn 2: %+v", r)
			}
			want := perTurn
			want.Add(perTurn)
			if v := e.state(); v.Usage != want || v.Turn != 2 {
				t.Errorf("usage is not summed over turns: %+v", v.Usage)
			}
			var ts []agentflow.TurnSummary
			e.query(agentflow.QueryTranscript, &ts)
			if len(ts) != 2 || ts[0].User != "make a file and show it" || ts[1].User != "again" ||
				!strings.HasPrefix(ts[0].Answer, "all done:") || ts[0].Status != agentflow.TurnDone {
				t.Errorf("transcript: %+v", ts)
			}
		}),
		e.do(func() {
			data, err := os.ReadFile(filepath.Join(root, "src", "hello.txt"))
			if err != nil || string(data) != "hello tools\n" {
				t.Errorf("the workspace file: %q %v", data, err)
			}
		}),
		e.destroy(),
	)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("workspace %s still exists after destroy: %v", root, err)
	}
	reqs := p.chatRequests()
	if len(reqs) != 6 {
		t.Fatalf("%d model requests, want 6", len(reqs))
	}
	// The model saw each tool result, answering its call.
	second := reqs[1].Call.Messages
	if last := second[len(second)-1]; last.Role != "tool" || !strings.Contains(last.Content, "wrote 12 bytes to src/hello.txt") {
		t.Errorf("second request ends with %+v", last)
	}
	// The second turn's conversation carries the first.
	if got := userTexts(reqs[3]); !slices.Equal(got, []string{"make a file and show it", "again"}) {
		t.Errorf("user messages of turn 2: %q", got)
	}
	term := p.term.String()
	expectIn(t, "terminal", term, "write_file: src/hello.txt", "shell: cat src/hello.txt && pwd", "[tools] agent: all done:")
	// That no secret reaches the chat, even when a command prints it, is
	// TestSecretsNeverLeave's (secrets_test.go): this turn never touches one.
	// Every change was reported: the registration first, destroy last.
	reps := e.reported()
	if len(reps) < 2 || reps[0].Update != agentflow.ManagerUpdateRegister || reps[len(reps)-1].Update != agentflow.ManagerUpdateDestroy ||
		reps[len(reps)-1].Entry.Status != agentflow.StatusDestroyed {
		t.Errorf("reports: %+v", reps)
	}
}

// TestWorkflowStepLimit runs a model that always asks for a tool.
func TestWorkflowStepLimit(t *testing.T) {
	const maxSteps = 3
	script := func(ctx context.Context, c fakeopenai.Call) (fakeopenai.Reply, error) {
		if _, text := c.LastUserMessage(); strings.HasPrefix(text, "sh:") {
			return fakeopenai.DirectiveScript()(ctx, c)
		}
		if len(c.Tools) == 0 {
			// Asked to answer without tools, it can only answer.
			return fakeopenai.Text("forced summary: I ran echo three times"), nil
		}
		return fakeopenai.Invoke(fakeopenai.ToolShell, map[string]any{"command": "echo again"}), nil
	}
	p := newParts(t, script)
	e := p.newEnv("term:steps")
	err := e.runAgent(agentflow.AgentInput{Options: agentflow.AgentOptions{MaxSteps: maxSteps}},
		e.turn("loop", "loop forever", func(r agentflow.TurnResult) {
			// A turn cut by the step limit ends TurnStepCap: the last
			// step answers without tools, and the answer says the limit
			// was reached.
			if r.Status != agentflow.TurnStepCap || r.Steps != maxSteps ||
				!strings.Contains(r.Answer, "forced summary: I ran echo three times") ||
				!strings.Contains(r.Answer, "limit of 3 steps") {
				t.Errorf("step-limited turn: %+v", r)
			}
			reqs := p.chatRequests()
			if len(reqs) != maxSteps {
				t.Errorf("%d model calls, want %d", len(reqs), maxSteps)
				return
			}
			for i, r := range reqs {
				if offered := len(r.Call.Tools) > 0; offered != (i < maxSteps-1) {
					t.Errorf("model call %d offered tools: %v", i+1, offered)
				}
			}
			msgs := reqs[maxSteps-1].Call.Messages
			if last := msgs[len(msgs)-1]; last.Role != "system" || !strings.Contains(last.Content, "answer now, without tools") {
				t.Errorf("the last call does not ask for an answer: %+v", last)
			}
		}),
		// The session goes on: the next turn's transcript is valid (the
		// fake refuses an unanswered tool call with 400).
		e.turn("next", "sh: echo next-turn", func(r agentflow.TurnResult) {
			if r.Status != agentflow.TurnDone || !strings.Contains(r.Answer, "next-turn") {
				t.Errorf("turn after the step limit: %+v", r)
			}
		}),
		e.destroy(),
	)
	if err != nil {
		t.Fatal(err)
	}
}

// TestWorkflowModelErrors checks permanent and transient model failures.
func TestWorkflowModelErrors(t *testing.T) {
	// failFirst answers the first n calls with status, then as
	// DirectiveScript.
	failFirst := func(n int32, status int, code string) fakeopenai.Script {
		var calls atomic.Int32
		return func(ctx context.Context, c fakeopenai.Call) (fakeopenai.Reply, error) {
			if calls.Add(1) <= n {
				return fakeopenai.Fail(status, code), nil
			}
			return fakeopenai.DirectiveScript()(ctx, c)
		}
	}

	t.Run("permanent", func(t *testing.T) {
		p := newParts(t, failFirst(1, 401, "invalid_api_key"))
		e := p.newEnv("term:401")
		const why = "model endpoint rejected the API key (401)"
		err := e.runAgent(agentflow.AgentInput{},
			e.turn("m1", "hello", func(r agentflow.TurnResult) {
				if r.Status != agentflow.TurnFailed {
					t.Errorf("turn with a 401: %+v", r)
				}
				safeError(t, r.Error, why)
				expectIn(t, "answer", r.Answer, "Sorry — ", why, "your message is kept")
				if n := len(p.chatRequests()); n != 1 {
					t.Errorf("a permanent error was tried %d times", n)
				}
				if v := e.state(); v.LastError != r.Error || v.Status != agentflow.StatusIdle {
					t.Errorf("state after the failure: %+v", v)
				}
			}),
			// The failed message is sent again with the next one.
			e.turn("m2", "again", func(r agentflow.TurnResult) {
				if r.Status != agentflow.TurnDone || r.Answer != "echo: again" {
					t.Errorf("turn after the failure: %+v", r)
				}
				reqs := p.chatRequests()
				if got := userTexts(reqs[len(reqs)-1]); !slices.Equal(got, []string{"hello", "again"}) {
					t.Errorf("user messages after the failure: %q", got)
				}
			}),
			e.destroy(),
		)
		if err != nil {
			t.Fatal(err)
		}
		expectIn(t, "terminal", p.term.String(), "[401] agent: Sorry — ", why)
	})

	t.Run("transient then success", func(t *testing.T) {
		p := newParts(t, failFirst(2, 500, ""))
		e := p.newEnv("term:500")
		err := e.runAgent(agentflow.AgentInput{},
			e.turn("m1", "sh: echo recovered", func(r agentflow.TurnResult) {
				if r.Status != agentflow.TurnDone || r.Error != "" || !strings.Contains(r.Answer, "recovered") {
					t.Errorf("turn after two 500s: %+v", r)
				}
			}),
			e.destroy(),
		)
		if err != nil {
			t.Fatal(err)
		}
		// Two failures and the retry that worked, then the final answer.
		if n := len(p.chatRequests()); n != 4 {
			t.Errorf("%d model requests, want 4", n)
		}
	})

	t.Run("transient forever gives up", func(t *testing.T) {
		p := newParts(t, failFirst(1000, 503, ""))
		e := p.newEnv("term:503")
		err := e.runAgent(agentflow.AgentInput{},
			e.turn("m1", "hello", func(r agentflow.TurnResult) {
				if r.Status != agentflow.TurnFailed {
					t.Errorf("turn against a broken endpoint: %+v", r)
				}
				safeError(t, r.Error, "model endpoint failed (503)")
			}),
			e.destroy(),
		)
		if err != nil {
			t.Fatal(err)
		}
		// The model activity's retry policy allows 6 attempts.
		if n := len(p.chatRequests()); n != 6 {
			t.Errorf("%d model requests, want 6", n)
		}
	})
}

// TestWorkflowStop stops a turn during a long command.
func TestWorkflowStop(t *testing.T) {
	p := newParts(t, nil)
	e := p.newEnv("term:stop")
	var sleepStarted time.Time
	var during agentflow.SessionView
	var stop agentflow.StopResult
	var stopped agentflow.TurnResult
	err := e.runAgent(agentflow.AgentInput{},
		func(next func()) {
			both := &latch{n: 2, then: next}
			// Half a second after the sleep starts (wall clock, as an
			// activity is running), stop the turn.
			onStart(e, "RunTool", func(in agentflow.ToolInput) bool { return in.Call.Name == "shell" }, func() {
				sleepStarted = time.Now()
				e.env.RegisterDelayedCallback(func() {
					during = e.state()
					e.update(agentflow.UpdateStop, agentflow.StopRequest{By: "tester"}, nil, func(raw []byte, err error) {
						if err != nil {
							t.Errorf("stop: %v", err)
						} else if err := json.Unmarshal(raw, &stop); err != nil {
							t.Error(err)
						}
						both.done()
					})
				}, 500*time.Millisecond)
			})
			e.turn("long", "sleep: 30", func(r agentflow.TurnResult) { stopped = r })(both.done)
		},
		e.do(func() {
			if d := time.Since(sleepStarted); d > 20*time.Second {
				t.Errorf("the stop took %s", d)
			}
			if during.Status != agentflow.StatusRunning || len(during.Tools) != 1 || during.Tools[0].State != "running" ||
				during.Tools[0].Summary != "shell: sleep 30" {
				t.Errorf("state during the sleep: %+v", during)
			}
			if !stop.Stopped || stop.Turn != 1 {
				t.Errorf("stop result: %+v", stop)
			}
			if stopped.Status != agentflow.TurnStopped || stopped.Answer != "Stopped." || stopped.Turn != 1 {
				t.Errorf("stopped turn: %+v", stopped)
			}
			if v := e.state(); v.Status != agentflow.StatusIdle || len(v.Tools) != 0 || v.LastError != "" {
				t.Errorf("state after the stop: %+v", v)
			}
		}),
		// The next message works: the transcript holds an answer to the
		// cancelled call (or the fake would refuse it with 400).
		e.turn("next", "sh: echo still-usable", func(r agentflow.TurnResult) {
			if r.Status != agentflow.TurnDone || !strings.Contains(r.Answer, "still-usable") {
				t.Errorf("turn after the stop: %+v", r)
			}
			reqs := p.chatRequests()
			var cancelled bool
			for _, m := range reqs[len(reqs)-1].Call.Messages {
				cancelled = cancelled || (m.Role == "tool" && strings.Contains(m.Content, "stopped by the user"))
			}
			if !cancelled {
				t.Error("the model was not told that the sleep was stopped")
			}
		}),
		// A stop with no turn running says so.
		call(e, agentflow.UpdateStop, agentflow.StopRequest{}, func(r agentflow.StopResult, err error) {
			if err != nil || r.Stopped {
				t.Errorf("stop while idle: %+v %v", r, err)
			}
		}),
		// The stopped message's ID is remembered.
		e.send(agentflow.MessageRequest{ID: "long", Text: "sleep: 30"}, func(r agentflow.MessageResult, err error) {
			if err != nil || !r.Duplicate || r.Result == nil || r.Result.Status != agentflow.TurnStopped {
				t.Errorf("retry of the stopped message: %+v %v", r, err)
			}
		}),
		e.destroy(),
	)
	if err != nil {
		t.Fatal(err)
	}
	expectIn(t, "terminal", p.term.String(), "[stop] agent: Stopped.", "shell: sleep 30 (cancelled)")
}

// TestWorkflowControls covers title, switch and pause.
func TestWorkflowControls(t *testing.T) {
	p := newParts(t, nil)
	e := p.newEnv("term:controls")
	otherRoot := t.TempDir()
	err := e.runAgent(agentflow.AgentInput{},
		e.do(func() {
			if v := e.state(); v.Title != "session term:controls" || v.Backend != "local" || v.Status != agentflow.StatusIdle {
				t.Errorf("initial state: %+v", v)
			}
		}),
		// Titles.
		e.rejected(agentflow.UpdateTitle, agentflow.TitleRequest{Title: ""}, "title is empty"),
		e.rejected(agentflow.UpdateTitle, agentflow.TitleRequest{Title: " \t\x00\n "}, "title is empty"),
		e.rejected(agentflow.UpdateTitle, agentflow.TitleRequest{Title: strings.Repeat("é", agentflow.MaxTitleRunes+1)},
			fmt.Sprintf("title too long (%d characters, at most %d)", agentflow.MaxTitleRunes+1, agentflow.MaxTitleRunes)),
		call(e, agentflow.UpdateTitle, agentflow.TitleRequest{Title: strings.Repeat("é", agentflow.MaxTitleRunes)}, func(v agentflow.SessionView, err error) {
			if err != nil || v.Title != strings.Repeat("é", agentflow.MaxTitleRunes) {
				t.Errorf("longest title: %+v %v", v.Title, err)
			}
		}),
		call(e, agentflow.UpdateTitle, agentflow.TitleRequest{Title: "  fix\tthe\x1b[31m build\r\n\x7f now "}, func(v agentflow.SessionView, err error) {
			if err != nil || v.Title != "fix the [31m build now" {
				t.Errorf("title with control characters: %q %v", v.Title, err)
			}
		}),
		// Switch.
		e.rejected(agentflow.UpdateSwitch, agentflow.SwitchRequest{}, "switch needs a backend name"),
		e.rejected(agentflow.UpdateSwitch, agentflow.SwitchRequest{Backend: "local", Root: "work/dir"}, `root "work/dir" is not an absolute path`),
		call(e, agentflow.UpdateSwitch, agentflow.SwitchRequest{Backend: "local"}, func(r agentflow.SwitchResult, err error) {
			if err != nil || r.Changed || r.Message != "already on local; nothing to do" {
				t.Errorf("switch to the current backend: %+v %v", r, err)
			}
		}),
		e.turn("w", "write: notes.txt <<< kept across everything", func(r agentflow.TurnResult) {
			if r.Status != agentflow.TurnDone {
				t.Errorf("write turn: %+v", r)
			}
		}),
		call(e, agentflow.UpdateSwitch, agentflow.SwitchRequest{Backend: "nosuch"}, func(r agentflow.SwitchResult, err error) {
			if err == nil || !strings.Contains(err.Error(), "could not move to nosuch; still on local") {
				t.Errorf("switch to an unknown backend: %+v %v", r, err)
			}
			if v := e.state(); v.Backend != "local" || v.Status != agentflow.StatusIdle {
				t.Errorf("state after a failed switch: %+v", v)
			}
		}),
		// Local to local with another root: the workspace moves along.
		call(e, agentflow.UpdateSwitch, agentflow.SwitchRequest{Backend: "local", Root: otherRoot}, func(r agentflow.SwitchResult, err error) {
			if err != nil || !r.Changed || !strings.HasPrefix(r.Message, "switched local → local; ") {
				t.Errorf("switch to another root: %+v %v", r, err)
			}
			if v := e.state(); v.Root != otherRoot {
				t.Errorf("root after the switch: %+v", v)
			}
			if data, err := os.ReadFile(filepath.Join(otherRoot, "notes.txt")); err != nil || string(data) != "kept across everything" {
				t.Errorf("the file in the new root: %q %v", data, err)
			}
		}),
		// Pause, and the next message resumes.
		call(e, agentflow.UpdatePause, agentflow.PauseRequest{By: "tester"}, func(v agentflow.SessionView, err error) {
			if err != nil || v.Status != agentflow.StatusPaused || v.Snapshot == "" {
				t.Errorf("pause: %+v %v", v, err)
			}
		}),
		e.turn("r", "sh: cat notes.txt; pwd", func(r agentflow.TurnResult) {
			if r.Status != agentflow.TurnDone {
				t.Errorf("turn after pause: %+v", r)
			}
			expectIn(t, "answer after resume", r.Answer, "kept across everything", otherRoot)
			if v := e.state(); v.Status != agentflow.StatusIdle {
				t.Errorf("state after resume: %+v", v)
			}
		}),
		e.destroy(),
	)
	if err != nil {
		t.Fatal(err)
	}
	// The root was the user's: destroy leaves it.
	if _, err := os.Stat(filepath.Join(otherRoot, "notes.txt")); err != nil {
		t.Errorf("destroy removed the user's root: %v", err)
	}
	var renamed bool
	for _, r := range e.reported() {
		renamed = renamed || (r.Update == agentflow.ManagerUpdateRename && r.Entry.Title == "fix the [31m build now")
	}
	if !renamed {
		t.Errorf("no rename report: %+v", e.reported())
	}
}

// TestWorkflowOrdering sends a message and then a switch while a turn runs:
// the switch applies after the message's turn, as typed.
func TestWorkflowOrdering(t *testing.T) {
	g := newGate()
	p := newParts(t, g.first(fakeopenai.DirectiveScript()))
	t.Cleanup(g.open)
	e := p.newEnv("term:order")
	otherRoot := t.TempDir()
	switched := &latch{n: 1}
	onStart(e, "ModelStep", isModelStep, func() {
		e.update(agentflow.UpdateMessage, agentflow.MessageRequest{ID: "m2", Text: "sh: pwd"}, nil, func([]byte, error) {})
		e.update(agentflow.UpdateSwitch, agentflow.SwitchRequest{Backend: "local", Root: otherRoot}, nil, func(raw []byte, err error) {
			var r agentflow.SwitchResult
			if err == nil {
				err = json.Unmarshal(raw, &r)
			}
			if err != nil || !r.Changed {
				t.Errorf("switch: %+v %v", r, err)
			}
			switched.done()
		})
		g.open()
	})
	// The first two turns run in the sandbox's own workspace, the third in
	// the root switched to.
	err := e.runAgent(agentflow.AgentInput{},
		e.turn("m1", "sh: pwd", func(r agentflow.TurnResult) {
			expectIn(t, "first turn", r.Answer, "/workspace\n")
		}),
		e.resultOf("m2", func(r agentflow.TurnResult) {
			if r.Turn != 2 || strings.Contains(r.Answer, otherRoot) {
				t.Errorf("the message typed before the switch ran after it: %+v", r)
			}
			expectIn(t, "second turn", r.Answer, "/workspace\n")
		}),
		switched.wait(),
		e.turn("m3", "sh: pwd", func(r agentflow.TurnResult) {
			expectIn(t, "turn after the switch", r.Answer, otherRoot)
		}),
		e.destroy(),
	)
	if err != nil {
		t.Fatal(err)
	}
}

// TestWorkflowSandboxLost loses the sandbox in the middle of a turn: the
// next call gets a new sandbox from the last snapshot (losing only what
// came after it), and the user is told.
func TestWorkflowSandboxLost(t *testing.T) {
	p := newParts(t, nil)
	e := p.newEnv("term:lost")
	var firstRoot string
	err := e.runAgent(agentflow.AgentInput{},
		e.turn("m1", "write: a.txt <<< kept", func(r agentflow.TurnResult) {
			firstRoot = e.state().Root
		}),
		e.turn("m2", "write: b.txt <<< lost\nsh: rm -rf \"$PWD\"\nsh: echo in-the-new-one; ls", func(r agentflow.TurnResult) {
			if r.Status != agentflow.TurnDone {
				t.Errorf("turn that lost the sandbox: %+v", r)
			}
			expectIn(t, "answer", r.Answer, "The sandbox was gone", "restored the workspace from the last snapshot",
				"in-the-new-one\na.txt\n")
			if strings.Contains(r.Answer, "a.txt\nb.txt") {
				t.Errorf("b.txt came back though no snapshot had it:\n%s", r.Answer)
			}
			if v := e.state(); v.Root == firstRoot || v.Root == "" {
				t.Errorf("no new sandbox: %+v", v)
			}
		}),
		e.turn("m3", "sh: ls", func(r agentflow.TurnResult) {
			if r.Status != agentflow.TurnDone || strings.Contains(r.Answer, "sandbox was gone") {
				t.Errorf("turn after the loss: %+v", r)
			}
			expectIn(t, "answer", r.Answer, "a.txt")
		}),
		e.destroy(),
	)
	if err != nil {
		t.Fatal(err)
	}
}

// TestWorkflowContinueAsNew checks the hand-over of a session to a new run:
// forced after MaxTurnsPerRun turns, or suggested by the server.
func TestWorkflowContinueAsNew(t *testing.T) {
	t.Run("after max turns", func(t *testing.T) {
		p := newParts(t, nil)
		e := p.newEnv("term:can")
		var accepted3 agentflow.MessageResult
		// A third message arrives as the second turn delivers its answer.
		onStart(e, "Deliver", func(m agentflow.Outbound) bool {
			return m.Kind == agentflow.OutboundAnswer && m.Turn == 2
		}, func() {
			e.update(agentflow.UpdateMessage, agentflow.MessageRequest{ID: "m3", Text: "sh: cat a.txt b.txt"}, nil,
				func(raw []byte, err error) {
					if err != nil {
						t.Errorf("third message: %v", err)
						return
					}
					_ = json.Unmarshal(raw, &accepted3)
				})
		})
		err := e.runAgent(agentflow.AgentInput{Options: agentflow.AgentOptions{MaxTurnsPerRun: 2}},
			e.turn("m1", "write: a.txt <<< one", func(r agentflow.TurnResult) {
				if r.Status != agentflow.TurnDone {
					t.Errorf("turn 1: %+v", r)
				}
			}),
			// The run ends right after this turn: the carried state says
			// how it went.
			e.send(agentflow.MessageRequest{ID: "m2", Text: "write: b.txt <<< two"}, func(r agentflow.MessageResult, err error) {
				if err != nil || r.Queued != 1 {
					t.Errorf("second message: %+v %v", r, err)
				}
			}),
		)
		carry := continuedAs(t, err)
		if accepted3.Queued != 1 {
			t.Errorf("third message: %+v", accepted3)
		}
		// The third message is not lost: it ran before the hand-over, or
		// it is carried.
		var handled bool
		for _, r := range carry.Results {
			handled = handled || slices.Contains(r.MessageIDs, "m3")
		}
		carried := len(carry.Queue) == 1 && carry.Queue[0].ID == "m3"
		if handled == carried {
			t.Fatalf("the third message ran: %v, is carried: %v (exactly one must hold); carry %+v", handled, carried, carry)
		}
		wantTurns := 2
		if handled {
			wantTurns = 3
		}
		var usage llm.Usage
		for _, r := range carry.Results {
			usage.Add(r.Usage)
		}
		if carry.Turn != wantTurns || len(carry.Results) != wantTurns || usage.TotalTokens == 0 || carry.Usage != usage {
			t.Errorf("carried turns %d (want %d), usage %+v (turns sum to %+v)", carry.Turn, wantTurns, carry.Usage, usage)
		}
		if carry.ThreadKey != "term:can" || carry.Options.MaxTurnsPerRun != 2 || !carry.Registered ||
			carry.Sandbox == nil || carry.SnapshotKey == "" || carry.Transcript.Key == "" {
			t.Errorf("carried state: %+v", carry)
		}
		if !p.exists(carry.SnapshotKey) || !p.exists(carry.Transcript.Key) {
			t.Errorf("carried references point at nothing: %s %s", carry.SnapshotKey, carry.Transcript.Key)
		}
		// The run handed over only once every answer was delivered.
		for _, r := range carry.Results {
			if r.Status != agentflow.TurnDone || !r.Delivered {
				t.Errorf("carried result: %+v", r)
			}
		}

		// The next run goes on from the carried state alone, starting with
		// the carried message, if any. (It may run more turns than this one,
		// so that it ends by the destroy, not by another hand-over.)
		carry.Options.MaxTurnsPerRun = 10
		next := p.newEnv("term:can")
		err = next.runAgent(agentflow.AgentInput{ThreadKey: "term:can", Options: carry.Options, Carry: carry},
			next.resultOf("m3", func(r agentflow.TurnResult) {
				if r.Status != agentflow.TurnDone || (carried && r.Turn != carry.Turn+1) {
					t.Errorf("the third message: %+v", r)
				}
				expectIn(t, "answer", r.Answer, "one", "two")
			}),
			next.turn("m4", "sh: cat a.txt b.txt", func(r agentflow.TurnResult) {
				if r.Status != agentflow.TurnDone || r.Turn <= carry.Turn {
					t.Errorf("first turn of the next run: %+v", r)
				}
				expectIn(t, "answer", r.Answer, "one", "two")
				if v := next.state(); v.Usage.TotalTokens <= carry.Usage.TotalTokens {
					t.Errorf("usage restarted: %+v", v.Usage)
				}
				reqs := p.chatRequests()
				users := userTexts(reqs[len(reqs)-1])
				if len(users) < 3 || users[0] != "write: a.txt <<< one" {
					t.Errorf("the next run lost the conversation: %q", users)
				}
			}),
			next.destroy(),
		)
		if err != nil {
			t.Fatal(err)
		}
		// The next run did not register again.
		for _, r := range next.reported() {
			if r.Update == agentflow.ManagerUpdateCreate {
				t.Error("the continued run reported create again")
			}
		}
	})

	t.Run("suggested by the server", func(t *testing.T) {
		p := newParts(t, nil)
		e := p.newEnv("term:suggested")
		e.env.SetContinueAsNewSuggested(true)
		err := e.runAgent(agentflow.AgentInput{},
			e.send(agentflow.MessageRequest{ID: "m1", Text: "hello"}, func(_ agentflow.MessageResult, err error) {
				if err != nil {
					t.Error(err)
				}
			}),
		)
		carry := continuedAs(t, err)
		if carry.Turn != 1 || len(carry.Results) != 1 || carry.Results[0].Status != agentflow.TurnDone || !carry.Results[0].Delivered ||
			carry.Options.MaxTurnsPerRun != agentflow.DefaultMaxTurnsPerRun {
			t.Errorf("carried: %+v", carry)
		}
	})
}

// continuedAs returns the state carried by a continue-as-new error.
func continuedAs(t *testing.T, err error) *agentflow.AgentState {
	t.Helper()
	var can *workflow.ContinueAsNewError
	if !errors.As(err, &can) {
		t.Fatalf("the workflow ended with %v, want continue-as-new", err)
	}
	if can.WorkflowType.Name != agentflow.AgentWorkflowName {
		t.Fatalf("continued as %q", can.WorkflowType.Name)
	}
	var in agentflow.AgentInput
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &in); err != nil {
		t.Fatal(err)
	}
	if in.Carry == nil {
		t.Fatalf("continue-as-new without carried state: %+v", in)
	}
	return in.Carry
}

// TestWorkflowForkSource hands a fork its own copies and starts the fork from
// them.
func TestWorkflowForkSource(t *testing.T) {
	p := newParts(t, nil)
	parent := p.newEnv("term:parent")
	const forkThread = "term:parent-fork"
	var seed agentflow.ForkSeed
	err := parent.runAgent(agentflow.AgentInput{Title: "parent"},
		parent.turn("p1", "write: notes.txt <<< from the parent", func(agentflow.TurnResult) {}),
		parent.rejected(agentflow.UpdateForkSource, agentflow.ForkSourceRequest{ForkThreadKey: "term:parent"}, "fork needs a new thread key"),
		call(parent, agentflow.UpdateForkSource, agentflow.ForkSourceRequest{ForkThreadKey: forkThread}, func(s agentflow.ForkSeed, err error) {
			seed = s
			forkID := agentflow.AgentWorkflowID(forkThread)
			if err != nil || s.ForkNumber != 1 || s.ParentTitle != "parent" || s.ParentBackend != "local" ||
				s.SnapshotKey != store.SnapshotKey(forkID, 1) || !strings.HasPrefix(s.TranscriptKey, store.SessionPrefix(forkID)) ||
				len(s.Turns) != 1 || s.Usage.TotalTokens == 0 {
				t.Errorf("fork seed: %+v %v", s, err)
			}
		}),
		// A retried request gets the same seed and counts no second fork.
		call(parent, agentflow.UpdateForkSource, agentflow.ForkSourceRequest{ForkThreadKey: forkThread}, func(s agentflow.ForkSeed, err error) {
			if err != nil || s.SnapshotKey != seed.SnapshotKey || s.ForkNumber != 1 {
				t.Errorf("repeated fork seed: %+v %v", s, err)
			}
			if v := parent.state(); v.Forks != 1 {
				t.Errorf("forks: %d", v.Forks)
			}
		}),
		parent.destroy(),
	)
	if err != nil {
		t.Fatal(err)
	}
	// The parent's destroy deleted its data, not the fork's copies.
	if !p.exists(seed.SnapshotKey) || !p.exists(seed.TranscriptKey) {
		t.Fatal("the fork's copies went with the parent")
	}

	fork := p.newEnv(forkThread)
	err = fork.runAgent(agentflow.AgentInput{ThreadKey: forkThread, Title: "the fork", Parent: "term:parent", Seed: &seed},
		fork.do(func() {
			var ts []agentflow.TurnSummary
			fork.query(agentflow.QueryTranscript, &ts)
			if v := fork.state(); v.Parent != "term:parent" || v.Snapshot != seed.SnapshotKey || len(ts) != 1 {
				t.Errorf("fork state: %+v, transcript %+v", v, ts)
			}
		}),
		fork.turn("f1", "sh: cat notes.txt", func(r agentflow.TurnResult) {
			if r.Status != agentflow.TurnDone || !strings.Contains(r.Answer, "from the parent") {
				t.Errorf("fork's turn: %+v", r)
			}
			// The fork's model saw the parent's conversation.
			reqs := p.chatRequests()
			if got := userTexts(reqs[len(reqs)-1]); !slices.Equal(got, []string{"write: notes.txt <<< from the parent", "sh: cat notes.txt"}) {
				t.Errorf("fork's conversation: %q", got)
			}
		}),
		fork.destroy(),
	)
	if err != nil {
		t.Fatal(err)
	}
}

// newManagerEnv is a test environment for SessionManagerWorkflow, with
// ForkSession answered by fork.
func newManagerEnv(t *testing.T, fork func(agentflow.ForkSessionInput) (agentflow.ForkResult, error)) *agentEnv {
	p := &parts{t: t, logs: &testenv.Buffer{}, term: &testenv.Buffer{}}
	p.logger = slog.New(slog.NewTextHandler(p.logs, nil))
	p.acts = &agentflow.Activities{Logger: p.logger}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", p.logs.String())
		}
	})
	e := p.newEnv("slack:T1:C1:1.1")
	e.env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: agentflow.ManagerWorkflowID("slack:T1:C1:1.1"), TaskQueue: agentflow.TaskQueue})
	// ForkSession queries and updates agent workflows and starts one
	// through a Temporal client; there is no server here.
	e.env.OnActivity(p.acts.ForkSession, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in agentflow.ForkSessionInput) (agentflow.ForkResult, error) { return fork(in) })
	return e
}

// TestManagerWorkflow checks the session registry.
func TestManagerWorkflow(t *testing.T) {
	t.Run("registry", func(t *testing.T) {
		var forkCalls []agentflow.ForkSessionInput
		var mu sync.Mutex
		e := newManagerEnv(t, func(in agentflow.ForkSessionInput) (agentflow.ForkResult, error) {
			mu.Lock()
			defer mu.Unlock()
			forkCalls = append(forkCalls, in)
			if in.Request.RequestID == "broken" {
				return agentflow.ForkResult{}, temporal.NewNonRetryableApplicationError("forking is not supported on slack", "Permanent", nil)
			}
			thread := fmt.Sprintf("slack:T1:C1:fork.%d", in.Number)
			return agentflow.ForkResult{ThreadKey: thread, WorkflowID: agentflow.AgentWorkflowID(thread),
				Title: fmt.Sprintf("alpha (fork #%d)", in.Number), Backend: "local"}, nil
		})
		start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
		e.env.SetStartTime(start)
		const a, b, c = "slack:T1:C1:100.1", "slack:T1:C2:200.2", "slack:T1:C3:300.3"
		entry := func(thread, title string, created time.Time) agentflow.SessionEntry {
			return agentflow.SessionEntry{ThreadKey: thread, Title: title, Backend: "local", Created: created, Status: agentflow.StatusIdle}
		}
		upsert := func(update string, in agentflow.SessionEntry, check func(agentflow.SessionEntry)) step {
			return call(e, update, in, func(out agentflow.SessionEntry, err error) {
				if err != nil {
					t.Errorf("%s %s: %v", update, in.ThreadKey, err)
					return
				}
				check(out)
			})
		}
		lookup := func(thread string) *agentflow.SessionEntry {
			var out *agentflow.SessionEntry
			e.query(agentflow.ManagerQueryLookup, &out, thread)
			return out
		}
		list := func() []string {
			var l []agentflow.SessionEntry
			e.query(agentflow.ManagerQueryList, &l)
			var out []string
			for _, x := range l {
				out = append(out, x.ThreadKey)
			}
			return out
		}
		fork := func(id string, check func(agentflow.ForkResult, error)) step {
			return call(e, agentflow.ManagerUpdateFork, agentflow.ForkRequest{SourceThread: a, RequestID: id, Requester: "U1"}, check)
		}
		var first agentflow.ForkResult
		err := e.run(agentflow.SessionManagerWorkflowName, agentflow.ManagerInput{Platform: "slack", Tenant: "T1"},
			upsert(agentflow.ManagerUpdateCreate, entry(a, "a", start.Add(-time.Hour)), func(out agentflow.SessionEntry) {
				if out.WorkflowID != agentflow.AgentWorkflowID(a) {
					t.Errorf("workflow ID not filled in: %+v", out)
				}
			}),
			upsert(agentflow.ManagerUpdateCreate, entry(b, "b", start.Add(-2*time.Hour)), func(agentflow.SessionEntry) {}),
			// No creation time: the manager's clock.
			upsert(agentflow.ManagerUpdateCreate, entry(c, "c", time.Time{}), func(out agentflow.SessionEntry) {
				if d := out.Created.Sub(start); d < 0 || d > time.Second {
					t.Errorf("created %v, want the manager's clock (%v)", out.Created, start)
				}
			}),
			e.do(func() {
				if got := list(); !slices.Equal(got, []string{b, a, c}) {
					t.Errorf("list %q, want oldest first", got)
				}
			}),
			upsert(agentflow.ManagerUpdateRename, entry(a, "alpha", time.Time{}), func(out agentflow.SessionEntry) {
				if out.Title != "alpha" || !out.Created.Equal(start.Add(-time.Hour)) {
					t.Errorf("rename lost the creation time: %+v", out)
				}
			}),
			upsert(agentflow.ManagerUpdateSwitch, agentflow.SessionEntry{ThreadKey: a, Title: "alpha", Backend: "docker", Status: agentflow.StatusIdle},
				func(agentflow.SessionEntry) {}),
			e.do(func() {
				if got := lookup(a); got == nil || got.Title != "alpha" || got.Backend != "docker" || got.WorkflowID != agentflow.AgentWorkflowID(a) {
					t.Errorf("lookup after rename and switch: %+v", got)
				}
				if got := lookup("slack:T1:C9:9.9"); got != nil {
					t.Errorf("lookup of an unknown thread: %+v", got)
				}
			}),
			upsert(agentflow.ManagerUpdateDestroy, agentflow.SessionEntry{ThreadKey: b, Title: "b", Status: agentflow.StatusDestroyed}, func(agentflow.SessionEntry) {}),
			// A late report of an older state does not revive it.
			upsert(agentflow.ManagerUpdateRename, entry(b, "revived?", time.Time{}), func(out agentflow.SessionEntry) {
				if out.Status != agentflow.StatusDestroyed || out.Title != "b" {
					t.Errorf("late report answered %+v", out)
				}
			}),
			e.do(func() {
				if got := lookup(b); got == nil || got.Status != agentflow.StatusDestroyed || got.Title != "b" {
					t.Errorf("destroyed entry after a late report: %+v", got)
				}
			}),
			// Validators.
			e.rejected(agentflow.ManagerUpdateCreate, entry("slack:T2:C1:1.1", "x", start), `thread "slack:T2:C1:1.1" belongs to another tenant than slack:T1`),
			e.rejected(agentflow.ManagerUpdateRename, entry("discord:T1:C1", "x", start), "belongs to another tenant"),
			e.rejected(agentflow.ManagerUpdateCreate, agentflow.SessionEntry{}, "session entry without a thread key"),
			e.rejected(agentflow.ManagerUpdateFork, agentflow.ForkRequest{SourceThread: a}, "fork needs a request ID"),
			e.rejected(agentflow.ManagerUpdateFork, agentflow.ForkRequest{SourceThread: b, RequestID: "r"}, "that session was destroyed"),
			e.rejected(agentflow.ManagerUpdateFork, agentflow.ForkRequest{SourceThread: a, RequestID: "r", Title: "\x00"}, "title is empty"),
			// Forks, idempotent by request ID.
			fork("r1", func(r agentflow.ForkResult, err error) {
				first = r
				if err != nil || r.ThreadKey != "slack:T1:C1:fork.1" || r.Title != "alpha (fork #1)" {
					t.Errorf("fork: %+v %v", r, err)
				}
			}),
			fork("r1", func(r agentflow.ForkResult, err error) {
				if err != nil || r != first {
					t.Errorf("repeated fork: %+v %v, want %+v", r, err, first)
				}
			}),
			fork("r2", func(r agentflow.ForkResult, err error) {
				if err != nil || r.ThreadKey != "slack:T1:C1:fork.2" {
					t.Errorf("second fork: %+v %v", r, err)
				}
			}),
			fork("broken", func(r agentflow.ForkResult, err error) {
				if err == nil || !strings.Contains(err.Error(), "fork failed: forking is not supported on slack") {
					t.Errorf("failing fork: %+v %v", r, err)
				}
			}),
			e.do(func() {
				if got := list(); !slices.Equal(got, []string{b, a, c, "slack:T1:C1:fork.1", "slack:T1:C1:fork.2"}) {
					t.Errorf("list with forks: %q", got)
				}
				f := lookup("slack:T1:C1:fork.1")
				if f == nil || f.Parent != a || f.Requester != "U1" || f.Status != agentflow.StatusIdle {
					t.Errorf("fork entry: %+v", f)
				}
				if src := lookup(a); src == nil || src.Forks != 2 {
					t.Errorf("the source counts its forks (a failed one not): %+v", src)
				}
			}),
			// The source's own report (which knows no forks) keeps the
			// manager's count.
			upsert(agentflow.ManagerUpdateRename, entry(a, "alpha 2", time.Time{}), func(out agentflow.SessionEntry) {
				if out.Forks != 2 {
					t.Errorf("fork count after the source's report: %+v", out)
				}
			}),
			e.do(e.env.CancelWorkflow),
		)
		if !temporal.IsCanceledError(err) {
			t.Errorf("workflow: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		var numbers []int
		for _, c := range forkCalls {
			numbers = append(numbers, c.Number)
		}
		if !slices.Equal(numbers, []int{1, 2, 3}) {
			t.Errorf("ForkSession ran with numbers %v, want [1 2 3] (once per request ID)", numbers)
		}
	})

	t.Run("continue-as-new", func(t *testing.T) {
		e := newManagerEnv(t, func(in agentflow.ForkSessionInput) (agentflow.ForkResult, error) {
			return agentflow.ForkResult{ThreadKey: "term:forked", WorkflowID: agentflow.AgentWorkflowID("term:forked"), Backend: "local"}, nil
		})
		e.env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: agentflow.ManagerWorkflowID("term:x"), TaskQueue: agentflow.TaskQueue})
		in := agentflow.ManagerInput{Platform: "term", Tenant: "local", MaxUpdatesPerRun: 3}
		err := e.run(agentflow.SessionManagerWorkflowName, in,
			call(e, agentflow.ManagerUpdateCreate, agentflow.SessionEntry{ThreadKey: "term:x", Status: agentflow.StatusIdle}, func(_ agentflow.SessionEntry, err error) {
				if err != nil {
					t.Error(err)
				}
			}),
			call(e, agentflow.ManagerUpdateRename, agentflow.SessionEntry{ThreadKey: "term:x", Title: "x", Status: agentflow.StatusIdle}, func(_ agentflow.SessionEntry, err error) {
				if err != nil {
					t.Error(err)
				}
			}),
			call(e, agentflow.ManagerUpdateFork, agentflow.ForkRequest{SourceThread: "term:x", RequestID: "f1"}, func(_ agentflow.ForkResult, err error) {
				if err != nil {
					t.Error(err)
				}
			}),
		)
		var can *workflow.ContinueAsNewError
		if !errors.As(err, &can) || can.WorkflowType.Name != agentflow.SessionManagerWorkflowName {
			t.Fatalf("workflow ended with %v, want continue-as-new", err)
		}
		var next agentflow.ManagerInput
		if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
			t.Fatal(err)
		}
		if next.Platform != "term" || next.Tenant != "local" || next.MaxUpdatesPerRun != 3 || len(next.Sessions) != 2 ||
			next.Sessions[0].Title != "x" || next.Sessions[0].Forks != 1 || len(next.Forks) != 1 || next.Forks[0].RequestID != "f1" {
			t.Errorf("carried registry: %+v", next)
		}
	})
}
