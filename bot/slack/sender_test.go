package slackbot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/slack-go/slack"
	"go.temporal.io/sdk/activity"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/internal/fakeslack"
)

const testChannel = "C0TEST"

// senderEnv is a fake workspace with a thread to post in.
type senderEnv struct {
	fake   *fakeslack.Server
	thread string // thread key of a root message the "user" posted
	rootTS string
}

func newSenderEnv(t *testing.T) *senderEnv {
	t.Helper()
	fake := fakeslack.New(fakeslack.Options{})
	t.Cleanup(fake.Close)
	// The thread's root, posted over the wire like any message.
	api := slack.New(fake.Options().BotToken, slack.OptionAPIURL(fake.APIURL()))
	_, ts, err := api.PostMessage(testChannel, slack.MsgOptionText("start a session", false))
	if err != nil {
		t.Fatalf("posting the thread root: %v", err)
	}
	return &senderEnv{fake: fake, thread: ThreadKey(fake.Options().TeamID, testChannel, ts), rootTS: ts}
}

func (e *senderEnv) sender(t *testing.T, mod ...func(*SenderConfig)) *Sender {
	t.Helper()
	cfg := SenderConfig{BotToken: e.fake.Options().BotToken, APIURL: e.fake.APIURL(), Logger: senderTestLogger(t)}
	for _, f := range mod {
		f(&cfg)
	}
	s, err := NewSender(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// replies returns what the app posted in the env's thread (root excluded).
func (e *senderEnv) replies() []fakeslack.Message {
	var out []fakeslack.Message
	for _, m := range e.fake.Thread(testChannel, e.rootTS) {
		if m.TS != e.rootTS {
			out = append(out, m)
		}
	}
	return out
}

func senderTestLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(senderLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type senderLogWriter struct{ t *testing.T }

func (w senderLogWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func metaKey(t *testing.T, m fakeslack.Message) string {
	t.Helper()
	if m.Metadata == nil || m.Metadata.EventType != MessageEventType {
		t.Fatalf("message %s has no %s metadata: %+v", m.TS, MessageEventType, m.Metadata)
	}
	var p struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal(m.Metadata.EventPayload, &p); err != nil {
		t.Fatal(err)
	}
	return p.Key
}

func progressMsg(thread string, final bool, states ...string) agentflow.Outbound {
	m := agentflow.Outbound{Thread: thread, Key: "agent/" + thread + "/3/progress", Kind: agentflow.OutboundProgress,
		Turn: 3, Title: "fix the build", Status: agentflow.TurnRunning, Final: final}
	for i, st := range states {
		m.Tools = append(m.Tools, agentflow.ToolStatus{ID: fmt.Sprint(i), Name: "shell",
			Summary: fmt.Sprintf("shell: step %d", i), State: st})
	}
	if final {
		m.Status = agentflow.TurnDone
	}
	return m
}

func TestSenderProgressIsOneEditedMessage(t *testing.T) {
	e := newSenderEnv(t)
	s := e.sender(t)
	ctx := context.Background()
	steps := []agentflow.Outbound{
		progressMsg(e.thread, false, "running"),
		progressMsg(e.thread, false, "done", "running"),
		progressMsg(e.thread, false, "done", "failed", "pending"),
		progressMsg(e.thread, true, "done", "failed", "cancelled"),
	}
	steps[3].Tools[1].Detail = "exit 1 in 2.0s"
	for _, m := range steps {
		if err := s.Deliver(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	got := e.replies()
	if len(got) != 1 {
		t.Fatalf("%d messages in the thread, want 1 progress message: %+v", len(got), got)
	}
	msg := got[0]
	if msg.Edits != len(steps)-1 {
		t.Errorf("progress message edited %d times, want %d", msg.Edits, len(steps)-1)
	}
	if k := metaKey(t, msg); k != steps[0].Key {
		t.Errorf("metadata key %q, want %q", k, steps[0].Key)
	}
	for _, want := range []string{"Turn 3 done", "✅ `shell: step 0`", "❌ `shell: step 1` — exit 1 in 2.0s", "⏹️ `shell: step 2`"} {
		if !strings.Contains(msg.Text, want) {
			t.Errorf("final progress lacks %q:\n%s", want, msg.Text)
		}
	}
	// A delivery that changes nothing makes no call.
	before := e.fake.Calls("chat.update")
	if err := s.Deliver(ctx, steps[3]); err != nil {
		t.Fatal(err)
	}
	if n := e.fake.Calls("chat.update"); n != before {
		t.Errorf("an unchanged progress state was sent again (%d chat.update calls, want %d)", n, before)
	}
}

// fencedAnswer makes an answer of about n characters: prose with code
// blocks, every other one longer than a part, so that chunking must cut
// inside fences.
func fencedAnswer(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "Step %d: run this.\n\n```go\n", i)
		for j := 0; j < 40+60*(i%2); j++ {
			fmt.Fprintf(&b, "fmt.Println(%d, %d) // line of the block\n", i, j)
		}
		b.WriteString("```\n\n")
	}
	return b.String()
}

func TestSenderAnswerChunks(t *testing.T) {
	e := newSenderEnv(t)
	const maxChunk = 3500
	// Where Slack refuses markdown blocks, answers go as mrkdwn text in parts.
	e.fake.RefuseBlockType("markdown", true)
	s := e.sender(t, func(c *SenderConfig) {
		c.MaxChunk = maxChunk
		c.UploadLines = 100000
		c.UploadOver = 100000
		c.SnippetOver = -1
	})
	text := fencedAnswer(10000)
	m := agentflow.Outbound{Thread: e.thread, Key: "agent/x/1/answer", Kind: agentflow.OutboundAnswer, Turn: 1,
		Text: agentflow.Text{Inline: text, Size: len(text)}}
	if err := s.Deliver(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	got := e.replies()
	if len(got) < 3 {
		t.Fatalf("%d messages for a 10,000-character answer, want at least 3", len(got))
	}
	var all strings.Builder
	reopened := 0
	for i, msg := range got {
		if strings.HasPrefix(msg.Text, "```\n") {
			reopened++
		}
		if n := utf8.RuneCountInString(html.UnescapeString(msg.Text)); n > maxChunk {
			t.Errorf("part %d has %d characters, want at most %d", i+1, n, maxChunk)
		}
		if n := strings.Count(msg.Text, "```"); n%2 != 0 {
			t.Errorf("part %d has %d fence markers (unbalanced):\n%s", i+1, n, msg.Text)
		}
		if k, want := metaKey(t, msg), fmt.Sprintf("%s/part-%d", m.Key, i+1); k != want {
			t.Errorf("part %d has key %q, want %q", i+1, k, want)
		}
		all.WriteString(msg.Text)
	}
	if reopened == 0 {
		t.Error("no part reopens a code block: the test never made a cut inside a fence")
	}
	// Every line of the answer arrives, in order.
	joined := all.String()
	pos := 0
	for _, line := range strings.Split(text, "\n") {
		if line == "" || line == "```" || line == "```go" {
			continue
		}
		i := strings.Index(joined[pos:], line)
		if i < 0 {
			t.Fatalf("line %q missing or out of order", line)
		}
		pos += i + len(line)
	}
}

func TestSenderLongAnswerIsAFile(t *testing.T) {
	e := newSenderEnv(t)
	s := e.sender(t)
	var b strings.Builder
	for i := range 300 {
		fmt.Fprintf(&b, "output line %d\n", i)
	}
	text := b.String()
	m := agentflow.Outbound{Thread: e.thread, Key: "agent/x/2/answer", Kind: agentflow.OutboundAnswer, Turn: 2,
		Text: agentflow.Text{Inline: text, Size: len(text)}}
	if err := s.Deliver(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	files := e.fake.Files(testChannel)
	if len(files) != 1 {
		t.Fatalf("%d files shared, want 1", len(files))
	}
	f := files[0]
	if f.ThreadTS != e.rootTS {
		t.Errorf("file shared in thread %q, want %q", f.ThreadTS, e.rootTS)
	}
	if string(f.Content) != strings.TrimRight(text, "\n") {
		t.Errorf("file content differs from the answer (%d bytes, want %d)", len(f.Content), len(text))
	}
	var preview *fakeslack.Message
	for _, msg := range e.replies() {
		if msg.Metadata != nil {
			msg := msg
			preview = &msg
		}
	}
	if preview == nil || !strings.Contains(preview.Text, "attached as a file") || !strings.Contains(preview.Text, "output line 0") {
		t.Fatalf("no preview message in the thread: %+v", e.replies())
	}
	if n, lines := utf8.RuneCountInString(preview.Text), strings.Count(preview.Text, "\n")+1; n > 1500 || lines > 20 {
		t.Errorf("preview is %d characters and %d lines long, want a short one:\n%s", n, lines, preview.Text)
	}
	// Delivered again by the same sender: nothing new.
	if err := s.Deliver(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if n := len(e.fake.Files(testChannel)); n != 1 {
		t.Errorf("%d files after a repeated delivery, want 1", n)
	}
}

// TestSenderRetryEdits runs Deliver as an activity that posts and then
// "loses its worker" on the first attempt; the retry runs on a new Sender
// (another process: nothing in memory) and must edit, not post again.
func TestSenderRetryEdits(t *testing.T) {
	answer := fencedAnswer(6000)
	long := strings.Repeat("a long line of output\n", 200)
	cases := []struct {
		name string
		msg  func(thread string) agentflow.Outbound
	}{
		{"progress", func(th string) agentflow.Outbound { return progressMsg(th, false, "running") }},
		{"answer in parts", func(th string) agentflow.Outbound {
			return agentflow.Outbound{Thread: th, Key: "agent/r/1/answer", Kind: agentflow.OutboundAnswer, Turn: 1, Text: agentflow.Text{Inline: answer}}
		}},
		{"answer as a file", func(th string) agentflow.Outbound {
			return agentflow.Outbound{Thread: th, Key: "agent/r/2/answer", Kind: agentflow.OutboundAnswer, Turn: 2, Text: agentflow.Text{Inline: long}}
		}},
		{"notice", func(th string) agentflow.Outbound {
			return agentflow.Outbound{Thread: th, Key: "agent/r/switched", Kind: agentflow.OutboundNotice, Text: agentflow.Text{Inline: "Switched to docker."}}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newSenderEnv(t)
			m := tc.msg(e.thread)
			first, second := e.sender(t), e.sender(t)
			var mu sync.Mutex
			var attempts []int32
			var repliesBeforeRetry int
			deliver := func(ctx context.Context, m agentflow.Outbound) error {
				attempt := activity.GetInfo(ctx).Attempt
				mu.Lock()
				attempts = append(attempts, attempt)
				mu.Unlock()
				if attempt == 1 {
					if err := first.Deliver(ctx, m); err != nil {
						return err
					}
					repliesBeforeRetry = e.fake.Calls("conversations.replies")
					return errors.New("worker lost before the activity completed")
				}
				return second.Deliver(ctx, m)
			}
			wf := func(ctx workflow.Context, m agentflow.Outbound) error {
				ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
					StartToCloseTimeout: time.Minute,
					RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Millisecond, MaximumAttempts: 3},
				})
				return workflow.ExecuteActivity(ctx, "Deliver", m).Get(ctx, nil)
			}
			var suite testsuite.WorkflowTestSuite
			suite.SetLogger(tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(senderLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))))
			env := suite.NewTestWorkflowEnvironment()
			env.RegisterWorkflow(wf)
			env.RegisterActivityWithOptions(deliver, activity.RegisterOptions{Name: "Deliver"})
			before := e.replies()
			env.ExecuteWorkflow(wf, m)
			if err := env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			if len(attempts) != 2 {
				t.Fatalf("attempts %v, want [1 2]", attempts)
			}
			if repliesBeforeRetry != 0 && m.Kind != agentflow.OutboundProgress {
				t.Errorf("a first attempt searched the thread (%d conversations.replies calls); only retries should", repliesBeforeRetry)
			}
			got := e.replies()
			keys := map[string]int{}
			for _, msg := range got {
				if msg.Metadata != nil {
					keys[metaKey(t, msg)]++
				}
			}
			for k, n := range keys {
				if n != 1 {
					t.Errorf("key %s posted %d times", k, n)
				}
			}
			if len(keys) == 0 || len(got)-len(before) != len(keys)+len(e.fake.Files(testChannel)) {
				t.Errorf("thread has %d new messages for %d keys and %d files", len(got)-len(before), len(keys), len(e.fake.Files(testChannel)))
			}
			if n := len(e.fake.Files(testChannel)); n > 1 {
				t.Errorf("%d files uploaded, want at most 1", n)
			}
			if e.fake.Calls("conversations.replies") == repliesBeforeRetry {
				t.Error("the retry did not search the thread")
			}
			if e.fake.Calls("chat.update") == 0 && m.Kind != agentflow.OutboundAnswer {
				t.Error("the retry did not edit the message it had posted")
			}
		})
	}
}

// TestSenderOutsideActivity: a call outside any activity may be a repeat
// (nothing says it is not), so a new Sender searches the thread first.
func TestSenderOutsideActivity(t *testing.T) {
	e := newSenderEnv(t)
	m := agentflow.Outbound{Thread: e.thread, Key: "agent/o/1/answer", Kind: agentflow.OutboundAnswer, Text: agentflow.Text{Inline: "All done."}}
	if err := e.sender(t).Deliver(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	m.Text.Inline = "All done, really."
	if err := e.sender(t).Deliver(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	got := e.replies()
	if len(got) != 1 || got[0].Edits != 1 || got[0].Text != "All done, really." {
		t.Fatalf("want one message edited once to the new text, got %+v", got)
	}
}

func TestSenderCoalescesProgress(t *testing.T) {
	e := newSenderEnv(t)
	gate := &gateTransport{next: http.DefaultTransport, method: "chat.update", hold: make(chan struct{}), held: make(chan struct{}, 1)}
	s := e.sender(t, func(c *SenderConfig) { c.HTTPClient = &http.Client{Transport: gate} })
	ctx := context.Background()
	key := progressMsg(e.thread, false).Key
	if err := s.Deliver(ctx, progressMsg(e.thread, false, "running")); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 3)
	go func() { errs <- s.Deliver(ctx, progressMsg(e.thread, false, "done", "running")) }()
	<-gate.held // the first edit is in flight
	waitRefs(t, s, key, 1)
	go func() { errs <- s.Deliver(ctx, progressMsg(e.thread, false, "done", "done", "running")) }()
	waitRefs(t, s, key, 2)
	go func() { errs <- s.Deliver(ctx, progressMsg(e.thread, true, "done", "done", "done")) }()
	waitRefs(t, s, key, 3)
	close(gate.hold)
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := e.fake.Calls("chat.update"); n != 2 {
		t.Errorf("%d chat.update calls, want 2 (the in-flight edit and the newest; the one between is dropped)", n)
	}
	got := e.replies()
	if len(got) != 1 || !strings.Contains(got[0].Text, "Turn 3 done") {
		t.Fatalf("want one progress message in its final state, got %+v", got)
	}
}

func waitRefs(t *testing.T, s *Sender, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		refs := 0
		if lk := s.locks[key]; lk != nil {
			refs = lk.refs
		}
		s.mu.Unlock()
		if refs == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d deliveries of %s waiting, want %d", refs, key, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// gateTransport holds the first request to one Web API method until hold
// is closed.
type gateTransport struct {
	next   http.RoundTripper
	method string
	once   sync.Once
	hold   chan struct{}
	held   chan struct{}
}

func (g *gateTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/"+g.method) {
		first := false
		g.once.Do(func() { first = true })
		if first {
			g.held <- struct{}{}
			<-g.hold
		}
	}
	return g.next.RoundTrip(r)
}

func TestSenderErrors(t *testing.T) {
	e := newSenderEnv(t)
	ctx := context.Background()
	notice := agentflow.Outbound{Thread: e.thread, Key: "agent/e/notice", Kind: agentflow.OutboundNotice, Text: agentflow.Text{Inline: "hello"}}

	t.Run("rate limited", func(t *testing.T) {
		e.fake.RateLimit("chat.postMessage", 1, 7*time.Second)
		err := e.sender(t).Deliver(ctx, notice)
		var appErr *temporal.ApplicationError
		if !errors.As(err, &appErr) {
			t.Fatalf("error %v (%T), want an ApplicationError", err, err)
		}
		if appErr.NonRetryable() || appErr.Type() != ErrTypeRateLimited {
			t.Errorf("error %v: non-retryable %v, type %q; want retryable %q", err, appErr.NonRetryable(), appErr.Type(), ErrTypeRateLimited)
		}
		if d := appErr.NextRetryDelay(); d != 7*time.Second {
			t.Errorf("NextRetryDelay %s, want 7s (Retry-After)", d)
		}
		if err := e.sender(t).Deliver(ctx, notice); err != nil {
			t.Fatalf("after the limit: %v", err)
		}
	})

	cases := []struct {
		name   string
		mod    func(*SenderConfig)
		thread string
		want   string
	}{
		{"invalid token", func(c *SenderConfig) { c.BotToken = "xoxb-not-the-right-one" }, e.thread, "invalid_auth"},
		{"app token", func(c *SenderConfig) { c.BotToken = e.fake.Options().AppToken }, e.thread, "not_allowed_token_type"},
		{"thread gone", nil, ThreadKey("T0001", testChannel, "1.000001"), "invalid_thread_ts"},
		{"not a slack thread", nil, "discord:1:2", "not a slack thread key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var mods []func(*SenderConfig)
			if tc.mod != nil {
				mods = append(mods, tc.mod)
			}
			s := e.sender(t, mods...)
			m := notice
			m.Thread = tc.thread
			err := s.Deliver(ctx, m)
			var appErr *temporal.ApplicationError
			if !errors.As(err, &appErr) || !appErr.NonRetryable() {
				t.Fatalf("error %v, want a non-retryable ApplicationError", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "xoxb-") || strings.Contains(err.Error(), "xapp-") {
				t.Errorf("error %q shows the token", err)
			}
		})
	}
}

// TestSenderFail checks the translation of Slack errors that the fake
// workspace has no way to produce.
func TestSenderFail(t *testing.T) {
	s := &Sender{token: "xoxb-secret"}
	cases := []struct {
		name      string
		err       error
		permanent bool
		want      string
	}{
		{"channel_not_found", slack.SlackErrorResponse{Err: "channel_not_found"}, true, "the bot cannot see the channel"},
		{"not_in_channel", slack.SlackErrorResponse{Err: "not_in_channel"}, true, "invite it"},
		{"is_archived", slack.SlackErrorResponse{Err: "is_archived"}, true, "archived"},
		{"missing_scope", slack.SlackErrorResponse{Err: "missing_scope", Needed: "chat:write"}, true, "needed: chat:write"},
		{"internal_error", slack.SlackErrorResponse{Err: "internal_error"}, false, "internal_error"},
		{"status 503", slack.StatusCodeError{Code: 503, Status: "503 Service Unavailable"}, false, "503"},
		{"status 404", slack.StatusCodeError{Code: 404, Status: "404 Not Found"}, true, "404"},
		{"token in a transport error", errors.New(`Post "https://x/?token=xoxb-secret": dial tcp: refused`), false, "[redacted]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := s.fail("chat.postMessage", tc.err)
			var appErr *temporal.ApplicationError
			if got := errors.As(err, &appErr) && appErr.NonRetryable(); got != tc.permanent {
				t.Errorf("error %v: permanent %v, want %v", err, got, tc.permanent)
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "xoxb-secret") {
				t.Errorf("error %q: want it to say %q and not show the token", err, tc.want)
			}
		})
	}
}

func TestCreateThreadIdempotent(t *testing.T) {
	e := newSenderEnv(t)
	ctx := context.Background()
	// Two Senders: the second knows nothing of what the first did.
	k1, err := e.sender(t).CreateThread(ctx, e.thread, "fix the *build*", "req-1")
	if err != nil {
		t.Fatal(err)
	}
	k2, err := e.sender(t).CreateThread(ctx, e.thread, "fix the *build*", "req-1")
	if err != nil {
		t.Fatal(err)
	}
	if k1 != k2 {
		t.Errorf("same request gave threads %s and %s", k1, k2)
	}
	k3, err := e.sender(t).CreateThread(ctx, e.thread, "another", "req-2")
	if err != nil {
		t.Fatal(err)
	}
	if k3 == k1 {
		t.Errorf("different requests gave the same thread %s", k1)
	}
	var roots []fakeslack.Message
	for _, m := range e.fake.Messages(testChannel) {
		if m.Metadata != nil && m.Metadata.EventType == ThreadEventType {
			roots = append(roots, m)
		}
	}
	if len(roots) != 2 {
		t.Fatalf("%d fork roots, want 2: %+v", len(roots), roots)
	}
	team, channel, ts, err := ParseThreadKey(k1)
	if err != nil || team != e.fake.Options().TeamID || channel != testChannel || ts != roots[0].TS || roots[0].ThreadTS != "" {
		t.Errorf("thread %s (%v) does not name the fork's root %+v", k1, err, roots[0])
	}
	if roots[0].Text != "🍴 Fork: *fix the build*" {
		t.Errorf("fork root text %q", roots[0].Text)
	}
}

func TestSenderRendersThreadLinks(t *testing.T) {
	e := newSenderEnv(t)
	s := e.sender(t)
	ctx := context.Background()
	fork, err := s.CreateThread(ctx, e.thread, "fork", "req-link")
	if err != nil {
		t.Fatal(err)
	}
	text := fmt.Sprintf("Forked into %s (%q) on docker; a < b && c > d. Gone: %s. Elsewhere: %s.",
		agentflow.LinkThread(fork), "fork", agentflow.LinkThread(ThreadKey("T0001", "CGONE", "9.9")), agentflow.LinkThread("term:x"))
	m := agentflow.Outbound{Thread: e.thread, Key: "agent/l/fork", Kind: agentflow.OutboundNotice, Text: agentflow.Text{Inline: text}}
	if err := s.Deliver(ctx, m); err != nil {
		t.Fatal(err)
	}
	got := e.replies()
	if len(got) != 1 {
		t.Fatalf("%d replies, want 1", len(got))
	}
	_, _, forkTS, _ := ParseThreadKey(fork)
	permalink, err := slack.New(e.fake.Options().BotToken, slack.OptionAPIURL(e.fake.APIURL())).
		GetPermalink(&slack.PermalinkParameters{Channel: testChannel, Ts: forkTS})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Forked into <" + permalink + "|thread>",
		"a &lt; b &amp;&amp; c &gt; d",
		"Gone: <#CGONE> thread.",
		"Elsewhere: `term:x`.",
	} {
		if !strings.Contains(got[0].Text, want) {
			t.Errorf("notice lacks %q:\n%s", want, got[0].Text)
		}
	}
	if strings.Contains(got[0].Text, "<thread:") {
		t.Errorf("a token was left as is:\n%s", got[0].Text)
	}
}

func TestRenderProgress(t *testing.T) {
	var tools []agentflow.ToolStatus
	for i := range 30 {
		tools = append(tools, agentflow.ToolStatus{ID: fmt.Sprint(i), Summary: fmt.Sprintf("shell: `cmd %d` <x>", i), State: "done",
			Detail: "exit 0\nin 1s"})
	}
	cases := []struct {
		name string
		m    agentflow.Outbound
		want []string
		not  []string
	}{
		{"running", agentflow.Outbound{Turn: 2, Status: agentflow.TurnRunning, Tools: []agentflow.ToolStatus{
			{Summary: "shell: ls", State: "pending"}, {Name: "read_file", State: "running"}}},
			[]string{"🔄 Turn 2: working… · 2 tool calls", "⏳ `shell: ls`", "🔄 `read_file`"}, nil},
		{"stopped", agentflow.Outbound{Turn: 2, Status: agentflow.TurnStopped, Final: true}, []string{"⏹️ Turn 2 stopped"}, []string{"tool call"}},
		{"failed", agentflow.Outbound{Turn: 4, Status: agentflow.TurnFailed, Final: true}, []string{"❌ Turn 4 failed"}, nil},
		{"step limit", agentflow.Outbound{Turn: 1, Status: agentflow.TurnStepCap, Final: true}, []string{"⚠️ Turn 1 reached the step limit"}, nil},
		{"many tools", agentflow.Outbound{Turn: 9, Status: agentflow.TurnDone, Final: true, Tools: tools},
			[]string{"✅ Turn 9 done · 30 tool calls", "_… 10 earlier tool calls_", "✅ `shell: 'cmd 29' &lt;x&gt;` — exit 0 in 1s"},
			[]string{"cmd 9'"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := renderProgress(tc.m, 3500)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("lacks %q:\n%s", w, got)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(got, w) {
					t.Errorf("has %q:\n%s", w, got)
				}
			}
		})
	}
	if got := renderProgress(agentflow.Outbound{Tools: tools}, 300); utf8.RuneCountInString(got) > 300 {
		t.Errorf("progress of %d characters, want at most 300", utf8.RuneCountInString(got))
	}
}

func TestNewSenderConfig(t *testing.T) {
	cases := []struct {
		name string
		cfg  SenderConfig
		want string // "" means valid
	}{
		{"defaults", SenderConfig{BotToken: "xoxb-1"}, ""},
		{"no token", SenderConfig{}, "BotToken is empty"},
		{"bad url", SenderConfig{BotToken: "xoxb-1", APIURL: "ftp://x"}, "APIURL"},
		{"tiny chunk", SenderConfig{BotToken: "xoxb-1", MaxChunk: 10}, "MaxChunk"},
		{"negative upload", SenderConfig{BotToken: "xoxb-1", UploadOver: -1}, "UploadOver"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewSender(tc.cfg)
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want == "" && (s.maxChunk != DefaultMaxChunk || s.uploadOver != DefaultUploadOver || s.uploadLines != DefaultUploadLines):
				t.Errorf("defaults not applied: %d %d %d", s.maxChunk, s.uploadOver, s.uploadLines)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one naming %s", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "xoxb-1") {
				t.Errorf("error shows the token: %v", err)
			}
		})
	}
}
