package telemetry

// Traces: OpenTelemetry spans exported over OTLP (gRPC or HTTP), configured
// with the standard OTEL_* variables and off unless an endpoint is set.
//
// One trace runs from the gateway's span of an inbound event (bot.Router)
// through the Temporal call (the SDK's tracing interceptor on the client),
// into the workflow (the same interceptor on the worker: a worker built from
// a client inherits its interceptors), the turn's activities, the model's
// HTTP request (otelhttp around the model client's transport) and the
// sandbox calls (spans agentflow starts). agentflow carries the event's
// traceparent in the message, so that a turn of a long-lived session joins
// the trace of the message that started it (see agentflow/trace.go).

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"

	"github.com/agentbot/agentbot/agentflow"
)

// TraceVars are the standard OpenTelemetry variables NewTracing reads from
// the environ it is given (the exporters read the rest of theirs, such as
// OTEL_EXPORTER_OTLP_CERTIFICATE or _TIMEOUT, from the process environment
// themselves). config.Vars documents them.
var TraceVars = []string{
	"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
	"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
	"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
	"OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
	"OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED",
}

// TraceOptions are what NewTracing needs beyond the environment.
type TraceOptions struct {
	// Service is service.name when OTEL_SERVICE_NAME (or service.name in
	// OTEL_RESOURCE_ATTRIBUTES) does not say: "agentbot-bot",
	// "agentbot-worker".
	Service string
	// Version is service.version.
	Version string
	// Content lets message text and command output into span attributes
	// (AGENTBOT_TRACE_CONTENT); off, spans carry IDs, names and counts.
	Content bool
}

// Tracing is a process's tracing: an OTLP exporter behind a tracer
// provider, or nothing. A nil *Tracing is tracing off; every method works
// on it.
type Tracing struct {
	sdk         *sdktrace.TracerProvider
	interceptor interceptor.Interceptor
	content     bool
	endpoint    string
	protocol    string
}

// NewTracing configures tracing from the standard variables in environ
// (as os.Environ returns it): off (a nil *Tracing, no error) unless
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT is set,
// or when OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none.
//
// The endpoint is a URL: with OTEL_EXPORTER_OTLP_ENDPOINT over HTTP the
// spans go to <url>/v1/traces, the traces variable is used as it is. The
// protocol (OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL) is http/protobuf, the
// specification's default, or grpc. Headers
// (OTEL_EXPORTER_OTLP_[TRACES_]HEADERS: key=value pairs, comma-separated,
// values URL-encoded) are sent with every export. The sampler
// (OTEL_TRACES_SAMPLER and _ARG) defaults to parentbased_always_on. An
// invalid value is an error naming the variable. ctx is for building the
// exporter only; nothing connects until the first export.
func NewTracing(ctx context.Context, environ []string, opts TraceOptions) (*Tracing, error) {
	env := map[string]string{}
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = strings.TrimSpace(v)
	}
	either := func(traces, generic string) (string, string) {
		if v := env[traces]; v != "" {
			return v, traces
		}
		return env[generic], generic
	}
	switch strings.ToLower(env["OTEL_SDK_DISABLED"]) {
	case "", "false":
	case "true":
		return nil, nil
	default:
		return nil, fmt.Errorf("OTEL_SDK_DISABLED=%q: want true or false", env["OTEL_SDK_DISABLED"])
	}
	switch e := env["OTEL_TRACES_EXPORTER"]; e {
	case "", "otlp":
	case "none":
		return nil, nil
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: agentbot exports traces over OTLP only (otlp, or none for off)", e)
	}
	endpoint, endpointVar := either("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
	if endpoint == "" {
		return nil, nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		// The value is not quoted: a URL may hold a token.
		return nil, fmt.Errorf("%s is not an http(s) URL without credentials, like http://collector:4318", endpointVar)
	}
	protocol, protocolVar := either("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
	if protocol == "" {
		protocol = "http/protobuf"
	}
	headers := map[string]string{}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		if err := parsePairs(env[k], headers); err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
	}
	sampler, err := newSampler(env["OTEL_TRACES_SAMPLER"], env["OTEL_TRACES_SAMPLER_ARG"])
	if err != nil {
		return nil, err
	}
	attrs := map[string]string{}
	if err := parsePairs(env["OTEL_RESOURCE_ATTRIBUTES"], attrs); err != nil {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	if attrs["service.name"] == "" {
		attrs["service.name"] = opts.Service
	}
	if s := env["OTEL_SERVICE_NAME"]; s != "" {
		attrs["service.name"] = s
	}
	if opts.Version != "" && attrs["service.version"] == "" {
		attrs["service.version"] = opts.Version
	}
	var kvs []attribute.KeyValue
	for k, v := range attrs {
		kvs = append(kvs, attribute.String(k, v))
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(kvs...))
	if err != nil {
		return nil, fmt.Errorf("tracing resource: %w", err)
	}

	var exp sdktrace.SpanExporter
	switch protocol {
	case "http/protobuf":
		target := *u
		if endpointVar == "OTEL_EXPORTER_OTLP_ENDPOINT" {
			target.Path = strings.TrimSuffix(target.Path, "/") + "/v1/traces"
		}
		exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(target.String()), otlptracehttp.WithHeaders(headers))
	case "grpc":
		exp, err = otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(u.String()), otlptracegrpc.WithHeaders(headers))
	default:
		return nil, fmt.Errorf("%s=%q: want grpc or http/protobuf", protocolVar, protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res), sdktrace.WithSampler(sampler))
	t := &Tracing{sdk: tp, content: opts.Content, endpoint: u.Redacted(), protocol: protocol}
	t.interceptor, err = newTemporalInterceptor(tp)
	if err != nil {
		_ = tp.Shutdown(ctx)
		return nil, err
	}
	return t, nil
}

// newTemporalInterceptor is the Temporal SDK's OpenTelemetry interceptor
// with agentflow's turn parents: the span context key is
// agentflow.TraceSpanKey, where a turn puts the traceparent of its message.
// Queries are not traced: a gateway waiting for an answer polls one every
// second.
func newTemporalInterceptor(tp trace.TracerProvider) (interceptor.Interceptor, error) {
	inner, err := temporalotel.NewTracer(temporalotel.TracerOptions{
		Tracer:              tp.Tracer("go.temporal.io/sdk"),
		SpanContextKey:      agentflow.TraceSpanKey,
		DisableQueryTracing: true,
	})
	if err != nil {
		return nil, fmt.Errorf("temporal tracing interceptor: %w", err)
	}
	return interceptor.NewTracingInterceptor(turnTracer{inner}), nil
}

// turnTracer is the SDK's OpenTelemetry tracer that also takes an
// agentflow.TraceParent (a remote span named by its traceparent) as a
// parent.
type turnTracer struct{ interceptor.Tracer }

// StartSpan starts a span; a TraceParent parent becomes the remote span it
// names (or no parent, when it names none).
func (t turnTracer) StartSpan(opts *interceptor.TracerStartSpanOptions) (interceptor.TracerSpan, error) {
	if p, ok := opts.Parent.(agentflow.TraceParent); ok {
		ref, err := t.UnmarshalSpan(map[string]string{"traceparent": string(p)})
		o := *opts
		o.Parent = nil
		if err == nil && ref != nil {
			o.Parent = ref
		}
		opts = &o
	}
	return t.Tracer.StartSpan(opts)
}

// Enabled reports whether spans are exported.
func (t *Tracing) Enabled() bool { return t != nil }

// Content reports whether message text and command output may enter span
// attributes.
func (t *Tracing) Content() bool { return t != nil && t.content }

// Describe says where spans go, for the start log ("off" when nowhere).
func (t *Tracing) Describe() string {
	if t == nil {
		return "off"
	}
	return t.endpoint + " (" + t.protocol + ")"
}

// TracerProvider returns the provider of the process's spans; a no-op one
// when tracing is off.
func (t *Tracing) TracerProvider() trace.TracerProvider {
	if t == nil {
		return noop.NewTracerProvider()
	}
	return t.sdk
}

// Tracer returns a tracer of the process's provider.
func (t *Tracing) Tracer(name string) trace.Tracer { return t.TracerProvider().Tracer(name) }

// WithTemporal adds the tracing interceptor to Temporal client options (a
// modifier for temporalclient.Dial). Workers built from the client inherit
// it, so workflows and activities are traced too. Off, it adds nothing:
// the calls carry no tracing header at all.
func (t *Tracing) WithTemporal(opts *client.Options) {
	if t == nil {
		return
	}
	opts.Interceptors = append(opts.Interceptors, t.interceptor)
}

// Interceptor returns the Temporal tracing interceptor (nil when off), for
// a workflow replayer that should run with it.
func (t *Tracing) Interceptor() interceptor.Interceptor {
	if t == nil {
		return nil
	}
	return t.interceptor
}

// HTTPClient returns an HTTP client over base (a clone of
// http.DefaultTransport when nil, so the proxy variables and the system's
// CAs apply) whose requests are spans, children of the span of their
// context; off, the client is base itself, unwrapped.
func (t *Tracing) HTTPClient(base http.RoundTripper) *http.Client {
	if base == nil {
		if dt, ok := http.DefaultTransport.(*http.Transport); ok {
			base = dt.Clone()
		} else {
			base = http.DefaultTransport
		}
	}
	if t == nil {
		return &http.Client{Transport: base}
	}
	return &http.Client{Transport: otelhttp.NewTransport(base,
		otelhttp.WithTracerProvider(t.sdk),
		// The trace context only: baggage could carry what the caller
		// put there to a third party.
		otelhttp.WithPropagators(propagation.TraceContext{}),
	)}
}

// Flush exports the spans ended so far.
func (t *Tracing) Flush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.sdk.ForceFlush(ctx)
}

// Shutdown exports what is left and stops the exporter; ctx bounds the
// wait.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.sdk.Shutdown(ctx)
}

// parsePairs adds the key=value pairs of s (comma-separated, values
// URL-encoded: the W3C baggage form the OTEL_* variables use) to into.
// Errors do not quote values: a header may hold a token.
func parsePairs(s string, into map[string]string) error {
	for _, p := range strings.Split(s, ",") {
		if strings.TrimSpace(p) == "" {
			continue
		}
		k, v, ok := strings.Cut(p, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return errors.New("want key=value pairs separated by commas")
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("the value of %s is not URL-encoded", k)
		}
		into[k] = dv
	}
	return nil
}

// newSampler builds the sampler named by OTEL_TRACES_SAMPLER (the
// specification's names; default parentbased_always_on).
func newSampler(name, arg string) (sdktrace.Sampler, error) {
	ratio := func() (float64, error) {
		if arg == "" {
			return 1, nil
		}
		f, err := strconv.ParseFloat(arg, 64)
		if err != nil || f < 0 || f > 1 {
			return 0, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: want a ratio from 0 to 1", arg)
		}
		return f, nil
	}
	switch name {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "traceidratio", "parentbased_traceidratio":
		f, err := ratio()
		if err != nil {
			return nil, err
		}
		if name == "traceidratio" {
			return sdktrace.TraceIDRatioBased(f), nil
		}
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(f)), nil
	}
	return nil, fmt.Errorf("OTEL_TRACES_SAMPLER=%q: want always_on, always_off, traceidratio or their parentbased_ forms", name)
}
