// Package telemetry is agentbot's metrics plumbing (and, beside it, its
// traces): OpenTelemetry instruments exported in the Prometheus text format
// on /metrics.
//
// We chose OpenTelemetry metrics with the Prometheus exporter over
// prometheus/client_golang alone because one API then serves our own
// instruments and the Temporal SDK's (go.temporal.io/sdk/contrib/opentelemetry
// turns a Meter into a client.MetricsHandler), it is the SDK the traces use
// too, and the instruments do not tie the code to one backend: Prometheus
// scrapes /metrics today, an OTLP exporter could be added beside it.
//
// Each process builds one Metrics with its own prometheus.Registry (never
// the global one, so tests and an embedded worker cannot collide) and hands
// its Meter explicitly to what records (agentflow.Activities, bot.Router, the
// chat senders, the cache); a nil Meter there means no metrics.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
)

// MeterName is the instrumentation scope of agentbot's own instruments.
const MeterName = "github.com/agentbot/agentbot"

// SecondsBuckets are the bucket bounds of every histogram in seconds (ours
// and the Temporal SDK's latencies): from 5 ms, for a cache or a schedule
// to start, to an hour, for a long turn.
var SecondsBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

// Metrics is one process's metrics: a MeterProvider whose instruments are
// read by a Prometheus exporter into a private registry, served by
// Handler. A nil *Metrics is valid and records nothing.
type Metrics struct {
	provider *sdkmetric.MeterProvider
	registry *prometheus.Registry
}

// NewMetrics builds the metrics of the process named service ("agentbot-bot",
// "agentbot-worker"; it becomes the service_name of target_info). The
// registry also holds the Go runtime's and the process's collectors.
func NewMetrics(service string) (*Metrics, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, fmt.Errorf("telemetry: go collector: %w", err)
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("telemetry: process collector: %w", err)
	}
	// Without scope labels: every metric name is made by one scope, and
	// otel_scope_* labels on every series would only add noise.
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", service)))
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	seconds := sdkmetric.NewView(
		sdkmetric.Instrument{Kind: sdkmetric.InstrumentKindHistogram, Unit: "s"},
		sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: SecondsBuckets}},
	)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res), sdkmetric.WithView(seconds))
	return &Metrics{provider: mp, registry: reg}, nil
}

// MeterProvider returns the provider of the process's meters (a no-op one
// for a nil m).
func (m *Metrics) MeterProvider() metric.MeterProvider {
	if m == nil {
		return noop.NewMeterProvider()
	}
	return m.provider
}

// Meter returns the meter of agentbot's own instruments (a no-op one for a
// nil m).
func (m *Metrics) Meter() metric.Meter {
	return m.MeterProvider().Meter(MeterName)
}

// Handler serves the registry in the Prometheus text format (a 404 for a
// nil m).
func (m *Metrics) Handler() http.Handler {
	if m == nil {
		return http.NotFoundHandler()
	}
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// TemporalHandler returns the Temporal SDK's metrics handler over m: the
// SDK's counters, gauges and timers (schedule-to-start latencies, task
// slots, sticky cache, requests) become instruments of m, named as the SDK
// names them ("temporal_..."). Counters are monotonic, so they export as
// Prometheus counters. Nil for a nil m (the SDK then records nothing).
func (m *Metrics) TemporalHandler() client.MetricsHandler {
	if m == nil {
		return nil
	}
	return temporalotel.NewMetricsHandler(temporalotel.MetricsHandlerOptions{
		Meter:                m.provider.Meter("go.temporal.io/sdk"),
		UseMonotonicCounters: true,
		// The SDK's default panics; an instrument that cannot be made
		// costs a metric, never the worker.
		OnError: otel.Handle,
	})
}

// WithTemporal is a temporalclient.Dial modifier that sets the client's
// MetricsHandler to TemporalHandler (nothing for a nil m).
func (m *Metrics) WithTemporal(opts *client.Options) {
	if h := m.TemporalHandler(); h != nil {
		opts.MetricsHandler = h
	}
}

// Shutdown flushes and stops the provider; instruments record nothing
// after it.
func (m *Metrics) Shutdown(ctx context.Context) error {
	if m == nil {
		return nil
	}
	if err := m.provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("telemetry: shutting down metrics: %w", err)
	}
	return nil
}

// Serve serves m's Handler on /metrics of a server of its own listening on
// addr, until stop is called. It returns the address it listens on (addr
// may say port 0). A taken port is an error at once, so a bad
// AGENTBOT_METRICS_ADDR fails the start.
func (m *Metrics) Serve(addr string, logger *slog.Logger) (bound string, stop func(), err error) {
	if addr == "" {
		return "", nil, errors.New("telemetry: no metrics address")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("metrics endpoint (AGENTBOT_METRICS_ADDR): %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	if logger != nil {
		logger.Info("serving metrics", "addr", ln.Addr().String())
	}
	return ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
