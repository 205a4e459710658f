package bot

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// startSpan starts the span of an inbound event, the root of the trace of
// what the event causes: the Temporal call (whose interceptor makes its span
// a child of this one) and, for a message, the turn it starts (Client.Send
// hands the session this span's traceparent). Its attributes are IDs; the
// text only with TraceContent, redacted.
func (r *Router) startSpan(ctx context.Context, ev Event) (context.Context, trace.Span) {
	if r.Tracer == nil {
		return ctx, trace.SpanFromContext(context.Background()) // a span that records nothing
	}
	ctx, span := r.Tracer.Start(ctx, "agentbot.inbound "+string(ev.Kind), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			attribute.String("agentbot.platform", ev.Platform),
			attribute.String("agentbot.event.kind", string(ev.Kind)),
			attribute.String("agentbot.event.id", ev.ID),
			attribute.String("agentbot.thread", ev.ThreadKey+ev.NewThreadKey),
			attribute.String("agentbot.channel", ev.Channel),
			attribute.String("agentbot.user", ev.User),
			attribute.String("agentbot.message_id", ev.MessageID),
			attribute.Int("agentbot.files", len(ev.Files)),
			attribute.Bool("agentbot.retry", ev.Retry),
		))
	if r.TraceContent && span.IsRecording() {
		span.SetAttributes(attribute.String("agentbot.text", r.redactor().String(ev.Text)))
	}
	return ctx, span
}
