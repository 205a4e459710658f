package fakediscord_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bwmarrin/discordgo"

	"github.com/agentbot/agentbot/internal/fakediscord"
)

// These tests use Point, which mutates discordgo's globals: none may run
// in parallel.

func newServer(t *testing.T, opts fakediscord.Options) *fakediscord.Server {
	t.Helper()
	s := fakediscord.New(opts)
	s.Point()
	t.Cleanup(s.Close)
	return s
}

// newSession returns a discordgo session for the fake's bot; open opens
// the gateway with intents. It is closed before the server.
func newSession(t *testing.T, s *fakediscord.Server) *discordgo.Session {
	t.Helper()
	dg, err := discordgo.New("Bot " + s.Options().BotToken)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// discordgo's heartbeat goroutine writes once right after each
		// Open; closing before that write makes it start a reconnect loop
		// that outlives the test. Let every connection's first heartbeat
		// arrive first.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.WaitFor(ctx, func(s *fakediscord.Server) bool { return s.Heartbeats() >= s.Connects() })
		_ = dg.Close()
	})
	return dg
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %T", *new(T))
		panic("unreachable")
	}
}

func restCode(err error) int {
	var re *discordgo.RESTError
	if errors.As(err, &re) && re.Message != nil {
		return re.Message.Code
	}
	return -1
}

func TestGatewayReadyAndMessageCreate(t *testing.T) {
	tests := []struct {
		name        string
		intents     discordgo.Intent
		content     string
		wantContent string
	}{
		{"message content intent", discordgo.IntentsGuilds | discordgo.IntentsGuildMessages | discordgo.IntentMessageContent, "hello", "hello"},
		{"no message content intent", discordgo.IntentsGuilds | discordgo.IntentsGuildMessages, "hello", ""},
		{"no intent but mentioned", discordgo.IntentsGuilds | discordgo.IntentsGuildMessages, "<@2000> hi", "<@2000> hi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, fakediscord.Options{})
			ch := s.AddChannel("general", fakediscord.ChannelText)
			dg := newSession(t, s)
			dg.Identify.Intents = tt.intents
			ready := make(chan *discordgo.Ready, 1)
			guild := make(chan *discordgo.GuildCreate, 1)
			msgs := make(chan *discordgo.MessageCreate, 1)
			dg.AddHandler(func(_ *discordgo.Session, r *discordgo.Ready) { ready <- r })
			dg.AddHandler(func(_ *discordgo.Session, g *discordgo.GuildCreate) { guild <- g })
			dg.AddHandler(func(_ *discordgo.Session, m *discordgo.MessageCreate) { msgs <- m })
			if err := dg.Open(); err != nil {
				t.Fatal(err)
			}
			r := recv(t, ready)
			if r.User.ID != "2000" || !r.User.Bot || r.SessionID == "" || len(r.Guilds) != 1 {
				t.Fatalf("READY = %+v", r)
			}
			g := recv(t, guild)
			if g.ID != "3000" || len(g.Channels) != 1 || g.Channels[0].ID != ch {
				t.Fatalf("GUILD_CREATE = %+v", g.Guild)
			}
			if got := s.Intents(); got != int(tt.intents) {
				t.Errorf("Intents() = %d, want %d", got, tt.intents)
			}
			id := s.UserMessage(ch, "42", tt.content, []string{"777"})
			m := recv(t, msgs)
			if m.ID != id || m.ChannelID != ch || m.GuildID != "3000" || m.Author.ID != "42" || m.Author.Bot {
				t.Fatalf("MESSAGE_CREATE = %+v", m.Message)
			}
			if m.Content != tt.wantContent {
				t.Errorf("content = %q, want %q", m.Content, tt.wantContent)
			}
			if m.Member == nil || len(m.Member.Roles) != 1 || m.Member.Roles[0] != "777" {
				t.Errorf("member = %+v", m.Member)
			}
		})
	}
}

func TestGatewayRejectsBadToken(t *testing.T) {
	s := newServer(t, fakediscord.Options{})
	dg, err := discordgo.New("Bot wrong")
	if err != nil {
		t.Fatal(err)
	}
	// GET /gateway needs no token; IDENTIFY is refused with 4004, so
	// Open fails on reading READY.
	err = dg.Open()
	if err == nil {
		_ = dg.Close()
		t.Fatal("Open with a bad token succeeded")
	}
	if !strings.Contains(err.Error(), "4004") {
		t.Errorf("Open error = %v, want close 4004", err)
	}
	if s.Connected() != 0 {
		t.Errorf("Connected() = %d", s.Connected())
	}
}

func TestGatewayResume(t *testing.T) {
	tests := []struct {
		name  string
		cause func(*fakediscord.Server)
	}{
		{"connection dropped", (*fakediscord.Server).DropConnections},
		{"op 7 reconnect", (*fakediscord.Server).Reconnect},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, fakediscord.Options{})
			ch := s.AddChannel("general", fakediscord.ChannelText)
			dg := newSession(t, s)
			dg.Identify.Intents = discordgo.IntentsGuilds | discordgo.IntentsGuildMessages | discordgo.IntentMessageContent
			resumed := make(chan *discordgo.Resumed, 1)
			msgs := make(chan *discordgo.MessageCreate, 4)
			dg.AddHandler(func(_ *discordgo.Session, r *discordgo.Resumed) { resumed <- r })
			dg.AddHandler(func(_ *discordgo.Session, m *discordgo.MessageCreate) { msgs <- m })
			if err := dg.Open(); err != nil {
				t.Fatal(err)
			}
			// discordgo sends its first heartbeat from a goroutine right
			// after Open; if that write meets the dead connection it
			// closes whatever connection is current with 1000, which ends
			// the session. Cut the connection after it, as in real life.
			if err := s.WaitFor(ctxT(t), func(s *fakediscord.Server) bool { return s.Heartbeats() >= 1 }); err != nil {
				t.Fatal(err)
			}
			tt.cause(s)
			// Possibly sent while disconnected: replayed on RESUME.
			id := s.UserMessage(ch, "42", "while away", nil)
			recv(t, resumed)
			if m := recv(t, msgs); m.ID != id || m.Content != "while away" {
				t.Fatalf("got %+v", m.Message)
			}
		})
	}
}

func TestRESTMessages(t *testing.T) {
	s := newServer(t, fakediscord.Options{})
	ch := s.AddChannel("general", fakediscord.ChannelText)
	dg := newSession(t, s)

	m, err := dg.ChannelMessageSend(ch, "hello")
	if err != nil {
		t.Fatal(err)
	}
	if m.Author.ID != "2000" || !m.Author.Bot || m.Content != "hello" {
		t.Fatalf("sent %+v", m)
	}
	if _, err := dg.ChannelMessageEdit(ch, m.ID, "hello, edited"); err != nil {
		t.Fatal(err)
	}
	got, err := dg.ChannelMessage(ch, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Content != "hello, edited" || got.EditedTimestamp == nil {
		t.Errorf("after edit %+v", got)
	}

	withFile, err := dg.ChannelMessageSendComplex(ch, &discordgo.MessageSend{
		Content: "log attached",
		Files:   []*discordgo.File{{Name: "out.txt", ContentType: "text/plain", Reader: strings.NewReader("line1\nline2\n")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(withFile.Attachments) != 1 || withFile.Attachments[0].Filename != "out.txt" {
		t.Fatalf("attachments %+v", withFile.Attachments)
	}
	resp, err := http.Get(withFile.Attachments[0].URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "line1\nline2\n" {
		t.Errorf("attachment download = %q", body)
	}

	msgs := s.Messages(ch)
	if len(msgs) != 2 {
		t.Fatalf("Messages = %d, want 2", len(msgs))
	}
	if msgs[0].Content != "hello, edited" || msgs[0].Edits != 1 || !msgs[0].Bot || msgs[0].AuthorID != "2000" {
		t.Errorf("first %+v", msgs[0])
	}
	if a := msgs[1].Attachments; len(a) != 1 || a[0].Filename != "out.txt" || string(a[0].Content) != "line1\nline2\n" {
		t.Errorf("second's attachments %+v", a)
	}

	list, err := dg.ChannelMessages(ch, 10, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != withFile.ID {
		t.Errorf("ChannelMessages newest first: got %d, first %v", len(list), list)
	}

	errTests := []struct {
		name string
		call func() error
		code int
	}{
		{"too long", func() error { _, err := dg.ChannelMessageSend(ch, strings.Repeat("x", 2001)); return err }, 50035},
		{"empty", func() error { _, err := dg.ChannelMessageSend(ch, ""); return err }, 50006},
		{"unknown channel", func() error { _, err := dg.ChannelMessageSend("999", "x"); return err }, 10003},
		{"edit user message", func() error {
			_, err := dg.ChannelMessageEdit(ch, s.UserMessage(ch, "42", "mine", nil), "x")
			return err
		}, 50005},
		{"bad token", func() error {
			bad, _ := discordgo.New("Bot nope")
			_, err := bad.ChannelMessageSend(ch, "x")
			return err
		}, 0},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if err == nil {
				t.Fatal("no error")
			}
			if got := restCode(err); got != tt.code {
				t.Errorf("code = %d, want %d (%v)", got, tt.code, err)
			}
		})
	}
}

func TestThreads(t *testing.T) {
	s := newServer(t, fakediscord.Options{})
	ch := s.AddChannel("general", fakediscord.ChannelText)
	dg := newSession(t, s)

	th, err := dg.ThreadStart(ch, "agent session", discordgo.ChannelTypeGuildPublicThread, 1440)
	if err != nil {
		t.Fatal(err)
	}
	if th.ParentID != ch || th.Type != discordgo.ChannelTypeGuildPublicThread || th.ThreadMetadata == nil {
		t.Fatalf("thread %+v", th)
	}
	if _, err := dg.ChannelMessageSend(th.ID, "in thread"); err != nil {
		t.Fatal(err)
	}
	if _, err := dg.ChannelEdit(th.ID, &discordgo.ChannelEdit{Name: "renamed"}); err != nil {
		t.Fatal(err)
	}
	if c, ok := s.Channel(th.ID); !ok || c.Name != "renamed" || c.ParentID != ch {
		t.Errorf("Channel = %+v, %v", c, ok)
	}

	root := s.UserMessage(ch, "42", "start here", nil)
	th2, err := dg.MessageThreadStart(ch, root, "from message", 60)
	if err != nil {
		t.Fatal(err)
	}
	if th2.ID != root {
		t.Errorf("thread from message has ID %s, want the message's %s", th2.ID, root)
	}
	if _, err := dg.MessageThreadStart(ch, root, "again", 60); restCode(err) != 160004 {
		t.Errorf("second thread on a message: %v", err)
	}
	threads := s.Threads(ch)
	if len(threads) != 2 || threads[0].ID != th.ID || threads[1].ID != root {
		t.Errorf("Threads = %+v", threads)
	}
	if msgs := s.Messages(th.ID); len(msgs) != 1 || msgs[0].Content != "in thread" {
		t.Errorf("thread messages %+v", msgs)
	}
}

func TestCommandsBulkOverwrite(t *testing.T) {
	s := newServer(t, fakediscord.Options{})
	dg := newSession(t, s)
	cmd := &discordgo.ApplicationCommand{Name: "agent", Description: "Talk to the agent", Options: []*discordgo.ApplicationCommandOption{{
		Type: discordgo.ApplicationCommandOptionSubCommand, Name: "switch", Description: "Switch backend",
		Options: []*discordgo.ApplicationCommandOption{{Type: discordgo.ApplicationCommandOptionString, Name: "backend", Description: "Backend", Required: true}},
	}}}
	global, err := dg.ApplicationCommandBulkOverwrite("1000", "", []*discordgo.ApplicationCommand{cmd})
	if err != nil {
		t.Fatal(err)
	}
	guild, err := dg.ApplicationCommandBulkOverwrite("1000", "3000", []*discordgo.ApplicationCommand{cmd})
	if err != nil {
		t.Fatal(err)
	}
	again, err := dg.ApplicationCommandBulkOverwrite("1000", "", []*discordgo.ApplicationCommand{cmd})
	if err != nil {
		t.Fatal(err)
	}
	if global[0].ID == "" || again[0].ID != global[0].ID || guild[0].GuildID != "3000" {
		t.Errorf("global %+v, again %+v, guild %+v", global[0], again[0], guild[0])
	}
	cmds := s.Commands()
	if len(cmds) != 2 || cmds[0].Name != "agent" || cmds[0].GuildID != "" || cmds[1].GuildID != "3000" {
		t.Errorf("Commands = %+v", cmds)
	}
	listed, err := dg.ApplicationCommands("1000", "3000")
	if err != nil || len(listed) != 1 {
		t.Errorf("ApplicationCommands = %v, %v", listed, err)
	}
	bad := &discordgo.ApplicationCommand{Name: "Agent", Description: "x"}
	if _, err := dg.ApplicationCommandBulkOverwrite("1000", "", []*discordgo.ApplicationCommand{bad}); restCode(err) != 50035 {
		t.Errorf("uppercase name: %v", err)
	}
}

func TestRateLimit(t *testing.T) {
	const route = "POST /channels/{channel}/messages"
	t.Run("discordgo retries", func(t *testing.T) {
		s := newServer(t, fakediscord.Options{})
		ch := s.AddChannel("general", fakediscord.ChannelText)
		dg := newSession(t, s)
		s.RateLimit(route, 1, 50*time.Millisecond)
		if _, err := dg.ChannelMessageSend(ch, "hi"); err != nil {
			t.Fatal(err)
		}
		if got := s.Calls(route); got != 2 {
			t.Errorf("Calls = %d, want 2 (429 then retry)", got)
		}
		if n := len(s.Messages(ch)); n != 1 {
			t.Errorf("Messages = %d, want 1", n)
		}
	})
	t.Run("no retry", func(t *testing.T) {
		s := newServer(t, fakediscord.Options{})
		ch := s.AddChannel("general", fakediscord.ChannelText)
		dg := newSession(t, s)
		s.RateLimit(route, 1, 1500*time.Millisecond)
		_, err := dg.ChannelMessageSend(ch, "hi", discordgo.WithRetryOnRatelimit(false))
		var rl *discordgo.RateLimitError
		if !errors.As(err, &rl) || rl.RetryAfter != 1500*time.Millisecond {
			t.Fatalf("err = %v, want RateLimitError with 1.5s", err)
		}
	})
}

// agentCommand runs "/agent switch backend:docker".
func agentCommand(s *fakediscord.Server, ch string) fakediscord.Invocation {
	return s.SlashCommand(ch, "42", []string{"777"}, "agent",
		fakediscord.SubCommand("switch", fakediscord.StringOption("backend", "docker")))
}

func TestGatewayInteractionDeferAndFollowup(t *testing.T) {
	s := newServer(t, fakediscord.Options{})
	ch := s.AddChannel("general", fakediscord.ChannelText)
	dg := newSession(t, s)
	dg.Identify.Intents = discordgo.IntentsGuilds
	got := make(chan *discordgo.InteractionCreate, 1)
	dg.AddHandler(func(_ *discordgo.Session, i *discordgo.InteractionCreate) { got <- i })
	if err := dg.Open(); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitFor(ctxT(t), func(s *fakediscord.Server) bool { return s.Connected() == 1 }); err != nil {
		t.Fatal(err)
	}
	inv := agentCommand(s, ch)
	i := recv(t, got)
	if i.ID != inv.ID || i.Token != inv.Token || i.Type != discordgo.InteractionApplicationCommand {
		t.Fatalf("interaction %+v", i.Interaction)
	}
	data := i.ApplicationCommandData()
	if data.Name != "agent" || len(data.Options) != 1 || data.Options[0].Name != "switch" ||
		data.Options[0].Options[0].Name != "backend" || data.Options[0].Options[0].StringValue() != "docker" {
		t.Fatalf("data %+v", data)
	}
	if i.Member == nil || i.Member.User.ID != "42" || i.Member.Roles[0] != "777" {
		t.Fatalf("member %+v", i.Member)
	}
	if err := dg.InteractionRespond(i.Interaction, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseDeferredChannelMessageWithSource}); err != nil {
		t.Fatal(err)
	}
	if err := dg.InteractionRespond(i.Interaction, &discordgo.InteractionResponse{Type: discordgo.InteractionResponsePong}); restCode(err) != 40060 {
		t.Errorf("second callback: %v, want 40060", err)
	}
	if _, err := dg.FollowupMessageCreate(i.Interaction, true, &discordgo.WebhookParams{Content: "switched to docker"}); err != nil {
		t.Fatal(err)
	}
	if _, err := dg.FollowupMessageCreate(i.Interaction, true, &discordgo.WebhookParams{Content: "second"}); err != nil {
		t.Fatal(err)
	}
	msgs := s.Messages(ch)
	if len(msgs) != 2 || msgs[0].Content != "switched to docker" || msgs[0].Flags&fakediscord.FlagLoading != 0 || msgs[1].Content != "second" {
		t.Fatalf("messages %+v", msgs)
	}
	content := "edited"
	if _, err := dg.InteractionResponseEdit(i.Interaction, &discordgo.WebhookEdit{Content: &content}); err != nil {
		t.Fatal(err)
	}
	if m, _ := s.Message(msgs[0].ID); m.Content != "edited" {
		t.Errorf("@original = %q", m.Content)
	}
	var kinds []string
	for _, r := range s.InteractionResponses() {
		kinds = append(kinds, r.Kind)
	}
	if want := "callback callback followup followup edit_original"; strings.Join(kinds, " ") != want {
		t.Errorf("responses %v, want %s", kinds, want)
	}
}

func TestInteractionLateCallback(t *testing.T) {
	s := newServer(t, fakediscord.Options{InteractionTimeout: 20 * time.Millisecond})
	ch := s.AddChannel("general", fakediscord.ChannelText)
	dg := newSession(t, s)
	inv := agentCommand(s, ch)
	if err := s.WaitFor(ctxT(t), func(*fakediscord.Server) bool { return true }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(40 * time.Millisecond)
	err := dg.InteractionRespond(&discordgo.Interaction{ID: inv.ID, Token: inv.Token},
		&discordgo.InteractionResponse{Type: discordgo.InteractionResponseChannelMessageWithSource, Data: &discordgo.InteractionResponseData{Content: "late"}})
	if restCode(err) != 10062 {
		t.Errorf("late callback: %v, want 10062", err)
	}
}

func TestComponentClickUpdateMessage(t *testing.T) {
	s := newServer(t, fakediscord.Options{})
	ch := s.AddChannel("general", fakediscord.ChannelText)
	dg := newSession(t, s)
	dg.Identify.Intents = discordgo.IntentsGuilds
	got := make(chan *discordgo.InteractionCreate, 1)
	dg.AddHandler(func(_ *discordgo.Session, i *discordgo.InteractionCreate) { got <- i })
	if err := dg.Open(); err != nil {
		t.Fatal(err)
	}
	m, err := dg.ChannelMessageSendComplex(ch, &discordgo.MessageSend{Content: "approve?", Components: []discordgo.MessageComponent{
		discordgo.ActionsRow{Components: []discordgo.MessageComponent{discordgo.Button{Label: "Yes", CustomID: "approve", Style: discordgo.SuccessButton}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ComponentClick(ch, m.ID, "42", nil, "nope"); err == nil {
		t.Error("clicking a missing component succeeded")
	}
	if _, err := s.ComponentClick(ch, m.ID, "42", nil, "approve"); err != nil {
		t.Fatal(err)
	}
	i := recv(t, got)
	if i.Type != discordgo.InteractionMessageComponent || i.MessageComponentData().CustomID != "approve" || i.Message.ID != m.ID {
		t.Fatalf("interaction %+v", i.Interaction)
	}
	err = dg.InteractionRespond(i.Interaction, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseUpdateMessage,
		Data: &discordgo.InteractionResponseData{Content: "approved", Components: []discordgo.MessageComponent{}}})
	if err != nil {
		t.Fatal(err)
	}
	after, _ := s.Message(m.ID)
	if after.Content != "approved" || after.Edits != 1 {
		t.Errorf("after click %+v", after)
	}
}

// interactionsEndpoint is an HTTP interactions endpoint as an adapter
// would write it: verify, answer PING, answer commands with a message.
func interactionsEndpoint(t *testing.T, s *fakediscord.Server) *httptest.Server {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !discordgo.VerifyInteraction(r, s.PublicKey()) {
			http.Error(w, "invalid request signature", http.StatusUnauthorized)
			return
		}
		var i discordgo.Interaction
		if err := json.NewDecoder(r.Body).Decode(&i); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		resp := discordgo.InteractionResponse{Type: discordgo.InteractionResponsePong}
		if i.Type == discordgo.InteractionApplicationCommand {
			resp = discordgo.InteractionResponse{Type: discordgo.InteractionResponseChannelMessageWithSource,
				Data: &discordgo.InteractionResponseData{Content: "backend: " + i.ApplicationCommandData().Options[0].Options[0].StringValue()}}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp)
	}))
	t.Cleanup(ts.Close)
	return ts
}

func TestHTTPInteractions(t *testing.T) {
	s := newServer(t, fakediscord.Options{})
	ch := s.AddChannel("general", fakediscord.ChannelText)
	ep := interactionsEndpoint(t, s)
	if err := s.VerifyInteractionsURL(ep.URL); err != nil {
		t.Fatal(err)
	}

	body := []byte(`{"id":"1","application_id":"1000","type":1,"token":"t","version":1}`)
	for _, tt := range []struct {
		name string
		mode fakediscord.SignMode
		want int
	}{
		{"valid", fakediscord.SignValid, http.StatusOK},
		{"tampered", fakediscord.SignTampered, http.StatusUnauthorized},
		{"unsigned", fakediscord.SignNone, http.StatusUnauthorized},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := s.PostInteraction(ep.URL, body, tt.mode)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.want)
			}
		})
	}

	// A signature is over timestamp+body: verify by hand too.
	req := httptest.NewRequest("POST", "/", bytes.NewReader(body))
	req.Header.Set("X-Signature-Timestamp", "12345")
	req.Header.Set("X-Signature-Ed25519", fakediscord.Sign(s.Options().PrivateKey, "12345", body))
	if !discordgo.VerifyInteraction(req, s.PublicKey()) {
		t.Error("Sign's signature not accepted")
	}

	s.SetInteractionsURL(ep.URL)
	agentCommand(s, ch)
	err := s.WaitFor(ctxT(t), func(s *fakediscord.Server) bool { return len(s.Messages(ch)) == 1 })
	if err != nil {
		t.Fatal(err)
	}
	if m := s.Messages(ch)[0]; m.Content != "backend: docker" || !m.Bot || m.InteractionID == "" {
		t.Errorf("response message %+v", m)
	}
	if r := s.InteractionResponses(); len(r) != 1 || r[0].Via != "http" || r[0].Type != 4 || r[0].Status != 200 {
		t.Errorf("responses %+v", r)
	}
}

func TestPointAndRestore(t *testing.T) {
	before := discordgo.EndpointAPI
	s := fakediscord.New(fakediscord.Options{})
	s.Point()
	if !strings.HasPrefix(discordgo.EndpointChannel("1"), s.URL()) || !strings.HasPrefix(discordgo.EndpointInteractionResponse("1", "t"), s.URL()) {
		t.Errorf("endpoints not pointed: %s", discordgo.EndpointChannel("1"))
	}
	s.Close()
	if discordgo.EndpointAPI != before {
		t.Errorf("EndpointAPI = %s after Close, want %s", discordgo.EndpointAPI, before)
	}
}
