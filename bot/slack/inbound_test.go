package slackbot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
	"github.com/agentbot/agentbot/internal/fakeslack"
)

const (
	testUser  = "U1"
	testChan  = "C1"
	waitLimit = 15 * time.Second
)

// recorder is a Handler that records events and answers with what its
// answer function says (nothing by default).
type recorder struct {
	mu     sync.Mutex
	events []bot.Event
	got    chan bot.Event
	// answer, when set, runs in Handle after the event is recorded.
	answer func(ctx context.Context, ev bot.Event, r bot.Replier) error
}

func newRecorder() *recorder { return &recorder{got: make(chan bot.Event, 100)} }

func (h *recorder) Handle(ctx context.Context, ev bot.Event, r bot.Replier) error {
	h.mu.Lock()
	h.events = append(h.events, ev)
	answer := h.answer
	h.mu.Unlock()
	h.got <- ev
	if answer != nil {
		return answer(ctx, ev, r)
	}
	return nil
}

func (h *recorder) setAnswer(f func(ctx context.Context, ev bot.Event, r bot.Replier) error) {
	h.mu.Lock()
	h.answer = f
	h.mu.Unlock()
}

// next waits for the next handled event.
func (h *recorder) next(t *testing.T) bot.Event {
	t.Helper()
	select {
	case ev := <-h.got:
		return ev
	case <-time.After(waitLimit):
		t.Fatal("no event reached the handler")
		return bot.Event{}
	}
}

func (h *recorder) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.events)
}

// env is a fake workspace and an Inbound on it.
type env struct {
	fake *fakeslack.Server
	in   *Inbound
	h    *recorder
}

func newEnv(t *testing.T, opts fakeslack.Options) *env {
	t.Helper()
	fake := fakeslack.New(opts)
	t.Cleanup(fake.Close)
	fake.SetUser(fakeslack.User{ID: testUser, Name: "ada", RealName: "Ada Lovelace"})
	h := newRecorder()
	o := fake.Options()
	// One worker handles events in arrival order, so a later event
	// being handled shows every earlier one was.
	in := NewInbound(InboundConfig{BotToken: o.BotToken, AppToken: o.AppToken, SigningSecret: o.SigningSecret,
		APIURL: fake.APIURL(), Workers: 1, Backends: []string{"local", "docker"},
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))}, h, nil)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := in.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return &env{fake: fake, in: in, h: h}
}

// socket runs the Inbound over Socket Mode until the test ends.
func (e *env) socket(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.in.RunSocketMode(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("RunSocketMode: %v", err)
		}
	})
	e.waitFor(t, "a socket mode connection", func(s *fakeslack.Server) bool { return s.Connections() == 1 })
}

// http serves the Inbound's HTTP handler and points the fake's deliveries
// at it; it returns the server's base URL.
func (e *env) http(t *testing.T) string {
	t.Helper()
	if err := e.in.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.in.HTTPHandler())
	t.Cleanup(srv.Close)
	e.fake.SetEventsURL(srv.URL + PathEvents)
	e.fake.SetSlashURL(srv.URL + PathCommands)
	e.fake.SetInteractivityURL(srv.URL + PathInteractivity)
	return srv.URL
}

func (e *env) waitFor(t *testing.T, what string, cond func(*fakeslack.Server) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := e.fake.WaitFor(ctx, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// key is the thread key of a thread in the test channel.
func (e *env) key(ts string) string { return ThreadKey(e.fake.Options().TeamID, testChan, ts) }

// mention is how people write the bot's mention.
func (e *env) mention() string { return "<@" + e.fake.Options().BotUserID + ">" }

// sentinel posts a thread reply and waits until it is handled: with one
// worker, every event delivered before it has been handled (or ignored)
// by then. It returns the events handled before it.
func (e *env) sentinel(t *testing.T, root string) []bot.Event {
	t.Helper()
	ts := e.fake.PostUserMessage(testChan, testUser, "sentinel", root)
	var before []bot.Event
	for {
		ev := e.h.next(t)
		if ev.MessageID == ts {
			return before
		}
		before = append(before, ev)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func TestSocketModeMentionStartsThread(t *testing.T) {
	e := newEnv(t, fakeslack.Options{})
	e.socket(t)
	ts := e.fake.PostUserMessage(testChan, testUser, e.mention()+" fix the build", "")
	ev := e.h.next(t)
	if ev.Kind != bot.KindMention || ev.NewThreadKey != e.key(ts) || ev.ThreadKey != "" || ev.Text != "fix the build" ||
		ev.Platform != "slack" || ev.Channel != testChan || ev.User != testUser || ev.UserName != "ada" ||
		ev.MessageID != ts || !strings.HasPrefix(ev.ID, "Ev") {
		t.Errorf("mention event %+v", ev)
	}
	// A mention in the thread: Slack sends a message event and an
	// app_mention for it, and they count once.
	reply := e.fake.PostUserMessage(testChan, testUser, e.mention()+" and the tests", ts)
	ev = e.h.next(t)
	if ev.Kind != bot.KindMention || ev.ThreadKey != e.key(ts) || ev.NewThreadKey != "" || ev.Text != "and the tests" || ev.MessageID != reply {
		t.Errorf("mention in the thread %+v", ev)
	}
	if others := e.sentinel(t, ts); len(others) != 0 {
		t.Errorf("the message+app_mention pairs made %d more handler calls: %+v", len(others), others)
	}
	if n := len(e.fake.Envelopes()); n != 5 {
		t.Errorf("%d envelopes, want 5 (2 pairs and the sentinel)", n)
	}
}

func TestSocketModeThreadReplyAndCommands(t *testing.T) {
	e := newEnv(t, fakeslack.Options{})
	e.socket(t)
	root := e.fake.PostUserMessage(testChan, testUser, "people talking", "")
	reply := e.fake.PostUserMessage(testChan, testUser, "and fix the docs", root)
	ev := e.h.next(t) // the top-level message without a mention was ignored
	if ev.Kind != bot.KindMessage || ev.ThreadKey != e.key(root) || ev.Text != "and fix the docs" || ev.MessageID != reply {
		t.Errorf("thread reply %+v", ev)
	}
	tests := []struct {
		name, text, want string
	}{
		{"!agent", "!agent switch docker", "switch docker"},
		{"mention with a verb", e.mention() + " stop", "stop"},
		{"mention with a verb and a colon", e.mention() + ": switch local /srv/app", "switch local /srv/app"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.fake.PostUserMessage(testChan, testUser, tt.text, root)
			ev := e.h.next(t)
			if ev.Kind != bot.KindCommand || ev.Text != tt.want || ev.ThreadKey != e.key(root) || ev.NewThreadKey != "" {
				t.Errorf("%q: %+v", tt.text, ev)
			}
		})
	}
	if others := e.sentinel(t, root); len(others) != 0 {
		t.Errorf("extra handler calls: %+v", others)
	}
}

func TestSocketModeIgnoresBotMessages(t *testing.T) {
	e := newEnv(t, fakeslack.Options{EchoBotMessages: true})
	e.socket(t)
	// The bot answers in the thread; Slack echoes that answer back as a
	// message event with bot_id, which must not reach the handler.
	e.h.setAnswer(func(ctx context.Context, ev bot.Event, r bot.Replier) error {
		if ev.Kind == bot.KindMention {
			return r.Reply(ctx, bot.Response{Text: "on it"})
		}
		return nil
	})
	root := e.fake.PostUserMessage(testChan, testUser, e.mention()+" hello", "")
	e.h.next(t)
	e.waitFor(t, "the answer", func(s *fakeslack.Server) bool { return len(s.Thread(testChan, root)) == 2 })
	// The bot user writing as a person (no bot_id) is ignored too.
	e.fake.PostUserMessage(testChan, e.fake.Options().BotUserID, "talking to myself", root)
	if others := e.sentinel(t, root); len(others) != 0 {
		t.Errorf("bot messages reached the handler: %+v", others)
	}
	if got := e.fake.Thread(testChan, root)[1]; got.Text != "on it" || got.BotID == "" {
		t.Errorf("answer %+v", got)
	}
}

func TestSocketModeAcksBeforeHandling(t *testing.T) {
	e := newEnv(t, fakeslack.Options{})
	e.socket(t)
	release := make(chan struct{})
	e.h.setAnswer(func(ctx context.Context, ev bot.Event, r bot.Replier) error {
		select {
		case <-release:
		case <-time.After(waitLimit):
		}
		return nil
	})
	e.fake.PostUserMessage(testChan, testUser, e.mention()+" take your time", "")
	e.h.next(t) // the handler is now blocked
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := e.fake.WaitFor(ctx, func(s *fakeslack.Server) bool {
		return len(s.Envelopes()) == 2 && len(s.Unacked()) == 0
	})
	close(release)
	if err != nil {
		var unacked []string
		for _, u := range e.fake.Unacked() {
			unacked = append(unacked, fmt.Sprintf("%s (retry %d)", u.EnvelopeID, u.RetryAttempt))
		}
		t.Fatalf("%d envelopes, unacked %v while the handler runs: %v", len(e.fake.Envelopes()), unacked, err)
	}
	for _, a := range e.fake.Acks() {
		if a.Late || a.Payload != nil {
			t.Errorf("ack %+v", a)
		}
	}
}

func TestSocketModeSlashNewOpensThread(t *testing.T) {
	e := newEnv(t, fakeslack.Options{})
	e.socket(t)
	e.h.setAnswer(func(ctx context.Context, ev bot.Event, r bot.Replier) error {
		if ev.Text == "new docker my title" {
			v := agentflow.SessionView{ThreadKey: ev.NewThreadKey, Title: "my title", Backend: "docker", Status: agentflow.StatusIdle}
			return r.Reply(ctx, bot.Response{Text: "Session *my title* on `docker`.", Session: &v, WebUI: "http://ui.example/wf"})
		}
		return nil
	})
	e.fake.SlashCommand(testChan, testUser, "new docker my title")
	ev := e.h.next(t)
	msgs := e.fake.Messages(testChan)
	if len(msgs) == 0 || msgs[0].Text != "Session started by <@"+testUser+">" || msgs[0].BotID == "" {
		t.Fatalf("no thread root posted: %+v", msgs)
	}
	root := msgs[0].TS
	if ev.Kind != bot.KindCommand || ev.Text != "new docker my title" || ev.ThreadKey != "" || ev.NewThreadKey != e.key(root) ||
		ev.ID == "" || ev.User != testUser || ev.UserName != "ada" {
		t.Errorf("slash event %+v", ev)
	}
	// The status message goes into the new thread, with its controls.
	e.waitFor(t, "the status message", func(s *fakeslack.Server) bool { return len(s.Thread(testChan, root)) == 2 })
	sm := e.fake.Thread(testChan, root)[1]
	for _, want := range []string{`"agent_switch"`, `"agent_fork"`, `"agent_stop"`, `"agent_done"`, `"http://ui.example/wf"`, `"initial_option"`} {
		if !strings.Contains(string(sm.Blocks), want) {
			t.Errorf("status blocks lack %s: %s", want, sm.Blocks)
		}
	}

	// Its controls come back as commands in that thread.
	tests := []struct{ action, value, want string }{
		{ActionSwitch, "local", "switch local"},
		{ActionFork, ev.NewThreadKey, "fork"},
		{ActionStop, ev.NewThreadKey, "stop"},
		{ActionDone, ev.NewThreadKey, "done"},
	}
	for _, tt := range tests {
		t.Run(tt.action, func(t *testing.T) {
			e.fake.BlockAction(testChan, testUser, sm.TS, tt.action, tt.value)
			a := e.h.next(t)
			if a.Kind != bot.KindCommand || a.Text != tt.want || a.ThreadKey != e.key(root) || a.User != testUser ||
				!strings.HasSuffix(a.ID, ":"+testUser) {
				t.Errorf("action %s: %+v", tt.action, a)
			}
		})
	}
	// Slash command answers that are private go through response_url.
	e.h.setAnswer(func(ctx context.Context, ev bot.Event, r bot.Replier) error {
		return r.Reply(ctx, bot.Response{Text: "new [backend] <title>", Private: true})
	})
	e.fake.SlashCommand(testChan, testUser, "help new")
	if ev := e.h.next(t); ev.NewThreadKey != "" || ev.Text != "help new" {
		t.Errorf("help event %+v", ev)
	}
	e.waitFor(t, "the private answer", func(s *fakeslack.Server) bool { return len(s.Responses()) == 1 })
	if r := e.fake.Responses()[0]; r.ResponseType != "ephemeral" || r.Text != "new [backend] &lt;title&gt;" || r.User != testUser {
		t.Errorf("response %+v", r)
	}
	// list needs the tenant, and Slack gives no thread: the key names the
	// channel. Nothing is posted for it.
	e.fake.SlashCommand(testChan, testUser, "list")
	if ev := e.h.next(t); ev.ThreadKey != "" || !strings.HasPrefix(ev.NewThreadKey, "slack:T0001:"+testChan+":") {
		t.Errorf("list event %+v", ev)
	} else if _, tenant := agentflow.Tenant(ev.NewThreadKey); tenant != "T0001" {
		t.Errorf("list names tenant %q", tenant)
	}
	if n := len(e.fake.Messages(testChan)); n != 2 {
		t.Errorf("%d messages in the channel, want the root and the status", n)
	}
}

func TestSocketModeShortcutAndPrivateReplies(t *testing.T) {
	e := newEnv(t, fakeslack.Options{})
	e.socket(t)
	e.h.setAnswer(func(ctx context.Context, ev bot.Event, r bot.Replier) error {
		return r.Reply(ctx, bot.Response{Text: "There is no session in this thread.", Private: true})
	})
	root := e.fake.PostUserMessage(testChan, testUser, "a thread", "")
	reply := e.fake.PostUserMessage(testChan, testUser, "a reply", root)
	if ev := e.h.next(t); ev.Kind != bot.KindMessage {
		t.Fatalf("reply %+v", ev)
	}
	e.fake.MessageShortcut(testChan, testUser, reply, root, ShortcutForkFromID)
	ev := e.h.next(t)
	if ev.Kind != bot.KindCommand || ev.Text != "fork" || ev.ThreadKey != e.key(root) || ev.ID == "" {
		t.Errorf("shortcut %+v", ev)
	}
	e.waitFor(t, "the ephemeral answers", func(s *fakeslack.Server) bool { return len(s.Ephemerals(testChan)) == 2 })
	for _, m := range e.fake.Ephemerals(testChan) {
		if m.Recipient != testUser || m.ThreadTS != root {
			t.Errorf("ephemeral %+v", m)
		}
	}
}

func TestSocketModeFileShare(t *testing.T) {
	e := newEnv(t, fakeslack.Options{})
	e.socket(t)
	root := e.fake.PostUserMessage(testChan, testUser, "a thread", "")
	e.fake.ShareFile(testChan, testUser, root, "trace.log", []byte("0123456789"))
	ev := e.h.next(t)
	if ev.Kind != bot.KindMessage || ev.ThreadKey != e.key(root) || ev.Text != "" || len(ev.Files) != 1 {
		t.Fatalf("file share %+v", ev)
	}
	// The session fetches the file with the worker's token: the event
	// carries Slack's URL and nothing secret.
	f := ev.Files[0]
	if f.Name != "trace.log" || f.Size != 10 || !strings.HasPrefix(f.URL, e.fake.URL()+"/") ||
		strings.Contains(f.URL, e.fake.Options().BotToken) {
		t.Errorf("file %+v", f)
	}
	// A file Slack describes only by ID is looked up with files.info.
	id := e.fake.Files(testChan)[0].ID
	got := e.in.files(context.Background(), []sharedFile{{ID: id, FileAccess: "check_file_info"}, {ID: "FGONE", Mode: "tombstone"}})
	if len(got) != 1 || got[0] != f {
		t.Errorf("files.info lookup: %+v, want [%+v]", got, f)
	}
}

func TestRepliesRenderThreadLinks(t *testing.T) {
	e := newEnv(t, fakeslack.Options{})
	e.socket(t)
	other := e.fake.PostUserMessage(testChan, testUser, "another thread", "")
	e.h.setAnswer(func(ctx context.Context, ev bot.Event, r bot.Replier) error {
		return r.Reply(ctx, bot.Response{Text: "Forked into " + agentflow.LinkThread(e.key(other)) + "; try <!channel>"})
	})
	root := e.fake.PostUserMessage(testChan, testUser, e.mention()+" fork it", "")
	e.h.next(t)
	e.waitFor(t, "the answer", func(s *fakeslack.Server) bool { return len(s.Thread(testChan, root)) == 2 })
	got := e.fake.Thread(testChan, root)[1].Text
	want := fmt.Sprintf("Forked into <https://fake.slack.com/archives/%s/p%s|thread>; try &lt;!channel&gt;",
		testChan, strings.Replace(other, ".", "", 1))
	if got != want {
		t.Errorf("answer %q\nwant   %q", got, want)
	}
}

// eventBody is an event_callback as Slack POSTs it.
func eventBody(eventID, text, ts string) []byte {
	b, _ := json.Marshal(map[string]any{
		"type": "event_callback", "team_id": "T0001", "api_app_id": "A0001", "event_id": eventID,
		"event_time": time.Now().Unix(),
		"event": map[string]any{"type": "app_mention", "user": testUser, "text": text, "ts": ts,
			"channel": testChan, "event_ts": ts},
	})
	return b
}

func TestHTTPEvents(t *testing.T) {
	e := newEnv(t, fakeslack.Options{})
	base := e.http(t)
	eventsURL := base + PathEvents

	t.Run("url_verification", func(t *testing.T) {
		if err := e.fake.VerifyURL(eventsURL); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("good signature", func(t *testing.T) {
		before := len(e.fake.Deliveries())
		ts := e.fake.PostUserMessage(testChan, testUser, e.mention()+" fix the build", "")
		ev := e.h.next(t)
		if ev.Kind != bot.KindMention || ev.NewThreadKey != e.key(ts) || ev.Text != "fix the build" || ev.UserName != "ada" {
			t.Errorf("event %+v", ev)
		}
		reply := e.fake.PostUserMessage(testChan, testUser, e.mention()+" and the tests", ts)
		if ev := e.h.next(t); ev.Kind != bot.KindMention || ev.ThreadKey != e.key(ts) || ev.MessageID != reply {
			t.Errorf("mention in the thread %+v", ev)
		}
		// HTTP deliveries race each other; once all are answered, all
		// are queued ahead of the sentinel.
		e.waitFor(t, "the deliveries", func(s *fakeslack.Server) bool { return len(s.Deliveries()) >= before+4 })
		if others := e.sentinel(t, ts); len(others) != 0 {
			t.Errorf("extra handler calls: %+v", others)
		}
	})

	t.Run("retry has the same event ID", func(t *testing.T) {
		body := eventBody("EvRETRY1", e.mention()+" once please", "1700000000.000100")
		for n := range 2 {
			resp, err := e.fake.SendSigned(eventsURL, body, "application/json", time.Now(), e.fake.Options().SigningSecret, n)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("attempt %d: HTTP %d", n, resp.StatusCode)
			}
			if ev := e.h.next(t); ev.ID != "EvRETRY1" || ev.Text != "once please" {
				t.Errorf("attempt %d: %+v", n, ev)
			}
		}
	})

	t.Run("answered while the handler runs", func(t *testing.T) {
		release := make(chan struct{})
		e.h.setAnswer(func(ctx context.Context, ev bot.Event, r bot.Replier) error {
			select {
			case <-release:
			case <-time.After(waitLimit):
			}
			return nil
		})
		defer e.h.setAnswer(nil)
		before := len(e.fake.Deliveries())
		e.fake.PostUserMessage(testChan, testUser, e.mention()+" slow one", "")
		e.h.next(t)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := e.fake.WaitFor(ctx, func(s *fakeslack.Server) bool { return len(s.Deliveries()) >= before+2 })
		close(release)
		if err != nil {
			t.Fatalf("no answer while the handler runs: %v", err)
		}
		for _, d := range e.fake.Deliveries()[before:] {
			if d.Status != http.StatusOK || d.RetryNum != 0 {
				t.Errorf("delivery %+v", d)
			}
		}
	})
}

func TestHTTPRefusesBadSignatures(t *testing.T) {
	e := newEnv(t, fakeslack.Options{})
	base := e.http(t)
	secret := e.fake.Options().SigningSecret
	body := eventBody("EvBAD", e.mention()+" hi", "1700000000.000200")
	slash := []byte("command=%2Fagent&text=new&channel_id=C1&user_id=U1&trigger_id=t1&response_url=http%3A%2F%2F127.0.0.1%3A1%2F")
	tests := []struct {
		name, path string
		body       []byte
		at         time.Time
		secret     string
	}{
		{"wrong secret", PathEvents, body, time.Now(), "not-the-secret"},
		{"stale", PathEvents, body, time.Now().Add(-6 * time.Minute), secret},
		{"from the future", PathEvents, body, time.Now().Add(6 * time.Minute), secret},
		{"slash command, wrong secret", PathCommands, slash, time.Now(), "not-the-secret"},
		{"slash command, stale", PathCommands, slash, time.Now().Add(-6 * time.Minute), secret},
		{"interaction, wrong secret", PathInteractivity, []byte("payload=%7B%7D"), time.Now(), "not-the-secret"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctype := "application/json"
			if tt.path != PathEvents {
				ctype = "application/x-www-form-urlencoded"
			}
			resp, err := e.fake.SendSigned(base+tt.path, tt.body, ctype, tt.at, tt.secret, 0)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("HTTP %d, want 401", resp.StatusCode)
			}
		})
	}
	t.Run("unsigned", func(t *testing.T) {
		resp, err := http.Post(base+PathEvents, "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("HTTP %d %s, want 401", resp.StatusCode, b)
		}
	})
	// Shutdown waits for all accepted work: none may have started.
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := e.in.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.h.count(); n != 0 {
		t.Errorf("the handler was called %d times", n)
	}
	if n := e.fake.Calls("chat.postMessage"); n != 0 {
		t.Errorf("%d messages posted for refused requests", n)
	}
	// After Shutdown, good requests are refused for another replica.
	resp, err := e.fake.SendSigned(base+PathEvents, body, "application/json", time.Now(), secret, 0)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("after Shutdown: HTTP %d, want 503", resp.StatusCode)
	}
}

func TestHTTPSlashAndInteractivity(t *testing.T) {
	e := newEnv(t, fakeslack.Options{})
	e.http(t)
	e.h.setAnswer(func(ctx context.Context, ev bot.Event, r bot.Replier) error {
		if ev.Text == "new" {
			v := agentflow.SessionView{ThreadKey: ev.NewThreadKey, Title: "new session", Backend: "local"}
			return r.Reply(ctx, bot.Response{Text: "Session *new session* on `local`.", Session: &v})
		}
		return nil
	})
	e.fake.SlashCommand(testChan, testUser, "new")
	ev := e.h.next(t)
	msgs := e.fake.Messages(testChan)
	if len(msgs) == 0 || ev.NewThreadKey != e.key(msgs[0].TS) || ev.Kind != bot.KindCommand {
		t.Fatalf("slash new: %+v, messages %+v", ev, msgs)
	}
	root := msgs[0].TS
	e.waitFor(t, "the status message", func(s *fakeslack.Server) bool { return len(s.Thread(testChan, root)) == 2 })
	sm := e.fake.Thread(testChan, root)[1]
	e.fake.BlockAction(testChan, testUser, sm.TS, ActionSwitch, "docker")
	if a := e.h.next(t); a.Text != "switch docker" || a.ThreadKey != e.key(root) {
		t.Errorf("action %+v", a)
	}
	e.fake.MessageShortcut(testChan, testUser, sm.TS, root, ShortcutForkFromID)
	if a := e.h.next(t); a.Text != "fork" || a.ThreadKey != e.key(root) {
		t.Errorf("shortcut %+v", a)
	}
	for _, d := range e.fake.Deliveries() {
		if d.Status != http.StatusOK {
			t.Errorf("delivery %+v", d)
		}
	}
}

func TestSlashNewWithoutAccessPostsNothing(t *testing.T) {
	e := newEnv(t, fakeslack.Options{})
	e.in.cfg.Access = &bot.Access{Users: []string{"USOMEONEELSE"}}
	e.socket(t)
	e.fake.SlashCommand(testChan, testUser, "new")
	if ev := e.h.next(t); ev.NewThreadKey != "" {
		t.Errorf("event %+v", ev)
	}
	if n := len(e.fake.Messages(testChan)); n != 0 {
		t.Errorf("%d messages posted for a refused user", n)
	}
}

func TestRunSocketModeRefusesBadConfig(t *testing.T) {
	fake := fakeslack.New(fakeslack.Options{})
	defer fake.Close()
	o := fake.Options()
	tests := []struct {
		name string
		cfg  InboundConfig
		want string
	}{
		{"no app token", InboundConfig{BotToken: o.BotToken}, "app-level token"},
		{"bot token as app token", InboundConfig{BotToken: o.BotToken, AppToken: o.BotToken}, "xapp-"},
		{"refused bot token", InboundConfig{BotToken: "xoxb-wrong", AppToken: o.AppToken}, "auth.test"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.APIURL = fake.APIURL()
			in := NewInbound(tt.cfg, newRecorder(), nil)
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			err := in.RunSocketMode(ctx)
			if err == nil || !strings.Contains(err.Error(), tt.want) || errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("RunSocketMode: %v, want an error about %q", err, tt.want)
			}
		})
	}
}

func TestShutdown(t *testing.T) {
	tests := []struct {
		name     string
		work     time.Duration // how long the handler works unless cancelled
		deadline time.Duration
		wantErr  error // of Shutdown
		wantCtx  error // what the handler's ctx says
	}{
		{"waits for handlers already acknowledged", 200 * time.Millisecond, waitLimit, nil, nil},
		{"cancels them at its deadline", waitLimit, 200 * time.Millisecond, context.DeadlineExceeded, context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, fakeslack.Options{})
			e.socket(t)
			finished := make(chan error, 1)
			e.h.setAnswer(func(ctx context.Context, ev bot.Event, r bot.Replier) error {
				select {
				case <-time.After(tt.work):
					finished <- nil
				case <-ctx.Done():
					finished <- ctx.Err()
				}
				return nil
			})
			e.fake.PostUserMessage(testChan, testUser, e.mention()+" work", "")
			e.h.next(t)
			ctx, cancel := context.WithTimeout(context.Background(), tt.deadline)
			defer cancel()
			if err := e.in.Shutdown(ctx); !errors.Is(err, tt.wantErr) {
				t.Errorf("Shutdown: %v, want %v", err, tt.wantErr)
			}
			select {
			case err := <-finished:
				if !errors.Is(err, tt.wantCtx) {
					t.Errorf("the handler ended with %v, want %v", err, tt.wantCtx)
				}
			default:
				t.Error("Shutdown returned before the handler did")
			}
		})
	}
}
