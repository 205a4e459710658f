package discordbot

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/agentbot/agentbot/bot"
)

// meterOf returns the chat metrics on m, nil for a nil m.
func meterOf(m metric.Meter) *bot.Metrics {
	if m == nil {
		return nil
	}
	return bot.NewMetrics(m)
}

// meteredClient returns a copy of hc whose calls are counted on ms
// (agentbot_chat_calls by route and outcome, rate limits with the wait
// Discord asked for); hc itself is left as it is. A nil ms returns hc.
func meteredClient(hc *http.Client, ms *bot.Metrics) *http.Client {
	if ms == nil {
		return hc
	}
	next := hc.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	c := *hc
	c.Transport = &meteredTransport{next: next, ms: ms}
	return &c
}

type meteredTransport struct {
	next http.RoundTripper
	ms   *bot.Metrics
}

func (t *meteredTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	method := route(req.Method, req.URL.Path)
	resp, err := t.next.RoundTrip(req)
	switch {
	case err != nil:
		t.ms.ChatCall(ctx, Platform, method, bot.CallError)
	case resp.StatusCode == http.StatusTooManyRequests:
		t.ms.ChatCall(ctx, Platform, method, bot.CallRateLimited)
		t.ms.RateLimited(ctx, Platform, method, resetAfter(resp.Header))
	case resp.StatusCode >= 300:
		t.ms.ChatCall(ctx, Platform, method, bot.CallError)
	default:
		t.ms.ChatCall(ctx, Platform, method, bot.CallOK)
	}
	return resp, err
}

// route names a REST call by its HTTP method and its route, a bounded
// label: "/api/v10/channels/123/messages/456" → "POST channels/{id}/messages/{id}".
// Every segment that is not a short lowercase word (IDs, interaction
// tokens, file names, emoji) becomes {id}, so no ID or token is ever a
// label value.
func route(method, p string) string {
	segs := strings.Split(strings.Trim(p, "/"), "/")
	out := make([]string, 0, len(segs))
	for i, s := range segs {
		switch {
		case i == 0 && s == "api":
			continue
		case i == 1 && segs[0] == "api" && len(s) > 1 && s[0] == 'v' && isDigits(s[1:]):
			continue
		case isWord(s):
			out = append(out, s)
		default:
			out = append(out, "{id}")
		}
	}
	return method + " " + strings.Join(out, "/")
}

func isDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// isWord: the words of Discord's routes ("channels", "messages",
// "threads", "@original", "callback", "bulk-delete").
func isWord(s string) bool {
	if s == "" || len(s) > 24 {
		return false
	}
	for i, c := range s {
		if !(c >= 'a' && c <= 'z' || c == '-' || c == '_' || i == 0 && c == '@') {
			return false
		}
	}
	return true
}

// resetAfter is the wait a 429 asks for: X-RateLimit-Reset-After
// (seconds, fractional) or else Retry-After (whole seconds); a missing one
// counts as one second.
func resetAfter(h http.Header) time.Duration {
	for _, k := range []string{"X-RateLimit-Reset-After", "Retry-After"} {
		if n, err := strconv.ParseFloat(strings.TrimSpace(h.Get(k)), 64); err == nil && n >= 0 {
			return time.Duration(n * float64(time.Second))
		}
	}
	return time.Second
}
