package discordbot_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
	discordbot "github.com/agentbot/agentbot/bot/discord"
	"github.com/agentbot/agentbot/internal/fakediscord"
	"github.com/agentbot/agentbot/internal/stacktest"
	"github.com/agentbot/agentbot/store"
)

// startDiscord starts the fake Discord (its API is where discordgo calls)
// and the product's stack with the real Discord sender.
func startDiscord(t *testing.T) (*fakediscord.Server, *stacktest.Stack) {
	t.Helper()
	fd := fakediscord.New(fakediscord.Options{})
	fd.Point()
	t.Cleanup(fd.Close)
	sender, err := discordbot.NewSender(discordbot.SenderConfig{Token: fd.Options().BotToken})
	if err != nil {
		t.Fatal(err)
	}
	return fd, stacktest.Start(t, map[string]agentflow.ChatSender{discordbot.Platform: sender})
}

// TestDiscordEndToEnd drives the product from a (fake) Discord guild, over
// the gateway websocket and the REST API, with the real Router, Temporal,
// sandboxes and the fake model.
func TestDiscordEndToEnd(t *testing.T) {
	ctx := context.Background()
	fd, stack := startDiscord(t)
	o := fd.Options()
	router := &bot.Router{Sessions: stack.Sessions, Cache: store.NewMemoryCache(),
		Backends: []string{"local", "docker"}, DefaultBackend: "local"}
	in, err := discordbot.NewInbound(discordbot.InboundConfig{Token: o.BotToken, AppID: o.AppID,
		PublicKey: fd.PublicKeyHex(), GuildID: o.GuildID, Backends: router.Backends}, router)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = fd.WaitFor(ctx, func(s *fakediscord.Server) bool { return s.Heartbeats() >= s.Connects() })
		in.Close()
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = in.Shutdown(sctx)
	})
	hs := httptest.NewServer(in.HTTPHandler())
	t.Cleanup(hs.Close)

	ch := fd.AddChannel("agent-work", 0)
	botMessages := func(channel string) []fakediscord.Message {
		var out []fakediscord.Message
		for _, m := range fd.Messages(channel) {
			if m.Bot {
				out = append(out, m)
			}
		}
		return out
	}
	waitBot := func(channel, want string) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := fd.WaitFor(wctx, func(*fakediscord.Server) bool {
			for _, m := range botMessages(channel) {
				if strings.Contains(m.Content, want) {
					return true
				}
			}
			return false
		}); err != nil {
			var texts []string
			for _, m := range fd.Messages(channel) {
				texts = append(texts, m.AuthorID+": "+m.Content)
			}
			t.Fatalf("no bot message with %q in %s:\n%s", want, channel, strings.Join(texts, "\n---\n"))
		}
	}
	mention := "<@" + o.BotUserID + "> "

	// A channel session: a mention binds the channel, plain messages
	// there go to it.
	fd.UserMessage(ch, "1001", mention+"write: notes.txt <<< hello from discord", nil)
	waitBot(ch, "wrote 18 bytes to notes.txt")
	fd.UserMessage(ch, "1001", "sh: cat notes.txt", nil)
	waitBot(ch, "hello from discord")

	// /agent switch docker moves it: the interaction is answered when the
	// session accepted it, the outcome comes as a message.
	fd.SlashCommand(ch, "1001", nil, "agent", fakediscord.SubCommand("switch", fakediscord.StringOption("backend", "docker")))
	if err := fd.WaitFor(ctx, func(s *fakediscord.Server) bool {
		for _, r := range s.InteractionResponses() {
			if strings.Contains(string(r.Body), "Switching to `docker`") {
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatalf("no answer to /agent switch: %+v", fd.InteractionResponses())
	}
	waitBot(ch, "Switched local → docker")
	fd.UserMessage(ch, "1001", "sh: cat notes.txt; test -f /.dockerenv && echo in-a-container", nil)
	waitBot(ch, "in-a-container")

	// /agent fork opens a thread that goes on on its own.
	fd.SlashCommand(ch, "1001", nil, "agent", fakediscord.SubCommand("fork",
		fakediscord.StringOption("backend", "local"), fakediscord.StringOption("title", "try local")))
	var thread string
	if err := fd.WaitFor(ctx, func(s *fakediscord.Server) bool {
		for _, c := range s.Threads(ch) {
			if strings.Contains(c.Name, "try local") {
				thread = c.ID
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatal("no fork thread")
	}
	waitBot(thread, "Forked from")
	fd.UserMessage(thread, "1001", "sh: echo only-in-fork > fork.txt; cat notes.txt", nil)
	waitBot(thread, "hello from discord")
	fd.UserMessage(ch, "1001", "sh: ls; echo listed-parent", nil)
	waitBot(ch, "listed-parent")
	for _, m := range botMessages(ch) {
		if strings.Contains(m.Content, "fork.txt") {
			t.Fatalf("the parent sees the fork's file: %s", m.Content)
		}
	}

	// /agent title renames the session and its thread.
	fd.SlashCommand(thread, "1001", nil, "agent", fakediscord.SubCommand("title", fakediscord.StringOption("name", "renamed fork")))
	if err := fd.WaitFor(ctx, func(s *fakediscord.Server) bool {
		c, ok := s.Channel(thread)
		return ok && c.Name == "renamed fork"
	}); err != nil {
		c, _ := fd.Channel(thread)
		t.Fatalf("the thread was not renamed: %q", c.Name)
	}

	// A 5,000-character answer arrives as three messages, fences intact.
	before := len(botMessages(thread))
	fd.UserMessage(thread, "1001", "sh: echo '```'; i=1; while [ $i -le 70 ]; do echo \"line $i of the long listing ........................................\"; i=$((i+1)); done; echo '```'", nil)
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := fd.WaitFor(wctx, func(*fakediscord.Server) bool {
		msgs := botMessages(thread)[before:]
		return len(msgs) > 0 && strings.Contains(msgs[len(msgs)-1].Content, "line 70 of")
	}); err != nil {
		t.Fatal("the long answer did not arrive")
	}
	// The parts of the answer (the progress message shows the command,
	// which says "line $i", not a number).
	var parts []string
	answerLine := regexp.MustCompile(`line [0-9]+ of`)
	for _, m := range botMessages(thread)[before:] {
		if answerLine.MatchString(m.Content) {
			parts = append(parts, m.Content)
		}
	}
	total := 0
	for i, p := range parts {
		total += len([]rune(p))
		if n := len([]rune(p)); n > 2000 {
			t.Errorf("part %d has %d characters", i, n)
		}
		if strings.Count(p, "```")%2 != 0 {
			t.Errorf("part %d has an unbalanced code fence:\n%s", i, p)
		}
	}
	if len(parts) != 3 || total < 4900 {
		t.Fatalf("the answer (%d characters) came as %d parts, want 3", total, len(parts))
	}

	// A bad signature on the HTTP interactions endpoint gets 401.
	resp, err := fd.PostInteraction(hs.URL+"/discord/interactions", []byte(`{"type":1}`), fakediscord.SignTampered)
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("tampered signature: %v %v", resp, err)
	}
	resp, err = fd.PostInteraction(hs.URL+"/discord/interactions", []byte(`{"type":1}`), fakediscord.SignValid)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("valid PING: %v %v", resp, err)
	}
}
