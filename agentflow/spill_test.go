package agentflow

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// memFile is a spill file in memory.
type memFile struct {
	bytes.Buffer
	closed bool
}

func (f *memFile) Close() error { f.closed = true; return nil }

func newTestSpill(max int, limit int64) (*spillWriter, *memFile) {
	f := &memFile{}
	return &spillWriter{max: max, limit: limit, open: func() (io.WriteCloser, <-chan error) {
		done := make(chan error, 1)
		done <- nil
		return f, done
	}}, f
}

// TestSpillWriter: small outputs stay in memory and make no file; larger
// ones go to the file with the sandbox's cuts noted; past its limit the
// file takes no more output, and says so.
func TestSpillWriter(t *testing.T) {
	t.Run("small output makes no file", func(t *testing.T) {
		s, f := newTestSpill(10, 100)
		spillStream{s, "stdout"}.Write([]byte("0123456789"))
		if wrote, err := s.finish(); wrote || err != nil || f.Len() != 0 {
			t.Fatalf("wrote %v, %v, file %q", wrote, err, f.String())
		}
	})
	t.Run("cuts are noted", func(t *testing.T) {
		s, f := newTestSpill(4, 100)
		out, errs := spillStream{s, "stdout"}, spillStream{s, "stderr"}
		out.Write([]byte("head-out "))
		errs.Write([]byte("head-err "))
		out.Skip(1000)
		out.Write([]byte("tail-out"))
		if wrote, err := s.finish(); !wrote || err != nil || !f.closed {
			t.Fatalf("wrote %v, %v, closed %v", wrote, err, f.closed)
		}
		want := "head-out head-err \n[... 1000 bytes of stdout left out ...]\ntail-out"
		if f.String() != want || s.leftOut() != 1000 {
			t.Fatalf("file %q, left out %d; want %q, 1000", f.String(), s.leftOut(), want)
		}
	})
	t.Run("the file stops at its limit", func(t *testing.T) {
		s, f := newTestSpill(4, 20)
		out := spillStream{s, "stdout"}
		for range 10 {
			if n, err := out.Write([]byte("0123456789")); n != 10 || err != nil {
				t.Fatalf("Write: %d, %v: the command's output must never fail", n, err)
			}
		}
		if _, err := s.finish(); err != nil {
			t.Fatal(err)
		}
		got := f.String()
		if !strings.HasPrefix(got, "01234567890123456789\n[... 80 more bytes left out") || s.leftOut() != 80 {
			t.Fatalf("file %q, left out %d", got, s.leftOut())
		}
	})
}
