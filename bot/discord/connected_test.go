package discordbot

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentbot/agentbot/internal/fakediscord"
)

// TestConnected follows the gateway connection the readiness probe
// reports: not connected before Start, connected once the fake gateway
// has said Ready, connected again after a dropped connection is resumed,
// and not connected after Close.
func TestConnected(t *testing.T) {
	srv := newFake(t)
	in, err := NewInbound(InboundConfig{Token: srv.Options().BotToken, AppID: srv.Options().AppID, GuildID: srv.Options().GuildID,
		Backends: testBackends, Workers: 1}, newRecorder())
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Connected(); err == nil || !strings.Contains(err.Error(), "not connected yet") {
		t.Fatalf("before Start: Connected() = %v", err)
	}
	if err := in.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		in.Shutdown(ctx)
	})
	until := func(what string, ok func(error) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !ok(in.Connected()) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: Connected() = %v", what, in.Connected())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	until("after Start", func(err error) bool { return err == nil })

	connects := srv.Connects()
	srv.DropConnections()
	waitFor(t, srv, func(s *fakediscord.Server) bool { return s.Connects() > connects && s.Connected() > 0 })
	until("after the reconnect", func(err error) bool { return err == nil })

	// discordgo writes one heartbeat right after connecting; closing
	// before it can leave a reconnect loop behind.
	waitFor(t, srv, func(s *fakediscord.Server) bool { return s.Heartbeats() >= s.Connects() })
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	until("after Close", func(err error) bool { return err != nil && strings.Contains(err.Error(), "disconnected") })
}
