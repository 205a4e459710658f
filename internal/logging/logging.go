// Package logging builds the one log/slog logger of agentbot's processes
// (cmd/bot, cmd/worker), which is also handed to the Temporal SDK, so that
// every line has the same shape:
//
//   - text or JSON (one object a line), at the configured level;
//   - fixed keys wherever they apply: thread, workflow_id, run_id, turn,
//     sandbox_id, backend, platform, trace_id (and span_id). The SDK's own
//     keys (WorkflowID, RunID, ActivityType...) are renamed to the same
//     snake_case names; a line with the workflow ID of a session also gets
//     its thread; a line logged with an activity's context gets the
//     workflow and run of that activity; a line logged with a context that
//     carries a valid OpenTelemetry span gets its trace and span IDs;
//   - every known secret value (config.Secrets) replaced with
//     redact.Placeholder, in the message and in every attribute.
//
// What the handler cannot do is keep a message body out of a line: the
// code that logs must not log one at info level or above.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"unicode"

	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/activity"

	"github.com/agentbot/agentbot/internal/config"
	"github.com/agentbot/agentbot/internal/redact"
)

// The fixed keys of every line where they apply.
const (
	KeyThread     = "thread"
	KeyWorkflowID = "workflow_id"
	KeyRunID      = "run_id"
	KeyTurn       = "turn"
	KeySandboxID  = "sandbox_id"
	KeyBackend    = "backend"
	KeyPlatform   = "platform"
	KeyTraceID    = "trace_id"
	KeySpanID     = "span_id"
	KeyActivity   = "activity"
)

// sessionPrefix starts the workflow ID of every session: the ID is
// "agent/" + thread key (agentflow.AgentWorkflowID; a test keeps the two
// equal). It is spelled here so that this package needs nothing of
// agentflow.
const sessionPrefix = "agent/"

// Options configure a handler.
type Options struct {
	// Format is "text" (the default) or "json".
	Format string
	// Level is the least level logged; nil means info.
	Level slog.Leveler
	// Secrets are replaced with redact.Placeholder wherever they appear.
	Secrets []string
}

// New returns the logger of a process configured by cfg (LogFormat,
// LogLevel, Secrets), writing to w.
func New(w io.Writer, cfg config.Config) *slog.Logger {
	return slog.New(NewHandler(w, Options{Format: cfg.LogFormat, Level: cfg.LogLevel, Secrets: cfg.Secrets}))
}

// NewHandler returns a text or JSON handler writing to w, wrapped by Wrap.
func NewHandler(w io.Writer, opts Options) slog.Handler {
	ho := &slog.HandlerOptions{Level: opts.Level}
	var h slog.Handler
	if opts.Format == "json" {
		h = slog.NewJSONHandler(w, ho)
	} else {
		h = slog.NewTextHandler(w, ho)
	}
	return Wrap(h, opts.Secrets)
}

// Wrap returns a handler that passes every record to next with the fixed
// keys added and renamed, and secrets replaced (see the package comment).
func Wrap(next slog.Handler, secrets []string) slog.Handler {
	return &handler{next: next, rd: redact.New(secrets...)}
}

// handler is Wrap's handler. has holds the top-level keys that With has
// already given every record, so none is added twice.
type handler struct {
	next    slog.Handler
	rd      *redact.Redactor
	has     map[string]bool
	grouped bool // WithGroup was called: new attributes are not top-level
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	if len(as) == 0 {
		return h
	}
	out := &handler{next: h.next, rd: h.rd, has: h.has, grouped: h.grouped}
	as = h.fix(as)
	if !h.grouped {
		out.has = make(map[string]bool, len(h.has)+len(as)+1)
		for k := range h.has {
			out.has[k] = true
		}
		for _, a := range as {
			out.has[a.Key] = true
		}
		if t, ok := threadOf(as, out.has); ok {
			as = append(as, t)
			out.has[KeyThread] = true
		}
	}
	out.next = h.next.WithAttrs(as)
	return out
}

func (h *handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &handler{next: h.next.WithGroup(name), rd: h.rd, has: h.has, grouped: true}
}

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, h.rd.String(r.Message), r.PC)
	as := make([]slog.Attr, 0, r.NumAttrs()+6)
	r.Attrs(func(a slog.Attr) bool {
		as = append(as, a)
		return true
	})
	as = h.fix(as)
	if !h.grouped {
		has := func(k string) bool {
			if h.has[k] {
				return true
			}
			for _, a := range as {
				if a.Key == k {
					return true
				}
			}
			return false
		}
		add := func(k string, v slog.Value) {
			if !has(k) {
				as = append(as, slog.Attr{Key: k, Value: v})
			}
		}
		if ctx != nil {
			if activity.IsActivity(ctx) {
				info := activity.GetInfo(ctx)
				add(KeyWorkflowID, slog.StringValue(info.WorkflowExecution.ID))
				add(KeyRunID, slog.StringValue(info.WorkflowExecution.RunID))
				add(KeyActivity, slog.StringValue(info.ActivityType.Name))
			}
			if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
				add(KeyTraceID, slog.StringValue(sc.TraceID().String()))
				add(KeySpanID, slog.StringValue(sc.SpanID().String()))
			}
		}
		if !h.has[KeyThread] {
			if t, ok := threadOf(as, nil); ok {
				as = append(as, t)
			}
		}
	}
	out.AddAttrs(as...)
	return h.next.Handle(ctx, out)
}

// threadOf returns the thread attribute of a session's workflow ID among
// as, unless as (or has) already has a thread.
func threadOf(as []slog.Attr, has map[string]bool) (slog.Attr, bool) {
	if has[KeyThread] {
		return slog.Attr{}, false
	}
	thread := ""
	for _, a := range as {
		switch a.Key {
		case KeyThread:
			return slog.Attr{}, false
		case KeyWorkflowID:
			if a.Value.Kind() == slog.KindString {
				thread, _ = strings.CutPrefix(a.Value.String(), sessionPrefix)
				if thread == a.Value.String() {
					thread = "" // not a session's workflow
				}
			}
		}
	}
	if thread == "" {
		return slog.Attr{}, false
	}
	return slog.String(KeyThread, thread), true
}

// fix renames the SDK's keys and redacts the values of as, in a new slice.
func (h *handler) fix(as []slog.Attr) []slog.Attr {
	out := make([]slog.Attr, 0, len(as))
	for _, a := range as {
		a.Key = snake(a.Key)
		a.Value = h.value(a.Value, 0)
		out = append(out, a)
	}
	return out
}

// maxDepth bounds the groups value follows.
const maxDepth = 16

// value returns v with known secrets replaced. Values of kinds the output
// handlers format themselves (errors, structs, slices...) are formatted
// here and replaced by a string only when that string holds a secret.
func (h *handler) value(v slog.Value, depth int) slog.Value {
	if h.rd.Empty() || depth > maxDepth {
		return v
	}
	v = v.Resolve()
	switch v.Kind() {
	case slog.KindString:
		if s := v.String(); h.rd.Contains(s) {
			return slog.StringValue(h.rd.String(s))
		}
	case slog.KindGroup:
		g := v.Group()
		out := make([]slog.Attr, len(g))
		for i, a := range g {
			out[i] = slog.Attr{Key: a.Key, Value: h.value(a.Value, depth+1)}
		}
		return slog.GroupValue(out...)
	case slog.KindAny:
		var s string
		switch x := v.Any().(type) {
		case nil:
			return v
		case error:
			s = x.Error()
		default:
			s = fmt.Sprintf("%+v", x)
		}
		if h.rd.Contains(s) {
			return slog.StringValue(h.rd.String(s))
		}
	}
	return v
}

// snake turns the Temporal SDK's CamelCase keys ("WorkflowID",
// "ActivityType") into agentbot's snake_case ("workflow_id",
// "activity_type"). Keys that do not start with a capital letter, which
// are all of agentbot's own, are returned as they are.
func snake(k string) string {
	if k == "" || !unicode.IsUpper(rune(k[0])) {
		return k
	}
	if k == "ActivityType" {
		return KeyActivity
	}
	var b strings.Builder
	rs := []rune(k)
	for i, r := range rs {
		if unicode.IsUpper(r) {
			// A new word starts at a capital after a lower-case letter or
			// digit ("RunID" -> run_id), or at the last capital of an
			// acronym followed by a lower-case letter ("URLPath" -> url_path).
			if i > 0 && (unicode.IsLower(rs[i-1]) || unicode.IsDigit(rs[i-1]) ||
				(unicode.IsUpper(rs[i-1]) && i+1 < len(rs) && unicode.IsLower(rs[i+1]))) {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(r))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
