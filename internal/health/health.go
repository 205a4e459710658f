// Package health serves the probes of agentbot's processes: /healthz says
// the process is alive and serving, /readyz says it can do its work now
// (Temporal answers, it has started, it is not stopping, its chat
// platforms are connected); a dependency it works without (a cache) makes
// it "degraded", which /readyz says while it stays ready. Kubernetes
// restarts a pod whose liveness fails and takes a pod whose readiness
// fails out of its Service, so liveness checks nothing outside the
// process: a Temporal outage must not restart every pod at once.
package health

import (
	"context"
	"errors"
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

// State makes a Check of a function that reports a state the process
// already knows (a connection's, the worker's), without any I/O.
func State(f func() error) Check {
	return func(context.Context) error { return f() }
}

// check is a named Check; a degraded one does not fail readiness.
type check struct {
	name     string
	fn       Check
	degraded bool
}

// Probes holds the readiness state of a process. The zero value is not
// ready: a process calls SetReady once it has started. Methods are safe
// for concurrent use.
type Probes struct {
	mu       sync.Mutex
	checks   []check
	ready    bool
	stopping bool
}

// Add registers a readiness check under name (for example "temporal"):
// while it fails, the process is not ready.
func (p *Probes) Add(name string, c Check) {
	p.add(check{name: name, fn: c})
}

// AddDegraded registers a check of something the process works without
// (for example "redis", a cache): while it fails, the process stays ready
// but /readyz says it is degraded, and why.
func (p *Probes) AddDegraded(name string, c Check) {
	p.add(check{name: name, fn: c, degraded: true})
}

func (p *Probes) add(c check) {
	p.mu.Lock()
	defer p.mu.Unlock()
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

// Status is the outcome of the readiness checks.
type Status struct {
	// Err is nil when the process is ready; else it names what is not
	// ("starting", "stopping", or "<check>: <error>; ...").
	Err error
	// Degraded lists the failed degraded checks as "<check>: <error>",
	// in the order they were added.
	Degraded []string
}

// Ready runs the checks and returns nil when the process is ready, else
// an error that names what is not. Failed degraded checks do not count.
func (p *Probes) Ready(ctx context.Context) error {
	return p.Status(ctx).Err
}

// Status runs every check at once, each within CheckTimeout, and says
// whether the process is ready and what is degraded. Checks do not run
// while the process is starting or stopping.
func (p *Probes) Status(ctx context.Context) Status {
	p.mu.Lock()
	ready, stopping := p.ready, p.stopping
	checks := p.checks
	p.mu.Unlock()
	switch {
	case stopping:
		return Status{Err: errors.New("stopping")}
	case !ready:
		return Status{Err: errors.New("starting")}
	}
	errs := make([]error, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, CheckTimeout)
			defer cancel()
			errs[i] = c.fn(cctx)
		}()
	}
	wg.Wait()
	var st Status
	var failed []string
	for i, c := range checks {
		if errs[i] == nil {
			continue
		}
		line := fmt.Sprintf("%s: %v", c.name, errs[i])
		if c.degraded {
			st.Degraded = append(st.Degraded, line)
		} else {
			failed = append(failed, line)
		}
	}
	if len(failed) > 0 {
		st.Err = errors.New(strings.Join(failed, "; "))
	}
	return st
}

// Register adds /healthz and /readyz to mux. /healthz answers 200 while
// the process serves; /readyz answers 200 ("ok") when the process is
// ready and 503 ("not ready: <reason>") otherwise, followed by a line
// "degraded: <check>: <error>" for each failed degraded check. Both answer
// plain text, and GET or HEAD only.
func (p *Probes) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		st := p.Status(r.Context())
		if st.Err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %v\n", st.Err)
		} else {
			fmt.Fprintln(w, "ok")
		}
		for _, d := range st.Degraded {
			fmt.Fprintf(w, "degraded: %s\n", d)
		}
	})
}
