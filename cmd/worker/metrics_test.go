package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	slackbot "github.com/agentbot/agentbot/bot/slack"
	"github.com/agentbot/agentbot/internal/fakeopenai"
	"github.com/agentbot/agentbot/internal/fakeslack"
	"github.com/agentbot/agentbot/internal/secretenv/secretenvtest"
	"github.com/agentbot/agentbot/internal/testenv"
)

// TestMetricsEndToEnd runs the real worker and the real bot (over the fake
// Slack's signed Events API) on a real Temporal dev server with the local
// sandbox, sends one mention whose turn runs one shell command, and reads
// /metrics of both: the worker's on a server of its own
// (AGENTBOT_METRICS_ADDR apart from AGENTBOT_HTTP_ADDR), the bot's on its
// chat server (the same address). Every count must have moved by exactly
// what one turn with one tool call makes, the Temporal SDK's own metrics
// must be there, and no label may carry the thread, the channel or the
// user.
func TestMetricsEndToEnd(t *testing.T) {
	srv := startTemporal(t)
	workerBin := secretenvtest.Build(t, ".")
	botBin := secretenvtest.Build(t, "../bot")
	slack := fakeslack.New(fakeslack.Options{})
	t.Cleanup(slack.Close)
	model := fakeopenai.New(fakeopenai.Options{Script: fakeopenai.DirectiveScript()})
	t.Cleanup(model.Close)
	const user, channel = "UMETRICS", "C0METRICS"
	state := t.TempDir()
	// The bot caches in a real Redis, so that its Redis metrics are there
	// (started first: the free ports below cannot then be its port).
	redis := testenv.StartRedis(context.Background(), t)
	httpAddr, workerMetrics := freeAddr(t), freeAddr(t)
	slack.SetEventsURL("http://" + httpAddr + slackbot.PathEvents)
	env := func(extra ...string) []string {
		return append([]string{
			"HOME=" + state, "PATH=" + os.Getenv("PATH"), "AGENTBOT_STATE_DIR=" + state,
			"TEMPORAL_ADDRESS=" + srv.FrontendHostPort(),
			"OPENAI_BASE_URL=" + model.URL(), "OPENAI_API_KEY=sk-metrics-test",
			"SLACK_BOT_TOKEN=" + slack.Options().BotToken, "SLACK_SIGNING_SECRET=" + slack.Options().SigningSecret,
			"AGENTBOT_SLACK_API_URL=" + slack.APIURL(), "AGENTBOT_ALLOWED_USERS=" + user,
			"AGENTBOT_UNSAFE_LOCAL=true", "AGENTBOT_BACKENDS=local", "AGENTBOT_DEFAULT_BACKEND=local",
		}, extra...)
	}
	w := secretenvtest.Start(t, workerBin, env("AGENTBOT_HTTP_ADDR=127.0.0.1:0", "AGENTBOT_METRICS_ADDR="+workerMetrics))
	w.WaitOutput(t, "worker started", time.Minute)
	b := secretenvtest.Start(t, botBin, env("AGENTBOT_HTTP_ADDR="+httpAddr, "AGENTBOT_METRICS_ADDR="+httpAddr, "REDIS_URL="+redis.URL()))
	waitReady(t, "http://"+httpAddr+"/readyz", b)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker:\n%s\nbot:\n%s", w.Output(), b.Output())
		}
	})
	workerURL, botURL := "http://"+workerMetrics+"/metrics", "http://"+httpAddr+"/metrics"

	// The bot's counts before; the worker's are all zero (a new process
	// that has run nothing yet).
	botBefore := scrape(t, botURL)

	// Slack rate-limits the first message posted: the wait is counted
	// (and the dashboard's rate-limit panel has its series).
	slack.RateLimit("chat.postMessage", 1, time.Second)
	root := slack.PostUserMessage(channel, user, "<@UBOT> sh: echo metrics-probe", "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := slack.WaitFor(ctx, func(s *fakeslack.Server) bool {
		for _, m := range s.Thread(channel, root) {
			if m.BotID != "" && strings.HasPrefix(strings.TrimSpace(m.Text), "done.") {
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatalf("no answer in the thread: %v", err)
	}

	platform := map[string]string{"platform": "slack", "backend": "local"}
	want := []struct {
		name   string
		labels map[string]string
		value  float64
	}{
		{"agentbot_turns_started_total", platform, 1},
		{"agentbot_turns_completed_total", platform, 1},
		{"agentbot_turns_failed_total", platform, 0},
		{"agentbot_turns_stopped_total", platform, 0},
		{"agentbot_turn_duration_seconds", map[string]string{"platform": "slack", "backend": "local", "outcome": "done"}, 1},
		// The shell call, then the answer.
		{"agentbot_model_step_duration_seconds", map[string]string{"outcome": "ok"}, 2},
		{"agentbot_model_step_duration_seconds", map[string]string{"outcome": "error"}, 0},
		{"agentbot_tool_calls_total", map[string]string{"tool": "shell", "outcome": "ok"}, 1},
		{"agentbot_tool_calls_total", nil, 1},
		{"agentbot_sandbox_operation_duration_seconds", map[string]string{"backend": "local", "operation": "exec", "outcome": "ok"}, 1},
		{"agentbot_sandbox_operation_duration_seconds", map[string]string{"backend": "local", "operation": "create", "outcome": "ok"}, 1},
		// The workspace changed, so it was snapshotted after the turn.
		{"agentbot_sandbox_operation_duration_seconds", map[string]string{"backend": "local", "operation": "snapshot", "outcome": "ok"}, 1},
		{"agentbot_sandbox_snapshot_bytes", map[string]string{"backend": "local"}, 1},
		{"agentbot_sessions", map[string]string{"tenant": "slack:" + slack.Options().TeamID, "state": "live"}, 1},
		{"agentbot_sessions", map[string]string{"tenant": "slack:" + slack.Options().TeamID, "state": "destroyed"}, 0},
	}
	// Chat deliveries and the sessions gauge (sampled from visibility,
	// which lags) may come a moment after the answer: wait for them,
	// then require every value exactly.
	var after map[string]*dto.MetricFamily
	deadline := time.Now().Add(90 * time.Second)
	for {
		after = scrape(t, workerURL)
		if value(after, "agentbot_sessions", map[string]string{"state": "live"}) == 1 &&
			value(after, "agentbot_turns_completed_total", nil) == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	for _, c := range want {
		if got := value(after, c.name, c.labels); got != c.value {
			t.Errorf("worker: %s%v = %v, want %v", c.name, c.labels, got, c.value)
		}
	}
	if n := value(after, "agentbot_model_tokens_total", map[string]string{"direction": "input"}); n <= 0 {
		t.Errorf("worker: no input tokens counted (%v)", n)
	}
	if n := value(after, "agentbot_chat_calls_total", map[string]string{"platform": "slack", "method": "chat.postMessage", "outcome": "ok"}); n < 1 {
		t.Errorf("worker: %v chat.postMessage calls counted, want at least the answer", n)
	}
	// The Temporal SDK's own metrics, through the same registry.
	for _, name := range []string{
		"temporal_workflow_task_schedule_to_start_latency_seconds",
		"temporal_activity_schedule_to_start_latency_seconds",
		"temporal_worker_task_slots_available",
		"temporal_sticky_cache_size",
	} {
		if after[name] == nil {
			t.Errorf("worker: no %s", name)
		}
	}
	if n := value(after, "temporal_workflow_task_schedule_to_start_latency_seconds", nil); n < 1 {
		t.Errorf("worker: %v workflow task schedule-to-start latencies, want some", n)
	}

	botAfter := scrape(t, botURL)
	delta := func(name string, labels map[string]string) float64 {
		return value(botAfter, name, labels) - value(botBefore, name, labels)
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		value  float64
	}{
		// The message event of a mention is the same message: one event.
		{"agentbot_inbound_events_total", map[string]string{"platform": "slack", "kind": "mention"}, 1},
		{"agentbot_inbound_events_total", nil, 1},
		{"agentbot_inbound_duplicates_total", nil, 0},
		{"agentbot_inbound_refused_total", nil, 0},
	} {
		if got := delta(c.name, c.labels); got != c.value {
			t.Errorf("bot: %s%v moved by %v, want %v", c.name, c.labels, got, c.value)
		}
	}
	if n := value(botAfter, "agentbot_chat_calls_total", map[string]string{"platform": "slack", "outcome": "ok"}); n < 1 {
		t.Errorf("bot: %v Slack calls counted, want at least auth.test at start", n)
	}
	if n := delta("temporal_request_total", nil); n < 1 {
		t.Errorf("bot: Temporal client requests moved by %v, want the signal-with-start at least", n)
	}

	// A signature that does not verify is refused, and counted.
	resp, err := http.Post("http://"+httpAddr+slackbot.PathEvents, "application/json", strings.NewReader(`{"type":"event_callback"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := value(scrape(t, botURL), "agentbot_inbound_refused_total", map[string]string{"platform": "slack", "reason": "signature"}); resp.StatusCode != http.StatusUnauthorized || got != 1 {
		t.Errorf("an unsigned request: status %d, refused signatures counted %v, want 401 and 1", resp.StatusCode, got)
	}

	// The rate limit met on the first message is counted, by whichever
	// process posted it.
	waits := 0.0
	for _, fams := range []map[string]*dto.MetricFamily{after, botAfter} {
		waits += value(fams, "agentbot_chat_rate_limit_wait_seconds", map[string]string{"platform": "slack", "method": "chat.postMessage"})
	}
	if waits != 1 {
		t.Errorf("%v rate-limit waits counted for chat.postMessage, want 1", waits)
	}
	// A reply in a thread that is no session is looked up in the cache
	// (a miss), and ignored: the cache lookups are counted.
	other := slack.PostUserMessage(channel, user, "hello team", "")
	slack.PostUserMessage(channel, user, "a reply, not for the bot", other)
	var botLast map[string]*dto.MetricFamily
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		botLast = scrape(t, botURL)
		if value(botLast, "agentbot_cache_lookups_total", nil) >= 1 || time.Now().After(deadline) {
			break
		}
	}
	if n := value(botLast, "agentbot_cache_lookups_total", map[string]string{"result": "miss"}); n < 1 {
		t.Errorf("bot: %v cache misses counted for a reply in an unknown thread, want at least 1", n)
	}
	checkDashboard(t, after, botLast)

	// Bounded labels: nothing of the thread, the channel or the person.
	for proc, fams := range map[string]map[string]*dto.MetricFamily{"worker": after, "bot": botAfter} {
		for name, f := range fams {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					for _, bad := range []string{root, channel, user} {
						if strings.Contains(l.GetValue(), bad) {
							t.Errorf("%s: %s has label %s=%q, which holds %q", proc, name, l.GetName(), l.GetValue(), bad)
						}
					}
				}
			}
		}
	}
}

// scrape reads url in the Prometheus text format.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return fams
}

// value sums the series of the family name whose labels include labels:
// the values of counters and gauges, the sample counts of histograms. An
// absent family or series is 0.
func value(fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	sum := 0.0
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			sum += m.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			sum += m.GetGauge().GetValue()
		case dto.MetricType_HISTOGRAM:
			sum += float64(m.GetHistogram().GetSampleCount())
		default:
			sum += m.GetUntyped().GetValue()
		}
	}
	return sum
}

// waitReady waits up to a minute for url to answer 200.
func waitReady(t *testing.T, url string, p *secretenvtest.Process) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-p.Done():
			t.Fatalf("the process exited at start:\n%s", p.Output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not answer 200 after a minute (%v):\n%s", url, err, p.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr())
}

// checkDashboard loads the chart's Grafana dashboard and requires every
// metric its queries name to be among those the processes exported
// (scraped after a turn): a renamed metric must not leave a panel empty.
func checkDashboard(t *testing.T, scraped ...map[string]*dto.MetricFamily) {
	t.Helper()
	data, err := os.ReadFile("../../helm/agentbot/dashboards/agentbot.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	exported := func(name string) bool {
		for _, fams := range scraped {
			if fams[name] != nil {
				return true
			}
			// A histogram is queried through its series.
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				if base, ok := strings.CutSuffix(name, suffix); ok && fams[base] != nil &&
					fams[base].GetType() == dto.MetricType_HISTOGRAM {
					return true
				}
			}
		}
		return false
	}
	metricName := regexp.MustCompile(`\b(?:agentbot|temporal)_[a-z0-9_]+`)
	queried := 0
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("dashboard panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			names := metricName.FindAllString(tg.Expr, -1)
			if len(names) == 0 {
				t.Errorf("dashboard panel %q: %q names no metric of ours", p.Title, tg.Expr)
			}
			for _, n := range names {
				queried++
				if !exported(n) {
					t.Errorf("dashboard panel %q queries %s, which neither process exports", p.Title, n)
				}
			}
		}
	}
	if queried < 20 {
		t.Errorf("the dashboard queries %d metrics; it lost its panels?", queried)
	}
}
