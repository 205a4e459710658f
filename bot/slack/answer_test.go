package slackbot

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/internal/fakeslack"
)

// markdownOf returns the text of a message's blocks if they are exactly one
// markdown block.
func markdownOf(t *testing.T, m fakeslack.Message) (string, bool) {
	t.Helper()
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if len(m.Blocks) == 0 {
		return "", false
	}
	if err := json.Unmarshal(m.Blocks, &blocks); err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 1 || blocks[0].Type != "markdown" {
		return "", false
	}
	return blocks[0].Text, true
}

func answerMsg(thread, key, text string) agentflow.Outbound {
	return agentflow.Outbound{Thread: thread, Key: key, Kind: agentflow.OutboundAnswer, Turn: 1, Text: agentflow.Text{Inline: text}}
}

func TestSenderAnswerIsMarkdown(t *testing.T) {
	e := newSenderEnv(t)
	s := e.sender(t)
	text := "# Plan\n\nThe **build** fails in [ci](https://ci.example/1?a=1&b=2):\n\n| step | ok |\n|---|---|\n| test | no |\n\n```go\nif a < b {}\n```"
	if err := s.Deliver(context.Background(), answerMsg(e.thread, "agent/md/1/answer", text)); err != nil {
		t.Fatal(err)
	}
	got := e.replies()
	if len(got) != 1 {
		t.Fatalf("%d messages, want 1", len(got))
	}
	md, ok := markdownOf(t, got[0])
	if !ok || md != text {
		t.Errorf("markdown block %q (ok %v), want the answer as written %q", md, ok, text)
	}
	// The notification text is the mrkdwn rendering.
	if want := "*Plan*\n\nThe *build* fails in <https://ci.example/1?a=1&amp;b=2|ci>:"; !strings.HasPrefix(got[0].Text, want) {
		t.Errorf("fallback text %q, want it to start %q", got[0].Text, want)
	}
}

func TestSenderLongMarkdownAnswerIsSplit(t *testing.T) {
	e := newSenderEnv(t)
	s := e.sender(t, func(c *SenderConfig) { c.UploadOver = 100000; c.UploadLines = 100000 })
	var b strings.Builder
	for i := 0; b.Len() < 30000; i++ {
		fmt.Fprintf(&b, "Paragraph %d says **something** useful about the build.\n\n", i)
	}
	text := strings.TrimSpace(b.String())
	if err := s.Deliver(context.Background(), answerMsg(e.thread, "agent/md/2/answer", text)); err != nil {
		t.Fatal(err)
	}
	got := e.replies()
	if len(got) != 3 {
		t.Fatalf("%d messages for a 30,000-character answer, want 3", len(got))
	}
	var parts []string
	for i, m := range got {
		md, ok := markdownOf(t, m)
		if !ok {
			t.Fatalf("part %d is not one markdown block: %s", i+1, m.Blocks)
		}
		if n := len([]rune(md)); n > 12000 {
			t.Errorf("part %d has %d characters", i+1, n)
		}
		if k, want := metaKey(t, m), fmt.Sprintf("agent/md/2/answer/part-%d", i+1); k != want {
			t.Errorf("part %d key %q, want %q", i+1, k, want)
		}
		parts = append(parts, md)
	}
	if joined := strings.Join(parts, "\n\n"); joined != text {
		t.Error("the parts joined are not the answer")
	}
}

func TestSenderMarkdownRefused(t *testing.T) {
	e := newSenderEnv(t)
	e.fake.RefuseBlockType("markdown", true)
	s := e.sender(t)
	now := time.Unix(1000, 0)
	s.now = func() time.Time { return now }
	post := func(key string) fakeslack.Message {
		t.Helper()
		before := len(e.replies())
		if err := s.Deliver(context.Background(), answerMsg(e.thread, key, "A **bold** <claim>")); err != nil {
			t.Fatal(err)
		}
		got := e.replies()
		if len(got) != before+1 {
			t.Fatalf("%d new messages, want 1", len(got)-before)
		}
		return got[len(got)-1]
	}
	m := post("agent/ref/1/answer")
	if m.Text != "A *bold* &lt;claim&gt;" || len(m.Blocks) != 0 {
		t.Errorf("fallback posted %q with blocks %s, want mrkdwn text", m.Text, m.Blocks)
	}
	calls := e.fake.Calls("chat.postMessage")
	post("agent/ref/2/answer")
	if n := e.fake.Calls("chat.postMessage") - calls; n != 1 {
		t.Errorf("the second answer took %d chat.postMessage calls, want 1 (no markdown attempt)", n)
	}
	// After MarkdownRetry, markdown is tried again, and taken.
	e.fake.RefuseBlockType("markdown", false)
	now = now.Add(DefaultMarkdownRetry)
	if _, ok := markdownOf(t, post("agent/ref/3/answer")); !ok {
		t.Error("markdown was not tried again after MarkdownRetry")
	}
}

func TestSenderLongCodeIsASnippet(t *testing.T) {
	e := newSenderEnv(t)
	s := e.sender(t)
	var code strings.Builder
	for i := 0; code.Len() < 5000; i++ {
		fmt.Fprintf(&code, "fmt.Println(%d) // a line of generated code\n", i)
	}
	text := "Here is the program:\n\n```go\n" + code.String() + "```\n\nRun it with `go run`."
	m := answerMsg(e.thread, "agent/code/1/answer", text)
	if err := s.Deliver(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	files := e.fake.Files(testChannel)
	if len(files) != 1 || string(files[0].Content) != code.String() || !strings.HasSuffix(files[0].Name, ".go") {
		t.Fatalf("files %+v, want one .go snippet holding the code", files)
	}
	var md string
	for _, r := range e.replies() {
		if s, ok := markdownOf(t, r); ok {
			md = s
		}
	}
	if strings.Contains(md, "fmt.Println") || !strings.Contains(md, "`"+files[0].Name+"`") || !strings.Contains(md, "Run it with") {
		t.Errorf("the message should name the snippet instead of holding the code:\n%s", md)
	}
	// Delivered again by another process (a retry), nothing is uploaded twice.
	if err := e.sender(t).Deliver(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if n := len(e.fake.Files(testChannel)); n != 1 {
		t.Errorf("%d files after a retry, want 1", n)
	}
}
