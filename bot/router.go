package bot

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/internal/redact"
	"github.com/agentbot/agentbot/store"
)

// Cache is what the router needs of the thread cache and event
// de-duplication (store.RedisCache, store.MemoryCache). Errors mean the
// cache is unavailable: the router then works from Temporal alone.
type Cache interface {
	FirstSeen(ctx context.Context, eventID string, ttl time.Duration) (bool, error)
	Settle(ctx context.Context, eventID string, ttl time.Duration) error
	Release(ctx context.Context, eventID string) error
	Settled(ctx context.Context, eventID string) (bool, error)
	GetThread(ctx context.Context, threadKey string) (store.ThreadEntry, bool, error)
	PutThread(ctx context.Context, threadKey string, e store.ThreadEntry, ttl time.Duration) error
	DeleteThread(ctx context.Context, threadKey string) error
}

// Router takes inbound events from every platform, checks them (seen
// before? allowed?), finds the session of their thread, and makes one
// Temporal call for each. It holds no session state: any bot replica can
// take any event. Safe for concurrent use.
type Router struct {
	Sessions *agentflow.Client
	Cache    Cache
	Access   Access
	// Backends are the backend names commands may name; DefaultBackend
	// starts new sessions.
	Backends       []string
	DefaultBackend string
	// Unavailable maps the backends that are configured but cannot run
	// here to why, in words a person can act on (for Docker: the daemon
	// does not answer, or the image is missing and the command that
	// builds it). A command that names one of them (switch, new, fork) is
	// answered with that reason rather than "unknown backend", and
	// backends lists them. Chat users see the reasons: put no secret in
	// them (Secrets are redacted from them all the same).
	Unavailable map[string]string
	// Options are the settings of new sessions.
	Options agentflow.AgentOptions
	// Model is the worker's default model, for the model verb.
	Model string
	// WebUI is the Temporal Web UI's base URL (for status links); empty
	// for none. Namespace is the Temporal namespace.
	WebUI, Namespace string
	Logger           *slog.Logger
	// Secrets are values (API keys, tokens) that Handle replaces in every
	// reply before it reaches the chat: the text and the session view
	// shown with it (titles, tool lines, the last error), whatever the
	// session or a person put there. Values shorter than redact.MinLen are
	// ignored.
	Secrets []string
	// Tracer starts the span of each event (see Handle); nil traces
	// nothing. TraceContent lets the event's text into that span.
	Tracer       trace.Tracer
	TraceContent bool
	// Meter makes the router's instruments (inbound events, duplicates,
	// access refusals, thread cache lookups: see Metrics); nil records
	// nothing.
	Meter metric.Meter

	insOnce sync.Once
	ins     *Metrics

	// rd is the Redactor of Secrets, made once (see redactor).
	rdOnce sync.Once
	rd     *redact.Redactor

	mu    sync.Mutex
	local map[string]time.Time // event IDs seen (until when), while the cache is down
	// settledLocal marks the local entries whose event was handed over.
	settledLocal map[string]bool
}

// Handle routes one event and answers through reply. It returns an error
// only when reply itself fails; what goes wrong with the event is told to
// the person (with an ID to find the log line) and logged. With a Tracer,
// the event is a span, the root of the trace of what it causes (the
// Temporal call and, for a message, the turn).
func (r *Router) Handle(ctx context.Context, ev Event, reply Replier) error {
	ctx, span := r.startSpan(ctx, ev)
	defer span.End()
	reply = redactReplies(reply, r.redactor())
	r.metrics().Event(ctx, ev.Platform, ev.Kind)
	// An event is claimed for a short while (ClaimTTL) before it is
	// handed to Temporal, where it becomes durable (a message's signal is
	// in the session's history, a control request is an update named
	// after the event); only then is it settled for EventTTL. If this
	// process dies in between, the platform's retry finds the claim
	// expired and is handled: a retry never finds a message "seen" that
	// Temporal never got.
	claim := ""
	if ev.ID != "" {
		claim = ev.Platform + ":" + ev.ID
		// A platform's retry that finds the event only claimed is handled
		// all the same: the process that claimed it may have died before
		// the hand-over (its claim outlives it), and handling twice is
		// safe. Only a settled event is dropped.
		if !r.claim(ctx, claim) && !(ev.Retry && !r.settled(ctx, claim)) {
			r.log().Debug("dropped a repeated event", "event_id", ev.ID, "thread", ev.ThreadKey)
			r.metrics().Duplicate(ctx, ev.Platform)
			return nil
		}
	}
	if !r.Access.Allowed(ev) {
		r.log().Info("refused an event from outside the allowlist", "user", ev.User, "channel", ev.Channel)
		r.metrics().Refused(ctx, ev.Platform, RefusedAccess)
		if ev.Kind == KindMessage {
			// Plain chat is not addressed to the bot: answering it would
			// have the bot reply to every message of everyone outside the
			// allowlist wherever it reads (on Discord, where a message
			// has no private answer, in public). A mention or a command
			// is told.
			return nil
		}
		return reply.Reply(ctx, Response{Text: "Sorry — you are not on this bot's allowlist here, so I can't help with that.", Private: true})
	}
	resp, err := r.route(ctx, ev)
	// The thread of the session the event went to: a message in a
	// channel starts one in a new thread (NewThreadKey).
	if thread := cmp.Or(ev.ThreadKey, ev.NewThreadKey); err == nil && thread != "" {
		// IDs only: what the person wrote never goes to the log.
		r.log().InfoContext(ctx, "event handled", "platform", ev.Platform, "kind", string(ev.Kind),
			"thread", thread, "workflow_id", agentflow.AgentWorkflowID(thread), "event_id", ev.ID)
	}
	if claim != "" {
		if err != nil && !final(err) {
			r.release(claim) // let the platform's retry try again
		} else {
			r.settle(claim)
		}
	}
	if err != nil {
		resp = r.failure(ev, err)
	}
	if resp == nil {
		return nil
	}
	// The handler's time may be up (that may be why it failed): the
	// answer gets a context of its own, or the person never hears.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), replyTimeout)
	defer cancel()
	return reply.Reply(rctx, *resp)
}

// replyTimeout bounds posting one answer.
const replyTimeout = 30 * time.Second

// redactor is the Redactor of r.Secrets, made at its first use: with
// every piece of every secret it is not cheap to build (see redact.New).
func (r *Router) redactor() *redact.Redactor {
	r.rdOnce.Do(func() { r.rd = redact.New(r.Secrets...) })
	return r.rd
}

// redactReplies wraps reply so that every Response it gets has the known
// secrets replaced: one place that every answer of Handle passes.
func redactReplies(reply Replier, rd *redact.Redactor) Replier {
	if rd.Empty() {
		return reply
	}
	return ReplierFunc(func(ctx context.Context, resp Response) error {
		rd.Walk(&resp) // resp and its session view are this event's own
		return reply.Reply(ctx, resp)
	})
}

func (r *Router) route(ctx context.Context, ev Event) (*Response, error) {
	switch ev.Kind {
	case KindCommand:
		return r.command(ctx, ev)
	case KindMention:
		if ev.ThreadKey == "" {
			return r.message(ctx, ev, ev.NewThreadKey, true)
		}
		return r.message(ctx, ev, ev.ThreadKey, true)
	case KindMessage:
		if ev.ThreadKey == "" {
			return nil, nil
		}
		return r.message(ctx, ev, ev.ThreadKey, false)
	}
	return nil, fmt.Errorf("unknown event kind %q", ev.Kind)
}

// message sends chat to the thread's session. A mention starts the session
// if there is none; plain chat in a thread without a session is ignored,
// and in a thread whose session was destroyed it is told so. A message
// that is blank or too long is refused before it reaches a session (so a
// mention starts none), and only when it is addressed to the bot: a
// mention, or chat in a session's thread.
func (r *Router) message(ctx context.Context, ev Event, thread string, start bool) (*Response, error) {
	if thread == "" {
		return nil, errors.New("no thread for the message")
	}
	if strings.TrimSpace(ev.Text) == "" && len(ev.Files) > 0 {
		ev.Text = "(shared a file)"
	}
	if start {
		if resp := unfit(ev.Text); resp != nil {
			return resp, nil
		}
	} else {
		var p agentflow.Presence
		err := r.whileUnavailable(ctx, thread, func() (err error) { p, err = r.lookup(ctx, thread); return err })
		if err == nil && p == agentflow.PresenceNone && !ev.ThreadStarted.IsZero() && time.Since(ev.ThreadStarted) < newThreadWindow {
			// The mention that starts this thread's session may be being
			// handled right now (by this replica or another): wait for
			// it a little rather than drop the reply.
			p, err = r.awaitSession(ctx, thread)
		}
		if err != nil {
			return nil, err
		}
		switch p {
		case agentflow.PresenceNone:
			return nil, nil // not a session thread: people talking
		case agentflow.PresenceEnded:
			return nil, agentflow.ErrDestroyed
		}
		if resp := unfit(ev.Text); resp != nil {
			return resp, nil
		}
	}
	in := r.newSession(ev, thread, "")
	// The platform has its acknowledgement: while Temporal does not
	// answer (a restart), keep the message and try again rather than lose
	// it. The message ID makes a repeated Send harmless.
	err := r.whileUnavailable(ctx, thread, func() error {
		_, err := r.Sessions.Send(ctx, in, agentflow.MessageRequest{ID: ev.MessageID, Author: authorOf(ev), User: ev.User, Text: ev.Text, Files: ev.Files})
		return err
	})
	if err != nil {
		return nil, err
	}
	if start {
		// This event may have started the session: replace a negative
		// entry. Only that the session exists is cached; who owns it is
		// the session's to say (this event's author may not be the one
		// who started it).
		r.found(ctx, thread)
	}
	return nil, nil
}

// Waits between attempts to reach Temporal while it does not answer; each
// attempt itself may take the SDK's RPC timeout (10 s).
const (
	unavailableRetryMin = 500 * time.Millisecond
	unavailableRetryMax = 5 * time.Second
)

// whileUnavailable calls f, and again after a growing wait each time it
// fails with agentflow.ErrUnavailable, until it returns anything else or
// ctx ends (the handling of one event is bounded: see Pool). f must be
// safe to repeat. It returns f's last error.
func (r *Router) whileUnavailable(ctx context.Context, thread string, f func() error) error {
	delay := unavailableRetryMin
	for attempt := 1; ; attempt++ {
		err := f()
		if !errors.Is(err, agentflow.ErrUnavailable) || ctx.Err() != nil {
			return err
		}
		r.log().WarnContext(ctx, "temporal is not answering; trying again", "thread", thread, "attempt", attempt, "error", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(2*delay, unavailableRetryMax)
	}
}

// unfit answers a message a session cannot take: a blank one (the session
// would refuse it, unseen by the sender) or one over MaxMessageBytes. It
// returns nil for a message that may go to the session.
func unfit(text string) *Response {
	if strings.TrimSpace(text) == "" {
		return &Response{Text: "Yes? Tell me what to do, or say `help`.", Private: true}
	}
	if len(text) > agentflow.MaxMessageBytes {
		return &Response{Text: fmt.Sprintf("That message is too long (%d bytes, at most %d); send it as a file.", len(text), agentflow.MaxMessageBytes), Private: true}
	}
	return nil
}

// newSession is the input of a session that ev would start. Its requester
// (ev's author) counts only if this start creates the workflow: an
// existing session keeps the input it started with. Admins are copied into
// the session, which checks control requests against them itself.
func (r *Router) newSession(ev Event, thread, backend string) agentflow.AgentInput {
	defaulted := backend == ""
	if defaulted {
		backend = r.DefaultBackend
	}
	return agentflow.AgentInput{ThreadKey: thread, Backend: backend, Requester: ev.User,
		Admins: slices.Clone(r.Access.Admins), Title: titleFrom(ev.Text), Options: r.Options, DefaultBackend: defaulted}
}

// titleFrom makes a session title of the first words of its first message,
// cleaned like a title given with a command (no control characters, no
// bidirectional overrides, single spaces): the title is shown in lists and
// status messages, where such characters could disguise it.
func titleFrom(text string) string {
	t := sanitizeTitle(strings.ToValidUTF8(text, "\uFFFD"))
	if t == "" {
		return "new session"
	}
	if r := []rune(t); len(r) > 60 {
		t = string(r[:57]) + "…"
	}
	return t
}

func authorOf(ev Event) string {
	if ev.UserName != "" {
		return ev.UserName
	}
	return ev.User
}

// command runs one command of the grammar.
func (r *Router) command(ctx context.Context, ev Event) (*Response, error) {
	if resp := r.unavailableBackend(ev.Text); resp != nil {
		return resp, nil
	}
	cmd, err := Parse(ev.Text, r.Backends)
	if err != nil {
		return &Response{Text: err.Error(), Private: true}, nil
	}
	thread := ev.ThreadKey
	needsSession := cmd.Verb != VerbHelp && cmd.Verb != VerbBackends && cmd.Verb != VerbNew && cmd.Verb != VerbList &&
		cmd.Verb != VerbPolicy && cmd.Verb != VerbAudit
	if needsSession && thread == "" {
		return &Response{Text: fmt.Sprintf("`%s` works inside a session's thread; there, say `@bot %s` or `!agent %s`.", cmd.Verb, cmd.Verb, cmd.Verb), Private: true}, nil
	}
	if needsSession {
		p, err := r.lookup(ctx, thread)
		if err != nil {
			return nil, err
		}
		switch {
		case p == agentflow.PresenceNone:
			return &Response{Text: "There is no session in this thread. Mention me with a task to start one.", Private: true}, nil
		case p == agentflow.PresenceEnded && (Controls(cmd.Verb) || approvalVerb(cmd.Verb)):
			return nil, agentflow.ErrDestroyed
		}
	}
	// Control verbs go to the tenant's session manager, which checks who
	// asks (and the session checks again); export is a query the session
	// answers only its owner and admins. Only export is checked here.
	if cmd.Verb == VerbExport {
		ok, err := r.mayControl(ctx, ev, thread)
		if err != nil {
			return nil, err
		}
		if !ok {
			return &Response{Text: fmt.Sprintf("Only the person who started this session (or an admin) can use `%s` here.", cmd.Verb), Private: true}, nil
		}
	}
	return r.dispatch(ctx, ev, thread, cmd)
}

// unavailableBackend answers a command that names a backend of
// r.Unavailable (switch, new, fork), which Parse alone would call unknown
// or, for new, take for the first word of a title: it says why that backend
// cannot run here. It returns nil for every other command.
func (r *Router) unavailableBackend(text string) *Response {
	if len(r.Unavailable) == 0 {
		return nil
	}
	names := slices.Clone(r.Backends)
	for _, n := range slices.Sorted(maps.Keys(r.Unavailable)) {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	cmd, err := Parse(text, names)
	if err != nil || cmd.Backend == "" || slices.Contains(r.Backends, cmd.Backend) {
		return nil
	}
	text = fmt.Sprintf("The `%s` backend is not available here: %s.", cmd.Backend, strings.TrimSuffix(r.Unavailable[cmd.Backend], "."))
	if len(r.Backends) > 0 {
		text += " Available: " + strings.Join(r.Backends, ", ") + "."
	}
	return &Response{Text: text, Private: true}
}

// backendsText is the answer of the backends command: the backends that
// run here, the default, and those that do not run, with why.
func (r *Router) backendsText() string {
	text := "Backends: " + strings.Join(r.Backends, ", ") + ". Default: " + r.DefaultBackend + "."
	var off []string
	for _, n := range slices.Sorted(maps.Keys(r.Unavailable)) {
		if !slices.Contains(r.Backends, n) {
			off = append(off, fmt.Sprintf("- `%s`: %s", n, r.Unavailable[n]))
		}
	}
	if len(off) > 0 {
		text += "\nNot available here:\n" + strings.Join(off, "\n")
	}
	return text
}

// mayControl is the gateway's check of a control (see Controls), for a
// quick and friendly refusal. The session decides: every control request
// carries who asks (By; a fork's Requester; the transcript query's
// argument), and the session refuses anyone but its requester and the
// admins it was started with. So this check reads only what the session
// says of itself, its requester from its state, never the thread cache:
// events write the cache.
func (r *Router) mayControl(ctx context.Context, ev Event, thread string) (bool, error) {
	if r.Access.Admin(ev.User) {
		return true, nil // no need to ask the session
	}
	v, err := r.Sessions.State(ctx, thread)
	if err != nil {
		return false, err
	}
	return r.Access.CanControl(ev.User, v.Requester), nil
}

func (r *Router) dispatch(ctx context.Context, ev Event, thread string, cmd Command) (*Response, error) {
	cl := r.Sessions
	switch cmd.Verb {
	case VerbHelp:
		if cmd.Topic != "" {
			return &Response{Text: Usage(cmd.Topic), Private: true}, nil
		}
		return &Response{Text: Help(), Private: true}, nil
	case VerbBackends:
		return &Response{Text: r.backendsText(), Private: true}, nil
	case VerbNew:
		return r.newCommand(ctx, ev, thread, cmd)
	// Control verbs are updates on the tenant's session manager, which
	// hands them to the session and answers once the session accepted
	// them: switch, fork, done and reset may wait for the running turn,
	// far longer than a platform gives a handler. The session posts how
	// they went in the thread.
	case VerbSwitch:
		res, err := r.control(ctx, ev, thread, agentflow.ControlRequest{Verb: agentflow.ControlSwitch, Backend: cmd.Backend, Root: cmd.Root})
		if err != nil {
			return nil, err
		}
		r.forget(ctx, thread)
		return pending(res, fmt.Sprintf("Switching to `%s` after the current turn, if one is running; I'll say here when it's done.", cmd.Backend)), nil
	case VerbFork:
		// A root goes to the sandbox of the fork, which refuses one its
		// backend cannot use, as with switch.
		res, err := r.control(ctx, ev, thread, agentflow.ControlRequest{Verb: agentflow.ControlFork, Backend: cmd.Backend, Root: cmd.Root, Title: cmd.Title})
		if err != nil {
			return nil, err
		}
		// The fork links itself in both threads.
		return pending(res, "Forking after the current turn, if one is running; the new thread will be linked here."), nil
	case VerbReset:
		res, err := r.control(ctx, ev, thread, agentflow.ControlRequest{Verb: agentflow.ControlReset})
		if err != nil {
			return nil, err
		}
		return pending(res, "Starting a fresh conversation after the current turn, if one is running."), nil
	case VerbTitle:
		if _, err := r.control(ctx, ev, thread, agentflow.ControlRequest{Verb: agentflow.ControlTitle, Title: cmd.Title}); err != nil {
			return nil, err
		}
		return &Response{Text: fmt.Sprintf("Renamed to *%s*.", cmd.Title)}, nil
	case VerbModel:
		if cmd.Model == "" {
			v, err := cl.State(ctx, thread)
			if err != nil {
				return nil, err
			}
			return &Response{Text: r.modelText(ctx, thread, v), Private: true}, nil
		}
		res, err := r.control(ctx, ev, thread, agentflow.ControlRequest{Verb: agentflow.ControlModel, Model: cmd.Model})
		if err != nil {
			return nil, err
		}
		return pending(res, fmt.Sprintf("Setting the model to `%s`.", cmd.Model)), nil
	case VerbStop:
		res, err := r.control(ctx, ev, thread, agentflow.ControlRequest{Verb: agentflow.ControlStop})
		if err != nil {
			return nil, err
		}
		switch {
		case res.Stop != nil && !res.Stop.Stopped:
			return &Response{Text: "Nothing was running.", Private: true}, nil
		case res.Stop != nil:
			return &Response{Text: fmt.Sprintf("Stopped turn %d.", res.Stop.Turn)}, nil
		}
		return nil, nil // the session says when the turn has stopped
	case VerbApprove, VerbDeny:
		return r.approveCommand(ctx, ev, thread, cmd)
	case VerbApprovals:
		if cmd.Mode == "" {
			v, err := cl.State(ctx, thread)
			if err != nil {
				return nil, err
			}
			return &Response{Text: approvalsText(v), Private: true}, nil
		}
		res, err := r.control(ctx, ev, thread, agentflow.ControlRequest{Verb: agentflow.ControlApprovals, Mode: cmd.Mode})
		if err != nil {
			return nil, err
		}
		return pending(res, fmt.Sprintf("Setting this session's approvals to `%s`.", cmd.Mode)), nil
	case VerbDone:
		res, err := r.control(ctx, ev, thread, agentflow.ControlRequest{Verb: agentflow.ControlPause})
		if err != nil {
			return nil, err
		}
		return pending(res, "Pausing after the current turn, if one is running; I'll say here when the workspace is saved."), nil
	case VerbDestroy:
		res, err := r.control(ctx, ev, thread, agentflow.ControlRequest{Verb: agentflow.ControlDestroy})
		if err != nil {
			return nil, err
		}
		r.forget(ctx, thread)
		return pending(res, "Destroying this session: its sandbox and data are being deleted."), nil
	case VerbPolicy:
		key := cmp.Or(thread, ev.NewThreadKey)
		res, err := r.control(ctx, ev, key, agentflow.ControlRequest{Verb: agentflow.ControlPolicy,
			PolicyKey: cmd.PolicyKey, PolicyValue: cmd.PolicyValue, PolicyReset: cmd.PolicyAction == PolicyReset})
		if err != nil {
			return nil, err
		}
		text := "Policy of this workspace:\n"
		if cmd.PolicyAction != "" {
			text = "Policy changed. Now:\n"
		}
		if res.Policy != nil {
			text += res.Policy.Text()
		}
		return &Response{Text: text, Private: true}, nil
	case VerbAudit:
		page, err := cl.Audit(ctx, cmp.Or(thread, ev.NewThreadKey), ev.User, cmd.Page)
		if err != nil {
			return nil, err
		}
		return &Response{Text: auditText(page), Private: true}, nil
	case VerbStatus:
		v, err := cl.State(ctx, thread)
		if err != nil {
			return nil, err
		}
		text := statusText(v)
		if u, err := cl.Usage(ctx, thread, ev.User); err == nil {
			text += usageText(u)
		}
		return &Response{Text: text, Session: &v, WebUI: r.webUI(v.WorkflowID)}, nil
	case VerbList:
		return r.listCommand(ctx, ev, thread, cmd)
	case VerbExport:
		t, err := cl.Transcript(ctx, thread, ev.User)
		if err != nil {
			return nil, err
		}
		return &Response{Text: exportText(t)}, nil
	}
	return nil, fmt.Errorf("unknown command %q", cmd.Verb)
}

// pending answers a control request: what will happen, when the session
// is still at it; nothing when it was done at once (the session posts the
// outcome either way).
func pending(res agentflow.ControlResult, text string) *Response {
	if !res.Accepted {
		return nil
	}
	return &Response{Text: text}
}

// requestID names a control request after the platform event that carried
// it, so that a retried delivery is the same request.
func requestID(ev Event, verb string) string {
	return verb + "/" + forkRequestID(ev)
}

// forkRequestID makes a fork idempotent per platform event: a retried
// delivery forks once.
func forkRequestID(ev Event) string {
	if ev.ID != "" {
		return ev.Platform + ":" + ev.ID
	}
	return fmt.Sprintf("%s:%s:%d", ev.Platform, ev.User, time.Now().UnixNano())
}

// entryOf is a cache entry from what a session says of itself (its state
// or an update's answer), never from an event.
func entryOf(v agentflow.SessionView) store.ThreadEntry {
	return store.ThreadEntry{WorkflowID: v.WorkflowID, Title: v.Title, Backend: v.Backend, Requester: v.Requester}
}

// StatusText renders a session's state for people.
func statusText(v agentflow.SessionView) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%s* — %s on `%s`", v.Title, v.Status, v.Backend)
	if v.SandboxID != "" {
		fmt.Fprintf(&b, " (sandbox `%s`)", shortID(v.SandboxID))
	}
	fmt.Fprintf(&b, "\nturn %d, %d queued, tokens %d in / %d out", v.Turn, v.Queued, v.Usage.InputTokens, v.Usage.OutputTokens)
	if v.TokenBudget > 0 {
		fmt.Fprintf(&b, " (%d of the session's budget of %d)", v.Usage.InputTokens+v.Usage.OutputTokens, v.TokenBudget)
	}
	if v.Model != "" {
		fmt.Fprintf(&b, ", model `%s`", v.Model)
	}
	if v.QueuedBehind > 0 {
		fmt.Fprintf(&b, "\nqueued behind %d sessions for a turn slot", v.QueuedBehind)
	}
	if v.Forks > 0 {
		fmt.Fprintf(&b, ", %d forks", v.Forks)
	}
	if v.Parent != "" {
		fmt.Fprintf(&b, "\nforked from %s", agentflow.LinkThread(v.Parent))
	}
	for _, t := range v.Tools {
		fmt.Fprintf(&b, "\n• %s (%s)", t.Summary, t.State)
	}
	if a := v.Approval; a != nil && a.State == agentflow.ApprovalWaiting {
		fmt.Fprintf(&b, "\nwaiting for approval: %s (`approve` or `deny`)", codeText(a.Command))
	}
	if v.LastError != "" {
		fmt.Fprintf(&b, "\nlast error: %s", v.LastError)
	}
	if v.Trace != "" {
		// What to search for in the tracing backend (Jaeger, Tempo...).
		fmt.Fprintf(&b, "\nlast turn: trace `%s`", v.Trace)
	}
	return b.String()
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func exportText(t []agentflow.TurnSummary) string {
	if len(t) == 0 {
		return "Nothing to export yet."
	}
	var b strings.Builder
	for _, s := range t {
		fmt.Fprintf(&b, "--- turn %d (%s)\n> %s\n%s\n", s.Turn, s.Status, strings.ReplaceAll(s.User, "\n", "\n> "), s.Answer)
	}
	return b.String()
}

func (r *Router) webUI(workflowID string) string {
	if r.WebUI == "" {
		return ""
	}
	ns := r.Namespace
	if ns == "" {
		ns = "default"
	}
	return fmt.Sprintf("%s/namespaces/%s/workflows/%s", strings.TrimRight(r.WebUI, "/"), ns, url.PathEscape(workflowID))
}

// lookup finds whether a thread has a session: the cache first, then
// Temporal itself, by describing the thread's workflow (Client.Describe).
// It never asks the session manager: its registry is a view kept by the
// agents' reports, and a failed report must not make a thread deaf. The
// cache keeps that a thread has a session (24 h) or has none (30 s); an
// ended session is not cached, so its thread is told it is gone. A cache
// that fails is logged and skipped.
func (r *Router) lookup(ctx context.Context, thread string) (agentflow.Presence, error) {
	if r.Cache != nil {
		e, ok, err := r.Cache.GetThread(ctx, thread)
		r.metrics().CacheLookup(ctx, ok, err)
		switch {
		case err != nil:
			r.log().Debug("thread cache unavailable; asking Temporal", "thread", thread, "error", err)
		case ok && e.Missing:
			return agentflow.PresenceNone, nil
		case ok:
			return agentflow.PresenceRunning, nil
		}
	}
	p, err := r.Sessions.Describe(ctx, thread)
	if err != nil {
		return p, err
	}
	switch p {
	case agentflow.PresenceNone:
		r.put(ctx, thread, store.ThreadEntry{Missing: true}, store.MissingTTL)
	case agentflow.PresenceRunning:
		r.found(ctx, thread)
	}
	return p, nil
}

// A reply in a thread younger than newThreadWindow that finds no session
// waits up to newThreadWait for one to appear.
const (
	newThreadWindow = 2 * time.Minute
	newThreadWait   = 15 * time.Second
)

// awaitSession asks Temporal (not the cache) whether thread has a session,
// for up to newThreadWait, and caches the answer only when there is one.
func (r *Router) awaitSession(ctx context.Context, thread string) (agentflow.Presence, error) {
	deadline := time.Now().Add(newThreadWait)
	delay := 50 * time.Millisecond
	for {
		p, err := r.Sessions.Describe(ctx, thread)
		if err != nil || p != agentflow.PresenceNone || time.Now().After(deadline) {
			if p == agentflow.PresenceRunning {
				r.found(ctx, thread)
			}
			return p, err
		}
		select {
		case <-ctx.Done():
			return p, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}

// found caches that thread has a session, replacing any negative entry.
// It writes the workflow ID only: nothing an event says (its author least
// of all) goes into the cache as a fact about the session.
func (r *Router) found(ctx context.Context, thread string) {
	r.put(ctx, thread, store.ThreadEntry{WorkflowID: agentflow.AgentWorkflowID(thread)}, store.ThreadTTL)
}

func (r *Router) remember(ctx context.Context, thread string, e store.ThreadEntry) {
	r.put(ctx, thread, e, store.ThreadTTL)
}

func (r *Router) put(ctx context.Context, thread string, e store.ThreadEntry, ttl time.Duration) {
	if r.Cache == nil {
		return
	}
	if err := r.Cache.PutThread(ctx, thread, e, ttl); err != nil {
		r.log().Debug("thread cache unavailable; not cached", "thread", thread, "error", err)
	}
}

func (r *Router) forget(ctx context.Context, thread string) {
	if r.Cache == nil {
		return
	}
	if err := r.Cache.DeleteThread(ctx, thread); err != nil {
		r.log().Debug("thread cache unavailable; entry left to expire", "thread", thread, "error", err)
	}
}

// final says an error will not change on a retry of the same event (the
// session refused, or is gone): its event is settled, not released.
func final(err error) bool {
	var refused *agentflow.RefusedError
	return errors.As(err, &refused) || errors.Is(err, agentflow.ErrDestroyed) || errors.Is(err, agentflow.ErrNoSession)
}

// claim de-duplicates platform deliveries through the cache; while the
// cache is down, through a small in-process table (sessions also drop
// repeated message IDs, so a turn never runs twice either way). It claims
// id for ClaimTTL and reports whether it was free.
func (r *Router) claim(ctx context.Context, id string) bool {
	if r.Cache != nil {
		first, err := r.Cache.FirstSeen(ctx, id, store.ClaimTTL)
		if err == nil {
			return first
		}
		r.log().Debug("event de-duplication falls back to this process", "error", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if r.local == nil {
		r.local = map[string]time.Time{}
	}
	if len(r.local) > 10000 {
		for k, until := range r.local {
			if now.After(until) {
				delete(r.local, k)
				delete(r.settledLocal, k)
			}
		}
	}
	if until, ok := r.local[id]; ok && now.Before(until) {
		return false
	}
	r.local[id] = now.Add(store.ClaimTTL)
	return true
}

// settled says the event was handed to Temporal (not only claimed).
func (r *Router) settled(ctx context.Context, id string) bool {
	if r.Cache != nil {
		if ok, err := r.Cache.Settled(ctx, id); err == nil {
			return ok
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.settledLocal[id]
}

// settle keeps a handled event seen for EventTTL.
func (r *Router) settle(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), replyTimeout)
	defer cancel()
	if r.Cache != nil {
		if err := r.Cache.Settle(ctx, id, store.EventTTL); err == nil {
			return
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.local == nil {
		r.local = map[string]time.Time{}
	}
	if r.settledLocal == nil {
		r.settledLocal = map[string]bool{}
	}
	r.local[id] = time.Now().Add(store.EventTTL)
	r.settledLocal[id] = true
}

// release forgets a claim whose event could not be handed over.
func (r *Router) release(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), replyTimeout)
	defer cancel()
	if r.Cache != nil {
		if err := r.Cache.Release(ctx, id); err != nil {
			r.log().Debug("releasing an event claim failed; it expires", "error", err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.local, id)
	delete(r.settledLocal, id)
}

// failure turns an error into a short, safe sentence with an ID to find the
// log line.
func (r *Router) failure(ev Event, err error) *Response {
	var refused *agentflow.RefusedError
	switch {
	case errors.Is(err, agentflow.ErrDestroyed):
		return &Response{Text: "This session was destroyed. Mention me in the channel to start a new one."}
	case errors.Is(err, agentflow.ErrNoSession):
		return &Response{Text: "There is no session in this thread. Mention me with a task to start one.", Private: true}
	case errors.As(err, &refused):
		return &Response{Text: sentence(refused.Msg), Private: true}
	}
	ref := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffff)
	r.log().Error("event failed", "ref", ref, "thread", ev.ThreadKey, "kind", ev.Kind, "error", err)
	if errors.Is(err, agentflow.ErrUnavailable) {
		// Said plainly: the person must know the message is not kept.
		what := "that was not done"
		if ev.Kind != KindCommand {
			what = "I could not take your message, and it is not kept"
		}
		return &Response{Text: fmt.Sprintf("Sorry — the bot's session service is not answering, so %s. Please send it again in a few minutes (ref %s).", what, ref), Private: true}
	}
	return &Response{Text: fmt.Sprintf("Sorry, something went wrong (ref %s).", ref), Private: true}
}

func (r *Router) metrics() *Metrics {
	r.insOnce.Do(func() { r.ins = NewMetrics(r.Meter) })
	return r.ins
}

func (r *Router) log() *slog.Logger {
	if r.Logger != nil {
		return r.Logger
	}
	return slog.Default()
}

// sentence makes a refusal ("only an admin can ...") a sentence.
func sentence(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return s
	}
	r, n := utf8.DecodeRuneInString(s)
	s = string(unicode.ToUpper(r)) + s[n:]
	if !strings.HasSuffix(s, ".") && !strings.HasSuffix(s, "!") && !strings.HasSuffix(s, "?") {
		s += "."
	}
	return s
}
