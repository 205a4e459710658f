package reliability_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbot/agentbot/internal/fakeopenai"
	"github.com/agentbot/agentbot/internal/fakeslack"
	"github.com/agentbot/agentbot/internal/secretenv/secretenvtest"
)

// The worker faults of issue 16: the worker killed (SIGKILL) during a
// model call and during a long shell command (item 1), and stopped
// (SIGTERM) during a shell command, shorter or longer than the drain
// period the stack gives it (AGENTBOT_DRAIN_TIMEOUT=5s; item 8).
//
// A lost activity is noticed by its heartbeat timeout (agentflow's
// options: 30 s for a model call, 20 s for a tool call), so a run that
// loses one takes about that long.

// TestWorkerKilledDuringModelCall: the model holds the first call of a
// turn until the worker that made it is killed (SIGKILL), which the model
// sees as the call's client going away; while no worker runs, a second
// message is posted in the thread. A new worker finishes the turn: each
// message gets exactly one answer, each is one turn at the model, and
// the model is asked exactly as often as the turns need (the lost call
// once more).
func TestWorkerKilledDuringModelCall(t *testing.T) {
	hold := newModelHold()
	s := startStack(t, withScript(hold.wrap))
	t.Cleanup(hold.releaseAll) // before the model server closes
	repeat(t, "1a. worker SIGKILLed during a model call, a message posted while it is down: the turn completes, each message answered once", func(t *testing.T, i int) {
		first, second := fmt.Sprintf("w1arun%dfirst", i), fmt.Sprintf("w1arun%dsecond", i)
		held := hold.arm(first)
		root := s.slack.PostUserMessage(channel, alice, "<@UBOT> sh: echo "+first, "")
		select {
		case <-held.started:
		case <-time.After(answerWait):
			t.Fatalf("the model was not called for %q within %v:\n%s", first, answerWait, s.dumpThread(root))
		}
		s.killWorker(t)
		// The kill landed during the call: its client went away.
		select {
		case <-held.gone:
		case <-time.After(30 * time.Second):
			t.Fatal("the held model call's client is still there 30 s after the worker was killed")
		}
		s.slack.PostUserMessage(channel, alice, "sh: echo "+second, root)
		s.startWorker(t)
		s.waitAnswer(t, root, first, answerWait)
		s.waitAnswer(t, root, second, answerWait)
		barrier(t, s, root, fmt.Sprintf("w1arun%dbarrier", i))
		for _, token := range []string{first, second} {
			if n, turns := s.answers(root, token), s.turns("echo "+token); n != 1 || turns != 1 {
				t.Errorf("%s was answered %d times in %d turns, want 1 and 1", token, n, turns)
			}
		}
		// A turn of one command is two calls: the command, the answer.
		if ok, other := s.modelCalls("echo " + first); ok != 2 || other != 1 {
			t.Errorf("the model was called for the first message %d times with an answer and %d without, want 2 and 1 (the lost call)", ok, other)
		}
		if ok, other := s.modelCalls("echo " + second); ok != 2 || other != 0 {
			t.Errorf("the model was called for the second message %d times with an answer and %d without, want 2 and 0", ok, other)
		}
		if t.Failed() {
			t.Logf("thread:\n%s", s.dumpThread(root))
		}
	})
}

// TestWorkerKilledDuringShellCommand: the worker is killed (SIGKILL)
// while a long shell command runs, after the command wrote its line to a
// file of the workspace; a second message is posted while no worker
// runs; a new worker is started. The turn completes with one answer; the
// command is not run again (the file has one line, as a later command of
// the same turn reads it); the model was told that the command may have
// run and its outcome is unknown; the second message is answered too.
func TestWorkerKilledDuringShellCommand(t *testing.T) {
	s := startStack(t)
	repeat(t, "1b. worker SIGKILLed during a long shell command: one answer, the command ran once, the model told it was lost, no message lost", func(t *testing.T, i int) {
		token, second := fmt.Sprintf("w1brun%dafter", i), fmt.Sprintf("w1brun%dsecond", i)
		file := fmt.Sprintf("runs-w1b-%d.txt", i)
		long := "echo ran >> " + file + "; sleep 30; echo finished"
		root := s.slack.PostUserMessage(channel, alice, "<@UBOT> sh: "+long+"\nsh: echo "+token+" lines=$(grep -c ran "+file+")", "")
		s.waitWorkspaceFile(t, file, root)
		s.killWorker(t)
		s.slack.PostUserMessage(channel, alice, "sh: echo "+second, root)
		s.startWorker(t)
		s.waitAnswer(t, root, token, answerWait)
		s.waitAnswer(t, root, second, answerWait)
		barrier(t, s, root, fmt.Sprintf("w1brun%dbarrier", i))
		s.checkLostCommand(t, root, token, long)
		if n := s.answers(root, second); n != 1 {
			t.Errorf("the message posted while no worker ran was answered %d times, want 1", n)
		}
		if t.Failed() {
			t.Logf("thread:\n%s", s.dumpThread(root))
		}
	})
}

// TestSIGTERMDuringShortCommand: the worker gets SIGTERM while a command
// shorter than the drain period runs. It lets the command finish and
// exits; a new worker finishes the turn with the command's real output
// (it ran once, to the end) and answers the next message.
func TestSIGTERMDuringShortCommand(t *testing.T) {
	s := startStack(t)
	repeat(t, "8a. SIGTERM to the worker during a command shorter than the drain: the command finishes, its output reaches the answer, a new worker continues", func(t *testing.T, i int) {
		token, next := fmt.Sprintf("w8arun%ddrained", i), fmt.Sprintf("w8arun%dnext", i)
		file := fmt.Sprintf("runs-w8a-%d.txt", i)
		command := "echo ran >> " + file + "; sleep 2; echo " + token + " lines=$(grep -c ran " + file + ")"
		root := s.slack.PostUserMessage(channel, alice, "<@UBOT> sh: "+command, "")
		s.waitWorkspaceFile(t, file, root)
		s.signalWorker(t, syscall.SIGTERM)
		s.waitWorkerExit(t, time.Minute)
		s.startWorker(t)
		s.waitAnswer(t, root, token, answerWait)
		s.slack.PostUserMessage(channel, alice, "sh: echo "+next, root)
		s.waitAnswer(t, root, next, answerWait)
		if n, turns := s.answers(root, token), s.turns("echo ran >> "+file); n != 1 || turns != 1 {
			t.Errorf("the message was answered %d times in %d turns, want 1 and 1", n, turns)
		}
		results := s.toolResults(token)
		if len(results) != 1 || !strings.Contains(results[0], token+" lines=1") {
			t.Errorf("the model did not get the command's whole output, run once (want %q): %q", token+" lines=1", results)
		}
		if t.Failed() {
			t.Logf("thread:\n%s", s.dumpThread(root))
		}
	})
}

// TestSIGTERMDuringLongCommand: the worker gets SIGTERM while a command
// longer than the drain period runs, with a second worker running. The
// first worker exits after the drain period; the second finishes the
// turn: one answer, the command not run again, the model told the truth
// about it (it may have run; its outcome is unknown).
func TestSIGTERMDuringLongCommand(t *testing.T) {
	s := startStack(t)
	repeat(t, "8b. SIGTERM to the worker during a command longer than the drain: another worker finishes the turn, one answer, the command ran once, the model told", func(t *testing.T, i int) {
		token := fmt.Sprintf("w8brun%dafter", i)
		file := fmt.Sprintf("runs-w8b-%d.txt", i)
		long := "echo ran >> " + file + "; sleep 30; echo finished"
		root := s.slack.PostUserMessage(channel, alice, "<@UBOT> sh: "+long+"\nsh: echo "+token+" lines=$(grep -c ran "+file+")", "")
		// The command runs on the stack's worker; the other one starts
		// after, so that it does not take the command.
		s.waitWorkspaceFile(t, file, root)
		other := s.startOtherWorker(t)
		s.signalWorker(t, syscall.SIGTERM)
		s.waitWorkerExit(t, time.Minute)
		s.mu.Lock()
		s.worker = other // the next run stops this one
		s.mu.Unlock()
		s.waitAnswer(t, root, token, answerWait)
		barrier(t, s, root, fmt.Sprintf("w8brun%dbarrier", i))
		s.checkLostCommand(t, root, token, long)
		if t.Failed() {
			t.Logf("thread:\n%s", s.dumpThread(root))
		}
	})
}

// checkLostCommand checks a turn whose first command (long) was lost with
// its worker and whose second printed token and the lines of the file the
// first appends to: one answer, one turn, the file has one line, and the
// model was told the first command may have run, with an unknown outcome.
func (s *stack) checkLostCommand(t *testing.T, root, token, long string) {
	t.Helper()
	if n, turns := s.answers(root, token), s.turns(long); n != 1 || turns != 1 {
		t.Errorf("the message was answered %d times in %d turns, want 1 and 1", n, turns)
	}
	for _, m := range s.slack.Thread(channel, root) {
		if isAnswer(m, token) && !strings.Contains(m.Text, token+" lines=1") {
			t.Errorf("the command ran more (or less) than once: the answer is %q, want %q in it", m.Text, token+" lines=1")
		}
	}
	// Three calls: the long command, the next command, the answer.
	if ok, _ := s.modelCalls(long); ok != 3 {
		t.Errorf("the model was called %d times for the message, want 3", ok)
	}
	results := s.toolResults(long)
	if len(results) != 2 {
		t.Fatalf("the model got %d tool results, want 2: %q", len(results), results)
	}
	if r := results[0]; !strings.Contains(r, "may have run") || !strings.Contains(r, "outcome is unknown") || strings.Contains(r, "could not run") {
		t.Errorf("the model was not told that the lost command may have run: %q", r)
	}
}

// startOtherWorker starts another worker process on the stack's services
// (it is not s.worker) and waits until it polls; it is stopped at the end
// of the test.
func (s *stack) startOtherWorker(t *testing.T) *secretenvtest.Process {
	t.Helper()
	w := secretenvtest.Start(s.t, workerBin, s.env(append([]string{"AGENTBOT_HTTP_ADDR=127.0.0.1:0"}, s.cfg.workerEnv...)...))
	w.WaitOutput(t, "worker started", time.Minute)
	return w
}

// waitWorkspaceFile waits until a file of that name exists in a local
// sandbox's workspace (AGENTBOT_LOCAL_DIR is the state directory's
// sandboxes/<id>/workspace): the command that writes it has started.
func (s *stack) waitWorkspaceFile(t *testing.T, name, root string) {
	t.Helper()
	pattern := filepath.Join(s.state, "sandboxes", "*", "workspace", name)
	deadline := time.Now().Add(answerWait)
	for {
		if files, _ := filepath.Glob(pattern); len(files) > 0 {
			if data, err := os.ReadFile(files[0]); err == nil && len(data) > 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v: the command did not start:\n%s", pattern, answerWait, s.dumpThread(root))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// barrier posts a message in the thread and waits for its answer: turns
// run one at a time, so a turn run twice would have answered by then.
func barrier(t *testing.T, s *stack, root, token string) {
	t.Helper()
	s.slack.PostUserMessage(channel, alice, "sh: echo "+token, root)
	s.waitAnswer(t, root, token, answerWait)
}

// modelCalls counts the model requests of the turn of the message
// containing text: ok those answered 200, other the rest (a call whose
// client went away is recorded 499).
func (s *stack) modelCalls(text string) (ok, other int) {
	for _, r := range s.model.Requests() {
		if _, last := r.Call.LastUserMessage(); !strings.Contains(last, text) {
			continue
		}
		if r.Status == http.StatusOK {
			ok++
		} else {
			other++
		}
	}
	return ok, other
}

// toolResults is the tool results the model got in the last successful
// call of the turn of the message containing text, in order.
func (s *stack) toolResults(text string) []string {
	var out []string
	for _, r := range s.model.Requests() {
		i, last := r.Call.LastUserMessage()
		if r.Status != http.StatusOK || i < 0 || !strings.Contains(last, text) {
			continue
		}
		out = out[:0]
		for _, m := range r.Call.Messages[i+1:] {
			if m.Role == "tool" {
				out = append(out, m.Content)
			}
		}
	}
	return out
}

// modelHold holds the first model call of each armed message until its
// client goes away.
type modelHold struct {
	mu       sync.Mutex
	armed    map[string]*heldCall
	released chan struct{}
	once     sync.Once
}

// heldCall is the held call of a message: started is closed when the
// model received it, gone when its client went away.
type heldCall struct {
	started, gone chan struct{}
}

func newModelHold() *modelHold {
	return &modelHold{armed: map[string]*heldCall{}, released: make(chan struct{})}
}

// arm makes the next model call whose last user message contains mark
// wait until its client goes away.
func (h *modelHold) arm(mark string) *heldCall {
	c := &heldCall{started: make(chan struct{}), gone: make(chan struct{})}
	h.mu.Lock()
	h.armed[mark] = c
	h.mu.Unlock()
	return c
}

// releaseAll lets every held call go (answered as the script would), so
// that the model server can close.
func (h *modelHold) releaseAll() { h.once.Do(func() { close(h.released) }) }

func (h *modelHold) wrap(next fakeopenai.Script) fakeopenai.Script {
	return func(ctx context.Context, call fakeopenai.Call) (fakeopenai.Reply, error) {
		_, last := call.LastUserMessage()
		h.mu.Lock()
		var c *heldCall
		for mark, hc := range h.armed {
			if strings.Contains(last, mark) {
				c = hc
				delete(h.armed, mark)
				break
			}
		}
		h.mu.Unlock()
		if c == nil {
			return next(ctx, call)
		}
		close(c.started)
		select {
		case <-ctx.Done():
			close(c.gone)
			return fakeopenai.Reply{}, ctx.Err()
		case <-h.released:
			return next(ctx, call)
		}
	}
}

// TestWorkerKilledDuringStreamedAnswer: the worker is killed (SIGKILL)
// while the turn's answer streams into the thread (the model writes it
// slowly), and a new worker is started. The model step runs again on the
// new worker, which first removes the message the dead one left half
// streamed: the thread ends with one answer, in its final form, and no
// stream left open.
func TestWorkerKilledDuringStreamedAnswer(t *testing.T) {
	var mu sync.Mutex
	slow := map[string]bool{} // tokens whose answer is long; true: streamed slowly (the first time)
	s := startStack(t, withScript(func(next fakeopenai.Script) fakeopenai.Script {
		return func(ctx context.Context, call fakeopenai.Call) (fakeopenai.Reply, error) {
			r, err := next(ctx, call)
			if err != nil || len(r.ToolCalls) > 0 {
				return r, err
			}
			_, last := call.LastUserMessage()
			mu.Lock()
			defer mu.Unlock()
			for token, first := range slow {
				if strings.Contains(last, token) {
					r.Text += "\n" + strings.Repeat("Written slowly so that the worker dies while it streams. ", 20)
					if first {
						slow[token] = false
						r.Stream.Delay = 100 * time.Millisecond
					}
				}
			}
			return r, nil
		}
	}))
	repeat(t, "1c. worker SIGKILLed while an answer streams: the retry removes the half-streamed message, one answer stays", func(t *testing.T, i int) {
		token := fmt.Sprintf("w1crun%dstreamed", i)
		mu.Lock()
		slow[token] = true
		mu.Unlock()
		root := s.slack.PostUserMessage(channel, alice, "<@UBOT> sh: echo "+token, "")
		var partial fakeslack.Message
		if err := infraWait(answerWait, func() bool {
			for _, m := range s.slack.Thread(channel, root) {
				if m.BotID != "" && m.Streaming && strings.Contains(m.Text, token) {
					partial = m
					return true
				}
			}
			return false
		}); err != nil {
			t.Fatalf("the answer never streamed:\n%s", s.dumpThread(root))
		}
		s.killWorker(t)
		s.startWorker(t)
		answer := s.waitBotText(t, root, token)
		if !strings.Contains(answer, "Written slowly") {
			t.Errorf("the answer is not whole:\n%s", answer)
		}
		for _, m := range s.slack.Thread(channel, root) {
			if m.TS == partial.TS {
				t.Errorf("the half-streamed message of the dead worker is still there: %q", m.Text)
			}
			if m.Streaming {
				t.Errorf("a stream is left open: %q", m.Text)
			}
		}
		if n := s.answers(root, token); n != 1 {
			t.Errorf("%d answers with %s, want 1:\n%s", n, token, s.dumpThread(root))
		}
	})
}
