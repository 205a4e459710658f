package sandboxes

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// skipRecorder is a caller's writer that records what it gets, Skip calls
// as "<skip n>".
type skipRecorder struct {
	bytes.Buffer
	skips []int64
}

func (r *skipRecorder) Skip(n int64) {
	r.skips = append(r.skips, n)
	fmt.Fprintf(&r.Buffer, "<skip %d>", n)
}

// TestCapStream: the caller's writer gets the whole stream when it fits in
// the cap, else its first cap/2 bytes, one Skip of the rest and its last
// cap-cap/2 bytes, however the stream was split into writes.
func TestCapStream(t *testing.T) {
	for _, limit := range []int{0, 1, 2, 3, 10, 11, 64} {
		eff := max(limit, 2)
		sizes := slices.Compact(slices.Sorted(slices.Values([]int{0, 1, eff / 2, eff - 1, eff, eff + 1, 2 * eff, 10*eff + 3})))
		for _, size := range sizes {
			data := make([]byte, size)
			for i := range data {
				data[i] = byte('a' + i%26)
			}
			want := string(data)
			if size > eff {
				h := eff / 2
				want = fmt.Sprintf("%s<skip %d>%s", data[:h], size-eff, data[size-(eff-h):])
			}
			for name, split := range writePatterns {
				t.Run(fmt.Sprintf("cap %d/size %d/%s", limit, size, name), func(t *testing.T) {
					var got skipRecorder
					c := newCapStream(&got, limit)
					rng := rand.New(rand.NewPCG(uint64(limit), uint64(size)))
					for _, w := range split(data, rng) {
						if n, err := c.Write(w); n != len(w) || err != nil {
							t.Fatalf("Write of %d bytes returned %d, %v", len(w), n, err)
						}
					}
					if err := c.close(); err != nil {
						t.Fatal(err)
					}
					if got.String() != want {
						t.Fatalf("got %q\nwant %q", got.String(), want)
					}
				})
			}
		}
	}
}

// TestExecStreamSkip: a backend that leaves out the middle of a stream
// (Skip) gets the left-out bytes counted in the result and in what the
// caller's writer is told, and nothing from before the gap is passed off as
// next to what follows it.
func TestExecStreamSkip(t *testing.T) {
	for _, tc := range []struct {
		name               string
		writes             []string // "-N" is a Skip of N bytes
		max, maxStream     int
		wantHead, wantTail string
		wantOmitted        int64
		wantFwd            string
	}{
		{
			name:   "skip after the heads",
			writes: []string{"abcdefgh", "-100", "WXYZ"},
			max:    4, maxStream: 8,
			wantHead: "ab", wantTail: "YZ", wantOmitted: 108,
			wantFwd: "abcd<skip 104>WXYZ",
		},
		{
			name:   "skip before the caller's head is full",
			writes: []string{"ab", "-10", "WXYZ"},
			max:    100, maxStream: 8,
			wantHead: "ab", wantTail: "WXYZ", wantOmitted: 10,
			wantFwd: "ab<skip 10>WXYZ",
		},
		{
			name:   "the tail before the gap is left out",
			writes: []string{"abcdefgh", "ijk", "-5", "Z"},
			max:    4, maxStream: 8,
			wantHead: "ab", wantTail: "Z", wantOmitted: 14,
			wantFwd: "abcd<skip 12>Z",
		},
		{
			name:   "nothing skipped",
			writes: []string{"abc"},
			max:    4, maxStream: 8,
			wantHead: "abc", wantFwd: "abc",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fwd skipRecorder
			e := newExecStream(tc.max, &fwd, tc.maxStream)
			for _, w := range tc.writes {
				var n int64
				if _, err := fmt.Sscanf(w, "-%d", &n); err == nil {
					e.Skip(n)
					continue
				}
				e.Write([]byte(w))
			}
			if err := e.close(); err != nil {
				t.Fatal(err)
			}
			got := e.keep.Output()
			if string(got.Head) != tc.wantHead || string(got.Tail) != tc.wantTail || got.Omitted != tc.wantOmitted {
				t.Errorf("result: head %q tail %q omitted %d; want %q %q %d", got.Head, got.Tail, got.Omitted,
					tc.wantHead, tc.wantTail, tc.wantOmitted)
			}
			if fwd.String() != tc.wantFwd {
				t.Errorf("caller's writer got %q, want %q", fwd.String(), tc.wantFwd)
			}
		})
	}
}

// TestCapStreamWriterError: a failing caller's writer gets nothing more,
// and its error is returned.
func TestCapStreamWriterError(t *testing.T) {
	boom := errors.New("disk full")
	w := &failWriter{err: boom, after: 3}
	c := newCapStream(w, 100)
	if _, err := c.Write([]byte("abcdef")); !errors.Is(err, boom) {
		t.Fatalf("Write: %v, want %v", err, boom)
	}
	c.Write([]byte("more"))
	if err := c.close(); !errors.Is(err, boom) {
		t.Fatalf("close: %v, want %v", err, boom)
	}
	if w.calls != 1 {
		t.Fatalf("the failing writer was called %d times, want once", w.calls)
	}
}

type failWriter struct {
	err   error
	after int
	calls int
}

func (w *failWriter) Write(p []byte) (int, error) {
	w.calls++
	return min(len(p), w.after), w.err
}
