package benchreport

import (
	"math"
	"slices"
	"testing"
)

// same reports whether got and want are equal, counting NaN equal to NaN.
func same(got, want float64) bool {
	return got == want || (math.IsNaN(got) && math.IsNaN(want))
}

func TestSample(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name             string
		s                Sample
		median, min, max float64
	}{
		{"empty", nil, nan, nan, nan},
		{"one value", Sample{4}, 4, 4, 4},
		{"odd length, unsorted", Sample{3, 1, 2}, 2, 1, 3},
		{"even length averages the middle two", Sample{10, 1, 4, 2}, 3, 1, 10},
		{"duplicates", Sample{5, 5, 1, 5}, 5, 1, 5},
		{"negative values", Sample{-1, -3, -2}, -2, -3, -1},
		{"NaN anywhere poisons every summary", Sample{1, nan, 3}, nan, nan, nan},
		{"NaN first", Sample{nan, 1, 3}, nan, nan, nan},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			orig := slices.Clone(tt.s)
			if got := tt.s.Median(); !same(got, tt.median) {
				t.Errorf("Median() = %v, want %v", got, tt.median)
			}
			if got := tt.s.Min(); !same(got, tt.min) {
				t.Errorf("Min() = %v, want %v", got, tt.min)
			}
			if got := tt.s.Max(); !same(got, tt.max) {
				t.Errorf("Max() = %v, want %v", got, tt.max)
			}
			if !slices.EqualFunc(tt.s, orig, same) {
				t.Errorf("sample changed to %v, was %v", tt.s, orig)
			}
		})
	}
}

func TestPairedRatio(t *testing.T) {
	tests := []struct {
		name              string
		product, baseline Sample
		want              Ratio
		wantErr           bool
	}{
		{
			name:     "equal",
			product:  Sample{2, 2, 2},
			baseline: Sample{2, 2, 2},
			want:     Ratio{Median: 1, Min: 1, Max: 1},
		},
		{
			// Medians 3 and 2; pairs 1/1, 3/2, 8/4.
			name:     "ratio of medians, range of pairs",
			product:  Sample{1, 3, 8},
			baseline: Sample{1, 2, 4},
			want:     Ratio{Median: 1.5, Min: 1, Max: 2},
		},
		{
			// Pairing matters: the same values shuffled give other pairs.
			name:     "pairs follow the order of the runs",
			product:  Sample{8, 3, 1},
			baseline: Sample{1, 2, 4},
			want:     Ratio{Median: 1.5, Min: 0.25, Max: 8},
		},
		{name: "lengths differ", product: Sample{1, 2}, baseline: Sample{1}, wantErr: true},
		{name: "empty", wantErr: true},
		{name: "zero baseline", product: Sample{1, 2}, baseline: Sample{1, 0}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PairedRatio(tt.product, tt.baseline)
			if (err != nil) != tt.wantErr {
				t.Fatalf("PairedRatio() error = %v, want error: %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("PairedRatio() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestRatioString(t *testing.T) {
	got := Ratio{Median: 1.234, Min: 0.9, Max: 1.5}.String()
	if want := "1.23x (0.90x–1.50x)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
