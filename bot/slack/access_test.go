package slackbot_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
	slackbot "github.com/agentbot/agentbot/bot/slack"
	"github.com/agentbot/agentbot/internal/fakeslack"
	"github.com/agentbot/agentbot/internal/stacktest"
	"github.com/agentbot/agentbot/store"
)

// The people and places of TestAccessEveryEntryPoint: alice and bob are on
// the allowlist, root is an admin, eve is on no list. The bot serves
// channel C1; C2 is a channel it does not serve (any more: alice has a
// session there from before).
const (
	accAlice  = "UALICE"
	accBob    = "UBOB"
	accRoot   = "UROOT"
	accEve    = "UEVE"
	accOpen   = "C1"
	accClosed = "C2"
	// accWait bounds every wait for something the stack does.
	accWait = 90 * time.Second
)

// accRole is what a person is to the session a row acts on.
type accRole int

const (
	roleStranger accRole = iota // refused at the gate: not on the allowlists here
	roleNonOwner                // allowed, but did not start the session
	roleOwner                   // started it
	roleAdmin                   // an admin
)

type accPerson struct {
	name, user, channel string
	role                accRole
}

// accPeople are the kinds of person every entry point is tried with.
var accPeople = []accPerson{
	{"stranger", accEve, accOpen, roleStranger},
	{"owner-in-a-closed-channel", accAlice, accClosed, roleStranger},
	{"allowed-non-owner", accBob, accOpen, roleNonOwner},
	{"owner", accAlice, accOpen, roleOwner},
	{"admin", accRoot, accOpen, roleAdmin},
}

// accSession is a session a row acts on.
type accSession struct {
	key, channel, root string
	// status is the ts of its status message, which carries the controls.
	status string
	// said is text of a turn it answered, which export must show.
	said string
	// approval is the ID of the command waiting for approval in it,
	// approvalMsg the ts of the message with its buttons and asked the ts
	// of the message whose turn waits ("" for an approval message from
	// before, in a channel the bot does not serve); all empty when
	// nothing waits.
	approval, approvalMsg, asked string
}

// accObserver hands events to the real Router and records each one when
// the Router is done with it (its answer posted), so that a row knows
// when its event was handled, refused or not.
type accObserver struct {
	h   slackbot.Handler
	mu  sync.Mutex
	evs []bot.Event
}

func (o *accObserver) Handle(ctx context.Context, ev bot.Event, r bot.Replier) error {
	err := o.h.Handle(ctx, ev, r)
	o.mu.Lock()
	o.evs = append(o.evs, ev)
	o.mu.Unlock()
	return err
}

func (o *accObserver) mark() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.evs)
}

// wait waits for an event by user with text, handled after mark from.
func (o *accObserver) wait(t *testing.T, from int, user, text string) bot.Event {
	t.Helper()
	deadline := time.Now().Add(accWait)
	for {
		o.mu.Lock()
		for _, ev := range o.evs[from:] {
			if ev.User == user && ev.Text == text {
				o.mu.Unlock()
				return ev
			}
		}
		o.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("the router never handled %q by %s", text, user)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// accSlack is the stack of the test: the fake workspace, the real Inbound
// (Socket Mode and HTTP at once) and Router, Temporal and a worker.
type accSlack struct {
	fs    *fakeslack.Server
	stack *stacktest.Stack
	obs   *accObserver
	gw    string // the Inbound's HTTP base URL
	team  string
	seq   int

	// known are the sessions the test meant to start; markers are texts
	// refused people sent, which no model request may carry.
	mu      sync.Mutex
	known   map[string]bool
	markers []string
}

func (h *accSlack) marker(what string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	return fmt.Sprintf("acc-%s-%d", what, h.seq)
}

func (h *accSlack) keep(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.known[key] = true
}

func (h *accSlack) isKnown(key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.known[key]
}

// elsewhere says m is in the thread of another session the test started
// (an earlier row's outcome may still be on its way there).
func (h *accSlack) elsewhere(s *accSession, m fakeslack.Message) bool {
	if m.ThreadTS == "" {
		return false
	}
	k := h.key(m.Channel, m.ThreadTS)
	return k != s.key && h.isKnown(k)
}

// refusedText notes the marker in text a refused person wrote, if any.
func (h *accSlack) refusedText(text string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range strings.Fields(strings.Trim(text, `"`)) {
		if strings.HasPrefix(w, "acc-") {
			h.markers = append(h.markers, w)
		}
	}
}

// mode makes the fake deliver over Socket Mode or signed HTTP.
func (h *accSlack) mode(m string) {
	events, slash, inter := "", "", ""
	if m == "http" {
		events, slash, inter = h.gw+slackbot.PathEvents, h.gw+slackbot.PathCommands, h.gw+slackbot.PathInteractivity
	}
	h.fs.SetEventsURL(events)
	h.fs.SetSlashURL(slash)
	h.fs.SetInteractivityURL(inter)
}

func (h *accSlack) key(channel, ts string) string { return slackbot.ThreadKey(h.team, channel, ts) }

func (h *accSlack) mention() string { return "<@" + h.fs.Options().BotUserID + "> " }

// until polls cond until it holds or accWait passes.
func until(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(accWait)
	for {
		ok, got := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: never came; last seen: %s", what, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (h *accSlack) state(t *testing.T, key string) agentflow.SessionView {
	t.Helper()
	v, err := h.stack.Sessions.State(context.Background(), key)
	if err != nil {
		t.Fatalf("state of %s: %v", key, err)
	}
	return v
}

// botMessages are the bot's public messages in channel (any thread).
func (h *accSlack) botMessages(channel string) []fakeslack.Message {
	var out []fakeslack.Message
	for _, m := range h.fs.Messages(channel) {
		if m.BotID != "" {
			out = append(out, m)
		}
	}
	return out
}

// waitThread waits for a public bot message in the thread that contains want.
func (h *accSlack) waitThread(t *testing.T, channel, root, want string) fakeslack.Message {
	t.Helper()
	var found fakeslack.Message
	until(t, fmt.Sprintf("a message with %q in thread %s", want, root), func() (bool, string) {
		var texts []string
		for _, m := range h.fs.Thread(channel, root) {
			if m.BotID != "" && strings.Contains(m.Text, want) {
				found = m
				return true, ""
			}
			texts = append(texts, m.Text)
		}
		return false, strings.Join(texts, " | ")
	})
	return found
}

// answered waits for the session of key to answer the message ts.
func (h *accSlack) answered(t *testing.T, key, ts string) *agentflow.TurnResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), accWait)
	defer cancel()
	res, err := h.stack.Sessions.Wait(ctx, key, ts)
	if err != nil || res.Result == nil {
		t.Fatalf("the session %s never answered message %s: %v", key, ts, err)
	}
	return res.Result
}

// workflows are the IDs of every agent workflow Temporal has, open or closed.
func workflows(t *testing.T, tc client.Client) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	var token []byte
	for {
		resp, err := tc.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
			Query: "WorkflowType = '" + agentflow.AgentWorkflowName + "'", NextPageToken: token})
		if err != nil {
			t.Fatalf("listing workflows: %v", err)
		}
		for _, e := range resp.Executions {
			ids[e.Execution.WorkflowId] = true
		}
		if token = resp.NextPageToken; len(token) == 0 {
			return ids
		}
	}
}

// audit returns the audit entries of the tenant newer than seq, newest
// first.
func audit(t *testing.T, cl *agentflow.Client, key string, seq int) []agentflow.AuditEntry {
	t.Helper()
	var out []agentflow.AuditEntry
	for page := 1; ; page++ {
		p := auditPage(t, cl, key, page)
		for _, e := range p.Entries {
			if e.Seq <= seq {
				return out
			}
			out = append(out, e)
		}
		if page >= p.Pages {
			return out
		}
	}
}

// auditPage reads a page of the audit log, a query of the session
// manager: asked again while the manager's workflow task is retried.
func auditPage(t *testing.T, cl *agentflow.Client, key string, page int) agentflow.AuditPage {
	t.Helper()
	deadline := time.Now().Add(accWait)
	for {
		p, err := cl.Audit(context.Background(), key, accRoot, page)
		if err == nil {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("reading the audit log: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func topSeq(t *testing.T, cl *agentflow.Client, key string) int {
	t.Helper()
	if p := auditPage(t, cl, key, 1); len(p.Entries) > 0 {
		return p.Entries[0].Seq
	}
	return 0
}

// controlled is what the controls change of a session.
type controlled struct {
	Title, Backend, Root, Requester, Model string
	Status                                 agentflow.SessionStatus
	Turn, Forks                            int
}

func controlledOf(v agentflow.SessionView) controlled {
	return controlled{Title: v.Title, Backend: v.Backend, Root: v.Root, Requester: v.Requester, Model: v.Model,
		Status: v.Status, Turn: v.Turn, Forks: v.Forks}
}

// accBefore is what a row may not change unless it works.
type accBefore struct {
	handled    int
	public     map[string]bool // ts of the bot's public messages in the person's channel
	ephemerals int
	responses  int
	seq        int
	workflows  map[string]bool
	state      agentflow.SessionView
}

func (h *accSlack) before(t *testing.T, p accPerson, s *accSession) accBefore {
	t.Helper()
	b := accBefore{handled: h.obs.mark(), public: map[string]bool{}, ephemerals: len(h.fs.Ephemerals(p.channel)),
		responses: len(h.fs.Responses()), seq: topSeq(t, h.stack.Sessions, s.key),
		workflows: workflows(t, h.stack.Temporal), state: h.state(t, s.key)}
	for _, m := range h.botMessages(p.channel) {
		b.public[m.TS] = true
	}
	return b
}

// refused checks that p was told want privately (an ephemeral message;
// plain chat, want empty, gets no answer) and that nothing else happened: no public message, no change to the
// session, no workflow started, no control request accepted. auditVerb,
// when not empty, is the control verb the session manager must have
// refused for p (an allowed non-owner's request reaches it).
func (h *accSlack) refused(t *testing.T, p accPerson, s *accSession, b accBefore, want, auditVerb string) {
	t.Helper()
	for _, m := range h.fs.Ephemerals(p.channel)[b.ephemerals:] {
		if want == "" {
			t.Errorf("plain chat from outside the allowlist was answered: %s: %q", m.Recipient, m.Text)
		}
	}
	until(t, fmt.Sprintf("a private %q to %s", want, p.user), func() (bool, string) {
		if want == "" {
			return true, ""
		}
		var got []string
		for _, m := range h.fs.Ephemerals(p.channel)[b.ephemerals:] {
			if m.Recipient == p.user && strings.Contains(m.Text, want) {
				return true, ""
			}
			got = append(got, m.Recipient+": "+m.Text)
		}
		return false, strings.Join(got, " | ")
	})
	for _, m := range h.fs.Ephemerals(p.channel)[b.ephemerals:] {
		if m.Recipient != p.user {
			t.Errorf("someone else was shown an answer to %s: %s: %q", p.user, m.Recipient, m.Text)
		}
	}
	for _, m := range h.botMessages(p.channel) {
		if !b.public[m.TS] && !h.elsewhere(s, m) {
			t.Errorf("a public message was posted for a refused request: %q (thread %s)", m.Text, m.ThreadTS)
		}
	}
	for _, r := range h.fs.Responses()[b.responses:] {
		if r.ResponseType == "in_channel" {
			t.Errorf("a public response was sent for a refused request: %q", r.Text)
		}
	}
	if got, was := controlledOf(h.state(t, s.key)), controlledOf(b.state); got != was {
		t.Errorf("the session changed:\n got %+v\nwant %+v", got, was)
	}
	for id := range workflows(t, h.stack.Temporal) {
		if !b.workflows[id] && !h.isKnown(strings.TrimPrefix(id, "agent/")) {
			t.Errorf("a workflow was started: %s", id)
		}
	}
	// The log has what other sessions (earlier rows' forks and new
	// sessions) registered meanwhile; this row's are its person's or its
	// session's.
	sawRefusal := false
	for _, e := range audit(t, h.stack.Sessions, s.key, b.seq) {
		switch {
		case e.By != p.user && e.Thread != s.key:
		case e.Outcome != agentflow.AuditRefused:
			t.Errorf("a control request was %s: %+v", e.Outcome, e)
		case e.By == p.user && e.Verb == auditVerb:
			sawRefusal = true
		case p.role == roleStranger:
			t.Errorf("a stranger's request reached the session manager: %+v", e)
		}
	}
	if auditVerb != "" && !sawRefusal {
		t.Errorf("the session manager has no refused %s by %s in its audit log", auditVerb, p.user)
	}
}

// done checks the audit log of a control that worked: p asked for verb
// and it was accepted or done.
func (h *accSlack) done(t *testing.T, p accPerson, s *accSession, b accBefore, verb string) {
	t.Helper()
	for _, e := range audit(t, h.stack.Sessions, s.key, b.seq) {
		if e.By == p.user && e.Verb == verb && e.Thread == s.key {
			if e.Outcome == agentflow.AuditRefused {
				t.Fatalf("%s by %s was refused: %s", verb, p.user, e.Reason)
			}
			return
		}
	}
	t.Fatalf("no %s by %s in the audit log", verb, p.user)
}

// newWorkflow waits for one agent workflow that was not there before and
// returns its thread key.
func (h *accSlack) newWorkflow(t *testing.T, b accBefore) string {
	t.Helper()
	var key string
	until(t, "a new session", func() (bool, string) {
		var fresh []string
		for id := range workflows(t, h.stack.Temporal) {
			if !b.workflows[id] {
				fresh = append(fresh, id)
			}
		}
		if len(fresh) == 1 {
			key = strings.TrimPrefix(fresh[0], "agent/")
			return true, ""
		}
		return false, strings.Join(fresh, ", ")
	})
	return key
}

// unseen checks that the session of key never got the message id: it
// answers the message query with "unknown message ID" (a query cannot
// wait for a turn, so this holds however soon it is asked).
func (h *accSlack) unseen(t *testing.T, key, id string) {
	t.Helper()
	deadline := time.Now().Add(accWait)
	for {
		_, err := h.stack.Temporal.QueryWorkflow(context.Background(), agentflow.AgentWorkflowID(key), "", agentflow.QueryMessage, id)
		switch {
		case err == nil:
			t.Errorf("the session %s got message %s of a refused person", key, id)
			return
		case strings.Contains(err.Error(), "unknown message ID"):
			return
		case time.Now().After(deadline):
			t.Fatalf("asking the session %s about message %s: %v", key, id, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// never checks that no session was started in the thread of key.
func (h *accSlack) never(t *testing.T, key string) {
	t.Helper()
	p, err := h.stack.Sessions.Describe(context.Background(), key)
	if err != nil || p != agentflow.PresenceNone {
		t.Errorf("the thread %s of a refused mention: %v %v, want no session", key, p, err)
	}
}

// otherBackend is the backend a switch of s asks for: never the one it is on.
func (h *accSlack) otherBackend(t *testing.T, s *accSession) string {
	if h.state(t, s.key).Backend == "docker" {
		return "local"
	}
	return "docker"
}

// runLong starts a long turn in s as p, for stop to stop, and returns the
// message's ts once the turn runs.
func (h *accSlack) runLong(t *testing.T, p accPerson, s *accSession) string {
	t.Helper()
	ts := h.fs.PostUserMessage(s.channel, p.user, "sh: sleep 600", s.root)
	until(t, "the long turn running", func() (bool, string) {
		v := h.state(t, s.key)
		return v.Status == agentflow.StatusRunning && len(v.Tools) > 0, fmt.Sprintf("%s, %d tools", v.Status, len(v.Tools))
	})
	return ts
}

// accEntry is one entry point (or one control through it).
type accEntry struct {
	name string
	// act does it as p on s (for works: as one whose request must work)
	// and returns the text of the command or message event it makes and
	// what works needs (a message's ts).
	act func(t *testing.T, h *accSlack, p accPerson, s *accSession, works bool) (text, ref string)
	// chat: plain chat, not addressed to the bot (a stranger's gets no
	// answer). message: ref is a message to s; starts: ref is the root of
	// a new thread in the person's channel (a stranger's must reach no
	// session).
	chat, message, starts bool
	// control: an allowed non-owner is refused (auditVerb: by the session
	// manager; "" by the gateway, as export). noThread: everyone allowed
	// is told it works in a session's thread only.
	control, noThread bool
	auditVerb         string
	// approval, when set, makes the row click a button of a command
	// waiting for approval in s: before the row, unless one waits there
	// already, alice posts the message it returns (its turn must wait
	// for approval). A refused click leaves it waiting, for the next
	// refused rows.
	approval func(h *accSlack) string
	// works checks that it worked for p.
	works func(t *testing.T, h *accSlack, p accPerson, s *accSession, b accBefore, text, ref string)
}

// TestAccessEveryEntryPoint (issue 16, item 13) tries every way into the
// bot from Slack — a message in a thread, a mention (in a thread and in
// the channel), /agent new, /agent with a control verb, each control as a
// "!agent" command and as a mention, the buttons and the backend select
// of the status message, the buttons of an approval message (Approve,
// Approve all for this turn, Deny; the tenant's policy makes risky
// commands wait) and the "Fork from here" message shortcut — over Socket
// Mode and over signed HTTP, as each kind of person: a stranger, the
// owner in a channel the bot does not serve, an allowed non-owner, the
// owner and an admin. A stranger starts and changes nothing and is told
// so privately; an allowed non-owner may talk in a thread but every
// control is refused privately, by the session manager, and changes
// nothing (a command waiting for approval waits on); the owner's and the
// admin's controls work (an approved command runs, a denied one does
// not, and the model is told). Everything
// real but Slack and the model: the Inbound and Router, Temporal, the
// workflows, the local and Docker sandboxes.
func TestAccessEveryEntryPoint(t *testing.T) {
	ctx := context.Background()
	h := startAccSlack(t)
	stack := h.stack
	// Risky commands wait for approval (the rows' own commands are
	// harmless echoes and sleeps): the approval buttons are entry points.
	h.setPolicy(t, agentflow.PolicyApprovals, agentflow.ApprovalRisky, agentflow.ApprovalRisky)

	// The sessions the refused rows act on: alice's in C1, and alice's in
	// C2 from before the bot stopped serving C2.
	shared := h.startByMention(t, accAlice)
	shared.status = h.statusMessage(t, shared)
	closed := h.startInClosedChannel(t)
	targets := map[string]*accSession{}
	target := func(p accPerson) *accSession {
		switch {
		case p.channel == accClosed:
			return closed
		case p.role == roleOwner || p.role == roleAdmin:
			return targets[p.name]
		}
		return shared
	}

	rows := 0
	for _, mode := range []string{"socket", "http"} {
		t.Run(mode, func(t *testing.T) {
			h.mode(mode)
			// The owner and the admin each control a session of alice's
			// of their own, new in each mode (destroy ends it).
			targets["owner"] = h.startBySlash(t, accAlice, "owner's "+mode)
			targets["admin"] = h.startBySlash(t, accAlice, "admin's "+mode)
			for _, e := range slackEntries() {
				t.Run(e.name, func(t *testing.T) {
					for _, p := range accPeople {
						rows++
						t.Run(p.name, func(t *testing.T) {
							h.row(t, e, p, target(p))
						})
					}
				})
			}
			// The command the refused rows clicked at waits still: its
			// owner denies it, so that the next rows find the thread idle.
			h.denyWaiting(t, shared)
		})
	}
	t.Logf("%d rows", rows)

	// Whatever lagged in visibility: every session there is was meant,
	// and no model request carries what a refused person wrote.
	for id := range workflows(t, stack.Temporal) {
		if key := strings.TrimPrefix(id, "agent/"); !h.known[key] {
			v, _ := stack.Sessions.State(ctx, key)
			t.Errorf("a session nobody should have started: %s (requester %s, parent %s)", key, v.Requester, v.Parent)
		}
	}
	for _, r := range stack.Model.Requests() {
		for _, m := range h.markers {
			if regexp.MustCompile(regexp.QuoteMeta(m) + `\b`).Match(r.Body) {
				t.Errorf("the model was sent %q, which a refused person wrote", m)
			}
		}
	}
}

// startAccSlack starts the stack of the access tests: the fake workspace
// with alice, bob, root and eve, the real Sender, Temporal and a worker,
// the Router (alice and bob allowed, root an admin, C1 served) behind an
// observer, and the real Inbound over Socket Mode (connected) and signed
// HTTP; everything stops when t ends.
func startAccSlack(t *testing.T) *accSlack {
	t.Helper()
	return startAccSlackWith(t, accOptions{})
}

// accOptions change the stack of startAccSlackWith.
type accOptions struct {
	// stack is how the back end is made.
	stack stacktest.Options
	// home shares an App Home between the Inbound and the Sender, as
	// cmd/bot wires them in one process.
	home bool
}

// startAccSlackWith is startAccSlack with opts.
func startAccSlackWith(t *testing.T, opts accOptions) *accSlack {
	t.Helper()
	ctx := context.Background()
	fs := fakeslack.New(fakeslack.Options{})
	t.Cleanup(fs.Close)
	for _, u := range []fakeslack.User{{ID: accAlice, Name: "alice"}, {ID: accBob, Name: "bob"},
		{ID: accRoot, Name: "root"}, {ID: accEve, Name: "eve"}} {
		fs.SetUser(u)
	}
	o := fs.Options()
	access := bot.Access{Users: []string{accAlice, accBob}, Channels: []string{accOpen}, Admins: []string{accRoot}}
	var (
		home     *slackbot.Home
		sessions = &lateSessions{}
	)
	if opts.home {
		var err error
		if home, err = slackbot.NewHome(slackbot.HomeConfig{Sessions: sessions, Admins: access.Admins}); err != nil {
			t.Fatal(err)
		}
	}
	sender, err := slackbot.NewSender(slackbot.SenderConfig{BotToken: o.BotToken, APIURL: fs.APIURL(), Home: home})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sender.Close) // after the worker stopped
	stack := stacktest.StartWith(t, map[string]agentflow.ChatSender{slackbot.Platform: sender}, opts.stack)
	sessions.cl.Store(stack.Sessions)
	router := &bot.Router{Sessions: stack.Sessions, Cache: store.NewMemoryCache(), Access: access,
		Backends: []string{"local", "docker"}, DefaultBackend: "local"}
	h := &accSlack{fs: fs, stack: stack, obs: &accObserver{h: router}, team: o.TeamID, known: map[string]bool{}}
	in := slackbot.NewInbound(slackbot.InboundConfig{BotToken: o.BotToken, AppToken: o.AppToken, SigningSecret: o.SigningSecret,
		APIURL: fs.APIURL(), Backends: router.Backends, Access: &access, Home: home}, h.obs, nil)
	if err := in.Start(ctx); err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewServer(in.HTTPHandler())
	h.gw = gw.URL
	sctx, stop := context.WithCancel(ctx)
	socketDone := make(chan error, 1)
	go func() { socketDone <- in.RunSocketMode(sctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-socketDone; err != nil {
			t.Errorf("RunSocketMode: %v", err)
		}
		gw.Close()
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := in.Shutdown(sctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	until(t, "a socket mode connection", func() (bool, string) { return fs.Connections() == 1, "" })
	return h
}

// row runs one entry as one person and checks the outcome for their role.
func (h *accSlack) row(t *testing.T, e accEntry, p accPerson, s *accSession) {
	works := p.role == roleOwner || p.role == roleAdmin || (p.role == roleNonOwner && !e.control && !e.noThread)
	if e.approval != nil && s.approval == "" {
		if s.channel == accClosed {
			h.approvalFromBefore(t, s)
		} else {
			h.ask(t, s, e.approval(h))
		}
	}
	b := h.before(t, p, s)
	text, ref := e.act(t, h, p, s, works)
	h.obs.wait(t, b.handled, p.user, text)
	if e.approval != nil && !works {
		defer h.stillWaits(t, s)
	}
	switch {
	case p.role == roleStranger:
		h.refusedText(text)
		want := "not on this bot's allowlist"
		if e.chat {
			want = ""
		}
		h.refused(t, p, s, b, want, "")
		if e.message {
			h.unseen(t, s.key, ref)
		}
		if e.starts {
			h.never(t, h.key(p.channel, ref))
		}
	case e.noThread:
		h.refused(t, p, s, b, "works inside a session's thread", "")
	case !works:
		h.refused(t, p, s, b, "Only the person who started this session (or an admin)", e.auditVerb)
	default:
		e.works(t, h, p, s, b, text, ref)
	}
}

// slackEntries are the entry points, in the order the rows run: the
// controls that work for the owner and the admin change their session,
// so each leaves it as the next expects (destroy last).
func slackEntries() []accEntry {
	// chat checks that a message reached the session and was answered.
	chat := func(t *testing.T, h *accSlack, p accPerson, s *accSession, b accBefore, text, ref string) {
		if res := h.answered(t, s.key, ref); res.Status != agentflow.TurnDone {
			t.Fatalf("turn %+v", res)
		}
		h.waitThread(t, s.channel, s.root, "stdout:\n"+strings.TrimPrefix(text, "sh: echo "))
	}
	command := func(verb string) func(t *testing.T, h *accSlack, p accPerson, s *accSession, works bool) (string, string) {
		return func(t *testing.T, h *accSlack, p accPerson, s *accSession, works bool) (string, string) {
			h.fs.PostUserMessage(p.channel, p.user, "!agent "+verb, s.root)
			return verb, ""
		}
	}
	click := func(action, verb string) func(t *testing.T, h *accSlack, p accPerson, s *accSession, works bool) (string, string) {
		return func(t *testing.T, h *accSlack, p accPerson, s *accSession, works bool) (string, string) {
			ref := ""
			if works && verb == "stop" {
				ref = h.runLong(t, p, s)
			}
			h.fs.BlockAction(s.channel, p.user, s.status, action, s.key)
			return verb, ref
		}
	}
	forked := func(t *testing.T, h *accSlack, p accPerson, s *accSession, b accBefore, text, ref string) {
		h.done(t, p, s, b, agentflow.ControlFork)
		until(t, "the fork counted", func() (bool, string) {
			v := h.state(t, s.key)
			return v.Forks == b.state.Forks+1, fmt.Sprint(v.Forks)
		})
		fork := h.newWorkflow(t, b)
		h.keep(fork)
		v := h.state(t, fork)
		if v.Parent != s.key || v.Requester != p.user {
			t.Fatalf("the fork %s: parent %s, requester %s; want %s, %s", fork, v.Parent, v.Requester, s.key, p.user)
		}
		_, channel, root, _ := slackbot.ParseThreadKey(fork)
		h.waitThread(t, channel, root, "Forked from")
		until(t, "the fork linked in the thread", func() (bool, string) {
			n := 0
			for _, m := range h.fs.Thread(s.channel, s.root) {
				if m.BotID != "" && strings.Contains(m.Text, "Forked into") {
					n++
				}
			}
			return n == b.state.Forks+1, fmt.Sprint(n)
		})
	}
	stopped := func(verb string) func(t *testing.T, h *accSlack, p accPerson, s *accSession, b accBefore, text, ref string) {
		return func(t *testing.T, h *accSlack, p accPerson, s *accSession, b accBefore, text, ref string) {
			h.done(t, p, s, b, agentflow.ControlStop)
			if res := h.answered(t, s.key, ref); res.Status != agentflow.TurnStopped {
				t.Fatalf("the long turn after %s: %s", verb, res.Status)
			}
		}
	}
	paused := func(t *testing.T, h *accSlack, p accPerson, s *accSession, b accBefore, text, ref string) {
		h.done(t, p, s, b, agentflow.ControlPause)
		until(t, "the session paused", func() (bool, string) {
			v := h.state(t, s.key)
			return v.Status == agentflow.StatusPaused, string(v.Status)
		})
	}
	switched := func(t *testing.T, h *accSlack, p accPerson, s *accSession, b accBefore, text, ref string) {
		h.done(t, p, s, b, agentflow.ControlSwitch)
		until(t, "the switch", func() (bool, string) {
			v := h.state(t, s.key)
			return v.Backend == ref, v.Backend
		})
	}
	clickApproval := func(action string) func(t *testing.T, h *accSlack, p accPerson, s *accSession, works bool) (string, string) {
		return func(t *testing.T, h *accSlack, p accPerson, s *accSession, works bool) (string, string) {
			h.fs.BlockAction(s.channel, p.user, s.approvalMsg, action, s.approval)
			return clickCommand(action, s.approval), s.asked
		}
	}
	// decided checks that p's click decided the command waiting in s:
	// the turn went on, the commands ran (approved) or not (denied) and
	// the model was told, and the approval message says so, without
	// buttons.
	decided := func(state string, says func(user string) []string) func(t *testing.T, h *accSlack, p accPerson, s *accSession, b accBefore, text, ref string) {
		return func(t *testing.T, h *accSlack, p accPerson, s *accSession, b accBefore, text, ref string) {
			h.done(t, p, s, b, agentflow.ControlApprove)
			res := h.answered(t, s.key, ref)
			if res.Status != agentflow.TurnDone {
				t.Fatalf("the turn after %s: %s", text, res.Status)
			}
			for _, w := range says(p.user) {
				if !strings.Contains(res.Answer, w) {
					t.Errorf("the answer after %s lacks %q:\n%s", text, w, res.Answer)
				}
			}
			for _, m := range echoed.FindAllStringSubmatch(h.messageText(t, s, ref), -1) {
				if ran := strings.Contains(res.Answer, m[1]); ran != (state == agentflow.ApprovalApproved) {
					t.Errorf("after %s, the output of 'echo %s' is in the answer: %v\n%s", text, m[1], ran, res.Answer)
				}
			}
			h.decidedMessage(t, s, s.approval, state, p.user)
			for _, m := range h.fs.Thread(s.channel, s.root) {
				if !b.public[m.TS] && approvalKey(m) != "" {
					t.Errorf("another approval message after %s: %q", text, m.Text)
				}
			}
			s.approval, s.approvalMsg, s.asked = "", "", ""
		}
	}
	titled := func(t *testing.T, h *accSlack, p accPerson, s *accSession, b accBefore, text, ref string) {
		h.done(t, p, s, b, agentflow.ControlTitle)
		until(t, "the new title", func() (bool, string) {
			v := h.state(t, s.key)
			return v.Title == ref, v.Title
		})
	}
	return []accEntry{
		{name: "message-in-thread", chat: true, message: true, act: func(t *testing.T, h *accSlack, p accPerson, s *accSession, works bool) (string, string) {
			text := "sh: echo " + h.marker("message")
			return text, h.fs.PostUserMessage(p.channel, p.user, text, s.root)
		}, works: chat},
		{name: "mention-in-thread", message: true, act: func(t *testing.T, h *accSlack, p accPerson, s *accSession, works bool) (string, string) {
			text := "sh: echo " + h.marker("mention")
			return text, h.fs.PostUserMessage(p.channel, p.user, h.mention()+text, s.root)
		}, works: chat},
		{name: "mention-in-channel", starts: true, act: func(t *testing.T, h *accSlack, p accPerson, s *accSession, works bool) (string, string) {
			text := "sh: echo " + h.marker("start")
			ts := h.fs.PostUserMessage(p.channel, p.user, h.mention()+text, "")
			if works {
				h.keep(h.key(p.channel, ts))
			}
			return text, ts
		}, works: func(t *testing.T, h *accSlack, p accPerson, s *accSession, b accBefore, text, ref string) {
			key := h.key(p.channel, ref)
			if res := h.answered(t, key, ref); res.Status != agentflow.TurnDone {
				t.Fatalf("turn %+v", res)
			}
			if v := h.state(t, key); v.Requester != p.user {
				t.Fatalf("the new session's requester is %q, want %q", v.Requester, p.user)
			}
			h.waitThread(t, p.channel, ref, "stdout:\n"+strings.TrimPrefix(text, "sh: echo "))
		}},
		{name: "slash-new", act: func(t *testing.T, h *accSlack, p accPerson, s *accSession, works bool) (string, string) {
			title := h.marker("new")
			h.fs.SlashCommand(p.channel, p.user, "new "+title)
			return "new " + title, title
		}, works: func(t *testing.T, h *accSlack, p accPerson, s *accSession, b accBefore, text, ref string) {
			key := h.newWorkflow(t, b)
			h.keep(key)
			v := h.state(t, key)
			if v.Requester != p.user || v.Title != ref {
				t.Fatalf("the new session: requester %q, title %q; want %q, %q", v.Requester, v.Title, p.user, ref)
			}
			_, channel, root, _ := slackbot.ParseThreadKey(key)
			h.waitThread(t, channel, root, "Session *"+ref+"*")
		}},
		{name: "slash-destroy", noThread: true, act: func(t *testing.T, h *accSlack, p accPerson, s *accSession, works bool) (string, string) {
			h.fs.SlashCommand(p.channel, p.user, "destroy")
			return "destroy", ""
		}},
		{name: "command-title", control: true, auditVerb: agentflow.ControlTitle,
			act: func(t *testing.T, h *accSlack, p accPerson, s *accSession, works bool) (string, string) {
				title := h.marker("title")
				h.fs.PostUserMessage(p.channel, p.user, "!agent title "+title, s.root)
				return "title " + title, title
			}, works: titled},
		{name: "mention-title", control: true, auditVerb: agentflow.ControlTitle,
			act: func(t *testing.T, h *accSlack, p accPerson, s *accSession, works bool) (string, string) {
				title := h.marker("title")
				h.fs.PostUserMessage(p.channel, p.user, h.mention()+`title "`+title+`"`, s.root)
				return `title "` + title + `"`, title
			}, works: titled},
		{name: "command-export", control: true, act: command("export"),
			works: func(t *testing.T, h *accSlack, p accPerson, s *accSession, b accBefore, text, ref string) {
				until(t, "the transcript in the thread", func() (bool, string) {
					for _, m := range h.fs.Thread(s.channel, s.root) {
						if m.BotID != "" && !b.public[m.TS] && strings.Contains(m.Text, "--- turn") && strings.Contains(m.Text, s.said) {
							return true, ""
						}
					}
					return false, ""
				})
			}},
		{name: "button-approve", control: true, auditVerb: agentflow.ControlApprove,
			approval: func(h *accSlack) string { return "sh: " + riskyCommand + "; echo " + h.marker("approved") },
			act:      clickApproval(slackbot.ActionApprove), works: decided(agentflow.ApprovalApproved, approvedBy)},
		{name: "button-approve-all", control: true, auditVerb: agentflow.ControlApprove,
			approval: func(h *accSlack) string {
				m := h.marker("approved-all")
				return "sh: " + riskyCommand + "; echo " + m + "-first\nsh: " + riskyCommand + "; echo " + m + "-second"
			},
			act: clickApproval(slackbot.ActionApproveAll), works: decided(agentflow.ApprovalApproved, approvedAllBy)},
		{name: "button-deny", control: true, auditVerb: agentflow.ControlApprove,
			approval: func(h *accSlack) string { return "sh: " + riskyCommand + "; echo " + h.marker("denied") },
			act:      clickApproval(slackbot.ActionDeny), works: decided(agentflow.ApprovalDenied, deniedBy)},
		{name: "command-reset", control: true, auditVerb: agentflow.ControlReset, act: command("reset"),
			works: func(t *testing.T, h *accSlack, p accPerson, s *accSession, b accBefore, text, ref string) {
				h.done(t, p, s, b, agentflow.ControlReset)
				h.waitThread(t, s.channel, s.root, "Started a fresh conversation")
			}},
		{name: "select-switch", control: true, auditVerb: agentflow.ControlSwitch,
			act: func(t *testing.T, h *accSlack, p accPerson, s *accSession, works bool) (string, string) {
				to := h.otherBackend(t, s)
				h.fs.BlockAction(s.channel, p.user, s.status, slackbot.ActionSwitch, to)
				return "switch " + to, to
			}, works: switched},
		{name: "command-switch", control: true, auditVerb: agentflow.ControlSwitch,
			act: func(t *testing.T, h *accSlack, p accPerson, s *accSession, works bool) (string, string) {
				to := h.otherBackend(t, s)
				h.fs.PostUserMessage(p.channel, p.user, "!agent switch "+to, s.root)
				return "switch " + to, to
			}, works: switched},
		{name: "command-fork", control: true, auditVerb: agentflow.ControlFork, act: command("fork"), works: forked},
		{name: "button-fork", control: true, auditVerb: agentflow.ControlFork, act: click(slackbot.ActionFork, "fork"), works: forked},
		{name: "shortcut-fork", control: true, auditVerb: agentflow.ControlFork,
			act: func(t *testing.T, h *accSlack, p accPerson, s *accSession, works bool) (string, string) {
				h.fs.MessageShortcut(s.channel, p.user, s.status, s.root, slackbot.ShortcutForkFromID)
				return "fork", ""
			}, works: forked},
		{name: "command-done", control: true, auditVerb: agentflow.ControlPause, act: command("done"), works: paused},
		{name: "command-stop", control: true, auditVerb: agentflow.ControlStop,
			act: func(t *testing.T, h *accSlack, p accPerson, s *accSession, works bool) (string, string) {
				ref := ""
				if works {
					ref = h.runLong(t, p, s)
				}
				h.fs.PostUserMessage(p.channel, p.user, "!agent stop", s.root)
				return "stop", ref
			}, works: stopped("!agent stop")},
		{name: "button-stop", control: true, auditVerb: agentflow.ControlStop, act: click(slackbot.ActionStop, "stop"),
			works: stopped("the Stop button")},
		{name: "button-done", control: true, auditVerb: agentflow.ControlPause, act: click(slackbot.ActionDone, "done"), works: paused},
		{name: "command-destroy", control: true, auditVerb: agentflow.ControlDestroy, act: command("destroy"),
			works: func(t *testing.T, h *accSlack, p accPerson, s *accSession, b accBefore, text, ref string) {
				h.done(t, p, s, b, agentflow.ControlDestroy)
				until(t, "the session ended", func() (bool, string) {
					pr, err := h.stack.Sessions.Describe(context.Background(), s.key)
					return err == nil && pr == agentflow.PresenceEnded, fmt.Sprint(pr, err)
				})
			}},
	}
}

// startByMention has user start a session in C1 with a mention, and waits
// for its answer.
func (h *accSlack) startByMention(t *testing.T, user string) *accSession {
	t.Helper()
	said := h.marker("said")
	from := h.obs.mark()
	root := h.fs.PostUserMessage(accOpen, user, h.mention()+"sh: echo "+said, "")
	h.obs.wait(t, from, user, "sh: echo "+said)
	s := &accSession{key: h.key(accOpen, root), channel: accOpen, root: root, said: said}
	h.keep(s.key)
	if res := h.answered(t, s.key, root); res.Status != agentflow.TurnDone {
		t.Fatalf("the first turn: %+v", res)
	}
	h.waitThread(t, accOpen, root, "stdout:\n"+said)
	return s
}

// statusMessage asks for the session's status as its owner and returns
// the status message's ts (it carries the controls).
func (h *accSlack) statusMessage(t *testing.T, s *accSession) string {
	t.Helper()
	h.fs.PostUserMessage(s.channel, accAlice, "!agent status", s.root)
	var ts string
	until(t, "the status message", func() (bool, string) {
		for _, m := range h.fs.Thread(s.channel, s.root) {
			if m.BotID != "" && strings.Contains(string(m.Blocks), slackbot.ActionStop) {
				ts = m.TS
				return true, ""
			}
		}
		return false, ""
	})
	return ts
}

// startBySlash has user start a session with "/agent new", gives it a
// turn, and returns it with its status message.
func (h *accSlack) startBySlash(t *testing.T, user, title string) *accSession {
	t.Helper()
	b := accBefore{workflows: workflows(t, h.stack.Temporal)}
	h.fs.SlashCommand(accOpen, user, "new "+title)
	key := h.newWorkflow(t, b)
	h.keep(key)
	_, channel, root, _ := slackbot.ParseThreadKey(key)
	s := &accSession{key: key, channel: channel, root: root, said: h.marker("said")}
	until(t, "the status message of /agent new", func() (bool, string) {
		for _, m := range h.fs.Thread(channel, root) {
			if m.BotID != "" && strings.Contains(string(m.Blocks), slackbot.ActionStop) {
				s.status = m.TS
				return true, ""
			}
		}
		return false, ""
	})
	from := h.obs.mark()
	ts := h.fs.PostUserMessage(channel, user, "sh: echo "+s.said, root)
	h.obs.wait(t, from, user, "sh: echo "+s.said)
	if res := h.answered(t, key, ts); res.Status != agentflow.TurnDone {
		t.Fatalf("the first turn: %+v", res)
	}
	h.waitThread(t, channel, root, "stdout:\n"+s.said)
	return s
}

// startInClosedChannel starts alice's session in C2 as the bot did when
// it still served C2, and posts its status message with the controls.
func (h *accSlack) startInClosedChannel(t *testing.T) *accSession {
	t.Helper()
	ctx := context.Background()
	before := len(h.fs.Ephemerals(accClosed))
	root := h.fs.PostUserMessage(accClosed, accAlice, "a thread from before", "")
	s := &accSession{key: h.key(accClosed, root), channel: accClosed, root: root}
	h.keep(s.key)
	v, err := h.stack.Sessions.Start(ctx, agentflow.AgentInput{ThreadKey: s.key, Backend: "local", Requester: accAlice,
		Admins: []string{accRoot}, Title: "from before C2 was closed"})
	if err != nil {
		t.Fatal(err)
	}
	api := slack.New(h.fs.Options().BotToken, slack.OptionAPIURL(h.fs.APIURL()))
	blocks := slackbot.StatusBlocks("Session *from before*", v, "", []string{"local", "docker"})
	_, ts, err := api.PostMessageContext(ctx, accClosed, slack.MsgOptionTS(root), slack.MsgOptionText("status", false),
		slack.MsgOptionBlocks(blocks...))
	if err != nil {
		t.Fatal(err)
	}
	s.status = ts
	// The bot ignores a top-level message without a mention: nothing
	// to refuse.
	if n := len(h.fs.Ephemerals(accClosed)); n != before {
		t.Fatalf("%d answers to a message not for the bot", n-before)
	}
	return s
}
