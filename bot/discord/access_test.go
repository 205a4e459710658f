package discordbot_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bwmarrin/discordgo"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
	discordbot "github.com/agentbot/agentbot/bot/discord"
	"github.com/agentbot/agentbot/internal/fakediscord"
	"github.com/agentbot/agentbot/internal/stacktest"
	"github.com/agentbot/agentbot/store"
)

// The people of TestAccessEveryEntryPoint: alice and bob are on the users
// allowlist and have the allowed role; norole is on the users allowlist
// without it; eve has the role but is on no list; root is an admin (and
// needs neither). The bot serves channel "agents" (and its threads) and
// the channels made for the rows; "closed" is a channel it does not serve
// (any more: alice has sessions there from before).
const (
	accAlice  = "1001"
	accBob    = "1002"
	accNoRole = "1003"
	accEve    = "1004"
	accRoot   = "1009"
	accRole   = "5001"
	// accWait bounds every wait for something the stack does.
	accWait = 90 * time.Second
	// accFresh is how many allowed channels are made up front for the
	// rows that start a session in a channel of its own.
	accFresh = 24
)

// accKind is what a person is to the session a row acts on.
type accKind int

const (
	kindStranger accKind = iota // refused at the gate
	kindNonOwner                // allowed, but did not start the session
	kindOwner                   // started it
	kindAdmin                   // an admin
)

type accPerson struct {
	name, user string
	roles      []string
	closed     bool // acts in the closed channel
	kind       accKind
}

var accPeople = []accPerson{
	{"stranger", accEve, []string{accRole}, false, kindStranger},
	{"member-without-the-role", accNoRole, nil, false, kindStranger},
	{"owner-in-a-closed-channel", accAlice, []string{accRole}, true, kindStranger},
	{"allowed-non-owner", accBob, []string{accRole}, false, kindNonOwner},
	{"owner", accAlice, []string{accRole}, false, kindOwner},
	{"admin", accRoot, nil, false, kindAdmin},
}

// accSession is a session a row acts on: a channel's or a thread's.
type accSession struct {
	key, channel string
	// status is the ID of a message with the session's controls.
	status string
	// said is text of a turn it answered, which export must show.
	said string
	// approval is the ID of the command waiting for approval in it,
	// approvalMsg the ID of the message with its buttons and asked the
	// ID of the message whose turn waits ("" for an approval message from
	// before, in a channel the bot does not serve); all empty when
	// nothing waits.
	approval, approvalMsg, asked string
}

// accObserver hands events to the real Router and records each one when
// the Router is done with it (its answer sent).
type accObserver struct {
	h   discordbot.Handler
	mu  sync.Mutex
	ids map[string]bool
}

func (o *accObserver) Handle(ctx context.Context, ev bot.Event, r bot.Replier) error {
	err := o.h.Handle(ctx, ev, r)
	o.mu.Lock()
	o.ids[ev.ID] = true
	o.mu.Unlock()
	return err
}

// wait waits until the event id (a message's or an interaction's) was handled.
func (o *accObserver) wait(t *testing.T, id string) {
	t.Helper()
	until(t, "the router handling event "+id, func() (bool, string) {
		o.mu.Lock()
		defer o.mu.Unlock()
		return o.ids[id], ""
	})
}

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

// accDiscord is the stack of the test: the fake guild, the real Inbound
// (gateway and HTTP interactions) and Router, Temporal and a worker.
type accDiscord struct {
	fd     *fakediscord.Server
	dg     *discordgo.Session // the test's own REST client, as the bot
	stack  *stacktest.Stack
	obs    *accObserver
	hs     string // the Inbound's interactions URL
	guild  string
	agents string // the channel the refused rows act in
	closed string

	mu      sync.Mutex
	seq     int
	fresh   []string // allowed channels not used yet
	known   map[string]bool
	markers []string
}

func (h *accDiscord) marker(what string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	return fmt.Sprintf("acc-%s-%d", what, h.seq)
}

func (h *accDiscord) keep(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.known[key] = true
}

func (h *accDiscord) isKnown(key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.known[key]
}

// refusedText notes the marker in text a refused person wrote, if any.
func (h *accDiscord) refusedText(text string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range strings.Fields(strings.ReplaceAll(text, `"`, " ")) {
		if strings.HasPrefix(w, "acc-") {
			h.markers = append(h.markers, w)
		}
	}
}

// channelFor is a channel of its own for a row that starts a session:
// an allowed one, or for someone in the closed part of the guild a new
// channel the bot does not serve.
func (h *accDiscord) channelFor(t *testing.T, p accPerson) string {
	t.Helper()
	if p.closed {
		return h.fd.AddChannel(h.marker("closed"), fakediscord.ChannelText)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.fresh) == 0 {
		t.Fatal("out of allowed channels: raise accFresh")
	}
	ch := h.fresh[0]
	h.fresh = h.fresh[1:]
	return ch
}

// mode makes the fake deliver interactions over the gateway or by signed HTTP.
func (h *accDiscord) mode(m string) {
	if m == "http" {
		h.fd.SetInteractionsURL(h.hs)
		return
	}
	h.fd.SetInteractionsURL("")
}

func (h *accDiscord) key(channel string) string { return discordbot.ThreadKey(h.guild, channel) }

func (h *accDiscord) mention() string { return "<@" + h.fd.Options().BotUserID + "> " }

func (h *accDiscord) state(t *testing.T, key string) agentflow.SessionView {
	t.Helper()
	v, err := h.stack.Sessions.State(context.Background(), key)
	if err != nil {
		t.Fatalf("state of %s: %v", key, err)
	}
	return v
}

// say posts a message as p and waits until the router handled it.
func (h *accDiscord) say(t *testing.T, channel string, p accPerson, text string) string {
	t.Helper()
	id := h.fd.UserMessage(channel, p.user, text, p.roles)
	h.obs.wait(t, id)
	return id
}

// waitBot waits for a bot message in channel that contains want and is
// not one of before; it returns it.
func (h *accDiscord) waitBot(t *testing.T, channel, want string, before map[string]bool) fakediscord.Message {
	t.Helper()
	var found fakediscord.Message
	until(t, fmt.Sprintf("a message with %q in %s", want, channel), func() (bool, string) {
		var texts []string
		for _, m := range h.fd.Messages(channel) {
			if m.Bot && !before[m.ID] && strings.Contains(m.Content, want) {
				found = m
				return true, ""
			}
			texts = append(texts, m.Content)
		}
		return false, strings.Join(texts, " | ")
	})
	return found
}

// answered waits for the session of key to answer the message id.
func (h *accDiscord) answered(t *testing.T, key, id string) *agentflow.TurnResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), accWait)
	defer cancel()
	res, err := h.stack.Sessions.Wait(ctx, key, id)
	if err != nil || res.Result == nil {
		t.Fatalf("the session %s never answered message %s: %v", key, id, err)
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

// audit returns the audit entries of the tenant newer than seq, newest first.
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
	channels  []string        // where its answers may show
	messages  map[string]bool // the IDs of the messages there
	seq       int
	workflows map[string]bool
	state     agentflow.SessionView
}

func (h *accDiscord) before(t *testing.T, s *accSession, channels ...string) accBefore {
	t.Helper()
	b := accBefore{channels: append([]string{s.channel}, channels...), messages: map[string]bool{},
		seq: topSeq(t, h.stack.Sessions, s.key), workflows: workflows(t, h.stack.Temporal), state: h.state(t, s.key)}
	for _, ch := range b.channels {
		for _, m := range h.fd.Messages(ch) {
			b.messages[m.ID] = true
		}
	}
	return b
}

// accRef is what a row did: the message posted (Message) or the
// interaction started (Interaction), in Channel.
type accRef struct {
	Channel, Message, Interaction string
	// Text is what the person wrote or chose; Extra what works needs.
	Text, Extra string
}

func (r accRef) id() string {
	if r.Interaction != "" {
		return r.Interaction
	}
	return r.Message
}

// refused checks that p was told want, and that nothing else happened: no
// other message, no change to the session, no workflow started, no
// control request accepted. An interaction's refusal is private (an
// ephemeral follow-up); a message's can only be a reply in public, and
// must say nothing but the refusal; plain chat (not addressed to the bot)
// gets none (want is empty). auditVerb, when not empty, is the control
// verb the session manager must have refused for p.
func (h *accDiscord) refused(t *testing.T, p accPerson, s *accSession, b accBefore, ref accRef, want, auditVerb string) {
	t.Helper()
	isAnswer := func(m fakediscord.Message) bool {
		if want == "" || !m.Bot || !strings.HasPrefix(m.Content, want) {
			return false
		}
		if ref.Interaction != "" {
			return m.InteractionID == ref.Interaction && m.Flags&fakediscord.FlagEphemeral != 0
		}
		return m.ReferenceID == ref.Message
	}
	if want != "" {
		until(t, fmt.Sprintf("%q to %s", want, p.user), func() (bool, string) {
			var got []string
			for _, m := range h.fd.Messages(ref.Channel) {
				if isAnswer(m) {
					return true, ""
				}
				if m.Bot && !b.messages[m.ID] {
					got = append(got, m.Content)
				}
			}
			return false, strings.Join(got, " | ")
		})
	}
	for _, ch := range b.channels {
		for _, m := range h.fd.Messages(ch) {
			if m.Bot && !b.messages[m.ID] && !isAnswer(m) {
				t.Errorf("a message was posted for a refused request in %s: %q (flags %d)", ch, m.Content, m.Flags)
			}
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
		case p.kind == kindStranger:
			t.Errorf("a stranger's request reached the session manager: %+v", e)
		}
	}
	if auditVerb != "" && !sawRefusal {
		t.Errorf("the session manager has no refused %s by %s in its audit log", auditVerb, p.user)
	}
}

// done checks the audit log of a control that worked: p asked for verb
// and it was accepted or done.
func (h *accDiscord) done(t *testing.T, p accPerson, s *accSession, b accBefore, verb string) {
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
func (h *accDiscord) newWorkflow(t *testing.T, b accBefore) string {
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
func (h *accDiscord) unseen(t *testing.T, key, id string) {
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
func (h *accDiscord) never(t *testing.T, key string) {
	t.Helper()
	p, err := h.stack.Sessions.Describe(context.Background(), key)
	if err != nil || p != agentflow.PresenceNone {
		t.Errorf("the thread %s of a refused mention: %v %v, want no session", key, p, err)
	}
}

// otherBackend is the backend a switch of s asks for: never the one it is on.
func (h *accDiscord) otherBackend(t *testing.T, s *accSession) string {
	if h.state(t, s.key).Backend == "docker" {
		return "local"
	}
	return "docker"
}

// runLong starts a long turn in s as p, for stop to stop, and returns the
// message's ID once the turn runs.
func (h *accDiscord) runLong(t *testing.T, p accPerson, s *accSession) string {
	t.Helper()
	id := h.say(t, s.channel, p, "sh: sleep 600")
	until(t, "the long turn running", func() (bool, string) {
		v := h.state(t, s.key)
		return v.Status == agentflow.StatusRunning && len(v.Tools) > 0, fmt.Sprintf("%s, %d tools", v.Status, len(v.Tools))
	})
	return id
}

// accEntry is one entry point (or one control through it).
type accEntry struct {
	name string
	// gateway: a message, which comes over the gateway only.
	gateway bool
	// thread: the row acts in a thread's session rather than a channel's.
	thread bool
	// fresh: for the owner and the admin, the row acts on a new session
	// (it ends it).
	fresh bool
	// act does it as p on s (works: as one whose request must work).
	act func(t *testing.T, h *accDiscord, p accPerson, s *accSession, works bool) accRef
	// chat: plain chat, not addressed to the bot (a stranger's gets no
	// answer). message: the row posts a message to s; starts: the row acts
	// in a channel of its own (a stranger's must reach no session).
	chat, message, starts bool
	// control: an allowed non-owner is refused (auditVerb: by the session
	// manager; "" by the gateway, as export).
	control   bool
	auditVerb string
	// approval, when set, makes the row click a button of a command
	// waiting for approval in s: before the row, unless one waits there
	// already, alice posts the message it returns (its turn must wait
	// for approval). A refused click leaves it waiting, for the next
	// refused rows.
	approval func(h *accDiscord) string
	// works checks that it worked for p.
	works func(t *testing.T, h *accDiscord, p accPerson, s *accSession, b accBefore, ref accRef)
}

// TestAccessEveryEntryPoint (issue 16, item 13) tries every way into the
// bot from Discord — a message in a channel and in a thread, a mention (in
// a session's channel and in a channel of its own), "!agent" and mention
// commands, /agent new and /agent with every control verb, the buttons
// and the backend select of the status message, the buttons of an
// approval message (Approve, Approve all for this turn, Deny; the
// tenant's policy makes risky commands wait), the interactions over the
// gateway and over signed HTTP — as each kind of person: a stranger, a
// member without the allowed role, the owner in a channel the bot does not
// serve, an allowed non-owner, the owner and an admin. A stranger starts
// and changes nothing; an allowed non-owner may talk but every control is
// refused, by the session manager, and changes nothing (a command
// waiting for approval waits on); the owner's and
// the admin's controls work (an approved command runs, a denied one
// does not, and the model is told). Refusals of interactions are private;
// Discord has no private answer to a message, so a refused message
// command is answered in public with the refusal alone, and a stranger's
// plain chat is not answered at all. Everything real but Discord and the
// model: the Inbound and Router, Temporal, the workflows, the local and
// Docker sandboxes.
func TestAccessEveryEntryPoint(t *testing.T) {
	ctx := context.Background()
	h := startAccDiscord(t)
	stack := h.stack
	// Risky commands wait for approval (the rows' own commands are
	// harmless echoes and sleeps): the approval buttons are entry points.
	h.setPolicy(t, agentflow.PolicyApprovals, agentflow.ApprovalRisky, agentflow.ApprovalRisky)

	alice := accPeople[4]
	// The sessions the refused rows act on: alice's of the channel
	// "agents" and of a thread there, and alice's of the closed channel
	// and of a thread there, from before the bot stopped serving it.
	shared := h.startByMention(t, alice, h.agents)
	shared.status = h.statusMessage(t, alice, shared)
	thread := h.startByMention(t, alice, h.newThread(t, h.agents))
	closed := h.startBefore(t, h.closed)
	closedThread := h.startBefore(t, h.newThread(t, h.closed))

	targets := map[string]*accSession{}
	target := func(e accEntry, p accPerson) *accSession {
		switch {
		case e.thread && p.closed:
			return closedThread
		case e.thread:
			return thread
		case p.closed:
			return closed
		case p.kind == kindOwner || p.kind == kindAdmin:
			if e.fresh {
				return h.startBySlash(t, alice, h.channelFor(t, alice))
			}
			return targets[p.name]
		}
		return shared
	}

	rows := 0
	for _, mode := range []string{"gateway", "http"} {
		t.Run(mode, func(t *testing.T) {
			h.mode(mode)
			// The owner and the admin each control a session of alice's
			// of their own, new in each mode (destroy ends it).
			targets["owner"] = h.startBySlash(t, alice, h.channelFor(t, alice))
			targets["admin"] = h.startBySlash(t, alice, h.channelFor(t, alice))
			for _, e := range discordEntries() {
				if e.gateway && mode != "gateway" {
					continue
				}
				t.Run(e.name, func(t *testing.T) {
					for _, p := range accPeople {
						rows++
						t.Run(p.name, func(t *testing.T) {
							h.row(t, e, p, target(e, p))
						})
					}
				})
			}
			// The command the refused rows clicked at waits still: its
			// owner denies it, so that the next rows find the channel idle.
			h.denyWaiting(t, shared)
		})
	}
	t.Logf("%d rows", rows)

	// Whatever lagged in visibility: every session there is was meant,
	// and no model request carries what a refused person wrote.
	for id := range workflows(t, stack.Temporal) {
		if key := strings.TrimPrefix(id, "agent/"); !h.isKnown(key) {
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

// startAccDiscord starts the stack of the access tests: the fake guild
// with the channel "agents", the closed one and accFresh fresh ones, the
// real Sender, Temporal and a worker, the Router (alice, bob and norole
// allowed with the role, root an admin, "agents" and the fresh channels
// served) behind an observer, and the real Inbound over the gateway
// (connected) and signed HTTP; everything stops when t ends.
func startAccDiscord(t *testing.T) *accDiscord {
	t.Helper()
	ctx := context.Background()
	fd, stack := startDiscord(t)
	o := fd.Options()
	dg, err := discordgo.New("Bot " + o.BotToken)
	if err != nil {
		t.Fatal(err)
	}
	h := &accDiscord{fd: fd, dg: dg, stack: stack, guild: o.GuildID, known: map[string]bool{},
		agents: fd.AddChannel("agents", fakediscord.ChannelText), closed: fd.AddChannel("closed", fakediscord.ChannelText)}
	allowed := []string{h.agents}
	for i := range accFresh {
		ch := fd.AddChannel(fmt.Sprintf("fresh-%d", i), fakediscord.ChannelText)
		h.fresh = append(h.fresh, ch)
		allowed = append(allowed, ch)
	}
	access := bot.Access{Users: []string{accAlice, accBob, accNoRole}, Roles: []string{accRole}, Channels: allowed,
		Admins: []string{accRoot}}
	router := &bot.Router{Sessions: stack.Sessions, Cache: store.NewMemoryCache(), Access: access,
		Backends: []string{"local", "docker"}, DefaultBackend: "local"}
	h.obs = &accObserver{h: router, ids: map[string]bool{}}
	in, err := discordbot.NewInbound(discordbot.InboundConfig{Token: o.BotToken, AppID: o.AppID,
		PublicKey: fd.PublicKeyHex(), GuildID: o.GuildID, Backends: router.Backends}, h.obs)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Start(ctx); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(in.HTTPHandler())
	h.hs = hs.URL + "/discord/interactions"
	t.Cleanup(func() {
		// discordgo writes one heartbeat right after connecting; closing
		// before it can leave a reconnect loop behind.
		_ = fd.WaitFor(ctx, func(s *fakediscord.Server) bool { return s.Heartbeats() >= s.Connects() })
		in.Close()
		hs.Close()
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := in.Shutdown(sctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	until(t, "a gateway connection", func() (bool, string) { return fd.Connected() > 0, "" })
	return h
}

// The answers of refusals.
const (
	notAllowed = "Sorry — you are not on this bot's allowlist"
	notOwner   = "Only the person who started this session (or an admin)"
)

// row runs one entry as one person and checks the outcome for their kind.
func (h *accDiscord) row(t *testing.T, e accEntry, p accPerson, s *accSession) {
	works := p.kind == kindOwner || p.kind == kindAdmin || (p.kind == kindNonOwner && !e.control)
	if e.approval != nil && s.approval == "" {
		if s.channel == h.closed {
			h.approvalFromBefore(t, s)
		} else {
			h.ask(t, s, e.approval(h))
		}
	}
	b := h.before(t, s)
	ref := e.act(t, h, p, s, works)
	if ref.Channel != s.channel {
		b = h.withChannel(b, ref.Channel)
	}
	h.obs.wait(t, ref.id())
	if e.approval != nil && !works {
		defer h.stillWaits(t, s)
	}
	switch {
	case p.kind == kindStranger:
		h.refusedText(ref.Text)
		want := notAllowed
		if e.chat {
			want = ""
		}
		h.refused(t, p, s, b, ref, want, "")
		if e.message {
			h.unseen(t, s.key, ref.Message)
		}
		if e.starts {
			h.never(t, h.key(ref.Channel))
		}
	case !works:
		h.refused(t, p, s, b, ref, notOwner, e.auditVerb)
	default:
		e.works(t, h, p, s, b, ref)
	}
}

// withChannel watches a channel the row took (new, or from the pool of
// unused ones: it has no messages yet).
func (h *accDiscord) withChannel(b accBefore, ch string) accBefore {
	b.channels = append(b.channels, ch)
	return b
}

// discordEntries are the entry points, in the order the rows run: the
// controls that work for the owner and the admin change their session,
// so each leaves it as the next expects (destroy last).
func discordEntries() []accEntry {
	chat := func(t *testing.T, h *accDiscord, p accPerson, s *accSession, b accBefore, ref accRef) {
		if res := h.answered(t, s.key, ref.Message); res.Status != agentflow.TurnDone {
			t.Fatalf("turn %+v", res)
		}
		h.waitBot(t, s.channel, "stdout:\n"+ref.Extra, b.messages)
	}
	message := func(text func(h *accDiscord, marker string) string) func(t *testing.T, h *accDiscord, p accPerson, s *accSession, works bool) accRef {
		return func(t *testing.T, h *accDiscord, p accPerson, s *accSession, works bool) accRef {
			m := h.marker("chat")
			txt := text(h, m)
			return accRef{Channel: s.channel, Message: h.fd.UserMessage(s.channel, p.user, txt, p.roles), Text: txt, Extra: m}
		}
	}
	command := func(verb string) func(t *testing.T, h *accDiscord, p accPerson, s *accSession, works bool) accRef {
		return func(t *testing.T, h *accDiscord, p accPerson, s *accSession, works bool) accRef {
			return accRef{Channel: s.channel, Message: h.fd.UserMessage(s.channel, p.user, "!agent "+verb, p.roles)}
		}
	}
	slash := func(verb string, opts ...fakediscord.Option) func(t *testing.T, h *accDiscord, p accPerson, s *accSession, works bool) accRef {
		return func(t *testing.T, h *accDiscord, p accPerson, s *accSession, works bool) accRef {
			ref := accRef{Channel: s.channel}
			if works && verb == "stop" {
				ref.Extra = h.runLong(t, p, s)
			}
			ref.Interaction = h.fd.SlashCommand(s.channel, p.user, p.roles, discordbot.CommandName, fakediscord.SubCommand(verb, opts...)).ID
			return ref
		}
	}
	click := func(custom string) func(t *testing.T, h *accDiscord, p accPerson, s *accSession, works bool) accRef {
		return func(t *testing.T, h *accDiscord, p accPerson, s *accSession, works bool) accRef {
			ref := accRef{Channel: s.channel}
			if works && custom == discordbot.ActionStop {
				ref.Extra = h.runLong(t, p, s)
			}
			var values []string
			if custom == discordbot.ActionSwitch {
				ref.Extra = h.otherBackend(t, s)
				values = []string{ref.Extra}
			}
			inv, err := h.fd.ComponentClick(s.channel, s.status, p.user, p.roles, custom, values...)
			if err != nil {
				t.Fatal(err)
			}
			ref.Interaction = inv.ID
			return ref
		}
	}
	forked := func(t *testing.T, h *accDiscord, p accPerson, s *accSession, b accBefore, ref accRef) {
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
		_, channel, _ := discordbot.ParseThreadKey(fork)
		h.waitBot(t, channel, "Forked from", nil)
		h.waitBot(t, s.channel, "Forked into", b.messages)
	}
	stopped := func(t *testing.T, h *accDiscord, p accPerson, s *accSession, b accBefore, ref accRef) {
		h.done(t, p, s, b, agentflow.ControlStop)
		if res := h.answered(t, s.key, ref.Extra); res.Status != agentflow.TurnStopped {
			t.Fatalf("the long turn: %s", res.Status)
		}
	}
	paused := func(t *testing.T, h *accDiscord, p accPerson, s *accSession, b accBefore, ref accRef) {
		h.done(t, p, s, b, agentflow.ControlPause)
		until(t, "the session paused", func() (bool, string) {
			v := h.state(t, s.key)
			return v.Status == agentflow.StatusPaused, string(v.Status)
		})
	}
	switched := func(t *testing.T, h *accDiscord, p accPerson, s *accSession, b accBefore, ref accRef) {
		h.done(t, p, s, b, agentflow.ControlSwitch)
		until(t, "the switch", func() (bool, string) {
			v := h.state(t, s.key)
			return v.Backend == ref.Extra, v.Backend
		})
	}
	titled := func(t *testing.T, h *accDiscord, p accPerson, s *accSession, b accBefore, ref accRef) {
		h.done(t, p, s, b, agentflow.ControlTitle)
		until(t, "the new title", func() (bool, string) {
			v := h.state(t, s.key)
			return v.Title == ref.Extra, v.Title
		})
	}
	exported := func(t *testing.T, h *accDiscord, p accPerson, s *accSession, b accBefore, ref accRef) {
		until(t, "the transcript", func() (bool, string) {
			for _, m := range h.fd.Messages(s.channel) {
				if m.Bot && !b.messages[m.ID] && strings.Contains(m.Content, "--- turn") && strings.Contains(m.Content, s.said) {
					return true, ""
				}
			}
			return false, ""
		})
	}
	destroyed := func(t *testing.T, h *accDiscord, p accPerson, s *accSession, b accBefore, ref accRef) {
		h.done(t, p, s, b, agentflow.ControlDestroy)
		until(t, "the session ended", func() (bool, string) {
			pr, err := h.stack.Sessions.Describe(context.Background(), s.key)
			return err == nil && pr == agentflow.PresenceEnded, fmt.Sprint(pr, err)
		})
	}
	// starts acts in a channel of its own and checks a session started
	// there, p's.
	started := func(t *testing.T, h *accDiscord, p accPerson, s *accSession, b accBefore, ref accRef) {
		key := h.key(ref.Channel)
		h.keep(key)
		until(t, "the new session", func() (bool, string) {
			pr, err := h.stack.Sessions.Describe(context.Background(), key)
			return err == nil && pr == agentflow.PresenceRunning, fmt.Sprint(pr, err)
		})
		if v := h.state(t, key); v.Requester != p.user {
			t.Fatalf("the new session's requester is %q, want %q", v.Requester, p.user)
		}
		if ref.Message != "" {
			if res := h.answered(t, key, ref.Message); res.Status != agentflow.TurnDone {
				t.Fatalf("turn %+v", res)
			}
			h.waitBot(t, ref.Channel, "stdout:\n"+ref.Extra, nil)
		} else {
			h.waitBot(t, ref.Channel, "Session *"+ref.Extra+"*", nil)
		}
	}
	clickApproval := func(action string) func(t *testing.T, h *accDiscord, p accPerson, s *accSession, works bool) accRef {
		return func(t *testing.T, h *accDiscord, p accPerson, s *accSession, works bool) accRef {
			inv, err := h.fd.ComponentClick(s.channel, s.approvalMsg, p.user, p.roles, action+":"+s.approval)
			if err != nil {
				t.Fatal(err)
			}
			return accRef{Channel: s.channel, Interaction: inv.ID, Extra: s.asked}
		}
	}
	// decided checks that p's click decided the command waiting in s:
	// the turn went on, the commands ran (approved) or not (denied) and
	// the model was told, and the approval message says so, without
	// buttons.
	decided := func(state string, says func(user string) []string) func(t *testing.T, h *accDiscord, p accPerson, s *accSession, b accBefore, ref accRef) {
		return func(t *testing.T, h *accDiscord, p accPerson, s *accSession, b accBefore, ref accRef) {
			h.done(t, p, s, b, agentflow.ControlApprove)
			res := h.answered(t, s.key, ref.Extra)
			if res.Status != agentflow.TurnDone {
				t.Fatalf("the turn after the click: %s", res.Status)
			}
			for _, w := range says(p.user) {
				if !strings.Contains(res.Answer, w) {
					t.Errorf("the answer after the click lacks %q:\n%s", w, res.Answer)
				}
			}
			asked, _ := h.fd.Message(ref.Extra)
			for _, m := range echoed.FindAllStringSubmatch(asked.Content, -1) {
				if ran := strings.Contains(res.Answer, m[1]); ran != (state == agentflow.ApprovalApproved) {
					t.Errorf("the output of 'echo %s' is in the answer: %v\n%s", m[1], ran, res.Answer)
				}
			}
			h.decidedMessage(t, s, state, p.user)
			for _, m := range h.fd.Messages(s.channel) {
				if m.Bot && !b.messages[m.ID] && len(approvalButtons(t, m)) > 0 {
					t.Errorf("another approval message after the click: %q", m.Content)
				}
			}
			s.approval, s.approvalMsg, s.asked = "", "", ""
		}
	}
	titleRef := func(ref accRef, title string) accRef {
		ref.Extra = title
		return ref
	}
	return []accEntry{
		{name: "guild-message", gateway: true, chat: true, message: true,
			act: message(func(h *accDiscord, m string) string { return "sh: echo " + m }), works: chat},
		{name: "thread-message", gateway: true, chat: true, message: true, thread: true,
			act: message(func(h *accDiscord, m string) string { return "sh: echo " + m }), works: chat},
		{name: "mention", gateway: true, message: true,
			act: message(func(h *accDiscord, m string) string { return h.mention() + "sh: echo " + m }), works: chat},
		{name: "mention-in-a-new-channel", gateway: true, starts: true,
			act: func(t *testing.T, h *accDiscord, p accPerson, s *accSession, works bool) accRef {
				ch := h.channelFor(t, p)
				m := h.marker("start")
				txt := h.mention() + "sh: echo " + m
				return accRef{Channel: ch, Message: h.fd.UserMessage(ch, p.user, txt, p.roles), Text: txt, Extra: m}
			}, works: started},
		{name: "command-title", gateway: true, control: true, auditVerb: agentflow.ControlTitle,
			act: func(t *testing.T, h *accDiscord, p accPerson, s *accSession, works bool) accRef {
				title := h.marker("title")
				return titleRef(command("title "+title)(t, h, p, s, works), title)
			}, works: titled},
		{name: "mention-title", gateway: true, control: true, auditVerb: agentflow.ControlTitle,
			act: func(t *testing.T, h *accDiscord, p accPerson, s *accSession, works bool) accRef {
				title := h.marker("title")
				id := h.fd.UserMessage(s.channel, p.user, h.mention()+`title "`+title+`"`, p.roles)
				return accRef{Channel: s.channel, Message: id, Extra: title}
			}, works: titled},
		{name: "command-export", gateway: true, control: true, act: command("export"), works: exported},
		{name: "command-stop", gateway: true, control: true, auditVerb: agentflow.ControlStop,
			act: func(t *testing.T, h *accDiscord, p accPerson, s *accSession, works bool) accRef {
				extra := ""
				if works {
					extra = h.runLong(t, p, s)
				}
				ref := command("stop")(t, h, p, s, works)
				ref.Extra = extra
				return ref
			}, works: stopped},
		{name: "command-destroy", gateway: true, fresh: true, control: true, auditVerb: agentflow.ControlDestroy,
			act: command("destroy"), works: destroyed},
		{name: "slash-new", starts: true,
			act: func(t *testing.T, h *accDiscord, p accPerson, s *accSession, works bool) accRef {
				ch := h.channelFor(t, p)
				title := h.marker("new")
				inv := h.fd.SlashCommand(ch, p.user, p.roles, discordbot.CommandName,
					fakediscord.SubCommand("new", fakediscord.StringOption("title", title)))
				return accRef{Channel: ch, Interaction: inv.ID, Text: title, Extra: title}
			}, works: started},
		{name: "slash-title", control: true, auditVerb: agentflow.ControlTitle,
			act: func(t *testing.T, h *accDiscord, p accPerson, s *accSession, works bool) accRef {
				title := h.marker("title")
				return titleRef(slash("title", fakediscord.StringOption("name", title))(t, h, p, s, works), title)
			}, works: titled},
		{name: "slash-export", control: true, act: slash("export"), works: exported},
		{name: "button-approve", control: true, auditVerb: agentflow.ControlApprove,
			approval: func(h *accDiscord) string { return "sh: " + riskyCommand + "; echo " + h.marker("approved") },
			act:      clickApproval(discordbot.ActionApprove), works: decided(agentflow.ApprovalApproved, approvedBy)},
		{name: "button-approve-all", control: true, auditVerb: agentflow.ControlApprove,
			approval: func(h *accDiscord) string {
				m := h.marker("approved-all")
				return "sh: " + riskyCommand + "; echo " + m + "-first\nsh: " + riskyCommand + "; echo " + m + "-second"
			},
			act: clickApproval(discordbot.ActionApproveAll), works: decided(agentflow.ApprovalApproved, approvedAllBy)},
		{name: "button-deny", control: true, auditVerb: agentflow.ControlApprove,
			approval: func(h *accDiscord) string { return "sh: " + riskyCommand + "; echo " + h.marker("denied") },
			act:      clickApproval(discordbot.ActionDeny), works: decided(agentflow.ApprovalDenied, deniedBy)},
		{name: "slash-reset", control: true, auditVerb: agentflow.ControlReset, act: slash("reset"),
			works: func(t *testing.T, h *accDiscord, p accPerson, s *accSession, b accBefore, ref accRef) {
				h.done(t, p, s, b, agentflow.ControlReset)
				h.waitBot(t, s.channel, "Started a fresh conversation", b.messages)
			}},
		{name: "select-switch", control: true, auditVerb: agentflow.ControlSwitch, act: click(discordbot.ActionSwitch), works: switched},
		{name: "slash-switch", control: true, auditVerb: agentflow.ControlSwitch,
			act: func(t *testing.T, h *accDiscord, p accPerson, s *accSession, works bool) accRef {
				to := h.otherBackend(t, s)
				ref := slash("switch", fakediscord.StringOption("backend", to))(t, h, p, s, works)
				ref.Extra = to
				return ref
			}, works: switched},
		{name: "slash-fork", control: true, auditVerb: agentflow.ControlFork, act: slash("fork"), works: forked},
		{name: "button-fork", control: true, auditVerb: agentflow.ControlFork, act: click(discordbot.ActionFork), works: forked},
		{name: "slash-done", control: true, auditVerb: agentflow.ControlPause, act: slash("done"), works: paused},
		{name: "slash-stop", control: true, auditVerb: agentflow.ControlStop, act: slash("stop"), works: stopped},
		{name: "button-stop", control: true, auditVerb: agentflow.ControlStop, act: click(discordbot.ActionStop), works: stopped},
		{name: "button-done", control: true, auditVerb: agentflow.ControlPause, act: click(discordbot.ActionDone), works: paused},
		{name: "slash-destroy", control: true, auditVerb: agentflow.ControlDestroy, act: slash("destroy"), works: destroyed},
	}
}

// newThread opens a thread in channel, as the bot, and returns its ID.
func (h *accDiscord) newThread(t *testing.T, channel string) string {
	t.Helper()
	th, err := h.dg.ThreadStartComplex(channel, &discordgo.ThreadStart{Name: h.marker("thread"),
		Type: discordgo.ChannelTypeGuildPublicThread, AutoArchiveDuration: 1440})
	if err != nil {
		t.Fatal(err)
	}
	return th.ID
}

// startByMention has p start the session of channel with a mention, and
// waits for its answer.
func (h *accDiscord) startByMention(t *testing.T, p accPerson, channel string) *accSession {
	t.Helper()
	s := &accSession{key: h.key(channel), channel: channel, said: h.marker("said")}
	h.keep(s.key)
	id := h.say(t, channel, p, h.mention()+"sh: echo "+s.said)
	if res := h.answered(t, s.key, id); res.Status != agentflow.TurnDone {
		t.Fatalf("the first turn: %+v", res)
	}
	h.waitBot(t, channel, "stdout:\n"+s.said, nil)
	return s
}

// statusMessage asks for the session's status as p and returns the
// status message (it carries the controls).
func (h *accDiscord) statusMessage(t *testing.T, p accPerson, s *accSession) string {
	t.Helper()
	id := h.say(t, s.channel, p, "!agent status")
	var status string
	until(t, "the status message", func() (bool, string) {
		for _, m := range h.fd.Messages(s.channel) {
			if m.Bot && m.ReferenceID == id && strings.Contains(string(m.Components), discordbot.ActionStop) {
				status = m.ID
				return true, ""
			}
		}
		return false, ""
	})
	return status
}

// startBySlash has p start a session in channel with /agent new, gives it
// a turn, and returns it with its status message.
func (h *accDiscord) startBySlash(t *testing.T, p accPerson, channel string) *accSession {
	t.Helper()
	s := &accSession{key: h.key(channel), channel: channel, said: h.marker("said")}
	h.keep(s.key)
	inv := h.fd.SlashCommand(channel, p.user, p.roles, discordbot.CommandName, fakediscord.SubCommand("new"))
	h.obs.wait(t, inv.ID)
	id := h.say(t, channel, p, "sh: echo "+s.said)
	if res := h.answered(t, s.key, id); res.Status != agentflow.TurnDone {
		t.Fatalf("the first turn: %+v", res)
	}
	h.waitBot(t, channel, "stdout:\n"+s.said, nil)
	s.status = h.statusMessage(t, p, s)
	return s
}

// startBefore starts alice's session of channel as the bot did when it
// still served it, and posts a status message with the controls there.
func (h *accDiscord) startBefore(t *testing.T, channel string) *accSession {
	t.Helper()
	s := &accSession{key: h.key(channel), channel: channel}
	h.keep(s.key)
	if _, err := h.stack.Sessions.Start(context.Background(), agentflow.AgentInput{ThreadKey: s.key, Backend: "local",
		Requester: accAlice, Admins: []string{accRoot}, Title: "from before"}); err != nil {
		t.Fatal(err)
	}
	m, err := h.dg.ChannelMessageSendComplex(channel, &discordgo.MessageSend{Content: "Session *from before* on `local`.",
		Components: []discordgo.MessageComponent{
			discordgo.ActionsRow{Components: []discordgo.MessageComponent{discordgo.SelectMenu{CustomID: discordbot.ActionSwitch,
				Options: []discordgo.SelectMenuOption{{Label: "local", Value: "local", Default: true}, {Label: "docker", Value: "docker"}}}}},
			discordgo.ActionsRow{Components: []discordgo.MessageComponent{
				discordgo.Button{CustomID: discordbot.ActionFork, Label: "Fork", Style: discordgo.PrimaryButton},
				discordgo.Button{CustomID: discordbot.ActionStop, Label: "Stop", Style: discordgo.DangerButton},
				discordgo.Button{CustomID: discordbot.ActionDone, Label: "Pause", Style: discordgo.SecondaryButton}}},
		}})
	if err != nil {
		t.Fatal(err)
	}
	s.status = m.ID
	return s
}
