package slackbot

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.temporal.io/sdk/temporal"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
)

// TestSenderMetrics delivers through the fake Slack with chat.postMessage
// rate limited once: the 429 is counted as rate_limited with the
// Retry-After it asked for, the retry as ok, and a call Slack answers with
// "ok": false as an error.
func TestSenderMetrics(t *testing.T) {
	e := newSenderEnv(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	s := e.sender(t, func(c *SenderConfig) { c.Meter = mp.Meter("test") })

	e.fake.RateLimit("chat.postMessage", 1, 2*time.Second)
	m := agentflow.Outbound{Thread: e.thread, Key: "agent/x/1/notice", Kind: agentflow.OutboundNotice, Turn: 1, Text: agentflow.Text{Inline: "hello"}}
	ctx := context.Background()
	err := s.Deliver(ctx, m)
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != ErrTypeRateLimited {
		t.Fatalf("first delivery: %v, want %s", err, ErrTypeRateLimited)
	}
	if err := s.Deliver(ctx, m); err != nil {
		t.Fatalf("second delivery: %v", err)
	}
	api := slack.New(e.fake.Options().BotToken, slack.OptionAPIURL(e.fake.APIURL()),
		slack.OptionHTTPClient(meteredClient(&http.Client{}, bot.NewMetrics(mp.Meter("test")))))
	if _, _, err := api.PostMessage("", slack.MsgOptionText("nowhere", false)); err == nil {
		t.Fatal("posting to no channel: no error")
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	calls := map[[2]string]int64{}
	var waits []metricdata.HistogramDataPoint[float64]
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			switch mt.Name {
			case "agentbot_chat_calls":
				for _, dp := range mt.Data.(metricdata.Sum[int64]).DataPoints {
					if p, _ := dp.Attributes.Value("platform"); p.AsString() != Platform {
						t.Errorf("platform label %q", p.AsString())
					}
					meth, _ := dp.Attributes.Value(attribute.Key("method"))
					out, _ := dp.Attributes.Value(attribute.Key("outcome"))
					calls[[2]string{meth.AsString(), out.AsString()}] += dp.Value
				}
			case "agentbot_chat_rate_limit_wait":
				waits = mt.Data.(metricdata.Histogram[float64]).DataPoints
			}
		}
	}
	for k, want := range map[[2]string]int64{
		{"chat.postMessage", bot.CallRateLimited}: 1,
		{"chat.postMessage", bot.CallOK}:          1,
		{"chat.postMessage", bot.CallError}:       1,
	} {
		if calls[k] != want {
			t.Errorf("calls %v = %d, want %d (all: %v)", k, calls[k], want, calls)
		}
	}
	if len(waits) != 1 || waits[0].Count != 1 || waits[0].Sum != 2 {
		t.Errorf("rate limit waits = %+v, want one of 2 s", waits)
	}
}

func TestAPIMethod(t *testing.T) {
	for _, c := range []struct{ path, want string }{
		{"/api/chat.postMessage", "chat.postMessage"},
		{"/api/conversations.replies", "conversations.replies"},
		{"/actions/T0001/12345/abcdefSECRET", "response_url"},
		{"/commands/T0001/12345/abcdef", "response_url"},
		{"/upload/v1/ABC123", "upload"},
		{"/api/U12345", "other"},
		{"/", "other"},
	} {
		if got := apiMethod(c.path); got != c.want {
			t.Errorf("apiMethod(%q) = %q, want %q", c.path, got, c.want)
		}
	}
}
