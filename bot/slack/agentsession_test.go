package slackbot_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
	slackbot "github.com/agentbot/agentbot/bot/slack"
	"github.com/agentbot/agentbot/internal/fakeslack"
)

const (
	methodSetStatus = "agents.sessions.setStatus"
	methodRename    = "agents.sessions.rename"
)

// agentEnv is a Sender on a fake workspace, without the rest of the
// stack: what the Sender makes of each delivery, alone.
type agentEnv struct {
	fs     *fakeslack.Server
	sender *slackbot.Sender
}

func newAgentEnv(t *testing.T) *agentEnv {
	t.Helper()
	fs := fakeslack.New(fakeslack.Options{})
	t.Cleanup(fs.Close)
	s, err := slackbot.NewSender(slackbot.SenderConfig{BotToken: fs.Options().BotToken, APIURL: fs.APIURL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return &agentEnv{fs: fs, sender: s}
}

// thread is a new thread in C1, started by alice; it returns its key and
// root.
func (e *agentEnv) thread() (key, root string) {
	root = e.fs.PostUserMessage("C1", accAlice, "a task", "")
	return slackbot.ThreadKey(e.fs.Options().TeamID, "C1", root), root
}

// calls are the accepted calls of method in the thread root.
func (e *agentEnv) calls(method, root string) []fakeslack.AgentSessionCall {
	var out []fakeslack.AgentSessionCall
	for _, c := range e.fs.AgentSessionCalls() {
		if c.Method == method && c.ThreadTS == root {
			out = append(out, c)
		}
	}
	return out
}

// statuses are the statuses set in the thread root, in order.
func (e *agentEnv) statuses(root string) []string {
	var out []string
	for _, c := range e.calls(methodSetStatus, root) {
		out = append(out, c.Status)
	}
	return out
}

// The deliveries of a session in thread key, as the workflow makes them.
func progress(key string, turn int, final bool) agentflow.Outbound {
	st := agentflow.TurnRunning
	if final {
		st = agentflow.TurnDone
	}
	return agentflow.Outbound{Thread: key, Kind: agentflow.OutboundProgress, Key: fmt.Sprintf("agent/%s/%d/progress", key, turn),
		Turn: turn, Status: st, Final: final, Title: "a task",
		Tools: []agentflow.ToolStatus{{Name: "shell", Summary: "shell: go test", State: string(st)}}}
}

func answer(key string, turn int, status agentflow.TurnStatus) agentflow.Outbound {
	text := "Done."
	return agentflow.Outbound{Thread: key, Kind: agentflow.OutboundAnswer, Key: fmt.Sprintf("agent/%s/%d/answer", key, turn),
		Turn: turn, Status: status, Text: agentflow.Text{Inline: text, Size: len(text)}}
}

func lifecycle(key, state string, turn int) agentflow.Outbound {
	return agentflow.Outbound{Thread: key, Kind: agentflow.OutboundLifecycle, Lifecycle: state, Turn: turn,
		Key: fmt.Sprintf("agent/%s/lifecycle/%s/%d", key, state, turn)}
}

func retitled(key, title string, n int) agentflow.Outbound {
	return agentflow.Outbound{Thread: key, Kind: agentflow.OutboundTitle, Title: title, Key: fmt.Sprintf("agent/%s/title/%d", key, n)}
}

func notice(key, text string) agentflow.Outbound {
	return agentflow.Outbound{Thread: key, Kind: agentflow.OutboundNotice, Key: "agent/" + key + "/notice/" + text,
		Text: agentflow.Text{Inline: text, Size: len(text)}}
}

func (e *agentEnv) deliver(t *testing.T, ms ...agentflow.Outbound) {
	t.Helper()
	for _, m := range ms {
		if err := e.sender.Deliver(context.Background(), m); err != nil {
			t.Fatalf("deliver %s %s: %v", m.Kind, m.Key, err)
		}
	}
}

// TestAgentSessionStatusMapping checks which agent session status each
// delivery sets: processing once per running turn, active when it ends,
// suspended at a pause, closed at a destroy; and that what arrives late
// (an edit of a turn that ended, the answer of a turn the next one
// overtook) changes nothing.
func TestAgentSessionStatusMapping(t *testing.T) {
	const done = agentflow.TurnDone
	paused, destroyed := agentflow.LifecyclePaused, agentflow.LifecycleDestroyed
	cases := []struct {
		name string
		msgs func(key string) []agentflow.Outbound
		want []string
	}{
		{"a turn", func(k string) []agentflow.Outbound {
			return []agentflow.Outbound{progress(k, 1, false), progress(k, 1, false), progress(k, 1, true), answer(k, 1, done)}
		}, []string{"processing", "active"}},
		{"an answer with no final progress", func(k string) []agentflow.Outbound {
			return []agentflow.Outbound{progress(k, 1, false), answer(k, 1, done)}
		}, []string{"processing", "active"}},
		{"two turns", func(k string) []agentflow.Outbound {
			return []agentflow.Outbound{progress(k, 1, false), answer(k, 1, done), progress(k, 2, false), progress(k, 2, true), answer(k, 2, done)}
		}, []string{"processing", "active", "processing", "active"}},
		{"a late edit of a turn that ended", func(k string) []agentflow.Outbound {
			return []agentflow.Outbound{progress(k, 1, false), answer(k, 1, done), progress(k, 1, false)}
		}, []string{"processing", "active"}},
		{"the answer of a turn the next overtook", func(k string) []agentflow.Outbound {
			return []agentflow.Outbound{progress(k, 1, false), progress(k, 2, false), answer(k, 1, done), answer(k, 2, done)}
		}, []string{"processing", "active"}},
		{"paused", func(k string) []agentflow.Outbound {
			return []agentflow.Outbound{progress(k, 1, false), answer(k, 1, done), lifecycle(k, paused, 1)}
		}, []string{"processing", "active", "suspended"}},
		{"a final edit after the pause", func(k string) []agentflow.Outbound {
			return []agentflow.Outbound{progress(k, 1, false), answer(k, 1, done), lifecycle(k, paused, 1), progress(k, 1, true)}
		}, []string{"processing", "active", "suspended"}},
		{"resumed after the pause", func(k string) []agentflow.Outbound {
			return []agentflow.Outbound{progress(k, 1, false), answer(k, 1, done), lifecycle(k, paused, 1), progress(k, 2, false), answer(k, 2, done)}
		}, []string{"processing", "active", "suspended", "processing", "active"}},
		{"destroyed during a turn", func(k string) []agentflow.Outbound {
			return []agentflow.Outbound{progress(k, 1, false), lifecycle(k, destroyed, 1), progress(k, 1, true), progress(k, 2, false)}
		}, []string{"processing", "closed"}},
		{"destroyed while idle", func(k string) []agentflow.Outbound {
			return []agentflow.Outbound{progress(k, 1, false), answer(k, 1, done), lifecycle(k, destroyed, 1), lifecycle(k, destroyed, 1)}
		}, []string{"processing", "active", "closed"}},
		{"a refused turn", func(k string) []agentflow.Outbound {
			return []agentflow.Outbound{answer(k, 1, agentflow.TurnRefused)}
		}, nil},
		{"notices", func(k string) []agentflow.Outbound {
			return []agentflow.Outbound{notice(k, "Switched local → docker.")}
		}, nil},
	}
	e := newAgentEnv(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key, root := e.thread()
			e.deliver(t, tc.msgs(key)...)
			if got := e.statuses(root); !slices.Equal(got, tc.want) {
				t.Errorf("statuses %q, want %q", got, tc.want)
			}
			if len(tc.want) == 0 {
				if _, ok := e.fs.AgentSession("C1", root); ok {
					t.Error("an agent session was made")
				}
				return
			}
			a, ok := e.fs.AgentSession("C1", root)
			if !ok || a.Status != tc.want[len(tc.want)-1] || a.Title != "a task" {
				t.Errorf("the session %+v, %v; want status %s titled as the session", a, ok, tc.want[len(tc.want)-1])
			}
		})
	}
}

// TestAgentSessionTitle checks that a rename renames the agent session
// once per new title, and that a title given before the session exists
// names it when it is made.
func TestAgentSessionTitle(t *testing.T) {
	e := newAgentEnv(t)
	key, root := e.thread()
	// Before the first turn Slack has no session to rename
	// (session_not_found): the delivery is fine all the same.
	e.deliver(t, retitled(key, "Named early", 1))
	if n := e.fs.Calls(methodRename); n != 1 {
		t.Errorf("%d rename calls, want 1", n)
	}
	p := progress(key, 1, false)
	p.Title = "Named early"
	e.deliver(t, p, answer(key, 1, agentflow.TurnDone))
	if a, _ := e.fs.AgentSession("C1", root); a.Title != "Named early" {
		t.Errorf("the session was made titled %q, want the early name", a.Title)
	}
	e.deliver(t, retitled(key, "Named early", 2), retitled(key, "Bora Bora trip prep", 3), retitled(key, "Bora Bora trip prep", 4))
	var got []string
	for _, c := range e.calls(methodRename, root) {
		got = append(got, c.Title)
	}
	if want := []string{"Bora Bora trip prep"}; !slices.Equal(got, want) {
		t.Errorf("renames %q, want %q (an unchanged title is not sent)", got, want)
	}
	if a, _ := e.fs.AgentSession("C1", root); a.Title != "Bora Bora trip prep" {
		t.Errorf("title %q", a.Title)
	}
}

// TestAgentSessionRefused checks that a team whose app may not use the
// agents.sessions methods is asked once, whatever the number of threads
// and deliveries at once, and that everything else goes as without: the
// messages, the thread's "is working…" status.
func TestAgentSessionRefused(t *testing.T) {
	for _, code := range []string{"missing_scope", "not_allowed_token_type", "feature_not_enabled", "unknown_method", "method_deprecated", "not_allowed"} {
		t.Run(code, func(t *testing.T) {
			e := newAgentEnv(t)
			e.fs.Refuse(methodSetStatus, code)
			var wg sync.WaitGroup
			roots := make([]string, 4)
			for i := range roots {
				key, root := e.thread()
				roots[i] = root
				wg.Go(func() {
					for _, m := range []agentflow.Outbound{progress(key, 1, false), progress(key, 1, true), answer(key, 1, agentflow.TurnDone),
						retitled(key, "renamed", 1), lifecycle(key, agentflow.LifecyclePaused, 1), progress(key, 2, false)} {
						if err := e.sender.Deliver(context.Background(), m); err != nil {
							t.Errorf("deliver %s %s: %v", m.Kind, m.Key, err)
						}
					}
				})
			}
			wg.Wait()
			if n := e.fs.Calls(methodSetStatus); n != 1 {
				t.Errorf("setStatus called %d times, want once for the team", n)
			}
			if n := e.fs.Calls(methodRename); n != 0 {
				t.Errorf("rename called %d times with no session possible", n)
			}
			for _, root := range roots {
				var answered bool
				for _, m := range e.fs.Thread("C1", root) {
					answered = answered || (m.BotID != "" && strings.Contains(string(m.Blocks), "Done."))
				}
				if !answered {
					t.Errorf("no answer in thread %s", root)
				}
				if ss := e.statusCalls(root); len(ss) == 0 {
					t.Errorf("no thread status in %s: the refusal stopped assistant.threads.setStatus", root)
				}
			}
		})
	}
	t.Run("rename only", func(t *testing.T) {
		e := newAgentEnv(t)
		e.fs.Refuse(methodRename, "missing_scope")
		key, root := e.thread()
		e.deliver(t, progress(key, 1, false), answer(key, 1, agentflow.TurnDone), retitled(key, "one", 1), retitled(key, "two", 2),
			progress(key, 2, false))
		if n := e.fs.Calls(methodRename); n != 1 {
			t.Errorf("rename called %d times, want 1", n)
		}
		if got := e.statuses(root); !slices.Equal(got, []string{"processing", "active", "processing"}) {
			t.Errorf("statuses %q: a refused rename stopped setStatus", got)
		}
	})
	t.Run("one thread's error", func(t *testing.T) {
		e := newAgentEnv(t)
		key, root := e.thread()
		// A pause is delivered with no message, to a thread Slack does
		// not have: thread_not_found, for that call only (and that
		// thread's pause is not asked again).
		gone := slackbot.ThreadKey(e.fs.Options().TeamID, "C1", "1700000000.000001")
		e.deliver(t, lifecycle(gone, agentflow.LifecyclePaused, 1), lifecycle(gone, agentflow.LifecyclePaused, 1))
		if n := e.fs.Calls(methodSetStatus); n != 1 {
			t.Errorf("setStatus called %d times for the missing thread, want 1", n)
		}
		e.deliver(t, progress(key, 1, false), answer(key, 1, agentflow.TurnDone))
		if got := e.statuses(root); !slices.Equal(got, []string{"processing", "active"}) {
			t.Errorf("statuses %q after another thread's error", got)
		}
	})
}

// statusCalls are the assistant.threads.setStatus calls in the thread.
func (e *agentEnv) statusCalls(root string) []fakeslack.StatusCall {
	var out []fakeslack.StatusCall
	for _, c := range e.fs.StatusCalls() {
		if c.ThreadTS == root {
			out = append(out, c)
		}
	}
	return out
}

// recorder is a Handler that records the events it gets.
type recorder struct {
	mu  sync.Mutex
	evs []bot.Event
}

func (r *recorder) Handle(_ context.Context, ev bot.Event, _ bot.Replier) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, ev)
	return nil
}

func (r *recorder) events() []bot.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.evs)
}

// TestAgentSessionEvents checks the commands the Inbound makes of a
// person's stop and title change, delivered by the signed Events API as
// Slack sends them, and which it drops.
func TestAgentSessionEvents(t *testing.T) {
	fs := fakeslack.New(fakeslack.Options{})
	t.Cleanup(fs.Close)
	o := fs.Options()
	rec := &recorder{}
	// One worker: events are handled in the order they are sent, so the
	// last one says all the others were handled (or dropped).
	in := slackbot.NewInbound(slackbot.InboundConfig{BotToken: o.BotToken, SigningSecret: o.SigningSecret, APIURL: fs.APIURL(), Workers: 1}, rec, nil)
	gw := httptest.NewServer(in.HTTPHandler())
	t.Cleanup(gw.Close)
	t.Cleanup(func() { _ = in.Shutdown(context.Background()) })
	root := "1782234671.392669"
	key := slackbot.ThreadKey(o.TeamID, "C1", root)
	seq := 0
	send := func(t *testing.T, inner map[string]any) string {
		t.Helper()
		seq++
		id := fmt.Sprintf("EvAGENT%d", seq)
		body, err := json.Marshal(map[string]any{"token": o.VerificationToken, "team_id": o.TeamID, "api_app_id": o.AppID,
			"type": "event_callback", "event_id": id, "event_time": time.Now().Unix(), "event": inner})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := fs.SendSigned(gw.URL+slackbot.PathEvents, body, "application/json", time.Now(), o.SigningSecret, 0)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("event answered %d", resp.StatusCode)
		}
		return id
	}
	stopped := func(user, channel, thread string) map[string]any {
		return map[string]any{"type": "agent_session_stopped", "channel": channel, "thread_ts": thread, "user": user,
			"streaming_message_ts": []string{}, "event_ts": "1783536983.783769"}
	}
	titled := func(user, title, previous string) map[string]any {
		e := map[string]any{"type": "agent_session_title_changed", "channel": "C1", "thread_ts": root, "user": user,
			"team_id": o.TeamID, "title": title, "event_ts": "1783536983.783770"}
		if previous != "" {
			e["previous_title"] = previous
		}
		return e
	}
	const tricky = `--root "/etc" 'quoted' help`
	cases := []struct {
		name  string
		event map[string]any
		// want is the command text, "" when the event is dropped.
		want, title string
	}{
		{"stop", stopped(accAlice, "C1", root), "stop", ""},
		{"title", titled(accAlice, "Bora Bora trip prep", "Scuba diving research"), "title Bora Bora trip prep", "Bora Bora trip prep"},
		{"first title", titled(accBob, "  Two   spaces ", ""), "title Two spaces", "Two spaces"},
		{"a title that reads like options", titled(accAlice, tricky, "x"), "", tricky},
		{"an unchanged title", titled(accAlice, "Same", "Same"), "", ""},
		{"an empty title", titled(accAlice, " ", "Same"), "", ""},
		{"the app's own title", titled(o.BotUserID, "By the app", "Same"), "", ""},
		{"no user", titled("", "Nobody", "Same"), "", ""},
		{"a channel that is no channel ID", stopped(accAlice, "C1:x", root), "", ""},
		{"no thread", stopped(accAlice, "C1", ""), "", ""},
		{"another agent session event", map[string]any{"type": "agent_session_created", "channel": "C1", "thread_ts": root, "user": accAlice}, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			from := len(rec.events())
			id := send(t, tc.event)
			sentinel := send(t, map[string]any{"type": "message", "channel": "C1", "user": accAlice, "text": "!agent status",
				"ts": fmt.Sprintf("1783536990.%06d", seq), "thread_ts": root, "channel_type": "channel"})
			var got []bot.Event
			until(t, "the sentinel", func() (bool, string) {
				got = rec.events()[from:]
				return len(got) > 0 && got[len(got)-1].ID == sentinel, fmt.Sprint(len(got))
			})
			got = got[:len(got)-1]
			expect := tc.want != "" || tc.title != ""
			if !expect {
				if len(got) != 0 {
					t.Fatalf("the event was not dropped: %+v", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("%d events, want 1: %+v", len(got), got)
			}
			ev := got[0]
			user := tc.event["user"].(string)
			if ev.Kind != bot.KindCommand || ev.ID != id || ev.ThreadKey != key || ev.Channel != "C1" || ev.User != user || ev.Platform != slackbot.Platform {
				t.Errorf("event %+v, want a command in %s by %s with ID %s", ev, key, user, id)
			}
			if tc.want != "" && ev.Text != tc.want {
				t.Errorf("command %q, want %q", ev.Text, tc.want)
			}
			if tc.title != "" {
				cmd, err := bot.Parse(ev.Text, []string{"local"})
				if err != nil || cmd.Verb != bot.VerbTitle || cmd.Title != tc.title {
					t.Errorf("%q parses as %+v, %v; want the title %q", ev.Text, cmd, err, tc.title)
				}
			}
		})
	}
}

// TestAgentSessionEndToEnd drives Slack's agent sessions through the
// whole stack (the fake workspace over Socket Mode, the real Inbound,
// Router, Temporal, workflows and Sender): a turn shows processing then
// active; /title renames the session; the stop button stops a running
// turn for its owner and is refused, privately and in the audit log, to
// anyone else; a person's new title renames the session without coming
// back; done suspends and destroy closes it. Last, a workspace that
// refuses agents.sessions.setStatus is asked once and works as before.
func TestAgentSessionEndToEnd(t *testing.T) {
	h := startAccSlack(t)
	alice := accPerson{"owner", accAlice, accOpen, roleOwner}
	s := h.startByMention(t, accAlice)
	session := func() fakeslack.AgentSession {
		a, _ := h.fs.AgentSession(s.channel, s.root)
		return a
	}
	statuses := func() []string {
		var out []string
		for _, c := range h.fs.AgentSessionCalls() {
			if c.Method == methodSetStatus && c.ThreadTS == s.root {
				out = append(out, c.Status)
			}
		}
		return out
	}
	renames := func(title string) int {
		n := 0
		for _, c := range h.fs.AgentSessionCalls() {
			if c.Method == methodRename && c.ThreadTS == s.root && c.Title == title {
				n++
			}
		}
		return n
	}
	waitStatus := func(t *testing.T, want string) {
		t.Helper()
		until(t, "the agent session "+want, func() (bool, string) {
			a := session()
			return a.Status == want, fmt.Sprintf("%+v; statuses %q", a, statuses())
		})
	}
	// command has alice type a command in the thread and waits for the
	// router to have handled it.
	command := func(t *testing.T, text string) {
		t.Helper()
		from := h.obs.mark()
		h.fs.PostUserMessage(s.channel, accAlice, "!agent "+text, s.root)
		h.obs.wait(t, from, accAlice, text)
	}

	t.Run("a turn", func(t *testing.T) {
		until(t, "processing, then active", func() (bool, string) {
			got := statuses()
			return slices.Equal(got, []string{"processing", "active"}), fmt.Sprintf("%q", got)
		})
		if a := session(); a.Title != h.state(t, s.key).Title {
			t.Errorf("the agent session is titled %q, the session %q", a.Title, h.state(t, s.key).Title)
		}
	})
	t.Run("title command", func(t *testing.T) {
		command(t, "title Renamed by command")
		until(t, "the agent session renamed", func() (bool, string) { return session().Title == "Renamed by command", session().Title })
	})

	var long string
	t.Run("stop refused", func(t *testing.T) {
		long = h.runLong(t, alice, s)
		waitStatus(t, "processing")
		for _, p := range []struct {
			who         accPerson
			want, audit string
		}{
			{accPerson{"stranger", accEve, accOpen, roleStranger}, "not on this bot's allowlist", ""},
			{accPerson{"allowed-non-owner", accBob, accOpen, roleNonOwner}, "Only the person who started this session (or an admin)", agentflow.ControlStop},
		} {
			t.Run(p.who.name, func(t *testing.T) {
				b := h.before(t, p.who, s)
				if err := h.fs.StopAgentSession(s.channel, s.root, p.who.user); err != nil {
					t.Fatal(err)
				}
				h.obs.wait(t, b.handled, p.who.user, "stop")
				h.refused(t, p.who, s, b, p.want, p.audit)
				if v := h.state(t, s.key); v.Status != agentflow.StatusRunning {
					t.Errorf("the turn is %s after a refused stop", v.Status)
				}
				if a := session(); a.Status != "processing" {
					t.Errorf("the agent session is %s after a refused stop", a.Status)
				}
			})
		}
	})
	t.Run("stop", func(t *testing.T) {
		if long == "" {
			t.Skip("no long turn")
		}
		b := h.before(t, alice, s)
		if err := h.fs.StopAgentSession(s.channel, s.root, accAlice); err != nil {
			t.Fatal(err)
		}
		h.obs.wait(t, b.handled, accAlice, "stop")
		h.done(t, alice, s, b, agentflow.ControlStop)
		if res := h.answered(t, s.key, long); res.Status != agentflow.TurnStopped {
			t.Fatalf("the long turn after the stop button: %s", res.Status)
		}
		waitStatus(t, "active")
	})
	t.Run("title changed in Slack", func(t *testing.T) {
		const title = "Bora Bora trip prep"
		b := h.before(t, alice, s)
		if err := h.fs.RetitleAgentSession(s.channel, s.root, accAlice, title); err != nil {
			t.Fatal(err)
		}
		h.obs.wait(t, b.handled, accAlice, "title "+title)
		h.done(t, alice, s, b, agentflow.ControlTitle)
		until(t, "the session renamed", func() (bool, string) {
			v := h.state(t, s.key)
			return v.Title == title, v.Title
		})
		// The session's rename reaches Slack (the same title: no
		// change, no event), and nothing comes back.
		until(t, "the rename sent to Slack", func() (bool, string) { return renames(title) == 1, fmt.Sprint(renames(title)) })
		time.Sleep(2 * time.Second) // time for a wrongly looping event to come
		n := 0
		for _, env := range h.fs.Envelopes() {
			if strings.Contains(string(env.Payload), `"agent_session_title_changed"`) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d title change events, want the person's one", n)
		}
		if got := h.obs.mark() - b.handled; got != 1 {
			t.Errorf("the router handled %d events after the title change, want 1", got)
		}
		if got := renames(title); got != 1 {
			t.Errorf("%d renames to the new title, want 1", got)
		}
		if a := session(); a.Title != title {
			t.Errorf("the agent session is titled %q", a.Title)
		}
	})
	t.Run("done and back", func(t *testing.T) {
		command(t, "done")
		waitStatus(t, "suspended")
		from := len(statuses())
		ts := h.fs.PostUserMessage(s.channel, accAlice, "sh: echo back", s.root)
		if res := h.answered(t, s.key, ts); res.Status != agentflow.TurnDone {
			t.Fatalf("the turn after the pause: %s", res.Status)
		}
		until(t, "processing, then active, after the pause", func() (bool, string) {
			got := statuses()[from:]
			return slices.Equal(got, []string{"processing", "active"}), fmt.Sprintf("%q", got)
		})
	})
	t.Run("destroy", func(t *testing.T) {
		command(t, "destroy")
		waitStatus(t, "closed")
	})

	t.Run("refused", func(t *testing.T) {
		h.fs.Refuse(methodSetStatus, "missing_scope")
		setStatus, rename := h.fs.Calls(methodSetStatus), h.fs.Calls(methodRename)
		s2 := h.startByMention(t, accAlice)
		h.fs.PostUserMessage(s2.channel, accAlice, "!agent title Still renamed", s2.root)
		until(t, "the title", func() (bool, string) {
			v := h.state(t, s2.key)
			return v.Title == "Still renamed", v.Title
		})
		h.waitThread(t, s2.channel, s2.root, "Renamed to *Still renamed*")
		s3 := h.startByMention(t, accBob)
		if n := h.fs.Calls(methodSetStatus) - setStatus; n != 1 {
			t.Errorf("setStatus called %d times once refused, want 1", n)
		}
		if n := h.fs.Calls(methodRename) - rename; n != 0 {
			t.Errorf("rename called %d times with setStatus refused", n)
		}
		for _, th := range []*accSession{s2, s3} {
			if _, ok := h.fs.AgentSession(th.channel, th.root); ok {
				t.Errorf("an agent session in %s", th.root)
			}
			calls := 0
			for _, c := range h.fs.StatusCalls() {
				if c.ThreadTS == th.root {
					calls++
				}
			}
			if calls == 0 {
				t.Errorf("no thread status in %s", th.root)
			}
		}
	})
}
