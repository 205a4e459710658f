package discordbot_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/bwmarrin/discordgo"

	"github.com/agentbot/agentbot/agentflow"
	discordbot "github.com/agentbot/agentbot/bot/discord"
	"github.com/agentbot/agentbot/internal/fakediscord"
)

// riskyCommand is a shell command the risk rules flag (pipe-to-shell)
// that does no harm: nothing listens on port 9, so sh reads nothing.
const riskyCommand = "curl -s http://127.0.0.1:9/ | sh"

// echoed finds the words a shell command echoes, which its output shows
// if it ran.
var echoed = regexp.MustCompile(`echo (\S+)`)

// What the model is told of a command approved (approvedBy, and
// approvedAllBy when the rest of the turn was approved with it) or denied
// (deniedBy) by user.
func approvedBy(user string) []string { return []string{"(approved by " + user + " at "} }

func approvedAllBy(user string) []string {
	return []string{"(approved by " + user + " at ", "(approved with the rest of turn ", " by " + user + ")"}
}

func deniedBy(user string) []string { return []string{"not run: " + user + " denied this command"} }

// setPolicy has root, an admin, set key of the tenant's policy to value
// with "/agent policy" in the channel "agents", and waits for the
// answer, which shows the key as shows (the manager answers once the
// sessions have the new policy).
func (h *accDiscord) setPolicy(t *testing.T, key, value, shows string) {
	t.Helper()
	inv := h.fd.SlashCommand(h.agents, accRoot, nil, discordbot.CommandName, fakediscord.SubCommand("policy",
		fakediscord.StringOption("action", "set"), fakediscord.StringOption("key", key), fakediscord.StringOption("value", value)))
	h.obs.wait(t, inv.ID)
	until(t, "the answer to policy set "+key, func() (bool, string) {
		var got []string
		for _, m := range h.fd.Messages(h.agents) {
			if m.InteractionID == inv.ID && strings.Contains(m.Content, "`"+key+"`: "+shows) {
				return true, ""
			}
			if m.InteractionID == inv.ID {
				got = append(got, m.Content)
			}
		}
		return false, strings.Join(got, " | ")
	})
}

// ask has alice post text in the channel of s, a turn whose command must
// wait for approval, and waits for it (see waitApproval).
func (h *accDiscord) ask(t *testing.T, s *accSession, text string) {
	t.Helper()
	h.waitApproval(t, s, h.say(t, s.channel, accPeople[4], text))
}

// waitApproval waits until the turn of the message asked waits for
// approval in s and its approval message, with the buttons, is in the
// channel; it notes both in s and returns the approval.
func (h *accDiscord) waitApproval(t *testing.T, s *accSession, asked string) agentflow.ApprovalView {
	t.Helper()
	var a *agentflow.ApprovalView
	until(t, "a command waiting for approval in "+s.key, func() (bool, string) {
		v := h.state(t, s.key)
		a = v.Approval
		return a != nil && a.State == agentflow.ApprovalWaiting, fmt.Sprintf("%s, %+v", v.Status, a)
	})
	s.approval, s.asked = a.ID, asked
	until(t, "the approval message of "+a.ID, func() (bool, string) {
		for _, m := range h.fd.Messages(s.channel) {
			if m.Bot && hasButtons(t, m, a.ID) {
				s.approvalMsg = m.ID
				return true, ""
			}
		}
		return false, ""
	})
	return *a
}

// approvalFromBefore posts, as the bot did when it still served the
// channel of s, an approval message with its buttons there.
func (h *accDiscord) approvalFromBefore(t *testing.T, s *accSession) {
	t.Helper()
	const id = "t1-call_before"
	m, err := h.dg.ChannelMessageSendComplex(s.channel, &discordgo.MessageSend{
		Content: "🔐 **Approval needed** · turn 1\n```\n" + riskyCommand + "\n```",
		Components: []discordgo.MessageComponent{discordgo.ActionsRow{Components: []discordgo.MessageComponent{
			discordgo.Button{CustomID: discordbot.ActionApprove + ":" + id, Label: "Approve", Style: discordgo.SuccessButton},
			discordgo.Button{CustomID: discordbot.ActionApproveAll + ":" + id, Label: "Approve all for this turn", Style: discordgo.PrimaryButton},
			discordgo.Button{CustomID: discordbot.ActionDeny + ":" + id, Label: "Deny", Style: discordgo.DangerButton},
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.approval, s.approvalMsg = id, m.ID
}

// stillWaits checks that the command waiting in s waits still: its
// message keeps its buttons, and (unless it is from before) the session
// has it waiting.
func (h *accDiscord) stillWaits(t *testing.T, s *accSession) {
	t.Helper()
	m, ok := h.fd.Message(s.approvalMsg)
	if !ok || !hasButtons(t, m, s.approval) {
		t.Errorf("the approval message of %s lost its buttons: %+v", s.approval, m)
	}
	if s.asked == "" {
		return
	}
	if v := h.state(t, s.key); v.Approval == nil || v.Approval.ID != s.approval || v.Approval.State != agentflow.ApprovalWaiting {
		t.Errorf("the command %s waits no more: %+v", s.approval, v.Approval)
	}
}

// decisions are the headlines of the approval message once decided.
var decisions = map[string]string{
	agentflow.ApprovalApproved:  "**Approved**",
	agentflow.ApprovalDenied:    "**Denied**",
	agentflow.ApprovalExpired:   "**Expired**",
	agentflow.ApprovalCancelled: "**Cancelled**",
}

// decidedMessage waits until the approval message of s says it was
// decided as state (by whom, when by is not empty), without buttons, and
// returns its text.
func (h *accDiscord) decidedMessage(t *testing.T, s *accSession, state, by string) string {
	t.Helper()
	var text string
	until(t, fmt.Sprintf("the approval message of %s %s", s.approval, state), func() (bool, string) {
		m, ok := h.fd.Message(s.approvalMsg)
		text = m.Content
		return ok && strings.Contains(text, decisions[state]) && len(approvalButtons(t, m)) == 0 &&
			(by == "" || strings.Contains(text, "<@"+by+">")), text
	})
	return text
}

// denyWaiting has alice deny the command waiting in s, if one does, and
// waits for its turn to end.
func (h *accDiscord) denyWaiting(t *testing.T, s *accSession) {
	t.Helper()
	if s.asked == "" {
		return
	}
	h.say(t, s.channel, accPeople[4], "!agent deny "+s.approval)
	if res := h.answered(t, s.key, s.asked); res.Status != agentflow.TurnDone {
		t.Fatalf("the turn of the denied command: %s", res.Status)
	}
	h.decidedMessage(t, s, agentflow.ApprovalDenied, accAlice)
	s.approval, s.approvalMsg, s.asked = "", "", ""
}

// approvalButtons are the custom IDs of the approval buttons of m.
func approvalButtons(t *testing.T, m fakediscord.Message) []string {
	t.Helper()
	var rows []struct {
		Components []struct {
			CustomID string `json:"custom_id"`
		} `json:"components"`
	}
	if len(m.Components) > 0 {
		if err := json.Unmarshal(m.Components, &rows); err != nil {
			t.Fatalf("components of %s: %v", m.ID, err)
		}
	}
	var out []string
	for _, r := range rows {
		for _, c := range r.Components {
			action, _, _ := strings.Cut(c.CustomID, ":")
			switch action {
			case discordbot.ActionApprove, discordbot.ActionApproveAll, discordbot.ActionDeny:
				out = append(out, c.CustomID)
			}
		}
	}
	return out
}

// hasButtons says m has the three approval buttons, each for id.
func hasButtons(t *testing.T, m fakediscord.Message, id string) bool {
	t.Helper()
	b := approvalButtons(t, m)
	return len(b) == 3 && b[0] == discordbot.ActionApprove+":"+id && b[1] == discordbot.ActionApproveAll+":"+id &&
		b[2] == discordbot.ActionDeny+":"+id
}

// TestApprovalEndToEnd (issue 18) drives in-chat approvals from a (fake)
// Discord guild on the real stack: the Inbound (gateway and signed HTTP
// interactions) and Router, Temporal and a worker with the local
// sandbox, the fake model. An admin makes risky commands wait for
// approval with "/agent policy"; the owner's pipe-to-shell command
// waits, its approval message in the channel with the buttons Approve,
// Approve all for this turn and Deny. A member allowed to talk but not
// the owner clicks Approve: refused privately, and it waits on, its
// message untouched. The owner's Approve runs it once and edits the
// message; Deny tells the model it was not run and why; "/agent approve
// id:<id> all:True" approves the rest of the turn too. Only the approved
// commands ever ran.
func TestApprovalEndToEnd(t *testing.T) {
	h := startAccDiscord(t)
	alice, bob := accPeople[4], accPeople[3]
	h.setPolicy(t, agentflow.PolicyApprovals, agentflow.ApprovalRisky, agentflow.ApprovalRisky)

	// The owner starts a session with a risky command: it waits, its
	// message in the channel.
	ch := h.channelFor(t, alice)
	s := &accSession{key: h.key(ch), channel: ch}
	h.keep(s.key)
	first := h.say(t, ch, alice, h.mention()+"sh: echo ran >> count.txt; "+riskyCommand+"; cat count.txt")
	a := h.waitApproval(t, s, first)
	if v := h.state(t, s.key); v.Approvals != agentflow.ApprovalRisky || v.Requester != alice.user {
		t.Fatalf("the session: approvals %q, requester %q", v.Approvals, v.Requester)
	}
	msg, _ := h.fd.Message(s.approvalMsg)
	for _, want := range []string{"**Approval needed**", "```\necho ran >> count.txt; " + riskyCommand + "; cat count.txt\n```",
		"`pipe-to-shell`", "Needs an approval by the session's owner or an admin"} {
		if !strings.Contains(msg.Content, want) {
			t.Errorf("the approval message lacks %q:\n%s", want, msg.Content)
		}
	}

	// Bob, allowed to talk but not the owner, clicks Approve: refused
	// privately; the command waits on, its message untouched.
	b := h.before(t, s)
	inv, err := h.fd.ComponentClick(ch, s.approvalMsg, bob.user, bob.roles, discordbot.ActionApprove+":"+a.ID)
	if err != nil {
		t.Fatal(err)
	}
	h.obs.wait(t, inv.ID)
	h.refused(t, bob, s, b, accRef{Channel: ch, Interaction: inv.ID}, notOwner, agentflow.ControlApprove)
	h.stillWaits(t, s)
	if m, _ := h.fd.Message(s.approvalMsg); m.Edits != msg.Edits || m.Content != msg.Content {
		t.Errorf("the approval message changed after bob's click: %d edits, %q", m.Edits-msg.Edits, m.Content)
	}

	// The owner's Approve, over signed HTTP, runs it once.
	h.mode("http")
	b = h.before(t, s)
	inv, err = h.fd.ComponentClick(ch, s.approvalMsg, alice.user, alice.roles, discordbot.ActionApprove+":"+a.ID)
	if err != nil {
		t.Fatal(err)
	}
	h.obs.wait(t, inv.ID)
	h.done(t, alice, s, b, agentflow.ControlApprove)
	res := h.answered(t, s.key, first)
	if res.Status != agentflow.TurnDone || !strings.Contains(res.Answer, approvedBy(alice.user)[0]) {
		t.Fatalf("the approved turn: %s, %q", res.Status, res.Answer)
	}
	h.decidedMessage(t, s, agentflow.ApprovalApproved, alice.user)
	h.waitBot(t, ch, "Approved: `echo ran >> count.txt", b.messages)
	answer := h.waitBot(t, ch, "stdout:\nran", b.messages)
	// The message ends with the sender's invisible key marker (format characters).
	if n := len(regexp.MustCompile(`(?m)^ran\p{Cf}*$`).FindAllString(answer.Content, -1)); n != 1 {
		t.Errorf("the answer shows %d lines 'ran', want 1:\n%s", n, answer.Content)
	}

	// Deny, over the gateway: not run, and the model is told so and why.
	h.mode("gateway")
	h.ask(t, s, "sh: echo denied >> count.txt; "+riskyCommand)
	b = h.before(t, s)
	inv, err = h.fd.ComponentClick(ch, s.approvalMsg, alice.user, alice.roles, discordbot.ActionDeny+":"+s.approval)
	if err != nil {
		t.Fatal(err)
	}
	h.obs.wait(t, inv.ID)
	res = h.answered(t, s.key, s.asked)
	if res.Status != agentflow.TurnDone || !strings.Contains(res.Answer, deniedBy(alice.user)[0]) || !strings.Contains(res.Answer, "pipe-to-shell") {
		t.Fatalf("the denied turn: %s, %q", res.Status, res.Answer)
	}
	h.decidedMessage(t, s, agentflow.ApprovalDenied, alice.user)
	h.waitBot(t, ch, "not run: "+alice.user+" denied this command", b.messages)

	// "/agent approve id:<id> all:True" approves the rest of the turn too.
	h.mode("http")
	h.ask(t, s, "sh: echo all-first >> count.txt; "+riskyCommand+"\nsh: echo all-second >> count.txt; "+riskyCommand+"; cat count.txt")
	inv = h.fd.SlashCommand(ch, alice.user, alice.roles, discordbot.CommandName, fakediscord.SubCommand("approve",
		fakediscord.StringOption("id", s.approval), fakediscord.BooleanOption("all", true)))
	h.obs.wait(t, inv.ID)
	res = h.answered(t, s.key, s.asked)
	if res.Status != agentflow.TurnDone {
		t.Fatalf("the turn approved with all: %s, %q", res.Status, res.Answer)
	}
	for _, w := range approvedAllBy(alice.user) {
		if !strings.Contains(res.Answer, w) {
			t.Errorf("the turn approved with all lacks %q:\n%s", w, res.Answer)
		}
	}
	if text := h.decidedMessage(t, s, agentflow.ApprovalApproved, alice.user); !strings.Contains(text, "with the rest of this turn's commands") {
		t.Errorf("the approval message of approve --all:\n%s", text)
	}
	// Only the approved commands ran, each once.
	if got := regexp.MustCompile(`(?m)^(ran|denied|all-first|all-second)$`).FindAllString(res.Answer, -1); strings.Join(got, " ") != "ran all-first all-second" {
		t.Errorf("count.txt at the end: %q; want ran, all-first, all-second\n%s", got, res.Answer)
	}
}
