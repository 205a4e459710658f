package bot_test

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
	"github.com/agentbot/agentbot/internal/testenv"
)

// TestControlPlane drives the tenant's session manager as the control
// plane through the router (the terminal platform's events and sender), on
// a real dev server and worker: control verbs arrive as updates on the
// manager, which hands them to the session (each history says so); the
// policy refuses a backend, caps live sessions, queues turns past the
// running-turn cap and refuses a turn past the token budget; a non-owner
// is refused by the manager and by the session itself; list shows a
// three-level fork tree; the audit log shows who asked what.
func TestControlPlane(t *testing.T) {
	chat := &testenv.Buffer{}
	policy := &agentflow.TenantPolicy{Admins: []string{root}, Backends: []string{"local"}}
	s := startOwnStack(t, stackOptions{chat: chat, policy: policy})
	r := s.router(t, nil)
	r.Backends = []string{"local", "docker"} // docker parses; the policy forbids it
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	const thread = "term:cp-main"
	s.say(t, r, bot.KindMention, thread, alice, "sh: echo hello > a.txt")

	text := func(rs []bot.Response) string {
		var b []string
		for _, x := range rs {
			b = append(b, x.Text)
		}
		return strings.Join(b, "\n")
	}
	command := func(thread, user, cmd string) string {
		t.Helper()
		return text(handle(t, r, s.event(bot.KindCommand, thread, user, cmd)))
	}
	mustSay := func(what, got string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Fatalf("%s: want %q in:\n%s", what, w, got)
			}
		}
	}

	// The policy forbids docker: a clear sentence, and nothing changes.
	mustSay("switch docker", command(thread, alice, "switch docker"), "`docker` backend is not allowed in this workspace", "allowed: local")
	if v := s.state(t, thread); v.Backend != "local" || v.Status != agentflow.StatusIdle {
		t.Fatalf("after the refused switch: %+v", v)
	}
	// A non-owner is refused by the manager...
	mustSay("bob's switch", command(thread, bob, "switch local /tmp"), "Only the person who started this session")
	// ...and by the session when the request goes to it directly.
	_, err := s.cl.Submit(ctx, thread, agentflow.UpdateSwitch, "direct-bob", agentflow.SwitchRequest{Backend: "local", Root: t.TempDir(), By: bob, Notify: true})
	var refused *agentflow.RefusedError
	if !errors.As(err, &refused) || !strings.Contains(refused.Msg, "only the person who started") {
		t.Fatalf("bob's switch sent to the session: %v", err)
	}

	// Switch, title, pause: the owner's, through the manager.
	root2 := t.TempDir()
	command(thread, alice, "switch local "+root2)
	waitUntil(t, "the switch", func() bool { return s.state(t, thread).Root == root2 })
	mustSay("title", command(thread, alice, "title control plane"), "Renamed to *control plane*")
	waitUntil(t, "the title", func() bool { return s.state(t, thread).Title == "control plane" })
	command(thread, alice, "done")
	waitUntil(t, "the pause", func() bool { return s.state(t, thread).Status == agentflow.StatusPaused })

	// Forks: a three-level tree, each fork through the manager.
	command(thread, alice, "fork first fork")
	var fork1, fork2 string
	waitUntil(t, "the first fork", func() bool {
		fork1 = findThread(t, s, thread, "first fork")
		return fork1 != ""
	})
	command(fork1, alice, "fork grandchild")
	waitUntil(t, "the fork of the fork", func() bool {
		fork2 = findThread(t, s, fork1, "grandchild")
		return fork2 != ""
	})
	s.say(t, r, bot.KindMessage, fork2, alice, "sh: cat a.txt")
	var tree string
	waitUntil(t, "the tree in list --all", func() bool {
		tree = command(thread, root, "list --all")
		return strings.Contains(tree, "grandchild")
	})
	lines := strings.Split(tree, "\n")
	depth := map[string]int{}
	for _, l := range lines {
		for _, title := range []string{"*control plane*", "*first fork*", "*grandchild*"} {
			if strings.Contains(l, title) {
				depth[title] = len(l) - len(strings.TrimLeft(l, "│├└─ "))
			}
		}
	}
	if !(depth["*control plane*"] < depth["*first fork*"] && depth["*first fork*"] < depth["*grandchild*"]) {
		t.Fatalf("list --all is not a three-level tree (%v):\n%s", depth, tree)
	}
	mustSay("alice's list --all", command(thread, alice, "list --all"), "Only an admin")

	// The histories: the manager got control updates for every verb, and
	// handed each to the session as an update of the session's.
	verbs := managerVerbs(t, s.tc, agentflow.ManagerWorkflowID(thread))
	for _, v := range []string{"switch", "title", "pause", "fork"} {
		if !slices.Contains(verbs, v) {
			t.Fatalf("the manager's history has no %s control update (has %v)", v, verbs)
		}
	}
	handed := agentUpdates(t, s.tc, agentflow.AgentWorkflowID(thread))
	for _, name := range []string{agentflow.UpdateSwitch, agentflow.UpdateTitle, agentflow.UpdatePause, agentflow.UpdateFork} {
		if !slices.Contains(handed, name) {
			t.Fatalf("the session's history has no %s update from the manager (has %v)", name, handed)
		}
	}

	// Caps: an admin sets the live-session cap to what there is; the next
	// new is refused.
	mustSay("policy set", command(thread, root, "policy set max-sessions 3"), "`max-sessions`: 3")
	mustSay("alice's policy set", command(thread, alice, "policy set max-sessions 30"), "Only an admin can change the policy")
	mustSay("new past the cap", command("term:cp-fourth", alice, "new"), "already has 3 live sessions")

	// The running-turn cap: the second session's turn waits for the first.
	command(thread, root, "policy set max-running-turns 1")
	slow := s.event(bot.KindMessage, thread, alice, "sleep: 8\nsh: echo slow-done")
	handle(t, r, slow)
	waitUntil(t, "the slow turn runs", func() bool { return s.state(t, thread).Status == agentflow.StatusRunning })
	quick := s.event(bot.KindMessage, fork1, alice, "sh: echo quick-done")
	handle(t, r, quick)
	waitUntil(t, "the queued notice", func() bool { return strings.Contains(chat.String(), "Queued behind 1 session") })
	for _, m := range []struct{ thread, id string }{{thread, slow.MessageID}, {fork1, quick.MessageID}} {
		res, err := s.cl.Wait(ctx, m.thread, m.id)
		if err != nil || res.Result == nil || res.Result.Status != agentflow.TurnDone {
			t.Fatalf("turn in %s: %+v %v", m.thread, res.Result, err)
		}
	}
	out := chat.String()
	if strings.Index(out, "slow-done") > strings.Index(out, "quick-done") {
		t.Fatalf("the queued turn ran before the running one finished:\n%s", out)
	}

	// Models: only the allowed ones; a fork inherits the session's.
	mustSay("model not allowed", command(thread, alice, "model big-model"), "model `big-model` is not allowed in this workspace")
	command(thread, root, "policy set models big-model,small-model")
	if got := command(thread, alice, "model small-model"); strings.Contains(got, "not allowed") {
		t.Fatalf("model small-model after the policy allowed it: %s", got)
	}
	waitUntil(t, "the model", func() bool { return s.state(t, thread).Model == "small-model" })
	mustSay("model shown", command(thread, alice, "model"), "Model: `small-model`", "big-model, small-model")
	mustSay("status shows the model", command(thread, alice, "status"), "model `small-model`")
	command(thread, root, "policy set max-sessions 10")
	command(thread, alice, "fork model heir")
	var heir string
	waitUntil(t, "the model's heir", func() bool {
		heir = findThread(t, s, thread, "model heir")
		return heir != ""
	})
	if m := s.state(t, heir).Model; m != "small-model" {
		t.Fatalf("the fork's model is %q, want its parent's", m)
	}

	// A person's daily budget: the turns above were counted against
	// alice's day; past the budget her next turn is refused with the
	// figure.
	u, err := s.cl.Usage(ctx, thread, alice)
	if err != nil || u.Tokens <= 0 {
		t.Fatalf("alice's use today: %+v %v", u, err)
	}
	command(thread, root, "policy set user-tokens-per-day 1")
	over := s.event(bot.KindMessage, fork1, alice, "sh: echo over-budget")
	handle(t, r, over)
	if res, err := s.cl.Wait(ctx, fork1, over.MessageID); err != nil || res.Result == nil || res.Result.Status != agentflow.TurnRefused ||
		!strings.Contains(res.Result.Answer, "tokens today, your daily budget here is 1") {
		t.Fatalf("a turn past alice's daily budget: %+v %v", res.Result, err)
	}
	command(thread, root, "policy reset user-tokens-per-day")
	command(thread, root, "policy reset max-running-turns")

	// The token budget: a session past it is refused with the figure, and
	// status shows the use against it.
	used := s.state(t, fork2).Usage
	budget := used.InputTokens + used.OutputTokens
	command(thread, root, "policy set session-tokens "+itoa(budget))
	ev := s.event(bot.KindMessage, fork2, alice, "sh: echo over")
	handle(t, r, ev)
	res, err := s.cl.Wait(ctx, fork2, ev.MessageID)
	if err != nil || res.Result == nil || res.Result.Status != agentflow.TurnRefused {
		t.Fatalf("a turn past the budget: %+v %v", res.Result, err)
	}
	mustSay("the refusal", res.Result.Answer, "has used "+itoa(budget)+" tokens of its budget of "+itoa(budget))
	mustSay("status", command(fork2, alice, "status"), "of the session's budget of "+itoa(budget))

	// Destroy through the manager; the audit log has it all, for admins.
	command(fork2, alice, "destroy")
	waitUntil(t, "the destroy", func() bool {
		p, _ := s.cl.Describe(ctx, fork2)
		return p == agentflow.PresenceEnded
	})
	mustSay("audit", command(thread, root, "audit"), "Audit log, newest first (page 1 of 2)", "`destroy`", "`policy` session-tokens="+itoa(budget),
		"`model` big-model in <thread:term:cp-main> — refused: the model `big-model` is not allowed", "`audit --page 2`")
	mustSay("audit page 2", command(thread, root, "audit --page 2"), "<@"+bob+"> `switch` local /tmp in <thread:term:cp-main> — refused: only the person who started")
	mustSay("alice's audit", command(thread, alice, "audit"), "Only an admin can read the audit log")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// findThread returns the thread of the session titled title that was forked
// from parent, from the manager's registry.
func findThread(t *testing.T, s *ownStack, parent, title string) string {
	t.Helper()
	l, err := s.cl.List(context.Background(), parent)
	if err != nil {
		return ""
	}
	for _, e := range l {
		if e.Parent == parent && e.Title == title {
			return e.ThreadKey
		}
	}
	return ""
}

var verbField = regexp.MustCompile(`"verb":"([a-z]+)"`)

// managerVerbs lists the verbs of the control updates in every run of a
// manager's history.
func managerVerbs(t *testing.T, tc client.Client, id string) []string {
	t.Helper()
	var out []string
	for _, ev := range historyEvents(t, tc, id) {
		a := ev.GetWorkflowExecutionUpdateAcceptedEventAttributes()
		if a == nil || a.GetAcceptedRequest().GetInput().GetName() != agentflow.ManagerUpdateControl {
			continue
		}
		for _, p := range a.GetAcceptedRequest().GetInput().GetArgs().GetPayloads() {
			if m := verbField.FindSubmatch(p.GetData()); m != nil {
				out = append(out, string(m[1]))
			}
		}
	}
	return out
}

// agentUpdates lists the updates a session accepted from the manager
// (their IDs start with "ctl/").
func agentUpdates(t *testing.T, tc client.Client, id string) []string {
	t.Helper()
	var out []string
	for _, ev := range historyEvents(t, tc, id) {
		a := ev.GetWorkflowExecutionUpdateAcceptedEventAttributes()
		if a != nil && strings.HasPrefix(a.GetAcceptedRequest().GetMeta().GetUpdateId(), "ctl/") {
			out = append(out, a.GetAcceptedRequest().GetInput().GetName())
		}
	}
	return out
}

// historyEvents returns the events of a workflow's current run.
func historyEvents(t *testing.T, tc client.Client, id string) []*historypb.HistoryEvent {
	t.Helper()
	var out []*historypb.HistoryEvent
	it := tc.GetWorkflowHistory(context.Background(), id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatalf("history of %s: %v", id, err)
		}
		out = append(out, ev)
	}
	return out
}
