// Command bot is agentbot's gateway. With no configuration at all it runs
// everything on this machine — the embedded default: a Temporal dev server
// (the temporal CLI, state kept under the state dir), an in-process worker,
// the local sandbox, and a terminal chat on stdin/stdout.
//
// Run with -h for the configuration table.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"go.opentelemetry.io/otel/metric"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"golang.org/x/term"

	_ "gocloud.dev/blob/gcsblob" // gs:// blob stores
	_ "gocloud.dev/blob/s3blob"  // s3:// blob stores
	// CA roots for images without a system bundle (FROM scratch): used
	// only when the system has none; SSL_CERT_FILE/SSL_CERT_DIR still win.
	_ "golang.org/x/crypto/x509roots/fallback"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
	discordbot "github.com/agentbot/agentbot/bot/discord"
	slackbot "github.com/agentbot/agentbot/bot/slack"
	"github.com/agentbot/agentbot/bot/terminal"
	"github.com/agentbot/agentbot/bot/terminal/tui"
	"github.com/agentbot/agentbot/internal/agentworker"
	"github.com/agentbot/agentbot/internal/config"
	"github.com/agentbot/agentbot/internal/debugserver"
	"github.com/agentbot/agentbot/internal/devserver"
	"github.com/agentbot/agentbot/internal/health"
	"github.com/agentbot/agentbot/internal/logging"
	"github.com/agentbot/agentbot/internal/secretenv"
	"github.com/agentbot/agentbot/internal/telemetry"
	"github.com/agentbot/agentbot/internal/temporalclient"
	"github.com/agentbot/agentbot/sandboxes"
	"github.com/agentbot/agentbot/store"
)

// version is the release, set at build time (scripts/build-images.sh:
// -ldflags "-X main.version=...").
var version = "dev"

// plain keeps the terminal chat in line mode even on a terminal.
var plain = flag.Bool("plain", false, "in the terminal, the line chat (plain text, one line per event) even when stdin and stdout are a terminal; without a terminal it is always the line chat")

func main() {
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: bot [--plain]\n\n")
		flag.PrintDefaults()
		fmt.Fprintf(flag.CommandLine.Output(), "\nEnvironment:\n%s", config.Table())
	}
	flag.Parse()
	// Before anything else, the secrets leave the environment block
	// (this re-executes the program), where commands of the local
	// sandbox, or any process of this user, could read them; the rest of
	// the program gets them from environ only.
	environ, err := secretenv.Protect(os.Environ(), os.Args, slices.Concat(config.SecretVars, config.SDKSecretVars))
	if err == nil {
		err = run(environ)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bot:", err)
		os.Exit(1)
	}
}

func run(environ []string) error {
	cfg, err := config.Load(environ)
	if err == nil {
		err = cfg.ValidateGateway()
	}
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// In the terminal the terminal is the chat: logs go to a file so they
	// do not mix with the conversation. Serving Slack, they go to stderr.
	slackMode := cfg.SlackBotToken != ""
	discordMode := cfg.DiscordToken != ""
	logFile, err := os.OpenFile(filepath.Join(cfg.StateDir, "bot.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	var logOut io.Writer = logFile
	if slackMode || discordMode {
		logOut = os.Stderr
	}
	// One handler for everything, the Temporal SDK included: the format
	// and level of the configuration, fixed keys, secrets redacted.
	logger := logging.New(logOut, cfg)
	// Libraries that log through the standard log package (discordgo)
	// write through the same handler.
	slog.SetDefault(logger)
	logger.Info("agentbot gateway starting", "version", version)
	for _, w := range cfg.Warnings() {
		logger.Warn(w)
	}

	embedded := cfg.TemporalAddress == ""
	addr := cfg.TemporalAddress
	webUI := cfg.TemporalUIURL
	if embedded {
		fmt.Fprintln(os.Stderr, "starting the embedded Temporal dev server…")
		srv, err := devserver.Start(ctx, devserver.Options{
			Path: cfg.TemporalBin, StateDir: filepath.Join(cfg.StateDir, "temporal"),
			UIPort: cfg.TemporalUIPort, Stdout: logFile, Stderr: logFile,
		})
		if err != nil {
			return err
		}
		defer srv.Stop()
		addr = srv.Address()
		if ui := srv.UIAddress(); ui != "" {
			fmt.Fprintf(os.Stderr, "Temporal web UI: %s\n", ui)
			webUI = ui
		}
	}
	// For the blob store's SDK, which reads them from the environment:
	// only now, so that the dev server does not inherit them.
	if err := secretenv.Restore(environ, config.SDKSecretVars); err != nil {
		return err
	}
	// Traces (off unless OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT is set): a
	// span per inbound event (bot.Router), and through the client's
	// interceptor the Temporal calls and, embedded, the workflows and
	// activities of the in-process worker. Flushed last.
	tracing, err := telemetry.NewTracing(ctx, environ, telemetry.TraceOptions{Service: "agentbot-bot", Version: version, Content: cfg.TraceContent})
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	defer shutdown(tracing.Shutdown)
	logger.Info("traces", "to", tracing.Describe())
	// Metrics (off unless AGENTBOT_METRICS_ADDR is set): ours, the
	// Temporal SDK's and, embedded, the in-process worker's, on /metrics.
	// Served by the chat's HTTP server when the addresses are the same,
	// else (and in the terminal, which has none) by a server of their own.
	var metrics *telemetry.Metrics
	var meter metric.Meter
	if cfg.MetricsAddr != "" {
		if metrics, err = telemetry.NewMetrics("agentbot-bot"); err != nil {
			return err
		}
		defer shutdown(metrics.Shutdown)
		meter = metrics.Meter()
		if !(slackMode || discordMode) || cfg.MetricsAddr != cfg.HTTPAddr {
			_, stopMetrics, err := metrics.Serve(cfg.MetricsAddr, logger)
			if err != nil {
				return err
			}
			defer stopMetrics()
		}
	}
	if cfg.PprofAddr != "" {
		_, stopPprof, err := debugserver.Serve(cfg.PprofAddr, logger)
		if err != nil {
			return err
		}
		defer stopPprof()
	}
	tc, err := temporalclient.Dial(ctx, cfg, addr, tlog.NewStructuredLogger(logger), tracing.WithTemporal, metrics.WithTemporal)
	if err != nil {
		return err
	}
	defer tc.Close()

	// On a terminal (and without --plain) the full-screen UI; for pipes
	// and scripts the line chat. The worker in this process delivers to
	// whichever it is.
	fullScreen := !slackMode && !discordMode && !*plain &&
		term.IsTerminal(int(os.Stdin.Fd())) && term.IsTerminal(int(os.Stdout.Fd()))
	sender := terminal.NewSender(os.Stdout)
	feed := tui.NewFeed()
	var termChat agentflow.ChatSender = sender
	if fullScreen {
		termChat = feed
	}
	backends := cfg.Backends
	// unavailable says why a backend the worker could not register is
	// missing; with separate workers the bot cannot know.
	var unavailable map[string]string
	// The Slack App Home of this process: the Inbound publishes it when
	// someone opens it; the embedded worker's sender keeps it up to date.
	var slackHome *slackbot.Home
	if cfg.SlackBotToken != "" {
		homeSessions := agentflow.NewClient(tc)
		homeSessions.DataConverter = temporalclient.DataConverter(cfg)
		if slackHome, err = slackbot.NewHome(slackbot.HomeConfig{Sessions: homeSessions, Admins: cfg.Admins, Logger: logger}); err != nil {
			return err
		}
	}
	if embedded {
		w, err := agentworker.New(ctx, tc, agentworker.Options{
			Config: cfg, Logger: logger, Chat: map[string]agentflow.ChatSender{"term": termChat}, Tracing: tracing, Meter: meter,
			SlackHome: slackHome,
		})
		if err != nil {
			return err
		}
		for _, u := range w.Unavailable {
			fmt.Fprintf(os.Stderr, "backend %s is not available: %v\n", u.Name, u.Err)
		}
		if err := w.Start(); err != nil {
			return err
		}
		defer w.Stop()
		backends = w.Registry.Names()
		unavailable = w.UnavailableReasons()
		if !slices.Contains(backends, cfg.DefaultBackend) {
			return fmt.Errorf("the default backend %s cannot run here (%s); set AGENTBOT_DEFAULT_BACKEND to one that can: %s",
				cfg.DefaultBackend, why(w.Unavailable, cfg.DefaultBackend), strings.Join(backends, ", "))
		}
	}
	if len(backends) == 0 {
		// Separate workers: the bot cannot see what they run.
		for _, b := range []string{"local", "docker"} {
			if cfg.Enabled(b) {
				backends = append(backends, b)
			}
		}
	}
	cache, err := openCache(cfg, logger, meter)
	if err != nil {
		return err
	}
	defer cache.Close()
	access := bot.Access{Users: cfg.AllowedUsers, Channels: cfg.AllowedChannels, Roles: cfg.AllowedRoles, Admins: cfg.Admins}
	sessions := agentflow.NewClient(tc)
	sessions.DataConverter = temporalclient.DataConverter(cfg)
	policy := cfg.TenantPolicy()
	sessions.Policy = &policy
	router := &bot.Router{
		Sessions: sessions, Model: cfg.Model, Cache: cache, Access: access, Backends: backends, Unavailable: unavailable, DefaultBackend: cfg.DefaultBackend,
		Options: agentflow.AgentOptions{
			MaxSteps: cfg.MaxSteps, IdleTimeout: cfg.IdleTimeout, ToolTimeout: cfg.ToolTimeout,
		},
		WebUI: webUI, Namespace: cfg.TemporalNamespace, Logger: logger, Secrets: cfg.Secrets,
		Tracer: tracing.Tracer("github.com/agentbot/agentbot/bot"), TraceContent: tracing.Content(),
		Meter: meter,
	}
	if slackMode || discordMode {
		var shared http.Handler
		if metrics != nil && cfg.MetricsAddr == cfg.HTTPAddr {
			shared = metrics.Handler()
		}
		return serveChat(ctx, cfg, tc, router, access, backends, shared, slackHome, logger)
	}
	if fullScreen {
		o := tui.Options{
			Router: router, Client: router.Sessions, User: os.Getenv("USER"),
			Backends: backends, Unavailable: unavailable, WebUI: webUI, Namespace: cfg.TemporalNamespace,
		}
		if embedded {
			o.Feed = feed
		}
		// The whole conversation (expanded tool rows, a resumed
		// session's tool calls) is in the workers' blob store: readable
		// here when it is this machine's or a shared one.
		if blobs, err := store.OpenBlobs(ctx, cfg.BlobURL); err == nil {
			defer blobs.Close()
			o.Blobs = blobs
		} else {
			logger.Warn("the blob store is not readable: the terminal shows the turns' summaries only", "error", err)
		}
		return tui.Run(ctx, o, os.Stdin, os.Stdout)
	}
	chat := &terminal.Chat{
		Router: router, Client: router.Sessions, In: os.Stdin, Out: os.Stdout,
		User: os.Getenv("USER"), PrintAnswers: !embedded,
	}
	if embedded {
		// The in-process worker prints the answers: the chat learns of
		// them from its sender, not by asking Temporal.
		chat.Answers = sender
	}
	return chat.Run(ctx)
}

// why says why backend name is not among the registered ones.
func why(unavailable []sandboxes.Availability, name string) string {
	for _, u := range unavailable {
		if u.Name == name {
			return u.Err.Error()
		}
	}
	return "not enabled"
}

// cacheCloser is a bot.Cache that can be closed.
type cacheCloser interface {
	bot.Cache
	Close() error
}

// openCache opens Redis when REDIS_URL is set, else an in-memory cache. A
// Redis that does not answer at start is logged, not fatal: the bot works
// from Temporal until it is back.
func openCache(cfg config.Config, logger *slog.Logger, meter metric.Meter) (cacheCloser, error) {
	if cfg.RedisURL == "" {
		return store.NewMemoryCache(), nil
	}
	// go-redis logs every failed dial on its own; the cache reports state
	// changes once, through our logger.
	redis.SetLogger(quietRedis{})
	c, err := store.NewRedisCache(cfg.RedisURL, store.RedisOptions{Logger: logger, Meter: meter})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx); err != nil {
		logger.Warn("Redis does not answer at start; serving from Temporal until it does", "error", err)
	}
	return c, nil
}

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...interface{}) {}

// serveChat serves the configured chat platforms until ctx ends: Slack
// over Socket Mode (with an app token) or the HTTP Events API, Discord over
// its gateway and, with a public key, HTTP interactions. Every event is
// acknowledged before it is handled; what was acknowledged is drained at
// shutdown. metrics, when not nil, is served on /metrics of the same
// server. slackHome, when not nil, publishes Slack's App Home.
func serveChat(ctx context.Context, cfg config.Config, tc client.Client, router *bot.Router, access bot.Access, backends []string, metrics http.Handler, slackHome *slackbot.Home, logger *slog.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The HTTP endpoints listen first: the probes answer (not ready)
	// while the platforms connect, and a port that is taken fails the
	// start.
	mux := http.NewServeMux()
	probes := &health.Probes{}
	probes.Add("temporal", func(ctx context.Context) error {
		_, err := tc.CheckHealth(ctx, &client.CheckHealthRequest{})
		return err
	})
	// Redis is a cache: the bot works from Temporal without it, so it
	// only makes the bot "degraded".
	if rc, ok := router.Cache.(*store.RedisCache); ok {
		probes.AddDegraded("redis", rc.Ping)
	}
	probes.Register(mux)
	if metrics != nil {
		mux.Handle("/metrics", metrics)
	}
	errc := make(chan error, 3)
	if cfg.HTTPAddr != "off" {
		ln, err := net.Listen("tcp", cfg.HTTPAddr)
		if err != nil {
			return fmt.Errorf("HTTP endpoints (AGENTBOT_HTTP_ADDR): %w", err)
		}
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { errc <- srv.Serve(ln) }()
		defer shutdown(srv.Shutdown)
		logger.Info("serving HTTP", "addr", ln.Addr().String())
	}

	if cfg.SlackBotToken != "" {
		in := slackbot.NewInbound(slackbot.InboundConfig{
			BotToken: cfg.SlackBotToken, AppToken: cfg.SlackAppToken, SigningSecret: cfg.SlackSigningSecret,
			APIURL: cfg.SlackAPIURL, Logger: logger, Backends: backends, Access: &access, Meter: router.Meter,
			Home: slackHome,
		}, router, nil)
		if err := in.Start(ctx); err != nil {
			return err
		}
		defer shutdown(in.Shutdown)
		if cfg.SlackAppToken != "" {
			// Over HTTP, that /readyz answers says the Events API is
			// served; Socket Mode is ready while its connection is up.
			probes.Add("slack", health.State(in.Connected))
			logger.Info("serving Slack over Socket Mode")
			go func() { errc <- in.RunSocketMode(ctx) }()
		} else {
			if cfg.HTTPAddr == "off" {
				return errors.New("the Slack Events API needs AGENTBOT_HTTP_ADDR (it is off); or set SLACK_APP_TOKEN for Socket Mode")
			}
			logger.Info("serving the Slack Events API", "addr", cfg.HTTPAddr)
			mux.Handle("/slack/", in.HTTPHandler())
		}
	}
	if cfg.DiscordToken != "" {
		in, err := discordbot.NewInbound(discordbot.InboundConfig{
			Token: cfg.DiscordToken, AppID: cfg.DiscordAppID, PublicKey: cfg.DiscordPublicKey,
			GuildID: cfg.DiscordGuildID, Backends: backends, Logger: logger, ThreadPerSession: cfg.DiscordThreads,
			Meter: router.Meter,
		}, router)
		if err != nil {
			return err
		}
		if err := in.Start(ctx); err != nil {
			return err
		}
		defer shutdown(in.Shutdown)
		probes.Add("discord", health.State(in.Connected))
		logger.Info("serving Discord over the gateway")
		if cfg.DiscordPublicKey != "" && cfg.HTTPAddr != "off" {
			mux.Handle("/discord/", in.HTTPHandler())
		}
	}
	probes.SetReady()
	defer probes.SetStopping()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return nil
	}
}

func shutdown(f func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = f(ctx)
}
