package reliability_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	slackbot "github.com/agentbot/agentbot/bot/slack"
	"github.com/agentbot/agentbot/internal/fakeslack"
)

// answerWait bounds how long a message may take to be answered; a turn
// takes well under a second when nothing is wrong.
const answerWait = 90 * time.Second

// TestBotKilledAfterAckSlackRetries: the bot acknowledges a mention (HTTP
// 200) and is killed (SIGKILL) at once, before or after it handed the
// message to Temporal; it is started again and Slack retries the event
// (same body, X-Slack-Retry-Num: 1). The message is answered exactly once:
// one answer in the thread, one turn started at the model.
func TestBotKilledAfterAckSlackRetries(t *testing.T) {
	s := startStack(t)
	// The workspace's deliveries come to the test, which plays Slack's
	// part towards the bot: deliver, see the 2xx, kill, retry.
	captured := make(chan []byte, 16)
	capture := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		captured <- body
	}))
	t.Cleanup(capture.Close)
	s.slack.SetEventsURL(capture.URL)
	secret := s.slack.Options().SigningSecret
	send := func(t *testing.T, body []byte, retry int) int {
		t.Helper()
		resp, err := s.slack.SendSigned(s.url(slackbot.PathEvents), body, "application/json", time.Now(), secret, retry)
		if err != nil {
			t.Fatalf("delivering the event (retry %d): %v", retry, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}

	repeat(t, "2. bot killed right after acking a mention; Slack retries it: one turn", func(t *testing.T, i int) {
		token := fmt.Sprintf("s1run%dz", i)
		root := s.slack.PostUserMessage(channel, alice, "<@UBOT> sh: echo "+token, "")
		// Two deliveries: the message event and the app_mention.
		var mention []byte
		for range 2 {
			var body []byte
			select {
			case body = <-captured:
			case <-time.After(30 * time.Second):
				t.Fatal("the workspace did not deliver the mention")
			}
			var cb struct {
				Event struct{ Type string } `json:"event"`
			}
			if err := json.Unmarshal(body, &cb); err != nil {
				t.Fatal(err)
			}
			if cb.Event.Type == "app_mention" {
				mention = body
			} else if code := send(t, body, 0); code != http.StatusOK {
				t.Fatalf("the message event was answered %d", code)
			}
		}
		if mention == nil {
			t.Fatal("no app_mention delivered")
		}
		if code := send(t, mention, 0); code != http.StatusOK {
			t.Fatalf("the mention was answered %d", code)
		}
		s.killBot(t)
		s.startBot(t)
		if code := send(t, mention, 1); code != http.StatusOK {
			t.Fatalf("the retry was answered %d", code)
		}
		s.waitAnswer(t, root, token, answerWait)
		// A barrier: turns run one at a time, so once a later message
		// is answered, a second turn for the first would have run.
		after := fmt.Sprintf("s1run%dbarrier", i) // not containing token
		s.slack.SetEventsURL(s.url(slackbot.PathEvents))
		s.slack.PostUserMessage(channel, alice, "sh: echo "+after, root)
		s.waitAnswer(t, root, after, answerWait)
		s.slack.SetEventsURL(capture.URL)
		if n, turns := s.answers(root, token), s.turns("echo "+token); n != 1 || turns != 1 {
			t.Fatalf("the mention was answered %d times in %d turns, want 1 and 1:\n%s", n, turns, s.dumpThread(root))
		}
	})
}

// TestNewWithoutWorker: with no worker running, `/agent new` is answered
// within seconds that the session exists and is queued (not "Sorry,
// something went wrong"); once a worker runs, a message in its thread is
// answered.
func TestNewWithoutWorker(t *testing.T) {
	s := startStack(t)
	repeat(t, "9c. /agent new while no worker runs: queued, then answered", func(t *testing.T, i int) {
		s.killWorker(t)
		// Only what is said from now on counts.
		before := len(s.slack.Messages(channel))
		responsesBefore, ephemeralsBefore := len(s.slack.Responses()), len(s.slack.Ephemerals(channel))
		s.slack.SlashCommand(channel, alice, "new")
		// The bot opens the session's thread under a message of its
		// own, and answers there or through response_url.
		var root, answer string
		bad := ""
		ctx, cancel := contextWithTimeout(20 * time.Second)
		defer cancel()
		err := s.slack.WaitFor(ctx, func(fs *fakeslack.Server) bool {
			var texts []string
			msgs := fs.Messages(channel)
			for _, m := range msgs[min(before, len(msgs)):] {
				if m.BotID != "" && m.ThreadTS == "" && strings.HasPrefix(m.Text, "Session started by") {
					root = m.TS
				}
				if m.BotID != "" {
					texts = append(texts, m.Text)
				}
			}
			for _, r := range fs.Responses()[responsesBefore:] {
				texts = append(texts, r.Text)
			}
			for _, e := range fs.Ephemerals(channel)[ephemeralsBefore:] {
				texts = append(texts, e.Text)
			}
			for _, text := range texts {
				if strings.Contains(text, "Sorry, something went wrong") {
					bad = text
				}
				if strings.Contains(text, "Queued") && !strings.Contains(answer, "Queued") {
					answer = text
				}
			}
			return bad != "" || (root != "" && answer != "")
		})
		if bad != "" {
			t.Fatalf("/agent new with no worker answered %q", bad)
		}
		if err != nil {
			t.Fatalf("no answer saying the session is queued within 20 s (thread %q):\n%s", root, s.dumpThread(root))
		}
		s.startWorker(t)
		token := fmt.Sprintf("s2run%dz", i)
		s.slack.PostUserMessage(channel, alice, "sh: echo "+token, root)
		s.waitAnswer(t, root, token, answerWait)
	})
}

// TestReplyRightAfterMention: a reply sent in the thread the instant after
// the mention that starts it (no wait between them; the two deliveries
// race) is answered, and so is the mention.
func TestReplyRightAfterMention(t *testing.T) {
	s := startStack(t)
	repeat(t, "9d. a reply right after the mention that starts its thread", func(t *testing.T, i int) {
		first, second := fmt.Sprintf("s3run%dfirst", i), fmt.Sprintf("s3run%dsecond", i)
		root := s.slack.PostUserMessage(channel, alice, "<@UBOT> sh: echo "+first, "")
		s.slack.PostUserMessage(channel, alice, "sh: echo "+second, root)
		s.waitAnswer(t, root, first, answerWait)
		s.waitAnswer(t, root, second, answerWait)
	})
}

// TestTwentyMessagesTenThreads: ten new threads at once, each a mention
// and an immediate reply: all twenty messages are answered, each in its
// own thread.
func TestTwentyMessagesTenThreads(t *testing.T) {
	s := startStack(t)
	repeat(t, "9a. 20 messages into 10 new threads at once", func(t *testing.T, i int) {
		const threads = 10
		type sent struct{ root, token string }
		var (
			mu   sync.Mutex
			msgs []sent
			wg   sync.WaitGroup
		)
		for j := range threads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				first, second := fmt.Sprintf("s4run%dt%dfirst", i, j), fmt.Sprintf("s4run%dt%dsecond", i, j)
				root := s.slack.PostUserMessage(channel, alice, "<@UBOT> sh: echo "+first, "")
				s.slack.PostUserMessage(channel, alice, "sh: echo "+second, root)
				mu.Lock()
				msgs = append(msgs, sent{root, first}, sent{root, second})
				mu.Unlock()
			}()
		}
		wg.Wait()
		ctx, cancel := contextWithTimeout(2 * answerWait)
		defer cancel()
		_ = s.slack.WaitFor(ctx, func(*fakeslack.Server) bool {
			for _, m := range msgs {
				if s.answers(m.root, m.token) == 0 {
					return false
				}
			}
			return true
		})
		lost := 0
		for _, m := range msgs {
			if n := s.answers(m.root, m.token); n != 1 {
				lost++
				t.Errorf("%s in thread %s answered %d times:\n%s", m.token, m.root, n, s.dumpThread(m.root))
			}
		}
		if lost > 0 {
			t.Fatalf("%d of %d messages not answered exactly once in their thread", lost, len(msgs))
		}
	})
}
