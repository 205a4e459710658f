package slackbot_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentbot/agentbot/agentflow"
	slackbot "github.com/agentbot/agentbot/bot/slack"
	"github.com/agentbot/agentbot/internal/fakeslack"
)

// lateSessions is the stack's session client, which exists only once the
// stack runs, after the Sender it delivers through was made.
type lateSessions struct {
	cl atomic.Pointer[agentflow.Client]
}

func (l *lateSessions) List(ctx context.Context, key string) ([]agentflow.SessionEntry, error) {
	return l.cl.Load().List(ctx, key)
}

func (l *lateSessions) State(ctx context.Context, key string) (agentflow.SessionView, error) {
	return l.cl.Load().State(ctx, key)
}

// startHomeSlack starts the stack of the access tests (see startAccSlack)
// with an App Home shared by the Inbound and the Sender, as cmd/bot wires
// them in one process.
func startHomeSlack(t *testing.T) *accSlack {
	t.Helper()
	return startAccSlackWith(t, accOptions{home: true})
}

// shownHome is a published home as a person reads it.
type shownHome struct {
	note      string
	rows      []shownRow
	publishes int
}

// shownRow is one session of a home: its text and its buttons (action ID →
// the element), found by the thread its buttons name.
type shownRow struct {
	thread  string
	text    string
	buttons map[string]map[string]any
}

func (r shownRow) has(action string) bool { _, ok := r.buttons[action]; return ok }

// readHome reads the home last published for user.
func readHome(t *testing.T, fs *fakeslack.Server, user string) (shownHome, bool) {
	t.Helper()
	v, ok := fs.Home(user)
	if !ok {
		return shownHome{}, false
	}
	var blocks []map[string]any
	if err := json.Unmarshal(v.Blocks, &blocks); err != nil {
		t.Fatalf("the home of %s: %v", user, err)
	}
	out := shownHome{publishes: v.Publishes}
	for _, b := range blocks {
		id, _ := b["block_id"].(string)
		text := ""
		if tx, ok := b["text"].(map[string]any); ok {
			text, _ = tx["text"].(string)
		}
		switch {
		case id == "home_note":
			out.note = text
		case strings.HasPrefix(id, "home_session_"):
			out.rows = append(out.rows, shownRow{text: text, buttons: map[string]map[string]any{}})
		case strings.HasPrefix(id, "home_actions_") && len(out.rows) > 0:
			row := &out.rows[len(out.rows)-1]
			els, _ := b["elements"].([]any)
			for _, e := range els {
				el, _ := e.(map[string]any)
				aid, _ := el["action_id"].(string)
				row.buttons[aid] = el
				row.thread, _ = el["value"].(string)
			}
		}
	}
	return out, true
}

func (h shownHome) row(thread string) (shownRow, int) {
	for i, r := range h.rows {
		if r.thread == thread {
			return r, i
		}
	}
	return shownRow{}, -1
}

func (h shownHome) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "note %q;", h.note)
	for _, r := range h.rows {
		buttons := make([]string, 0, len(r.buttons))
		for a := range r.buttons {
			buttons = append(buttons, a)
		}
		slices.Sort(buttons)
		fmt.Fprintf(&b, " [%s %q %v]", r.thread, r.text, buttons)
	}
	return b.String()
}

// waitHome waits until the home published for user satisfies cond.
func waitHome(t *testing.T, h *accSlack, user, what string, cond func(shownHome) bool) shownHome {
	t.Helper()
	var got shownHome
	until(t, what, func() (bool, string) {
		var ok bool
		got, ok = readHome(t, h.fs, user)
		return ok && cond(got), got.String()
	})
	return got
}

// TestAppHome (issue 19, item 3): the Slack App Home on the real stack —
// the Inbound and the Sender sharing one Home, the Router, Temporal, the
// workflows and the local sandbox. Alice's home shows her sessions as a
// fork tree; it follows a turn that starts and is stopped from the home,
// without being opened again; Pause and Destroy work from it; a click by
// anyone else is refused as in a thread (by the session manager, audited,
// for an allowed non-owner; at the gate for a stranger) and changes
// nothing; and with views.publish refused, sessions and the home's buttons
// work as before.
func TestAppHome(t *testing.T) {
	ctx := context.Background()
	h := startHomeSlack(t)
	cl := h.stack.Sessions

	h.fs.OpenHome(accAlice)
	waitHome(t, h, accAlice, "alice's empty home", func(s shownHome) bool { return len(s.rows) == 0 })

	parent := h.startByMention(t, accAlice)
	var fork string
	t.Run("the tree", func(t *testing.T) {
		// The home follows without being opened again.
		opens := h.fs.HomeOpens()
		waitHome(t, h, accAlice, "the parent in alice's home", func(s shownHome) bool {
			r, _ := s.row(parent.key)
			return strings.Contains(r.text, parent.said) && strings.Contains(r.text, "idle")
		})
		b := accBefore{workflows: workflows(t, h.stack.Temporal)}
		h.fs.PostUserMessage(accOpen, accAlice, "!agent fork the child", parent.root)
		fork = h.newWorkflow(t, b)
		waitHome(t, h, accAlice, "the fork in alice's home", func(s shownHome) bool { _, i := s.row(fork); return i >= 0 })
		if n := h.fs.HomeOpens(); n != opens {
			t.Fatalf("the home was opened %d times meanwhile", n-opens)
		}
		// Opened again, it shows the same tree: the fork under its parent.
		before, _ := readHome(t, h.fs, accAlice)
		h.fs.OpenHome(accAlice)
		home := waitHome(t, h, accAlice, "a home published for the opening", func(s shownHome) bool { return s.publishes > before.publishes })
		p, pi := home.row(parent.key)
		f, fi := home.row(fork)
		if pi != 0 || fi != 1 || len(home.rows) != 2 {
			t.Fatalf("rows: %s", home)
		}
		if strings.HasPrefix(p.text, "└─ ") || !strings.HasPrefix(f.text, "└─ ") || !strings.Contains(f.text, "the child") {
			t.Errorf("not a tree: %s", home)
		}
		for _, r := range []shownRow{p, f} {
			open := r.buttons[slackbot.ActionOpen]
			_, channel, ts, _ := slackbot.ParseThreadKey(r.thread)
			if url, _ := open["url"].(string); !strings.Contains(url, channel) || !strings.Contains(url, strings.Replace(ts, ".", "", 1)) {
				t.Errorf("the thread link of %s: %v", r.thread, open)
			}
			if !r.has(slackbot.ActionDone) || !r.has(slackbot.ActionDestroy) || r.has(slackbot.ActionStop) {
				t.Errorf("buttons of an idle session: %s", home)
			}
			if _, ok := r.buttons[slackbot.ActionDestroy]["confirm"]; !ok {
				t.Errorf("Destroy has no confirmation: %v", r.buttons[slackbot.ActionDestroy])
			}
		}
	})

	t.Run("a running turn, stopped from the home", func(t *testing.T) {
		opens := h.fs.HomeOpens()
		ts := h.fs.PostUserMessage(accOpen, accAlice, "sh: sleep 600", parent.root)
		waitHome(t, h, accAlice, "the running turn in alice's home", func(s shownHome) bool {
			r, _ := s.row(parent.key)
			return strings.Contains(r.text, "running") && r.has(slackbot.ActionStop)
		})
		seq := topSeq(t, cl, parent.key)
		// Bob's (forged) Stop is refused; the turn runs on.
		before, _ := readHome(t, h.fs, accBob)
		if err := h.fs.ClickHomeAs(accAlice, accBob, slackbot.ActionStop, parent.key); err != nil {
			t.Fatal(err)
		}
		waitHome(t, h, accBob, "the refusal in bob's home", func(s shownHome) bool {
			return s.publishes > before.publishes && strings.Contains(s.note, "Only the person who started this session")
		})
		wantAudit(t, cl, parent.key, seq, accBob, agentflow.ControlStop, true)
		if v := h.state(t, parent.key); v.Status != agentflow.StatusRunning {
			t.Fatalf("after bob's Stop the session is %s", v.Status)
		}
		if err := h.fs.ClickHome(accAlice, slackbot.ActionStop, parent.key); err != nil {
			t.Fatal(err)
		}
		if res := h.answered(t, parent.key, ts); res.Status != agentflow.TurnStopped {
			t.Fatalf("the turn after Stop: %s", res.Status)
		}
		waitHome(t, h, accAlice, "the turn gone from alice's home", func(s shownHome) bool {
			r, _ := s.row(parent.key)
			return strings.Contains(r.text, "idle") && !r.has(slackbot.ActionStop)
		})
		if n := h.fs.HomeOpens(); n != opens {
			t.Errorf("the home was opened %d times meanwhile", n-opens)
		}
		wantAudit(t, cl, parent.key, seq, accAlice, agentflow.ControlStop, false)
	})

	t.Run("refused clicks", func(t *testing.T) {
		tests := []struct {
			name, clicker, action, verb string
			want                        string // in the clicker's home
			audited                     bool   // refused by the session manager
		}{
			{"non-owner pause", accBob, slackbot.ActionDone, agentflow.ControlPause, "Only the person who started this session", true},
			{"non-owner destroy", accBob, slackbot.ActionDestroy, agentflow.ControlDestroy, "Only the person who started this session", true},
			{"stranger destroy", accEve, slackbot.ActionDestroy, agentflow.ControlDestroy, "not on this bot's allowlist", false},
		}
		for i, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				h.mode([]string{"socket", "http"}[i%2])
				defer h.mode("socket")
				was := controlledOf(h.state(t, parent.key))
				seq := topSeq(t, cl, parent.key)
				before, _ := readHome(t, h.fs, tt.clicker)
				// Slack shows alice's home to alice only: the click is a
				// forged one.
				if err := h.fs.ClickHomeAs(accAlice, tt.clicker, tt.action, parent.key); err != nil {
					t.Fatal(err)
				}
				home := waitHome(t, h, tt.clicker, "the refusal in the home of "+tt.clicker, func(s shownHome) bool {
					return s.publishes > before.publishes && strings.Contains(s.note, tt.want)
				})
				if !strings.HasPrefix(home.note, "⚠️") || len(home.rows) != 0 {
					t.Errorf("the home of %s: %s", tt.clicker, home)
				}
				if got := controlledOf(h.state(t, parent.key)); got != was {
					t.Errorf("the session changed:\n got %+v\nwant %+v", got, was)
				}
				if tt.audited {
					wantAudit(t, cl, parent.key, seq, tt.clicker, tt.verb, true)
				}
				for _, e := range audit(t, cl, parent.key, seq) {
					if e.Thread == parent.key && (e.Outcome != agentflow.AuditRefused || !tt.audited) {
						t.Errorf("audit entry %+v", e)
					}
				}
			})
		}
	})

	t.Run("pause from the home", func(t *testing.T) {
		seq := topSeq(t, cl, parent.key)
		if err := h.fs.ClickHome(accAlice, slackbot.ActionDone, parent.key); err != nil {
			t.Fatal(err)
		}
		until(t, "the session paused", func() (bool, string) {
			v := h.state(t, parent.key)
			return v.Status == agentflow.StatusPaused, string(v.Status)
		})
		waitHome(t, h, accAlice, "the pause in alice's home", func(s shownHome) bool {
			r, _ := s.row(parent.key)
			return strings.Contains(r.text, "paused") && !r.has(slackbot.ActionDone) && r.has(slackbot.ActionDestroy)
		})
		wantAudit(t, cl, parent.key, seq, accAlice, agentflow.ControlPause, false)
	})

	t.Run("destroy from the home", func(t *testing.T) {
		if err := h.fs.ClickHome(accAlice, slackbot.ActionDestroy, fork); err != nil {
			t.Fatal(err)
		}
		until(t, "the fork destroyed", func() (bool, string) {
			p, err := cl.Describe(ctx, fork)
			return err == nil && p == agentflow.PresenceEnded, fmt.Sprint(p, err)
		})
		waitHome(t, h, accAlice, "the fork gone from alice's home", func(s shownHome) bool {
			_, fi := s.row(fork)
			_, pi := s.row(parent.key)
			return fi < 0 && pi == 0 && len(s.rows) == 1
		})
	})

	t.Run("views.publish refused", func(t *testing.T) {
		h.fs.Refuse("views.publish", "not_enabled")
		defer h.fs.Refuse("views.publish", "")
		before, _ := readHome(t, h.fs, accAlice)
		calls := h.fs.Calls("views.publish")
		h.fs.OpenHome(accAlice)
		until(t, "a refused publication", func() (bool, string) { return h.fs.Calls("views.publish") > calls, "" })
		// The paused session takes a message and answers, as ever.
		said := h.marker("after-refusal")
		ts := h.fs.PostUserMessage(accOpen, accAlice, "sh: echo "+said, parent.root)
		if res := h.answered(t, parent.key, ts); res.Status != agentflow.TurnDone {
			t.Fatalf("a turn with the home refused: %+v", res)
		}
		h.waitThread(t, accOpen, parent.root, "stdout:\n"+said)
		// The home as last published still works: Destroy does.
		if err := h.fs.ClickHome(accAlice, slackbot.ActionDestroy, parent.key); err != nil {
			t.Fatal(err)
		}
		until(t, "the parent destroyed", func() (bool, string) {
			p, err := cl.Describe(ctx, parent.key)
			return err == nil && p == agentflow.PresenceEnded, fmt.Sprint(p, err)
		})
		if after, _ := readHome(t, h.fs, accAlice); after.publishes != before.publishes {
			t.Errorf("a home was published while views.publish was refused: %d → %d", before.publishes, after.publishes)
		}
	})
}

// wantAudit checks that the tenant's audit log has, after seq, a request
// for verb in the session of key by user, refused or not as refused says.
func wantAudit(t *testing.T, cl *agentflow.Client, key string, seq int, user, verb string, refused bool) {
	t.Helper()
	var got []string
	for _, e := range audit(t, cl, key, seq) {
		if e.By == user && e.Verb == verb && e.Thread == key && (e.Outcome == agentflow.AuditRefused) == refused {
			return
		}
		got = append(got, fmt.Sprintf("%s %s %s %s", e.By, e.Verb, e.Thread, e.Outcome))
	}
	t.Fatalf("no %s of %s by %s (refused %v) in the audit log: %v", verb, key, user, refused, got)
}
