package tui

import (
	"fmt"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot/terminal"
)

// In-chat approvals in the UI: when the open session holds a shell
// command for approval (an agentflow.OutboundApproval through the Feed,
// or the session's state), a box over the screen shows the command and
// why it asks; y, a and n answer it with the commands of the grammar
// (approve <id>, approve <id> --all, deny <id>), as any chat does. Esc
// leaves it for later: it does not pop again for the same approval, and
// ctrl+a opens it again while it waits. Once decided, the box goes and a
// notice says how.

// forApproval is the purpose of the approval box.
const forApproval purpose = 100

// approvalStep is the approval box's step (past the other overlays').
const approvalStep = 4

// approvalGrace is how long after the box popped up by itself its keys
// are ignored: what the person was typing must not answer it.
const approvalGrace = 500 * time.Millisecond

// approvals is what the UI knows of the sessions' approvals.
type approvals struct {
	// waiting are the approvals that wait, by thread.
	waiting map[string]*agentflow.ApprovalView
	// shown are the approvals (thread and ID) that popped up once, or
	// were answered here: they do not pop up again by themselves.
	shown map[string]bool
	// done are the approvals known decided (and said so); gone those
	// the open session's state is past; answered those answered here
	// (the router's reply said how).
	done, gone, answered map[string]bool
	// popped is when the box last popped up by itself.
	popped time.Time
}

func approvalKey(thread, id string) string { return thread + "\x00" + id }

func (a *approvals) init() {
	if a.waiting == nil {
		a.waiting, a.shown = map[string]*agentflow.ApprovalView{}, map[string]bool{}
		a.done, a.gone, a.answered = map[string]bool{}, map[string]bool{}, map[string]bool{}
	}
}

// waitingApproval is the approval that waits in the open session, or nil.
func (m *Model) waitingApproval() *agentflow.ApprovalView {
	if m.screen != screenSession {
		return nil
	}
	return m.ap.waiting[m.thread]
}

// onApproval takes an approval message of the worker in this process:
// one that waits is shown (or, in another thread, flashed); its edit
// that decides it closes the box and says how.
func (m *Model) onApproval(o agentflow.Outbound) {
	m.ap.init()
	a := o.Approval
	if a == nil {
		if strings.TrimSpace(o.Text.Inline) != "" && o.Thread == m.thread && m.screen == screenSession {
			m.addKeyed(&item{kind: itemNotice, text: o.Text.Inline, key: o.Key + "\x00" + o.Text.Inline})
		}
		return
	}
	key := approvalKey(o.Thread, a.ID)
	if a.State == agentflow.ApprovalWaiting {
		if m.ap.done[key] || m.ap.gone[key] {
			return
		}
		v := *a
		m.ap.waiting[o.Thread] = &v
		if o.Thread != m.thread || m.screen != screenSession {
			m.flash = "approval needed in " + strings.TrimPrefix(o.Thread, "term:")
			return
		}
		m.popApproval()
		return
	}
	m.decided(o.Thread, a, decisionText(a))
}

// syncApproval takes what the open session's state says of approvals.
// A state does not say how an approval it no longer holds was decided,
// and one asked for before a decision may arrive after it: a waiting
// approval is taken as decided only when the state is past it (a later
// turn, or its call no longer waiting).
func (m *Model) syncApproval(v agentflow.SessionView) {
	m.ap.init()
	cur := m.ap.waiting[m.thread]
	if a := v.Approval; a != nil && a.State == agentflow.ApprovalWaiting {
		if cur != nil && cur.ID != a.ID {
			m.inferred(cur, "no longer waits for approval: "+codeSpan(cur.Command))
		}
		if k := approvalKey(m.thread, a.ID); !m.ap.done[k] && !m.ap.gone[k] {
			w := *a
			m.ap.waiting[m.thread] = &w
		}
	} else if cur != nil {
		if a != nil && a.ID == cur.ID {
			m.decided(m.thread, cur, decisionText(a))
		} else if text, past := pastApproval(v, cur); past {
			m.inferred(cur, text)
		}
	}
	m.popApproval()
}

// pastApproval says whether state v is past approval a, which it no
// longer holds, and what it tells of how a was decided.
func pastApproval(v agentflow.SessionView, a *agentflow.ApprovalView) (string, bool) {
	cmd := codeSpan(a.Command)
	if v.Turn > a.Turn || (v.Turn == a.Turn && v.Status != agentflow.StatusRunning) {
		return "no longer waits for approval: " + cmd, true
	}
	// Its ID is "t<turn>-<call ID>": the call's row says what became of
	// it.
	call, ok := strings.CutPrefix(a.ID, fmt.Sprintf("t%d-", a.Turn))
	if !ok || v.Turn != a.Turn {
		return "", false
	}
	for _, t := range v.Tools {
		if t.ID != call {
			continue
		}
		switch t.State {
		case "", "pending", "approval":
			return "", false
		case "denied":
			return "denied: " + cmd, true
		case "cancelled":
			return "not run: " + cmd, true
		}
		return "approved: " + cmd, true
	}
	return "", false
}

// decided closes approval a of thread, saying text once.
func (m *Model) decided(thread string, a *agentflow.ApprovalView, text string) {
	key := approvalKey(thread, a.ID)
	m.closeApproval(thread, a.ID)
	if m.ap.done[key] {
		return
	}
	m.ap.done[key] = true
	m.addTo(thread, &item{kind: itemNotice, text: text, key: "approval/" + key})
}

// inferred closes approval a of the open session, which its state is
// past. With a Feed, the session's message says how it was decided; with
// none, a notice says what the state tells, unless a was answered here
// (the router's reply said how).
func (m *Model) inferred(a *agentflow.ApprovalView, text string) {
	key := approvalKey(m.thread, a.ID)
	m.ap.gone[key] = true
	m.closeApproval(m.thread, a.ID)
	if m.o.Feed == nil && !m.ap.answered[key] {
		m.decided(m.thread, a, text)
	}
}

// closeApproval forgets that approval id of thread waits, and closes its
// box.
func (m *Model) closeApproval(thread, id string) {
	if cur := m.ap.waiting[thread]; cur != nil && cur.ID == id {
		delete(m.ap.waiting, thread)
	}
	if m.ov != nil && m.ov.purpose == forApproval && m.ov.thread == thread && m.ov.label == id {
		m.ov = nil
	}
}

// popApproval shows the open session's waiting approval, unless it
// popped up before, another question is open, or the person is typing
// or looking at tool rows (the status bar says it waits).
func (m *Model) popApproval() {
	a := m.waitingApproval()
	if a == nil || m.ov != nil || m.browsing || m.input.Value() != "" || m.ap.shown[approvalKey(m.thread, a.ID)] {
		return
	}
	m.openApproval(a)
	m.ap.popped = m.o.now()
}

func (m *Model) openApproval(a *agentflow.ApprovalView) {
	m.ap.shown[approvalKey(m.thread, a.ID)] = true
	m.ap.popped = time.Time{}
	m.ov = &overlay{purpose: forApproval, step: approvalStep, thread: m.thread, label: a.ID}
}

// reopenApproval opens the box of the waiting approval again (ctrl+a); it
// reports whether there was one.
func (m *Model) reopenApproval() bool {
	a := m.waitingApproval()
	if a == nil || m.ov != nil {
		return false
	}
	m.openApproval(a)
	return true
}

// approvalKeyPress answers the box: y approves, a approves the rest of the
// turn too, n denies.
func (m *Model) approvalKeyPress(k tea.KeyMsg) (tea.Model, tea.Cmd) {
	ov := m.ov
	var line string
	switch strings.ToLower(k.String()) {
	case "y":
		line = "approve " + ov.label
	case "a":
		line = "approve " + ov.label + " --all"
	case "n":
		line = "deny " + ov.label
	case "ctrl+c":
		m.ov = nil
		return m, nil
	default:
		return m, nil
	}
	if !m.ap.popped.IsZero() && m.o.now().Sub(m.ap.popped) < approvalGrace {
		return m, nil
	}
	m.ov = nil
	m.ap.answered[approvalKey(ov.thread, ov.label)] = true
	m.add(&item{kind: itemUser, text: "/" + line})
	m.follow()
	return m, m.c.command(ov.thread, line)
}

// approvalBox is what the box shows: the command, why it asks, who
// approved so far, when it expires and the keys; the command is cut to
// what leaves the rest on the screen.
func (m *Model) approvalBox() string {
	a := m.ap.waiting[m.ov.thread]
	if a == nil || a.ID != m.ov.label {
		return styleDim.Render("This approval was decided.") + "\n" + styleDim.Render("esc: close")
	}
	w := max(20, m.width-8)
	head := styleTitle.Render("Approval needed") + styleDim.Render(" · "+oneLine(a.ID+expiry(a), max(10, w-18)))
	var why []string
	for _, f := range a.Findings {
		why = append(why, oneLine("• "+inert(f.Rule)+": "+inert(f.Reason), w))
	}
	if len(why) == 0 {
		why = []string{oneLine("• this session asks before every command (approvals "+inert(a.Mode)+")", w)}
	}
	if len(why) > 4 {
		why = append(why[:3], styleDim.Render(fmt.Sprintf("  and %d more", len(why)-3)))
	}
	var extra []string
	if a.Need > 1 {
		s := fmt.Sprintf("needs %d different people", a.Need)
		if len(a.Approvers) > 0 {
			s += "; approved so far by " + strings.Join(a.Approvers, ", ")
		}
		extra = append(extra, styleDim.Render(oneLine(s, w)))
	}
	keys := styleDim.Render(oneLine("y: approve · a: approve all for this turn · n: deny · esc: later", w))
	// The box's border takes two lines; the screen keeps one above it.
	room := max(1, m.height-3-2-len(why)-len(extra)-1)
	cmd := strings.Split(wrap(terminal.Visible(a.Command), w-2), "\n")
	for i := range cmd {
		cmd[i] = strings.TrimRight(cmd[i], " ")
	}
	for len(cmd) > 0 && cmd[len(cmd)-1] == "" {
		cmd = cmd[:len(cmd)-1]
	}
	if len(cmd) > room {
		cmd = append(cmd[:max(0, room-1)], styleDim.Render(fmt.Sprintf("… %d more lines", len(cmd)-max(0, room-1))))
	}
	lines := []string{head}
	for _, l := range cmd {
		lines = append(lines, "  "+l)
	}
	lines = append(lines, why...)
	lines = append(lines, extra...)
	lines = append(lines, keys)
	return strings.Join(lines, "\n")
}

func expiry(a *agentflow.ApprovalView) string {
	if a.Expires.IsZero() {
		return ""
	}
	return " · expires " + a.Expires.Local().Format("15:04")
}

// decisionText says how approval a was decided.
func decisionText(a *agentflow.ApprovalView) string {
	cmd := codeSpan(a.Command)
	by := ""
	if a.DecidedBy != "" {
		by = " by " + a.DecidedBy
	}
	switch a.State {
	case agentflow.ApprovalApproved:
		if a.All {
			return "approved" + by + ", with the rest of this turn's commands: " + cmd
		}
		return "approved" + by + ": " + cmd
	case agentflow.ApprovalDenied:
		return "denied" + by + ": " + cmd
	case agentflow.ApprovalExpired:
		return "not approved in time, not run: " + cmd
	case agentflow.ApprovalCancelled:
		return "approval cancelled, not run: " + cmd
	}
	return "approval " + a.State + ": " + cmd
}

// codeSpan is a command as a code span of one line, so that a notice
// (plain text, see terminal.Plain) shows it as it is.
func codeSpan(cmd string) string {
	cmd = oneLine(cmd, 200)
	n := 0
	for run := 0; ; {
		i := strings.IndexByte(cmd[run:], '`')
		if i < 0 {
			break
		}
		j := run + i
		k := j
		for k < len(cmd) && cmd[k] == '`' {
			k++
		}
		n = max(n, k-j)
		run = k
	}
	fence := strings.Repeat("`", n+1)
	if n > 0 {
		return fence + " " + cmd + " " + fence
	}
	return fence + cmd + fence
}

// approvalHint is what the status bar says of a waiting approval the box
// does not show.
func (m *Model) approvalHint() string {
	if m.waitingApproval() == nil || (m.ov != nil && m.ov.purpose == forApproval) {
		return ""
	}
	return "approval waiting (ctrl+a)"
}
