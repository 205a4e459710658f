package fakediscord_test

import (
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/bwmarrin/discordgo"

	"github.com/agentbot/agentbot/internal/fakediscord"
)

// TestDMs: Create DM gives one channel per user (no guild), refuses what
// Discord refuses, and a user's DM reaches a session with the
// DIRECT_MESSAGES intent, content included without MESSAGE_CONTENT, with
// no guild_id and no member; a session without the intent gets nothing.
func TestDMs(t *testing.T) {
	s := newServer(t, fakediscord.Options{})
	dg := newSession(t, s)
	dm, err := dg.UserChannelCreate("42")
	if err != nil {
		t.Fatal(err)
	}
	if dm.Type != discordgo.ChannelTypeDM || dm.GuildID != "" || len(dm.Recipients) != 1 || dm.Recipients[0].ID != "42" {
		t.Fatalf("DM channel %+v", dm)
	}
	if again, err := dg.UserChannelCreate("42"); err != nil || again.ID != dm.ID {
		t.Fatalf("second Create DM = %v, %v; want the same channel %s", again, err, dm.ID)
	}
	if s.DMChannel("42") != dm.ID {
		t.Fatal("DMChannel does not find the channel Create DM opened")
	}
	if got, err := dg.Channel(dm.ID); err != nil || got.Type != discordgo.ChannelTypeDM {
		t.Fatalf("GET channel = %+v, %v", got, err)
	}
	for _, tt := range []struct {
		name, recipient string
		code            int
	}{
		{"not a snowflake", "bob", 50035},
		{"the bot itself", s.Options().BotUserID, 50007},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := dg.UserChannelCreate(tt.recipient); restCode(err) != tt.code {
				t.Fatalf("Create DM with %q = %v, want code %d", tt.recipient, err, tt.code)
			}
		})
	}

	dg.Identify.Intents = discordgo.IntentsGuilds | discordgo.IntentsDirectMessages // no MESSAGE_CONTENT
	msgs := make(chan *discordgo.MessageCreate, 4)
	dg.AddHandler(func(_ *discordgo.Session, m *discordgo.MessageCreate) { msgs <- m })
	if err := dg.Open(); err != nil {
		t.Fatal(err)
	}
	id := s.UserMessage(dm.ID, "42", "hello bot", nil)
	m := recv(t, msgs)
	if m.ID != id || m.GuildID != "" || m.Member != nil || m.Content != "hello bot" || m.Author.ID != "42" {
		t.Fatalf("DM MESSAGE_CREATE = %+v (member %+v)", m.Message, m.Member)
	}
	// A reply in the DM: no guild in its reference either.
	reply, err := dg.ChannelMessageSendReply(dm.ID, "hi", &discordgo.MessageReference{MessageID: id, ChannelID: dm.ID})
	if err != nil {
		t.Fatal(err)
	}
	if reply.GuildID != "" || reply.MessageReference == nil || reply.MessageReference.GuildID != "" {
		t.Fatalf("reply %+v", reply)
	}

	// Guild messages need GUILD_MESSAGES: this session gets none.
	ch := s.AddChannel("general", fakediscord.ChannelText)
	s.UserMessage(ch, "42", "in the guild", nil)
	s.UserMessage(dm.ID, "42", "second", nil)
	for range 2 { // the bot's reply, then "second"
		if got := recv(t, msgs); got.ChannelID != dm.ID {
			t.Fatalf("a guild message reached a session without GUILD_MESSAGES: %+v", got.Message)
		}
	}
}

// TestDMInteraction: a click in a DM comes with "user", no member, no
// guild.
func TestDMInteraction(t *testing.T) {
	s := newServer(t, fakediscord.Options{})
	dg := newSession(t, s)
	dm := s.DMChannel("42")
	got := make(chan *discordgo.InteractionCreate, 1)
	dg.AddHandler(func(_ *discordgo.Session, i *discordgo.InteractionCreate) { got <- i })
	if err := dg.Open(); err != nil {
		t.Fatal(err)
	}
	s.SlashCommand(dm, "42", nil, "agent", fakediscord.SubCommand("status"))
	i := recv(t, got)
	if i.GuildID != "" || i.Member != nil || i.User == nil || i.User.ID != "42" || i.ChannelID != dm {
		t.Fatalf("interaction in a DM %+v", i.Interaction)
	}
}

// TestForum: posting in a forum needs a post (a thread with a starter
// message, both with one ID); plain messages and message threads are
// refused there; a user's post dispatches THREAD_CREATE then
// MESSAGE_CREATE in the post.
func TestForum(t *testing.T) {
	s := newServer(t, fakediscord.Options{})
	dg := newSession(t, s)
	forum := s.AddChannel("help", fakediscord.ChannelForum)
	if c, err := dg.Channel(forum); err != nil || c.Type != discordgo.ChannelTypeGuildForum {
		t.Fatalf("forum %+v, %v", c, err)
	}

	post, err := dg.ForumThreadStartComplex(forum, &discordgo.ThreadStart{Name: "a post"},
		&discordgo.MessageSend{Content: "first words"})
	if err != nil {
		t.Fatal(err)
	}
	if post.ParentID != forum || post.Type != discordgo.ChannelTypeGuildPublicThread {
		t.Fatalf("post %+v", post)
	}
	msgs := s.Messages(post.ID)
	if len(msgs) != 1 || msgs[0].ID != post.ID || msgs[0].Content != "first words" || !msgs[0].Bot {
		t.Fatalf("starter %+v", msgs)
	}
	if th := s.Threads(forum); len(th) != 1 || th[0].StarterMessageID != post.ID {
		t.Fatalf("threads %+v", th)
	}

	t.Run("errors", func(t *testing.T) {
		if _, err := dg.ThreadStartComplex(forum, &discordgo.ThreadStart{Name: "no message", Type: discordgo.ChannelTypeGuildPublicThread}); restCode(err) != 50035 {
			t.Errorf("post without a message = %v, want 50035", err)
		}
		if _, err := dg.ForumThreadStartComplex(forum, &discordgo.ThreadStart{Name: "empty"}, &discordgo.MessageSend{}); restCode(err) != 50006 {
			t.Errorf("post with an empty message = %v, want 50006", err)
		}
		if _, err := dg.ChannelMessageSend(forum, "straight in"); restCode(err) != 50008 {
			t.Errorf("message in the forum = %v, want 50008", err)
		}
		if _, err := dg.MessageThreadStart(forum, post.ID, "x", 60); restCode(err) != 10008 && restCode(err) != 50024 {
			t.Errorf("thread on a forum message = %v, want 10008 or 50024", err)
		}
	})

	dg.Identify.Intents = discordgo.IntentsGuilds | discordgo.IntentsGuildMessages | discordgo.IntentMessageContent
	events := make(chan string, 4)
	dg.AddHandler(func(_ *discordgo.Session, c *discordgo.ThreadCreate) { events <- "thread " + c.ID + " " + c.ParentID })
	dg.AddHandler(func(_ *discordgo.Session, m *discordgo.MessageCreate) {
		events <- "message " + m.ID + " " + m.ChannelID + " " + m.GuildID + " " + m.Content
	})
	if err := dg.Open(); err != nil {
		t.Fatal(err)
	}
	id := s.UserForumPost(forum, "42", "my question", "why?", []string{"7"})
	g := s.Options().GuildID
	// The gateway sends THREAD_CREATE, then MESSAGE_CREATE; discordgo
	// runs each handler on a goroutine of its own, so they may arrive here
	// in either order.
	got := []string{recv(t, events), recv(t, events)}
	slices.Sort(got)
	if want := []string{"message " + id + " " + id + " " + g + " why?", "thread " + id + " " + forum}; !slices.Equal(got, want) {
		t.Fatalf("dispatches %q, want %q", got, want)
	}
	if c, ok := s.Channel(id); !ok || c.Name != "my question" || c.OwnerID != "42" {
		t.Fatalf("post %+v", c)
	}
}

// TestUserAttachments: a user's files are in the message with signed CDN
// URLs; the URL serves the content, a tampered or expired one 404s.
func TestUserAttachments(t *testing.T) {
	s := newServer(t, fakediscord.Options{})
	dg := newSession(t, s)
	ch := s.AddChannel("general", fakediscord.ChannelText)
	id := s.UserMessageFiles(ch, "42", "see file", nil,
		fakediscord.Attachment{Filename: "data set.csv", ContentType: "text/csv", Content: []byte("a,b\n1,2\n")})
	m, err := dg.ChannelMessage(ch, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Attachments) != 1 || m.Attachments[0].Filename != "data set.csv" || m.Attachments[0].Size != 8 {
		t.Fatalf("attachments %+v", m.Attachments)
	}
	u := m.Attachments[0].URL
	get := func(u string) (int, string) {
		t.Helper()
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(u); code != 200 || body != "a,b\n1,2\n" {
		t.Fatalf("GET %s = %d %q", u, code, body)
	}
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	for name, change := range map[string]func(url.Values){
		"tampered": func(q url.Values) { q.Set("hm", strings.Repeat("0", 64)) },
		"expired":  func(q url.Values) { q.Set("ex", "1") },
		"unsigned": func(q url.Values) { q.Del("hm") },
	} {
		t.Run(name, func(t *testing.T) {
			q := p.Query()
			change(q)
			bad := *p
			bad.RawQuery = q.Encode()
			if code, _ := get(bad.String()); code != http.StatusNotFound {
				t.Fatalf("%s URL answered %d, want 404", name, code)
			}
		})
	}
}
