package slackbot

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
	"github.com/agentbot/agentbot/internal/fakeslack"
)

// stubSessions is a HomeSource of fixed sessions: List gives entries,
// State the entry's state with status[thread] when set (ErrDestroyed for
// a destroyed one).
type stubSessions struct {
	mu       sync.Mutex
	entries  []agentflow.SessionEntry
	status   map[string]agentflow.SessionStatus
	activity map[string]string
}

func (s *stubSessions) List(context.Context, string) ([]agentflow.SessionEntry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]agentflow.SessionEntry(nil), s.entries...), nil
}

func (s *stubSessions) State(_ context.Context, key string) (agentflow.SessionView, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.entries {
		if e.ThreadKey != key {
			continue
		}
		st := e.Status
		if x, ok := s.status[key]; ok {
			st = x
		}
		if st == agentflow.StatusDestroyed {
			return agentflow.SessionView{}, agentflow.ErrDestroyed
		}
		return agentflow.SessionView{ThreadKey: key, Title: e.Title, Backend: e.Backend, Parent: e.Parent,
			Requester: e.Requester, Created: e.Created, Status: st, Activity: s.activity[key]}, nil
	}
	return agentflow.SessionView{}, agentflow.ErrNoSession
}

// viewBlocks are the blocks of user's home in fs, by block ID, and the IDs
// in order.
func viewBlocks(t *testing.T, fs *fakeslack.Server, user string) (map[string]map[string]any, []string) {
	t.Helper()
	v, ok := fs.Home(user)
	if !ok {
		t.Fatalf("no home for %s", user)
	}
	var blocks []map[string]any
	if err := json.Unmarshal(v.Blocks, &blocks); err != nil {
		t.Fatal(err)
	}
	by := map[string]map[string]any{}
	var ids []string
	for _, b := range blocks {
		id, _ := b["block_id"].(string)
		by[id] = b
		ids = append(ids, id)
	}
	return by, ids
}

func homeBlockText(b map[string]any) string {
	if t, ok := b["text"].(map[string]any); ok {
		s, _ := t["text"].(string)
		return s
	}
	if els, ok := b["elements"].([]any); ok && len(els) > 0 {
		if t, ok := els[0].(map[string]any); ok {
			s, _ := t["text"].(string)
			return s
		}
	}
	return ""
}

func homeActionIDs(b map[string]any) []string {
	var out []string
	els, _ := b["elements"].([]any)
	for _, e := range els {
		el, _ := e.(map[string]any)
		id, _ := el["action_id"].(string)
		out = append(out, id)
	}
	return out
}

// TestHomeView publishes homes to the fake workspace, which checks them
// as views.publish does (at most 100 blocks, unique IDs, text limits):
// what each kind of session shows, the tree, the cut past
// maxHomeSessions, what an admin is told, and escaped titles.
func TestHomeView(t *testing.T) {
	fs := fakeslack.New(fakeslack.Options{})
	t.Cleanup(fs.Close)
	api := slack.New(fs.Options().BotToken, slack.OptionAPIURL(fs.APIURL()))
	links := NewLinks(api, nil)
	team := fs.Options().TeamID
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	session := func(n int, user, parent string, st agentflow.SessionStatus) agentflow.SessionEntry {
		ts := fmt.Sprintf("1712000000.%06d", n)
		return agentflow.SessionEntry{ThreadKey: ThreadKey(team, "C1", ts), Title: fmt.Sprintf("session %d", n), Backend: "local",
			Parent: parent, Requester: user, Created: base.Add(time.Duration(n) * time.Minute), Status: st}
	}
	root := fs.PostUserMessage("C1", "U1", "a thread with a permalink", "")

	tests := []struct {
		name    string
		user    string
		admins  []string
		entries func() ([]agentflow.SessionEntry, map[string]agentflow.SessionStatus, map[string]string)
		check   func(t *testing.T, by map[string]map[string]any, ids []string, entries []agentflow.SessionEntry)
	}{
		{
			name: "states and the tree", user: "U1",
			entries: func() ([]agentflow.SessionEntry, map[string]agentflow.SessionStatus, map[string]string) {
				gone := session(1, "U1", "", agentflow.StatusDestroyed) // a destroyed parent of a live fork
				running := session(2, "U1", gone.ThreadKey, agentflow.StatusIdle)
				paused := session(3, "U1", running.ThreadKey, agentflow.StatusPaused)
				busy := session(4, "U1", "", agentflow.StatusIdle)
				busy.ThreadKey = ThreadKey(team, "C1", root)
				leaf := session(5, "U1", "", agentflow.StatusDestroyed) // gone, no forks: not shown
				bobs := session(6, "U2", running.ThreadKey, agentflow.StatusIdle)
				return []agentflow.SessionEntry{gone, running, paused, busy, leaf, bobs},
					map[string]agentflow.SessionStatus{running.ThreadKey: agentflow.StatusRunning, busy.ThreadKey: agentflow.StatusBusy},
					map[string]string{busy.ThreadKey: "pause"}
			},
			check: func(t *testing.T, by map[string]map[string]any, ids []string, e []agentflow.SessionEntry) {
				want := []struct {
					prefix, state string
					actions       []string
				}{
					{"*session 1*", "destroyed", nil},
					{"└─ *session 2*", "running", []string{ActionStop, ActionDone, ActionDestroy}},
					{"   └─ *session 3*", "paused", []string{ActionDestroy}},
					{"*session 4*", "busy (pause)", []string{ActionOpen, ActionDone, ActionDestroy}},
				}
				for i, w := range want {
					text := homeBlockText(by[fmt.Sprintf("home_session_%d", i)])
					if !strings.HasPrefix(text, w.prefix) || !strings.Contains(text, w.state) || !strings.Contains(text, "`local`") {
						t.Errorf("row %d: %q, want %q … %q", i, text, w.prefix, w.state)
					}
					if got := homeActionIDs(by[fmt.Sprintf("home_actions_%d", i)]); strings.Join(got, ",") != strings.Join(w.actions, ",") {
						t.Errorf("row %d buttons %v, want %v", i, got, w.actions)
					}
				}
				if _, ok := by["home_session_4"]; ok {
					t.Errorf("a destroyed session without forks, or someone else's, is shown: %v", ids)
				}
				if strings.Contains(homeBlockText(by["home_about"]), "admin") {
					t.Error("a non-admin is told they are an admin")
				}
			},
		},
		{
			name: "more than fit", user: "U1",
			entries: func() ([]agentflow.SessionEntry, map[string]agentflow.SessionStatus, map[string]string) {
				var out []agentflow.SessionEntry
				for i := range 70 {
					parent := ""
					if i%2 == 1 {
						parent = out[i-1].ThreadKey
					}
					out = append(out, session(100+i, "U1", parent, agentflow.StatusIdle))
				}
				return out, nil, nil
			},
			check: func(t *testing.T, by map[string]map[string]any, ids []string, e []agentflow.SessionEntry) {
				if _, ok := by[fmt.Sprintf("home_session_%d", maxHomeSessions-1)]; !ok {
					t.Errorf("fewer than %d sessions shown: %v", maxHomeSessions, ids)
				}
				if _, ok := by[fmt.Sprintf("home_session_%d", maxHomeSessions)]; ok {
					t.Errorf("more than %d sessions shown", maxHomeSessions)
				}
				if !strings.Contains(homeBlockText(by["home_more"]), "30 less recently active sessions") {
					t.Errorf("the cut: %q", homeBlockText(by["home_more"]))
				}
				if !strings.Contains(homeBlockText(by["home_session_0"]), "session 130") {
					t.Errorf("not the most recently active: %q", homeBlockText(by["home_session_0"]))
				}
			},
		},
		{
			name: "an admin, and markup in a title", user: "U9", admins: []string{"U9"},
			entries: func() ([]agentflow.SessionEntry, map[string]agentflow.SessionStatus, map[string]string) {
				e := session(200, "U9", "", agentflow.StatusIdle)
				e.Title = "*<!channel>* `x` & <http://evil|click>"
				return []agentflow.SessionEntry{e, session(201, "U1", "", agentflow.StatusIdle)}, nil, nil
			},
			check: func(t *testing.T, by map[string]map[string]any, ids []string, e []agentflow.SessionEntry) {
				text := homeBlockText(by["home_session_0"])
				if strings.Contains(text, "<!channel>") || strings.Contains(text, "<http") || !strings.Contains(text, "&lt;!channel&gt;") {
					t.Errorf("title not escaped: %q", text)
				}
				if _, ok := by["home_session_1"]; ok {
					t.Error("an admin's home lists another's session")
				}
				if !strings.Contains(homeBlockText(by["home_about"]), "/agent list --all") {
					t.Errorf("the admin is not told: %q", homeBlockText(by["home_about"]))
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			entries, status, activity := tt.entries()
			home, err := NewHome(HomeConfig{Sessions: &stubSessions{entries: entries, status: status, activity: activity}, Admins: tt.admins})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			if err := home.publish(ctx, api, links, team, tt.user, homeNote{}, nil); err != nil {
				t.Fatalf("publish: %v", err)
			}
			by, ids := viewBlocks(t, fs, tt.user)
			if len(ids) > 100 {
				t.Fatalf("%d blocks", len(ids))
			}
			tt.check(t, by, ids, entries)
		})
	}
}

// TestHomeClicksActAsTheClicker: a button of the App Home reaches the
// Handler as the command of the same name in the thread its value names,
// as the person who clicked, over Socket Mode and HTTP; the thread link,
// and a value that names another team's thread, reach nothing; the
// Handler's private answer is shown on top of the clicker's home.
func TestHomeClicksActAsTheClicker(t *testing.T) {
	for _, mode := range []string{"socket", "http"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, fakeslack.Options{})
			team := e.fake.Options().TeamID
			root := e.fake.PostUserMessage(testChan, testUser, "a thread", "")
			own := agentflow.SessionEntry{ThreadKey: e.key(root), Title: "mine", Backend: "local", Requester: testUser,
				Created: time.Now(), Status: agentflow.StatusIdle}
			other := own
			other.ThreadKey, other.Title = ThreadKey("T9999", testChan, root), "another team's"
			home, err := NewHome(HomeConfig{Sessions: &stubSessions{entries: []agentflow.SessionEntry{own, other},
				status: map[string]agentflow.SessionStatus{own.ThreadKey: agentflow.StatusRunning}}})
			if err != nil {
				t.Fatal(err)
			}
			e.in.cfg.Home = home
			if mode == "socket" {
				e.socket(t)
			} else {
				e.http(t)
			}
			e.fake.OpenHome(testUser)
			e.waitFor(t, "the home", func(s *fakeslack.Server) bool { _, ok := s.Home(testUser); return ok })
			if !home.hasOpened(team, testUser) {
				t.Error("the opening is not remembered")
			}

			e.h.setAnswer(func(ctx context.Context, ev bot.Event, r bot.Replier) error {
				return r.Reply(ctx, bot.Response{Text: "Only the owner <may> do " + ev.Text, Private: true})
			})
			// Not commands: nothing reaches the handler.
			for _, c := range []struct{ action, value string }{{ActionOpen, own.ThreadKey}, {ActionDone, other.ThreadKey}} {
				if err := e.fake.ClickHome(testUser, c.action, c.value); err != nil {
					t.Fatal(err)
				}
			}
			tests := []struct{ clicker, action, want string }{
				{testUser, ActionStop, "stop"},
				{"U2", ActionDone, "done"},
				{"U2", ActionDestroy, "destroy"},
			}
			for _, tt := range tests {
				before, _ := e.fake.Home(tt.clicker)
				if err := e.fake.ClickHomeAs(testUser, tt.clicker, tt.action, own.ThreadKey); err != nil {
					t.Fatal(err)
				}
				ev := e.h.next(t)
				if ev.Kind != bot.KindCommand || ev.Text != tt.want || ev.ThreadKey != own.ThreadKey || ev.Channel != testChan ||
					ev.User != tt.clicker || !strings.HasSuffix(ev.ID, ":"+tt.clicker) || ev.Platform != Platform {
					t.Errorf("%s clicked by %s: %+v", tt.action, tt.clicker, ev)
				}
				e.waitFor(t, "the answer in the clicker's home", func(s *fakeslack.Server) bool {
					v, ok := s.Home(tt.clicker)
					return ok && v.Publishes > before.Publishes
				})
				by, _ := viewBlocks(t, e.fake, tt.clicker)
				if note := homeBlockText(by["home_note"]); note != "⚠️ Only the owner &lt;may&gt; do "+tt.want {
					t.Errorf("note %q", note)
				}
			}
			if n := e.h.count(); n != len(tests) {
				t.Errorf("%d events reached the handler, want %d", n, len(tests))
			}
		})
	}
}

// TestSenderKeepsOpenedHomes: the Sender publishes, after a delivery that
// changes a session, the home of its owner if they opened it (never
// anyone else's), once per Every: a change within it is published at its
// end, with the state then; Close drops what is pending.
func TestSenderKeepsOpenedHomes(t *testing.T) {
	fs := fakeslack.New(fakeslack.Options{})
	t.Cleanup(fs.Close)
	team := fs.Options().TeamID
	mine := agentflow.SessionEntry{ThreadKey: ThreadKey(team, "C1", "1712000000.000001"), Title: "mine", Backend: "local",
		Requester: "U1", Created: time.Now(), Status: agentflow.StatusIdle}
	bobs := agentflow.SessionEntry{ThreadKey: ThreadKey(team, "C1", "1712000000.000002"), Title: "bob's", Backend: "local",
		Requester: "U2", Created: time.Now(), Status: agentflow.StatusIdle}
	src := &stubSessions{entries: []agentflow.SessionEntry{mine, bobs}, status: map[string]agentflow.SessionStatus{}}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	deliver := func(s *Sender, thread string, kind agentflow.OutboundKind) {
		t.Helper()
		m := agentflow.Outbound{Thread: thread, Key: fmt.Sprintf("%s/%s/%d", thread, kind, time.Now().UnixNano()), Kind: kind, Title: "t",
			Lifecycle: agentflow.LifecyclePaused}
		if err := s.Deliver(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	published := func(user string) int { v, _ := fs.Home(user); return v.Publishes }
	state := func(user string) string {
		by, _ := viewBlocks(t, fs, user)
		return homeBlockText(by["home_session_0"])
	}

	t.Run("at the end of Every", func(t *testing.T) {
		home, err := NewHome(HomeConfig{Sessions: src, Every: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewSender(SenderConfig{BotToken: fs.Options().BotToken, APIURL: fs.APIURL(), Home: home})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		home.opened(team, "U1") // as the Inbound does when U1 opens the tab
		deliver(s, bobs.ThreadKey, agentflow.OutboundTitle)
		deliver(s, mine.ThreadKey, agentflow.OutboundTitle)
		waitFor(t, fs, "U1's home", func() bool { return published("U1") == 1 })
		if _, ok := fs.Home("U2"); ok {
			t.Error("the home of someone who never opened it was published")
		}
		src.mu.Lock()
		src.status[mine.ThreadKey] = agentflow.StatusPaused
		src.mu.Unlock()
		deliver(s, mine.ThreadKey, agentflow.OutboundLifecycle)
		deliver(s, mine.ThreadKey, agentflow.OutboundTitle)
		waitFor(t, fs, "U1's home again", func() bool { return published("U1") >= 2 && strings.Contains(state("U1"), "paused") })
	})
	t.Run("every owner, for a worker of its own", func(t *testing.T) {
		home, err := NewHome(HomeConfig{Sessions: src, Every: 100 * time.Millisecond, EveryOwner: true})
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewSender(SenderConfig{BotToken: fs.Options().BotToken, APIURL: fs.APIURL(), Home: home})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		before := published("U2")
		deliver(s, bobs.ThreadKey, agentflow.OutboundTitle) // nobody opened a home here
		waitFor(t, fs, "U2's home", func() bool { return published("U2") == before+1 })
	})
	t.Run("close drops what waits", func(t *testing.T) {
		home, err := NewHome(HomeConfig{Sessions: src, Every: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewSender(SenderConfig{BotToken: fs.Options().BotToken, APIURL: fs.APIURL(), Home: home})
		if err != nil {
			t.Fatal(err)
		}
		home.opened(team, "U1")
		before := published("U1")
		deliver(s, mine.ThreadKey, agentflow.OutboundTitle)
		waitFor(t, fs, "U1's home", func() bool { return published("U1") == before+1 })
		deliver(s, mine.ThreadKey, agentflow.OutboundTitle) // within the hour: waits
		s.Close()
		if got := published("U1"); got != before+1 {
			t.Errorf("%d publications after Close, want %d", got, before+1)
		}
		// The Sender may be used after Close: the next change starts
		// afresh and is published.
		deliver(s, mine.ThreadKey, agentflow.OutboundLifecycle)
		waitFor(t, fs, "U1's home after Close", func() bool { return published("U1") == before+2 })
		s.Close()
	})
	t.Run("without a Home", func(t *testing.T) {
		s, err := NewSender(SenderConfig{BotToken: fs.Options().BotToken, APIURL: fs.APIURL()})
		if err != nil {
			t.Fatal(err)
		}
		calls := fs.Calls("views.publish")
		deliver(s, mine.ThreadKey, agentflow.OutboundLifecycle)
		s.Close()
		if fs.Calls("views.publish") != calls {
			t.Error("a Sender without a Home published one")
		}
	})
}

func waitFor(t *testing.T, fs *fakeslack.Server, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := fs.WaitFor(ctx, func(*fakeslack.Server) bool { return cond() }); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
