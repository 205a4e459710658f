package agentflow

import (
	"context"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/workflow"
)

// A turn's spans belong to the trace of the message that started it: the
// gateway's span of the inbound event. Temporal's tracing interceptor
// parents the spans it starts in workflow code (StartActivity and, through
// the activity's header, RunActivity and whatever the activity starts) on
// the span it finds in the workflow.Context under its SpanContextKey; a
// long-lived session's own span is the one of the message that started the
// workflow, days ago. So the message carries the traceparent of the
// gateway's span (MessageRequest.Trace, in the history like the rest of
// the message: replay sees the same), and a turn puts it into its context
// under TraceSpanKey, which internal/telemetry configures as the
// interceptor's SpanContextKey. No command changes: only the headers of
// the activities the turn schedules.

// TraceSpanKey is the workflow.Context key under which the tracing
// interceptor (internal/telemetry) keeps the current span. A turn puts its
// TraceParent there.
var TraceSpanKey any = traceSpanKey{}

type traceSpanKey struct{}

// TraceParent is a W3C traceparent ("00-<trace id>-<span id>-<flags>"): the
// span of another process that is the parent of the spans a turn starts.
// It is an interceptor.TracerSpan that internal/telemetry's tracer turns
// into a remote parent; Finish does nothing, as the span is not ours.
type TraceParent string

// Finish does nothing: the span belongs to the process that sent the
// message.
func (TraceParent) Finish(*interceptor.TracerFinishSpanOptions) {}

// TraceID returns the trace ID of p (32 hex digits), or "" when p is not a
// valid traceparent. Pure string work: workflow code calls it.
func (p TraceParent) TraceID() string {
	parts := strings.Split(string(p), "-")
	if len(parts) < 4 || len(parts[0]) != 2 || len(parts[1]) != 32 || len(parts[2]) != 16 || len(parts[3]) != 2 {
		return ""
	}
	if !isHex(parts[1]) || !isHex(parts[2]) || !isHex(parts[3]) || strings.Trim(parts[1], "0") == "" {
		return ""
	}
	return parts[1]
}

// Sampled reports whether p is a valid traceparent whose span is
// recorded (the low bit of its flags): only then is there a trace a
// person can look up.
func (p TraceParent) Sampled() bool {
	return p.TraceID() != "" && strings.ContainsRune("13579bdf", rune(p[len(p)-1]))
}

func isHex(s string) bool {
	for _, r := range s {
		if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') {
			return false
		}
	}
	return true
}

// traceParentOf returns the traceparent of ctx's span, "" when it has
// none (tracing off).
func traceParentOf(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), carrier)
	return carrier.Get("traceparent")
}

// withTurnTrace returns ctx with the traceparent of the newest of msgs that
// has one, as the parent of the spans the turn starts (a parent that was
// not sampled keeps the turn's spans unsampled too), and its trace ID when
// it was sampled ("" otherwise).
func withTurnTrace(ctx workflow.Context, msgs []QueuedMessage) (workflow.Context, string) {
	for i := len(msgs) - 1; i >= 0; i-- {
		if p := TraceParent(msgs[i].Trace); p.TraceID() != "" {
			ctx = workflow.WithValue(ctx, TraceSpanKey, p)
			if p.Sampled() {
				return ctx, p.TraceID()
			}
			return ctx, ""
		}
	}
	return ctx, ""
}

// maxTraceContent bounds a text put into a span attribute with
// Activities.TraceContent.
const maxTraceContent = 4 << 10

// traceAttrs sets attributes on the span of ctx (the interceptor's
// RunActivity span), if any.
func traceAttrs(ctx context.Context, kv ...attribute.KeyValue) {
	trace.SpanFromContext(ctx).SetAttributes(kv...)
}

// traceContent sets a text attribute on the span of ctx, only with
// TraceContent, redacted and cut to maxTraceContent.
func (a *Activities) traceContent(span trace.Span, key, text string) {
	if !a.TraceContent || !span.IsRecording() {
		return
	}
	text = a.redactor().String(text)
	if len(text) > maxTraceContent {
		text = text[:maxTraceContent]
		for !utf8.ValidString(text) {
			text = text[:len(text)-1]
		}
	}
	span.SetAttributes(attribute.String(key, text))
}

// startSpan starts a child of ctx's span with the same tracer provider
// (none when tracing is off): how activities trace the sandbox calls
// they make.
func startSpan(ctx context.Context, name string, kv ...attribute.KeyValue) (context.Context, trace.Span) {
	tp := trace.SpanFromContext(ctx).TracerProvider()
	return tp.Tracer("github.com/agentbot/agentbot/agentflow").Start(ctx, name, trace.WithAttributes(kv...))
}

// endSpan ends span, marking it failed when err is not nil (the error's
// text stays out: it may quote a path or what a command printed).
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, "failed")
	}
	span.End()
}
