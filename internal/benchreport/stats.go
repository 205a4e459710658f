package benchreport

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Sample holds repeated measurements of one quantity, in the order they were
// taken (for example the wall-clock seconds of each run). Its methods never
// modify it.
//
// The summary methods return NaN for an empty sample, and NaN when any value
// is NaN, so a missing or failed measurement cannot pass for a real number.
type Sample []float64

// Median returns the middle value of s, or the mean of the two middle values
// when len(s) is even.
func (s Sample) Median() float64 {
	if len(s) == 0 || slices.ContainsFunc(s, math.IsNaN) {
		return math.NaN()
	}
	sorted := slices.Sorted(slices.Values(s))
	mid := len(sorted) / 2
	if len(sorted)%2 == 1 {
		return sorted[mid]
	}
	return (sorted[mid-1] + sorted[mid]) / 2
}

// Min returns the smallest value of s.
func (s Sample) Min() float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	m := s[0]
	for _, v := range s[1:] {
		m = min(m, v) // min propagates NaN.
	}
	return m
}

// Max returns the largest value of s.
func (s Sample) Max() float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	m := s[0]
	for _, v := range s[1:] {
		m = max(m, v) // max propagates NaN.
	}
	return m
}

// Ratio compares a product against a baseline measured in interleaved runs.
// Values above 1 mean the product measured more (for times: slower).
type Ratio struct {
	// Median is median(product) / median(baseline): the headline number.
	Median float64
	// Min and Max are the smallest and largest per-pair ratios
	// product[i] / baseline[i]. Pairing runs that ran next to each other
	// cancels most drift of the machine, so their spread shows how much
	// the headline number can be trusted.
	Min, Max float64
}

// String formats r as "1.23x (1.10x–1.40x)": the median ratio, then the
// range of the per-pair ratios.
func (r Ratio) String() string {
	return fmt.Sprintf("%.2fx (%.2fx–%.2fx)", r.Median, r.Min, r.Max)
}

// PairedRatio compares product against baseline, where product[i] and
// baseline[i] were measured one right after the other. It returns an error
// if the samples are empty, differ in length, or a baseline value is zero (a
// ratio against it means nothing).
func PairedRatio(product, baseline Sample) (Ratio, error) {
	if len(product) != len(baseline) {
		return Ratio{}, fmt.Errorf("benchreport: paired ratio: %d product values but %d baseline values", len(product), len(baseline))
	}
	if len(product) == 0 {
		return Ratio{}, errors.New("benchreport: paired ratio: no values")
	}
	pairs := make(Sample, len(product))
	for i, b := range baseline {
		if b == 0 {
			return Ratio{}, fmt.Errorf("benchreport: paired ratio: baseline value %d is zero", i)
		}
		pairs[i] = product[i] / b
	}
	return Ratio{
		Median: product.Median() / baseline.Median(),
		Min:    pairs.Min(),
		Max:    pairs.Max(),
	}, nil
}
