// Command worker runs agentbot's Temporal worker: every workflow and
// activity on one task queue, with every sandbox backend that can run here.
//
// Configuration is environment variables (run with -h for the table);
// TEMPORAL_ADDRESS is required here (the embedded default lives in cmd/bot).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	_ "gocloud.dev/blob/gcsblob" // gs:// blob stores
	_ "gocloud.dev/blob/s3blob"  // s3:// blob stores
	// CA roots for images without a system bundle (FROM scratch): used
	// only when the system has none; SSL_CERT_FILE/SSL_CERT_DIR still win.
	_ "golang.org/x/crypto/x509roots/fallback"

	"github.com/agentbot/agentbot/internal/agentworker"
	"github.com/agentbot/agentbot/internal/config"
	"github.com/agentbot/agentbot/internal/debugserver"
	"github.com/agentbot/agentbot/internal/health"
	"github.com/agentbot/agentbot/internal/logging"
	"github.com/agentbot/agentbot/internal/payloadcodec"
	"github.com/agentbot/agentbot/internal/secretenv"
	"github.com/agentbot/agentbot/internal/telemetry"
	"github.com/agentbot/agentbot/internal/temporalclient"
)

// version is the release, set at build time (scripts/build-images.sh:
// -ldflags "-X main.version=...").
var version = "dev"

func main() {
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: worker\n\nEnvironment:\n%s", config.Table())
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
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run(environ []string) error {
	cfg, err := config.Load(environ)
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	if cfg.TemporalAddress == "" {
		return fmt.Errorf("TEMPORAL_ADDRESS is not set (for everything in one process, run cmd/bot)")
	}
	// For the blob store's SDK, which reads them from the environment;
	// the worker starts no process that inherits it.
	if err := secretenv.Restore(environ, config.SDKSecretVars); err != nil {
		return err
	}
	// One handler for everything, the Temporal SDK included: the format
	// and level of the configuration, fixed keys, secrets redacted.
	logger := logging.New(os.Stderr, cfg)
	// Libraries that log through the standard log package (discordgo)
	// write through the same handler.
	slog.SetDefault(logger)
	for _, w := range cfg.Warnings() {
		logger.Warn(w)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// Traces (off unless OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT is set):
	// the client's interceptor traces the workflows and activities this
	// worker runs. Flushed last, after the worker has stopped.
	tracing, err := telemetry.NewTracing(ctx, environ, telemetry.TraceOptions{Service: "agentbot-worker", Version: version, Content: cfg.TraceContent})
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tracing.Shutdown(sctx); err != nil {
			logger.Warn("the last spans could not be exported", "error", err)
		}
	}()
	// Metrics (off unless AGENTBOT_METRICS_ADDR is set): ours and the
	// Temporal SDK's, on /metrics.
	metrics, err := newMetrics(cfg, "agentbot-worker")
	if err != nil {
		return err
	}
	defer shutdownMetrics(metrics, logger)
	tc, err := temporalclient.Dial(ctx, cfg, cfg.TemporalAddress, tlog.NewStructuredLogger(logger), tracing.WithTemporal, metrics.WithTemporal)
	if err != nil {
		return err
	}
	defer tc.Close()
	// The probes listen before the worker is built: a port that is taken
	// fails the start instead of leaving a pod that is never ready.
	probes := &health.Probes{}
	probes.Add("temporal", func(ctx context.Context) error {
		_, err := tc.CheckHealth(ctx, &client.CheckHealthRequest{})
		return err
	})
	codec, err := codecServer(cfg)
	if err != nil {
		return err
	}
	stopHTTP, err := serveProbes(cfg.HTTPAddr, probes, sharedMetrics(cfg, metrics), codec, logger)
	if err != nil {
		return err
	}
	defer stopHTTP()
	if cfg.MetricsAddr != "" && cfg.MetricsAddr != cfg.HTTPAddr {
		_, stopMetrics, err := metrics.Serve(cfg.MetricsAddr, logger)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	if cfg.PprofAddr != "" {
		_, stopPprof, err := debugserver.Serve(cfg.PprofAddr, logger)
		if err != nil {
			return err
		}
		defer stopPprof()
	}
	var meter metric.Meter
	if metrics != nil {
		meter = metrics.Meter()
	}
	w, err := agentworker.New(ctx, tc, agentworker.Options{Config: cfg, Logger: logger, Tracing: tracing, Meter: meter})
	if err != nil {
		return err
	}
	if err := w.Start(); err != nil {
		return err
	}
	probes.Add("worker", health.State(w.Polling))
	probes.SetReady()
	logger.Info("worker started", "version", version, "backends", w.Registry.Names(), "temporal", cfg.TemporalAddress, "traces", tracing.Describe())
	<-ctx.Done()
	logger.Info("shutting down")
	probes.SetStopping()
	w.Stop()
	return nil
}

// newMetrics builds the process's metrics when cfg.MetricsAddr is set;
// nil (which records nothing) when it is not.
func newMetrics(cfg config.Config, service string) (*telemetry.Metrics, error) {
	if cfg.MetricsAddr == "" {
		return nil, nil
	}
	return telemetry.NewMetrics(service)
}

// shutdownMetrics stops m's provider.
func shutdownMetrics(m *telemetry.Metrics, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.Shutdown(ctx); err != nil {
		logger.Warn("stopping the metrics", "error", err)
	}
}

// sharedMetrics is the /metrics handler of the probes' server when
// AGENTBOT_METRICS_ADDR is AGENTBOT_HTTP_ADDR, else nil.
func sharedMetrics(cfg config.Config, m *telemetry.Metrics) http.Handler {
	if m == nil || cfg.MetricsAddr != cfg.HTTPAddr {
		return nil
	}
	return m.Handler()
}

// codecServer is the Temporal Web UI's codec server when payloads are
// encrypted (AGENTBOT_PAYLOAD_KEYS), else nil.
func codecServer(cfg config.Config) (http.Handler, error) {
	if cfg.PayloadKeys == "" {
		return nil, nil
	}
	c, err := payloadcodec.Parse(cfg.PayloadKeys)
	if err != nil {
		return nil, err
	}
	return http.StripPrefix("/codec", c.Handler(cfg.CodecOrigins)), nil
}

// serveProbes serves /healthz and /readyz on addr ("off": nothing),
// metrics on /metrics when it is not nil, and the codec server on /codec/
// when codec is not nil, until the returned function is called.
func serveProbes(addr string, probes *health.Probes, metrics, codec http.Handler, logger *slog.Logger) (stop func(), err error) {
	if addr == "off" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("health endpoints (AGENTBOT_HTTP_ADDR): %w", err)
	}
	mux := http.NewServeMux()
	probes.Register(mux)
	if metrics != nil {
		mux.Handle("/metrics", metrics)
	}
	if codec != nil {
		mux.Handle("/codec/", codec)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	logger.Info("serving health endpoints", "addr", ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
