package discordbot

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.temporal.io/sdk/temporal"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/internal/fakediscord"
)

// newFake starts a fake Discord and points discordgo at it. Tests using it
// must not run in parallel: Point sets discordgo's package variables.
func newFake(t *testing.T) *fakediscord.Server {
	t.Helper()
	srv := fakediscord.New(fakediscord.Options{})
	srv.Point()
	t.Cleanup(srv.Close)
	return srv
}

func newTestSender(t *testing.T, srv *fakediscord.Server) *Sender {
	t.Helper()
	s, err := NewSender(SenderConfig{Token: srv.Options().BotToken})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func answer(thread, key, text string) agentflow.Outbound {
	return agentflow.Outbound{Thread: thread, Key: key, Kind: agentflow.OutboundAnswer, Turn: 1, Text: agentflow.Text{Inline: text}}
}

// fenceLines counts lines that open or close a code block.
func fenceLines(s string) int {
	n := 0
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			n++
		}
	}
	return n
}

func TestSenderAnswerChunks(t *testing.T) {
	srv := newFake(t)
	s := newTestSender(t, srv)
	ch := srv.AddChannel("general", fakediscord.ChannelText)
	thread := ThreadKey(srv.Options().GuildID, ch)

	var b strings.Builder
	b.WriteString("Here is the code:\n```go\n")
	for b.Len() < 4900 {
		b.WriteString("fmt.Println(\"line of code number something\")\n")
	}
	b.WriteString("```\nThat is all.")
	text := b.String()
	if err := s.Deliver(context.Background(), answer(thread, "agent/x/1/answer", text)); err != nil {
		t.Fatal(err)
	}
	msgs := srv.Messages(ch)
	if len(msgs) != 3 {
		t.Fatalf("posted %d messages, want 3", len(msgs))
	}
	for i, m := range msgs {
		if n := utf8.RuneCountInString(m.Content); n > MaxMessage {
			t.Errorf("part %d has %d characters", i+1, n)
		}
		if fenceLines(m.Content)%2 != 0 {
			t.Errorf("part %d leaves a code block open:\n%s", i+1, m.Content)
		}
		if findMarker(m.Content) == "" {
			t.Errorf("part %d carries no marker", i+1)
		}
	}

	// A retry by a Sender that remembers nothing (a restarted worker)
	// finds the parts and posts nothing new.
	again := newTestSender(t, srv)
	if err := again.Deliver(context.Background(), answer(thread, "agent/x/1/answer", text)); err != nil {
		t.Fatal(err)
	}
	if n := len(srv.Messages(ch)); n != 3 {
		t.Fatalf("a retried answer made %d messages, want 3", n)
	}
}

func TestSenderProgressEditedInPlace(t *testing.T) {
	srv := newFake(t)
	s := newTestSender(t, srv)
	ch := srv.AddChannel("general", fakediscord.ChannelText)
	thread := ThreadKey(srv.Options().GuildID, ch)
	p := agentflow.Outbound{Thread: thread, Key: "agent/x/2/progress", Kind: agentflow.OutboundProgress, Turn: 2,
		Tools: []agentflow.ToolStatus{{ID: "1", Name: "shell", Summary: "shell: go test ./...", State: "running"}}}
	if err := s.Deliver(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	p.Tools[0].State, p.Status, p.Final = "done", agentflow.TurnDone, true
	if err := s.Deliver(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if err := s.Deliver(context.Background(), p); err != nil { // unchanged: no call
		t.Fatal(err)
	}
	msgs := srv.Messages(ch)
	if len(msgs) != 1 {
		t.Fatalf("progress made %d messages, want 1", len(msgs))
	}
	if msgs[0].Edits != 1 || !strings.Contains(msgs[0].Content, "Turn 2 done") {
		t.Fatalf("progress message: %d edits, content %q", msgs[0].Edits, msgs[0].Content)
	}
}

func TestSenderLongAnswerAttached(t *testing.T) {
	srv := newFake(t)
	s := newTestSender(t, srv)
	ch := srv.AddChannel("general", fakediscord.ChannelText)
	thread := ThreadKey(srv.Options().GuildID, ch)
	text := strings.Repeat("a long line of output\n", 500) // 11,000 characters
	if err := s.Deliver(context.Background(), answer(thread, "agent/x/3/answer", text)); err != nil {
		t.Fatal(err)
	}
	msgs := srv.Messages(ch)
	if len(msgs) != 1 || len(msgs[0].Attachments) != 1 {
		t.Fatalf("got %d messages (%+v), want one with an attachment", len(msgs), msgs)
	}
	if got := string(msgs[0].Attachments[0].Content); got != strings.TrimRight(text, "\n") {
		t.Fatalf("attachment has %d bytes, want the whole answer (%d)", len(got), len(text)-1)
	}
	if !strings.Contains(msgs[0].Content, "attached as a file") || utf8.RuneCountInString(msgs[0].Content) > MaxMessage {
		t.Fatalf("preview: %q", msgs[0].Content)
	}
	// Fetch reads attachments back (from the configured host).
	rc, err := s.Fetch(context.Background(), attachmentURL(t, srv, ch))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if b, _ := io.ReadAll(rc); len(b) != len(text)-1 {
		t.Fatalf("fetched %d bytes, want %d", len(b), len(text)-1)
	}
}

// attachmentURL returns the URL of the first attachment in ch, as the
// REST API lists it.
func attachmentURL(t *testing.T, srv *fakediscord.Server, ch string) string {
	t.Helper()
	s := newTestSender(t, srv)
	msgs, err := s.dg.ChannelMessages(ch, 1, "", "", "")
	if err != nil || len(msgs) == 0 || len(msgs[0].Attachments) == 0 {
		t.Fatalf("no attachment listed: %v", err)
	}
	return msgs[0].Attachments[0].URL
}

func TestSenderNoticeLinksThreads(t *testing.T) {
	srv := newFake(t)
	s := newTestSender(t, srv)
	ch := srv.AddChannel("general", fakediscord.ChannelText)
	g := srv.Options().GuildID
	m := agentflow.Outbound{Thread: ThreadKey(g, ch), Key: "agent/x/notice/1", Kind: agentflow.OutboundNotice,
		Text: agentflow.Text{Inline: "Forked into " + agentflow.LinkThread(ThreadKey(g, "42")) + " @everyone"}}
	if err := s.Deliver(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	msgs := srv.Messages(ch)
	if len(msgs) != 1 || !strings.HasPrefix(msgs[0].Content, "Forked into <#42> @everyone") {
		t.Fatalf("notice: %+v", msgs)
	}
}

func TestSenderCreateThread(t *testing.T) {
	srv := newFake(t)
	s := newTestSender(t, srv)
	g := srv.Options().GuildID
	ch := srv.AddChannel("general", fakediscord.ChannelText)
	ctx := context.Background()

	key, err := s.CreateThread(ctx, ThreadKey(g, ch), "Try the docker backend", "req-1")
	if err != nil {
		t.Fatal(err)
	}
	threads := srv.Threads(ch)
	if len(threads) != 1 || threads[0].Name != "Try the docker backend" || key != ThreadKey(g, threads[0].ID) {
		t.Fatalf("key %q, threads %+v", key, threads)
	}
	// The same request gives the same thread, from memory and from a
	// Sender that remembers nothing.
	for _, sender := range []*Sender{s, newTestSender(t, srv)} {
		again, err := sender.CreateThread(ctx, ThreadKey(g, ch), "Try the docker backend", "req-1")
		if err != nil || again != key {
			t.Fatalf("second CreateThread = %q, %v; want %q", again, err, key)
		}
	}
	// A fork of a thread opens its thread in the parent channel; a long
	// title is cut to Discord's limit.
	long := strings.Repeat("x", 150)
	key2, err := s.CreateThread(ctx, key, long, "req-2")
	if err != nil {
		t.Fatal(err)
	}
	threads = srv.Threads(ch)
	if len(threads) != 2 || key2 != ThreadKey(g, threads[1].ID) || utf8.RuneCountInString(threads[1].Name) > MaxThreadName {
		t.Fatalf("key %q, threads %+v", key2, threads)
	}
	// Renaming.
	if err := s.RenameThread(ctx, key2, "renamed"); err != nil {
		t.Fatal(err)
	}
	if c, _ := srv.Channel(threads[1].ID); c.Name != "renamed" {
		t.Fatalf("thread name %q", c.Name)
	}
}

func TestSenderRateLimits(t *testing.T) {
	const route = "POST /channels/{channel}/messages"
	t.Run("waited out", func(t *testing.T) {
		srv := newFake(t)
		s := newTestSender(t, srv)
		ch := srv.AddChannel("general", fakediscord.ChannelText)
		srv.RateLimit(route, 1, 50*time.Millisecond)
		if err := s.Deliver(context.Background(), answer(ThreadKey(srv.Options().GuildID, ch), "k", "hello")); err != nil {
			t.Fatal(err)
		}
		if n := srv.Calls(route); n != 2 {
			t.Fatalf("%d calls, want 2 (429, then success)", n)
		}
		if n := len(srv.Messages(ch)); n != 1 {
			t.Fatalf("%d messages, want 1", n)
		}
	})
	t.Run("retryable when it persists", func(t *testing.T) {
		srv := newFake(t)
		s := newTestSender(t, srv)
		ch := srv.AddChannel("general", fakediscord.ChannelText)
		srv.RateLimit(route, 10, 20*time.Millisecond)
		err := s.Deliver(context.Background(), answer(ThreadKey(srv.Options().GuildID, ch), "k", "hello"))
		var ae *temporal.ApplicationError
		if !errors.As(err, &ae) || ae.NonRetryable() || ae.Type() != ErrTypeRateLimited || ae.NextRetryDelay() <= 0 {
			t.Fatalf("error %v, want a retryable %s with a delay", err, ErrTypeRateLimited)
		}
		if n := srv.Calls(route); n != maxRateRetries+1 {
			t.Fatalf("%d calls, want %d", n, maxRateRetries+1)
		}
	})
}

func TestSenderPermanentErrors(t *testing.T) {
	srv := newFake(t)
	s := newTestSender(t, srv)
	tests := []struct{ name, thread string }{
		{"unknown channel", ThreadKey(srv.Options().GuildID, "999")},
		{"not a discord key", "slack:T:C:1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.Deliver(context.Background(), answer(tt.thread, "k", "hello"))
			var ae *temporal.ApplicationError
			if !errors.As(err, &ae) || !ae.NonRetryable() {
				t.Fatalf("error %v, want a non-retryable application error", err)
			}
		})
	}
}
