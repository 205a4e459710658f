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
	"os"
	"os/signal"
	"slices"
	"syscall"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	_ "gocloud.dev/blob/gcsblob" // gs:// blob stores
	_ "gocloud.dev/blob/s3blob"  // s3:// blob stores

	"github.com/agentbot/agentbot/internal/agentworker"
	"github.com/agentbot/agentbot/internal/config"
	"github.com/agentbot/agentbot/internal/secretenv"
)

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
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	for _, w := range cfg.Warnings() {
		logger.Warn(w)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	tc, err := client.DialContext(ctx, client.Options{
		HostPort: cfg.TemporalAddress, Namespace: cfg.TemporalNamespace,
		Logger: tlog.NewStructuredLogger(logger),
	})
	if err != nil {
		return fmt.Errorf("connecting to Temporal at %s: %w", cfg.TemporalAddress, err)
	}
	defer tc.Close()
	w, err := agentworker.New(ctx, tc, agentworker.Options{Config: cfg, Logger: logger})
	if err != nil {
		return err
	}
	if err := w.Start(); err != nil {
		return err
	}
	logger.Info("worker started", "backends", w.Registry.Names(), "temporal", cfg.TemporalAddress)
	<-ctx.Done()
	logger.Info("shutting down")
	w.Stop()
	return nil
}
