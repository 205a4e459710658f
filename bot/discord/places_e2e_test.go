package discordbot_test

import (
	"context"
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

// placeBot is the product over the fake Discord: a Router with access
// behind a real Inbound on the gateway.
type placeBot struct {
	fd    *fakediscord.Server
	stack *stacktest.Stack
}

// serve starts an Inbound for a Router with access and returns a function
// that stops it (also run when t ends, if not before).
func (p *placeBot) serve(t *testing.T, access bot.Access) func() {
	t.Helper()
	ctx := context.Background()
	o := p.fd.Options()
	router := &bot.Router{Sessions: p.stack.Sessions, Cache: store.NewMemoryCache(), Access: access,
		Backends: []string{"local", "docker"}, DefaultBackend: "local"}
	in, err := discordbot.NewInbound(discordbot.InboundConfig{Token: o.BotToken, AppID: o.AppID,
		PublicKey: p.fd.PublicKeyHex(), GuildID: o.GuildID, Backends: router.Backends}, router)
	if err != nil {
		t.Fatal(err)
	}
	connects := p.fd.Connects()
	if err := in.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = p.fd.WaitFor(ctx, func(s *fakediscord.Server) bool { return s.Heartbeats() >= s.Connects() })
		in.Close()
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := in.Shutdown(sctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	}
	t.Cleanup(stop)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := p.fd.WaitFor(wctx, func(s *fakediscord.Server) bool { return s.Connects() > connects }); err != nil {
		t.Fatal(err)
	}
	return stop
}

// waitBot waits for a bot message containing want in channel and returns
// it.
func (p *placeBot) waitBot(t *testing.T, channel, want string) fakediscord.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var found fakediscord.Message
	if err := p.fd.WaitFor(ctx, func(s *fakediscord.Server) bool {
		for _, m := range s.Messages(channel) {
			if m.Bot && strings.Contains(m.Content, want) {
				found = m
				return true
			}
		}
		return false
	}); err != nil {
		var texts []string
		for _, m := range p.fd.Messages(channel) {
			texts = append(texts, m.AuthorID+": "+m.Content)
		}
		t.Fatalf("no bot message with %q in %s:\n%s", want, channel, strings.Join(texts, "\n---\n"))
	}
	return found
}

// session returns the session of thread key, failing when there is none.
func (p *placeBot) session(t *testing.T, key string) agentflow.SessionView {
	t.Helper()
	v, err := p.stack.Sessions.State(context.Background(), key)
	if err != nil {
		t.Fatalf("no session %s: %v", key, err)
	}
	return v
}

func startPlaces(t *testing.T) *placeBot {
	fd, stack := startDiscord(t)
	return &placeBot{fd: fd, stack: stack}
}

// TestForumPostEndToEnd: a mention in a forum post starts a session keyed
// by the post; its answers land in the post, and a plain message there
// continues it.
func TestForumPostEndToEnd(t *testing.T) {
	p := startPlaces(t)
	p.serve(t, bot.Access{})
	o := p.fd.Options()
	forum := p.fd.AddChannel("questions", fakediscord.ChannelForum)
	post := p.fd.UserForumPost(forum, "1001", "notes please", "<@"+o.BotUserID+"> write: notes.txt <<< hello from a forum", nil)
	p.waitBot(t, post, "wrote 18 bytes to notes.txt")
	p.fd.UserMessage(post, "1001", "sh: cat notes.txt", nil)
	p.waitBot(t, post, "hello from a forum")
	if v := p.session(t, discordbot.ThreadKey(o.GuildID, post)); v.Requester != "1001" {
		t.Fatalf("session of the post %+v", v)
	}
	if th := p.fd.Threads(forum); len(th) != 1 {
		t.Fatalf("forum threads %+v, want the one post", th)
	}
}

// TestDMEndToEnd: a DM is a session of its own under the allowlists: an
// allowed user's DM is answered there and continues; another user's DM
// is refused with the allowlist sentence and starts nothing; with a roles
// allowlist, a DM (which has no roles) is refused except for an admin.
func TestDMEndToEnd(t *testing.T) {
	p := startPlaces(t)

	stop := p.serve(t, bot.Access{Users: []string{"1001"}})
	dm := p.fd.DMChannel("1001")
	p.fd.UserMessage(dm, "1001", "write: dm.txt <<< private words", nil)
	p.waitBot(t, dm, "wrote 13 bytes to dm.txt")
	p.fd.UserMessage(dm, "1001", "sh: cat dm.txt", nil)
	p.waitBot(t, dm, "private words")
	if v := p.session(t, "discord:@me:"+dm); v.Requester != "1001" {
		t.Fatalf("DM session %+v", v)
	}
	other := p.fd.DMChannel("1002")
	p.fd.UserMessage(other, "1002", "sh: echo should-not-run", nil)
	p.waitBot(t, other, "not on this bot's allowlist")
	if _, err := p.stack.Sessions.State(context.Background(), "discord:@me:"+other); err == nil {
		t.Fatal("a refused DM started a session")
	}
	stop()

	p.serve(t, bot.Access{Roles: []string{"R1"}, Admins: []string{"1009"}})
	roled := p.fd.DMChannel("1003")
	p.fd.UserMessage(roled, "1003", "sh: echo should-not-run", []string{"R1"})
	p.waitBot(t, roled, "not on this bot's allowlist")
	if _, err := p.stack.Sessions.State(context.Background(), "discord:@me:"+roled); err == nil {
		t.Fatal("a DM passed a roles allowlist")
	}
	admin := p.fd.DMChannel("1009")
	p.fd.UserMessage(admin, "1009", "sh: echo admin-in-dm", nil)
	p.waitBot(t, admin, "admin-in-dm")
}

// TestAttachmentEndToEnd: a file attached to a message is copied into the
// workspace under uploads/ before the turn, which reads it.
func TestAttachmentEndToEnd(t *testing.T) {
	p := startPlaces(t)
	p.serve(t, bot.Access{})
	o := p.fd.Options()
	ch := p.fd.AddChannel("agent-work", fakediscord.ChannelText)
	p.fd.UserMessageFiles(ch, "1001", "<@"+o.BotUserID+"> read: uploads/data.csv", nil,
		fakediscord.Attachment{Filename: "data.csv", ContentType: "text/csv", Content: []byte("id,name\n1,attached-content\n")})
	p.waitBot(t, ch, "attached-content")
	p.fd.UserMessage(ch, "1001", "sh: ls uploads", nil)
	p.waitBot(t, ch, "data.csv")
}
