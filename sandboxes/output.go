package sandboxes

import (
	"fmt"
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
	mu      sync.Mutex
	max     int
	head    []byte
	ring    []byte // last bytes once head is full, a ring of len tailMax
	ringPos int
	ringLen int
	total   int64
}

func newCapWriter(max int) *capWriter {
	if max < 2 {
		max = 2
	}
	return &capWriter{max: max}
}

func (c *capWriter) headMax() int { return c.max / 2 }
func (c *capWriter) tailMax() int { return c.max - c.max/2 }

func (c *capWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	c.total += int64(n)
	if room := c.headMax() - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	if len(p) == 0 {
		return n, nil
	}
	tm := c.tailMax()
	if c.ring == nil {
		c.ring = make([]byte, tm)
	}
	if len(p) >= tm {
		copy(c.ring, p[len(p)-tm:])
		c.ringPos, c.ringLen = 0, tm
		return n, nil
	}
	for len(p) > 0 {
		k := copy(c.ring[c.ringPos:], p)
		p = p[k:]
		c.ringPos = (c.ringPos + k) % tm
		c.ringLen = min(c.ringLen+k, tm)
	}
	return n, nil
}

// Output returns what was kept. When the stream fit in max bytes, Head holds
// all of it and nothing is reported omitted.
func (c *capWriter) Output() Output {
	c.mu.Lock()
	defer c.mu.Unlock()
	var tail []byte
	if c.ringLen < len(c.ring) {
		tail = append(tail, c.ring[:c.ringLen]...)
	} else if c.ringLen > 0 {
		tail = append(tail, c.ring[c.ringPos:]...)
		tail = append(tail, c.ring[:c.ringPos]...)
	}
	head := append([]byte(nil), c.head...)
	omitted := c.total - int64(len(head)+len(tail))
	if omitted == 0 {
		return Output{Head: append(head, tail...)}
	}
	return Output{Head: head, Tail: tail, Omitted: omitted}
}
