package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/activity"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/internal/config"
	"github.com/agentbot/agentbot/internal/redact"
)

const secret = "sk-test-0123456789abcdef"

// lines parses every line of out as a JSON object; a line that is not
// one fails the test.
func lines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var ms []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON line: %q: %v", l, err)
		}
		ms = append(ms, m)
	}
	return ms
}

type leaky struct{ Token string }

func TestHandler(t *testing.T) {
	thread := "slack:T1:C1:1700000000.000100"
	wid := agentflow.AgentWorkflowID(thread)
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:  trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8}, TraceFlags: trace.FlagsSampled,
	})
	traced := trace.ContextWithSpanContext(context.Background(), sc)
	for _, tc := range []struct {
		name  string
		log   func(l *slog.Logger)
		want  map[string]any
		never []string // keys the line must not have
	}{
		{
			name: "SDK keys renamed, thread from the workflow ID",
			log: func(l *slog.Logger) {
				tlog.With(tlog.NewStructuredLogger(l), "WorkflowID", wid, "RunID", "r1", "WorkflowType", "AgentWorkflow").
					Info("turn finished", "Attempt", 1)
			},
			want:  map[string]any{"workflow_id": wid, "run_id": "r1", "workflow_type": "AgentWorkflow", "attempt": 1.0, "thread": thread},
			never: []string{"WorkflowID", "RunID"},
		},
		{
			name: "SDK keys on the record",
			log: func(l *slog.Logger) {
				tlog.NewStructuredLogger(l).Warn("x", "WorkflowID", wid, "ActivityType", "ModelStep", "Error", "boom")
			},
			want:  map[string]any{"workflow_id": wid, "thread": thread, "activity": "ModelStep", "error": "boom"},
			never: []string{"ActivityType"},
		},
		{
			name:  "no thread for a workflow that is not a session",
			log:   func(l *slog.Logger) { l.Info("x", "workflow_id", "sessions/slack:T1") },
			want:  map[string]any{"workflow_id": "sessions/slack:T1"},
			never: []string{"thread"},
		},
		{
			name: "a thread given is kept",
			log:  func(l *slog.Logger) { l.With("thread", "term:x").Info("x", "workflow_id", wid) },
			want: map[string]any{"thread": "term:x"},
		},
		{
			name: "secrets redacted everywhere",
			log: func(l *slog.Logger) {
				l.With("token", "Bearer "+secret).WithGroup("g").Info("key "+secret,
					"error", fmt.Errorf("dial: %w", errors.New("refused "+secret)), "v", leaky{Token: secret},
					slog.Group("inner", "s", secret))
			},
			want: map[string]any{"msg": "key " + redact.Placeholder, "token": "Bearer " + redact.Placeholder},
		},
		{
			name: "trace and span IDs from the context",
			log:  func(l *slog.Logger) { l.InfoContext(traced, "x") },
			want: map[string]any{"trace_id": sc.TraceID().String(), "span_id": sc.SpanID().String()},
		},
		{
			name:  "no trace IDs without a span",
			log:   func(l *slog.Logger) { l.InfoContext(context.Background(), "x") },
			never: []string{"trace_id", "span_id"},
		},
		{
			name:  "own keys untouched",
			log:   func(l *slog.Logger) { l.Info("x", "turn", 3, "sandbox_id", "sb1") },
			want:  map[string]any{"turn": 3.0, "sandbox_id": "sb1"},
			never: []string{"thread"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			l := New(&buf, config.Config{LogFormat: "json", LogLevel: slog.LevelDebug, Secrets: []string{secret}})
			tc.log(l)
			if strings.Contains(buf.String(), secret) {
				t.Errorf("a secret is in the log: %s", buf.String())
			}
			ms := lines(t, buf.String())
			if len(ms) != 1 {
				t.Fatalf("want one line, got %d: %s", len(ms), buf.String())
			}
			for k, v := range tc.want {
				if ms[0][k] != v {
					t.Errorf("%s = %#v, want %#v in %s", k, ms[0][k], v, buf.String())
				}
			}
			for _, k := range tc.never {
				if _, ok := ms[0][k]; ok {
					t.Errorf("the line has %s: %s", k, buf.String())
				}
			}
			// No key twice (JSON decoding would hide it).
			seen := map[string]bool{}
			dec := json.NewDecoder(strings.NewReader(buf.String()))
			if _, err := dec.Token(); err != nil {
				t.Fatal(err)
			}
			for dec.More() {
				k, _ := dec.Token()
				var skip json.RawMessage
				_ = dec.Decode(&skip)
				if seen[k.(string)] {
					t.Errorf("key %s twice: %s", k, buf.String())
				}
				seen[k.(string)] = true
			}
		})
	}
}

// TestActivityContext: a line logged with an activity's context carries
// the activity's workflow, run and type (the SDK's test environment runs
// the activity with its default workflow ID, which is no session's: the
// thread of a session's ID is TestHandler's).
func TestActivityContext(t *testing.T) {
	var buf bytes.Buffer
	l := New(&buf, config.Config{LogFormat: "json", LogLevel: slog.LevelInfo})
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivityWithOptions(func(ctx context.Context) error {
		l.InfoContext(ctx, "tool call", "turn", 2)
		return nil
	}, activity.RegisterOptions{Name: "RunTool"})
	if _, err := env.ExecuteActivity("RunTool"); err != nil {
		t.Fatal(err)
	}
	var line map[string]any
	for _, m := range lines(t, buf.String()) {
		if m["msg"] == "tool call" {
			line = m
		}
	}
	if line == nil {
		t.Fatalf("no line logged:\n%s", buf.String())
	}
	for k, v := range map[string]any{"workflow_id": "default-test-workflow-id", "run_id": "default-test-run-id", "activity": "RunTool", "turn": 2.0} {
		if line[k] != v {
			t.Errorf("%s = %#v, want %#v in %v", k, line[k], v, line)
		}
	}
}

func TestText(t *testing.T) {
	var buf bytes.Buffer
	l := New(&buf, config.Config{LogFormat: "text", LogLevel: slog.LevelWarn, Secrets: []string{secret}})
	l.Info("dropped")
	tlog.NewStructuredLogger(l).Warn("kept "+secret, "WorkflowID", "agent/term:x")
	out := buf.String()
	if strings.Contains(out, "dropped") || !strings.Contains(out, `msg="kept [redacted]" workflow_id=agent/term:x thread=term:x`) {
		t.Errorf("text output:\n%s", out)
	}
}

func TestSnake(t *testing.T) {
	for in, want := range map[string]string{
		"WorkflowID": "workflow_id", "RunID": "run_id", "ActivityRunID": "activity_run_id", "TaskQueue": "task_queue",
		"LinkURL": "link_url", "URLPath": "url_path", "Error": "error", "ActivityType": "activity",
		"workflow_id": "workflow_id", "sandboxID": "sandboxID",
	} {
		if got := snake(in); got != want {
			t.Errorf("snake(%q) = %q, want %q", in, got, want)
		}
	}
}
