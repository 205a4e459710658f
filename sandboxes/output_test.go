package sandboxes

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
)

// refCap is what a capWriter of max bytes must keep of data, computed from
// the whole stream. A cap below 2 is 2.
func refCap(data []byte, limit int) Output {
	limit = max(limit, 2)
	if len(data) <= limit {
		return Output{Head: data}
	}
	h := limit / 2
	return Output{Head: data[:h], Tail: data[len(data)-(limit-h):], Omitted: int64(len(data) - limit)}
}

func sameOutput(a, b Output) bool {
	return bytes.Equal(a.Head, b.Head) && bytes.Equal(a.Tail, b.Tail) && a.Omitted == b.Omitted
}

// writePatterns split a stream into writes in different ways: the
// capWriter's result must not depend on how.
var writePatterns = map[string]func(data []byte, rng *rand.Rand) [][]byte{
	"one write": func(data []byte, _ *rand.Rand) [][]byte { return [][]byte{data} },
	"byte by byte": func(data []byte, _ *rand.Rand) [][]byte {
		var ws [][]byte
		for i := range data {
			ws = append(ws, data[i:i+1])
		}
		return ws
	},
	"random chunks": func(data []byte, rng *rand.Rand) [][]byte {
		var ws [][]byte
		for len(data) > 0 {
			n := min(len(data), rng.IntN(40))
			ws = append(ws, data[:n]) // empty writes too
			data = data[n:]
		}
		return ws
	},
	"big then small": func(data []byte, _ *rand.Rand) [][]byte {
		k := len(data) * 3 / 4
		ws := [][]byte{data[:k]}
		for i := k; i < len(data); i++ {
			ws = append(ws, data[i:i+1])
		}
		return ws
	},
}

func TestCapWriter(t *testing.T) {
	for _, limit := range []int{0, 1, 2, 3, 10, 11, 64, 1000} {
		eff := max(limit, 2)
		sizes := slices.Compact(slices.Sorted(slices.Values([]int{0, 1, eff / 2, eff - 1, eff, eff + 1, eff + eff/2, 2 * eff, 10*eff + 3})))
		for _, size := range sizes {
			data := make([]byte, size)
			for i := range data {
				data[i] = byte('a' + i%26)
			}
			want := refCap(data, limit)
			for name, split := range writePatterns {
				t.Run(fmt.Sprintf("cap %d/size %d/%s", limit, size, name), func(t *testing.T) {
					c := newCapWriter(limit)
					rng := rand.New(rand.NewPCG(uint64(limit), uint64(size)))
					for _, w := range split(data, rng) {
						n, err := c.Write(w)
						if n != len(w) || err != nil {
							t.Fatalf("Write of %d bytes returned %d, %v", len(w), n, err)
						}
					}
					got := c.Output()
					if !sameOutput(got, want) {
						t.Fatalf("got head %q tail %q omitted %d\nwant head %q tail %q omitted %d",
							got.Head, got.Tail, got.Omitted, want.Head, want.Tail, want.Omitted)
					}
					if got.Len() != int64(size) || got.Truncated() != (size > eff) {
						t.Fatalf("Len %d, Truncated %v for a stream of %d bytes", got.Len(), got.Truncated(), size)
					}
					if kept := len(got.Head) + len(got.Tail); kept > eff {
						t.Fatalf("kept %d bytes, cap %d", kept, eff)
					}
				})
			}
		}
	}
}

// TestCapWriterOutputTwice checks that Output does not disturb the writer:
// writing on after it still gives the right result.
func TestCapWriterOutputTwice(t *testing.T) {
	c := newCapWriter(10)
	var all []byte
	for i := range 30 {
		p := []byte{byte('A' + i%26), byte('a' + i%26)}
		c.Write(p)
		all = append(all, p...)
		if got, want := c.Output(), refCap(all, 10); !sameOutput(got, want) {
			t.Fatalf("after %d bytes: got %+v, want %+v", len(all), got, want)
		}
	}
}

func TestCapWriterConcurrent(t *testing.T) {
	const (
		limit    = 100
		writers  = 8
		writes   = 500
		chunkLen = 7
	)
	c := newCapWriter(limit)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			chunk := []byte(fmt.Sprintf("w%d-xyz\n", w))
			for range writes {
				c.Write(chunk)
			}
		})
	}
	// Reading while writing is safe too.
	wg.Go(func() {
		for range 100 {
			_ = c.Output()
		}
	})
	wg.Wait()
	got := c.Output()
	total := int64(writers * writes * chunkLen)
	if got.Len() != total || got.Omitted != total-limit || len(got.Head) != limit/2 || len(got.Tail) != limit-limit/2 {
		t.Fatalf("head %d + tail %d + omitted %d, want %d + %d + %d", len(got.Head), len(got.Tail), got.Omitted,
			limit/2, limit-limit/2, total-limit)
	}
	// Writes are atomic: the head is whole chunks.
	for _, line := range strings.Split(string(got.Head[:len(got.Head)/chunkLen*chunkLen]), "\n") {
		if line != "" && (len(line) != chunkLen-1 || !strings.HasSuffix(line, "-xyz")) {
			t.Fatalf("head holds interleaved writes: %q", got.Head)
		}
	}
}

func TestOutputString(t *testing.T) {
	for _, tc := range []struct {
		name string
		out  Output
		want string
	}{
		{"empty", Output{}, ""},
		{"whole", Output{Head: []byte("all of it\n")}, "all of it\n"},
		{"cut", Output{Head: []byte("start"), Tail: []byte("end"), Omitted: 1234}, "start\n[... 1234 bytes omitted ...]\nend"},
		{"cut to nothing", Output{Head: []byte("h"), Tail: []byte("t"), Omitted: 1}, "h\n[... 1 bytes omitted ...]\nt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.out.String(); got != tc.want {
				t.Errorf("String() = %q, want %q", got, tc.want)
			}
			if got, want := tc.out.Truncated(), tc.out.Omitted > 0; got != want {
				t.Errorf("Truncated() = %v, want %v", got, want)
			}
			if got, want := tc.out.Len(), int64(len(tc.out.Head)+len(tc.out.Tail))+tc.out.Omitted; got != want {
				t.Errorf("Len() = %d, want %d", got, want)
			}
		})
	}
}
