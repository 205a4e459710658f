package agentflow

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/agentbot/agentbot/agentflow/llm"
	"github.com/agentbot/agentbot/sandboxes"
)

// Metric names (as Prometheus shows them; OpenTelemetry instruments are
// named without the unit and _total suffixes, which the exporter adds).
// docs/operations.md lists them with their labels.
const (
	// Recorded by AgentWorkflow through workflow.GetMetricsHandler (so a
	// replay records nothing); the SDK adds namespace, task_queue and
	// workflow_type. Labels: backend, platform.
	metricTurnsStarted   = "agentbot_turns_started"
	metricTurnsCompleted = "agentbot_turns_completed"
	metricTurnsFailed    = "agentbot_turns_failed"
	metricTurnsStopped   = "agentbot_turns_stopped"
	// Labels: backend, platform, outcome (done, step_limit, failed,
	// stopped, canceled).
	metricTurnDuration = "agentbot_turn_duration"
)

// Bucket bounds of the histograms agentflow records itself (those in
// seconds get the provider's buckets: see internal/telemetry).
var snapshotBuckets = []float64{1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30, 4 << 30}

// instruments are the activities' instruments, made once from
// Activities.Meter.
type instruments struct {
	modelStep    metric.Float64Histogram
	tokens       metric.Int64Counter
	toolCalls    metric.Int64Counter
	sandboxOp    metric.Float64Histogram
	snapshotSize metric.Int64Histogram
}

func newInstruments(m metric.Meter) *instruments {
	if m == nil {
		m = noop.NewMeterProvider().Meter("")
	}
	var ins instruments
	// Errors of the meter are for invalid names and options, fixed here;
	// the SDK then hands back a working no-op instrument.
	ins.modelStep, _ = m.Float64Histogram("agentbot_model_step_duration", metric.WithUnit("s"),
		metric.WithDescription("Time of one model call (ModelStep activity attempt), by outcome (ok, error)."))
	ins.tokens, _ = m.Int64Counter("agentbot_model_tokens", metric.WithUnit("{token}"),
		metric.WithDescription("Tokens the model endpoint reported, by direction (input, output)."))
	ins.toolCalls, _ = m.Int64Counter("agentbot_tool_calls",
		metric.WithDescription("Tool calls run, by tool (shell, read_file, write_file, other) and outcome (ok: succeeded; failed: the command or file operation failed, told to the model; error: the sandbox failed)."))
	ins.sandboxOp, _ = m.Float64Histogram("agentbot_sandbox_operation_duration", metric.WithUnit("s"),
		metric.WithDescription("Time of sandbox operations, by backend, operation (create, attach, exec, snapshot, restore, stop, destroy) and outcome (ok, not_found, error)."))
	ins.snapshotSize, _ = m.Int64Histogram("agentbot_sandbox_snapshot", metric.WithUnit("By"),
		metric.WithDescription("Size of workspace snapshots written to the blob store (compressed), by backend."),
		metric.WithExplicitBucketBoundaries(snapshotBuckets...))
	return &ins
}

// metrics returns the activities' instruments.
func (a *Activities) metrics() *instruments {
	a.insOnce.Do(func() { a.ins = newInstruments(a.Meter) })
	return a.ins
}

func outcome(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

// sandboxOp records one sandbox operation that began at start. A sandbox
// that is gone is an outcome of its own (not_found): attach finds a lost
// sandbox that way, and destroy one already destroyed.
func (a *Activities) sandboxOp(ctx context.Context, backend, op string, start time.Time, err error) {
	o := outcome(err)
	if errors.Is(err, sandboxes.ErrNotFound) {
		o = "not_found"
	}
	a.metrics().sandboxOp.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(
		attribute.String("backend", backend), attribute.String("operation", op), attribute.String("outcome", o)))
}

// recordModel records one model call (with its compaction retries) that
// began at start, and the tokens it used.
func (a *Activities) recordModel(ctx context.Context, start time.Time, u llm.Usage, err error) {
	ins := a.metrics()
	ins.modelStep.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(attribute.String("outcome", outcome(err))))
	if u.InputTokens > 0 {
		ins.tokens.Add(ctx, u.InputTokens, metric.WithAttributes(attribute.String("direction", "input")))
	}
	if u.OutputTokens > 0 {
		ins.tokens.Add(ctx, u.OutputTokens, metric.WithAttributes(attribute.String("direction", "output")))
	}
}

// toolLabel bounds the tool label: the model may name any tool.
func toolLabel(name string) string {
	switch name {
	case "shell", "read_file", "write_file":
		return name
	default:
		return "other"
	}
}

// recordTool records a finished tool call.
func (a *Activities) recordTool(ctx context.Context, name string, res ToolResult, err error) {
	o := "failed"
	switch {
	case err != nil:
		o = "error"
	case res.OK:
		o = "ok"
	}
	a.metrics().toolCalls.Add(ctx, 1, metric.WithAttributes(attribute.String("tool", toolLabel(name)), attribute.String("outcome", o)))
}

// turnMetrics records a turn's start in workflow code and returns what
// records its end. The workflow's metrics handler records nothing while
// the workflow replays, so a turn counts once however often its history
// is replayed.
func (w *agent) turnMetrics(ctx workflow.Context) (end func(TurnStatus)) {
	h := workflow.GetMetricsHandler(ctx).WithTags(map[string]string{
		"backend": w.Backend, "platform": Platform(w.ThreadKey),
	})
	h.Counter(metricTurnsStarted).Inc(1)
	start := workflow.Now(ctx)
	return func(st TurnStatus) {
		switch st {
		case TurnDone, TurnStepCap:
			h.Counter(metricTurnsCompleted).Inc(1)
		case TurnStopped, TurnCanceled:
			h.Counter(metricTurnsStopped).Inc(1)
		default:
			h.Counter(metricTurnsFailed).Inc(1)
		}
		h.WithTags(map[string]string{"outcome": string(st)}).Timer(metricTurnDuration).Record(workflow.Now(ctx).Sub(start))
	}
}

// Session states of the agentbot_sessions gauge.
const (
	sessionLive      = "live"
	sessionPaused    = "paused"
	sessionDestroyed = "destroyed"
)

// SessionGaugeOptions tune ObserveSessions.
type SessionGaugeOptions struct {
	// Every is how long a sample is kept before the next scrape takes a
	// new one (default 30 s).
	Every time.Duration
	// Timeout bounds one sample (default 5 s); a sample that fails or
	// times out leaves the last one in place.
	Timeout time.Duration
	// DataConverter decodes the sessions' memos: the one the Temporal
	// client was made with (nil: Temporal's default).
	DataConverter converter.DataConverter
	// MaxSessions bounds the sessions one sample reads (default 10,000):
	// past it the counts are of the newest sessions only.
	MaxSessions int
	// Logger receives sampling failures (at debug level); nil means
	// slog.Default.
	Logger *slog.Logger
}

// ObserveSessions registers the observable gauge agentbot_sessions{tenant,
// state} on meter: the sessions of each tenant ("slack:T123",
// "discord:G1", "term:local") that are live, paused or destroyed, as
// Temporal's visibility lists them (each session keeps its registry entry
// in its memo: the same source as Client.List). It is sampled when the
// metrics are read, at most once per opts.Every, within opts.Timeout.
// Destroyed sessions are counted while visibility keeps them (the
// namespace's retention). The returned registration unregisters it.
func ObserveSessions(meter metric.Meter, tc client.Client, opts SessionGaugeOptions) (metric.Registration, error) {
	if opts.Every <= 0 {
		opts.Every = 30 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.MaxSessions <= 0 {
		opts.MaxSessions = 10000
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	g, err := meter.Int64ObservableGauge("agentbot_sessions",
		metric.WithDescription("Sessions by tenant (platform:tenant) and state (live, paused, destroyed), sampled from Temporal's visibility at most every 30 s."))
	if err != nil {
		return nil, err
	}
	s := &sessionSampler{tc: tc, opts: opts}
	return meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		for _, c := range s.counts(ctx) {
			o.ObserveInt64(g, int64(c.n), metric.WithAttributes(attribute.String("tenant", c.tenant), attribute.String("state", c.state)))
		}
		return nil
	}, g)
}

type sessionCount struct {
	tenant, state string
	n             int
}

// sessionSampler caches the last sample of the session counts.
type sessionSampler struct {
	tc   client.Client
	opts SessionGaugeOptions

	mu   sync.Mutex
	at   time.Time
	last []sessionCount
}

func (s *sessionSampler) counts(ctx context.Context) []sessionCount {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.at.IsZero() && time.Since(s.at) < s.opts.Every {
		return s.last
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	counts, err := countSessions(ctx, s.tc, cmp.Or(s.opts.DataConverter, converter.GetDefaultDataConverter()), s.opts.MaxSessions)
	if err != nil {
		s.opts.Logger.Debug("sampling the sessions for metrics failed; keeping the last sample", "error", err)
		// Try again at the next scrape, not at once.
		s.at = time.Now().Add(-s.opts.Every + 5*time.Second)
		return s.last
	}
	s.at, s.last = time.Now(), counts
	return counts
}

// countSessions counts the sessions of every tenant by state, reading at
// most max executions of AgentWorkflow from visibility (newest first).
func countSessions(ctx context.Context, tc client.Client, dc converter.DataConverter, max int) ([]sessionCount, error) {
	query := "WorkflowType = '" + AgentWorkflowName + "'"
	type key struct{ tenant, state string }
	n := map[key]int{}
	var tenants []string
	seen := map[string]bool{}
	read := 0
	var token []byte
	for read < max {
		resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: query, NextPageToken: token, PageSize: int32(min(1000, max-read)),
		})
		if err != nil {
			return nil, fmt.Errorf("listing the sessions: %w", err)
		}
		for _, ex := range resp.Executions {
			read++
			st := ex.GetStatus()
			if st == enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
				continue // an earlier run: the session's newest run counts
			}
			id := ex.GetExecution().GetWorkflowId()
			if seen[id] {
				continue
			}
			seen[id] = true
			platform, tenant := Tenant(strings.TrimPrefix(id, "agent/"))
			state := sessionLive
			switch {
			case st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
				state = sessionDestroyed
			default:
				var e SessionEntry
				if f := ex.GetMemo().GetFields()[MemoSession]; f != nil &&
					dc.FromPayload(f, &e) == nil && e.Status == StatusPaused {
					state = sessionPaused
				}
			}
			t := platform + ":" + tenant
			if !slices.Contains(tenants, t) {
				tenants = append(tenants, t)
			}
			n[key{t, state}]++
		}
		token = resp.NextPageToken
		if len(token) == 0 {
			break
		}
	}
	// Every state of a tenant seen, zeros too: a count that falls to 0
	// shows as 0, not as a series that stops.
	out := make([]sessionCount, 0, 3*len(tenants))
	for _, t := range tenants {
		for _, st := range []string{sessionLive, sessionPaused, sessionDestroyed} {
			out = append(out, sessionCount{tenant: t, state: st, n: n[key{t, st}]})
		}
	}
	return out, nil
}
