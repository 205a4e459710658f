package sandboxes

import (
	"fmt"
	"io"
	"sync"
)

// Output is the captured part of one output stream of a command: its first
// and last bytes when it was longer than the cap.
type Output struct {
	// Head is the start of the stream; the whole stream when nothing was
	// cut.
	Head []byte `json:"head,omitempty"`
	// Tail is the end of the stream, set only when something was cut.
	Tail []byte `json:"tail,omitempty"`
	// Omitted counts the bytes cut between Head and Tail.
	Omitted int64 `json:"omitted,omitempty"`
}

// Truncated reports whether part of the stream was cut.
func (o Output) Truncated() bool { return o.Omitted > 0 }

// Len is the length of the whole stream.
func (o Output) Len() int64 { return int64(len(o.Head)+len(o.Tail)) + o.Omitted }

// String renders the captured output, with a line saying what was cut
// between head and tail.
func (o Output) String() string {
	if o.Omitted == 0 {
		return string(o.Head) + string(o.Tail)
	}
	return fmt.Sprintf("%s\n[... %d bytes omitted ...]\n%s", o.Head, o.Omitted, o.Tail)
}

// capWriter keeps the first and last bytes written to it, max in all. It is
// safe for concurrent use. Memory stays at max bytes whatever the stream's
// length.
type capWriter struct {
	mu    sync.Mutex
	max   int
	head  []byte
	shut  bool // the head takes no more bytes: a Skip came after it
	tail  ring // last bytes once head is full
	total int64
}

func newCapWriter(max int) *capWriter {
	if max < 2 {
		max = 2
	}
	return &capWriter{max: max, tail: ring{size: max - max/2}}
}

func (c *capWriter) headMax() int { return c.max / 2 }

func (c *capWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	c.total += int64(n)
	if room := c.headMax() - len(c.head); room > 0 && !c.shut {
		k := min(room, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	c.tail.write(p)
	return n, nil
}

// Skip counts n bytes the backend left out. What follows is no longer
// next to the head nor to the tail kept so far: the head is closed, and
// the tail starts again after the gap.
func (c *capWriter) Skip(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total += n
	c.shut = true
	c.tail.reset()
}

// Output returns what was kept. When the stream fit in max bytes, Head holds
// all of it and nothing is reported omitted.
func (c *capWriter) Output() Output {
	c.mu.Lock()
	defer c.mu.Unlock()
	tail := c.tail.bytes()
	head := append([]byte(nil), c.head...)
	omitted := c.total - int64(len(head)+len(tail))
	if omitted == 0 {
		return Output{Head: append(head, tail...)}
	}
	return Output{Head: head, Tail: tail, Omitted: omitted}
}

// ring keeps the last size bytes written to it. Its buffer is allocated at
// the first write, so a stream that never reaches it costs nothing.
type ring struct {
	size int
	buf  []byte
	pos  int // where the next byte goes
	n    int // bytes held, at most size
}

// write adds p and returns how many bytes fell out of the ring.
func (r *ring) write(p []byte) (dropped int) {
	if len(p) == 0 || r.size == 0 {
		return len(p)
	}
	if r.buf == nil {
		r.buf = make([]byte, r.size)
	}
	dropped = max(0, r.n+len(p)-r.size)
	if len(p) >= r.size {
		copy(r.buf, p[len(p)-r.size:])
		r.pos, r.n = 0, r.size
		return dropped
	}
	r.n = min(r.n+len(p), r.size)
	for len(p) > 0 {
		k := copy(r.buf[r.pos:], p)
		p = p[k:]
		r.pos = (r.pos + k) % r.size
	}
	return dropped
}

// bytes returns a copy of what the ring holds, oldest first.
func (r *ring) bytes() []byte {
	if r.n == 0 {
		return nil
	}
	out := make([]byte, 0, r.n)
	start := (r.pos - r.n + r.size) % r.size
	if start+r.n <= r.size {
		return append(out, r.buf[start:start+r.n]...)
	}
	out = append(out, r.buf[start:]...)
	return append(out, r.buf[:r.pos]...)
}

// reset empties the ring and returns how many bytes it dropped.
func (r *ring) reset() int {
	n := r.n
	r.pos, r.n = 0, 0
	return n
}

// capStream passes at most max bytes of a stream to w: the first max/2 as
// they come, the last max-max/2 when the stream is closed, after telling
// w (when it is a Skipper) how many bytes between the two it left out.
// Memory stays at max-max/2 bytes, taken only once the head is passed.
type capStream struct {
	mu       sync.Mutex
	w        io.Writer
	headLeft int
	tail     ring
	skipped  int64
	err      error // w's first error; w gets nothing more after one
}

func newCapStream(w io.Writer, limit int) *capStream {
	limit = max(limit, 2)
	return &capStream{w: w, headLeft: limit / 2, tail: ring{size: limit - limit/2}}
}

func (c *capStream) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	if c.headLeft > 0 {
		k := min(c.headLeft, len(p))
		c.headLeft -= k
		if c.err == nil {
			_, c.err = c.w.Write(p[:k])
		}
		p = p[k:]
	}
	c.skipped += int64(c.tail.write(p))
	return n, c.err
}

// Skip counts n bytes a backend left out; the tail kept so far is not next
// to what follows, so it is left out too.
func (c *capStream) Skip(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.headLeft = 0
	c.skipped += int64(c.tail.reset()) + n
}

// close tells w what was left out and writes the tail. It returns w's
// first error.
func (c *capStream) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	if c.skipped > 0 {
		if s, ok := c.w.(Skipper); ok {
			s.Skip(c.skipped)
		}
		c.skipped = 0
	}
	if tail := c.tail.bytes(); len(tail) > 0 {
		c.tail.reset()
		_, c.err = c.w.Write(tail)
	}
	return c.err
}

// execStream is the writer a backend's Exec gets for one stream: the
// result's capWriter keeps its head and tail, and the caller's writer, when
// there is one, gets the stream through a capStream.
type execStream struct {
	keep *capWriter
	fwd  *capStream // nil without a caller's writer
}

func newExecStream(max int, w io.Writer, maxStream int) *execStream {
	e := &execStream{keep: newCapWriter(max)}
	if w != nil {
		e.fwd = newCapStream(w, maxStream)
	}
	return e
}

func (e *execStream) Write(p []byte) (int, error) {
	e.keep.Write(p)
	if e.fwd != nil {
		return e.fwd.Write(p)
	}
	return len(p), nil
}

// Skip implements Skipper, for backends that leave out the middle of a
// long stream.
func (e *execStream) Skip(n int64) {
	e.keep.Skip(n)
	if e.fwd != nil {
		e.fwd.Skip(n)
	}
}

// close hands the caller's writer the rest: the cut and the tail.
func (e *execStream) close() error {
	if e.fwd == nil {
		return nil
	}
	return e.fwd.close()
}
