package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"google.golang.org/grpc"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
	discordbot "github.com/agentbot/agentbot/bot/discord"
	slackbot "github.com/agentbot/agentbot/bot/slack"
	"github.com/agentbot/agentbot/internal/agentworker"
	"github.com/agentbot/agentbot/internal/config"
	"github.com/agentbot/agentbot/internal/devserver"
	"github.com/agentbot/agentbot/internal/fakediscord"
	"github.com/agentbot/agentbot/internal/fakeopenai"
	"github.com/agentbot/agentbot/internal/fakeslack"
	"github.com/agentbot/agentbot/internal/testenv"
	"github.com/agentbot/agentbot/store"
)

// benchEnv is everything the measures share: one Temporal dev server, one
// Redis, one model fake, the product's worker (in-process, as in the
// embedded default) and its gateway, and the bare worker of the baseline.
type benchEnv struct {
	s      settings
	work   string
	logger *slog.Logger

	temporal *devserver.Server
	redis    *testenv.RedisServer
	model    *fakeopenai.Server
	latency  atomic.Int64 // the model's latency, ns

	slack       *fakeslack.Server
	discord     *fakediscord.Server
	chatCalls   *callLog // the fakes' requests, as the platforms would count them
	discordChan string

	// The product: its worker's client and worker, and the gateway's
	// own client (whose calls are counted) and router.
	workerClient  client.Client
	worker        *agentworker.Worker
	gatewayClient client.Client
	gatewayCalls  *grpcCounter
	router        *bot.Router
	sessions      *agentflow.Client
	answers       *answerBox
	cfg           config.Config

	// The baseline: a bare workflow worker on its own task queue.
	bareClient client.Client
	bareWorker worker.Worker
	bareDir    string

	// p9Router is the gateway's calls per message measured during P1.
	p9Router sample
	treeDir  string
	p4       time.Duration // P4's CLI snapshot + restore, for P5

	closers []func()
}

func (e *benchEnv) close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
}

func startEnv(ctx context.Context, work string, s settings, logger *slog.Logger) (_ *benchEnv, err error) {
	e := &benchEnv{s: s, work: work, logger: logger}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if err := checkTools(ctx); err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(work, "temporal.log"))
	if err != nil {
		return nil, err
	}
	e.closers = append(e.closers, func() { log.Close() })
	e.temporal, err = devserver.Start(ctx, devserver.Options{Path: os.Getenv("AGENTBOT_TEMPORAL_BIN"), UIPort: -1, Stdout: log, Stderr: log})
	if err != nil {
		return nil, err
	}
	e.closers = append(e.closers, func() { e.temporal.Stop() })
	e.redis, err = testenv.StartRedisServer()
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	e.closers = append(e.closers, e.redis.Stop)

	// The model: the directive script ("sh: true" calls the shell tool,
	// then answers), after the latency the measure sets.
	e.model = fakeopenai.New(fakeopenai.Options{Script: func(ctx context.Context, call fakeopenai.Call) (fakeopenai.Reply, error) {
		if d := time.Duration(e.latency.Load()); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return fakeopenai.Reply{}, ctx.Err()
			}
		}
		return fakeopenai.DirectiveScript()(ctx, call)
	}})
	e.closers = append(e.closers, e.model.Close)

	// The chat fakes; the senders' HTTP clients note every call with its
	// time (P8).
	e.chatCalls = &callLog{}
	e.slack = fakeslack.New(fakeslack.Options{})
	e.closers = append(e.closers, e.slack.Close)
	e.discord = fakediscord.New(fakediscord.Options{})
	e.closers = append(e.closers, e.discord.Close)
	e.discord.Point()
	e.discordChan = e.discord.AddChannel("bench", 0)

	// The product's worker, configured as the embedded default is, on
	// the local and Docker backends.
	environ := []string{
		"TEMPORAL_ADDRESS=" + e.temporal.Address(),
		"AGENTBOT_STATE_DIR=" + filepath.Join(work, "state"),
		"OPENAI_BASE_URL=" + e.model.URL(),
		"OPENAI_API_KEY=agentbench",
		"AGENTBOT_BACKENDS=local,docker",
		"AGENTBOT_DOCKER_IMAGE=" + testenv.TestImage(),
		"AGENTBOT_DOCKER_DISK_GB=0",
		"AGENTBOT_HTTP_ADDR=off",
		"REDIS_URL=" + e.redis.URL(),
	}
	e.cfg, err = config.Load(environ)
	if err != nil {
		return nil, err
	}
	e.workerClient, err = client.Dial(client.Options{HostPort: e.temporal.Address(), Logger: tlog.NewStructuredLogger(logger)})
	if err != nil {
		return nil, err
	}
	e.closers = append(e.closers, e.workerClient.Close)
	e.answers = newAnswerBox()
	slackSender, err := slackbot.NewSender(slackbot.SenderConfig{BotToken: e.slack.Options().BotToken, APIURL: e.slack.APIURL(), Logger: logger, HTTPClient: e.chatCalls.client()})
	if err != nil {
		return nil, err
	}
	discordSender, err := discordbot.NewSender(discordbot.SenderConfig{Token: e.discord.Options().BotToken, Logger: logger, HTTPClient: e.chatCalls.client()})
	if err != nil {
		return nil, err
	}
	e.worker, err = agentworker.New(ctx, e.workerClient, agentworker.Options{
		Config: e.cfg, Logger: logger,
		Chat: map[string]agentflow.ChatSender{
			"term":    e.answers,
			"slack":   watched{slackSender, e.answers},
			"discord": watched{discordSender, e.answers},
		},
	})
	if err != nil {
		return nil, err
	}
	if err := e.worker.Start(); err != nil {
		return nil, err
	}
	e.closers = append(e.closers, e.worker.Stop)

	// The gateway: its own client, every gRPC call counted (P9).
	e.gatewayCalls = &grpcCounter{}
	e.gatewayClient, err = client.Dial(client.Options{
		HostPort: e.temporal.Address(), Logger: tlog.NewStructuredLogger(logger),
		ConnectionOptions: client.ConnectionOptions{DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(e.gatewayCalls.intercept)}},
	})
	if err != nil {
		return nil, err
	}
	e.closers = append(e.closers, e.gatewayClient.Close)
	cache, err := store.NewRedisCache(e.redis.URL(), store.RedisOptions{Logger: logger})
	if err != nil {
		return nil, err
	}
	e.closers = append(e.closers, func() { cache.Close() })
	e.sessions = agentflow.NewClient(e.gatewayClient)
	e.router = &bot.Router{
		Sessions: e.sessions, Model: e.cfg.Model, Cache: cache, Backends: e.worker.Registry.Names(),
		DefaultBackend: "local", Logger: logger,
		Options: agentflow.AgentOptions{MaxSteps: 40 /* P8: 30 tools, one a step */, IdleTimeout: e.cfg.IdleTimeout, ToolTimeout: e.cfg.ToolTimeout},
	}

	// The baseline's worker.
	e.bareClient, err = client.Dial(client.Options{HostPort: e.temporal.Address(), Logger: tlog.NewStructuredLogger(logger)})
	if err != nil {
		return nil, err
	}
	e.closers = append(e.closers, e.bareClient.Close)
	e.bareDir = filepath.Join(work, "bare")
	if err := os.MkdirAll(e.bareDir, 0o755); err != nil {
		return nil, err
	}
	e.bareWorker = newBareWorker(e.bareClient, e.model.URL(), e.bareDir)
	if err := e.bareWorker.Start(); err != nil {
		return nil, err
	}
	e.closers = append(e.closers, e.bareWorker.Stop)
	return e, nil
}

// checkTools fails when a tool a baseline needs is missing: a benchmark
// that cannot compare says so rather than skipping.
func checkTools(ctx context.Context) error {
	var missing []string
	for _, t := range []string{"tar", "zstd", "docker"} {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the baselines need %s on PATH (scripts/setup.sh --test installs them)", strings.Join(missing, ", "))
	}
	return testenv.CheckDocker(ctx)
}

// setLatency sets the model's latency for the next calls.
func (e *benchEnv) setLatency(d time.Duration) { e.latency.Store(int64(d)) }

// grpcCounter counts the unary gRPC calls of a client, by method.
type grpcCounter struct {
	mu    sync.Mutex
	total int
	by    map[string]int
}

func (g *grpcCounter) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	g.mu.Lock()
	g.total++
	if g.by == nil {
		g.by = map[string]int{}
	}
	g.by[method[strings.LastIndex(method, "/")+1:]]++
	g.mu.Unlock()
	return invoker(ctx, method, req, reply, cc, opts...)
}

// reset returns the counts so far and starts again.
func (g *grpcCounter) reset() (int, map[string]int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n, by := g.total, g.by
	g.total, g.by = 0, nil
	return n, by
}

// answerBox is the product's chat in the bench: a ChatSender that notes
// when each thread's answers arrive, for the measures to wait on.
type answerBox struct {
	mu      sync.Mutex
	waiters map[string][]chan agentflow.Outbound // thread → waiting for its next answer
	counts  map[string]int
	threads []chan string // waiting for the next thread opened (forks)
	// forward also gets every "term" delivery (P9's terminal sender).
	forward agentflow.ChatSender
}

// relay sends the term threads' deliveries to s too (nil: stop).
func (b *answerBox) relay(s agentflow.ChatSender) {
	b.mu.Lock()
	b.forward = s
	b.mu.Unlock()
}

// CreateThread implements agentflow.ThreadCreator: a fork's thread, named
// after the request so that a retry gets the same one.
func (b *answerBox) CreateThread(ctx context.Context, source, title, requestID string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	sum := sha256.Sum256([]byte(source + "\x00" + requestID))
	thread := fmt.Sprintf("term:fork-%x", sum[:6])
	for _, c := range b.threads {
		c <- thread
	}
	b.threads = nil
	return thread, nil
}

// expectThread returns a channel that receives the next thread opened.
func (b *answerBox) expectThread() <-chan string {
	c := make(chan string, 1)
	b.mu.Lock()
	b.threads = append(b.threads, c)
	b.mu.Unlock()
	return c
}

func newAnswerBox() *answerBox {
	return &answerBox{waiters: map[string][]chan agentflow.Outbound{}, counts: map[string]int{}}
}

// Deliver implements agentflow.ChatSender.
func (b *answerBox) Deliver(ctx context.Context, m agentflow.Outbound) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.forward != nil && strings.HasPrefix(m.Thread, "term:") {
		if err := b.forward.Deliver(ctx, m); err != nil {
			return err
		}
	}
	if m.Kind != agentflow.OutboundAnswer {
		return nil
	}
	b.counts[m.Thread]++
	for _, c := range b.waiters[m.Thread] {
		c <- m
	}
	delete(b.waiters, m.Thread)
	return nil
}

// expect returns a channel that receives the next answer posted in thread;
// call it before sending the message.
func (b *answerBox) expect(thread string) <-chan agentflow.Outbound {
	c := make(chan agentflow.Outbound, 1)
	b.mu.Lock()
	b.waiters[thread] = append(b.waiters[thread], c)
	b.mu.Unlock()
	return c
}

// watched is a platform sender whose answers also reach the answer box.
type watched struct {
	agentflow.ChatSender
	box *answerBox
}

func (w watched) Deliver(ctx context.Context, m agentflow.Outbound) error {
	if err := w.ChatSender.Deliver(ctx, m); err != nil {
		return err
	}
	return w.box.Deliver(ctx, m)
}

// await waits for an answer, at most d.
func await(ctx context.Context, c <-chan agentflow.Outbound, d time.Duration, what string) (agentflow.Outbound, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case m := <-c:
		if m.Status != agentflow.TurnDone {
			return m, fmt.Errorf("%s: the turn ended %s: %s", what, m.Status, m.Text.Inline)
		}
		return m, nil
	case <-t.C:
		return agentflow.Outbound{}, fmt.Errorf("%s: no answer within %s", what, d)
	case <-ctx.Done():
		return agentflow.Outbound{}, ctx.Err()
	}
}
