package bot

import (
	"math"
	"slices"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MinLimit is the smallest part size, in runes or in bytes, that Chunk and
// ChunkLimits work with; a smaller limit is raised to it. It leaves room to
// close and reopen a code fence around some code.
const MinLimit = 20

// Limits caps the size of one message part for ChunkLimits. A field of zero
// or less means no cap of that kind; a cap below MinLimit is raised to it.
type Limits struct {
	// Runes caps the characters (Unicode code points) of a part: Discord
	// counts code points for its 2,000 per message, Slack counts characters
	// (at most 40,000 per text, 4,000 recommended). Each byte of invalid
	// UTF-8 counts as one.
	Runes int
	// Bytes caps the UTF-8 length of a part, for places that count bytes.
	Bytes int
}

func (l Limits) normalized() Limits {
	clamp := func(n int) int {
		switch {
		case n <= 0:
			return 0
		case n < MinLimit:
			return MinLimit
		}
		return n
	}
	return Limits{Runes: clamp(l.Runes), Bytes: clamp(l.Bytes)}
}

// fits reports whether r runes and b bytes are within l.
func (l Limits) fits(r, b int) bool {
	return (l.Runes == 0 || r <= l.Runes) && (l.Bytes == 0 || b <= l.Bytes)
}

// fill is how full r runes and b bytes make a part, 1 being full.
func (l Limits) fill(r, b int) float64 {
	f := 0.0
	if l.Runes > 0 {
		f = float64(r) / float64(l.Runes)
	}
	if l.Bytes > 0 {
		f = max(f, float64(b)/float64(l.Bytes))
	}
	return f
}

// Chunk splits markdown text into parts of at most limit runes
// (characters) each, for platforms that cap the length of a message; a
// limit below MinLimit is raised to MinLimit. It is ChunkLimits with
// Limits{Runes: limit}; the rules are there.
func Chunk(text string, limit int) []string {
	return ChunkLimits(text, Limits{Runes: max(limit, MinLimit)})
}

// ChunkLimits splits markdown text into parts, in order, that each fit lim
// (with no cap at all, text is one part).
//
// Cuts go, by preference, at a blank line or at either edge of a fenced
// code block, then at any line break, then at a space (not one inside an
// inline code span), and only then between any two characters: never
// inside a UTF-8 sequence and, where there is a choice, not inside a
// grapheme cluster (combining marks, emoji ZWJ sequences and skin tones,
// flags, CR LF). A better cut wins over a fuller part as long as that is
// not likely to cost an extra part, and parts stay at least half full
// unless that would cut a word that fits whole in a part.
//
// Fenced code blocks (``` or ~~~ with optional info string, CommonMark
// rules, at the top level) are never left open. When a block must be cut,
// the part is closed with the fence ("```") and the next part reopens it
// with the same opening line (fence and info string, e.g. "```go"); these
// added lines count within the limit. The opening and closing lines of a
// block are never cut, the closing line stays with code before it, and a
// block that fits in one part is moved whole to the next part rather than
// cut when the parts have room to spare. A block left open at the end of
// text is closed. A cut inside a line never leaves a line that reads as a
// fence (if white space is dropped there, a tab or four spaces of it are
// kept instead). Two things too long to fit a part are cut as plain text:
// a block whose opening and closing lines (up to their '\n'; the fence
// alone for a block left open) and seven more characters exceed a cap, so
// that it could not be closed, reopened and still carry code; and a run of
// backticks or tildes that would start a part as a fence line unless kept
// with what comes before it on its line, when it and six more characters
// (and the fence lines of the block it is in) exceed a cap.
//
// No part is empty or only white space, and white space at a cut is
// dropped (as are blank lines before the text and white space after it),
// but the indentation of the line a part starts with is kept if it fits.
// Joining the parts, without the added fence lines, gives back text except
// for white space at the cuts. Text with nothing but white space gives no
// parts.
func ChunkLimits(text string, lim Limits) []string {
	c := newChunker(text, lim.normalized())
	var parts []string
	total := utf8.RuneCountInString(text)
	p := c.skip(0)
	before := utf8.RuneCountInString(text[:p])
	for p < len(text) {
		part, e, n, resume := c.next(p, total-before)
		parts = append(parts, part)
		q := c.skip(e)
		if resume > 0 {
			q = resume
		}
		before += n + utf8.RuneCountInString(text[e:q])
		p = q
	}
	return parts
}

// CodeBlock returns body as a fenced code block with the info string lang
// (its first word; backticks dropped), for example CodeBlock(out, "go").
// The fence is one backtick longer than the longest run of backticks in
// body (at least three), so no line of body can close it in a CommonMark
// renderer. One line ending at the end of body is dropped.
//
// Slack and Discord do not honour longer fences (the first ``` ends a
// block there); an adapter for them must escape backticks in body itself.
func CodeBlock(body, lang string) string {
	longest, run := 0, 0
	for i := 0; i < len(body); i++ {
		if body[i] == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	fence := strings.Repeat("`", max(3, longest+1))
	if f := strings.Fields(lang); len(f) > 0 {
		lang = strings.ReplaceAll(f[0], "`", "")
	} else {
		lang = ""
	}
	body = strings.TrimSuffix(body, "\n")
	body = strings.TrimSuffix(body, "\r")
	var b strings.Builder
	b.Grow(len(body) + 2*len(fence) + len(lang) + 2)
	b.WriteString(fence)
	b.WriteString(lang)
	b.WriteByte('\n')
	if body != "" {
		b.WriteString(body)
		b.WriteByte('\n')
	}
	b.WriteString(fence)
	return b.String()
}

// Truncate shortens text to at most limit runes, for places that take one
// short message (titles, button labels, previews). Text that fits is
// returned unchanged (text that fits once white space at its end is
// dropped, without it); text that does not is cut at a rune boundary (not
// inside a grapheme cluster where avoidable), white space before the cut
// is dropped, and "…" is added. A cut inside a fenced code block closes
// the block after the "…"; a block is never cut before its first line of
// code or inside its opening or closing line. A limit below 1 gives "".
func Truncate(text string, limit int) string {
	if limit < 1 {
		return ""
	}
	if utf8.RuneCountInString(text) <= limit {
		return text
	}
	if t := strings.TrimRightFunc(text, unicode.IsSpace); utf8.RuneCountInString(t) <= limit {
		return t // only white space is lost
	}
	const ellipsis = "…"
	c := newChunker(text, Limits{})
	var (
		cut, loose int    // best cut, and best one that may split a cluster
		tail       string // what follows "…" at cut
		looseTail  string
		probe      lineProbe
		fi         int
		rc, tr     int  // runes of text[:e], and without trailing white space
		tpos       int  // end of the last rune that is not white space
		prev       rune = -1
		ri         int
		sep        string
	)
	for e := 0; e < len(text); {
		r, size := utf8.DecodeRuneInString(text[e:])
		if r == '\n' {
			probe = lineProbe{}
		} else {
			probe.feed(r)
		}
		e += size
		rc++
		if !unicode.IsSpace(r) {
			tr, tpos = rc, e
		}
		if isRegionalIndicator(r) {
			ri++
		} else {
			ri = 0
		}
		prev = r
		if tr+1 > limit || e == len(text) {
			break
		}
		for fi < len(c.fences) && c.fences[fi].xend(len(text)) <= e {
			fi++
		}
		suffix := ""
		sep = ""
		if fi < len(c.fences) && c.fences[fi].start < e {
			g := &c.fences[fi]
			if e < g.body || (g.closed && e > g.closeStart) || e <= g.first {
				continue
			}
			suffix = "\n" + g.close
		} else {
			if prev != '\n' && probe.opener() {
				continue // "```x…" would open a block
			}
			if fi > 0 && c.fences[fi-1].closed && tpos > c.fences[fi-1].closeStart && tpos <= c.fences[fi-1].end {
				sep = "\n" // "```…" would no longer close the block before
			}
		}
		if text[e]&0xC0 == 0x80 || tr+len(sep)+1+len(suffix) > limit {
			continue
		}
		next, _ := utf8.DecodeRuneInString(text[e:])
		if graphemeBreak(prev, next, ri) {
			cut, tail = e, sep+ellipsis+suffix
		}
		loose, looseTail = e, sep+ellipsis+suffix
	}
	if cut == 0 && loose > 0 {
		cut, tail = loose, looseTail
	}
	if cut == 0 {
		return ellipsis
	}
	return strings.TrimRightFunc(text[:cut], unicode.IsSpace) + tail
}

// Cut classes, best first. Soft classes (up to clsSpaceInCode) keep words
// whole.
const (
	clsBlock       = 1 + iota // blank line, or an edge of a fenced block
	clsLine                   // line break
	clsBlankInCode            // blank line inside a fenced block
	clsLineInCode             // line break inside a fenced block
	clsSpace                  // space in prose
	clsSpaceInCode            // space (or line break) in code or a code span
	clsGrapheme               // between grapheme clusters
	clsRune                   // between runes
	clsEmptyCode              // leaves a fenced block part with no code
	clsSplitBytes             // inside a run of invalid UTF-8
	clsFakeFence              // leaves a line that reads as a fence
	nClasses
)

// chunkLine is a line of the text.
type chunkLine struct {
	start, end int  // end is at the '\n', or len(text)
	blank      bool // only white space
	// lastBTRun is where the line's last run of backticks starts, -1 if
	// there is none.
	lastBTRun int
	// lastNWS is the last byte that is not ' ', '\t' or '\r', -1 if none;
	// trailRun is where the run of that byte ending there starts.
	lastNWS, trailRun int
}

// fenceBlock is a fenced code block of the text.
type fenceBlock struct {
	start, body int // opening line, and the line after it
	// closeStart and end are the closing line and the line after it; both
	// len(text) when the block is left open.
	closeStart, end int
	closed          bool
	ok              bool // it can be closed and reopened within the limits
	ch              byte // '`' or '~'
	n               int  // fence length
	reopen, close   string
	// first is the first byte of code that is not white space and last the
	// end of the last such rune: closeStart and body when there is none.
	first, last  int
	runes, bytes int // size of the whole block as one part
}

// xend is where positions stop being inside f; an open block holds the end
// of the text too.
func (f *fenceBlock) xend(n int) int {
	if f.closed {
		return f.end
	}
	return n + 1
}

// codeSpan is an inline code span [a, b), backticks included.
type codeSpan struct{ a, b int }

type chunker struct {
	text   string
	lim    Limits
	lines  []chunkLine
	fences []fenceBlock
	spans  []codeSpan
}

func newChunker(text string, lim Limits) *chunker {
	c := &chunker{text: text, lim: lim}
	c.scanLines()
	c.scanFences()
	c.scanSpans()
	return c
}

func (c *chunker) scanLines() {
	text := c.text
	for start := 0; ; {
		end := strings.IndexByte(text[start:], '\n')
		if end < 0 {
			end = len(text)
		} else {
			end += start
		}
		s := text[start:end]
		l := chunkLine{start: start, end: end, blank: strings.TrimSpace(s) == "", lastBTRun: -1, lastNWS: -1, trailRun: -1}
		if i := strings.LastIndexByte(s, '`'); i >= 0 {
			for i > 0 && s[i-1] == '`' {
				i--
			}
			l.lastBTRun = start + i
		}
		if i := len(strings.TrimRight(s, " \t\r")) - 1; i >= 0 {
			j := i
			for j > 0 && s[j-1] == s[i] {
				j--
			}
			l.lastNWS, l.trailRun = start+i, start+j
		}
		c.lines = append(c.lines, l)
		if end == len(text) {
			return
		}
		start = end + 1
	}
}

// fenceOpen reports whether line (without its line ending) opens a fenced
// code block, and with which fence.
func fenceOpen(line string) (ch byte, n int, ok bool) {
	i := 0
	for i < len(line) && i < 4 && line[i] == ' ' {
		i++
	}
	if i > 3 || i == len(line) || (line[i] != '`' && line[i] != '~') {
		return 0, 0, false
	}
	ch = line[i]
	j := i
	for j < len(line) && line[j] == ch {
		j++
	}
	if j-i < 3 || (ch == '`' && strings.IndexByte(line[j:], '`') >= 0) {
		return 0, 0, false
	}
	return ch, j - i, true
}

// fenceClose reports whether line (without its line ending) closes a block
// opened with n times ch.
func fenceClose(line string, ch byte, n int) bool {
	i := 0
	for i < len(line) && i < 4 && line[i] == ' ' {
		i++
	}
	if i > 3 {
		return false
	}
	j := i
	for j < len(line) && line[j] == ch {
		j++
	}
	return j-i >= n && strings.Trim(line[j:], " \t") == ""
}

// fenceLinesFit reports whether a block with these opening and closing
// lines can be cut within lim: a part can hold the opening line (or the
// reopening line, no longer), some code, and the closing line (or the added
// fence, no longer).
func fenceLinesFit(open, close string, lim Limits) bool {
	return lim.fits(utf8.RuneCountInString(open)+utf8.RuneCountInString(close)+fenceRoom, len(open)+len(close)+fenceRoom)
}

// fenceRoom is what a part holding a piece of a block needs besides its
// fence lines: two line breaks, a character of code and up to four
// characters of indentation (a tab or four spaces, when a line that starts
// a part would read as a fence line without them).
const fenceRoom = 7

func (c *chunker) scanFences() {
	text := c.text
	var (
		cur      *fenceBlock
		openLine string
	)
	finish := func(f *fenceBlock) {
		code := text[f.body:f.closeStart]
		f.first, f.last = f.closeStart, f.body
		if i := strings.IndexFunc(code, notSpace); i >= 0 {
			f.first = f.body + i
			j := strings.LastIndexFunc(code, notSpace)
			_, size := utf8.DecodeRuneInString(code[j:])
			f.last = f.body + j + size
		}
		whole := strings.TrimRightFunc(text[f.start:f.end], unicode.IsSpace)
		f.runes, f.bytes = utf8.RuneCountInString(whole), len(whole)
		if !f.closed {
			f.runes += 1 + len(f.close)
			f.bytes += 1 + len(f.close)
		}
		c.fences = append(c.fences, *f)
	}
	for _, l := range c.lines {
		raw := text[l.start:l.end]
		line := strings.TrimSuffix(raw, "\r")
		next := min(l.end+1, len(text))
		if cur == nil {
			ch, n, ok := fenceOpen(line)
			if !ok {
				continue
			}
			cur = &fenceBlock{
				start: l.start, body: next, closeStart: len(text), end: len(text),
				ch: ch, n: n,
				reopen: strings.TrimRightFunc(raw, unicode.IsSpace),
				close:  strings.Repeat(string(ch), n),
			}
			openLine = raw
			continue
		}
		if fenceClose(line, cur.ch, cur.n) {
			cur.closeStart, cur.end, cur.closed = l.start, next, true
			cur.ok = fenceLinesFit(openLine, raw, c.lim)
			finish(cur)
			cur = nil
		}
	}
	if cur != nil {
		cur.ok = fenceLinesFit(openLine, cur.close, c.lim)
		finish(cur)
	}
}

// scanSpans finds inline code spans in the paragraphs outside fenced
// blocks (roughly CommonMark: a run of backticks up to the next run of the
// same length; a backslash escapes one backtick).
func (c *chunker) scanSpans() {
	text := c.text
	fi := 0
	inFence := func(l chunkLine) bool {
		for fi < len(c.fences) && c.fences[fi].end <= l.start && c.fences[fi].closed {
			fi++
		}
		return fi < len(c.fences) && c.fences[fi].start <= l.start
	}
	for i := 0; i < len(c.lines); {
		l := c.lines[i]
		if l.blank || inFence(l) {
			i++
			continue
		}
		j := i
		for j+1 < len(c.lines) && !c.lines[j+1].blank && !inFence(c.lines[j+1]) {
			j++
		}
		c.spans = appendSpans(c.spans, text[l.start:c.lines[j].end], l.start)
		i = j + 1
	}
}

func appendSpans(spans []codeSpan, s string, base int) []codeSpan {
	type run struct{ a, n int }
	var runs []run
	for i := 0; i < len(s); {
		switch s[i] {
		case '\\':
			i += 2
		case '`':
			j := i
			for j < len(s) && s[j] == '`' {
				j++
			}
			runs = append(runs, run{i, j - i})
			i = j
		default:
			i++
		}
	}
	next := make([]int, len(runs))
	last := map[int]int{}
	for k := len(runs) - 1; k >= 0; k-- {
		next[k] = -1
		if v, ok := last[runs[k].n]; ok {
			next[k] = v
		}
		last[runs[k].n] = k
	}
	for k := 0; k < len(runs); {
		if j := next[k]; j >= 0 {
			spans = append(spans, codeSpan{base + runs[k].a, base + runs[j].a + runs[j].n})
			k = j + 1
		} else {
			k++
		}
	}
	return spans
}

// skip returns where the part after a cut at e starts: after the white
// space at e, but at the start of a line (keeping its indentation) if that
// white space ends a line; len(text) if only white space is left.
func (c *chunker) skip(e int) int {
	text := c.text
	from, lineStart := e, e == 0 || text[e-1] == '\n'
	for i := e; i < len(text); {
		r, size := utf8.DecodeRuneInString(text[i:])
		if !unicode.IsSpace(r) {
			if lineStart {
				return from
			}
			return i
		}
		i += size
		if r == '\n' {
			from, lineStart = i, true
		}
	}
	return len(text)
}

// fenceAt returns the index of the first block that does not end before
// (or at) p.
func (c *chunker) fenceAt(p int) int {
	return sort.Search(len(c.fences), func(i int) bool { return c.fences[i].xend(len(c.text)) > p })
}

// reopened returns the block that a part starting at p continues, if it
// must be reopened.
func (c *chunker) reopened(p int) *fenceBlock {
	if i := c.fenceAt(p); i < len(c.fences) {
		if f := &c.fences[i]; f.ok && f.body <= p && p <= f.closeStart {
			return f
		}
	}
	return nil
}

// cand is a possible cut.
type cand struct {
	set    bool
	e      int         // cut position
	resume int         // where the next part starts, if not after the white space at e
	runes  int         // runes of the text from the part's start to e
	fill   float64     // how full the part is
	done   float64     // how much of the text it takes, in parts
	close  *fenceBlock // block to close at the end of the part
	keep   bool        // the cut keeps the next block whole
}

// next returns the part starting at p (rem runes of text being left), where
// it ends in text, how many runes of text that is, and where the next part
// starts if not after the white space at end (else 0).
func (c *chunker) next(p, rem int) (part string, end, runes, resume int) {
	var (
		prefix string
		best   [nClasses]cand
		in     = c.reopened(p)
	)
	if in != nil {
		prefix = in.reopen + "\n"
	}
	if part, e, n, final := c.scan(p, prefix, &best); final {
		return part, e, n, 0
	}
	start, skipped := p, 0
	if !slices.ContainsFunc(best[:], func(b cand) bool { return b.set }) {
		// The indentation the part starts with leaves no room for
		// anything: drop it.
		start = c.unindent(p, in)
		skipped = utf8.RuneCountInString(c.text[p:start])
		if part, e, n, final := c.scan(start, prefix, &best); final {
			return part, e, skipped + n, 0
		}
	}
	b := c.choose(&best, start, rem-skipped)
	return c.build(prefix, start, b.e, b.close), b.e, skipped + b.runes, b.resume
}

// unindent returns where the line at p starts without its indentation,
// keeping a tab or four spaces of it if the line would otherwise read as a
// fence line (in the block in, if any).
func (c *chunker) unindent(p int, in *fenceBlock) int {
	text := c.text
	q := p + len(text[p:]) - len(strings.TrimLeftFunc(text[p:], unicode.IsSpace))
	end := strings.IndexByte(text[q:], '\n')
	if end < 0 {
		end = len(text)
	} else {
		end += q
	}
	line := strings.TrimSuffix(text[q:end], "\r")
	fake := false
	if in != nil {
		fake = fenceClose(line, in.ch, in.n)
	} else {
		_, _, fake = fenceOpen(line)
	}
	if !fake {
		return q
	}
	if i := strings.LastIndexFunc(text[p:q], func(r rune) bool { return r != ' ' }); i >= 0 {
		return p + i
	}
	return max(q-4, p) // not a fence line before, so at least four spaces
}

// scan looks at the cuts of the part starting at p with prefix, recording
// the furthest of each class in best, or returns the part when the rest of
// the text fits.
func (c *chunker) scan(p int, prefix string, best *[nClasses]cand) (part string, end, runes int, final bool) {
	text, lim := c.text, c.lim
	pr, pb := utf8.RuneCountInString(prefix), len(prefix)
	var (
		probe lineProbe
		fi    = c.fenceAt(p)
		si    = sort.Search(len(c.spans), func(i int) bool { return c.spans[i].b > p })
		li    = sort.Search(len(c.lines), func(i int) bool { return c.lines[i].end >= p })
		rc    int // runes of text[p:e]
		tr    int // runes of text[p:e] without trailing white space
		tb    int // bytes of the same
		prev  rune
		ri    int // regional indicators just before e
		// white space run cache: from wsFrom to wsTo the next non-white-space
		// rune on the line is at wsNext (-1: the line ends first), and the
		// last white space in the run that is not a space at wsKeep (-1)
		wsFrom, wsTo, wsNext, wsKeep = -1, -1, -1, -1
	)
	for e := p; e < len(text); {
		r, size := utf8.DecodeRuneInString(text[e:])
		if r == '\n' {
			probe = lineProbe{}
			li++
		} else {
			probe.feed(r)
		}
		e += size
		rc++
		if !unicode.IsSpace(r) {
			tr, tb = rc, e-p
		}
		if isRegionalIndicator(r) {
			ri++
		} else {
			ri = 0
		}
		prev = r
		if !lim.fits(pr+tr, pb+tb) {
			break
		}
		if tr == 0 {
			continue
		}
		for fi < len(c.fences) && c.fences[fi].xend(len(text)) <= e {
			fi++
		}
		var in, closing *fenceBlock
		if fi < len(c.fences) && c.fences[fi].start < e {
			in = &c.fences[fi]
			if in.ok {
				if e < in.body || (in.closed && e > in.closeStart) {
					continue // fence lines are kept whole
				}
				closing = in
			}
		}
		sr, sb := 0, 0
		if closing != nil {
			sr, sb = 1+len(closing.close), 1+len(closing.close)
		}
		if e == len(text) {
			if lim.fits(pr+tr+sr, pb+tb+sb) {
				return c.build(prefix, p, e, closing), e, rc, true
			}
			break
		}
		if !lim.fits(pr+tr+sr, pb+tb+sb) {
			continue
		}
		for si < len(c.spans) && c.spans[si].b <= e {
			si++
		}
		inSpan := si < len(c.spans) && c.spans[si].a < e
		atLine := prev == '\n'
		next, _ := utf8.DecodeRuneInString(text[e:])

		fake, resume := false, 0
		if !atLine && (in == nil || closing != nil) {
			// The part's last line and the next part's first line must not
			// read as fence lines they were not.
			q := e
			if unicode.IsSpace(next) {
				if e < wsFrom || e >= wsTo {
					wsFrom, wsTo, wsNext, wsKeep = c.spaceRun(e)
				}
				q = wsNext
			}
			l := &c.lines[li]
			var head, tail bool // the part's last line, the next one's first
			if in == nil {
				head = probe.opener()
				tail = q >= 0 && (strings.HasPrefix(text[q:], "~~~") ||
					strings.HasPrefix(text[q:], "```") && q >= l.lastBTRun)
			} else {
				head = probe.closer(in.ch, in.n)
				tail = q >= 0 && text[q] == in.ch && l.lastNWS >= q &&
					text[l.lastNWS] == in.ch && q >= l.trailRun && l.lastNWS+1-q >= in.n
			}
			if tail && !head && q > e {
				// Start the next part indented by a tab (or any white
				// space but a space) or four spaces: not a fence line.
				switch {
				case wsKeep >= e:
					resume = wsKeep
				case q-e >= 4:
					resume = q - 4
				}
			}
			fake = head || (tail && resume == 0)
		}

		var cls int
		switch {
		case fake:
			cls = clsFakeFence
		case closing != nil && (e <= closing.first || (closing.closed && e >= closing.last)):
			cls = clsEmptyCode
		case atLine && inSpan:
			cls = clsSpaceInCode
		case atLine && in == nil:
			cls = clsLine
			if c.lines[li].blank || c.lines[li-1].blank ||
				(fi < len(c.fences) && c.fences[fi].start == e) ||
				(fi > 0 && c.fences[fi-1].closed && c.fences[fi-1].end == e) {
				cls = clsBlock
			}
		case atLine:
			cls = clsLineInCode
			if c.lines[li].blank || c.lines[li-1].blank {
				cls = clsBlankInCode
			}
		case isBreakSpace(next) || isCJKBreak(prev):
			cls = clsSpace
			if in != nil || inSpan {
				cls = clsSpaceInCode
			}
		case text[e]&0xC0 == 0x80:
			cls = clsSplitBytes
		case graphemeBreak(prev, next, ri):
			cls = clsGrapheme
		default:
			cls = clsRune
		}
		b := cand{set: true, e: e, resume: resume, runes: rc, fill: lim.fill(pr+tr+sr, pb+tb+sb), done: lim.fill(rc, e-p), close: closing}
		if cls == clsBlock && fi < len(c.fences) && c.fences[fi].start == e {
			f := &c.fences[fi]
			b.keep = f.ok && lim.fits(f.runes, f.bytes)
		}
		best[cls] = b
	}
	return "", 0, 0, false
}

// choose picks the cut among the best of each class: the best class that
// takes about as much text as the fewest parts need, then a soft cut
// that leaves the part half full, then one that saves a word that fits in a
// part from a hard cut, then hard cuts.
func (c *chunker) choose(best *[nClasses]cand, p, rem int) cand {
	left := c.lim.fill(rem, len(c.text)-p) // parts' worth of text left
	m := max(math.Ceil(left), 2)
	slack := m - left // room the parts will leave unused, in parts
	// If each part but the last leaves at most its share of that room
	// unused, the last one still fits.
	need := 1 - slack/(m-1) - 1e-9 // (rounding)
	for k := clsBlock; k <= clsSpaceInCode; k++ {
		if b := best[k]; b.set && (b.done >= need || b.keep && b.done >= 1-slack) {
			return b
		}
	}
	for k := clsBlock; k <= clsSpaceInCode; k++ {
		if b := best[k]; b.set && b.fill >= 0.5 {
			return b
		}
	}
	var soft cand
	for k := clsBlock; k <= clsSpaceInCode; k++ {
		if b := best[k]; b.set && b.e > soft.e {
			soft = b
		}
	}
	if soft.set && c.wordFits(soft) {
		return soft
	}
	if b := best[clsGrapheme]; b.set && b.fill >= 0.5 {
		return b
	}
	if g, r := best[clsGrapheme], best[clsRune]; g.set || r.set {
		if r.e > g.e {
			return r
		}
		return g
	}
	for k := clsEmptyCode; k < nClasses; k++ {
		if best[k].set {
			return best[k]
		}
	}
	panic("bot: no cut for a part") // cannot happen: some code or text after p always fits
}

// wordFits reports whether the word after the cut b fits in the next part.
func (c *chunker) wordFits(b cand) bool {
	text := c.text
	q := c.skip(b.e)
	over := 0
	if b.close != nil {
		over = 2*len(b.close.reopen) + 2 // a generous bound on its fence lines
	}
	r := over
	for i := q; i < len(text); {
		ch, size := utf8.DecodeRuneInString(text[i:])
		if unicode.IsSpace(ch) {
			return true
		}
		i += size
		r++
		if !c.lim.fits(r, i-q+over) {
			return false
		}
	}
	return true
}

// spaceRun returns the run of white space on a line from e, the first rune
// after it on the line (-1 if the line ends first), and the last white
// space in the run that is not a space (-1 if none).
func (c *chunker) spaceRun(e int) (from, to, next, keep int) {
	text := c.text
	keep = -1
	for i := e; i < len(text); {
		r, size := utf8.DecodeRuneInString(text[i:])
		if r == '\n' {
			return e, i, -1, keep
		}
		if !unicode.IsSpace(r) {
			return e, i, i, keep
		}
		if r != ' ' {
			keep = i
		}
		i += size
	}
	return e, len(text), -1, keep
}

func (c *chunker) build(prefix string, p, e int, closing *fenceBlock) string {
	body := strings.TrimRightFunc(c.text[p:e], unicode.IsSpace)
	var b strings.Builder
	b.Grow(len(prefix) + len(body) + 8)
	b.WriteString(prefix)
	b.WriteString(body)
	if closing != nil {
		b.WriteByte('\n')
		b.WriteString(closing.close)
	}
	return b.String()
}

// lineProbe follows a line as it grows, to tell whether it would read as a
// fence line if it ended here (white space at its end being dropped).
type lineProbe struct {
	indent  int
	state   uint8 // 0 indentation, 1 fence run, 2 after the run, 3 not a fence
	ch      byte
	k       int
	btAfter bool // a backtick after the run
	wordAft bool // something other than white space after the run
}

func (lp *lineProbe) feed(r rune) {
	switch lp.state {
	case 0:
		switch {
		case r == ' ' && lp.indent < 3:
			lp.indent++
		case r == '`' || r == '~':
			lp.state, lp.ch, lp.k = 1, byte(r), 1
		default:
			lp.state = 3
		}
	case 1:
		if r == rune(lp.ch) {
			lp.k++
			return
		}
		lp.state = 2
		lp.after(r)
	case 2:
		lp.after(r)
	}
}

func (lp *lineProbe) after(r rune) {
	if r == '`' {
		lp.btAfter = true
	}
	if !unicode.IsSpace(r) {
		lp.wordAft = true
	}
}

// opener reports whether the line so far opens a fenced block.
func (lp *lineProbe) opener() bool {
	return (lp.state == 1 || lp.state == 2) && lp.k >= 3 && (lp.ch == '~' || !lp.btAfter)
}

// closer reports whether the line so far closes a block of n times ch.
func (lp *lineProbe) closer(ch byte, n int) bool {
	return (lp.state == 1 || lp.state == 2) && lp.ch == ch && lp.k >= n && !lp.wordAft
}

func notSpace(r rune) bool { return !unicode.IsSpace(r) }

// isBreakSpace reports whether r is white space a line may break at.
func isBreakSpace(r rune) bool {
	switch r {
	case '\n', '\u00a0', '\u2007', '\u202f': // no-break spaces
		return false
	}
	return unicode.IsSpace(r)
}

// isCJKBreak reports whether a line may break after r, a CJK punctuation
// mark (CJK text has no spaces).
func isCJKBreak(r rune) bool {
	switch r {
	case '、', '。', '，', '！', '？', '；', '：', '）', '」', '』':
		return true
	}
	return false
}

func isRegionalIndicator(r rune) bool { return r >= 0x1F1E6 && r <= 0x1F1FF }

// extendsCluster reports whether r continues the grapheme cluster before it
// (an approximation of UAX #29 Extend, SpacingMark and ZWJ).
func extendsCluster(r rune) bool {
	switch {
	case r == 0x200C || r == 0x200D: // ZWNJ, ZWJ
		return true
	case r >= 0xFE00 && r <= 0xFE0F, r >= 0xE0100 && r <= 0xE01EF: // variation selectors
		return true
	case r >= 0x1F3FB && r <= 0x1F3FF: // skin tones
		return true
	case r >= 0xE0020 && r <= 0xE007F: // tags (subdivision flags)
		return true
	}
	return unicode.In(r, unicode.Mn, unicode.Me, unicode.Mc)
}

// graphemeBreak reports whether a cut between prev and next would not
// split a grapheme cluster; ri is the number of regional indicators ending
// with prev.
func graphemeBreak(prev, next rune, ri int) bool {
	switch {
	case prev == '\r' && next == '\n':
		return false
	case extendsCluster(next):
		return false
	case prev == 0x200D: // emoji ZWJ sequence
		return false
	case ri%2 == 1 && isRegionalIndicator(next): // inside a flag
		return false
	}
	return true
}
