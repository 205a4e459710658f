package bot

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// Metrics of the chat side, made from one meter. The router counts inbound
// events and cache lookups; the platforms' adapters count refused
// signatures and their outbound calls. Labels are bounded: platform, kind,
// reason, method and outcome come from fixed sets (a value outside is
// "other"), never thread keys, user IDs or text. A nil *Metrics (and
// NewMetrics(nil)) records nothing.
type Metrics struct {
	events, duplicates, refused metric.Int64Counter
	cache                       metric.Int64Counter
	calls                       metric.Int64Counter
	rateWait                    metric.Float64Histogram
}

// NewMetrics makes the chat side's instruments on m (nil: a no-op meter).
// Two Metrics on the same meter share their instruments.
func NewMetrics(m metric.Meter) *Metrics {
	if m == nil {
		m = noop.NewMeterProvider().Meter("")
	}
	var ms Metrics
	// The meter fails only on invalid names or options (fixed here), and
	// hands back a working no-op instrument then.
	ms.events, _ = m.Int64Counter("agentbot_inbound_events",
		metric.WithDescription("Events received from a chat platform, by platform and kind (message, mention, command), duplicates included."))
	ms.duplicates, _ = m.Int64Counter("agentbot_inbound_duplicates",
		metric.WithDescription("Repeated deliveries of an event already handled (platform retries), dropped, by platform."))
	ms.refused, _ = m.Int64Counter("agentbot_inbound_refused",
		metric.WithDescription("Inbound requests refused, by platform and reason (access: outside the allowlists; signature: a bad or stale request signature)."))
	ms.cache, _ = m.Int64Counter("agentbot_cache_lookups",
		metric.WithDescription("Thread cache lookups, by result (hit: an entry, positive or negative; miss: none; error: the cache failed)."))
	ms.calls, _ = m.Int64Counter("agentbot_chat_calls",
		metric.WithDescription("Calls to a chat platform's API, by platform, method and outcome (ok, error, rate_limited)."))
	ms.rateWait, _ = m.Float64Histogram("agentbot_chat_rate_limit_wait", metric.WithUnit("s"),
		metric.WithDescription("Rate limits met calling a chat platform, by platform and method, with the wait the platform asked for (waited out in process or by the activity's retry)."))
	// The counters of what is rare start at zero for every label set
	// (bounded: three platforms, two reasons), so that a dashboard and an
	// alert see 0 rather than no series until the first one.
	ctx := context.Background()
	for _, p := range []string{"slack", "discord", "term"} {
		ms.duplicates.Add(ctx, 0, metric.WithAttributes(platformLabel(p)))
		for _, r := range []string{RefusedAccess, RefusedSignature} {
			ms.refused.Add(ctx, 0, metric.WithAttributes(platformLabel(p), attribute.String("reason", r)))
		}
	}
	return &ms
}

func oneOf(v string, allowed ...string) string {
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	return "other"
}

func platformLabel(p string) attribute.KeyValue {
	return attribute.String("platform", oneOf(p, "slack", "discord", "term"))
}

// Event counts an event received.
func (ms *Metrics) Event(ctx context.Context, platform string, kind Kind) {
	if ms == nil {
		return
	}
	ms.events.Add(ctx, 1, metric.WithAttributes(platformLabel(platform),
		attribute.String("kind", oneOf(string(kind), string(KindMessage), string(KindMention), string(KindCommand)))))
}

// Duplicate counts a repeated delivery that was dropped.
func (ms *Metrics) Duplicate(ctx context.Context, platform string) {
	if ms == nil {
		return
	}
	ms.duplicates.Add(ctx, 1, metric.WithAttributes(platformLabel(platform)))
}

// Reasons of Refused.
const (
	RefusedAccess    = "access"
	RefusedSignature = "signature"
)

// Refused counts a request refused for reason (RefusedAccess,
// RefusedSignature).
func (ms *Metrics) Refused(ctx context.Context, platform, reason string) {
	if ms == nil {
		return
	}
	ms.refused.Add(ctx, 1, metric.WithAttributes(platformLabel(platform),
		attribute.String("reason", oneOf(reason, RefusedAccess, RefusedSignature))))
}

// CacheLookup counts a thread cache lookup: found says an entry was there,
// err that the cache failed.
func (ms *Metrics) CacheLookup(ctx context.Context, found bool, err error) {
	if ms == nil {
		return
	}
	r := "miss"
	switch {
	case err != nil:
		r = "error"
	case found:
		r = "hit"
	}
	ms.cache.Add(ctx, 1, metric.WithAttributes(attribute.String("result", r)))
}

// Outcomes of ChatCall.
const (
	CallOK          = "ok"
	CallError       = "error"
	CallRateLimited = "rate_limited"
)

// ChatCall counts one call of a platform's API. method must come from a
// bounded set (an API method name, a route with its IDs replaced).
func (ms *Metrics) ChatCall(ctx context.Context, platform, method, outcome string) {
	if ms == nil {
		return
	}
	ms.calls.Add(ctx, 1, metric.WithAttributes(platformLabel(platform), attribute.String("method", method),
		attribute.String("outcome", oneOf(outcome, CallOK, CallError, CallRateLimited))))
}

// RateLimited records a rate limit met by a call of method, and the wait
// the platform asked for.
func (ms *Metrics) RateLimited(ctx context.Context, platform, method string, wait time.Duration) {
	if ms == nil {
		return
	}
	ms.rateWait.Record(ctx, wait.Seconds(), metric.WithAttributes(platformLabel(platform), attribute.String("method", method)))
}
