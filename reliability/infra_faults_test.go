package reliability_test

// Issue 16, items 3, 4 and 5: the services around the bot fail and come
// back. Redis (a cache only) stops and starts empty; the Temporal dev
// server restarts on the same database between turns, during a turn and
// while a message arrives; a session's sandbox (a local directory, a
// Docker container) disappears between turns.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/agentbot/agentbot/agentflow"
	slackbot "github.com/agentbot/agentbot/bot/slack"
	"github.com/agentbot/agentbot/internal/fakeopenai"
	"github.com/agentbot/agentbot/internal/fakeslack"
	"github.com/agentbot/agentbot/internal/testenv"
	"github.com/agentbot/agentbot/store"
)

// TestRedisRestart: with Redis stopped, a reply in a thread and a new
// mention (and a reply in its thread) are answered, from Temporal alone.
// Redis then starts again, empty, on the same port: the bot's next
// messages fill the thread cache again (the keys are read from Redis
// itself), the event they came in is settled in Redis, and Slack's retry
// of it is dropped as a repeat. A retry of an event handled while Redis
// was down (so Redis never heard of it) starts no second turn either.
func TestRedisRestart(t *testing.T) {
	s := startStack(t)
	relay := newInfraRelay(t, s.url(slackbot.PathEvents))
	s.slack.SetEventsURL(relay.url())
	rdb := infraRedis(t, s)
	repeat(t, "3a. Redis stopped: a thread and a new mention answered from Temporal; started again empty: the cache fills, a Slack retry is dropped", func(t *testing.T, i int) {
		tok := func(name string) string { return fmt.Sprintf("r3run%d%s", i, name) }
		ctx, cancel := contextWithTimeout(5 * time.Minute)
		defer cancel()
		if err := s.redis.Restart(ctx); err != nil { // an earlier run may have failed with it stopped
			t.Fatal(err)
		}
		root := s.slack.PostUserMessage(channel, alice, "<@UBOT> sh: echo "+tok("first"), "")
		s.waitAnswer(t, root, tok("first"), answerWait)
		infraWaitThreadKey(t, rdb, s.threadKey(root))

		s.redis.Stop()
		// Without Redis the bot is degraded, not unready.
		if code, body := s.readyz(t); code != http.StatusOK || !strings.Contains(body, "degraded: redis") {
			t.Fatalf("with Redis stopped, the bot's /readyz says %d %q, want 200 and degraded: redis", code, body)
		}
		downTS := s.slack.PostUserMessage(channel, alice, "sh: echo "+tok("down"), root)
		s.waitAnswer(t, root, tok("down"), answerWait)
		root2 := s.slack.PostUserMessage(channel, bob, "<@UBOT> sh: echo "+tok("new"), "")
		s.waitAnswer(t, root2, tok("new"), answerWait)
		s.slack.PostUserMessage(channel, bob, "sh: echo "+tok("newreply"), root2)
		s.waitAnswer(t, root2, tok("newreply"), answerWait)

		if err := s.redis.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		if n, err := rdb.DBSize(ctx).Result(); err != nil || n != 0 {
			t.Fatalf("the restarted Redis holds %d keys (%v), want an empty one", n, err)
		}
		s.slack.PostUserMessage(channel, alice, "sh: echo "+tok("up1"), root)
		s.waitAnswer(t, root, tok("up1"), answerWait)
		s.slack.PostUserMessage(channel, bob, "sh: echo "+tok("up2"), root2)
		s.waitAnswer(t, root2, tok("up2"), answerWait)
		// The bot's Redis client may take a moment to dial again (go-redis
		// tries once a second after failed dials); its readiness probe, as
		// Kubernetes polls it, says when Redis answers it again.
		if err := infraWait(answerWait, func() bool {
			code, body := s.readyz(t)
			return code == http.StatusOK && !strings.Contains(body, "degraded: redis")
		}); err != nil {
			code, body := s.readyz(t)
			t.Fatalf("the bot's /readyz still says, with Redis back: %d %s", code, body)
		}
		againTS := s.slack.PostUserMessage(channel, alice, "sh: echo "+tok("again1"), root)
		s.waitAnswer(t, root, tok("again1"), answerWait)
		s.slack.PostUserMessage(channel, bob, "sh: echo "+tok("again2"), root2)
		s.waitAnswer(t, root2, tok("again2"), answerWait)
		// The cache fills again: both threads, the one started while
		// Redis was down included.
		infraWaitThreadKey(t, rdb, s.threadKey(root))
		infraWaitThreadKey(t, rdb, s.threadKey(root2))
		up, down := relay.message(t, againTS), relay.message(t, downTS)
		if v, err := rdb.Get(ctx, store.DefaultRedisPrefix+"event:slack:"+up.id).Result(); err != nil || v != "settled" {
			t.Fatalf("event %s (handled with Redis back) is %q in Redis (%v), want settled", up.id, v, err)
		}
		if fallback := `first seen \"slack:` + up.id; strings.Contains(s.logs(), fallback) {
			t.Fatalf("event %s was claimed in the bot's memory, not in Redis", up.id)
		}

		// Slack retries both deliveries.
		for _, ev := range []infraEvent{up, down} {
			resp, err := s.slack.SendSigned(s.url(slackbot.PathEvents), ev.body, "application/json", time.Now(), s.slack.Options().SigningSecret, 1)
			if err != nil {
				t.Fatalf("retrying event %s: %v", ev.id, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("the retry of event %s was answered %d", ev.id, resp.StatusCode)
			}
		}
		// The retry of again1 is dropped at the door (Redis has it settled);
		// that of down, which Redis never saw, goes to the session, which
		// drops the message ID it already has.
		dropped := `msg="dropped a repeated event" event_id=` + up.id
		handled := func() int { return infraCountLines(s.logs(), `msg="event handled"`, "event_id="+down.id) }
		if err := infraWait(answerWait, func() bool { return strings.Contains(s.logs(), dropped) && handled() >= 2 }); err != nil {
			t.Fatalf("the retries were not both taken (dropped %s: %v; event %s handled %d times)", up.id, strings.Contains(s.logs(), dropped), down.id, handled())
		}
		barrier := tok("barrier")
		s.slack.PostUserMessage(channel, alice, "sh: echo "+barrier, root)
		s.waitAnswer(t, root, barrier, answerWait)
		for _, name := range []string{"again1", "down"} {
			if n, turns := s.answers(root, tok(name)), s.turns("echo "+tok(name)); n != 1 || turns != 1 {
				t.Fatalf("%s was answered %d times in %d turns, want 1 and 1:\n%s", tok(name), n, turns, s.dumpThread(root))
			}
		}
	})
}

// TestTemporalRestartBetweenTurns: a session has two turns; the Temporal
// dev server restarts on the same database; the next message in the
// thread is answered, and the model is sent the whole conversation: the
// earlier turns' messages and answers.
func TestTemporalRestartBetweenTurns(t *testing.T) {
	s := startStack(t)
	repeat(t, "4a. Temporal restarted between turns: the next message answered, the conversation intact", func(t *testing.T, i int) {
		tok := func(name string) string { return fmt.Sprintf("t4arun%d%s", i, name) }
		root := s.slack.PostUserMessage(channel, alice, "<@UBOT> sh: echo "+tok("one"), "")
		s.waitAnswer(t, root, tok("one"), answerWait)
		s.slack.PostUserMessage(channel, alice, "sh: echo "+tok("two"), root)
		s.waitAnswer(t, root, tok("two"), answerWait)
		s.restartTemporal(t, nil)
		back := time.Now()
		s.slack.PostUserMessage(channel, alice, "sh: echo "+tok("three"), root)
		s.waitAnswer(t, root, tok("three"), answerWait)
		t.Logf("answered %v after Temporal was back", time.Since(back).Round(time.Millisecond))
		call, ok := s.firstCall(tok("three"))
		if !ok {
			t.Fatalf("the model was never asked for the turn of %s", tok("three"))
		}
		for _, name := range []string{"one", "two"} {
			asked := slices.ContainsFunc(call.Messages, func(m fakeopenai.Message) bool {
				return m.Role == "user" && strings.Contains(m.Content, "echo "+tok(name))
			})
			answered := slices.ContainsFunc(call.Messages, func(m fakeopenai.Message) bool {
				return m.Role == "assistant" && strings.HasPrefix(m.Content, "done.") && strings.Contains(m.Content, tok(name))
			})
			if !asked || !answered {
				t.Fatalf("the turn after the restart lost turn %q of the conversation (message kept: %v, answer kept: %v):\n%s",
					name, asked, answered, infraDumpCall(call))
			}
		}
		if n := s.answers(root, tok("three")); n != 1 {
			t.Fatalf("%s answered %d times, want 1:\n%s", tok("three"), n, s.dumpThread(root))
		}
	})
}

// TestTemporalRestartDuringShell: the Temporal dev server stops while a
// turn's shell command runs (it has written its mark in the workspace and
// sleeps), stays down until the command has ended (so the worker finishes
// the tool call with nobody to tell), and starts again on the same
// database. The turn completes with exactly one answer holding the
// command's output, the command ran once, and the next message works.
func TestTemporalRestartDuringShell(t *testing.T) {
	s := startStack(t)
	repeat(t, "4b. Temporal down while a shell command runs and ends: one answer with its output, the command ran once, the next message works", func(t *testing.T, i int) {
		tok := func(name string) string { return fmt.Sprintf("t4brun%d%s", i, name) }
		root := s.slack.PostUserMessage(channel, alice, "<@UBOT> sh: echo "+tok("warm"), "")
		s.waitAnswer(t, root, tok("warm"), answerWait)
		mark, ended := tok("runs"), tok("ended")
		s.slack.PostUserMessage(channel, alice, fmt.Sprintf("sh: echo x >> %s; sleep 5; echo %s; touch %s", mark, tok("slow"), ended), root)
		dir := s.localWorkspace(t, root)
		exists := func(name string) bool { _, err := os.Stat(filepath.Join(dir, name)); return err == nil }
		if err := infraWait(answerWait, func() bool { return exists(mark) }); err != nil {
			t.Fatalf("the command never started (no %s in %s)", mark, dir)
		}
		s.restartTemporal(t, func() {
			if exists(ended) {
				t.Errorf("the command had ended before Temporal stopped: the scenario did not happen")
			}
			if err := infraWait(answerWait, func() bool { return exists(ended) }); err != nil {
				t.Errorf("the command did not end while Temporal was down")
			}
			time.Sleep(time.Second) // the worker is done with the call
		})
		back := time.Now()
		s.waitAnswer(t, root, tok("slow"), answerWait)
		t.Logf("answered %v after Temporal was back", time.Since(back).Round(time.Millisecond))
		s.slack.PostUserMessage(channel, alice, fmt.Sprintf("sh: echo runs=$(wc -l < %s) %s", mark, tok("next")), root)
		s.waitAnswer(t, root, tok("next"), answerWait)
		if n, turns := s.answers(root, tok("slow")), s.turns(tok("slow")); n != 1 || turns != 1 {
			t.Fatalf("the turn was answered %d times in %d turns, want 1 and 1:\n%s", n, turns, s.dumpThread(root))
		}
		if !slices.ContainsFunc(s.slack.Thread(channel, root), func(m fakeslack.Message) bool {
			return isAnswer(m, "runs=1 "+tok("next"))
		}) {
			t.Fatalf("the command did not run exactly once:\n%s", s.dumpThread(root))
		}
	})
}

// TestTemporalRestartDuringModelCall: the Temporal dev server restarts
// while the model call of a turn is held open by the fake model; the call
// is then answered. The turn completes with exactly one answer and the
// next message works.
func TestTemporalRestartDuringModelCall(t *testing.T) {
	h := &infraHold{marker: "please hold"}
	s := startStack(t, withScript(h.wrap))
	repeat(t, "4c. Temporal restarted during a model call: one answer, the next message works", func(t *testing.T, i int) {
		tok := func(name string) string { return fmt.Sprintf("t4crun%d%s", i, name) }
		root := s.slack.PostUserMessage(channel, alice, "<@UBOT> sh: echo "+tok("warm"), "")
		s.waitAnswer(t, root, tok("warm"), answerWait)
		held, release := h.arm(tok("held"))
		defer release()
		s.slack.PostUserMessage(channel, alice, h.marker+"\nsh: echo "+tok("held"), root)
		select {
		case <-held:
		case <-time.After(answerWait):
			t.Fatal("the model was not called for the turn")
		}
		s.restartTemporal(t, nil)
		back := time.Now()
		release()
		s.waitAnswer(t, root, tok("held"), answerWait)
		t.Logf("answered %v after Temporal was back", time.Since(back).Round(time.Millisecond))
		s.slack.PostUserMessage(channel, alice, "sh: echo "+tok("next"), root)
		s.waitAnswer(t, root, tok("next"), answerWait)
		if n := s.answers(root, tok("held")); n != 1 {
			t.Fatalf("the turn was answered %d times, want 1:\n%s", n, s.dumpThread(root))
		}
	})
}

// TestTemporalDownMessage: a reply is posted in a session's thread while
// the Temporal dev server is down, and it stays down for longer than one
// call to it may take (the SDK's RPC timeout is 10 s). The message is not
// lost: once Temporal is back it is answered, once.
func TestTemporalDownMessage(t *testing.T) {
	s := startStack(t)
	repeat(t, "4d. a message posted while Temporal is down (20 s): answered once it is back", func(t *testing.T, i int) {
		tok := func(name string) string { return fmt.Sprintf("t4drun%d%s", i, name) }
		root := s.slack.PostUserMessage(channel, alice, "<@UBOT> sh: echo "+tok("before"), "")
		s.waitAnswer(t, root, tok("before"), answerWait)
		ephemerals := len(s.slack.Ephemerals(channel))
		s.restartTemporal(t, func() {
			s.slack.PostUserMessage(channel, alice, "sh: echo "+tok("down"), root)
			time.Sleep(20 * time.Second)
		})
		back := time.Now()
		err := infraWait(2*answerWait, func() bool { return s.answers(root, tok("down")) > 0 })
		t.Logf("answered %v after Temporal was back", time.Since(back).Round(time.Millisecond))
		if err != nil {
			var said []string
			for _, e := range s.slack.Ephemerals(channel)[ephemerals:] {
				said = append(said, e.Text)
			}
			t.Fatalf("the message sent while Temporal was down was never answered; the bot said privately %q; the thread:\n%s", said, s.dumpThread(root))
		}
		s.slack.PostUserMessage(channel, alice, "sh: echo "+tok("after"), root)
		s.waitAnswer(t, root, tok("after"), answerWait)
		if n := s.answers(root, tok("down")); n != 1 {
			t.Fatalf("the message was answered %d times, want 1:\n%s", n, s.dumpThread(root))
		}
	})
}

// TestLocalSandboxDeleted: a turn writes a file; after the turn (which
// snapshots the workspace) the session's local sandbox directory is
// deleted. The next turn finds the file restored from the snapshot, and
// its answer says the sandbox was gone and restored, and what was lost.
func TestLocalSandboxDeleted(t *testing.T) {
	s := startStack(t)
	repeat(t, "5a. local sandbox directory deleted between turns: the next turn restores the snapshot and says so", func(t *testing.T, i int) {
		s.sandboxLost(t, fmt.Sprintf("s5arun%d", i), nil, func(t *testing.T, v agentflow.SessionView) {
			if v.Backend != "local" {
				t.Fatalf("the session runs on %q, want local", v.Backend)
			}
			dir := filepath.Join(s.state, "sandboxes", v.SandboxID)
			if _, err := os.Stat(filepath.Join(dir, "sandbox.json")); err != nil {
				t.Fatalf("the session's sandbox %s is not where the local backend keeps it: %v", v.SandboxID, err)
			}
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
		})
	})
}

// TestDockerSandboxRemoved is TestLocalSandboxDeleted on the Docker
// backend: the session's container is removed (docker rm -f) between
// turns. Every container the sessions made is removed at the end.
func TestDockerSandboxRemoved(t *testing.T) {
	ctx, cancel := contextWithTimeout(time.Minute)
	defer cancel()
	if err := testenv.CheckDocker(ctx); err != nil {
		t.Fatal(err)
	}
	var (
		mu        sync.Mutex
		namespace string   // the dev server's namespace ID
		sessions  []string // workflow IDs
	)
	// The containers of the sessions (by their labels) go at the end.
	// Registered before the stack, so it runs after the worker stopped:
	// no container is made after it.
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		if namespace != "" {
			infraRemoveContainers(t, "label="+agentflow.LabelNamespace+"="+namespace)
		}
		for _, wf := range sessions {
			infraRemoveContainers(t, "label="+agentflow.LabelSession+"="+wf)
		}
	})
	s := startStack(t, withEnv("AGENTBOT_BACKENDS=local,docker", "AGENTBOT_DEFAULT_BACKEND=docker",
		"AGENTBOT_DOCKER_IMAGE="+testenv.TestImage()))
	nsCtx, nsCancel := contextWithTimeout(30 * time.Second)
	defer nsCancel()
	ns, err := s.temporalClient().WorkflowService().DescribeNamespace(nsCtx, &workflowservice.DescribeNamespaceRequest{Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	namespace = ns.GetNamespaceInfo().GetId()
	mu.Unlock()
	track := func(workflowID string) {
		mu.Lock()
		defer mu.Unlock()
		sessions = append(sessions, workflowID)
	}
	repeat(t, "5b. Docker sandbox container removed between turns: the next turn restores the snapshot and says so", func(t *testing.T, i int) {
		s.sandboxLost(t, fmt.Sprintf("s5brun%d", i), track, func(t *testing.T, v agentflow.SessionView) {
			if v.Backend != "docker" {
				t.Fatalf("the session runs on %q, want docker", v.Backend)
			}
			out, err := exec.Command("docker", "ps", "--all", "--quiet", "--no-trunc", "--filter", "label="+agentflow.LabelSession+"="+v.WorkflowID).Output()
			if err != nil {
				t.Fatalf("docker ps: %v", err)
			}
			if ids := strings.Fields(string(out)); len(ids) != 1 || ids[0] != v.SandboxID {
				t.Fatalf("the session's containers are %q, want its sandbox %s", ids, v.SandboxID)
			}
			if out, err := exec.Command("docker", "rm", "--force", "--volumes", v.SandboxID).CombinedOutput(); err != nil {
				t.Fatalf("docker rm: %v\n%s", err, out)
			}
		})
	})
}

// sandboxLost runs the scenario of item 5 in a new thread: a turn writes a
// file, remove takes the session's sandbox away, the next turn reads the
// file back and is told the sandbox was restored; the turn after that
// carries no such notice. track (nil: none) is given the session's
// workflow ID as soon as the thread exists.
func (s *stack) sandboxLost(t *testing.T, tok string, track func(workflowID string), remove func(t *testing.T, v agentflow.SessionView)) {
	t.Helper()
	file, content := tok+".txt", "kept "+tok
	root := s.slack.PostUserMessage(channel, alice, fmt.Sprintf("<@UBOT> write: %s <<< %s\nsh: echo %swrote", file, content, tok), "")
	if track != nil {
		track(agentflow.AgentWorkflowID(s.threadKey(root)))
	}
	s.waitAnswer(t, root, tok+"wrote", answerWait)
	// The answer is delivered after the turn's snapshot was taken.
	v := s.sessionState(t, root)
	if v.SandboxID == "" {
		t.Fatalf("the session has no sandbox after its turn: %+v", v)
	}
	remove(t, v)
	s.slack.PostUserMessage(channel, alice, fmt.Sprintf("sh: cat %s; echo; echo %safter", file, tok), root)
	answer := s.waitBotText(t, root, tok+"after")
	if !strings.Contains(answer, content) {
		t.Fatalf("the file written before the sandbox was lost is not back; the answer:\n%s", answer)
	}
	if !strings.Contains(answer, "restored the workspace from the last snapshot") {
		t.Fatalf("the answer does not say the sandbox was restored:\n%s", answer)
	}
	if !strings.Contains(answer, "nothing in the workspace was lost") {
		t.Fatalf("the answer does not say what was lost (nothing, the snapshot was taken after the last turn):\n%s", answer)
	}
	if w := s.sessionState(t, root); w.SandboxID == v.SandboxID || w.SandboxID == "" {
		t.Fatalf("the session's sandbox is %q after the restore, want a new one (it was %s)", w.SandboxID, v.SandboxID)
	}
	s.slack.PostUserMessage(channel, alice, "sh: echo "+tok+"later", root)
	if later := s.waitBotText(t, root, tok+"later"); strings.Contains(later, "sandbox was gone") {
		t.Fatalf("the notice came again with the next answer:\n%s", later)
	}
}

// waitBotText waits for the bot's answer (it starts with "done." or holds
// it after a notice) with token in thread root, in its final form (a
// streamed answer once its delivery edited it), and returns its text;
// there must be exactly one.
func (s *stack) waitBotText(t *testing.T, root, token string) string {
	t.Helper()
	find := func() []string {
		var out []string
		for _, m := range s.slack.Thread(channel, root) {
			if m.BotID != "" && strings.Contains(m.Text, "done.") && strings.Contains(m.Text, token) && isFinal(m) {
				out = append(out, m.Text)
			}
		}
		return out
	}
	if err := infraWait(answerWait, func() bool { return len(find()) > 0 }); err != nil {
		t.Fatalf("no answer with %q in thread %s:\n%s", token, root, s.dumpThread(root))
	}
	if got := find(); len(got) != 1 {
		t.Fatalf("%d answers with %q, want 1:\n%s", len(got), token, s.dumpThread(root))
	}
	return find()[0]
}

// readyz is the bot's answer to GET /readyz: status and body.
func (s *stack) readyz(t *testing.T) (int, string) {
	t.Helper()
	resp, err := http.Get(s.url("/readyz"))
	if err != nil {
		t.Fatalf("GET /readyz: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET /readyz: %v", err)
	}
	return resp.StatusCode, string(body)
}

// threadKey is the session key of the channel's thread root.
func (s *stack) threadKey(root string) string {
	return slackbot.ThreadKey(s.slack.Options().TeamID, channel, root)
}

// sessionState asks the session of thread root for its state.
func (s *stack) sessionState(t *testing.T, root string) agentflow.SessionView {
	t.Helper()
	ctx, cancel := contextWithTimeout(answerWait)
	defer cancel()
	v, err := agentflow.NewClient(s.temporalClient()).State(ctx, s.threadKey(root))
	if err != nil {
		t.Fatalf("the state of the session of %s: %v", root, err)
	}
	return v
}

// localWorkspace is the workspace directory of the local sandbox of the
// session of thread root.
func (s *stack) localWorkspace(t *testing.T, root string) string {
	t.Helper()
	v := s.sessionState(t, root)
	if v.SandboxID == "" || v.Backend != "local" {
		t.Fatalf("the session has no local sandbox: %+v", v)
	}
	return filepath.Join(s.state, "sandboxes", v.SandboxID, "workspace")
}

// firstCall is the first model request of the turn of the message with
// text (see turns).
func (s *stack) firstCall(text string) (fakeopenai.Call, bool) {
	for _, r := range s.model.Requests() {
		i, last := r.Call.LastUserMessage()
		if r.Status != http.StatusOK || i < 0 || !strings.Contains(last, text) {
			continue
		}
		if !slices.ContainsFunc(r.Call.Messages[i+1:], func(m fakeopenai.Message) bool { return m.Role == "assistant" || m.Role == "tool" }) {
			return r.Call, true
		}
	}
	return fakeopenai.Call{}, false
}

func infraDumpCall(c fakeopenai.Call) string {
	var b strings.Builder
	for _, m := range c.Messages {
		fmt.Fprintf(&b, "  %s: %q\n", m.Role, tail(m.Content, 200))
	}
	return b.String()
}

// infraHold holds the first model call of a turn whose message has marker
// and the armed token until released.
type infraHold struct {
	marker string

	mu      sync.Mutex
	token   string
	held    chan struct{} // closed when the call came
	release chan struct{} // closed to let it go
}

// arm holds the next first call for a message with token; release is safe
// to call more than once.
func (h *infraHold) arm(token string) (held <-chan struct{}, release func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.token, h.held, h.release = token, make(chan struct{}), make(chan struct{})
	rel := h.release
	var once sync.Once
	return h.held, func() { once.Do(func() { close(rel) }) }
}

func (h *infraHold) wrap(next fakeopenai.Script) fakeopenai.Script {
	return func(ctx context.Context, call fakeopenai.Call) (fakeopenai.Reply, error) {
		i, last := call.LastUserMessage()
		first := i >= 0 && !slices.ContainsFunc(call.Messages[i+1:], func(m fakeopenai.Message) bool { return m.Role == "assistant" })
		h.mu.Lock()
		var held, release chan struct{}
		if first && h.token != "" && strings.Contains(last, h.marker) && strings.Contains(last, h.token) {
			held, release = h.held, h.release
			h.token = "" // a retried call goes through
		}
		h.mu.Unlock()
		if held != nil {
			close(held)
			select {
			case <-release:
			case <-ctx.Done():
				return fakeopenai.Reply{}, ctx.Err()
			}
		}
		return next(ctx, call)
	}
}

// infraEvent is an Events API delivery the relay passed on.
type infraEvent struct {
	id, typ, ts string
	body        []byte
}

// infraRelay passes the workspace's Events API deliveries on to the bot,
// headers and body as they are, and keeps each, so that a test can play
// Slack's retry of any of them.
type infraRelay struct {
	srv *httptest.Server

	mu     sync.Mutex
	events []infraEvent
}

func newInfraRelay(t *testing.T, target string) *infraRelay {
	r := &infraRelay{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var cb struct {
			EventID string `json:"event_id"`
			Event   struct{ Type, TS string }
		}
		if json.Unmarshal(body, &cb) == nil && cb.EventID != "" {
			r.mu.Lock()
			r.events = append(r.events, infraEvent{id: cb.EventID, typ: cb.Event.Type, ts: cb.Event.TS, body: body})
			r.mu.Unlock()
		}
		out, err := http.NewRequestWithContext(req.Context(), http.MethodPost, target, bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		out.Header = req.Header.Clone()
		resp, err := http.DefaultClient.Do(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *infraRelay) url() string { return r.srv.URL }

// message is the message event (not the app_mention) of the message ts.
func (r *infraRelay) message(t *testing.T, ts string) infraEvent {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if e.typ == "message" && e.ts == ts {
			return e
		}
	}
	t.Fatalf("no message event for message %s went through the relay", ts)
	return infraEvent{}
}

// infraRedis is a client of the stack's Redis (it reconnects across
// restarts).
func infraRedis(t *testing.T, s *stack) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(s.redis.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// infraWaitThreadKey waits until Redis caches thread as the session's.
func infraWaitThreadKey(t *testing.T, rdb *redis.Client, thread string) {
	t.Helper()
	key := store.DefaultRedisPrefix + "thread:" + thread
	var last string
	err := infraWait(answerWait, func() bool {
		ctx, cancel := contextWithTimeout(5 * time.Second)
		defer cancel()
		raw, err := rdb.Get(ctx, key).Bytes()
		if err != nil {
			last = err.Error()
			return false
		}
		last = string(raw)
		var e store.ThreadEntry
		return json.Unmarshal(raw, &e) == nil && e.WorkflowID == agentflow.AgentWorkflowID(thread)
	})
	if err != nil {
		t.Fatalf("Redis does not cache %s as the thread's session (%s)", key, last)
	}
}

// infraWait polls cond every 50 ms for up to d.
func infraWait(d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not so after %v", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// infraCountLines counts the lines of logs that hold every one of parts.
func infraCountLines(logs string, parts ...string) int {
	n := 0
	for line := range strings.Lines(logs) {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
			n++
		}
	}
	return n
}

// infraRemoveContainers removes the containers that filter (a docker ps
// --filter) selects, with their anonymous volumes.
func infraRemoveContainers(t *testing.T, filter string) {
	out, err := exec.Command("docker", "ps", "--all", "--quiet", "--no-trunc", "--filter", filter).Output()
	if err != nil {
		t.Errorf("listing containers (%s): %v", filter, err)
		return
	}
	for _, id := range strings.Fields(string(out)) {
		if out, err := exec.Command("docker", "rm", "--force", "--volumes", id).CombinedOutput(); err != nil {
			t.Errorf("removing container %.12s: %v\n%s", id, err, out)
		}
	}
}
