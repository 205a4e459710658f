package slackbot

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"path"
	"regexp"
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
// (agentbot_chat_calls by Web API method and outcome, rate limits with
// their Retry-After); hc itself is left as it is. A nil ms returns hc.
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

// meteredTransport counts Slack API calls. The outcome is Slack's: a Web
// API answer of HTTP 200 with "ok": false is an error.
type meteredTransport struct {
	next http.RoundTripper
	ms   *bot.Metrics
}

// maxPeek bounds the answer read to find its "ok"; a longer one (a file
// download) counts as ok by its status.
const maxPeek = 4 << 20

func (t *meteredTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	method := apiMethod(req.URL.Path)
	resp, err := t.next.RoundTrip(req)
	switch {
	case err != nil:
		t.ms.ChatCall(ctx, Platform, method, bot.CallError)
		return resp, err
	case resp.StatusCode == http.StatusTooManyRequests:
		t.ms.ChatCall(ctx, Platform, method, bot.CallRateLimited)
		t.ms.RateLimited(ctx, Platform, method, retryAfter(resp.Header.Get("Retry-After")))
		return resp, nil
	case resp.StatusCode >= 300:
		t.ms.ChatCall(ctx, Platform, method, bot.CallError)
		return resp, nil
	}
	outcome := bot.CallOK
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") && resp.ContentLength <= maxPeek {
		// The caller reads what was peeked, then the rest (if the
		// answer was longer than maxPeek), from the same body.
		rest := resp.Body
		body, rerr := io.ReadAll(io.LimitReader(rest, maxPeek))
		resp.Body = readCloser{io.MultiReader(bytes.NewReader(body), rest), rest}
		var answer struct {
			OK *bool `json:"ok"`
		}
		if rerr != nil || (json.Unmarshal(body, &answer) == nil && answer.OK != nil && !*answer.OK) {
			outcome = bot.CallError
		}
	}
	t.ms.ChatCall(ctx, Platform, method, outcome)
	return resp, nil
}

// readCloser reads from Reader and closes Closer.
type readCloser struct {
	io.Reader
	io.Closer
}

var methodName = regexp.MustCompile(`^[a-z]+(\.[A-Za-z]+)+$`)

// apiMethod names the Web API method of a request path ("/api/chat.update"
// → "chat.update"), a bounded label: anything else is "response_url" (a
// slash command's or interaction's answer URL), "upload" (the URL files
// are uploaded to) or "other".
func apiMethod(p string) string {
	switch base := path.Base(p); {
	case methodName.MatchString(base):
		return base
	case strings.HasPrefix(p, "/actions/") || strings.HasPrefix(p, "/commands/"):
		return "response_url"
	case strings.HasPrefix(p, "/upload/"):
		return "upload"
	default:
		return "other"
	}
}

// retryAfter reads Retry-After (seconds); a missing or bad one counts as
// one second.
func retryAfter(h string) time.Duration {
	n, err := strconv.ParseFloat(strings.TrimSpace(h), 64)
	if err != nil || n < 0 {
		return time.Second
	}
	return time.Duration(n * float64(time.Second))
}
