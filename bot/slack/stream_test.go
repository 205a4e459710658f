package slackbot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"go.temporal.io/sdk/activity"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/internal/fakeslack"
)

// testClock is a clock the test moves: a stream's pace (streamEvery,
// editEvery, Retry-After) follows it instead of the wall clock.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTestClock() *testClock {
	return &testClock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// streamSender is a Sender of e whose streams run on clk.
func (e *senderEnv) streamSender(t *testing.T, clk *testClock, mod ...func(*SenderConfig)) *Sender {
	t.Helper()
	s := e.sender(t, mod...)
	s.now = clk.now
	return s
}

func answerKey(thread string, turn int) string {
	return fmt.Sprintf("agent/%s/%d/answer", thread, turn)
}

func openStream(t *testing.T, s *Sender, thread, key, user string) agentflow.AnswerStream {
	t.Helper()
	st, err := s.StreamAnswer(context.Background(), agentflow.StreamTarget{Thread: thread, Key: key, User: user})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// keepAndDeliver ends st keeping its message, then has s deliver the
// answer final of key, as the model step and the workflow do.
func keepAndDeliver(t *testing.T, s *Sender, st agentflow.AnswerStream, thread, key, final string) {
	t.Helper()
	ctx := context.Background()
	if err := st.Finish(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := s.Deliver(ctx, answerMsg(thread, key, final)); err != nil {
		t.Fatal(err)
	}
}

func mustAppend(t *testing.T, st agentflow.AnswerStream, text string) {
	t.Helper()
	if err := st.Append(context.Background(), text); err != nil {
		t.Fatal(err)
	}
}

// only returns the one reply in e's thread.
func (e *senderEnv) only(t *testing.T) fakeslack.Message {
	t.Helper()
	got := e.replies()
	if len(got) != 1 {
		t.Fatalf("%d replies in the thread, want 1: %+v", len(got), got)
	}
	return got[0]
}

// TestStreamAnswer: the answer shows as one streamed reply that grows (at
// most one call per streamEvery, text in between buffered, a thread link
// shown only once whole) and that the answer's Deliver edits into the
// final rendering, posting nothing.
func TestStreamAnswer(t *testing.T) {
	e := newSenderEnv(t)
	clk := newTestClock()
	s := e.streamSender(t, clk)
	ctx := context.Background()
	key := answerKey(e.thread, 1)
	st := openStream(t, s, e.thread, key, "U1")
	if n := len(e.replies()); n != 0 {
		t.Fatalf("StreamAnswer posted %d messages, want none before the first Append", n)
	}

	mustAppend(t, st, "The build ")
	m := e.only(t)
	if !m.Streaming || m.Text != "The build " {
		t.Fatalf("after the first Append: %+v, want a streaming reply with the text", m)
	}
	mustAppend(t, st, "fails, as in <thr")
	if n := e.fake.Calls("chat.appendStream"); n != 0 {
		t.Errorf("%d appendStream calls within streamEvery of the start, want 0", n)
	}
	clk.add(streamEvery)
	mustAppend(t, st, "ead:")
	if got := e.only(t).Text; got != "The build fails, as in " {
		t.Errorf("streamed %q: the half-made thread token should wait", got)
	}
	clk.add(streamEvery)
	mustAppend(t, st, e.thread+"> — `go vet` says so.")
	m = e.only(t)
	permalink, err := s.links.Permalink(ctx, e.thread)
	if err != nil {
		t.Fatal(err)
	}
	if want := "The build fails, as in [thread](" + permalink + ") — `go vet` says so."; m.Text != want {
		t.Errorf("streamed %q, want %q", m.Text, want)
	}
	if err := st.Finish(ctx, true); err != nil {
		t.Fatal(err)
	}
	m = e.only(t)
	if m.Streaming || metaKey(t, m) != partKey(key, 1) {
		t.Fatalf("a kept stream: %+v, want it stopped with the first part's key", m)
	}
	if err := st.Append(ctx, "late"); !errors.Is(err, errStreamFinished) {
		t.Errorf("Append after Finish: %v, want errStreamFinished", err)
	}

	posts := e.fake.Calls("chat.postMessage")
	final := "The build fails, as in <thread:" + e.thread + "> — `go vet` says so.\n\n**Fix**: run `gofmt -w`."
	if err := s.Deliver(ctx, answerMsg(e.thread, key, final)); err != nil {
		t.Fatal(err)
	}
	got := e.only(t)
	md, ok := markdownOf(t, got)
	if got.TS != m.TS || got.Edits != 1 || !ok || md != strings.ReplaceAll(final, "<thread:"+e.thread+">", "[thread]("+permalink+")") {
		t.Errorf("after Deliver: %+v (markdown %q, %v); want the streamed message edited once into the answer", got, md, ok)
	}
	if n := e.fake.Calls("chat.postMessage") - posts; n != 0 {
		t.Errorf("Deliver posted %d messages, want 0", n)
	}
	if n := e.fake.Calls("chat.startStream"); n != 1 {
		t.Errorf("%d startStream calls, want 1", n)
	}
}

// TestStreamAnswerNotKept: a step whose text was not the answer (the model
// went on to call tools) leaves nothing in the thread.
func TestStreamAnswerNotKept(t *testing.T) {
	e := newSenderEnv(t)
	clk := newTestClock()
	s := e.streamSender(t, clk)
	ctx := context.Background()
	key := answerKey(e.thread, 1)

	step := openStream(t, s, e.thread, key, "U1")
	mustAppend(t, step, "Let me look at the logs.")
	if err := step.Finish(ctx, false); err != nil {
		t.Fatal(err)
	}
	if got := e.replies(); len(got) != 0 {
		t.Fatalf("a stream not kept left %+v", got)
	}
	clk.add(time.Minute)
	answer := openStream(t, s, e.thread, key, "U1")
	mustAppend(t, answer, "Fixed.")
	keepAndDeliver(t, s, answer, e.thread, key, "Fixed.")
	if md, _ := markdownOf(t, e.only(t)); md != "Fixed." {
		t.Errorf("answer %q", md)
	}
}

// TestStreamAnswerEditLoop: where Slack will not stream (the methods
// refused for the app, or no recipient outside a DM), the answer is a
// message posted as its first part and edited at most once a second; a
// refusal is remembered for the team.
func TestStreamAnswerEditLoop(t *testing.T) {
	cases := []struct {
		name, refuse, user string
	}{
		{"missing scope", "missing_scope", "U1"},
		{"unknown method", "unknown_method", "U1"},
		{"no recipient", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newSenderEnv(t)
			if tc.refuse != "" {
				for _, method := range []string{"chat.startStream", "chat.appendStream", "chat.stopStream"} {
					e.fake.Refuse(method, tc.refuse)
				}
			}
			clk := newTestClock()
			s := e.streamSender(t, clk)
			ctx := context.Background()
			key := answerKey(e.thread, 1)
			st := openStream(t, s, e.thread, key, tc.user)

			mustAppend(t, st, "Step one")
			m := e.only(t)
			if md, _ := markdownOf(t, m); md != "Step one" || m.Streaming || metaKey(t, m) != partKey(key, 1) {
				t.Fatalf("first Append: %+v, want a message posted as the first part", m)
			}
			mustAppend(t, st, " and two")
			clk.add(editEvery / 2)
			mustAppend(t, st, " and three")
			if n := e.fake.Calls("chat.update"); n != 0 {
				t.Errorf("%d edits within a second of the post, want 0", n)
			}
			clk.add(editEvery / 2)
			mustAppend(t, st, ".")
			m = e.only(t)
			if md, _ := markdownOf(t, m); md != "Step one and two and three." || m.Edits != 1 {
				t.Errorf("after a second: %+v, want the message edited once with all the text", m)
			}
			if err := st.Finish(ctx, true); err != nil {
				t.Fatal(err)
			}
			posts := e.fake.Calls("chat.postMessage")
			final := "Step one and two and three.\n\nAll done."
			if err := s.Deliver(ctx, answerMsg(e.thread, key, final)); err != nil {
				t.Fatal(err)
			}
			got := e.only(t)
			if md, _ := markdownOf(t, got); md != final || got.TS != m.TS || e.fake.Calls("chat.postMessage") != posts {
				t.Errorf("after Deliver: %+v, want the same message edited into the answer", got)
			}
			starts := e.fake.Calls("chat.startStream")

			// The next answer of the team: not streamed, and removed when
			// not kept.
			clk.add(time.Minute)
			next := openStream(t, s, e.thread, answerKey(e.thread, 2), tc.user)
			mustAppend(t, next, "Looking.")
			if n := len(e.replies()); n != 2 {
				t.Fatalf("%d replies, want the answer and the next one shown", n)
			}
			if err := next.Finish(ctx, false); err != nil {
				t.Fatal(err)
			}
			if e.only(t).TS != m.TS {
				t.Error("the answer not kept was not the one removed")
			}
			if n := e.fake.Calls("chat.startStream"); n != starts {
				t.Errorf("startStream called again (%d, was %d): the refusal should be remembered", n, starts)
			}
		})
	}
}

// TestStreamAnswerLong: an answer longer than a message streams until the
// first part is full; Deliver turns it into that part and posts the rest,
// no text lost or repeated.
func TestStreamAnswerLong(t *testing.T) {
	e := newSenderEnv(t)
	clk := newTestClock()
	s := e.streamSender(t, clk, func(c *SenderConfig) { c.UploadOver, c.UploadLines = 100000, 10000 })
	key := answerKey(e.thread, 1)
	var b strings.Builder
	const paragraphs = 90
	for i := range paragraphs {
		fmt.Fprintf(&b, "Paragraph %03d: %s.\n\n", i, strings.Repeat("the quick brown fox jumps ", 8))
	}
	answer := strings.TrimSpace(b.String())
	if utf8.RuneCountInString(answer) < 2*maxStreamRunes-4000 {
		t.Fatalf("the answer is %d characters; make it longer than a part", len(answer))
	}
	st := openStream(t, s, e.thread, key, "U1")
	for rest := answer; rest != ""; {
		n := min(len(rest), 97)
		clk.add(streamEvery)
		mustAppend(t, st, rest[:n])
		rest = rest[n:]
	}
	streamed := e.only(t)
	if !strings.HasPrefix(answer, streamed.Text) || utf8.RuneCountInString(streamed.Text) > maxStreamRunes || utf8.RuneCountInString(streamed.Text) < maxStreamRunes-200 {
		t.Fatalf("streamed %d characters, want the answer's beginning filling the message (at most %d)", utf8.RuneCountInString(streamed.Text), maxStreamRunes)
	}
	keepAndDeliver(t, s, st, e.thread, key, answer)
	got := e.replies()
	if len(got) != 2 || got[0].TS != streamed.TS {
		t.Fatalf("%d replies, want the streamed first part and one more", len(got))
	}
	var all strings.Builder
	for i, m := range got {
		md, ok := markdownOf(t, m)
		if !ok || metaKey(t, m) != partKey(key, i+1) {
			t.Fatalf("reply %d: %+v, want part %d as markdown", i, m, i+1)
		}
		all.WriteString(md + "\n\n")
	}
	for i := range paragraphs {
		if n := strings.Count(all.String(), fmt.Sprintf("Paragraph %03d:", i)); n != 1 {
			t.Errorf("paragraph %d shown %d times, want once", i, n)
		}
	}
}

// TestStreamAnswerOtherProcess: the Deliver of a streamed answer by a
// Sender with no memory of the stream (another worker, a restart) finds
// the streamed message by its metadata and edits it.
func TestStreamAnswerOtherProcess(t *testing.T) {
	inActivity := func(t *testing.T, s *Sender, m agentflow.Outbound) error {
		var suite testsuite.WorkflowTestSuite
		suite.SetLogger(tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(senderLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))))
		env := suite.NewTestActivityEnvironment()
		env.RegisterActivityWithOptions(s.Deliver, activity.RegisterOptions{Name: "Deliver"})
		_, err := env.ExecuteActivity("Deliver", m)
		return err
	}
	cases := []struct {
		name       string
		noMarkdown bool
		deliver    func(t *testing.T, e *senderEnv, m agentflow.Outbound) error
	}{
		{"outside an activity", false, func(t *testing.T, e *senderEnv, m agentflow.Outbound) error {
			return e.sender(t).Deliver(context.Background(), m)
		}},
		{"first attempt on a worker that streams answers", false, func(t *testing.T, e *senderEnv, m agentflow.Outbound) error {
			other := e.sender(t)
			// Its own streams (none shown here) make it look answers up.
			if err := openStream(t, other, e.thread, "agent/elsewhere/1/answer", "U1").Finish(context.Background(), false); err != nil {
				t.Fatal(err)
			}
			return inActivity(t, other, m)
		}},
		{"first attempt on a fresh worker, told the answer was streamed", false, func(t *testing.T, e *senderEnv, m agentflow.Outbound) error {
			m.Streamed = true // as the workflow says, from ModelStepResult.Streamed
			return inActivity(t, e.sender(t), m)
		}},
		{"markdown refused", true, func(t *testing.T, e *senderEnv, m agentflow.Outbound) error {
			return e.sender(t).Deliver(context.Background(), m)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newSenderEnv(t)
			clk := newTestClock()
			ctx := context.Background()
			key := answerKey(e.thread, 1)
			st := openStream(t, e.streamSender(t, clk), e.thread, key, "U1")
			mustAppend(t, st, "Half of the")
			clk.add(streamEvery)
			mustAppend(t, st, " answer")
			if err := st.Finish(ctx, true); err != nil {
				t.Fatal(err)
			}
			streamed := e.only(t)
			if tc.noMarkdown {
				e.fake.RefuseBlockType("markdown", true)
			}
			final := "Half of the answer, and the **rest**."
			if err := tc.deliver(t, e, answerMsg(e.thread, key, final)); err != nil {
				t.Fatal(err)
			}
			got := e.only(t)
			if got.TS != streamed.TS || got.Edits != 1 {
				t.Fatalf("%+v, want the streamed message edited once", got)
			}
			md, ok := markdownOf(t, got)
			switch {
			case !tc.noMarkdown && (!ok || md != final):
				t.Errorf("markdown %q, want %q", md, final)
			case tc.noMarkdown && (strings.Contains(string(got.Blocks), "markdown") || got.Text != "Half of the answer, and the *rest*."):
				t.Errorf("text %q blocks %s: want the mrkdwn text and the streamed blocks gone", got.Text, got.Blocks)
			}
		})
	}
}

// TestStreamAnswerRateLimited: a 429 on appendStream pauses the stream for
// Slack's Retry-After, buffering the text, then it goes on.
func TestStreamAnswerRateLimited(t *testing.T) {
	e := newSenderEnv(t)
	clk := newTestClock()
	s := e.streamSender(t, clk)
	key := answerKey(e.thread, 1)
	st := openStream(t, s, e.thread, key, "U1")
	e.fake.RateLimit("chat.appendStream", 1, time.Second)
	mustAppend(t, st, "a")
	clk.add(streamEvery)
	mustAppend(t, st, "b") // answered 429, Retry-After: 1
	clk.add(streamEvery)
	mustAppend(t, st, "c")
	if n := e.fake.Calls("chat.appendStream"); n != 1 {
		t.Errorf("%d appendStream calls within Retry-After, want 1 (the limited one)", n)
	}
	if got := e.only(t).Text; got != "a" {
		t.Errorf("streamed %q while limited", got)
	}
	clk.add(time.Second)
	mustAppend(t, st, "d")
	if got := e.only(t).Text; got != "abcd" {
		t.Errorf("streamed %q after Retry-After, want all the text buffered", got)
	}
	keepAndDeliver(t, s, st, e.thread, key, "abcd")
	if md, _ := markdownOf(t, e.only(t)); md != "abcd" {
		t.Errorf("answer %q", md)
	}
}

// TestStreamAnswerFailure: a failure of the stream ends streaming for the
// answer (Append returns it), and the Deliver still shows the whole
// answer in the streamed message.
func TestStreamAnswerFailure(t *testing.T) {
	e := newSenderEnv(t)
	clk := newTestClock()
	s := e.streamSender(t, clk)
	ctx := context.Background()
	key := answerKey(e.thread, 1)
	st := openStream(t, s, e.thread, key, "U1")
	mustAppend(t, st, "The first words")
	e.fake.Refuse("chat.appendStream", "fatal_error")
	clk.add(streamEvery)
	err := st.Append(ctx, " and more")
	if err == nil || !strings.Contains(err.Error(), "fatal_error") {
		t.Fatalf("Append: %v, want the failure", err)
	}
	clk.add(streamEvery)
	if err2 := st.Append(ctx, " still"); err2 != err {
		t.Errorf("Append after the failure: %v, want the same error", err2)
	}
	if n := e.fake.Calls("chat.appendStream"); n != 1 {
		t.Errorf("%d appendStream calls, want 1: streaming ended", n)
	}
	if err := st.Finish(ctx, true); err != nil {
		t.Fatal(err)
	}
	final := "The first words and more still."
	if err := s.Deliver(ctx, answerMsg(e.thread, key, final)); err != nil {
		t.Fatal(err)
	}
	if md, _ := markdownOf(t, e.only(t)); md != final {
		t.Errorf("answer %q, want %q", md, final)
	}
}

func TestHoldBack(t *testing.T) {
	cases := []struct {
		name, text string
		from, want int
	}{
		{"plain", "hello", 0, 5},
		{"token open", "see <thread:slack:T1:C1:1.2", 0, 4},
		{"token begun", "see <thr", 0, 4},
		{"just '<'", "see <", 0, 4},
		{"token closed", "see <thread:k> ok", 0, 17},
		{"comparison", "if a < b", 0, 8},
		{"another tag", "<div", 0, 4},
		{"before from", "<thr", 4, 4},
		{"too long for a key", "<thread:" + strings.Repeat("x", maxTokenHold), 0, 8 + maxTokenHold},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := holdBack(tc.text, tc.from); got != tc.want {
				t.Errorf("holdBack(%q, %d) = %d, want %d", tc.text, tc.from, got, tc.want)
			}
		})
	}
}

// TestStreamAnswerRemovesStale: a stream that a dead worker left in the
// thread (still streaming, never finished) is stopped and deleted by the
// next attempt's StreamAnswer, given its Ref; a ref of another channel is
// left alone.
func TestStreamAnswerRemovesStale(t *testing.T) {
	e := newSenderEnv(t)
	clk := newTestClock()
	key := answerKey(e.thread, 1)
	dead := openStream(t, e.streamSender(t, clk), e.thread, key, "U1")
	if ref := dead.(agentflow.StreamRef).Ref(); ref != "" {
		t.Fatalf("a stream that posted nothing has ref %q", ref)
	}
	mustAppend(t, dead, "Half an answer from a worker that dies")
	ref := dead.(agentflow.StreamRef).Ref()
	left := e.only(t)
	if !left.Streaming || ref != left.Channel+"/"+left.TS {
		t.Fatalf("ref %q for %+v", ref, left)
	}
	next := e.streamSender(t, clk) // another worker
	st, err := next.StreamAnswer(context.Background(), agentflow.StreamTarget{Thread: e.thread, Key: key, User: "U1",
		Stale: []string{"C0OTHER/1700000000.000001", ref}})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.replies(); len(got) != 0 {
		t.Fatalf("the dead attempt's message is still there: %+v", got)
	}
	mustAppend(t, st, "The whole answer")
	if err := st.Finish(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if got := e.only(t); got.TS == left.TS || got.Text != "The whole answer" {
		t.Errorf("%+v", got)
	}
}
