package tui_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/agentflow/risk"
	"github.com/agentbot/agentbot/bot/terminal"
)

// clock is a clock the test moves.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// threadOf is the thread of the session titled title.
func threadOf(t *testing.T, title string) string {
	t.Helper()
	entries, err := stack.client.List(t.Context(), "term:main")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Title == title {
			return e.ThreadKey
		}
	}
	t.Fatalf("no session titled %q", title)
	return ""
}

// TestApprovalBox feeds approval messages through the Feed, as the worker
// of the embedded default posts them, to a session that holds none: the
// box shows the command, why it asks and the keys, on a screen it fits;
// esc leaves it for later (the status bar says so, and it does not pop
// up again for the same approval), ctrl+a opens it again; y, a and n
// send approve <id>, approve <id> --all and deny <id> through the
// router, whose session says nothing of the kind waits (these approvals
// are the test's own); keys pressed as the box pops up by itself do not
// answer it; the edit that decides an approval says how in a notice.
func TestApprovalBox(t *testing.T) {
	const w, h = 80, 24
	o := embedded(t)
	clk := &clock{t: time.Now()}
	o.Now = clk.Now
	u := start(t, o, w, h)
	title := unique("approval box")
	u.newSession(title)
	thread := threadOf(t, title)
	v, err := stack.client.State(t.Context(), thread)
	if err != nil {
		t.Fatal(err)
	}
	// A turn the session has not run: its state is never past it.
	turn := v.Turn + 1
	approval := func(call string) agentflow.ApprovalView {
		return agentflow.ApprovalView{ID: fmt.Sprintf("t%d-%s", turn, call), Turn: turn, Command: "git push origin main",
			Findings: []risk.Finding{{Rule: "git-push", Reason: "pushes commits to a remote"}},
			Mode:     agentflow.ApprovalRisky, Need: 1, Expires: time.Now().Add(10 * time.Minute), State: agentflow.ApprovalWaiting}
	}
	deliver := func(a agentflow.ApprovalView) {
		t.Helper()
		err := o.Feed.Deliver(t.Context(), agentflow.Outbound{Thread: thread, Kind: agentflow.OutboundApproval, Turn: a.Turn,
			Key: "test/approval/" + a.ID, Approval: &a, Text: agentflow.Text{Inline: "Approval needed"}})
		if err != nil {
			t.Fatal(err)
		}
	}
	const keys = "y: approve · a: approve all for this turn · n: deny · esc: later"
	box := func(s string) bool { return strings.Contains(s, "Approval needed ·") }

	first := approval("call_first")
	deliver(first)
	u.waitText("the approval box", 10*time.Second, "Approval needed · "+first.ID, "git push origin main",
		"• git-push: pushes commits to a remote", keys)
	fits(t, "the approval box", u.view(), w, h)

	// Later: the box goes, the status bar says what waits; the same
	// approval delivered again does not pop up.
	u.key(tea.KeyEsc)
	u.waitFor("the box gone, the hint", 10*time.Second, func(s string) bool {
		return !box(s) && strings.Contains(statusBar(s), "approval waiting (ctrl+a)")
	})
	deliver(first)
	time.Sleep(time.Second) // a few state polls
	if s := u.screen(); box(s) {
		t.Fatalf("the approval popped up again after esc:\n%s", s)
	}
	u.key(tea.KeyCtrlA)
	u.waitText("the box again", 10*time.Second, "Approval needed · "+first.ID, keys)
	u.rune('y')
	u.waitText("approve sent, and the session's word", 20*time.Second,
		"you › /approve "+first.ID, "Nothing waits for approval here")
	if s := u.screen(); box(s) {
		t.Errorf("the box stays after y:\n%s", s)
	}
	// The edit that decides it.
	decided := first
	decided.State, decided.DecidedBy, decided.DecidedAt = agentflow.ApprovalApproved, "tester", time.Now()
	deliver(decided)
	u.waitFor("the decision, the hint gone", 10*time.Second, func(s string) bool {
		return strings.Contains(s, "approved by tester: git push origin main") && !strings.Contains(s, "approval waiting")
	})

	// A new approval pops up by itself; a key pressed as it does is
	// ignored.
	second := approval("call_second")
	deliver(second)
	u.waitText("the second box", 10*time.Second, "Approval needed · "+second.ID)
	u.rune('n')
	time.Sleep(300 * time.Millisecond)
	if s := u.screen(); !box(s) || strings.Contains(s, "/deny") {
		t.Fatalf("n pressed as the box popped up answered it:\n%s", s)
	}
	clk.add(time.Second)
	u.rune('a')
	u.waitText("approve --all sent", 20*time.Second, "you › /approve "+second.ID+" --all")

	third := approval("call_third")
	deliver(third)
	u.waitText("the third box", 10*time.Second, "Approval needed · "+third.ID)
	clk.add(time.Second)
	u.rune('n')
	u.waitText("deny sent", 20*time.Second, "you › /deny "+third.ID)
	denied := third
	denied.State, denied.DecidedBy = agentflow.ApprovalDenied, "tester"
	deliver(denied)
	u.waitText("the denial", 10*time.Second, "denied by tester: git push origin main")
	fits(t, "the session after the approvals", u.view(), w, h)

	// A long script, with a line wider than the screen and a carriage
	// return that would hide what it runs: the box fits, cut, the
	// escapes shown.
	long := approval("call_long")
	var script []string
	for i := range 60 {
		script = append(script, fmt.Sprintf("echo step %d", i))
	}
	script[0] = "rm -rf ~\recho " + strings.Repeat("harmless ", 20)
	long.Command = strings.Join(script, "\n")
	deliver(long)
	s := u.waitText("the long box", 10*time.Second, "Approval needed · "+long.ID, "rm -rf ~\\x0decho harmless", "more lines", keys)
	fits(t, "the long box", u.view(), w, h)
	if strings.Contains(s, "echo step 59") {
		t.Errorf("the long script is not cut:\n%s", s)
	}
	u.key(tea.KeyEsc)
	u.waitFor("the long box gone", 10*time.Second, func(s string) bool { return !box(s) })
}

// TestApprovalLive asks for approval of real commands: the session set
// to ask before every command (/approvals always), the box pops up from
// the session's approval message (embedded) or its state (a worker
// elsewhere); y runs the command and n keeps it from running, the model
// told.
func TestApprovalLive(t *testing.T) {
	for _, mode := range []string{"embedded", "remote"} {
		t.Run(mode, func(t *testing.T) {
			o := embedded(t)
			if mode == "remote" {
				stack.board.use(t, terminal.NewSender(io.Discard))
				o.Feed = nil
				// A remote worker's machine is not the UI's to touch:
				// the root must be there.
				if err := os.Mkdir(filepath.Join(o.Workdir, "workspace"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			u := start(t, o, 100, 30)
			title := unique("approval live")
			u.newSession(title)
			thread := threadOf(t, title)
			u.say("/approvals always")
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				v, err := stack.client.State(t.Context(), thread)
				if err == nil && v.Approvals == agentflow.ApprovalAlways {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the session's mode: %+v %v", v.Approvals, err)
				}
			}

			u.say("sh: echo live-approved")
			u.waitText("the box", 20*time.Second, "Approval needed", "echo live-approved",
				"this session asks before every command (approvals always)")
			// Later, then again.
			u.key(tea.KeyEsc)
			u.waitFor("the status bar while it waits", 10*time.Second, func(s string) bool {
				return strings.HasPrefix(strings.TrimSpace(statusBar(s)), "waiting for approval · approval waiting (ctrl+a)")
			})
			u.key(tea.KeyCtrlA)
			u.waitText("the box again", 10*time.Second, "Approval needed", "echo live-approved")
			u.rune('y')
			// Embedded, the session's edit says who decided; remote, the
			// router's reply alone says it.
			decision := "approved by tester: echo live-approved"
			if mode == "remote" {
				decision = "Approved: echo live-approved."
			}
			u.waitFor("the approved command's answer", 30*time.Second, func(s string) bool {
				return strings.Contains(s, "you › /approve t") && strings.Contains(s, "Approved: echo live-approved.") &&
					strings.Contains(s, decision) && strings.Contains(s, "[shell] (approved by tester") && activity(s) == "idle"
			})

			u.say("sh: echo live-denied")
			u.waitText("the second box", 20*time.Second, "Approval needed", "echo live-denied")
			time.Sleep(700 * time.Millisecond)
			u.rune('n')
			decision = "denied by tester: echo live-denied"
			if mode == "remote" {
				decision = "Denied: echo live-denied."
			}
			s := u.waitFor("the denied command's answer", 30*time.Second, func(s string) bool {
				return strings.Contains(s, "you › /deny t") && strings.Contains(s, decision) &&
					strings.Contains(s, "not run: tester denied this command") && activity(s) == "idle"
			})
			if strings.Contains(s, "no longer waits") || strings.Contains(s, "approval waiting") || strings.Contains(s, "Approval needed ·") {
				t.Errorf("an approval still shows, or is said twice:\n%s", s)
			}
			// The rows end as their calls did, none left waiting.
			u.waitFor("the rows settled", 20*time.Second, func(s string) bool {
				return strings.Contains(s, "✓ shell: echo live-approved") && strings.Contains(s, "⊘ shell: echo live-denied") &&
					!strings.Contains(s, "◌")
			})
		})
	}
}
