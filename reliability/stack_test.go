// Package reliability_test runs the real gateway (cmd/bot) and worker
// (cmd/worker) as separate processes against a real Temporal dev server
// (with a file database), a real redis-server, Docker, the fake Slack
// workspace over its signed HTTP APIs and the fake model, and repeats each
// scenario of issues 11 and 16 (faults on purpose, bad input, secrets)
// -runs times, counting how often it held. Every scenario must hold every
// time; make reliability turns the counts into docs/reliability.md.
//
//	go test -race ./reliability/ -runs=20 -timeout 180m
package reliability_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

	slackbot "github.com/agentbot/agentbot/bot/slack"
	"github.com/agentbot/agentbot/internal/devserver"
	"github.com/agentbot/agentbot/internal/fakeopenai"
	"github.com/agentbot/agentbot/internal/fakeslack"
	"github.com/agentbot/agentbot/internal/secretenv/secretenvtest"
	"github.com/agentbot/agentbot/internal/testenv"
)

var runs = flag.Int("runs", 1, "how many times each scenario runs (make reliability: 20)")

// The binaries under test, built once by TestMain.
var botBin, workerBin string

// The people and the channel of the workspace: alice and bob may use the
// bot, root is an admin, eve is a stranger to it.
const (
	alice    = "UALICE"
	bob      = "UBOB"
	root     = "UROOT"
	eve      = "UEVE"
	channel  = "C0REL"
	admins   = root
	allowed  = alice + "," + bob
	modelKey = "sk-SECRET-model-3f9a0c7e5b1d2846"
)

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "agentbot-reliability-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := 1
	if err = build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		code = m.Run()
		printTally()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// build builds cmd/bot and cmd/worker into dir, in one go command.
func build(dir string) error {
	botBin, workerBin = filepath.Join(dir, "bot"), filepath.Join(dir, "worker")
	for _, b := range []struct{ out, pkg string }{{botBin, "../cmd/bot"}, {workerBin, "../cmd/worker"}} {
		cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
		}
	}
	return nil
}

// tally is held/total per scenario, printed after the tests.
var tally = struct {
	sync.Mutex
	m map[string]count
}{m: map[string]count{}}

// count is what one scenario came to: how often it held of how many
// runs, which test ran it, and its time in all.
type count struct {
	held, total int
	test        string
	elapsed     time.Duration
}

// record sets the count of scenario, run by t.
func record(t *testing.T, scenario string, held, total int, elapsed time.Duration) {
	tally.Lock()
	defer tally.Unlock()
	tally.m[scenario] = count{held, total, t.Name(), elapsed}
}

// printTally prints one line per scenario,
//
//	reliability: <scenario>\t<held>/<total>\t<test>\t<seconds>
//
// which cmd/reliabilityreport reads into docs/reliability.md.
func printTally() {
	tally.Lock()
	defer tally.Unlock()
	names := make([]string, 0, len(tally.m))
	for n := range tally.m {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := tally.m[n]
		fmt.Printf("reliability: %s\t%d/%d\t%s\t%.1f\n", n, c.held, c.total, c.test, c.elapsed.Seconds())
	}
}

// repeat runs one scenario -runs times as subtests run1, run2, … and
// requires that it held every time.
func repeat(t *testing.T, scenario string, run func(t *testing.T, i int)) {
	held := 0
	began := time.Now()
	for i := 1; i <= *runs; i++ {
		if t.Run("run"+strconv.Itoa(i), func(t *testing.T) { run(t, i) }) {
			held++
		}
	}
	record(t, scenario, held, *runs, time.Since(began))
	t.Logf("%s: held %d/%d", scenario, held, *runs)
	if held != *runs {
		t.Fatalf("%s held %d of %d times", scenario, held, *runs)
	}
}

// stack is one Temporal dev server, redis-server, fake Slack workspace and
// fake model, and the real bot and worker processes on them.
type stack struct {
	t        *testing.T
	cfg      stackConfig
	temporal *testsuite.DevServer
	dbFile   string // the dev server's database, kept across restarts
	redis    *testenv.RedisServer
	slack    *fakeslack.Server
	model    *fakeopenai.Server
	state    string
	httpAddr string

	mu      sync.Mutex
	bot     *secretenvtest.Process
	worker  *secretenvtest.Process
	oldLogs []string // output of processes that were killed
}

// stackConfig is what a scenario changes of the stack; see the options.
type stackConfig struct {
	// script wraps the fake model's DirectiveScript (nil: as it is).
	script func(next fakeopenai.Script) fakeopenai.Script
	// model adjusts the fake model's options.
	model func(*fakeopenai.Options)
	// slack adjusts the fake Slack workspace's options (tokens, ...).
	slack func(*fakeslack.Options)
	// env is added to both processes' environment, workerEnv to the
	// worker's (later entries win).
	env, workerEnv []string
}

// option changes the stack a scenario starts.
type option func(*stackConfig)

// withScript wraps the fake model's script, e.g. to inject faults.
func withScript(wrap func(next fakeopenai.Script) fakeopenai.Script) option {
	return func(c *stackConfig) { c.script = wrap }
}

// withModel adjusts the fake model's options (latency, key, ...).
func withModel(f func(*fakeopenai.Options)) option {
	return func(c *stackConfig) { c.model = f }
}

// withSlack adjusts the fake Slack workspace's options (bot token,
// signing secret, ...); the processes are given its tokens.
func withSlack(f func(*fakeslack.Options)) option {
	return func(c *stackConfig) { c.slack = f }
}

// withEnv adds NAME=value entries to both processes' environment.
func withEnv(kv ...string) option { return func(c *stackConfig) { c.env = append(c.env, kv...) } }

// withWorkerEnv adds NAME=value entries to the worker's environment.
func withWorkerEnv(kv ...string) option {
	return func(c *stackConfig) { c.workerEnv = append(c.workerEnv, kv...) }
}

// startStack starts the services and a worker and a bot; the events,
// slash commands and interactions of the workspace go to the bot.
func startStack(t *testing.T, opts ...option) *stack {
	t.Helper()
	s := &stack{t: t, state: t.TempDir()}
	for _, o := range opts {
		o(&s.cfg)
	}
	s.dbFile = filepath.Join(t.TempDir(), "temporal.db")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s.startTemporal(t, "")
	t.Cleanup(func() {
		s.mu.Lock()
		ts := s.temporal
		s.mu.Unlock()
		if ts != nil {
			ts.Stop()
		}
	})
	s.redis = testenv.StartRedis(ctx, t)
	var sopts fakeslack.Options
	if s.cfg.slack != nil {
		s.cfg.slack(&sopts)
	}
	s.slack = fakeslack.New(sopts)
	t.Cleanup(s.slack.Close)
	mopts := fakeopenai.Options{Script: fakeopenai.DirectiveScript()}
	if s.cfg.script != nil {
		mopts.Script = s.cfg.script(mopts.Script)
	}
	if s.cfg.model != nil {
		s.cfg.model(&mopts)
	}
	s.model = fakeopenai.New(mopts)
	t.Cleanup(s.model.Close)
	s.httpAddr = freeAddr(t)
	s.slack.SetEventsURL(s.url(slackbot.PathEvents))
	s.slack.SetSlashURL(s.url(slackbot.PathCommands))
	s.slack.SetInteractivityURL(s.url(slackbot.PathInteractivity))
	// On failure, what the processes said.
	t.Cleanup(func() {
		if t.Failed() {
			s.mu.Lock()
			defer s.mu.Unlock()
			logs := slices.Clone(s.oldLogs)
			if s.bot != nil {
				logs = append(logs, "bot (current):\n"+s.bot.Output())
			}
			if s.worker != nil {
				logs = append(logs, "worker (current):\n"+s.worker.Output())
			}
			for _, l := range logs {
				t.Logf("%s", tail(l, 12000))
			}
		}
	})
	s.startWorker(t)
	s.startBot(t)
	return s
}

func (s *stack) url(path string) string { return "http://" + s.httpAddr + path }

// startTemporal starts the dev server on s.dbFile, at hostPort (empty: a
// free port).
func (s *stack) startTemporal(t *testing.T, hostPort string) {
	t.Helper()
	tbin, err := devserver.FindBinary(os.Getenv("AGENTBOT_TEMPORAL_BIN"))
	if err != nil {
		t.Fatalf("the tests need the temporal CLI (run scripts/setup.sh --test): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tlog := &testenv.Buffer{}
	var ts *testsuite.DevServer
	for attempt := 0; ; attempt++ {
		ts, err = testsuite.StartDevServer(ctx, testsuite.DevServerOptions{
			ExistingPath:  tbin,
			DBFilename:    s.dbFile,
			LogLevel:      "error",
			Stdout:        tlog,
			Stderr:        tlog,
			ClientOptions: &client.Options{HostPort: hostPort, Namespace: "default", Logger: testenv.Logger()},
		})
		// The old server's port can linger a moment after it stopped.
		if err == nil || hostPort == "" || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("starting the Temporal dev server (%s; run scripts/setup.sh --test): %v\n%s", tbin, err, tlog.String())
	}
	s.mu.Lock()
	s.temporal = ts
	s.mu.Unlock()
}

// restartTemporal stops the dev server and starts it again on the same
// database file and port; the bot and the worker are left to reconnect.
// between is called while it is down (nil: nothing).
func (s *stack) restartTemporal(t *testing.T, between func()) {
	t.Helper()
	s.mu.Lock()
	ts := s.temporal
	s.temporal = nil
	s.mu.Unlock()
	hostPort := ts.FrontendHostPort()
	if err := ts.Stop(); err != nil {
		t.Logf("stopping the dev server: %v", err)
	}
	if between != nil {
		between()
	}
	s.startTemporal(t, hostPort)
}

// temporalClient is a client of the current dev server.
func (s *stack) temporalClient() client.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.temporal.Client()
}

// signalWorker sends sig to the worker process (it stays s.worker until
// it exits: see waitWorkerExit).
func (s *stack) signalWorker(t *testing.T, sig os.Signal) {
	t.Helper()
	s.mu.Lock()
	w := s.worker
	s.mu.Unlock()
	if err := w.Cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// waitWorkerExit waits up to d for the worker to exit (after a signal)
// and forgets it.
func (s *stack) waitWorkerExit(t *testing.T, d time.Duration) {
	t.Helper()
	s.mu.Lock()
	w := s.worker
	s.mu.Unlock()
	select {
	case <-w.Done():
	case <-time.After(d):
		t.Fatalf("the worker still runs %v after the signal:\n%s", d, tail(w.Output(), 4000))
	}
	s.mu.Lock()
	s.worker = nil
	s.oldLogs = append(s.oldLogs, "worker (exited):\n"+w.Output())
	s.mu.Unlock()
}

// logs is everything the bot and worker processes of the stack wrote so
// far, those that ended included.
func (s *stack) logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	all := slices.Clone(s.oldLogs)
	if s.bot != nil {
		all = append(all, s.bot.Output())
	}
	if s.worker != nil {
		all = append(all, s.worker.Output())
	}
	return strings.Join(all, "\n")
}

// env is the environment both binaries run with.
func (s *stack) env(extra ...string) []string {
	s.mu.Lock()
	temporalAddr := s.temporal.FrontendHostPort()
	s.mu.Unlock()
	env := append([]string{
		"HOME=" + s.state, "PATH=" + os.Getenv("PATH"),
		"AGENTBOT_STATE_DIR=" + s.state,
		"TEMPORAL_ADDRESS=" + temporalAddr,
		"REDIS_URL=" + s.redis.URL(),
		"OPENAI_BASE_URL=" + s.model.URL(), "OPENAI_API_KEY=" + modelKey,
		"SLACK_BOT_TOKEN=" + s.slack.Options().BotToken,
		"SLACK_SIGNING_SECRET=" + s.slack.Options().SigningSecret,
		"AGENTBOT_SLACK_API_URL=" + s.slack.APIURL(),
		"AGENTBOT_HTTP_ADDR=" + s.httpAddr,
		"AGENTBOT_ALLOWED_USERS=" + allowed, "AGENTBOT_ADMINS=" + admins,
		"AGENTBOT_UNSAFE_LOCAL=true", "AGENTBOT_BACKENDS=local", "AGENTBOT_DEFAULT_BACKEND=local",
		"AGENTBOT_DRAIN_TIMEOUT=5s", "AGENTBOT_LOG_LEVEL=debug",
	}, s.cfg.env...)
	return append(env, extra...)
}

// startWorker starts a worker process and waits until it polls.
func (s *stack) startWorker(t *testing.T) {
	t.Helper()
	// The bot has s.httpAddr; the worker's probes take any free port.
	w := secretenvtest.Start(s.t, workerBin, s.env(append([]string{"AGENTBOT_HTTP_ADDR=127.0.0.1:0"}, s.cfg.workerEnv...)...))
	s.mu.Lock()
	s.worker = w
	s.mu.Unlock()
	w.WaitOutput(t, "worker started", time.Minute)
}

// killWorker kills the worker (SIGKILL) and waits for it to be gone.
func (s *stack) killWorker(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	w := s.worker
	s.worker = nil
	s.mu.Unlock()
	kill(t, w)
	s.mu.Lock()
	s.oldLogs = append(s.oldLogs, "worker (killed):\n"+w.Output())
	s.mu.Unlock()
}

// startBot starts a bot process and waits until it is ready.
func (s *stack) startBot(t *testing.T) {
	t.Helper()
	b := secretenvtest.Start(s.t, botBin, s.env())
	s.mu.Lock()
	s.bot = b
	s.mu.Unlock()
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(s.url("/readyz"))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-b.Done():
			t.Fatalf("the bot exited at start:\n%s", b.Output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bot does not serve %s after a minute (%v):\n%s", s.httpAddr, err, b.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// killBot kills the bot (SIGKILL) and waits for it to be gone.
func (s *stack) killBot(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	b := s.bot
	s.bot = nil
	s.mu.Unlock()
	kill(t, b)
	s.mu.Lock()
	s.oldLogs = append(s.oldLogs, "bot (killed):\n"+b.Output())
	s.mu.Unlock()
}

func kill(t *testing.T, p *secretenvtest.Process) {
	t.Helper()
	if err := p.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("process %d still runs 30 s after SIGKILL", p.Pid())
	}
}

// isAnswer says whether m is the agent's answer to the message whose
// command printed token: the fake model's final text is "done." and the
// output of each command (progress messages show the command, not
// "done.").
func isAnswer(m fakeslack.Message, token string) bool {
	return m.BotID != "" && strings.HasPrefix(strings.TrimSpace(m.Text), "done.") && strings.Contains(m.Text, token)
}

// isFinal says whether m, a message of the bot, is in its final form: not
// an answer still streaming, nor a streamed one that its delivery has not
// edited into the answer yet (it may lack the notes the turn adds).
func isFinal(m fakeslack.Message) bool {
	if m.Streaming {
		return false
	}
	if m.Metadata == nil || m.Edits > 0 {
		return true
	}
	var p struct {
		Streamed bool `json:"streamed"`
	}
	_ = json.Unmarshal(m.Metadata.EventPayload, &p)
	return !p.Streamed
}

// answers counts the agent's answers with token in the thread root.
func (s *stack) answers(root, token string) int {
	n := 0
	for _, m := range s.slack.Thread(channel, root) {
		if isAnswer(m, token) {
			n++
		}
	}
	return n
}

// waitAnswer waits up to d for an answer with token in the thread root.
func (s *stack) waitAnswer(t *testing.T, root, token string, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := s.slack.WaitFor(ctx, func(*fakeslack.Server) bool { return s.answers(root, token) > 0 }); err != nil {
		t.Fatalf("no answer with %q in thread %s within %v:\n%s", token, root, d, s.dumpThread(root))
	}
}

func (s *stack) dumpThread(root string) string {
	var b strings.Builder
	for _, m := range s.slack.Thread(channel, root) {
		fmt.Fprintf(&b, "  %s %s: %q\n", m.TS, m.User, m.Text)
	}
	return b.String()
}

// turns counts the turns the model was asked to start for the message
// containing text: successful requests whose last user message has text
// and is followed by no assistant step yet (the first call of a turn).
func (s *stack) turns(text string) int { return s.turnsOfAny([]string{text}) }

// turnsOfAny counts the turns the model was asked to start for messages
// containing any of texts (see turns).
func (s *stack) turnsOfAny(texts []string) int {
	n := 0
	for _, r := range s.model.Requests() {
		i, last := r.Call.LastUserMessage()
		if r.Status != http.StatusOK || i < 0 || !slices.ContainsFunc(texts, func(t string) bool { return strings.Contains(last, t) }) {
			continue
		}
		first := true
		for _, m := range r.Call.Messages[i+1:] {
			if m.Role == "assistant" || m.Role == "tool" {
				first = false
			}
		}
		if first {
			n++
		}
	}
	return n
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
