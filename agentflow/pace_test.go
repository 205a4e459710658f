package agentflow

import (
	"testing"
	"time"
)

// TestNextProgress: the progress lane sends the first message never posted
// or edited a second ago or more, skipping ones that wait, and when all
// wait says how long until the first is due.
func TestNextProgress(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	q := func(keys ...string) []Outbound {
		var out []Outbound
		for _, k := range keys {
			out = append(out, Outbound{Kind: OutboundProgress, Key: k})
		}
		return out
	}
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	tests := []struct {
		name     string
		queue    []Outbound
		lastEdit map[string]time.Time
		want     int
		due      time.Duration
	}{
		{"never posted goes", q("a"), nil, 0, 0},
		{"edited a second ago goes", q("a"), map[string]time.Time{"a": ago(time.Second)}, 0, 0},
		{"waiting one is skipped for a new one", q("a", "b"), map[string]time.Time{"a": ago(200 * time.Millisecond)}, 1, 0},
		{"waiting one is skipped for a due one", q("a", "b"),
			map[string]time.Time{"a": ago(200 * time.Millisecond), "b": ago(1500 * time.Millisecond)}, 1, 0},
		{"all wait: the soonest is due", q("a", "b"),
			map[string]time.Time{"a": ago(200 * time.Millisecond), "b": ago(900 * time.Millisecond)}, -1, 100 * time.Millisecond},
		{"zero time counts as never posted", q("a"), map[string]time.Time{"a": {}}, 0, 0},
		{"empty queue", nil, nil, -1, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			i, due := nextProgress(tt.queue, tt.lastEdit, now)
			if i != tt.want || due != tt.due {
				t.Fatalf("nextProgress = %d, %s; want %d, %s", i, due, tt.want, tt.due)
			}
		})
	}
}
