package devserver

import (
	"strings"
	"testing"
)

func TestTailBuffer(t *testing.T) {
	tests := []struct {
		name   string
		writes []string
		want   string
	}{
		{"fits", []string{"ab", "cd"}, "abcd"},
		{"drops oldest", []string{"abcd", "ef"}, "cdef"},
		{"one big write", []string{"abcdefgh"}, "efgh"},
		{"exactly full", []string{"ab", "cd", ""}, "abcd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newTailBuffer(4)
			for _, w := range tt.writes {
				if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", w, n, err)
				}
			}
			if got := b.String(); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	big := newTailBuffer(outputTailSize)
	for range 100 {
		big.Write([]byte(strings.Repeat("x", 1000)))
	}
	if n := len(big.String()); n != outputTailSize {
		t.Errorf("kept %d bytes, want %d", n, outputTailSize)
	}
}
