// Package health serves the probes of agentbot's processes: /healthz says
// the process is alive and serving, /readyz says it can do its work now
// (Temporal answers, it has started, it is not stopping). Kubernetes
// restarts a pod whose liveness fails and takes a pod whose readiness
// fails out of its Service, so liveness checks nothing outside the
// process: a Temporal outage must not restart every pod at once.
package health

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// CheckTimeout bounds each readiness check.
const CheckTimeout = 3 * time.Second

// Check reports whether one dependency is ready; ctx carries the check's
// deadline.
type Check func(ctx context.Context) error

// Probes holds the readiness state of a process. The zero value is not
// ready: a process calls SetReady once it has started. Methods are safe
// for concurrent use.
type Probes struct {
	mu       sync.Mutex
	names    []string
	checks   []Check
	ready    bool
	stopping bool
}

// Add registers a readiness check under name (for example "temporal").
func (p *Probes) Add(name string, c Check) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.names = append(p.names, name)
	p.checks = append(p.checks, c)
}

// SetReady marks the process started: readiness now depends on the checks.
func (p *Probes) SetReady() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ready = true
}

// SetStopping marks the process as shutting down: it stays alive but is
// no longer ready, so it gets no new traffic while it drains.
func (p *Probes) SetStopping() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopping = true
}

// Ready runs the checks and returns nil when the process is ready, else
// an error that names what is not.
func (p *Probes) Ready(ctx context.Context) error {
	p.mu.Lock()
	ready, stopping := p.ready, p.stopping
	names, checks := p.names, p.checks
	p.mu.Unlock()
	switch {
	case stopping:
		return fmt.Errorf("stopping")
	case !ready:
		return fmt.Errorf("starting")
	}
	var failed []string
	for i, c := range checks {
		cctx, cancel := context.WithTimeout(ctx, CheckTimeout)
		err := c(cctx)
		cancel()
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", names[i], err))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%s", strings.Join(failed, "; "))
	}
	return nil
}

// Register adds /healthz and /readyz to mux. /healthz answers 200 while
// the process serves; /readyz answers 200 when Ready is nil and 503 with
// the reason otherwise. Both answer plain text, and GET or HEAD only.
func (p *Probes) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err := p.Ready(r.Context()); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
		fmt.Fprintln(w, "ok")
	})
}
