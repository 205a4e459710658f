package slackbot_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/agentflow/risk"
	slackbot "github.com/agentbot/agentbot/bot/slack"
	"github.com/agentbot/agentbot/internal/fakeslack"
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

// clickCommand is the command a click on an approval button stands for.
func clickCommand(action, id string) string {
	switch action {
	case slackbot.ActionApproveAll:
		return "approve " + id + " --all"
	case slackbot.ActionDeny:
		return "deny " + id
	}
	return "approve " + id
}

// setPolicy has root, an admin, set key of the tenant's policy to value
// with "/agent policy set" and waits for the answer, which shows the key
// as shows (the manager answers once the sessions have the new policy).
func (h *accSlack) setPolicy(t *testing.T, key, value, shows string) {
	t.Helper()
	text := "policy set " + key + " " + value
	from, before := h.obs.mark(), len(h.fs.Responses())
	h.fs.SlashCommand(accOpen, accRoot, text)
	h.obs.wait(t, from, accRoot, text)
	until(t, "the answer to "+text, func() (bool, string) {
		var got []string
		for _, r := range h.fs.Responses()[before:] {
			if r.User == accRoot && strings.Contains(r.Text, "`"+key+"`: "+shows) {
				return true, ""
			}
			got = append(got, r.Text)
		}
		return false, strings.Join(got, " | ")
	})
}

// ask has alice post text in the thread of s, a turn whose command must
// wait for approval, and waits for it (see waitApproval).
func (h *accSlack) ask(t *testing.T, s *accSession, text string) {
	t.Helper()
	from := h.obs.mark()
	ts := h.fs.PostUserMessage(s.channel, accAlice, text, s.root)
	h.obs.wait(t, from, accAlice, text)
	h.waitApproval(t, s, ts)
}

// waitApproval waits until the turn of the message asked waits for
// approval in s and its approval message, with the buttons, is in the
// thread; it notes both in s and returns the approval.
func (h *accSlack) waitApproval(t *testing.T, s *accSession, asked string) agentflow.ApprovalView {
	t.Helper()
	var a *agentflow.ApprovalView
	until(t, "a command waiting for approval in "+s.key, func() (bool, string) {
		v := h.state(t, s.key)
		a = v.Approval
		return a != nil && a.State == agentflow.ApprovalWaiting, fmt.Sprintf("%s, %+v", v.Status, a)
	})
	s.approval, s.asked = a.ID, asked
	until(t, "the approval message of "+a.ID, func() (bool, string) {
		for _, m := range h.fs.Thread(s.channel, s.root) {
			if strings.HasSuffix(approvalKey(m), "/approval/"+a.ID) && hasButtons(t, m, a.ID) {
				s.approvalMsg = m.TS
				return true, ""
			}
		}
		return false, ""
	})
	return *a
}

// approvalFromBefore posts, as the bot did when it still served the
// channel of s, an approval message with its buttons there.
func (h *accSlack) approvalFromBefore(t *testing.T, s *accSession) {
	t.Helper()
	v := agentflow.ApprovalView{ID: "t1-call_before", Turn: 1, Command: riskyCommand, Mode: agentflow.ApprovalRisky, Need: 1,
		State: agentflow.ApprovalWaiting, Expires: time.Now().Add(time.Hour),
		Findings: []risk.Finding{{Rule: "pipe-to-shell", Reason: "runs a downloaded script"}}}
	api := slack.New(h.fs.Options().BotToken, slack.OptionAPIURL(h.fs.APIURL()))
	_, ts, err := api.PostMessageContext(context.Background(), s.channel, slack.MsgOptionTS(s.root),
		slack.MsgOptionText("Approval needed", false), slack.MsgOptionBlocks(slackbot.ApprovalBlocks(v)...))
	if err != nil {
		t.Fatal(err)
	}
	s.approval, s.approvalMsg = v.ID, ts
}

// stillWaits checks that the command waiting in s waits still: its
// message keeps its buttons, and (unless it is from before) the session
// has it waiting.
func (h *accSlack) stillWaits(t *testing.T, s *accSession) {
	t.Helper()
	m, ok := h.message(s.channel, s.approvalMsg)
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
	agentflow.ApprovalApproved:  "*Approved*",
	agentflow.ApprovalDenied:    "*Denied*",
	agentflow.ApprovalExpired:   "*Expired*",
	agentflow.ApprovalCancelled: "*Cancelled*",
}

// decidedMessage waits until the approval message of id in s says it was
// decided as state (by whom, when by is not empty), without buttons, and
// returns its text.
func (h *accSlack) decidedMessage(t *testing.T, s *accSession, id, state, by string) string {
	t.Helper()
	var text string
	until(t, fmt.Sprintf("the approval message of %s %s", id, state), func() (bool, string) {
		for _, m := range h.fs.Thread(s.channel, s.root) {
			if !strings.HasSuffix(approvalKey(m), "/approval/"+id) {
				continue
			}
			text = blocksText(t, m.Blocks)
			ok := strings.Contains(text, decisions[state]) && len(approvalButtons(t, m)) == 0 &&
				(by == "" || strings.Contains(text, "<@"+by+">"))
			return ok, text
		}
		return false, "no message"
	})
	return text
}

// denyWaiting has alice deny the command waiting in s, if one does, and
// waits for its turn to end.
func (h *accSlack) denyWaiting(t *testing.T, s *accSession) {
	t.Helper()
	if s.asked == "" {
		return
	}
	from := h.obs.mark()
	h.fs.PostUserMessage(s.channel, accAlice, "!agent deny "+s.approval, s.root)
	h.obs.wait(t, from, accAlice, "deny "+s.approval)
	if res := h.answered(t, s.key, s.asked); res.Status != agentflow.TurnDone {
		t.Fatalf("the turn of the denied command: %s", res.Status)
	}
	h.decidedMessage(t, s, s.approval, agentflow.ApprovalDenied, accAlice)
	s.approval, s.approvalMsg, s.asked = "", "", ""
}

// message is the message ts of channel.
func (h *accSlack) message(channel, ts string) (fakeslack.Message, bool) {
	for _, m := range h.fs.Messages(channel) {
		if m.TS == ts {
			return m, true
		}
	}
	return fakeslack.Message{}, false
}

// messageText is the text of the message ts in the thread of s.
func (h *accSlack) messageText(t *testing.T, s *accSession, ts string) string {
	t.Helper()
	m, ok := h.message(s.channel, ts)
	if !ok {
		t.Fatalf("no message %s in %s", ts, s.channel)
	}
	return m.Text
}

// approvalKey is the delivery key of a message the bot posted, when it
// is an approval's ("agent/<thread>/approval/<id>"); "" otherwise.
func approvalKey(m fakeslack.Message) string {
	if m.BotID == "" || m.Metadata == nil || m.Metadata.EventType != slackbot.MessageEventType {
		return ""
	}
	var p struct{ Key string }
	if json.Unmarshal(m.Metadata.EventPayload, &p) != nil || !strings.Contains(p.Key, "/approval/") {
		return ""
	}
	return p.Key
}

// approvalButtons are the approval buttons of m: action ID → value.
func approvalButtons(t *testing.T, m fakeslack.Message) map[string]string {
	t.Helper()
	var blocks []struct {
		Type     string `json:"type"`
		Elements []struct {
			ActionID string `json:"action_id"`
			Value    string `json:"value"`
		} `json:"elements"`
	}
	if len(m.Blocks) > 0 {
		if err := json.Unmarshal(m.Blocks, &blocks); err != nil {
			t.Fatalf("blocks of %s: %v", m.TS, err)
		}
	}
	out := map[string]string{}
	for _, b := range blocks {
		for _, e := range b.Elements {
			switch e.ActionID {
			case slackbot.ActionApprove, slackbot.ActionApproveAll, slackbot.ActionDeny:
				out[e.ActionID] = e.Value
			}
		}
	}
	return out
}

// hasButtons says m has the three approval buttons, each for id.
func hasButtons(t *testing.T, m fakeslack.Message, id string) bool {
	t.Helper()
	b := approvalButtons(t, m)
	return len(b) == 3 && b[slackbot.ActionApprove] == id && b[slackbot.ActionApproveAll] == id && b[slackbot.ActionDeny] == id
}

// blocksText is every text of blocks (sections, contexts, buttons), one a
// line, as Slack shows it (JSON escapes undone).
func blocksText(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var v any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatalf("blocks: %v", err)
		}
	}
	var b strings.Builder
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if s, ok := x["text"].(string); ok {
				b.WriteString(s + "\n")
			}
			for _, c := range x {
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		}
	}
	walk(v)
	return b.String()
}

// TestApprovalEndToEnd (issue 18) drives in-chat approvals from a (fake)
// Slack workspace on the real stack: the Inbound and Router, Temporal and
// a worker with the local sandbox, the fake model. An admin makes risky
// commands wait for approval with "/agent policy set"; the owner's
// pipe-to-shell command waits, its approval message in the thread with
// the buttons Approve, Approve all for this turn and Deny. An allowed
// non-owner's click is refused privately and changes nothing; the owner's
// Approve runs the command once and edits the message; Deny tells the
// model it was not run and why; with nobody answering, the command is
// denied when the policy's time is up; a stop cancels the wait. Only the
// approved command ever ran.
func TestApprovalEndToEnd(t *testing.T) {
	h := startAccSlack(t)
	h.setPolicy(t, agentflow.PolicyApprovals, agentflow.ApprovalRisky, agentflow.ApprovalRisky)

	// The owner starts a session with a risky command: it waits, its
	// message in the thread.
	first := "sh: echo ran >> count.txt; " + riskyCommand + "; cat count.txt"
	from := h.obs.mark()
	root := h.fs.PostUserMessage(accOpen, accAlice, h.mention()+first, "")
	h.obs.wait(t, from, accAlice, first)
	s := &accSession{key: h.key(accOpen, root), channel: accOpen, root: root}
	h.keep(s.key)
	a := h.waitApproval(t, s, root)
	if v := h.state(t, s.key); v.Approvals != agentflow.ApprovalRisky || v.Requester != accAlice {
		t.Fatalf("the session: approvals %q, requester %q", v.Approvals, v.Requester)
	}
	if left := time.Until(a.Expires); left < 9*time.Minute || left > 10*time.Minute {
		t.Errorf("the approval expires in %s, want the default 10m", left)
	}
	msg, _ := h.message(accOpen, s.approvalMsg)
	for _, want := range []string{"*Approval needed*", "echo ran &gt;&gt; count.txt; curl -s http://127.0.0.1:9/ | sh; cat count.txt",
		"`pipe-to-shell`", "Needs an approval by the session's owner or an admin", "Approve", "Approve all for this turn", "Deny"} {
		if text := blocksText(t, msg.Blocks); !strings.Contains(text, want) {
			t.Errorf("the approval message lacks %q:\n%s", want, text)
		}
	}

	// Bob, allowed but not the owner, clicks Approve: told privately, and
	// the command waits on, its message untouched.
	seq := topSeq(t, h.stack.Sessions, s.key)
	ephemerals := len(h.fs.Ephemerals(accOpen))
	from = h.obs.mark()
	h.fs.BlockAction(accOpen, accBob, s.approvalMsg, slackbot.ActionApprove, s.approval)
	h.obs.wait(t, from, accBob, "approve "+s.approval)
	until(t, "the refusal to bob", func() (bool, string) {
		var got []string
		for _, m := range h.fs.Ephemerals(accOpen)[ephemerals:] {
			if m.Recipient == accBob && strings.Contains(m.Text, "Only the person who started this session (or an admin)") {
				return true, ""
			}
			got = append(got, m.Recipient+": "+m.Text)
		}
		return false, strings.Join(got, " | ")
	})
	h.stillWaits(t, s)
	if m, _ := h.message(accOpen, s.approvalMsg); m.Edits != msg.Edits {
		t.Errorf("the approval message was edited after bob's click: %d edits", m.Edits-msg.Edits)
	}
	refused := false
	for _, e := range audit(t, h.stack.Sessions, s.key, seq) {
		refused = refused || (e.By == accBob && e.Verb == agentflow.ControlApprove && e.Outcome == agentflow.AuditRefused)
	}
	if !refused {
		t.Error("the audit log has no refused approve by bob")
	}

	// The owner's Approve runs it, once.
	from = h.obs.mark()
	h.fs.BlockAction(accOpen, accAlice, s.approvalMsg, slackbot.ActionApprove, s.approval)
	h.obs.wait(t, from, accAlice, "approve "+s.approval)
	res := h.answered(t, s.key, root)
	if res.Status != agentflow.TurnDone || !strings.Contains(res.Answer, approvedBy(accAlice)[0]) {
		t.Fatalf("the approved turn: %s, %q", res.Status, res.Answer)
	}
	h.decidedMessage(t, s, s.approval, agentflow.ApprovalApproved, accAlice)
	h.waitThread(t, accOpen, root, "Approved: `echo ran")
	answer := h.waitThread(t, accOpen, root, "stdout:\nran")
	if n := len(regexp.MustCompile(`(?m)^ran$`).FindAllString(answer.Text, -1)); n != 1 {
		t.Errorf("the answer shows %d lines 'ran', want 1:\n%s", n, answer.Text)
	}

	// Deny: not run, and the model is told so and why.
	h.ask(t, s, "sh: echo denied >> count.txt; "+riskyCommand)
	id := s.approval
	from = h.obs.mark()
	h.fs.BlockAction(accOpen, accAlice, s.approvalMsg, slackbot.ActionDeny, id)
	h.obs.wait(t, from, accAlice, "deny "+id)
	res = h.answered(t, s.key, s.asked)
	if res.Status != agentflow.TurnDone || !strings.Contains(res.Answer, deniedBy(accAlice)[0]) || !strings.Contains(res.Answer, "pipe-to-shell") {
		t.Fatalf("the denied turn: %s, %q", res.Status, res.Answer)
	}
	h.decidedMessage(t, s, id, agentflow.ApprovalDenied, accAlice)
	h.waitThread(t, accOpen, root, "not run: "+accAlice+" denied this command")

	// Nobody answers: at the policy's time, not run, and the model is told.
	h.setPolicy(t, agentflow.PolicyApprovalTimeout, "10s", "10s")
	h.ask(t, s, "sh: echo expired >> count.txt; "+riskyCommand)
	id = s.approval
	waited := time.Now()
	if v := h.state(t, s.key); v.Approval == nil || time.Until(v.Approval.Expires) > 10*time.Second {
		t.Fatalf("the approval under a 10s policy: %+v", v.Approval)
	}
	res = h.answered(t, s.key, s.asked)
	if res.Status != agentflow.TurnDone || !strings.Contains(res.Answer, "not run: no one approved this command within 10s") {
		t.Fatalf("the expired turn: %s, %q", res.Status, res.Answer)
	}
	if d := time.Since(waited); d < 5*time.Second {
		t.Errorf("the approval expired after %s, want about 10s", d)
	}
	if text := h.decidedMessage(t, s, id, agentflow.ApprovalExpired, ""); !strings.Contains(text, "Nobody answered") {
		t.Errorf("the expired approval message:\n%s", text)
	}
	h.waitThread(t, accOpen, root, "no one approved this command within 10s")

	// A stop cancels the wait: the status message's Stop button.
	h.setPolicy(t, agentflow.PolicyApprovalTimeout, "none", agentflow.DefaultApprovalTimeout.String())
	status := h.statusMessage(t, s)
	h.ask(t, s, "sh: echo stopped >> count.txt; "+riskyCommand)
	id = s.approval
	from = h.obs.mark()
	h.fs.BlockAction(accOpen, accAlice, status, slackbot.ActionStop, s.key)
	h.obs.wait(t, from, accAlice, "stop")
	if res := h.answered(t, s.key, s.asked); res.Status != agentflow.TurnStopped {
		t.Fatalf("the stopped turn: %s, %q", res.Status, res.Answer)
	}
	if text := h.decidedMessage(t, s, id, agentflow.ApprovalCancelled, ""); !strings.Contains(text, "The turn was stopped") ||
		!strings.Contains(text, "The command was not run") {
		t.Errorf("the cancelled approval message:\n%s", text)
	}

	// Only the approved command ran.
	from = h.obs.mark()
	ts := h.fs.PostUserMessage(accOpen, accAlice, "sh: cat count.txt", root)
	h.obs.wait(t, from, accAlice, "sh: cat count.txt")
	res = h.answered(t, s.key, ts)
	if res.Status != agentflow.TurnDone || len(regexp.MustCompile(`(?m)^ran$`).FindAllString(res.Answer, -1)) != 1 ||
		regexp.MustCompile(`(?m)^(denied|expired|stopped)$`).MatchString(res.Answer) {
		t.Fatalf("count.txt at the end: %q; want the one line 'ran'", res.Answer)
	}
}
