package telemetry

import (
	"context"
	"math"
	"net/http"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/metric"
)

// TestMetricsExport records through our meter and through the Temporal
// SDK's handler, serves /metrics, and reads it back: names get their
// Prometheus suffixes, histograms in seconds get SecondsBuckets, labels
// carry no scope noise, and the Go and process collectors are there.
func TestMetricsExport(t *testing.T) {
	m, err := NewMetrics("agentbot-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	ctx := context.Background()
	c, err := m.Meter().Int64Counter("agentbot_things")
	if err != nil {
		t.Fatal(err)
	}
	c.Add(ctx, 3, metric.WithAttributes())
	h, err := m.Meter().Float64Histogram("agentbot_thing_duration", metric.WithUnit("s"))
	if err != nil {
		t.Fatal(err)
	}
	h.Record(ctx, 0.2)
	sdk := m.TemporalHandler().WithTags(map[string]string{"task_queue": "q"})
	sdk.Counter("temporal_request").Inc(2)
	sdk.Timer("temporal_workflow_task_schedule_to_start_latency").Record(40 * time.Millisecond)
	sdk.Gauge("temporal_sticky_cache_size").Update(7)

	addr, stop, err := m.Serve("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for name, typ := range map[string]dto.MetricType{
		"agentbot_things_total":                                    dto.MetricType_COUNTER,
		"agentbot_thing_duration_seconds":                          dto.MetricType_HISTOGRAM,
		"temporal_request_total":                                   dto.MetricType_COUNTER,
		"temporal_workflow_task_schedule_to_start_latency_seconds": dto.MetricType_HISTOGRAM,
		"temporal_sticky_cache_size":                               dto.MetricType_GAUGE,
		"go_goroutines":                                            dto.MetricType_GAUGE,
		"process_cpu_seconds_total":                                dto.MetricType_COUNTER,
	} {
		f := fams[name]
		if f == nil {
			t.Errorf("no %s", name)
			continue
		}
		if f.GetType() != typ {
			t.Errorf("%s is a %v, want %v", name, f.GetType(), typ)
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "otel_scope_name" {
					t.Errorf("%s has scope labels", name)
				}
			}
		}
	}
	if got := fams["agentbot_things_total"].GetMetric()[0].GetCounter().GetValue(); got != 3 {
		t.Errorf("agentbot_things_total = %v, want 3", got)
	}
	if got := fams["temporal_request_total"].GetMetric()[0].GetCounter().GetValue(); got != 2 {
		t.Errorf("temporal_request_total = %v, want 2", got)
	}
	for _, name := range []string{"agentbot_thing_duration_seconds", "temporal_workflow_task_schedule_to_start_latency_seconds"} {
		hist := fams[name].GetMetric()[0].GetHistogram()
		var bounds []float64
		for _, b := range hist.GetBucket() {
			if !math.IsInf(b.GetUpperBound(), 1) {
				bounds = append(bounds, b.GetUpperBound())
			}
		}
		if !slices.Equal(bounds, SecondsBuckets) || hist.GetSampleCount() != 1 {
			t.Errorf("%s: buckets %v, %d samples; want SecondsBuckets and 1", name, bounds, hist.GetSampleCount())
		}
	}
	if fams["target_info"] == nil {
		t.Error("no target_info")
	}
}

// TestNilMetrics: metrics that are off record nothing and serve nothing,
// and cost no nil checks to their users.
func TestNilMetrics(t *testing.T) {
	var m *Metrics
	c, err := m.Meter().Int64Counter("agentbot_things")
	if err != nil {
		t.Fatal(err)
	}
	c.Add(context.Background(), 1)
	if m.TemporalHandler() != nil {
		t.Error("a TemporalHandler of no metrics")
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
}
