package discordbot

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
	"github.com/agentbot/agentbot/internal/fakediscord"
)

// recorder is a Handler that records events and answers each with its
// answer function's response, if any.
type recorder struct {
	events chan bot.Event
	mu     sync.Mutex
	answer func(bot.Event) *bot.Response
}

func newRecorder() *recorder { return &recorder{events: make(chan bot.Event, 64)} }

func (r *recorder) Handle(ctx context.Context, ev bot.Event, rep bot.Replier) error {
	r.events <- ev
	r.mu.Lock()
	answer := r.answer
	r.mu.Unlock()
	if answer == nil {
		return nil
	}
	if resp := answer(ev); resp != nil {
		return rep.Reply(ctx, *resp)
	}
	return nil
}

func (r *recorder) setAnswer(f func(bot.Event) *bot.Response) {
	r.mu.Lock()
	r.answer = f
	r.mu.Unlock()
}

func (r *recorder) next(t *testing.T) bot.Event {
	t.Helper()
	select {
	case ev := <-r.events:
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event reached the handler")
		return bot.Event{}
	}
}

func (r *recorder) none(t *testing.T) {
	t.Helper()
	select {
	case ev := <-r.events:
		t.Fatalf("unexpected event %+v", ev)
	case <-time.After(200 * time.Millisecond):
	}
}

var testBackends = []string{"local", "docker"}

func startInbound(t *testing.T, srv *fakediscord.Server, h Handler, mod func(*InboundConfig)) *Inbound {
	t.Helper()
	o := srv.Options()
	cfg := InboundConfig{Token: o.BotToken, AppID: o.AppID, PublicKey: srv.PublicKeyHex(), GuildID: o.GuildID,
		Backends: testBackends, Workers: 2}
	if mod != nil {
		mod(&cfg)
	}
	in, err := NewInbound(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// discordgo writes one heartbeat right after connecting; closing
		// before it can end the session and leave a reconnect loop behind.
		waitFor(t, srv, func(s *fakediscord.Server) bool { return s.Heartbeats() >= s.Connects() })
		in.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		in.Shutdown(ctx)
	})
	waitFor(t, srv, func(s *fakediscord.Server) bool { return s.Connected() > 0 })
	return in
}

func waitFor(t *testing.T, srv *fakediscord.Server, cond func(*fakediscord.Server) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.WaitFor(ctx, cond); err != nil {
		t.Fatal(err)
	}
}

func TestInboundStart(t *testing.T) {
	srv := newFake(t)
	in := startInbound(t, srv, newRecorder(), nil)
	if got := srv.Intents(); got != int(Intents) {
		t.Fatalf("intents %d, want %d", got, Intents)
	}
	cmds := srv.Commands()
	if len(cmds) != 1 || cmds[0].Name != CommandName || cmds[0].GuildID != srv.Options().GuildID {
		t.Fatalf("commands %+v", cmds)
	}
	// What was registered, as Discord stored it, is within its limits.
	reg := checkLimits(t, cmds[0].Raw)
	if opts := subOptions(t, reg, "list"); len(opts) != 2 || opts[0].Name != "scope" || opts[1].Name != "page" {
		t.Errorf("list options %+v", opts)
	}
	var raw struct {
		Options []struct {
			Name    string
			Options []struct {
				Name    string
				Choices []struct{ Value string }
			}
		}
	}
	if err := json.Unmarshal(cmds[0].Raw, &raw); err != nil {
		t.Fatal(err)
	}
	subs := map[string]int{}
	for i, o := range raw.Options {
		subs[o.Name] = i
	}
	for _, v := range bot.Verbs() {
		if _, ok := subs[string(v)]; !ok {
			t.Errorf("no subcommand %q", v)
		}
	}
	sw := raw.Options[subs["switch"]]
	if len(sw.Options) == 0 || sw.Options[0].Name != "backend" || len(sw.Options[0].Choices) != len(testBackends) {
		t.Errorf("switch options %+v", sw.Options)
	}
	// A second Start registers again (an overwrite: still one command) and
	// keeps the one gateway connection.
	if err := in.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(srv.Commands()); n != 1 {
		t.Fatalf("%d commands after a second Start, want 1", n)
	}
	if n := srv.Calls("PUT /applications/{app}/guilds/{guild}/commands"); n != 2 {
		t.Fatalf("%d registrations, want one per Start", n)
	}
	if n := srv.Connected(); n != 1 {
		t.Fatalf("%d gateway connections, want 1", n)
	}
}

func TestInboundMessages(t *testing.T) {
	srv := newFake(t)
	rec := newRecorder()
	startInbound(t, srv, rec, nil)
	o := srv.Options()
	ch := srv.AddChannel("general", fakediscord.ChannelText)
	key := ThreadKey(o.GuildID, ch)
	mention := "<@" + o.BotUserID + ">"

	tests := []struct {
		name, content string
		kind          bot.Kind
		text          string
	}{
		{"mention", mention + " please fix the build", bot.KindMention, "please fix the build"},
		{"plain", "hello all", bot.KindMessage, "hello all"},
		{"bang command", "!agent switch docker", bot.KindCommand, "switch docker"},
		{"mention command", mention + " stop", bot.KindCommand, "stop"},
		{"mention chat starting with a verb", mention + " stop the server on port 80", bot.KindMention, "stop the server on port 80"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := srv.UserMessage(ch, "42", tt.content, []string{"R1"})
			ev := rec.next(t)
			if ev.Kind != tt.kind || ev.Text != tt.text || ev.ThreadKey != key || ev.Platform != Platform {
				t.Fatalf("event %+v; want kind %s, text %q, thread %s", ev, tt.kind, tt.text, key)
			}
			if ev.ID != id || ev.MessageID != id || ev.User != "42" || ev.Channel != ch || len(ev.Roles) != 1 || ev.Roles[0] != "R1" {
				t.Fatalf("event %+v", ev)
			}
		})
	}

	t.Run("own messages ignored", func(t *testing.T) {
		s := newTestSender(t, srv)
		if err := s.Deliver(context.Background(), agentflow.Outbound{Thread: key, Key: "n1", Kind: agentflow.OutboundNotice,
			Text: agentflow.Text{Inline: mention + " !agent stop"}}); err != nil {
			t.Fatal(err)
		}
		rec.none(t)
	})

	t.Run("reply to the message", func(t *testing.T) {
		rec.setAnswer(func(bot.Event) *bot.Response {
			return &bot.Response{Text: "Session *x* on `local`.", Session: &agentflow.SessionView{Backend: "local"}}
		})
		defer rec.setAnswer(nil)
		id := srv.UserMessage(ch, "42", mention+" status", nil)
		rec.next(t)
		waitFor(t, srv, func(s *fakediscord.Server) bool {
			for _, m := range s.Messages(ch) {
				if m.ReferenceID == id {
					return true
				}
			}
			return false
		})
		msgs := srv.Messages(ch)
		reply := msgs[len(msgs)-1]
		if reply.ReferenceID != id || !strings.Contains(reply.Content, "Session") || !bytes.Contains(reply.Components, []byte(ActionFork)) {
			t.Fatalf("reply %+v", reply)
		}
		// A click on the status message's select is a command.
		if _, err := srv.ComponentClick(ch, reply.ID, "42", nil, ActionSwitch, "docker"); err != nil {
			t.Fatal(err)
		}
		if ev := rec.next(t); ev.Kind != bot.KindCommand || ev.Text != "switch docker" || ev.ThreadKey != key {
			t.Fatalf("event %+v", ev)
		}
	})
}

func TestInboundThreadPerSession(t *testing.T) {
	srv := newFake(t)
	rec := newRecorder()
	startInbound(t, srv, rec, func(c *InboundConfig) { c.ThreadPerSession = true })
	o := srv.Options()
	ch := srv.AddChannel("general", fakediscord.ChannelText)
	id := srv.UserMessage(ch, "42", "<@"+o.BotUserID+"> build it", nil)
	ev := rec.next(t)
	if ev.Kind != bot.KindMention || ev.ThreadKey != "" || ev.NewThreadKey != ThreadKey(o.GuildID, id) {
		t.Fatalf("event %+v", ev)
	}
	if th := srv.Threads(ch); len(th) != 1 || th[0].ID != id || th[0].Name != "build it" {
		t.Fatalf("threads %+v", th)
	}
	// In the thread, the thread is the session.
	srv.UserMessage(id, "42", "and test it", nil)
	if ev := rec.next(t); ev.Kind != bot.KindMessage || ev.ThreadKey != ThreadKey(o.GuildID, id) || ev.Channel != ch {
		t.Fatalf("event %+v", ev)
	}
}

// responses returns the interaction's responses of kind.
func responses(srv *fakediscord.Server, inv fakediscord.Invocation, kind string) []fakediscord.InteractionResponse {
	var out []fakediscord.InteractionResponse
	for _, r := range srv.InteractionResponses() {
		if r.InteractionID == inv.ID && r.Kind == kind {
			out = append(out, r)
		}
	}
	return out
}

func TestInboundSlashCommand(t *testing.T) {
	srv := newFake(t)
	rec := newRecorder()
	rec.setAnswer(func(ev bot.Event) *bot.Response {
		if strings.HasPrefix(ev.Text, "help") {
			return &bot.Response{Text: bot.Help(), Private: true}
		}
		if strings.HasPrefix(ev.Text, "fork") {
			return nil
		}
		if ev.Text == "status" {
			return &bot.Response{Text: "There is no session in this thread.", Private: true}
		}
		return &bot.Response{Text: "Switched to docker."}
	})
	startInbound(t, srv, rec, nil)
	o := srv.Options()
	ch := srv.AddChannel("general", fakediscord.ChannelText)

	inv := srv.SlashCommand(ch, "42", []string{"R1"}, CommandName,
		fakediscord.SubCommand("switch", fakediscord.StringOption("backend", "docker")))
	ev := rec.next(t)
	if ev.Kind != bot.KindCommand || ev.Text != "switch docker" || ev.ThreadKey != ThreadKey(o.GuildID, ch) || ev.ID != inv.ID || ev.User != "42" {
		t.Fatalf("event %+v", ev)
	}
	waitFor(t, srv, func(s *fakediscord.Server) bool { return len(responses(s, inv, "edit_original")) > 0 })
	cb := responses(srv, inv, "callback")
	if len(cb) != 1 || cb[0].Type != 5 || cb[0].Status >= 300 {
		t.Fatalf("callbacks %+v, want one deferred response", cb)
	}
	edit := responses(srv, inv, "edit_original")[0]
	if !bytes.Contains(edit.Body, []byte("Switched to docker.")) || edit.Status >= 300 {
		t.Fatalf("answer %+v", edit)
	}

	t.Run("private answer", func(t *testing.T) {
		inv := srv.SlashCommand(ch, "42", nil, CommandName, fakediscord.SubCommand("help"))
		rec.next(t)
		waitFor(t, srv, func(s *fakediscord.Server) bool { return len(responses(s, inv, "edit_original")) > 0 })
		cb := responses(srv, inv, "callback")
		if len(cb) != 1 || cb[0].Type != 5 || !bytes.Contains(cb[0].Body, []byte(`"flags":64`)) {
			t.Fatalf("callbacks %+v, want an ephemeral deferral", cb)
		}
		m, ok := srv.Message(responses(srv, inv, "edit_original")[0].MessageID)
		if !ok || m.Flags&fakediscord.FlagEphemeral == 0 || !strings.Contains(m.Content, "switch") {
			t.Fatalf("answer %+v", m)
		}
	})

	t.Run("private answer to a public deferral", func(t *testing.T) {
		inv := srv.SlashCommand(ch, "42", nil, CommandName, fakediscord.SubCommand("status"))
		rec.next(t)
		waitFor(t, srv, func(s *fakediscord.Server) bool { return len(responses(s, inv, "followup")) > 0 })
		if len(responses(srv, inv, "delete")) != 1 || len(responses(srv, inv, "edit_original")) != 0 {
			t.Fatalf("responses %+v", srv.InteractionResponses())
		}
		m, ok := srv.Message(responses(srv, inv, "followup")[0].MessageID)
		if !ok || m.Flags&fakediscord.FlagEphemeral == 0 || !strings.Contains(m.Content, "no session") {
			t.Fatalf("answer %+v", m)
		}
	})

	// The options of the verbs that take them arrive as Discord sends
	// them (integers as JSON numbers) and become the grammar's text.
	t.Run("options", func(t *testing.T) {
		tests := []struct {
			name string
			sub  fakediscord.Option
			want string
		}{
			{"model", fakediscord.SubCommand("model", fakediscord.StringOption("name", "claude-sonnet-4.5")), "model claude-sonnet-4.5"},
			{"policy set multi-word value", fakediscord.SubCommand("policy", fakediscord.StringOption("action", "set"),
				fakediscord.StringOption("key", "models"), fakediscord.StringOption("value", "gpt-4o  claude-sonnet-4.5 ")),
				"policy set models gpt-4o claude-sonnet-4.5"},
			{"policy reset", fakediscord.SubCommand("policy", fakediscord.StringOption("action", "reset"),
				fakediscord.StringOption("key", "max-turns")), "policy reset max-turns"},
			{"audit page", fakediscord.SubCommand("audit", fakediscord.IntegerOption("page", 3)), "audit --page 3"},
			{"list mine page", fakediscord.SubCommand("list", fakediscord.StringOption("scope", "mine"),
				fakediscord.IntegerOption("page", 2)), "list --mine --page 2"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				srv.SlashCommand(ch, "42", nil, CommandName, tt.sub)
				ev := rec.next(t)
				cmd, err := bot.Parse(ev.Text, testBackends)
				if err != nil || ev.Kind != bot.KindCommand || cmd.String() != tt.want {
					t.Fatalf("event text %q (%v); want %q", ev.Text, err, tt.want)
				}
			})
		}
	})

	t.Run("no answer removes the deferral", func(t *testing.T) {
		inv := srv.SlashCommand(ch, "42", nil, CommandName, fakediscord.SubCommand("fork",
			fakediscord.StringOption("backend", "local"), fakediscord.StringOption("title", "try it")))
		if ev := rec.next(t); ev.Text != "fork --backend local try it" {
			t.Fatalf("event %+v", ev)
		}
		waitFor(t, srv, func(s *fakediscord.Server) bool { return len(responses(s, inv, "delete")) > 0 })
	})
}

// TestHTTPRefusesBadSignatures: an interaction whose Ed25519 signature is
// wrong or missing, or valid over a timestamp six minutes old (a replay)
// or ahead, is answered 401 and reaches nothing.
func TestHTTPRefusesBadSignatures(t *testing.T) {
	srv := newFake(t)
	rec := newRecorder()
	in := startInbound(t, srv, rec, nil)
	hs := httptest.NewServer(in.HTTPHandler())
	t.Cleanup(hs.Close)
	url := hs.URL + "/discord/interactions"
	body := []byte(`{"id":"77","application_id":"` + srv.Options().AppID + `","type":2,"token":"t","channel_id":"1",` +
		`"data":{"name":"agent","type":1,"options":[{"type":1,"name":"stop"}]}}`)
	for _, tt := range []struct {
		name string
		mode fakediscord.SignMode
	}{{"tampered", fakediscord.SignTampered}, {"missing", fakediscord.SignNone},
		{"replayed six minutes later", fakediscord.SignStale}, {"from the future", fakediscord.SignFuture}} {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := srv.PostInteraction(url, body, tt.mode)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("status %d, want 401", resp.StatusCode)
			}
			rec.none(t)
		})
	}
	// The same interaction, signed now, is taken: the refusals above were
	// for the signature.
	resp, err := srv.PostInteraction(url, body, fakediscord.SignValid)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the validly signed interaction: status %d, want 200", resp.StatusCode)
	}
	if ev := rec.next(t); ev.Text != "stop" {
		t.Fatalf("event %+v, want the stop command", ev)
	}
}

func TestInboundHTTPInteractions(t *testing.T) {
	srv := newFake(t)
	rec := newRecorder()
	rec.setAnswer(func(bot.Event) *bot.Response { return &bot.Response{Text: "Stopped turn 3."} })
	in := startInbound(t, srv, rec, nil)
	hs := httptest.NewServer(in.HTTPHandler())
	t.Cleanup(hs.Close)
	url := hs.URL + "/discord/interactions"

	// PING → PONG (bad signatures: TestHTTPRefusesBadSignatures).
	if err := srv.VerifyInteractionsURL(url); err != nil {
		t.Fatal(err)
	}

	// A signed command is answered at once with a deferral, then handled.
	ch := srv.AddChannel("general", fakediscord.ChannelText)
	srv.SetInteractionsURL(url)
	inv := srv.SlashCommand(ch, "42", nil, CommandName, fakediscord.SubCommand("stop"))
	if ev := rec.next(t); ev.Text != "stop" || ev.Kind != bot.KindCommand {
		t.Fatalf("event %+v", ev)
	}
	waitFor(t, srv, func(s *fakediscord.Server) bool { return len(responses(s, inv, "edit_original")) > 0 })
	cb := responses(srv, inv, "callback")
	if len(cb) != 1 || cb[0].Via != "http" || cb[0].Type != 5 || cb[0].Status != http.StatusOK {
		t.Fatalf("callbacks %+v, want one deferred answer over HTTP", cb)
	}
	if e := responses(srv, inv, "edit_original")[0]; !bytes.Contains(e.Body, []byte("Stopped turn 3.")) {
		t.Fatalf("answer %+v", e)
	}

	// Not POST.
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET: status %d", resp.StatusCode)
	}
}
