package discordbot

import (
	"context"
	"math"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/agentbot/agentbot/bot"
	"github.com/agentbot/agentbot/internal/fakediscord"
)

// TestSenderMetrics: a message posted through a rate limit that the
// sender waits out counts one rate-limited call with the wait Discord
// asked for, then one ok call, under the route's label.
func TestSenderMetrics(t *testing.T) {
	srv := newFake(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	s, err := NewSender(SenderConfig{Token: srv.Options().BotToken, Meter: mp.Meter("test")})
	if err != nil {
		t.Fatal(err)
	}
	ch := srv.AddChannel("general", fakediscord.ChannelText)
	srv.RateLimit("POST /channels/{channel}/messages", 1, 50*time.Millisecond)
	if err := s.Deliver(context.Background(), answer(ThreadKey(srv.Options().GuildID, ch), "k", "hello")); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	const post = "POST channels/{id}/messages"
	calls := map[string]int64{}
	var waits []metricdata.HistogramDataPoint[float64]
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			switch mt.Name {
			case "agentbot_chat_calls":
				for _, dp := range mt.Data.(metricdata.Sum[int64]).DataPoints {
					m, _ := dp.Attributes.Value("method")
					o, _ := dp.Attributes.Value("outcome")
					if m.AsString() == post {
						calls[o.AsString()] += dp.Value
					}
				}
			case "agentbot_chat_rate_limit_wait":
				waits = mt.Data.(metricdata.Histogram[float64]).DataPoints
			}
		}
	}
	if calls[bot.CallRateLimited] != 1 || calls[bot.CallOK] != 1 || calls[bot.CallError] != 0 {
		t.Errorf("calls of %s = %v, want 1 rate_limited and 1 ok", post, calls)
	}
	if len(waits) != 1 || waits[0].Count != 1 || math.Abs(waits[0].Sum-0.05) > 1e-9 {
		t.Errorf("rate limit waits = %+v, want one of 0.05 s", waits)
	}
}

// TestRoute: the label of a REST call keeps the route's words and never an
// ID, a token or a file name.
func TestRoute(t *testing.T) {
	for _, c := range []struct{ method, path, want string }{
		{"POST", "/api/v10/channels/123456789/messages", "POST channels/{id}/messages"},
		{"PATCH", "/api/v9/channels/1/messages/2", "PATCH channels/{id}/messages/{id}"},
		{"PATCH", "/api/v10/webhooks/99/aW50ZXJhY3Rpb246MTIzNDU2Nzg5OmFiYw/messages/@original", "PATCH webhooks/{id}/{id}/messages/@original"},
		{"POST", "/api/v10/interactions/1/abcdefghijklmnopqrstuvwxyzabc/callback", "POST interactions/{id}/{id}/callback"},
		{"GET", "/attachments/1/2/report.txt", "GET attachments/{id}/{id}/{id}"},
		{"GET", "/api/v10/users/@me", "GET users/@me"},
	} {
		if got := route(c.method, c.path); got != c.want {
			t.Errorf("route(%s %s) = %q, want %q", c.method, c.path, got, c.want)
		}
	}
}
