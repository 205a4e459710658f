// Package agentworker builds agentbot's Temporal worker: the sandbox
// registry with every available backend, the blob store, the model client
// and the activities, registered with both workflows on agentflow.TaskQueue.
// cmd/worker runs it alone; cmd/bot runs it in-process in the embedded
// default.
package agentworker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/metric"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/agentflow/llm"
	discordbot "github.com/agentbot/agentbot/bot/discord"
	slackbot "github.com/agentbot/agentbot/bot/slack"
	"github.com/agentbot/agentbot/internal/config"
	"github.com/agentbot/agentbot/internal/fakeopenai"
	"github.com/agentbot/agentbot/internal/telemetry"
	"github.com/agentbot/agentbot/internal/temporalclient"
	"github.com/agentbot/agentbot/sandboxes"
	"github.com/agentbot/agentbot/sandboxes/daytonasandbox"
	"github.com/agentbot/agentbot/sandboxes/dockersandbox"
	"github.com/agentbot/agentbot/sandboxes/e2bsandbox"
	"github.com/agentbot/agentbot/sandboxes/localsandbox"
	"github.com/agentbot/agentbot/store"
)

// errLocalOff says why the local backend is not registered while a chat
// platform is configured, and what would turn it on.
var errLocalOff = errors.New("off while serving a chat platform, as it is not isolated (AGENTBOT_UNSAFE_LOCAL=true turns it on)")

// Options are what the worker needs beyond the configuration.
type Options struct {
	Config config.Config
	// Chat maps platforms to the senders of outbound messages; senders
	// of platforms configured in Config (Slack) are added.
	Chat map[string]agentflow.ChatSender
	// Logger is the program's logger; the worker and the SDK log to it.
	Logger *slog.Logger
	// Tracing traces the model's HTTP requests and puts message text and
	// command output into spans when its Content says so; nil is off. The
	// workflows and activities are traced by the interceptor of the client
	// the worker is built on (Tracing.WithTemporal).
	Tracing *telemetry.Tracing
	// Meter makes the worker's instruments: the activities' (model,
	// tools, sandboxes), the chat senders' calls, and the sessions gauge
	// (agentflow.ObserveSessions); nil records nothing. The Temporal SDK's
	// own metrics come from the client's MetricsHandler
	// (telemetry.Metrics.WithTemporal).
	Meter metric.Meter
	// SlackHome, when set, is the Slack Inbound's App Home of this
	// process: the Slack sender keeps the homes of those who opened theirs
	// up to date. Nil (a worker in a process of its own, which never hears
	// who opened their home) makes one that publishes the home of every
	// owner whose session changes (HomeConfig.EveryOwner).
	SlackHome *slackbot.Home
}

// Worker is a built, not yet started, worker.
type Worker struct {
	// Registry holds the registered (available) backends.
	Registry *sandboxes.Registry
	// Unavailable lists the backends that could not be registered, and why.
	Unavailable []sandboxes.Availability

	w      worker.Worker
	blobs  *store.Blobs
	closer []func() error

	stateMu sync.Mutex
	state   error // what Polling says
}

// New builds the worker on tc. It fails when nothing can run (no backend at
// all, a blob store that cannot open, a bad model configuration).
func New(ctx context.Context, tc client.Client, opts Options) (*Worker, error) {
	cfg := opts.Config
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	wk := &Worker{Registry: sandboxes.NewRegistry(), state: errors.New("not started")}
	ok := false
	defer func() {
		if !ok {
			wk.close()
		}
	}()

	switch {
	case cfg.Enabled(localsandbox.Name):
		lb, err := localsandbox.New(localsandbox.Options{BaseDir: cfg.LocalDir})
		if err != nil {
			wk.Unavailable = append(wk.Unavailable, sandboxes.Availability{Name: localsandbox.Name, Err: err})
		} else {
			wk.add(ctx, localsandbox.Name, lb)
		}
	case len(cfg.Backends) == 0:
		// Off because a chat platform is configured (config.Enabled):
		// say so where the missing backends are listed.
		wk.Unavailable = append(wk.Unavailable, sandboxes.Availability{Name: localsandbox.Name, Err: errLocalOff})
	}
	if cfg.Enabled(dockersandbox.Name) {
		db, err := dockersandbox.New(dockersandbox.Options{
			Image: cfg.DockerImage, Network: cfg.DockerNetwork, MemoryBytes: cfg.DockerMemory,
			WorkspaceBytes: cmp.Or(cfg.DockerDisk, -1),
			NanoCPUs:       int64(cfg.DockerCPUs * 1e9), PidsLimit: cfg.DockerPids,
			Logger: logger,
		})
		if err != nil {
			wk.Unavailable = append(wk.Unavailable, sandboxes.Availability{Name: dockersandbox.Name, Err: err})
		} else {
			wk.closer = append(wk.closer, db.Close)
			wk.add(ctx, dockersandbox.Name, db)
		}
	}
	if cfg.Enabled(e2bsandbox.Name) {
		// Without a key the backend reports itself unavailable, and the
		// warning says why.
		eb, err := e2bsandbox.New(e2bsandbox.Options{APIKey: cfg.E2BAPIKey, Domain: cfg.E2BDomain, Template: cfg.E2BTemplate})
		if err != nil {
			wk.Unavailable = append(wk.Unavailable, sandboxes.Availability{Name: e2bsandbox.Name, Err: err})
		} else {
			wk.add(ctx, e2bsandbox.Name, eb)
		}
	}
	if cfg.Enabled(daytonasandbox.Name) {
		dy, err := daytonasandbox.New(daytonasandbox.Options{APIKey: cfg.DaytonaAPIKey, APIURL: cfg.DaytonaAPIURL, Snapshot: cfg.DaytonaSnapshot})
		if err != nil {
			wk.Unavailable = append(wk.Unavailable, sandboxes.Availability{Name: daytonasandbox.Name, Err: err})
		} else {
			wk.add(ctx, daytonasandbox.Name, dy)
		}
	}
	if len(wk.Registry.Names()) == 0 {
		return nil, fmt.Errorf("no sandbox backend can run here: %s", describe(wk.Unavailable))
	}
	if len(wk.Unavailable) > 0 {
		logger.Warn("some sandbox backends are not available", "backends", describe(wk.Unavailable))
	}

	blobs, err := store.OpenBlobs(ctx, cfg.BlobURL)
	if err != nil {
		return nil, err
	}
	wk.blobs = blobs
	wk.closer = append(wk.closer, blobs.Close)

	baseURL, apiKey := cfg.OpenAIBaseURL, cfg.OpenAIAPIKey
	if baseURL == "fake" {
		fake := fakeopenai.New(fakeopenai.Options{Script: fakeopenai.DirectiveScript()})
		wk.closer = append(wk.closer, func() error { fake.Close(); return nil })
		baseURL, apiKey = fake.URL(), ""
		logger.Warn("using the built-in scripted model (OPENAI_BASE_URL=fake): it follows sh:/read:/write: directives and echoes the rest")
	}
	llmCfg := llm.Config{BaseURL: baseURL, APIKey: apiKey, API: llm.API(cfg.ModelAPI), Timeout: cfg.ModelTimeout}
	if llmCfg.Timeout == 0 {
		// A Config not made by config.Load: llm's own default would
		// outlast the model step.
		llmCfg.Timeout = config.DefaultModelTimeout
	}
	if opts.Tracing.Enabled() {
		llmCfg.HTTPClient = opts.Tracing.HTTPClient(nil)
	}
	model, err := llm.New(llmCfg)
	if err != nil {
		return nil, err
	}

	chat := map[string]agentflow.ChatSender{}
	for k, v := range opts.Chat {
		chat[k] = v
	}
	if cfg.SlackBotToken != "" && chat[slackbot.Platform] == nil {
		home := opts.SlackHome
		if home == nil {
			sessions := agentflow.NewClient(tc)
			sessions.DataConverter = temporalclient.DataConverter(cfg)
			var err error
			if home, err = slackbot.NewHome(slackbot.HomeConfig{Sessions: sessions, Admins: cfg.Admins, Logger: logger, EveryOwner: true}); err != nil {
				return nil, fmt.Errorf("slack home: %w", err)
			}
		}
		sender, err := slackbot.NewSender(slackbot.SenderConfig{BotToken: cfg.SlackBotToken, APIURL: cfg.SlackAPIURL, Logger: logger, Meter: opts.Meter,
			Home: home})
		if err != nil {
			return nil, fmt.Errorf("slack sender: %w", err)
		}
		// Its thread-status loops end with the worker.
		wk.closer = append(wk.closer, func() error { sender.Close(); return nil })
		chat[slackbot.Platform] = sender
	}
	if cfg.DiscordToken != "" && chat[discordbot.Platform] == nil {
		sender, err := discordbot.NewSender(discordbot.SenderConfig{Token: cfg.DiscordToken, Logger: logger, Meter: opts.Meter})
		if err != nil {
			return nil, fmt.Errorf("discord sender: %w", err)
		}
		chat[discordbot.Platform] = sender
	}

	acts := &agentflow.Activities{
		Sandboxes: wk.Registry, Blobs: blobs, Model: model, ModelName: cfg.Model,
		Chat: chat, Temporal: tc, Logger: logger, ContextChars: cfg.ContextChars,
		Secrets: cfg.Secrets, TraceContent: opts.Tracing.Content(), Meter: opts.Meter,
		StreamAnswers: cfg.StreamAnswers,
		Policy:        cfg.TenantPolicy(),
	}
	// On Stop the worker stops polling at once and lets what runs finish
	// within the drain period: a deploy does not cancel a shell command
	// (which is never run twice) nor a model call.
	// The sticky cache is the process's, made with its first worker: the
	// size holds for every worker of the process created after this.
	worker.SetStickyWorkflowCacheSize(cfg.WorkflowCache)
	wk.w = worker.New(tc, agentflow.TaskQueue, worker.Options{
		WorkerStopTimeout: cfg.DrainTimeout,
		// A fatal error (the namespace is gone, say) stops the worker:
		// readiness must say so rather than stay green.
		OnFatalError: func(err error) { wk.setState(fmt.Errorf("stopped: %w", err)) },
	})
	Register(wk.w, acts)
	// One reaper schedule per namespace; see docs/architecture.md (Sandboxes).
	if err := agentflow.EnsureReaper(ctx, tc, agentflow.ReaperOptions{Interval: cfg.ReapInterval, Grace: cfg.ReapGrace, Retention: cfg.Retention}); err != nil {
		logger.Warn("no reaper schedule: orphaned sandboxes and expired session data stay until it exists", "error", err)
	}
	if opts.Meter != nil {
		reg, err := agentflow.ObserveSessions(opts.Meter, tc, agentflow.SessionGaugeOptions{Logger: logger, DataConverter: temporalclient.DataConverter(cfg)})
		if err != nil {
			return nil, fmt.Errorf("sessions gauge: %w", err)
		}
		wk.closer = append(wk.closer, reg.Unregister)
	}
	ok = true
	return wk, nil
}

// Register registers agentbot's workflows and activities on w.
func Register(w worker.Registry, acts *agentflow.Activities) {
	w.RegisterWorkflowWithOptions(agentflow.AgentWorkflow, workflow.RegisterOptions{Name: agentflow.AgentWorkflowName})
	w.RegisterWorkflowWithOptions(agentflow.SessionManagerWorkflow, workflow.RegisterOptions{Name: agentflow.SessionManagerWorkflowName})
	w.RegisterWorkflowWithOptions(agentflow.ReaperWorkflow, workflow.RegisterOptions{Name: agentflow.ReaperWorkflowName})
	w.RegisterActivity(acts)
}

func (wk *Worker) add(ctx context.Context, name string, b sandboxes.Backend) {
	if err := b.Available(ctx); err != nil {
		wk.Unavailable = append(wk.Unavailable, sandboxes.Availability{Name: name, Description: b.Description(), Err: err})
		return
	}
	if err := wk.Registry.Register(name, b); err != nil {
		wk.Unavailable = append(wk.Unavailable, sandboxes.Availability{Name: name, Err: err})
	}
}

// UnavailableReasons maps each backend of Unavailable to why it cannot run,
// for bot.Router.Unavailable: the backend's own explanation (which for
// Docker names the command that builds a missing image), without the
// "backend unavailable: " that sandboxes.ErrUnavailable puts in front.
func (wk *Worker) UnavailableReasons() map[string]string {
	out := make(map[string]string, len(wk.Unavailable))
	for _, a := range wk.Unavailable {
		out[a.Name] = strings.TrimPrefix(a.Err.Error(), sandboxes.ErrUnavailable.Error()+": ")
	}
	return out
}

func describe(as []sandboxes.Availability) string {
	var parts []string
	for _, a := range as {
		parts = append(parts, fmt.Sprintf("%s: %v", a.Name, a.Err))
	}
	if len(parts) == 0 {
		return "none configured"
	}
	return strings.Join(parts, "; ")
}

// Start starts polling.
func (wk *Worker) Start() error {
	if err := wk.w.Start(); err != nil {
		return err
	}
	wk.setState(nil)
	return nil
}

// Stop stops polling, waits for running activities within the SDK's stop
// timeout, and releases the worker's resources.
func (wk *Worker) Stop() {
	wk.setState(errors.New("stopping"))
	wk.w.Stop()
	wk.close()
}

// Polling returns nil while the worker polls its task queue: after Start,
// until Stop or a fatal error of the SDK (which it returns). The SDK
// reports nothing finer (a poll that fails is retried inside it), so a
// Temporal outage shows in the "temporal" readiness check, not here.
func (wk *Worker) Polling() error {
	wk.stateMu.Lock()
	defer wk.stateMu.Unlock()
	return wk.state
}

func (wk *Worker) setState(err error) {
	wk.stateMu.Lock()
	defer wk.stateMu.Unlock()
	wk.state = err
}

func (wk *Worker) close() {
	var errs []error
	for i := len(wk.closer) - 1; i >= 0; i-- {
		errs = append(errs, wk.closer[i]())
	}
	wk.closer = nil
	_ = errors.Join(errs...)
}
