package agentflow

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/agentbot/agentbot/agentflow/llm"
)

// AgentWorkflow is one session: the conversation of one chat thread with the
// agent, and the sandbox the agent works in. It idles between turns, runs one
// turn at a time, and serves the updates and queries named in api.go. Its
// workflow ID is AgentWorkflowID(threadKey).
func AgentWorkflow(ctx workflow.Context, in AgentInput) error {
	w := newAgent(ctx, in)
	if err := w.register(ctx); err != nil {
		return err
	}
	return w.run(ctx)
}

// agent is the running workflow: the state plus what exists only in this
// run (handles of the running turn).
type agent struct {
	AgentState
	workflowID string
	// lock is held by whatever does exclusive work on the session: a turn,
	// a switch, a fork, a pause, a destroy or an idle stop. Only its holder
	// releases it.
	lock       sessionLock
	cancelTurn workflow.CancelFunc
	tools      []ToolStatus
	// approval is the command waiting for approval in the running turn;
	// approvedAll the turn whose commands were all approved (by
	// approvedAllBy).
	approval      *ApprovalView
	approvedAll   int
	approvedAllBy string
	runTurns      int
	destroying    bool
	// controls are the control requests (switch, fork, pause, destroy)
	// waiting for the session, each with its place among the messages.
	controls []*control
	// The outbox holds chat messages not yet sent. None of it is carried
	// through continue-as-new: the run hands over only once it is empty.
	// lanes says this run sends answers apart from progress and titles
	// (answers, chatter); runs before that send all through one FIFO
	// (outbox, sending).
	lanes bool
	// localDeliver: the outbox sends through local activities
	// (changeLocalDelivery).
	localDeliver                  bool
	answers, progressLane, titles lane
	// postedProgress holds the progress messages of this run posted at
	// least once; progressSending the one being sent.
	postedProgress  map[string]bool
	progressSending string
	outbox          []Outbound
	sending         bool
	// carried says this run continued an earlier one.
	carried bool
	// signals carries messages sent as signals; policies the tenant's
	// policy as the manager sends it; grants the manager's answers to turn
	// tickets.
	signals, policies, grants workflow.ReceiveChannel
	// admission says this run registers new sessions for admission and
	// records when the session was last active (changeAdmission).
	admission bool
	// slot is the manager's latest answer for the running turn's ticket.
	slot   *TurnGrant
	logger log
}

// sessionLock is the session's one lock. It knows its holder, so a release
// by anyone else (a deferred release after the holder already let go and
// someone else took it) is a no-op.
type sessionLock struct {
	holder string // unique per acquisition: "turn/3", "switch/<update ID>"
	kind   string // "turn", "switch", "fork", "pause", "destroy", "idle"
}

func (l *sessionLock) free() bool { return l.holder == "" }

func (l *sessionLock) take(holder, kind string) { l.holder, l.kind = holder, kind }

// release lets go of the lock if holder holds it, and reports whether it did.
func (l *sessionLock) release(holder string) bool {
	if l.holder != holder || holder == "" {
		return false
	}
	l.holder, l.kind = "", ""
	return true
}

// control is a control request waiting for the session. seq is its place
// among the queued messages (they share one counter): messages that came
// before it run first, messages after it wait for it.
type control struct {
	holder string
	kind   string
	seq    int64
}

type log interface {
	Info(msg string, keyvals ...any)
	Warn(msg string, keyvals ...any)
	Error(msg string, keyvals ...any)
}

func newAgent(ctx workflow.Context, in AgentInput) *agent {
	w := &agent{workflowID: workflow.GetInfo(ctx).WorkflowExecution.ID}
	w.logger = workflow.GetLogger(ctx)
	if in.Carry != nil {
		w.AgentState = *in.Carry
		w.carried = true
		return w
	}
	w.ThreadKey = in.ThreadKey
	w.Title = in.Title
	w.Backend = in.Backend
	if w.Backend == "" {
		w.Backend = "local"
	}
	w.Root = in.Root
	w.Requester = in.Requester
	w.Admins = slices.Clone(in.Admins)
	w.Parent = in.Parent
	w.Options = in.Options.withDefaults()
	if in.Policy != nil {
		p := *in.Policy
		w.Policy = &p
	}
	w.Model = in.Model
	w.DefaultBackend = in.DefaultBackend
	w.Created = workflow.Now(ctx)
	if w.Title == "" {
		w.Title = "session " + in.ThreadKey
	}
	if s := in.Seed; s != nil {
		w.Transcript = TranscriptRef{Key: s.TranscriptKey}
		w.SnapshotKey = s.SnapshotKey
		w.Summaries = append([]TurnSummary(nil), s.Turns...)
		w.Pending = append([]llm.Message(nil), s.Pending...)
	}
	return w
}

func (w *agent) register(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, QueryState, func() (SessionView, error) {
		return w.view(), nil
	}); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(ctx, QueryMessage, func(id string) (MessageResult, error) {
		if w.seen(id) == nil {
			return MessageResult{}, errUnknownMessage
		}
		return w.messageResult(id), nil
	}); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(ctx, QueryTranscript, func(by string) ([]TurnSummary, error) {
		if !w.mayControl(by) {
			return nil, errors.New(ErrNotOwnerText)
		}
		return append([]TurnSummary(nil), w.Summaries...), nil
	}); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(ctx, QueryConversation, func(by string) (Conversation, error) {
		if !w.mayControl(by) {
			return Conversation{}, errors.New(ErrNotOwnerText)
		}
		return Conversation{Transcript: w.Transcript, Pending: slices.Clone(w.Pending)}, nil
	}); err != nil {
		return err
	}
	handlers := []struct {
		name      string
		handler   any
		validator any
	}{
		{UpdateMessage, w.onMessage, w.validateMessage},
		{UpdateSwitch, w.onSwitch, w.validateSwitch},
		{UpdateForkSource, w.onForkSource, w.validateForkSource},
		{UpdateTitle, w.onTitle, w.validateTitle},
		{UpdateStop, w.onStop, w.validateStop},
		{UpdatePause, w.onPause, w.validatePause},
		{UpdateDestroy, w.onDestroy, w.validateDestroy},
		{UpdateReset, w.onReset, w.validateReset},
		{UpdateModel, w.onModel, w.validateModel},
		{UpdateFork, w.onFork, w.validateFork},
		{UpdateApprove, w.onApprove, w.validateApprove},
		{UpdateApprovals, w.onApprovals, w.validateApprovals},
	}
	for _, h := range handlers {
		if err := workflow.SetUpdateHandlerWithOptions(ctx, h.name, h.handler,
			workflow.UpdateHandlerOptions{Validator: h.validator}); err != nil {
			return err
		}
	}
	return nil
}

// ErrDestroyedText is what a destroyed session answers.
const ErrDestroyedText = "this session was destroyed; start a new one"

// errUnknownMessage answers QueryMessage for an ID never seen.
var errUnknownMessage = errors.New("unknown message ID")

func (w *agent) alive() error {
	if w.Destroyed || w.destroying {
		return errors.New(ErrDestroyedText)
	}
	return nil
}

// ErrNotOwnerText is what a control request from someone other than the
// session's requester or an admin gets.
const ErrNotOwnerText = "only the person who started this session (or an admin) can do that"

// mayControl reports whether by may change or end the session: its
// requester and its admins may. A session with no recorded requester (the
// terminal, sessions from before owners were recorded) is anyone's.
func (w *agent) mayControl(by string) bool {
	if w.Requester == "" {
		return true
	}
	return by != "" && (by == w.Requester || slices.Contains(w.Admins, by))
}

// control checks that the session lives and that by may control it.
func (w *agent) controlBy(by string) error {
	if err := w.alive(); err != nil {
		return err
	}
	if !w.mayControl(by) {
		return errors.New(ErrNotOwnerText)
	}
	return nil
}

func (w *agent) validateStop(ctx workflow.Context, r StopRequest) error { return w.controlBy(r.By) }

func (w *agent) validateDestroy(ctx workflow.Context, r DestroyRequest) error {
	return w.controlBy(r.By)
}

func (w *agent) validatePause(ctx workflow.Context, r PauseRequest) error { return w.controlBy(r.By) }

func (w *agent) validateReset(ctx workflow.Context, r ResetRequest) error { return w.controlBy(r.By) }

// onReset starts a fresh conversation on the same workspace, after the
// turns and requests that came before it. The old transcript is copied to
// an archive key of the session's (deleted only with the session) and the
// session forgets it.
func (w *agent) onReset(ctx workflow.Context, r ResetRequest) (ResetResult, error) {
	res, err := w.reset(ctx)
	if r.Notify {
		w.notifyOutcome(ctx, err, fmt.Sprintf("Started a fresh conversation on the same workspace; the old one (%d turns) is kept for `export`.", res.Turns))
	}
	return res, err
}

func (w *agent) reset(ctx workflow.Context) (ResetResult, error) {
	holder, err := w.acquire(ctx, "reset")
	if err != nil {
		return ResetResult{}, err
	}
	defer w.lock.release(holder)
	res := ResetResult{Turns: len(w.Summaries)}
	if w.Transcript.Key != "" {
		w.Resets++
		dst := archiveKey(w.workflowID, w.Resets)
		var a *Activities
		if err := workflow.ExecuteActivity(storeCtx(ctx), a.CopyBlob, CopyInput{Src: w.Transcript.Key, Dst: dst}).Get(ctx, nil); err != nil {
			w.Resets--
			return res, fmt.Errorf("could not archive the conversation, so it was kept: %s", userError(err))
		}
		res.Archived = dst
	}
	// The summaries stay: export shows the turns before the reset too.
	w.Transcript, w.Pending, w.LastError = TranscriptRef{}, nil, ""
	return res, nil
}

// notifyOutcome posts the outcome of a control request that the gateway
// answered on acceptance: ok when it worked, the error's sentence when it
// did not. A session destroyed meanwhile says nothing more.
func (w *agent) notifyOutcome(ctx workflow.Context, err error, ok string) {
	text := ok
	if err != nil {
		if err.Error() == ErrDestroyedText {
			return
		}
		text = capitalize(err.Error()) + "."
	}
	w.deliver(ctx, Outbound{Kind: OutboundNotice, Turn: w.Turn,
		Key: w.workflowID + "/outcome/" + workflow.GetCurrentUpdateInfo(ctx).ID, Text: Text{Inline: text, Size: len(text)}})
}

// capitalize upper-cases the first letter of a sentence.
func capitalize(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	if n == 0 {
		return s
	}
	return string(unicode.ToUpper(r)) + s[n:]
}

func (w *agent) validateMessage(ctx workflow.Context, m MessageRequest) error {
	if err := w.alive(); err != nil {
		return err
	}
	if strings.TrimSpace(m.Text) == "" {
		return errors.New("empty message")
	}
	if len(m.Text) > MaxMessageBytes {
		return fmt.Errorf("message too long (%d bytes, at most %d); send it as a file", len(m.Text), MaxMessageBytes)
	}
	if len(m.ID) > 256 {
		return errors.New("message ID too long")
	}
	if m.ID != "" && w.seen(m.ID) != nil {
		return nil // a duplicate is answered, never refused
	}
	if len(w.Queue) >= MaxQueuedMessages {
		return fmt.Errorf("%d messages are already waiting; wait for the current turn to finish", len(w.Queue))
	}
	return nil
}

func (w *agent) validateSwitch(ctx workflow.Context, r SwitchRequest) error {
	if err := w.controlBy(r.By); err != nil {
		return err
	}
	if r.Backend == "" {
		return errors.New("switch needs a backend name")
	}
	if w.Policy != nil && !w.Policy.BackendAllowed(r.Backend) {
		return backendRefusal(r.Backend, *w.Policy)
	}
	if r.Root != "" && !strings.HasPrefix(r.Root, "/") {
		return fmt.Errorf("root %q is not an absolute path", r.Root)
	}
	return nil
}

func (w *agent) validateForkSource(ctx workflow.Context, r ForkSourceRequest) error {
	if err := w.controlBy(r.By); err != nil {
		return err
	}
	if r.ForkThreadKey == "" || r.ForkThreadKey == w.ThreadKey {
		return errors.New("fork needs a new thread key")
	}
	return nil
}

func (w *agent) validateTitle(ctx workflow.Context, r TitleRequest) error {
	if err := w.controlBy(r.By); err != nil {
		return err
	}
	_, err := cleanTitle(r.Title)
	return err
}

// cleanTitle strips control characters and checks the length.
func cleanTitle(t string) (string, error) {
	t = strings.Map(func(r rune) rune {
		switch {
		case unicode.Is(unicode.Bidi_Control, r):
			return -1
		case unicode.IsControl(r):
			return ' '
		}
		return r
	}, t)
	t = strings.Join(strings.Fields(t), " ")
	if t == "" {
		return "", errors.New("title is empty")
	}
	if n := utf8.RuneCountInString(t); n > MaxTitleRunes {
		return "", fmt.Errorf("title too long (%d characters, at most %d)", n, MaxTitleRunes)
	}
	return t, nil
}

// run is the main loop: wait for messages, run turns, stop an idle sandbox,
// continue-as-new when the history grows.
func (w *agent) run(ctx workflow.Context) error {
	w.startSignals(ctx)
	w.startOutbox(ctx)
	w.admission = workflow.GetVersion(ctx, changeAdmission, workflow.DefaultVersion, 1) >= 1
	w.startPolicySignals(ctx)
	if !w.Registered && w.admission {
		if reason := w.admitSession(ctx); reason != "" {
			return w.refuseSession(ctx, reason)
		}
	} else if !w.Registered {
		w.registerSession(ctx)
	} else if w.carried {
		// A new run: its memo must say what the state says.
		w.upsertMemo(ctx)
	}
	work := func() bool { return w.Destroyed || w.turnReady() }
	for {
		if w.SandboxUp && !w.Destroyed {
			ok, err := workflow.AwaitWithTimeout(ctx, w.Options.IdleTimeout, work)
			if err != nil {
				return err
			}
			if !ok {
				if w.lock.free() && w.SandboxUp && !w.destroying {
					const holder = "idle"
					w.lock.take(holder, "idle")
					w.stopIdle(ctx)
					w.lock.release(holder)
				}
				continue
			}
		} else if err := workflow.Await(ctx, work); err != nil {
			return err
		}
		if w.Destroyed {
			break
		}
		holder := fmt.Sprintf("turn/%d", w.Turn+1)
		w.lock.take(holder, "turn")
		w.runTurn(ctx)
		w.lock.release(holder)
		w.runTurns++

		if w.runTurns >= w.Options.MaxTurnsPerRun || workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			// Hand over only when nothing is in flight: no handler
			// running, nothing left to send. Queued messages are carried
			// over — unless a control request waits behind them (a
			// switch after a message): then run that turn first.
			if err := workflow.Await(ctx, func() bool {
				return w.Destroyed || w.turnBlocksControl() ||
					(w.lock.free() && w.outboxIdle() && workflow.AllHandlersFinished(ctx))
			}); err != nil {
				return err
			}
			// Messages signalled meanwhile are queued, so that they are
			// carried, not lost with this run; so is a new policy.
			w.drainSignals(ctx)
			w.drainPolicies()
			if !w.Destroyed && !w.turnBlocksControl() {
				carry := w.AgentState
				return workflow.NewContinueAsNewError(ctx, AgentWorkflowName, AgentInput{
					ThreadKey: w.ThreadKey, Options: w.Options, Carry: &carry,
				})
			}
		}
	}
	return workflow.Await(ctx, func() bool { return w.outboxIdle() && workflow.AllHandlersFinished(ctx) })
}

// oldestControl returns the control request that came first, or nil.
func (w *agent) oldestControl() *control {
	var first *control
	for _, c := range w.controls {
		if first == nil || c.seq < first.seq {
			first = c
		}
	}
	return first
}

// drainable returns how many queued messages the next turn may take: those
// that came before the oldest waiting control request (all of them when
// none waits). The queue is in arrival order.
func (w *agent) drainable() int {
	first := w.oldestControl()
	if first == nil {
		return len(w.Queue)
	}
	n := 0
	for n < len(w.Queue) && w.Queue[n].Seq < first.seq {
		n++
	}
	return n
}

// turnReady says the main loop may start a turn now: the session is free,
// no destroy was accepted, and a message waits that came before every
// waiting control request. It and controlReady are never both true, so the
// order of requests, not the order in which coroutines happen to run,
// decides what goes next.
func (w *agent) turnReady() bool {
	return w.lock.free() && !w.destroying && w.drainable() > 0
}

// turnBlocksControl says a control request waits for messages that came
// before it.
func (w *agent) turnBlocksControl() bool {
	return len(w.controls) > 0 && w.drainable() > 0
}

// controlReady says c may take the session now. A destroy goes first: it
// waits only for the lock (the running turn was cancelled). Any other
// request waits for the lock, for every message that came before it, and
// for every control request that came before it.
func (w *agent) controlReady(c *control) bool {
	if !w.lock.free() {
		return false
	}
	if c.kind == "destroy" {
		return true
	}
	if w.destroying {
		return false
	}
	return w.oldestControl() == c && w.drainable() == 0
}

// acquire waits until the session is free and it is this request's turn,
// then takes the lock for kind and returns the holder name to release it
// with. A request other than destroy that was waiting when a destroy came
// is refused.
func (w *agent) acquire(ctx workflow.Context, kind string) (string, error) {
	w.MsgSeq++
	c := &control{holder: kind + "/" + workflow.GetCurrentUpdateInfo(ctx).ID, kind: kind, seq: w.MsgSeq}
	w.controls = append(w.controls, c)
	err := workflow.Await(ctx, func() bool {
		return w.Destroyed || (w.destroying && kind != "destroy") || w.controlReady(c)
	})
	w.controls = slices.DeleteFunc(w.controls, func(x *control) bool { return x == c })
	if err != nil {
		return "", err
	}
	if w.Destroyed || (w.destroying && kind != "destroy") {
		return "", errors.New(ErrDestroyedText)
	}
	w.lock.take(c.holder, kind)
	return c.holder, nil
}

// turnRunning says a turn holds the session.
func (w *agent) turnRunning() bool { return w.lock.kind == "turn" }

func (w *agent) seen(id string) *SeenMessage {
	for i := len(w.Seen) - 1; i >= 0; i-- {
		if w.Seen[i].ID == id {
			return &w.Seen[i]
		}
	}
	return nil
}

func (w *agent) result(turn int) *TurnResult {
	for i := range w.Results {
		if w.Results[i].Turn == turn {
			return &w.Results[i]
		}
	}
	return nil
}

func (w *agent) onMessage(ctx workflow.Context, m MessageRequest) (MessageResult, error) {
	if m.ID == "" {
		m.ID = workflow.GetCurrentUpdateInfo(ctx).ID
	}
	return w.admit(ctx, m), nil
}

// startSignals receives messages sent as signals (SignalMessage): a signal
// is durable in the history the moment the chat side's call returns,
// with no worker running, which an update is not. A message that its
// validator would refuse is told to the thread instead (a signal cannot be
// refused); a repeated ID is dropped, as for the update.
func (w *agent) startSignals(ctx workflow.Context) {
	w.signals = workflow.GetSignalChannel(ctx, SignalMessage)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var m MessageRequest
			if !w.signals.Receive(ctx, &m) {
				return
			}
			w.admitSignal(ctx, m)
		}
	})
}

// drainSignals admits the messages signalled but not yet received.
func (w *agent) drainSignals(ctx workflow.Context) {
	for {
		var m MessageRequest
		if !w.signals.ReceiveAsync(&m) {
			return
		}
		w.admitSignal(ctx, m)
	}
}

func (w *agent) admitSignal(ctx workflow.Context, m MessageRequest) {
	if m.ID == "" {
		return // the chat side always names messages
	}
	if w.Destroyed || w.destroying {
		// Sent in the moment between the destroy and the end of the
		// workflow (after that, sending fails and the gateway says so).
		w.deliver(ctx, Outbound{Kind: OutboundNotice, Turn: w.Turn, Key: w.workflowID + "/refused/" + m.ID,
			Text: Text{Inline: ErrDestroyedText + ".", Size: len(ErrDestroyedText) + 1}})
		return
	}
	if w.seen(m.ID) == nil {
		if err := w.validateMessage(ctx, m); err != nil {
			text := fmt.Sprintf("A message could not be taken (%s): %s", err, cut(strings.TrimSpace(m.Text), 200))
			w.deliver(ctx, Outbound{Kind: OutboundNotice, Turn: w.Turn, Key: w.workflowID + "/refused/" + m.ID,
				Text: Text{Inline: text, Size: len(text)}})
			return
		}
	}
	w.admit(ctx, m)
}

// admit queues a message, or answers what became of it when its ID was
// seen before.
func (w *agent) admit(ctx workflow.Context, m MessageRequest) MessageResult {
	if s := w.seen(m.ID); s != nil {
		res := w.messageResult(m.ID)
		res.Duplicate = true
		return res
	}
	w.MsgSeq++
	w.Queue = append(w.Queue, QueuedMessage{ID: m.ID, Author: m.Author, User: m.User, Text: m.Text, At: workflow.Now(ctx), Seq: w.MsgSeq, Files: m.Files, Trace: m.Trace})
	w.Seen = append(w.Seen, SeenMessage{ID: m.ID})
	if len(w.Seen) > maxSeen {
		w.Seen = w.Seen[len(w.Seen)-maxSeen:]
	}
	return MessageResult{Queued: len(w.Queue)}
}

// messageResult says what became of a seen message.
func (w *agent) messageResult(id string) MessageResult {
	var res MessageResult
	s := w.seen(id)
	if s == nil {
		return res
	}
	res.Turn = s.Turn
	if s.Turn == 0 {
		for i, q := range w.Queue {
			if q.ID == id {
				res.Queued = i + 1
			}
		}
		return res
	}
	if r := w.result(s.Turn); r != nil {
		cp := *r
		res.Result = &cp
	} else if s.Turn < w.Turn || !w.turnRunning() {
		res.Forgotten = true
	}
	return res
}

func (w *agent) onTitle(ctx workflow.Context, r TitleRequest) (SessionView, error) {
	t, err := cleanTitle(r.Title)
	if err != nil {
		return w.view(), err
	}
	w.Title = t
	// The rename reached the chat only from version 1 on: sessions renamed
	// before it replay without that delivery.
	if workflow.GetVersion(ctx, changeTitleToChat, workflow.DefaultVersion, 1) >= 1 {
		w.Renames++
		w.deliver(ctx, Outbound{Kind: OutboundTitle, Title: t, Key: fmt.Sprintf("%s/title/%d", w.workflowID, w.Renames)})
	}
	if err := w.report(ctx, ManagerUpdateRename); err != nil {
		w.logger.Warn("reporting the new title to the session manager failed", "error", err)
	}
	return w.view(), nil
}

func (w *agent) onStop(ctx workflow.Context, r StopRequest) (StopResult, error) {
	if !w.turnRunning() || w.cancelTurn == nil {
		return StopResult{Queued: len(w.Queue)}, nil
	}
	turn := w.Turn
	w.cancelTurn()
	// Answer once the turn has really ended: its activities were cancelled
	// and waited for.
	if err := workflow.Await(ctx, func() bool { return w.result(turn) != nil }); err != nil {
		return StopResult{Turn: turn, Queued: len(w.Queue)}, err
	}
	res := w.result(turn)
	if res == nil { // forgotten already: only the last few are kept
		return StopResult{Stopped: true, Turn: turn, Queued: len(w.Queue)}, nil
	}
	stopped := res.Status == TurnStopped || res.Status == TurnCanceled
	if r.Notify && stopped && !w.destroying {
		w.notifyOutcome(ctx, nil, fmt.Sprintf("Stopped turn %d.", turn))
	}
	return StopResult{Stopped: stopped, Turn: turn, Queued: len(w.Queue)}, nil
}

func (w *agent) onPause(ctx workflow.Context, r PauseRequest) (SessionView, error) {
	v, err := w.pause(ctx)
	if r.Notify {
		w.notifyOutcome(ctx, err, "Paused: the workspace is saved and the sandbox stopped. Write here to pick it up again.")
	}
	return v, err
}

func (w *agent) pause(ctx workflow.Context) (SessionView, error) {
	holder, err := w.acquire(ctx, "pause")
	if err != nil {
		return w.view(), err
	}
	defer w.lock.release(holder)
	if w.Sandbox != nil && w.SandboxUp {
		if err := w.snapshot(ctx); err != nil {
			return w.view(), fmt.Errorf("could not save the workspace, so the sandbox keeps running: %s", userError(err))
		}
		if err := w.stopSandbox(ctx); err != nil {
			return w.view(), err
		}
	}
	w.Paused = true
	w.lifecycle(ctx, LifecyclePaused)
	// Let a waiting turn start while the registry learns of the pause.
	w.lock.release(holder)
	if err := w.report(ctx, ManagerUpdateSwitch); err != nil {
		w.logger.Warn("reporting the pause to the session manager failed", "error", err)
	}
	return w.view(), nil
}

// lifecycle tells the chat that the session is now paused or destroyed
// (OutboundLifecycle), in sessions that reached changeLifecycleOutbound.
func (w *agent) lifecycle(ctx workflow.Context, state string) {
	if workflow.GetVersion(ctx, changeLifecycleOutbound, workflow.DefaultVersion, 1) < 1 {
		return
	}
	w.deliver(ctx, Outbound{Kind: OutboundLifecycle, Lifecycle: state, Turn: w.Turn,
		Key: fmt.Sprintf("%s/lifecycle/%s/%d", w.workflowID, state, w.Turn)})
}

func (w *agent) onDestroy(ctx workflow.Context, r DestroyRequest) (SessionView, error) {
	w.destroying = true
	if w.turnRunning() && w.cancelTurn != nil {
		w.cancelTurn()
	}
	holder, err := w.acquire(ctx, "destroy")
	if err != nil {
		return w.view(), err
	}
	defer w.lock.release(holder)
	if w.Sandbox != nil {
		var a *Activities
		err := workflow.ExecuteActivity(sandboxCtx(ctx, 5*time.Minute), a.DestroySandbox,
			SandboxInput{State: *w.Sandbox}).Get(ctx, nil)
		if err != nil {
			w.destroying = false
			err = fmt.Errorf("could not destroy the sandbox: %s", userError(err))
			if r.Notify {
				w.notifyOutcome(ctx, err, "")
			}
			return w.view(), err
		}
		w.Sandbox, w.SandboxUp = nil, false
	}
	var a *Activities
	if err := workflow.ExecuteActivity(storeCtx(ctx), a.DeleteSessionData, w.workflowID).Get(ctx, nil); err != nil {
		w.logger.Warn("deleting session data failed", "error", err)
	}
	w.Destroyed = true
	w.Queue = nil
	if r.Notify {
		text := "Destroyed: the sandbox and the session's data are deleted."
		w.deliver(ctx, Outbound{Kind: OutboundNotice, Turn: w.Turn, Key: w.workflowID + "/destroyed", Text: Text{Inline: text, Size: len(text)}})
	}
	w.lifecycle(ctx, LifecycleDestroyed)
	if err := w.report(ctx, ManagerUpdateDestroy); err != nil {
		w.logger.Warn("reporting the destroy to the session manager failed", "error", err)
	}
	return w.view(), nil
}

// onSwitch moves the session to another backend. A switch that arrives
// during a turn waits for the turn to end.
func (w *agent) onSwitch(ctx workflow.Context, r SwitchRequest) (SwitchResult, error) {
	res, err := w.switchTo(ctx, r)
	if r.Notify {
		w.notifyOutcome(ctx, err, capitalize(res.Message)+".")
	}
	return res, err
}

func (w *agent) switchTo(ctx workflow.Context, r SwitchRequest) (SwitchResult, error) {
	holder, err := w.acquire(ctx, "switch")
	if err != nil {
		return SwitchResult{}, err
	}
	defer w.lock.release(holder)
	res := SwitchResult{From: w.Backend, To: r.Backend}
	if r.Backend == w.Backend && (r.Root == "" || r.Root == w.Root) {
		res.Message = fmt.Sprintf("already on %s; nothing to do", w.Backend)
		return res, nil
	}
	// With no sandbox yet, the new one is made now all the same: that
	// checks the backend and root before the switch is recorded.
	if w.Sandbox != nil {
		if err := w.ensureUp(ctx); err != nil {
			return res, err
		}
		if err := w.snapshot(ctx); err != nil {
			return res, fmt.Errorf("could not save the workspace; still on %s: %s", w.Backend, userError(err))
		}
	}
	var a *Activities
	var ens EnsureSandboxResult
	err = workflow.ExecuteActivity(sandboxCtx(ctx, 15*time.Minute), a.EnsureSandbox, EnsureSandboxInput{
		SessionID: w.workflowID, Backend: r.Backend, Root: r.Root, Title: w.Title, SnapshotKey: w.SnapshotKey,
		Generation: w.SandboxGen + 1,
	}).Get(ctx, &ens)
	if err != nil {
		return res, fmt.Errorf("could not move to %s; still on %s: %s", r.Backend, w.Backend, userError(err))
	}
	if ens.Created {
		w.SandboxGen++
	}
	old := w.Sandbox
	w.Sandbox, w.SandboxUp, w.Backend, w.Root, w.Paused = &ens.State, true, r.Backend, r.Root, false
	if old != nil {
		if err := workflow.ExecuteActivity(sandboxCtx(ctx, 5*time.Minute), a.DestroySandbox,
			SandboxInput{State: *old}).Get(ctx, nil); err != nil {
			w.logger.Warn("destroying the old sandbox failed", "sandbox_id", old.ID, "error", err)
		}
	}
	res.Changed = true
	res.Message = fmt.Sprintf("switched %s → %s; %d files came along", res.From, res.To, ens.Info.Files)
	if err := w.report(ctx, ManagerUpdateSwitch); err != nil {
		w.logger.Warn("reporting the switch to the session manager failed", "error", err)
	}
	return res, nil
}

// onForkSource snapshots the workspace and copies it and the transcript to
// keys of the fork's own.
func (w *agent) onForkSource(ctx workflow.Context, r ForkSourceRequest) (ForkSeed, error) {
	for _, rec := range w.ForkSeeds {
		if rec.ForkThreadKey == r.ForkThreadKey {
			seed := rec.Seed
			seed.Turns = append([]TurnSummary(nil), w.Summaries...)
			seed.Pending = append([]llm.Message(nil), w.Pending...)
			return seed, nil
		}
	}
	holder, err := w.acquire(ctx, "fork")
	if err != nil {
		return ForkSeed{}, err
	}
	defer w.lock.release(holder)
	return w.makeSeed(ctx, r.ForkThreadKey)
}

// makeSeed snapshots the workspace (if changed) and copies it and the
// transcript to keys of the fork's own; the caller holds the lock. The seed
// is remembered, so that a retried fork gets the same copies.
func (w *agent) makeSeed(ctx workflow.Context, forkThread string) (ForkSeed, error) {
	if w.Sandbox != nil && w.SandboxUp && (w.Dirty || w.SnapshotKey == "") {
		if err := w.snapshot(ctx); err != nil {
			return ForkSeed{}, fmt.Errorf("could not save the workspace for the fork: %s", userError(err))
		}
	}
	forkID := AgentWorkflowID(forkThread)
	seed := ForkSeed{ParentTitle: w.Title, ParentBackend: w.Backend, Usage: w.Usage,
		Options: w.Options, Admins: slices.Clone(w.Admins),
		Turns: append([]TurnSummary(nil), w.Summaries...), Pending: append([]llm.Message(nil), w.Pending...)}
	var a *Activities
	if w.SnapshotKey != "" {
		dst := snapshotKey(forkID, 1)
		if err := workflow.ExecuteActivity(storeCtx(ctx), a.CopyBlob, CopyInput{Src: w.SnapshotKey, Dst: dst}).Get(ctx, nil); err != nil {
			return ForkSeed{}, fmt.Errorf("could not copy the workspace: %s", userError(err))
		}
		seed.SnapshotKey = dst
	}
	if w.Transcript.Key != "" {
		dst := transcriptKey(forkID, 0)
		if err := workflow.ExecuteActivity(storeCtx(ctx), a.CopyBlob,
			CopyInput{Src: w.Transcript.Key, Dst: dst}).Get(ctx, nil); err != nil {
			return ForkSeed{}, fmt.Errorf("could not copy the transcript: %s", userError(err))
		}
		seed.TranscriptKey = dst
	}
	w.Forks++
	seed.ForkNumber = w.Forks
	rec := seed
	rec.Turns, rec.Pending = nil, nil // keep the carried state small
	w.ForkSeeds = append(w.ForkSeeds, ForkSeedRecord{ForkThreadKey: forkThread, Seed: rec})
	if len(w.ForkSeeds) > maxForkSeeds {
		w.ForkSeeds = w.ForkSeeds[1:]
	}
	return seed, nil
}

func (w *agent) status() SessionStatus {
	switch {
	case w.Destroyed:
		return StatusDestroyed
	case w.turnRunning():
		return StatusRunning
	case !w.lock.free() && w.lock.kind != "idle":
		return StatusBusy
	case w.Paused:
		return StatusPaused
	default:
		return StatusIdle
	}
}

func (w *agent) view() SessionView {
	v := SessionView{
		ThreadKey: w.ThreadKey, WorkflowID: w.workflowID, Title: w.Title, Backend: w.Backend,
		Root: w.Root, Status: w.status(), Turn: w.Turn, Queued: len(w.Queue),
		Tools: append([]ToolStatus(nil), w.tools...), Usage: w.Usage, Forks: w.Forks,
		Parent: w.Parent, Requester: w.Requester, Created: w.Created, LastError: w.LastError,
		Snapshot: w.SnapshotKey, Options: w.Options,
		Undelivered: slices.Clone(w.Undelivered), Trace: w.LastTrace, Model: w.Model,
	}
	if w.Policy != nil {
		v.TokenBudget = w.Policy.SessionTokens
	}
	if v.Status == StatusBusy {
		v.Activity = w.lock.kind
	}
	v.Approvals = w.approvalMode()
	if w.approval != nil {
		a := *w.approval
		a.Approvers = slices.Clone(a.Approvers)
		v.Approval = &a
	}
	if w.slot != nil && !w.slot.Granted && w.turnRunning() {
		v.QueuedBehind = w.slot.Behind
	}
	if w.Sandbox != nil {
		v.SandboxID, v.SandboxUp = w.Sandbox.ID, w.SandboxUp
		if v.Root == "" {
			v.Root = w.Sandbox.Root
		}
	}
	return v
}

func (w *agent) entry() SessionEntry {
	return SessionEntry{
		ThreadKey: w.ThreadKey, WorkflowID: w.workflowID, Title: w.Title, Backend: w.Backend,
		Parent: w.Parent, Requester: w.Requester, Created: w.Created, Status: w.registryStatus(), Forks: w.Forks,
		Updated: w.MemoAt, Model: w.Model,
	}
}

// registryStatus is the status the session manager records: whether the
// session lives, rests or is gone, not what it is doing this second.
func (w *agent) registryStatus() SessionStatus {
	switch {
	case w.Destroyed:
		return StatusDestroyed
	case w.Paused:
		return StatusPaused
	default:
		return StatusIdle
	}
}

// report tells the session manager about a change. Its error is for the
// log only: the registry is a view, and the next report corrects it (the
// manager keeps the newest entry). Whether a session exists is a fact of
// Temporal (its workflow), not of the registry.
func (w *agent) report(ctx workflow.Context, update string) error {
	w.upsertMemo(ctx)
	var a *Activities
	return workflow.ExecuteActivity(reportCtx(ctx), a.Report, ReportInput{Update: update, Entry: w.entry()}).Get(ctx, nil)
}

// upsertMemo keeps the session's registry entry in its own memo, where
// Client.List finds it through Temporal's visibility: the list of a tenant
// does not depend on the manager (which carries a bounded window) nor on a
// report getting through.
func (w *agent) upsertMemo(ctx workflow.Context) {
	if workflow.GetVersion(ctx, changeRegistryMemo, workflow.DefaultVersion, 1) < 1 {
		return
	}
	if w.admission {
		w.MemoAt = workflow.Now(ctx)
	}
	if err := workflow.UpsertMemo(ctx, map[string]any{MemoSession: w.entry()}); err != nil {
		w.logger.Warn("recording the session in its memo failed", "error", err)
	}
}

// registerSession reports the session to its manager; Registered says the
// manager accepted it. A failed report is tried again in the background,
// with growing pauses, until it succeeds (or, in a later run, from the
// start), so that list and fork learn of the session; turns do not wait
// for it.
func (w *agent) registerSession(ctx workflow.Context) {
	if err := w.report(ctx, ManagerUpdateCreate); err == nil {
		w.Registered = true
		return
	} else {
		w.logger.Warn("registering with the session manager failed; will try again", "error", err)
	}
	workflow.Go(ctx, func(ctx workflow.Context) {
		wait := registerRetryMin
		for !w.Registered && !w.Destroyed {
			if err := workflow.Sleep(ctx, wait); err != nil {
				return
			}
			if w.Destroyed {
				return
			}
			if err := w.report(ctx, ManagerUpdateCreate); err != nil {
				w.logger.Warn("registering with the session manager failed; will try again", "error", err)
				wait = min(2*wait, registerRetryMax)
				continue
			}
			w.Registered = true
		}
	})
}

// Pauses between attempts to register a session with its manager.
const (
	registerRetryMin = time.Minute
	registerRetryMax = 30 * time.Minute
)

// ensureUp makes sure the session has a running sandbox, creating or
// restoring one as needed, and records what happened for the user.
func (w *agent) ensureUp(ctx workflow.Context) error {
	if w.Sandbox != nil && w.SandboxUp {
		return nil
	}
	var a *Activities
	var ens EnsureSandboxResult
	err := workflow.ExecuteActivity(sandboxCtx(ctx, 15*time.Minute), a.EnsureSandbox, EnsureSandboxInput{
		SessionID: w.workflowID, Current: w.Sandbox, Backend: w.Backend, Root: w.Root,
		Title: w.Title, SnapshotKey: w.SnapshotKey, Generation: w.SandboxGen + 1,
	}).Get(ctx, &ens)
	if err != nil {
		return err
	}
	if ens.Created {
		w.SandboxGen++
	}
	w.Sandbox, w.SandboxUp = &ens.State, true
	if w.Paused {
		w.Paused = false
		if err := w.report(ctx, ManagerUpdateSwitch); err != nil {
			w.logger.Warn("reporting the resume to the session manager failed", "error", err)
		}
	}
	if ens.Lost {
		// Dirty still says whether the lost workspace had changes the
		// snapshot lacks: what the person lost, if anything.
		switch {
		case ens.Restored && !w.Dirty:
			w.notice("The sandbox was gone (expired or removed outside); I made a new one and restored the workspace from the last snapshot, taken after its last change, so nothing in the workspace was lost. Programs that were running, and anything outside the workspace, are gone.")
		case ens.Restored:
			w.notice("The sandbox was gone (expired or removed outside); I made a new one and restored the workspace from the last snapshot. Changes made after that snapshot, if any, are lost.")
		default:
			w.notice("The sandbox was gone (expired or removed outside) and there was no snapshot; I started an empty one.")
		}
	}
	return nil
}

func (w *agent) notice(s string) {
	w.Notices = append(w.Notices, s)
	if len(w.Notices) > maxNotices {
		w.Notices = w.Notices[1:]
	}
}

// snapshot writes the workspace to a new key and makes it the session's
// snapshot; the previous one is deleted.
func (w *agent) snapshot(ctx workflow.Context) error {
	if w.Sandbox == nil {
		return nil
	}
	var a *Activities
	gen := w.SnapshotGen + 1
	key := snapshotKey(w.workflowID, gen)
	if w.SnapshotKey == key {
		gen++
		key = snapshotKey(w.workflowID, gen)
	}
	var res SnapshotResult
	if err := workflow.ExecuteActivity(sandboxCtx(ctx, 30*time.Minute), a.SnapshotSandbox,
		SnapshotInput{State: *w.Sandbox, Key: key, Previous: w.SnapshotKey, Fingerprint: w.SnapshotFingerprint}).Get(ctx, &res); err != nil {
		return err
	}
	w.Dirty, w.SnapshotFingerprint = false, res.Fingerprint
	if !res.Unchanged {
		w.SnapshotKey, w.SnapshotGen = key, gen
	}
	return nil
}

func (w *agent) stopSandbox(ctx workflow.Context) error {
	var a *Activities
	if err := workflow.ExecuteActivity(sandboxCtx(ctx, 5*time.Minute), a.StopSandbox,
		SandboxInput{State: *w.Sandbox}).Get(ctx, nil); err != nil {
		return fmt.Errorf("could not stop the sandbox: %s", userError(err))
	}
	w.SandboxUp = false
	return nil
}

// stopIdle snapshots and stops a sandbox nobody used for IdleTimeout.
func (w *agent) stopIdle(ctx workflow.Context) {
	if w.Dirty || w.SnapshotKey == "" {
		if err := w.snapshot(ctx); err != nil {
			w.logger.Warn("idle snapshot failed; the sandbox keeps running", "error", err)
			return
		}
	}
	if err := w.stopSandbox(ctx); err != nil {
		w.logger.Warn("idle stop failed", "error", err)
	}
}

// runTurn drains the queue into one model input and runs the agent loop to a
// final answer, the step limit, a stop or an error.
func (w *agent) runTurn(ctx workflow.Context) {
	turnCtx, cancel := workflow.WithCancel(ctx)
	w.cancelTurn = cancel
	defer func() { cancel(); w.cancelTurn = nil; w.tools = nil }()

	// Take the messages that came before any waiting control request; the
	// rest wait for it.
	n := w.drainable()
	msgs := slices.Clone(w.Queue[:n])
	w.Queue = slices.Delete(w.Queue, 0, n)
	if len(w.Queue) == 0 {
		w.Queue = nil
	}
	if len(msgs) > 0 {
		w.DrainedSeq = msgs[len(msgs)-1].Seq
	}
	w.Turn++
	turn := w.Turn
	endTurn := w.turnMetrics(ctx)
	// The turn's spans join the trace of its newest message (no
	// commands change: only the activities' headers).
	turnCtx, w.LastTrace = withTurnTrace(turnCtx, msgs)
	res := TurnResult{Turn: turn, Status: TurnRunning}
	for _, m := range msgs {
		res.MessageIDs = append(res.MessageIDs, m.ID)
		if s := w.seen(m.ID); s != nil {
			s.Turn = turn
		}
	}
	userText := combine(msgs)
	w.tools = nil
	// IDs and counts only: message text never goes to the log.
	w.logger.Info("turn started", "turn", turn, "messages", len(msgs), "backend", w.Backend)
	w.progress(ctx, turn, TurnRunning, true)

	var answer Text
	streamed := false // the answer was shown as the model wrote it
	var failure error
	modelRefused := false // the model refused the conversation for good
	stopped := func() bool { return turnCtx.Err() != nil }

	// The tenant's policy: a turn slot when turns are limited across
	// sessions, and the token budgets.
	refusal := ""
	ticket := w.Policy.needsTickets()
	user := turnUser(msgs)
	if ticket {
		refusal = w.awaitSlot(ctx, turnCtx, turn, user)
	}
	if refusal == "" && !stopped() {
		refusal = w.budgetRefusal()
	}
	if refusal != "" {
		failure = errors.New(refusal)
	}
	model := w.turnModel()

	if failure == nil && !stopped() {
		if err := w.ensureUp(turnCtx); err != nil && !stopped() {
			failure = fmt.Errorf("the sandbox could not start: %s", userError(err))
		}
	}
	if failure == nil && !stopped() {
		userText += w.importFiles(turnCtx, msgs)
	}
	appendMsgs := append(w.Pending, llm.Message{Role: llm.RoleUser, Content: userText})
	w.Pending = nil
	for step := 1; failure == nil && !stopped(); step++ {
		if step > 1 {
			if refusal = w.budgetRefusal(); refusal != "" {
				failure = errors.New(refusal)
				break
			}
		}
		res.Steps = step
		var out ModelStepResult
		var a *Activities
		err := workflow.ExecuteActivity(modelCtx(turnCtx), a.ModelStep, ModelStepInput{
			SessionID: w.workflowID, Turn: turn, Step: step, Transcript: w.Transcript, Append: appendMsgs,
			Backend: w.Backend, Root: w.Sandbox.Root, FinalOnly: step >= w.Options.MaxSteps, Model: model, User: user,
		}).Get(turnCtx, &out)
		if err != nil {
			if !stopped() {
				failure = fmt.Errorf("the model call failed: %s", userError(err))
				modelRefused = permanentErr(err)
			}
			break
		}
		w.Transcript = out.Transcript
		appendMsgs = nil
		res.Usage.Add(out.Usage)
		w.Usage.Add(out.Usage)
		if len(out.ToolCalls) == 0 {
			answer = out.Answer
			streamed = out.Streamed
			res.Status = TurnDone
			if step >= w.Options.MaxSteps {
				// The last step was asked to answer without tools.
				res.Status = TurnStepCap
				w.notice(fmt.Sprintf("(This turn reached its limit of %d steps, so the answer below may be unfinished. Say \"continue\" and I will go on.)", w.Options.MaxSteps))
			}
			break
		}
		appendMsgs = w.runTools(ctx, turnCtx, turn, step, out.ToolCalls)
	}
	if len(appendMsgs) > 0 && res.Status == TurnRunning {
		w.Pending = append(w.Pending, appendMsgs...)
		if !w.destroying && workflow.GetVersion(ctx, changePendingToTranscript, workflow.DefaultVersion, 1) >= 1 {
			w.savePending(ctx)
		}
	}

	switch {
	case res.Status == TurnDone || res.Status == TurnStepCap:
	case w.destroying:
		res.Status = TurnCanceled
		answer = Text{Inline: "Stopped: the session is being destroyed."}
	case refusal != "":
		res.Status = TurnRefused
		res.Error = refusal
		answer = Text{Inline: "Sorry — " + refusal + ". Your message is kept: it goes to the model with the next turn that may run."}
	case failure == nil && stopped():
		res.Status = TurnStopped
		answer = Text{Inline: "Stopped."}
	default:
		res.Status = TurnFailed
		res.Error = userError(failure)
		w.LastError = res.Error
		answer = Text{Inline: "Sorry — " + res.Error + fmt.Sprintf(" (turn %d of %s; your message is kept and will be sent again with the next one)", turn, w.workflowID)}
		if modelRefused {
			answer.Inline += " If this keeps happening, say `reset` to start a fresh conversation on the same workspace (the old one is kept for `export`)."
		}
	}
	if len(w.Notices) > 0 {
		notes := strings.Join(w.Notices, "\n")
		w.Notices = nil
		if answer.Ref == "" {
			answer.Inline = notes + "\n\n" + answer.Inline
			answer.Size = len(answer.Inline)
		} else {
			w.deliver(ctx, Outbound{Kind: OutboundNotice, Turn: turn, Key: fmt.Sprintf("%s/%d/notice", w.workflowID, turn), Text: Text{Inline: notes}})
		}
	}
	res.Answer = preview(answer, MaxResultAnswer)
	// Keep the workspace recoverable: losing the sandbox between turns
	// costs at most this turn's changes. The snapshot is skipped when the
	// workspace's fingerprint did not change (SnapshotSandbox).
	if w.Dirty && w.Sandbox != nil && w.SandboxUp && !w.destroying {
		if err := w.snapshot(ctx); err != nil {
			w.logger.Warn("snapshot after turn failed", "turn", turn, "error", err)
		}
	}
	res.Delivered = w.destroying
	if ticket {
		w.returnSlot(ctx, turn, user, usedTokens(res.Usage))
	}
	if w.admission && !w.destroying && workflow.Now(ctx).Sub(w.MemoAt) >= memoActiveEvery {
		w.upsertMemo(ctx) // when the session was last active, for list
	}
	w.addResult(res, userText)
	endTurn(res.Status)
	w.logger.Info("turn finished", "turn", turn, "status", res.Status, "steps", res.Steps,
		"backend", w.Backend, "sandbox_id", w.sandboxID())
	w.progress(ctx, turn, res.Status, true)
	if !w.destroying {
		w.deliver(ctx, Outbound{Kind: OutboundAnswer, Turn: turn, Key: fmt.Sprintf("%s/%d/answer", w.workflowID, turn), Text: answer, Status: res.Status,
			MessageIDs: res.MessageIDs, Streamed: streamed})
	}
}

// sandboxID is the ID of the session's sandbox, for the log; "" when it
// has none.
func (w *agent) sandboxID() string {
	if w.Sandbox == nil {
		return ""
	}
	return w.Sandbox.ID
}

// savePending writes the messages of a turn that failed or was stopped into
// the transcript, so that the state (carried through continue-as-new and
// sent with the next model call) does not grow with every failed turn. If
// the blob store cannot take them now, they stay in Pending, bounded: the
// oldest user messages past the bound are dropped, and the user is told.
func (w *agent) savePending(ctx workflow.Context) {
	var a *Activities
	var ref TranscriptRef
	err := workflow.ExecuteActivity(storeCtx(ctx), a.AppendTranscript, AppendInput{
		SessionID: w.workflowID, Transcript: w.Transcript, Messages: w.Pending,
	}).Get(ctx, &ref)
	if err == nil {
		w.Transcript, w.Pending = ref, nil
		return
	}
	w.logger.Warn("keeping the messages of a failed turn in the transcript failed", "error", err)
	if dropped := boundPending(&w.Pending); dropped > 0 {
		w.notice(fmt.Sprintf("(%d earlier messages could not be kept while the model and the blob store were failing; please send them again.)", dropped))
	}
}

// Bounds of AgentState.Pending when it cannot be saved to the transcript.
const (
	maxPendingMessages = 64
	maxPendingBytes    = 256 << 10
)

// boundPending drops the oldest user messages of p until it is within the
// bounds (tool results stay: each answers a call in the transcript), and
// returns how many it dropped.
func boundPending(p *[]llm.Message) int {
	size := func() int {
		n := 0
		for _, m := range *p {
			n += len(m.Content)
		}
		return n
	}
	dropped := 0
	for len(*p) > maxPendingMessages || size() > maxPendingBytes {
		i := slices.IndexFunc(*p, func(m llm.Message) bool { return m.Role == llm.RoleUser })
		if i < 0 {
			break
		}
		*p = slices.Delete(*p, i, i+1)
		dropped++
	}
	return dropped
}

// importFiles copies the files shared with msgs into the workspace and
// returns what to tell the agent about them.
func (w *agent) importFiles(ctx workflow.Context, msgs []QueuedMessage) string {
	var files []InboundFile
	for _, m := range msgs {
		files = append(files, m.Files...)
	}
	if len(files) == 0 {
		return ""
	}
	var a *Activities
	var res ImportResult
	err := workflow.ExecuteActivity(sandboxCtx(ctx, 10*time.Minute), a.ImportFiles, ImportInput{
		Thread: w.ThreadKey, State: *w.Sandbox, Files: files,
	}).Get(ctx, &res)
	if err != nil {
		return "\n\n(Files were shared, but copying them into the workspace failed: " + userError(err) + ")"
	}
	w.Dirty = true
	var b strings.Builder
	for _, f := range res.Files {
		if f.Error != "" {
			b.WriteString("\n(File " + f.Name + " was not copied: " + f.Error + ")")
		} else {
			b.WriteString("\n(File shared: " + f.Name + " is in the workspace at " + f.Path + ")")
		}
	}
	return b.String()
}

// runTools runs the calls of one model step in order and returns their
// results as tool messages. When the turn is stopped, the calls not run get
// a message saying so, so the transcript stays well-formed.
func (w *agent) runTools(ctx, turnCtx workflow.Context, turn, step int, calls []ToolCall) []llm.Message {
	var out []llm.Message
	base := len(w.tools)
	for _, c := range calls {
		w.tools = append(w.tools, ToolStatus{ID: c.ID, Name: c.Name, Summary: c.Summary, State: "pending"})
	}
	for i, c := range calls {
		st := &w.tools[base+i]
		if turnCtx.Err() != nil {
			st.State = "cancelled"
			out = append(out, llm.Message{Role: llm.RoleTool, ToolCallID: c.ID, Content: "not run: the user stopped the turn"})
			continue
		}
		note := ""
		if c.Name == "shell" {
			var refusal string
			refusal, note = w.gate(ctx, turnCtx, turn, c, st)
			switch {
			case turnCtx.Err() != nil:
				st.State = "cancelled"
				out = append(out, llm.Message{Role: llm.RoleTool, ToolCallID: c.ID, Content: "not run: the user stopped the turn"})
				continue
			case refusal != "":
				st.State, st.Detail = "denied", "not approved"
				out = append(out, llm.Message{Role: llm.RoleTool, ToolCallID: c.ID, Content: refusal})
				w.progress(ctx, turn, TurnRunning, false)
				continue
			}
		}
		st.State, st.Started = "running", workflow.Now(ctx)
		w.progress(ctx, turn, TurnRunning, false)
		r, err := w.runTool(turnCtx, turn, step, c)
		if gone(err) && turnCtx.Err() == nil {
			// The sandbox vanished between turns (the call never reached
			// it: attaching failed). Recreate it from the last snapshot,
			// tell the user, and run the call there.
			w.SandboxUp = false
			if uerr := w.ensureUp(turnCtx); uerr == nil {
				r, err = w.runTool(turnCtx, turn, step, c)
			}
		}
		st.Elapsed = workflow.Now(ctx).Sub(st.Started)
		if c.Name != "read_file" {
			w.Dirty = !w.matchesSnapshot(ctx, r, err)
		}
		switch {
		case err != nil && turnCtx.Err() != nil:
			st.State = "cancelled"
			out = append(out, llm.Message{Role: llm.RoleTool, ToolCallID: c.ID, Content: "stopped by the user before it finished"})
			continue
		case err != nil && c.Name == "shell" && lostWorker(err):
			// The command is never run twice; it may have run to the end
			// on the worker that was lost. Say exactly that.
			st.State, st.Detail = "unknown", "the worker running it was lost"
			out = append(out, llm.Message{Role: llm.RoleTool, ToolCallID: c.ID, Content: "the command may have run: the worker running it was lost before it reported (" +
				userError(err) + "), so its outcome is unknown and it was not run again. Look at the workspace (the files it writes, the processes it starts) before you run it again."})
			continue
		case err != nil:
			st.State, st.Detail = "failed", userError(err)
			out = append(out, llm.Message{Role: llm.RoleTool, ToolCallID: c.ID, Content: "the tool could not run: " + userError(err)})
			var appErr *temporal.ApplicationError
			if errors.As(err, &appErr) && (appErr.Type() == errTypeSandboxGone || appErr.Type() == errTypeSandboxLost) {
				// The next turn recreates it from the last snapshot.
				w.SandboxUp = false
			}
			continue
		}
		if r.OK {
			st.State = "done"
		} else {
			st.State = "failed"
		}
		st.Detail, st.Head, st.Lines = r.Summary, r.Head, r.Lines
		if note != "" {
			r.Output = note + "\n" + r.Output
		}
		out = append(out, llm.Message{Role: llm.RoleTool, ToolCallID: c.ID, Content: r.Output})
	}
	w.progress(ctx, turn, TurnRunning, false)
	return out
}

// matchesSnapshot says a tool call left the workspace as the session's
// snapshot has it: the fingerprint the call reported is the snapshot's
// (since changeToolFingerprint; before, every call made the workspace
// dirty).
func (w *agent) matchesSnapshot(ctx workflow.Context, r ToolResult, err error) bool {
	if err != nil || r.Fingerprint == "" || w.SnapshotKey == "" || r.Fingerprint != w.SnapshotFingerprint {
		return false
	}
	return workflow.GetVersion(ctx, changeToolFingerprint, workflow.DefaultVersion, 1) >= 1
}

func (w *agent) runTool(turnCtx workflow.Context, turn, step int, c ToolCall) (ToolResult, error) {
	var a *Activities
	var r ToolResult
	err := workflow.ExecuteActivity(toolCtx(turnCtx, c.Name, w.Options.ToolTimeout), a.RunTool, ToolInput{
		SessionID: w.workflowID, Turn: turn, Step: step, State: *w.Sandbox, Call: c,
		DefaultTimeout: w.Options.ToolTimeout,
	}).Get(turnCtx, &r)
	return r, err
}

// lostWorker reports an activity error saying the worker running it stopped
// reporting (its heartbeats or its time ran out): the activity may have done
// its work.
func lostWorker(err error) bool {
	var timeoutErr *temporal.TimeoutError
	return errors.As(err, &timeoutErr) &&
		(timeoutErr.TimeoutType() == enumspb.TIMEOUT_TYPE_HEARTBEAT || timeoutErr.TimeoutType() == enumspb.TIMEOUT_TYPE_START_TO_CLOSE)
}

// permanentErr reports an activity error that retrying cannot help.
func permanentErr(err error) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == errTypePermanent
}

// gone reports an activity error saying the sandbox no longer exists.
func gone(err error) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == errTypeSandboxGone
}

// progress queues an edit of the turn's progress message.
func (w *agent) progress(ctx workflow.Context, turn int, status TurnStatus, force bool) {
	w.deliver(ctx, Outbound{Kind: OutboundProgress, Turn: turn, Key: w.progressKey(turn),
		Title: w.Title, Tools: append([]ToolStatus(nil), w.tools...), Status: status,
		Final: status != TurnRunning})
}

// deliver queues an outbound message. A turn never waits for the chat: the
// outbox is sent by coroutines (startOutbox). A progress edit replaces a
// queued edit of the same message, and a title a queued title: only the
// newest state matters.
func (w *agent) deliver(ctx workflow.Context, m Outbound) {
	m.Thread = w.ThreadKey
	if !w.lanes {
		if m.Kind == OutboundProgress {
			for i := range w.outbox {
				if w.outbox[i].Key == m.Key {
					w.outbox[i] = m
					return
				}
			}
		}
		w.outbox = append(w.outbox, m)
		return
	}
	switch m.Kind {
	case OutboundProgress:
		for i := range w.progressLane.queue {
			if w.progressLane.queue[i].Key == m.Key {
				w.progressLane.queue[i] = m
				return
			}
		}
		w.progressLane.queue = append(w.progressLane.queue, m)
	case OutboundTitle:
		if len(w.titles.queue) > 0 {
			w.titles.queue[len(w.titles.queue)-1] = m
			return
		}
		w.titles.queue = append(w.titles.queue, m)
	default:
		w.answers.queue = append(w.answers.queue, m)
	}
}

func (w *agent) progressKey(turn int) string {
	return fmt.Sprintf("%s/%d/progress", w.workflowID, turn)
}

// progressShown says the progress message of turn was posted (or will not
// be): its answer may follow it in the thread.
func (w *agent) progressShown(turn int) bool {
	key := w.progressKey(turn)
	if w.postedProgress[key] {
		return true
	}
	return !slices.ContainsFunc(w.progressLane.queue, func(m Outbound) bool { return m.Key == key }) &&
		!(w.progressLane.sending && w.progressSending == key)
}

// lane is one queue of outbound messages and whether one of them is being
// sent.
type lane struct {
	queue   []Outbound
	sending bool
}

func (l *lane) idle() bool { return len(l.queue) == 0 && !l.sending }

// startOutbox starts the coroutines that send the outbox. Since version 1
// of changeOutboxLanes there are three lanes — answers and notices,
// progress edits (at most one a second per message), thread renames (which
// platforms rate-limit hard) — so that what may wait never holds an answer;
// an answer waits only until its turn's progress message exists, so that it
// lands below it. Runs recorded before the change replay with the one FIFO
// they had.
func (w *agent) startOutbox(ctx workflow.Context) {
	w.lanes = workflow.GetVersion(ctx, changeOutboxLanes, workflow.DefaultVersion, 1) >= 1
	w.localDeliver = w.lanes && workflow.GetVersion(ctx, changeLocalDelivery, workflow.DefaultVersion, 1) >= 1
	if !w.lanes {
		w.startFIFO(ctx)
		return
	}
	w.postedProgress = map[string]bool{}
	lastEdit := map[string]time.Time{}
	perMessage := workflow.GetVersion(ctx, changePacePerMessage, workflow.DefaultVersion, 1) >= 1
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			if err := workflow.Await(ctx, func() bool { return len(w.progressLane.queue) > 0 }); err != nil {
				return
			}
			var m Outbound
			if perMessage {
				// The first queued message whose last edit is a second
				// old (or that was never posted) goes; when all wait,
				// sleep until the first is due or an unposted one comes.
				i, due := nextProgress(w.progressLane.queue, lastEdit, workflow.Now(ctx))
				if i < 0 {
					if _, err := workflow.AwaitWithTimeout(ctx, due, func() bool {
						return slices.ContainsFunc(w.progressLane.queue, func(m Outbound) bool { return lastEdit[m.Key].IsZero() })
					}); err != nil {
						return
					}
					continue
				}
				w.progressLane.sending = true
				m = w.progressLane.queue[i]
				w.progressLane.queue = slices.Delete(w.progressLane.queue, i, i+1)
			} else {
				w.progressLane.sending = true
				m = w.progressLane.queue[0]
				if wait := time.Second - workflow.Now(ctx).Sub(lastEdit[m.Key]); wait > 0 && !lastEdit[m.Key].IsZero() {
					_ = workflow.Sleep(ctx, wait)
					m = w.progressLane.queue[0] // a newer state may have replaced it meanwhile
				}
				w.progressLane.queue = w.progressLane.queue[1:]
			}
			w.progressSending = m.Key
			if err := w.send(ctx, m); err != nil {
				w.logger.Warn("chat delivery failed", "key", m.Key, "error", err)
			}
			w.postedProgress[m.Key] = true
			if m.Final {
				delete(lastEdit, m.Key)
				delete(w.postedProgress, m.Key)
			} else {
				lastEdit[m.Key] = workflow.Now(ctx)
			}
			w.progressSending = ""
			w.progressLane.sending = false
		}
	})
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			if err := workflow.Await(ctx, func() bool { return len(w.titles.queue) > 0 }); err != nil {
				return
			}
			w.titles.sending = true
			m := w.titles.queue[0]
			w.titles.queue = w.titles.queue[1:]
			if err := w.send(ctx, m); err != nil {
				w.logger.Warn("chat delivery failed", "key", m.Key, "error", err)
			}
			w.titles.sending = false
		}
	})
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			if err := workflow.Await(ctx, func() bool { return len(w.answers.queue) > 0 }); err != nil {
				return
			}
			w.answers.sending = true
			m := w.answers.queue[0]
			// The answer goes below its turn's progress message.
			if err := workflow.Await(ctx, func() bool { return m.Kind != OutboundAnswer || w.progressShown(m.Turn) }); err != nil {
				return
			}
			w.answers.queue = w.answers.queue[1:]
			if m.Kind == OutboundAnswer && len(w.Undelivered) > 0 {
				if err := w.send(ctx, w.undeliveredNotice(m.Turn)); err == nil {
					w.Undelivered = nil
				}
			}
			err := w.send(ctx, m)
			if err != nil {
				w.logger.Warn("chat delivery failed", "key", m.Key, "error", err)
			}
			if m.Kind == OutboundAnswer {
				if err != nil {
					// Kept: status shows it, and the next answer that
					// gets through is preceded by a notice.
					w.Undelivered = append(w.Undelivered, UndeliveredAnswer{Turn: m.Turn, Preview: cut(m.Text.Inline, maxUndeliveredPreview)})
					if len(w.Undelivered) > maxUndelivered {
						w.Undelivered = w.Undelivered[len(w.Undelivered)-maxUndelivered:]
					}
				}
				if r := w.result(m.Turn); r != nil {
					r.Delivered = true
				}
			}
			w.answers.sending = false
		}
	})
}

// progressEvery is the least time between two edits of one progress
// message: Slack allows about one a second per message.
const progressEvery = time.Second

// nextProgress picks the queued progress message to send at now: the
// first one never posted or last edited progressEvery ago or more (i), or
// none (i < 0) and how long until the first of them is due.
func nextProgress(queue []Outbound, lastEdit map[string]time.Time, now time.Time) (i int, due time.Duration) {
	due = progressEvery
	for i, m := range queue {
		last, ok := lastEdit[m.Key]
		if !ok || last.IsZero() {
			return i, 0
		}
		wait := progressEvery - now.Sub(last)
		if wait <= 0 {
			return i, 0
		}
		due = min(due, wait)
	}
	return -1, due
}

// Bounds of AgentState.Undelivered.
const (
	maxUndelivered        = 8
	maxUndeliveredPreview = 600
)

// send delivers m: since changeLocalDelivery as a local activity, which
// runs in the worker as soon as the workflow task asks for it, with no
// round trip through the server's task queue (an answer reaches the chat
// one task sooner, and a turn costs the server fewer tasks); retried like
// the activity it replaces, and recorded in the history all the same.
func (w *agent) send(ctx workflow.Context, m Outbound) error {
	if w.localDeliver {
		return workflow.ExecuteLocalActivity(localDeliverCtx(ctx), deliverActivity, m).Get(ctx, nil)
	}
	var a *Activities
	return workflow.ExecuteActivity(deliverCtx(ctx), a.Deliver, m).Get(ctx, nil)
}

// deliverActivity is the name Activities.Deliver is registered under.
const deliverActivity = "Deliver"

// undeliveredNotice tells the thread about answers that could not be
// posted, before the answer of turn.
func (w *agent) undeliveredNotice(turn int) Outbound {
	var b strings.Builder
	for _, u := range w.Undelivered {
		b.WriteString(fmt.Sprintf("(Note: an earlier answer (turn %d) could not be delivered: %s)\n", u.Turn, u.Preview))
	}
	b.WriteString("Say `export` to see the whole conversation.")
	return Outbound{Thread: w.ThreadKey, Kind: OutboundNotice, Turn: turn,
		Key: fmt.Sprintf("%s/%d/undelivered", w.workflowID, turn), Text: Text{Inline: b.String(), Size: b.Len()}}
}

// startFIFO runs the one coroutine that sent the whole outbox in order
// before changeOutboxLanes (kept so that those runs replay).
func (w *agent) startFIFO(ctx workflow.Context) {
	lastEdit := map[string]time.Time{}
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			if err := workflow.Await(ctx, func() bool { return len(w.outbox) > 0 }); err != nil {
				return
			}
			w.sending = true
			m := w.outbox[0]
			if m.Kind == OutboundProgress {
				if wait := time.Second - workflow.Now(ctx).Sub(lastEdit[m.Key]); wait > 0 && !lastEdit[m.Key].IsZero() {
					_ = workflow.Sleep(ctx, wait)
					m = w.outbox[0] // a newer state may have replaced it meanwhile
				}
			}
			w.outbox = w.outbox[1:]
			var a *Activities
			if err := workflow.ExecuteActivity(deliverCtx(ctx), a.Deliver, m).Get(ctx, nil); err != nil {
				w.logger.Warn("chat delivery failed", "key", m.Key, "error", err)
			}
			if m.Kind == OutboundAnswer {
				if r := w.result(m.Turn); r != nil {
					r.Delivered = true
				}
			}
			if m.Kind == OutboundProgress {
				if m.Final {
					delete(lastEdit, m.Key)
				} else {
					lastEdit[m.Key] = workflow.Now(ctx)
				}
			}
			w.sending = false
		}
	})
}

// outboxIdle reports that nothing waits to be sent.
func (w *agent) outboxIdle() bool {
	return len(w.outbox) == 0 && !w.sending && w.answers.idle() && w.progressLane.idle() && w.titles.idle()
}

func (w *agent) addResult(res TurnResult, userText string) {
	w.Results = append(w.Results, res)
	if len(w.Results) > maxResults {
		w.Results = w.Results[len(w.Results)-maxResults:]
	}
	w.Summaries = append(w.Summaries, TurnSummary{Turn: res.Turn, User: cut(userText, MaxResultAnswer/4),
		Answer: cut(res.Answer, MaxResultAnswer/4), Status: res.Status})
	if len(w.Summaries) > maxSummaries {
		w.Summaries = w.Summaries[len(w.Summaries)-maxSummaries:]
	}
}

// combine makes one model input of the queued messages.
func combine(msgs []QueuedMessage) string {
	if len(msgs) == 1 {
		return msgs[0].Text
	}
	var b strings.Builder
	for i, m := range msgs {
		if i > 0 {
			b.WriteString("\n\n")
		}
		if m.Author != "" {
			b.WriteString(m.Author + " wrote:\n")
		}
		b.WriteString(m.Text)
	}
	return b.String()
}

func preview(t Text, n int) string {
	return cut(t.Inline, n)
}

// cut shortens s to at most n bytes on a rune boundary, saying so.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const more = " […]"
	end := n - len(more)
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + more
}

// userError turns an activity error into a short sentence for the chat: the
// application error's message without the SDK's wrapping.
func userError(err error) string {
	if err == nil {
		return ""
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Message()
	}
	var timeoutErr *temporal.TimeoutError
	if errors.As(err, &timeoutErr) {
		return "it took too long (" + strings.ToLower(timeoutErr.TimeoutType().String()) + ")"
	}
	var canceled *temporal.CanceledError
	if errors.As(err, &canceled) {
		return "it was cancelled"
	}
	return err.Error()
}
