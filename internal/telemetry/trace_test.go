package telemetry_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"google.golang.org/protobuf/proto"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
	"github.com/agentbot/agentbot/bot/terminal"
	"github.com/agentbot/agentbot/internal/agentworker"
	"github.com/agentbot/agentbot/internal/config"
	"github.com/agentbot/agentbot/internal/telemetry"
	"github.com/agentbot/agentbot/internal/temporalclient"
	"github.com/agentbot/agentbot/internal/testenv"
	"github.com/agentbot/agentbot/store"
)

// receiver is an OTLP/HTTP trace receiver: it decodes the exporter's
// protobuf requests, as a collector does.
type receiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
	// headers are the values of the test header seen on exports.
	headers []string
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want a protobuf POST to /v1/traces", http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	rc.headers = append(rc.headers, r.Header.Get("X-Test-Token"))
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			rc.spans = append(rc.spans, ss.Spans...)
		}
	}
	rc.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (rc *receiver) all() []*tracepb.Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.spans)
}

// TestOneTraceFromEventToSandbox runs one turn the way the embedded bot
// does — the configuration loaded from an environment that names an OTLP
// endpoint, the Temporal client dialled with the tracing interceptor, the
// worker agentworker builds (the built-in scripted model behind otelhttp,
// the local sandbox), an event handed to bot.Router — against an OTLP/HTTP
// receiver, and checks that the spans form one trace from the inbound event
// to the sandbox exec with every parent present, that the session's status
// names that trace, and that message text and command output are in no
// attribute unless AGENTBOT_TRACE_CONTENT=true.
func TestOneTraceFromEventToSandbox(t *testing.T) {
	ctx := context.Background()
	srv, err := testenv.StartTemporal(ctx, testenv.TemporalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })

	for _, content := range []bool{false, true} {
		t.Run(fmt.Sprintf("content=%v", content), func(t *testing.T) {
			// The marker is in the message and in what the command prints:
			// neither may reach a span unless content is on.
			marker := fmt.Sprintf("zebra%dquartz", time.Now().UnixNano())
			rc := &receiver{}
			otlp := httptest.NewServer(rc)
			t.Cleanup(otlp.Close)
			state := t.TempDir()
			environ := []string{
				"HOME=" + state, "AGENTBOT_STATE_DIR=" + state,
				"TEMPORAL_ADDRESS=" + srv.FrontendHostPort(),
				"OPENAI_BASE_URL=fake",
				"OTEL_EXPORTER_OTLP_ENDPOINT=" + otlp.URL,
				"OTEL_EXPORTER_OTLP_HEADERS=x-test-token=tok%20en",
				fmt.Sprintf("AGENTBOT_TRACE_CONTENT=%v", content),
			}
			cfg, err := config.Load(environ)
			if err != nil {
				t.Fatal(err)
			}
			tracing, err := telemetry.NewTracing(ctx, environ, telemetry.TraceOptions{Service: "agentbot-test", Content: cfg.TraceContent})
			if err != nil {
				t.Fatal(err)
			}
			if !tracing.Enabled() {
				t.Fatal("tracing is off with OTEL_EXPORTER_OTLP_ENDPOINT set")
			}
			t.Cleanup(func() { _ = tracing.Shutdown(context.Background()) })
			tc, err := temporalclient.Dial(ctx, cfg, srv.FrontendHostPort(), testenv.Logger(), tracing.WithTemporal)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(tc.Close)
			logger := slog.New(slog.NewTextHandler(io.Discard, nil))
			w, err := agentworker.New(ctx, tc, agentworker.Options{
				Config: cfg, Logger: logger, Tracing: tracing,
				Chat: map[string]agentflow.ChatSender{"term": terminal.NewSender(&testenv.Buffer{})},
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(w.Stop)
			router := &bot.Router{
				Sessions: agentflow.NewClient(tc), Cache: store.NewMemoryCache(),
				Backends: []string{"local"}, DefaultBackend: "local", Logger: logger,
				Tracer: tracing.Tracer("github.com/agentbot/agentbot/bot"), TraceContent: tracing.Content(),
			}
			thread := fmt.Sprintf("term:trace-%v", content)
			var replies []string
			reply := bot.ReplierFunc(func(_ context.Context, r bot.Response) error {
				replies = append(replies, r.Text)
				return nil
			})
			ev := bot.Event{ID: "ev-1", Platform: "term", Kind: bot.KindMention, ThreadKey: thread,
				User: "alice", Text: "sh: echo " + marker, MessageID: "msg-1"}
			if err := router.Handle(ctx, ev, reply); err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			res, err := router.Sessions.Wait(wctx, thread, "msg-1")
			if err != nil {
				t.Fatal(err)
			}
			if res.Result == nil || !strings.Contains(res.Result.Answer, marker) {
				t.Fatalf("the turn did not run the command: %+v", res.Result)
			}
			view, err := router.Sessions.State(ctx, thread)
			if err != nil {
				t.Fatal(err)
			}
			// The status a person asks for names the trace of the turn.
			replies = nil
			if err := router.Handle(ctx, bot.Event{ID: "ev-2", Platform: "term", Kind: bot.KindCommand, ThreadKey: thread,
				User: "alice", Text: "status"}, reply); err != nil {
				t.Fatal(err)
			}
			if view.Trace == "" || !strings.Contains(strings.Join(replies, "\n"), "trace `"+view.Trace+"`") {
				t.Fatalf("status does not name the turn's trace %q: %q", view.Trace, replies)
			}
			// Ending the session ends the workflow's own span, the parent
			// of what the session does outside turns.
			if err := router.Handle(ctx, bot.Event{ID: "ev-3", Platform: "term", Kind: bot.KindCommand, ThreadKey: thread,
				User: "alice", Text: "destroy"}, reply); err != nil {
				t.Fatal(err)
			}
			if err := tc.GetWorkflow(wctx, agentflow.AgentWorkflowID(thread), "").Get(wctx, nil); err != nil {
				t.Fatalf("the destroyed session's workflow: %v", err)
			}
			if err := tracing.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			// The history of a traced session (traceparents in its
			// messages, tracing headers on its events) replays, with the
			// interceptor and without.
			var h historypb.History
			it := tc.GetWorkflowHistory(ctx, agentflow.AgentWorkflowID(thread), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
			for it.HasNext() {
				e, err := it.Next()
				if err != nil {
					t.Fatal(err)
				}
				h.Events = append(h.Events, e)
			}
			for _, tr := range []*telemetry.Tracing{tracing, nil} {
				if err := replayer(t, tr).ReplayWorkflowHistory(quietLogger(), &h); err != nil {
					t.Errorf("replaying the traced session (interceptor %v): %v", tr.Enabled(), err)
				}
			}

			spans := rc.all()
			byID := map[string]*tracepb.Span{}
			for _, s := range spans {
				byID[hex.EncodeToString(s.SpanId)] = s
			}
			inbound := find(spans, func(s *tracepb.Span) bool {
				return s.Name == "agentbot.inbound mention" && attr(s, "agentbot.event.id") == "ev-1"
			})
			if inbound == nil {
				t.Fatalf("no span of the inbound event among %s", names(spans))
			}
			traceID := hex.EncodeToString(inbound.TraceId)
			if view.Trace != traceID {
				t.Errorf("the session's last trace is %s, the event's %s", view.Trace, traceID)
			}
			var inTrace []*tracepb.Span
			for _, s := range spans {
				if hex.EncodeToString(s.TraceId) == traceID {
					inTrace = append(inTrace, s)
				}
			}
			// Every parent is there: the trace is whole.
			for _, s := range inTrace {
				if len(s.ParentSpanId) == 0 {
					if s != inbound {
						t.Errorf("span %s is a second root of the trace", s.Name)
					}
					continue
				}
				if byID[hex.EncodeToString(s.ParentSpanId)] == nil {
					t.Errorf("the parent of span %s is missing", s.Name)
				}
			}
			parentOf := func(s *tracepb.Span) *tracepb.Span { return byID[hex.EncodeToString(s.ParentSpanId)] }
			named := func(name string) *tracepb.Span {
				s := find(inTrace, func(s *tracepb.Span) bool { return s.Name == name })
				if s == nil {
					t.Fatalf("no span %s in the event's trace: %s", name, names(inTrace))
				}
				return s
			}
			// The chain: event -> signal-with-start -> workflow (signal
			// handler, run) and event -> model and tool activities ->
			// the model's HTTP request and the sandbox exec.
			signal := named("SignalWithStartWorkflow:" + agentflow.AgentWorkflowName)
			checkParent(t, signal, inbound, parentOf)
			checkParent(t, named("HandleSignal:"+agentflow.SignalMessage), signal, parentOf)
			checkParent(t, named("RunWorkflow:"+agentflow.AgentWorkflowName), signal, parentOf)
			startModel := named("StartActivity:ModelStep")
			checkParent(t, startModel, inbound, parentOf)
			runModel := named("RunActivity:ModelStep")
			checkParent(t, runModel, startModel, parentOf)
			if attr(runModel, "gen_ai.usage.input_tokens") == "" || attr(runModel, "agentbot.workflow_id") != agentflow.AgentWorkflowID(thread) {
				t.Errorf("the model step's span lacks its token count or session: %v", runModel.Attributes)
			}
			httpSpan := find(inTrace, func(s *tracepb.Span) bool {
				return s.Kind == tracepb.Span_SPAN_KIND_CLIENT && attr(s, "http.request.method") == "POST" && parentOf(s) == runModel
			})
			if httpSpan == nil {
				t.Errorf("no HTTP span under the model step: %s", names(inTrace))
			}
			runTool := find(inTrace, func(s *tracepb.Span) bool {
				return s.Name == "RunActivity:RunTool" && attr(s, "agentbot.tool") == "shell"
			})
			if runTool == nil {
				t.Fatalf("no shell tool activity in the trace: %s", names(inTrace))
			}
			if p := parentOf(runTool); p == nil || p.Name != "StartActivity:RunTool" || parentOf(p) != inbound {
				t.Errorf("the tool activity is not under its start under the event")
			}
			exec := named("sandbox.exec")
			checkParent(t, exec, runTool, parentOf)
			if attr(exec, "agentbot.backend") != "local" || attr(exec, "agentbot.exit_code") != "0" {
				t.Errorf("sandbox.exec attributes: %v", exec.Attributes)
			}

			// Message text and command output: only with content on.
			var holders []string
			for _, s := range spans {
				for _, kv := range s.Attributes {
					if strings.Contains(value(kv.Value), marker) {
						holders = append(holders, s.Name+"/"+kv.Key)
					}
				}
			}
			if !content && len(holders) > 0 {
				t.Errorf("message text or command output in span attributes: %v", holders)
			}
			if content && (!slices.Contains(holders, inbound.Name+"/agentbot.text") || !slices.Contains(holders, "sandbox.exec/agentbot.stdout")) {
				t.Errorf("with AGENTBOT_TRACE_CONTENT=true, the text and the output are not in the spans: %v", holders)
			}
			rc.mu.Lock()
			defer rc.mu.Unlock()
			if len(rc.headers) == 0 || rc.headers[0] != "tok en" {
				t.Errorf("exports carried the header %q, want OTEL_EXPORTER_OTLP_HEADERS's (decoded)", rc.headers)
			}
		})
	}
}

func checkParent(t *testing.T, child, parent *tracepb.Span, parentOf func(*tracepb.Span) *tracepb.Span) {
	t.Helper()
	if got := parentOf(child); got != parent {
		gotName := "none"
		if got != nil {
			gotName = got.Name
		}
		t.Errorf("the parent of %s is %s, want %s", child.Name, gotName, parent.Name)
	}
}

func find(spans []*tracepb.Span, f func(*tracepb.Span) bool) *tracepb.Span {
	for _, s := range spans {
		if f(s) {
			return s
		}
	}
	return nil
}

func names(spans []*tracepb.Span) string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

func attr(s *tracepb.Span, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return value(kv.Value)
		}
	}
	return ""
}

func value(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	case *commonpb.AnyValue_BytesValue:
		return string(x.BytesValue)
	case *commonpb.AnyValue_ArrayValue:
		var b bytes.Buffer
		for _, e := range x.ArrayValue.Values {
			b.WriteString(value(e) + " ")
		}
		return b.String()
	case *commonpb.AnyValue_KvlistValue:
		var b bytes.Buffer
		for _, e := range x.KvlistValue.Values {
			b.WriteString(e.Key + "=" + value(e.Value) + " ")
		}
		return b.String()
	}
	return ""
}
