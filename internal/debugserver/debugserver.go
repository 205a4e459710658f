// Package debugserver serves Go's runtime profiles (net/http/pprof) on an
// address of their own, for an operator to profile a running process:
//
//	AGENTBOT_PPROF_ADDR=127.0.0.1:6060
//	go tool pprof http://127.0.0.1:6060/debug/pprof/heap
//
// It is off unless configured, and meant for a loopback or port-forwarded
// address only: profiles show the process's code paths and may show data
// held in memory.
package debugserver

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// Serve listens on addr and serves /debug/pprof/ until stop is called. It
// returns the address it listens on (addr may have port 0).
func Serve(addr string, logger *slog.Logger) (bound string, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("profiling endpoint (AGENTBOT_PPROF_ADDR): %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	// A CPU profile or trace runs for its ?seconds=, 30 by default.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	logger.Info("serving runtime profiles", "addr", ln.Addr().String())
	return ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
