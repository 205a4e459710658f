package agentflow_test

import (
	"testing"

	"github.com/agentbot/agentbot/agentflow"
)

// TestTraceParent: the workflow takes a trace ID from a message's
// traceparent only when it is well formed, and names it in status only
// when the span was sampled.
func TestTraceParent(t *testing.T) {
	const id = "4bf92f3577b34da6a3ce929d0e0e4736"
	tests := []struct {
		name, p string
		id      string
		sampled bool
	}{
		{"sampled", "00-" + id + "-00f067aa0ba902b7-01", id, true},
		{"not sampled", "00-" + id + "-00f067aa0ba902b7-00", id, false},
		{"other flags, sampled", "00-" + id + "-00f067aa0ba902b7-03", id, true},
		{"empty", "", "", false},
		{"zero trace ID", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "", false},
		{"upper case", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "", false},
		{"short span ID", "00-" + id + "-00f067aa-01", "", false},
		{"not hex", "00-" + id + "-00f067aa0ba902bz-01", "", false},
		{"prose", "hello there", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := agentflow.TraceParent(tt.p)
			if got := p.TraceID(); got != tt.id {
				t.Errorf("TraceID() = %q, want %q", got, tt.id)
			}
			if got := p.Sampled(); got != tt.sampled {
				t.Errorf("Sampled() = %v, want %v", got, tt.sampled)
			}
		})
	}
}
