package reliability_test

// Issue 16, item 6: the model endpoint fails. Each scenario injects a
// fault into the fake model for the messages carrying a marker of its own
// (a 500, a 429 with Retry-After, a hang, a rejected key), or takes the
// endpoint off the network, and checks that the turn is retried where
// retrying may help, ends at once with a clear error where it cannot, and
// that the session is not wedged: the next message is answered.

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbot/agentbot/internal/fakeopenai"
	"github.com/agentbot/agentbot/internal/fakeslack"
)

// modelFaults fails the first model step of the turns whose message
// carries a marker, a bounded number of times, and notes when each first
// step of such a turn reached the model, failed or not.
type modelFaults struct {
	mu    sync.Mutex
	rules map[string]*modelFault
}

type modelFault struct {
	left  int               // failures still to inject
	fail  fakeopenai.Script // the failure
	calls []time.Time       // when each first step of the marker's turn arrived
}

func newModelFaults() *modelFaults { return &modelFaults{rules: map[string]*modelFault{}} }

// add makes the first model step of the turn whose message contains marker
// fail n times with fail, then pass to the script.
func (f *modelFaults) add(marker string, n int, fail fakeopenai.Script) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules[marker] = &modelFault{left: n, fail: fail}
}

// calls returns when the first steps of marker's turn arrived, in order.
func (f *modelFaults) calls(marker string) []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r := f.rules[marker]; r != nil {
		return append([]time.Time(nil), r.calls...)
	}
	return nil
}

// wrap is the withScript wrapper.
func (f *modelFaults) wrap(next fakeopenai.Script) fakeopenai.Script {
	return func(ctx context.Context, call fakeopenai.Call) (fakeopenai.Reply, error) {
		if fail := f.match(call); fail != nil {
			return fail(ctx, call)
		}
		return next(ctx, call)
	}
}

// match records a first step of a marked turn and returns the failure to
// answer it with, or nil.
func (f *modelFaults) match(call fakeopenai.Call) fakeopenai.Script {
	if !firstStep(call) {
		return nil
	}
	_, last := call.LastUserMessage()
	f.mu.Lock()
	defer f.mu.Unlock()
	for marker, r := range f.rules {
		if !strings.Contains(last, marker) {
			continue
		}
		r.calls = append(r.calls, time.Now())
		if r.left > 0 {
			r.left--
			return r.fail
		}
		return nil
	}
	return nil
}

// firstStep says whether call is a turn's first model step: nothing after
// its last user message.
func firstStep(call fakeopenai.Call) bool {
	i, _ := call.LastUserMessage()
	if i < 0 {
		return false
	}
	for _, m := range call.Messages[i+1:] {
		if m.Role == "assistant" || m.Role == "tool" {
			return false
		}
	}
	return true
}

// failWith answers with e.
func failWith(e fakeopenai.HTTPError) fakeopenai.Script {
	return func(context.Context, fakeopenai.Call) (fakeopenai.Reply, error) {
		return fakeopenai.Reply{Error: &e}, nil
	}
}

// hang answers nothing until the client gives up.
func hang(ctx context.Context, _ fakeopenai.Call) (fakeopenai.Reply, error) {
	<-ctx.Done()
	return fakeopenai.Reply{}, ctx.Err()
}

// firstSteps returns the HTTP statuses of the requests the fake model
// received for the first step of the turn of the message containing text,
// in order (499: the client went away before the answer).
func (s *stack) firstSteps(text string) []int {
	var statuses []int
	for _, r := range s.model.Requests() {
		if _, last := r.Call.LastUserMessage(); firstStep(r.Call) && strings.Contains(last, text) {
			statuses = append(statuses, r.Status)
		}
	}
	return statuses
}

// failures returns the bot's messages in the thread root that say a turn
// failed: an answer saying sorry, or a progress message saying failed.
func (s *stack) failures(root string) []string {
	var out []string
	for _, m := range s.slack.Thread(channel, root) {
		if m.BotID != "" && (strings.Contains(m.Text, "Sorry") || strings.Contains(m.Text, "failed")) {
			out = append(out, m.Text)
		}
	}
	return out
}

// waitFailure waits up to d for the answer in the thread root that says
// why a turn failed ("Sorry — ..."), and returns it.
func (s *stack) waitFailure(t *testing.T, root string, d time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var msg string
	if err := s.slack.WaitFor(ctx, func(*fakeslack.Server) bool {
		for _, m := range s.slack.Thread(channel, root) {
			if m.BotID != "" && strings.Contains(m.Text, "Sorry") {
				msg = m.Text
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatalf("no message saying the turn failed in thread %s within %v:\n%s", root, d, s.dumpThread(root))
	}
	return msg
}

// answeredOnce checks that the message that printed token was answered
// once in root, with no failure said there, and that the session goes
// on: a following message in the thread is answered too.
func (s *stack) answeredOnce(t *testing.T, root, token, after string) {
	t.Helper()
	s.waitAnswer(t, root, token, answerWait)
	// Turns run one at a time: once the next message is answered, a
	// second answer to the first would be there.
	s.slack.PostUserMessage(channel, alice, "sh: echo "+after, root)
	s.waitAnswer(t, root, after, answerWait)
	if n := s.answers(root, token); n != 1 {
		t.Errorf("the message was answered %d times, want 1:\n%s", n, s.dumpThread(root))
	}
	if f := s.failures(root); len(f) > 0 {
		t.Errorf("the thread says a turn failed: %q\n%s", f, s.dumpThread(root))
	}
}

// TestModelServerErrors: the model answers the first step of a turn 500
// twice, then normally: the step is retried, the turn answered once, with
// no error in the chat.
func TestModelServerErrors(t *testing.T) {
	faults := newModelFaults()
	s := startStack(t, withScript(faults.wrap))
	repeat(t, "6a. model answers 500 twice, then OK: retried, one answer, no error in the chat, the next message answered", func(t *testing.T, i int) {
		token := fmt.Sprintf("m500run%dz", i)
		faults.add(token, 2, failWith(fakeopenai.HTTPError{Status: http.StatusInternalServerError}))
		root := s.slack.PostUserMessage(channel, alice, "<@UBOT> sh: echo "+token, "")
		s.answeredOnce(t, root, token, fmt.Sprintf("m500run%dafter", i))
		if got := s.firstSteps(token); fmt.Sprint(got) != "[500 500 200]" {
			t.Errorf("the first step reached the model as %v, want [500 500 200]", got)
		}
	})
}

// TestModelRateLimited: the model answers the first step of a turn 429
// with Retry-After: 3 once. The step is retried no sooner than that (the
// workflow's own backoff would retry after 1 s), and the turn answered
// once. The bound is the endpoint's request, not a speed: the test checks
// that the wait was at least as long as asked.
func TestModelRateLimited(t *testing.T) {
	const wait = 3 * time.Second
	faults := newModelFaults()
	s := startStack(t, withScript(faults.wrap))
	repeat(t, "6b. model answers 429 with Retry-After: 3: retried no sooner than asked, one answer, the next message answered", func(t *testing.T, i int) {
		token := fmt.Sprintf("m429run%dz", i)
		faults.add(token, 1, failWith(fakeopenai.HTTPError{Status: http.StatusTooManyRequests, Code: "rate_limit_exceeded",
			RetryAfter: fmt.Sprint(int(wait / time.Second))}))
		root := s.slack.PostUserMessage(channel, alice, "<@UBOT> sh: echo "+token, "")
		s.answeredOnce(t, root, token, fmt.Sprintf("m429run%dafter", i))
		if got := s.firstSteps(token); fmt.Sprint(got) != "[429 200]" {
			t.Fatalf("the first step reached the model as %v, want [429 200]", got)
		}
		calls := faults.calls(token)
		if len(calls) != 2 {
			t.Fatalf("%d first steps seen by the fault, want 2", len(calls))
		}
		gap := calls[1].Sub(calls[0])
		t.Logf("the retry came %v after the rate-limited call", gap)
		if gap < wait {
			t.Errorf("the retry came %v after the call answered Retry-After: %v", gap, wait)
		}
	})
}

// TestModelHangs: with AGENTBOT_MODEL_TIMEOUT=3s, the model does not
// answer the first step of a turn until the client gives up; the worker
// abandons the call after the timeout (not the model step's 5 minutes)
// and retries it, and the turn is answered once.
func TestModelHangs(t *testing.T) {
	const timeout = 3 * time.Second
	faults := newModelFaults()
	s := startStack(t, withScript(faults.wrap), withWorkerEnv("AGENTBOT_MODEL_TIMEOUT="+timeout.String()))
	repeat(t, "6c. model call hangs past AGENTBOT_MODEL_TIMEOUT=3s: abandoned and retried, one answer, the next message answered", func(t *testing.T, i int) {
		token := fmt.Sprintf("mhangrun%dz", i)
		faults.add(token, 1, hang)
		root := s.slack.PostUserMessage(channel, alice, "<@UBOT> sh: echo "+token, "")
		s.answeredOnce(t, root, token, fmt.Sprintf("mhangrun%dafter", i))
		if got := s.firstSteps(token); fmt.Sprint(got) != "[499 200]" {
			t.Errorf("the first step reached the model as %v, want [499 200] (abandoned, then answered)", got)
		}
		if calls := faults.calls(token); len(calls) == 2 && calls[1].Sub(calls[0]) < timeout {
			t.Errorf("the hung call was abandoned after %v, before the timeout %v", calls[1].Sub(calls[0]), timeout)
		}
	})
}

// TestModelKeyRejected: the model answers the first step of a turn 401
// invalid_api_key, its message quoting the key. Retrying cannot help: the
// model gets exactly one request, the thread gets an error naming the
// problem, without the key; the next message is answered.
func TestModelKeyRejected(t *testing.T) {
	faults := newModelFaults()
	s := startStack(t, withScript(faults.wrap))
	repeat(t, "6e. model rejects the key (401): one request, a clear error without the key, the next message answered", func(t *testing.T, i int) {
		token := fmt.Sprintf("m401run%dz", i)
		faults.add(token, 1, failWith(fakeopenai.HTTPError{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "invalid_api_key",
			Message: "Incorrect API key provided: " + modelKey + ". You can find your API key at https://platform.openai.com/account/api-keys."}))
		sent := time.Now()
		root := s.slack.PostUserMessage(channel, alice, "<@UBOT> sh: echo "+token, "")
		msg := s.waitFailure(t, root, answerWait)
		t.Logf("the error came %v after the message: %q", time.Since(sent).Round(time.Millisecond), msg)
		// The turn is over: no retry of the step can come any more.
		if got := s.firstSteps(token); fmt.Sprint(got) != "[401]" {
			t.Errorf("the first step reached the model as %v, want [401] (no retry)", got)
		}
		if !strings.Contains(msg, "rejected the API key (401)") {
			t.Errorf("the error does not say the key was rejected: %q", msg)
		}
		for _, leak := range []string{modelKey, modelKey[:6], "Incorrect API key"} {
			if strings.Contains(msg, leak) {
				t.Errorf("the error shows %q: %q", leak, msg)
			}
		}
		after := fmt.Sprintf("m401run%dafter", i)
		s.slack.PostUserMessage(channel, alice, "sh: echo "+after, root)
		s.waitAnswer(t, root, after, answerWait)
		if n := s.answers(root, token); n != 0 {
			t.Errorf("the refused message was answered %d times:\n%s", n, s.dumpThread(root))
		}
	})
}

// switchedEndpoint is the model endpoint as the worker sees it: a reverse
// proxy to the fake model on an address of its own, which the test takes
// off the network (nothing listens: connections are refused) and brings
// back.
type switchedEndpoint struct {
	addr string
	mu   sync.Mutex
	srv  *http.Server
}

func newSwitchedEndpoint(t *testing.T) *switchedEndpoint {
	e := &switchedEndpoint{addr: freeAddr(t)}
	t.Cleanup(e.down)
	return e
}

// url is the base URL for OPENAI_BASE_URL.
func (e *switchedEndpoint) url() string { return "http://" + e.addr + "/v1" }

// up starts serving, forwarding to target (the fake model's base URL).
func (e *switchedEndpoint) up(t *testing.T, target string) {
	t.Helper()
	u, err := url.Parse(strings.TrimSuffix(target, "/v1"))
	if err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	deadline := time.Now().Add(30 * time.Second)
	for {
		// The port may linger a moment after down.
		if ln, err = net.Listen("tcp", e.addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("listening on %s again: %v", e.addr, err)
	}
	srv := &http.Server{Handler: &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(u) }}}
	e.mu.Lock()
	e.srv = srv
	e.mu.Unlock()
	go srv.Serve(ln)
}

// down stops serving and closes every connection: the endpoint refuses
// connections until up.
func (e *switchedEndpoint) down() {
	e.mu.Lock()
	srv := e.srv
	e.srv = nil
	e.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

// unreachableLog is the worker's log line (text format) for each attempt
// of a model step that found the endpoint unreachable; the SDK's own line
// about the failed attempt quotes the error, not this.
const unreachableLog = `msg="the model endpoint could not be reached"`

// waitUnreachable waits up to d until the worker has logged at least n
// unreachable attempts, and returns how many it logged.
func (s *stack) waitUnreachable(t *testing.T, n int, d time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		got := strings.Count(s.logs(), unreachableLog)
		if got >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker logged %d unreachable model calls in %v, want %d", got, d, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestModelUnreachableThenBack: the model endpoint refuses connections
// while a turn's first step is tried twice, then comes back: the step is
// retried, the turn answered once with no error in the chat.
func TestModelUnreachableThenBack(t *testing.T) {
	ep := newSwitchedEndpoint(t)
	s := startStack(t, withWorkerEnv("OPENAI_BASE_URL="+ep.url()))
	repeat(t, "6d. model endpoint refuses connections for two attempts, then is back: retried, one answer, the next message answered", func(t *testing.T, i int) {
		token := fmt.Sprintf("mdownrun%dz", i)
		ep.down()
		before := strings.Count(s.logs(), unreachableLog)
		root := s.slack.PostUserMessage(channel, alice, "<@UBOT> sh: echo "+token, "")
		s.waitUnreachable(t, before+2, answerWait)
		ep.up(t, s.model.URL())
		s.answeredOnce(t, root, token, fmt.Sprintf("mdownrun%dafter", i))
		if got := s.firstSteps(token); fmt.Sprint(got) != "[200]" {
			t.Errorf("the first step reached the model as %v, want [200] (only once it was back)", got)
		}
	})
}

// TestModelUnreachableForGood: the model endpoint refuses connections
// through every attempt of a turn's first step: the step is retried, then
// the thread is told, in a sentence with a log reference and no internal
// address, that the model could not be reached — not silence. Once the
// endpoint is back, the next message is answered.
func TestModelUnreachableForGood(t *testing.T) {
	ep := newSwitchedEndpoint(t)
	s := startStack(t, withWorkerEnv("OPENAI_BASE_URL="+ep.url()))
	repeat(t, "6d. model endpoint refuses connections through every attempt: retried, then a clear error in the thread; the next message answered once it is back", func(t *testing.T, i int) {
		token := fmt.Sprintf("mgonerun%dz", i)
		ep.down()
		before := strings.Count(s.logs(), unreachableLog)
		root := s.slack.PostUserMessage(channel, alice, "<@UBOT> sh: echo "+token, "")
		// The retries back off 1+2+4+8+16 s.
		msg := s.waitFailure(t, root, 2*answerWait)
		attempts := strings.Count(s.logs(), unreachableLog) - before
		t.Logf("%d attempts, then: %q", attempts, msg)
		if attempts < 2 {
			t.Errorf("the step was tried %d times before the error, want retries", attempts)
		}
		for _, want := range []string{"the model endpoint could not be reached", "ref "} {
			if !strings.Contains(msg, want) {
				t.Errorf("the error does not say %q: %q", want, msg)
			}
		}
		// The reference finds the worker's log line with the details.
		if m := regexp.MustCompile(`\(ref ([0-9a-f]+)\)`).FindStringSubmatch(msg); m == nil {
			t.Errorf("no log reference in %q", msg)
		} else if !strings.Contains(s.logs(), unreachableLog+" ref="+m[1]) {
			t.Errorf("no worker log line with ref=%s", m[1])
		}
		_, port, _ := net.SplitHostPort(ep.addr)
		for _, leak := range []string{"127.0.0.1", port, "dial tcp", "connection refused"} {
			if strings.Contains(msg, leak) {
				t.Errorf("the error shows %q: %q", leak, msg)
			}
		}
		ep.up(t, s.model.URL())
		after := fmt.Sprintf("mgonerun%dafter", i)
		s.slack.PostUserMessage(channel, alice, "sh: echo "+after, root)
		s.waitAnswer(t, root, after, answerWait)
		if got := s.firstSteps(token); len(got) != 0 {
			t.Errorf("the first step reached the model as %v while it was down", got)
		}
	})
}
