package slackbot_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
	slackbot "github.com/agentbot/agentbot/bot/slack"
	"github.com/agentbot/agentbot/internal/fakeslack"
	"github.com/agentbot/agentbot/internal/stacktest"
	"github.com/agentbot/agentbot/internal/testenv"
	"github.com/agentbot/agentbot/store"
)

// TestSlackEndToEnd drives the whole product from a (fake) Slack workspace
// over the signed HTTP Events API: the real Router, a real Temporal dev
// server and worker, real Redis, the local and Docker sandboxes and the fake
// model. Only Slack and the model are fakes, and they speak their wire
// protocols.
func TestSlackEndToEnd(t *testing.T) {
	ctx := context.Background()
	redisSrv := testenv.StartRedis(ctx, t)
	cache, err := store.NewRedisCache(redisSrv.URL(), store.RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cache.Close() })
	fs := fakeslack.New(fakeslack.Options{})
	t.Cleanup(fs.Close)
	sender, err := slackbot.NewSender(slackbot.SenderConfig{BotToken: "xoxb-fake", APIURL: fs.APIURL()})
	if err != nil {
		t.Fatal(err)
	}
	stack := stacktest.Start(t, map[string]agentflow.ChatSender{slackbot.Platform: sender})
	model := stack.Model

	// The gateway: Router and the Slack inbound over HTTP.
	access := bot.Access{Users: []string{"UALICE", "UBOB"}}
	router := &bot.Router{Sessions: stack.Sessions, Cache: cache, Access: access,
		Backends: []string{"local", "docker"}, DefaultBackend: "local"}
	in := slackbot.NewInbound(slackbot.InboundConfig{BotToken: "xoxb-fake", SigningSecret: "fake-signing-secret",
		APIURL: fs.APIURL(), Backends: router.Backends, Access: &access}, router, nil)
	if err := in.Start(ctx); err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewServer(in.HTTPHandler())
	t.Cleanup(gw.Close)
	t.Cleanup(func() { _ = in.Shutdown(context.Background()) })
	fs.SetEventsURL(gw.URL + slackbot.PathEvents)
	fs.SetSlashURL(gw.URL + slackbot.PathCommands)
	fs.SetInteractivityURL(gw.URL + slackbot.PathInteractivity)

	const ch = "C1"
	botReplies := func(threadTS string) []fakeslack.Message {
		var out []fakeslack.Message
		for _, m := range fs.Thread(ch, threadTS) {
			if m.BotID != "" {
				out = append(out, m)
			}
		}
		return out
	}
	// waitReply waits for a bot message in the thread containing want.
	waitReply := func(threadTS, want string) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		err := fs.WaitFor(wctx, func(*fakeslack.Server) bool {
			for _, m := range botReplies(threadTS) {
				if strings.Contains(m.Text, want) {
					return true
				}
			}
			return false
		})
		if err != nil {
			var texts []string
			for _, m := range fs.Thread(ch, threadTS) {
				texts = append(texts, m.User+": "+m.Text)
			}
			t.Fatalf("no reply with %q in thread %s:\n%s", want, threadTS, strings.Join(texts, "\n---\n"))
		}
	}
	modelCalls := func() int { return len(model.Requests()) }

	// 1. A mention in the channel starts a session in a thread under it;
	// the answer lands in that thread.
	root := fs.PostUserMessage(ch, "UALICE", "<@UBOT> write: notes.txt <<< hello from slack", "")
	waitReply(root, "wrote 16 bytes to notes.txt")
	// 2. A plain reply in the thread continues it.
	fs.PostUserMessage(ch, "UALICE", "sh: cat notes.txt", root)
	waitReply(root, "hello from slack")

	// 2b. A file shared into the thread lands in the workspace.
	fs.ShareFile(ch, "UALICE", root, "data.csv", []byte("id,name\n1,shared-file-content\n"))
	waitReply(root, "uploads/data.csv")
	fs.PostUserMessage(ch, "UALICE", "sh: cat uploads/data.csv", root)
	waitReply(root, "shared-file-content")

	// 3. "@bot switch docker" in the thread moves it to Docker.
	fs.PostUserMessage(ch, "UALICE", "<@UBOT> switch docker", root)
	waitReply(root, "Switched local → docker")
	fs.PostUserMessage(ch, "UALICE", "sh: cat notes.txt; test -f /.dockerenv && echo in-a-container", root)
	waitReply(root, "in-a-container")

	// 4. "!agent fork" opens a new thread; both go on independently.
	before := len(fs.Messages(ch))
	// Options come before the title: the fork is on local.
	fs.PostUserMessage(ch, "UALICE", "!agent fork --backend local onto local", root)
	waitReply(root, "Forked into")
	var forkRoot string
	if err := fs.WaitFor(ctx, func(*fakeslack.Server) bool {
		for _, m := range fs.Messages(ch)[before:] {
			if m.ThreadTS == "" && m.BotID != "" && strings.Contains(m.Text, "Fork") {
				forkRoot = m.TS
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatal(err)
	}
	waitReply(forkRoot, "Forked from")
	fs.PostUserMessage(ch, "UALICE", "sh: echo only-in-fork > fork.txt; ls; test -f /.dockerenv || echo not-in-a-container", forkRoot)
	waitReply(forkRoot, "not-in-a-container")
	waitReply(forkRoot, "fork.txt")
	fs.PostUserMessage(ch, "UALICE", "sh: ls; echo listed-parent", root)
	waitReply(root, "listed-parent")
	for _, m := range botReplies(root) {
		if strings.Contains(m.Text, "fork.txt") {
			t.Fatalf("the parent sees the fork's file: %s", m.Text)
		}
	}

	// 5. A retried delivery (X-Slack-Retry-Num) starts no second turn.
	body := eventBody(t, "EvRETRY1", ch, "UBOB", "sh: echo retried-once", root)
	resp, err := fs.SendSigned(gw.URL+slackbot.PathEvents, body, "application/json", time.Now(), "fake-signing-secret", 0)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("first delivery: %v %v", resp, err)
	}
	// Wait for the answer itself (the progress message already shows the
	// command), so that the turn's model calls are all counted.
	waitReply(root, "stdout:\nretried-once")
	calls := modelCalls()
	resp, err = fs.SendSigned(gw.URL+slackbot.PathEvents, body, "application/json", time.Now(), "fake-signing-secret", 1)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("retried delivery: %v %v", resp, err)
	}

	// 6. A bad or stale signature gets 401 and starts nothing.
	bad := eventBody(t, "EvBAD1", ch, "UALICE", "sh: echo must-not-run", root)
	for name, send := range map[string]func() (*http.Response, error){
		"wrong secret": func() (*http.Response, error) {
			return fs.SendSigned(gw.URL+slackbot.PathEvents, bad, "application/json", time.Now(), "not-the-secret", 0)
		},
		"stale": func() (*http.Response, error) {
			return fs.SendSigned(gw.URL+slackbot.PathEvents, bad, "application/json", time.Now().Add(-6*time.Minute), "fake-signing-secret", 0)
		},
	} {
		resp, err := send()
		if err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%s: got %v %v, want 401", name, resp, err)
		}
	}

	// 7. A user outside the allowlist gets a polite refusal; nothing runs.
	fs.PostUserMessage(ch, "UCAROL", "<@UBOT> sh: echo carol-was-here", "")
	if err := fs.WaitFor(ctx, func(*fakeslack.Server) bool {
		for _, m := range fs.Ephemerals(ch) {
			if m.Recipient == "UCAROL" && strings.Contains(m.Text, "allowlist") {
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatal("no refusal for the user outside the allowlist")
	}
	time.Sleep(2 * time.Second) // time for anything wrongly started to reach the model
	if got := modelCalls(); got != calls {
		t.Fatalf("the model was called %d more times after a retried event, bad signatures and a refused user", got-calls)
	}

	// 8. Redis stopped mid-test: the thread still works (from Temporal).
	redisSrv.Stop()
	fs.PostUserMessage(ch, "UBOB", "sh: echo works-without-redis", root)
	waitReply(root, "works-without-redis")
	if err := redisSrv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	fs.PostUserMessage(ch, "UALICE", "sh: echo redis-is-back", root)
	waitReply(root, "redis-is-back")
}

// eventBody is an Events API message event in a thread, as Slack sends it.
func eventBody(t *testing.T, eventID, channel, user, text, threadTS string) []byte {
	t.Helper()
	ts := fmt.Sprintf("%d.%06d", time.Now().Unix(), time.Now().Nanosecond()/1000)
	body, err := json.Marshal(map[string]any{
		"token": "unused", "team_id": "T0001", "api_app_id": "AFAKE", "type": "event_callback",
		"event_id": eventID, "event_time": time.Now().Unix(),
		"event": map[string]any{
			"type": "message", "channel": channel, "user": user, "text": text, "ts": ts,
			"thread_ts": threadTS, "channel_type": "channel", "event_ts": ts,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return body
}
