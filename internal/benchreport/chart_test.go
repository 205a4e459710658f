package benchreport

import (
	"bytes"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"
)

func TestWritePNG(t *testing.T) {
	target := 2.0
	latency := Chart{
		Title:  "Cold start",
		XLabel: "concurrent sandboxes",
		YLabel: "p50 (s)",
		Series: []Series{
			{Name: "docker", X: []float64{1, 2, 4, 8}, Y: []float64{0.9, 1.1, 1.6, 2.8}},
			{Name: "e2b", X: []float64{1, 2, 4, 8}, Y: []float64{0.4, 0.45, 0.5, 0.6}},
		},
		Target: &target,
	}
	throughput := Chart{
		Title:  "Throughput",
		XLabel: "workers",
		YLabel: "turns/s",
		Series: []Series{{Name: "worker", X: []float64{1, 2, 3}, Y: []float64{5, 9, 12}}},
	}
	tests := []struct {
		name          string
		charts        []Chart
		width, height int
	}{
		{"one chart", []Chart{latency}, 640, 480},
		{"side by side", []Chart{latency, throughput}, 1200, 400},
		{"two by two", []Chart{latency, throughput, latency, throughput}, 1200, 800},
		{"grid with an empty cell", []Chart{latency, throughput, latency, throughput, latency}, 1200, 800},
		{"no points, only a target", []Chart{{Title: "empty", Series: []Series{{Name: "none"}}, Target: &target}}, 300, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "chart.png")
			if err := WritePNG(path, tt.charts, tt.width, tt.height); err != nil {
				t.Fatalf("WritePNG: %v", err)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			img, err := png.Decode(bytes.NewReader(data))
			if err != nil {
				t.Fatalf("decoding the PNG: %v", err)
			}
			if b := img.Bounds(); b.Dx() != tt.width || b.Dy() != tt.height {
				t.Errorf("image is %dx%d, want %dx%d", b.Dx(), b.Dy(), tt.width, tt.height)
			}
			// A blank image would also decode; something must be drawn.
			first := img.At(0, 0)
			drawn := false
			for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y && !drawn; y++ {
				for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
					if img.At(x, y) != first {
						drawn = true
						break
					}
				}
			}
			if !drawn {
				t.Error("image is a single colour")
			}

			again := filepath.Join(t.TempDir(), "again.png")
			if err := WritePNG(again, tt.charts, tt.width, tt.height); err != nil {
				t.Fatalf("WritePNG again: %v", err)
			}
			if data2, err := os.ReadFile(again); err != nil {
				t.Fatal(err)
			} else if !bytes.Equal(data, data2) {
				t.Error("the same input gave different bytes")
			}
		})
	}
}

func TestGridColumns(t *testing.T) {
	tests := []struct{ charts, cols int }{
		{1, 1}, {2, 2}, {3, 3}, {4, 2}, {5, 3}, {6, 3}, {10, 3},
	}
	for _, tt := range tests {
		if got := gridColumns(tt.charts); got != tt.cols {
			t.Errorf("gridColumns(%d) = %d, want %d", tt.charts, got, tt.cols)
		}
	}
}

func TestWritePNGErrors(t *testing.T) {
	nan := math.NaN()
	ok := []Chart{{Series: []Series{{Name: "a", X: []float64{1}, Y: []float64{1}}}}}
	tests := []struct {
		name          string
		charts        []Chart
		width, height int
	}{
		{"no charts", nil, 100, 100},
		{"zero width", ok, 0, 100},
		{"negative height", ok, 100, -1},
		{"lengths differ", []Chart{{Series: []Series{{Name: "a", X: []float64{1, 2}, Y: []float64{1}}}}}, 100, 100},
		{"NaN value", []Chart{{Series: []Series{{Name: "a", X: []float64{1}, Y: []float64{nan}}}}}, 100, 100},
		{"infinite target", []Chart{{Target: new(math.Inf(1))}}, 100, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "chart.png")
			if err := WritePNG(path, tt.charts, tt.width, tt.height); err == nil {
				t.Fatal("WritePNG succeeded, want an error")
			}
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Errorf("file exists after an error (stat: %v)", err)
			}
		})
	}
}
