package terminal

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Plain turns the chat markup of the bot's texts and the Markdown of the
// model's answers into plain text for a terminal, keeping every word:
//
//   - *bold*, _italic_, **strong** and __strong__ lose their markers, but
//     only where they are markup: not inside words or identifiers
//     (snake_case_name, _private_var, 2*3*4), paths (/tmp/_x_/,
//     __init__.py, src/**/*.go), URLs or code;
//   - `code` loses its backticks and keeps its content as it is;
//   - a fenced code block (``` or ~~~) loses its fence lines, and its code
//     lines are indented by four spaces, so that code stands apart from
//     prose;
//   - "# Heading" (levels 1 to 6) loses its hashes;
//   - thread links "<thread:term:x>" become 'x' (the name /use takes);
//   - "<url|text>" and "[text](url)" become "text (url)", "<url>" and
//     "[url](url)" the bare url;
//   - mentions "<@id>", "<@id|name>", "<#id|name>", "<!here>" become
//     "@id", "@name", "#name", "@here".
//
// Everything else is left alone: bullets, lists, quotes, tables, ~strike~,
// a backslash before punctuation (which also keeps that punctuation from
// being markup). Markup is read line by line: emphasis and code spans do
// not run from one line to the next.
//
// The result is never longer than text by more than four bytes per line of
// a code block. Plain is not idempotent: what it shows of a code span
// ("`*x*`" gives "*x*") is markup again for a second call.
func Plain(text string) string {
	if !strings.ContainsAny(text, "*_`~<[#") {
		return text
	}
	lines := strings.Split(text, "\n")
	out := make([]string, 0, len(lines))
	var block fence
	inBlock := false
	for _, line := range lines {
		switch {
		case inBlock && block.closedBy(line):
			inBlock = false
		case inBlock:
			out = append(out, block.code(line))
		default:
			if f, ok := openFence(line); ok {
				block, inBlock = f, true
				continue
			}
			out = append(out, inline(heading(line)))
		}
	}
	return strings.Join(out, "\n")
}

// codeIndent is put before each line of a fenced code block.
const codeIndent = "    "

// fence is an open fenced code block: its fence character and length,
// and how many blanks its opening line had before the fence.
type fence struct {
	ch     byte
	n      int
	indent int
}

// openFence reads line as the opening line of a fenced code block: blanks,
// three or more backticks or tildes, an info string (for backticks, one
// with no backtick: "```x```" is inline code). Unlike CommonMark, a fence
// may be indented by any number of blanks: Plain knows no indented code
// blocks, and models indent fences under list items.
func openFence(line string) (fence, bool) {
	body := strings.TrimLeft(line, " \t")
	if body == "" || (body[0] != '`' && body[0] != '~') {
		return fence{}, false
	}
	ch := body[0]
	n := runLen(body, 0, ch)
	if n < 3 || (ch == '`' && strings.IndexByte(body[n:], '`') >= 0) {
		return fence{}, false
	}
	return fence{ch: ch, n: n, indent: len(line) - len(body)}, true
}

// closedBy reports whether line closes the block: blanks, at least as many
// fence characters as opened it, and nothing but blanks after.
func (f fence) closedBy(line string) bool {
	body := strings.TrimLeft(line, " \t")
	n := runLen(body, 0, f.ch)
	return n >= f.n && strings.TrimSpace(body[n:]) == ""
}

// code renders a line of the block: without the blanks the fence was
// indented by, after codeIndent; a blank line stays empty.
func (f fence) code(line string) string {
	i := 0
	for i < f.indent && i < len(line) && (line[i] == ' ' || line[i] == '\t') {
		i++
	}
	line = line[i:]
	if strings.TrimSpace(line) == "" {
		return ""
	}
	return codeIndent + line
}

// heading drops the hashes of an ATX heading ("## Title ##" gives
// "Title"); other lines are returned as they are. "#tag" and "#!/bin/sh"
// are not headings.
func heading(line string) string {
	body := strings.TrimLeft(line, " ")
	if len(line)-len(body) > 3 {
		return line
	}
	n := runLen(body, 0, '#')
	if n == 0 || n > 6 {
		return line
	}
	rest := body[n:]
	if rest != "" && rest[0] != ' ' && rest[0] != '\t' && rest != "\r" {
		return line
	}
	rest = strings.Trim(rest, " \t\r")
	if t := strings.TrimRight(rest, "#"); t != rest && (t == "" || strings.HasSuffix(t, " ") || strings.HasSuffix(t, "\t")) {
		rest = strings.Trim(t, " \t")
	}
	return rest
}

// piece is a part of a line for inline: text to print as it is, or a run
// of emphasis delimiters.
type piece struct {
	text string
	// ch is '*' or '_' for a delimiter run, else 0; n is how many of its
	// delimiters are left unmatched (printed), of orig.
	ch      byte
	n, orig int
	// open and close say whether the run may open or close emphasis.
	open, close bool
}

// inline renders the inline markup of one line.
func inline(s string) string {
	if !strings.ContainsAny(s, "*_`<[") {
		return s
	}
	var ps []piece
	lit := 0 // where the text not yet in ps starts
	add := func(i, end int, p piece) {
		if i > lit {
			ps = append(ps, piece{text: s[lit:i]})
		}
		ps = append(ps, p)
		lit = end
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s) && isASCIIPunct(s[i+1]):
			i += 2
			continue
		case c == '`':
			n := runLen(s, i, '`')
			if j := closingTicks(s, i+n, n); j >= 0 {
				add(i, j+n, piece{text: codeContent(s[i+n : j])})
				i = j + n
			} else {
				i += n // unmatched backticks are text
			}
			continue
		case c == '<':
			if out, end, ok := angleLink(s, i); ok {
				add(i, end, piece{text: out})
				i = end
				continue
			}
		case c == '[' || (c == '!' && i+1 < len(s) && s[i+1] == '['):
			if out, end, ok := markdownLink(s, i); ok {
				add(i, end, piece{text: out})
				i = end
				continue
			}
		case c == '*' || c == '_':
			n := runLen(s, i, c)
			open, close := flanks(s, i, i+n)
			add(i, i+n, piece{ch: c, n: n, orig: n, open: open, close: close})
			i += n
			continue
		case isASCIILetter(c) && (i == 0 || !isASCIIAlnum(s[i-1])):
			if end := bareURL(s, i); end > i {
				i = end // stays text, underscores and all
				continue
			}
		}
		i++
	}
	if lit < len(s) {
		ps = append(ps, piece{text: s[lit:]})
	}
	emphasis(ps)
	var b strings.Builder
	b.Grow(len(s))
	for _, p := range ps {
		if p.ch == 0 {
			b.WriteString(p.text)
			continue
		}
		for range p.n {
			b.WriteByte(p.ch)
		}
	}
	return b.String()
}

// emphasis matches the delimiter runs of ps as CommonMark does (a stack of
// openers; a closer takes the nearest opener of its character; one or two
// delimiters a match; the rule of three), leaving in each run's n the
// delimiters that stay text.
func emphasis(ps []piece) {
	var stack []int // indices of runs that may open, innermost last
	// bottom[ch][open][orig%3]: below it, no opener matches such a closer.
	var bottom [2][2][3]int
	for i := range ps {
		p := &ps[i]
		if p.ch == 0 {
			continue
		}
		for p.close && p.n > 0 {
			low := &bottom[delimIndex(p.ch)][boolIndex(p.open)][p.orig%3]
			j := len(stack) - 1
			for ; j >= min(*low, len(stack)); j-- {
				o := &ps[stack[j]]
				if o.ch == p.ch && !ruleOfThree(o, p) {
					break
				}
			}
			if j < min(*low, len(stack)) {
				*low = len(stack)
				break
			}
			o := &ps[stack[j]]
			use := 1
			if o.n >= 2 && p.n >= 2 {
				use = 2
			}
			o.n -= use
			p.n -= use
			stack = stack[:j+1] // the openers in between stay text
			if o.n == 0 {
				stack = stack[:j]
			}
		}
		if p.open && p.n > 0 {
			stack = append(stack, i)
		}
	}
}

// ruleOfThree is CommonMark's: a run that may both open and close does not
// match one whose length adds up to a multiple of three with its own,
// unless both lengths are.
func ruleOfThree(o, c *piece) bool {
	return (o.close || c.open) && (o.orig+c.orig)%3 == 0 && (o.orig%3 != 0 || c.orig%3 != 0)
}

func delimIndex(ch byte) int {
	if ch == '*' {
		return 0
	}
	return 1
}

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}

// flanks says whether the delimiter run s[i:j] may open and close
// emphasis: CommonMark's flanking rules, and, for both characters, what
// CommonMark asks only of '_': no emphasis from inside a word. Here a path
// is a word too ('/' and '\' join words, and so do '.' and '-' before a
// letter or digit), so "2*3*4", "snake_case", "a/_b_/c" and "__init__.py"
// keep their delimiters. Ideographic scripts, which put no spaces between
// words, are not words in this sense.
func flanks(s string, i, j int) (open, close bool) {
	prev, beforePrev := ' ', ' '
	if i > 0 {
		r, n := utf8.DecodeLastRuneInString(s[:i])
		prev = r
		if i-n > 0 {
			beforePrev, _ = utf8.DecodeLastRuneInString(s[:i-n])
		}
	}
	next, afterNext := ' ', ' '
	if j < len(s) {
		r, n := utf8.DecodeRuneInString(s[j:])
		next = r
		if j+n < len(s) {
			afterNext, _ = utf8.DecodeRuneInString(s[j+n:])
		}
	}
	left := !unicode.IsSpace(next) && (!isPunct(next) || unicode.IsSpace(prev) || isPunct(prev))
	right := !unicode.IsSpace(prev) && (!isPunct(prev) || unicode.IsSpace(next) || isPunct(next))
	open = left && !wordish(prev, beforePrev)
	close = right && !wordish(next, afterNext)
	if s[i] == '_' {
		// "_private_var", "MAX_SIZE_": an identifier, not emphasis.
		after := s[j:min(j+snakeScan, len(s))]
		if k := strings.IndexAny(after, " \t"); k >= 0 {
			after = after[:k]
		}
		before := s[max(i-snakeScan, 0):i]
		before = before[strings.LastIndexAny(before, " \t")+1:]
		open = open && !snakeWord(after)
		close = close && !snakeWord(before)
	}
	return open, close
}

// snakeScan is how far from a '_' run flanks looks for its word.
const snakeScan = 64

// snakeWord reports whether word has an underscore between two letters or
// digits, as identifiers do.
func snakeWord(word string) bool {
	for k := 1; k+1 < len(word); k++ {
		if word[k] == '_' && isASCIIAlnum(word[k-1]) && isASCIIAlnum(word[k+1]) {
			return true
		}
	}
	return false
}

// wordish reports whether r, next to a delimiter run, makes the run part
// of a word or path; beyond is the character on r's far side.
func wordish(r, beyond rune) bool {
	switch {
	case r == '/' || r == '\\':
		return true
	case r == '.' || r == '-':
		return isLetterOrDigit(beyond) && !ideographic(beyond)
	}
	return isLetterOrDigit(r) && !ideographic(r)
}

func isLetterOrDigit(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

func ideographic(r rune) bool {
	return unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul)
}

// isPunct is CommonMark's punctuation: ASCII punctuation, and Unicode
// punctuation and symbols.
func isPunct(r rune) bool {
	if r < utf8.RuneSelf {
		return isASCIIPunct(byte(r))
	}
	return unicode.IsPunct(r) || unicode.IsSymbol(r)
}

func isASCIIPunct(c byte) bool {
	return c > ' ' && c < 0x7f && !isASCIIAlnum(c)
}

func isASCIILetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

func isASCIIAlnum(c byte) bool { return isASCIILetter(c) || c >= '0' && c <= '9' }

// runLen is the length of the run of c at s[i:].
func runLen(s string, i int, c byte) int {
	n := 0
	for i+n < len(s) && s[i+n] == c {
		n++
	}
	return n
}

// closingTicks is where, from s[i:], a run of exactly n backticks starts,
// or -1.
func closingTicks(s string, i, n int) int {
	for i < len(s) {
		if s[i] != '`' {
			i++
			continue
		}
		m := runLen(s, i, '`')
		if m == n {
			return i
		}
		i += m
	}
	return -1
}

// codeContent is what a code span shows: its content, less one space on
// each side when it has both (so that a span can show a backtick at its
// edge: two backticks, a space, "`x`", a space, two backticks).
func codeContent(c string) string {
	if len(c) >= 2 && c[0] == ' ' && c[len(c)-1] == ' ' && strings.Trim(c, " ") != "" {
		return c[1 : len(c)-1]
	}
	return c
}

// angleLink renders the chat link at s[i] ('<'): a thread link, a
// mention, or a URL with or without text. ok is false for anything else
// ("a < b", "<T>", "<!-- x -->"), which stays text.
func angleLink(s string, i int) (out string, end int, ok bool) {
	k := strings.IndexAny(s[i+1:], "<>")
	if k <= 0 || s[i+1+k] != '>' {
		return "", 0, false
	}
	inner, end := s[i+1:i+1+k], i+k+2
	if strings.HasPrefix(inner, "thread:") {
		key := inner[len("thread:"):]
		if key == "" || hasBlank(key) {
			return "", 0, false
		}
		return "'" + strings.TrimPrefix(key, "term:") + "'", end, true
	}
	target, text, _ := strings.Cut(inner, "|")
	if target == "" || hasBlank(target) {
		return "", 0, false
	}
	switch target[0] {
	case '@', '#', '!':
		if len(target) == 1 {
			return "", 0, false
		}
		switch {
		case text != "" && target[0] == '!':
			return text, end, true // "<!subteam^S1|@team>", "<!date^…|fallback>"
		case text != "":
			return target[:1] + strings.TrimPrefix(text, target[:1]), end, true
		case target[0] == '!':
			return "@" + target[1:], end, true // "<!here>"
		}
		return target, end, true
	}
	if !hasScheme(target) {
		return "", 0, false
	}
	return linkText(inline(text), target), end, true
}

// markdownLink renders "[text](url)" or "![alt](url)" at s[i]. The text
// may not hold brackets, the destination no blanks (a title is not read):
// what does not fit stays text.
func markdownLink(s string, i int) (out string, end int, ok bool) {
	j := i
	if s[j] == '!' {
		j++
	}
	k := j + 1
	for ; k < len(s) && s[k] != ']'; k++ {
		switch s[k] {
		case '[':
			return "", 0, false
		case '\\':
			k++
		}
	}
	if k+1 >= len(s) || s[k+1] != '(' {
		return "", 0, false
	}
	text := s[j+1 : k]
	p := k + 2
	var url string
	if p < len(s) && s[p] == '<' {
		q := strings.IndexAny(s[p+1:], "<>")
		if q < 0 || s[p+1+q] != '>' {
			return "", 0, false
		}
		url, p = s[p+1:p+1+q], p+q+2
	} else {
		// Balanced parentheses, at most 32 deep (as CommonMark
		// renderers do), so that no line makes this quadratic.
		start, depth := p, 0
	dest:
		for ; p < len(s); p++ {
			switch c := s[p]; {
			case c <= ' ':
				break dest
			case c == '\\' && p+1 < len(s) && isASCIIPunct(s[p+1]):
				p++
			case c == '(':
				if depth++; depth > 32 {
					return "", 0, false
				}
			case c == ')':
				if depth == 0 {
					break dest
				}
				depth--
			}
		}
		url = s[start:p]
	}
	if p >= len(s) || s[p] != ')' {
		return "", 0, false
	}
	return linkText(inline(text), url), p + 1, true
}

// linkText shows a link: "text (url)", or the one of them that says it all.
func linkText(text, url string) string {
	switch {
	case url == "":
		return text
	case text == "" || text == url:
		return url
	}
	return text + " (" + url + ")"
}

// hasScheme reports whether s starts with a URL scheme and ':' (two to 32
// letters, digits, '+', '.' or '-', the first a letter), as in "https:",
// "mailto:".
func hasScheme(s string) bool {
	n := schemeLen(s)
	return n >= 2 && n < len(s) && s[n] == ':'
}

func schemeLen(s string) int {
	n := 0
	for n < len(s) && n <= 32 && (isASCIIAlnum(s[n]) || s[n] == '+' || s[n] == '.' || s[n] == '-') {
		n++
	}
	if n == 0 || !isASCIILetter(s[0]) || n > 32 {
		return 0
	}
	return n
}

// bareURL returns where the URL at s[i] ("scheme://...") ends, or i when
// there is none. It ends at a blank, '<', '>' or '`', and punctuation at
// its end (".", ")" without its "(", a closing '*') is not part of it.
func bareURL(s string, i int) int {
	n := schemeLen(s[i:])
	if n < 2 || !strings.HasPrefix(s[i+n:], "://") {
		return i
	}
	end := i + n + 3
	for end < len(s) && s[end] > ' ' && s[end] != '<' && s[end] != '>' && s[end] != '`' {
		end++
	}
	unclosed := strings.Count(s[i:end], ")") - strings.Count(s[i:end], "(")
	for end > i+n+3 {
		switch c := s[end-1]; {
		case c == ')' && unclosed > 0:
			unclosed--
		case strings.IndexByte(".,:;!?'\"*_~", c) < 0:
			return end
		}
		end--
	}
	return end
}

func hasBlank(s string) bool { return strings.ContainsAny(s, " \t\r\n\f\v") }
