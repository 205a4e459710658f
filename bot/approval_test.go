package bot_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/agentflow/risk"
	"github.com/agentbot/agentbot/bot"
	"github.com/agentbot/agentbot/internal/testenv"
)

// TestApprovals drives in-chat approvals through the router (the
// terminal platform's events and sender) on a real dev server and
// worker, with the tenant's policy set by an admin to ask about risky
// commands: a git push waits for approval, its message in the thread;
// bob's approve is refused, privately, and changes nothing; alice's
// approve runs it, once (another approve finds nothing waiting); a
// denied command never runs and the model is told; approve --all lets
// the rest of the turn run without asking; approvals shows the mode and
// makes the session stricter, never laxer; the audit log names who
// answered.
func TestApprovals(t *testing.T) {
	chat := &testenv.Buffer{}
	s := startOwnStack(t, stackOptions{chat: chat, policy: &agentflow.TenantPolicy{Admins: []string{root}}})
	r := s.router(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const thread = "term:approvals"

	// replies routes a command and returns what the router answered.
	replies := func(user, cmd string) []bot.Response {
		t.Helper()
		return handle(t, r, s.event(bot.KindCommand, thread, user, cmd))
	}
	// one routes a command answered with one reply, public or private,
	// that says every one of want.
	one := func(user, cmd string, private bool, want ...string) string {
		t.Helper()
		rs := replies(user, cmd)
		if len(rs) != 1 || rs[0].Private != private {
			t.Fatalf("%s by %s: answered %+v; want one reply, private %v", cmd, user, rs, private)
		}
		for _, w := range want {
			if !strings.Contains(rs[0].Text, w) {
				t.Fatalf("%s by %s: answered %q; want %q in it", cmd, user, rs[0].Text, w)
			}
		}
		return rs[0].Text
	}
	// ask sends a message whose turn will wait for approval, and returns
	// the message's event and the approval, once it waits.
	ask := func(text string) (bot.Event, agentflow.ApprovalView) {
		t.Helper()
		ev := s.event(bot.KindMessage, thread, alice, text)
		if got := handle(t, r, ev); len(got) != 0 {
			t.Fatalf("%q: answered %+v", text, got)
		}
		var a *agentflow.ApprovalView
		waitUntil(t, "the approval of "+text, func() bool {
			a = s.state(t, thread).Approval
			return a != nil && a.State == agentflow.ApprovalWaiting
		})
		return ev, *a
	}
	answer := func(ev bot.Event) string {
		t.Helper()
		res, err := s.cl.Wait(ctx, thread, ev.MessageID)
		if err != nil || res.Result == nil || res.Result.Status != agentflow.TurnDone {
			t.Fatalf("the turn of %q: %+v %v", ev.Text, res.Result, err)
		}
		return res.Result.Answer
	}
	marks := func() string {
		t.Helper()
		return s.say(t, r, bot.KindMessage, thread, alice, "sh: cat marks.txt").Answer
	}

	// The default mode asks nothing.
	s.say(t, r, bot.KindMention, thread, alice, "sh: echo start > marks.txt")
	one(alice, "approvals", true, "Approvals in this session: `never`")
	one(root, "policy set approvals risky", true, "`approvals`: risky")
	one(alice, "approvals", true, "Approvals in this session: `risky`")

	// A push waits, its message in the thread.
	ev, a := ask("sh: echo pushed >> marks.txt; git push")
	first := a.ID
	if !strings.Contains(a.Command, "git push") || !slices.ContainsFunc(a.Findings, func(f risk.Finding) bool { return f.Rule == "git-push" }) {
		t.Fatalf("the approval: %+v", a)
	}
	waitUntil(t, "the approval message", func() bool {
		return strings.Contains(chat.String(), "[approvals] approval needed (git-push): echo pushed >> marks.txt; git push")
	})
	one(alice, "status", false, "waiting for approval: `echo pushed >> marks.txt; git push`")
	one(alice, "approvals", true, "Waiting for approval: `echo pushed >> marks.txt; git push`", "approve "+a.ID)

	// Bob may not answer it: told privately, and it waits on.
	one(bob, "approve", true, "Only the person who started this session (or an admin) can do that.")
	one(bob, "deny "+a.ID, true, "Only the person who started this session")
	if v := s.state(t, thread); v.Approval == nil || v.Approval.State != agentflow.ApprovalWaiting {
		t.Fatalf("after bob's answers the approval is %+v", v.Approval)
	}
	// An answer to another approval is refused.
	one(alice, "approve t99-nope", true, "Nothing waits for approval here")

	// Alice's approve runs it, once.
	one(alice, "approve "+a.ID, false, "Approved: `echo pushed >> marks.txt; git push`.")
	if got := answer(ev); !strings.Contains(got, "(approved by "+alice) {
		t.Fatalf("the approved turn answered %q", got)
	}
	waitUntil(t, "the decision in the thread", func() bool {
		return strings.Contains(chat.String(), "[approvals] approved by "+alice+": echo pushed >> marks.txt; git push")
	})
	one(alice, "approve", true, "Nothing waits for approval here")
	if got := marks(); strings.Count(got, "pushed") != 1 {
		t.Fatalf("marks.txt after the approval: %q; want one push", got)
	}

	// Denied: never run, and the model is told.
	ev, a = ask("sh: echo denied >> marks.txt; git push")
	one(alice, "deny", false, "Denied: `echo denied >> marks.txt; git push`.")
	if got := answer(ev); !strings.Contains(got, "not run: "+alice+" denied this command") {
		t.Fatalf("the denied turn answered %q", got)
	}
	waitUntil(t, "the denial in the thread", func() bool {
		return strings.Contains(chat.String(), "[approvals] denied by "+alice+": echo denied >> marks.txt; git push")
	})
	if got := marks(); strings.Contains(got, "denied") {
		t.Fatalf("marks.txt after the denial: %q", got)
	}

	// approve --all: the rest of the turn runs without asking.
	ev, a = ask("sh: git push -q origin\nsh: git push origin main")
	one(alice, "approve --all", false, "Approved: `git push -q origin`, with the rest of this turn's commands.")
	got := answer(ev)
	if !strings.Contains(got, "(approved with the rest of turn") {
		t.Fatalf("the turn approved with --all answered %q", got)
	}
	if v := s.state(t, thread); v.Approval != nil {
		t.Fatalf("after approve --all, %+v waits", v.Approval)
	}

	// The session's own mode: stricter than the tenant's, never laxer.
	if rs := replies(alice, "approvals always"); len(rs) > 1 {
		t.Fatalf("approvals always: %+v", rs)
	}
	waitUntil(t, "the new mode", func() bool { return s.state(t, thread).Approvals == agentflow.ApprovalAlways })
	one(alice, "approvals", true, "Approvals in this session: `always`")
	ev, _ = ask("sh: echo harmless")
	one(alice, "approve", false, "Approved: `echo harmless`.")
	answer(ev)
	replies(alice, "approvals never")
	waitUntil(t, "the mode back to the tenant's", func() bool { return s.state(t, thread).Approvals == agentflow.ApprovalRisky })
	one(bob, "approvals always", true, "Only the person who started this session")

	// The audit log names who answered what.
	audit := one(root, "audit", true)
	for _, want := range []string{"<@" + bob + "> `approve`", "<@" + alice + "> `approve` approve " + first, "`approvals` always"} {
		if !strings.Contains(audit, want) {
			t.Errorf("the audit log lacks %q:\n%s", want, audit)
		}
	}
}
