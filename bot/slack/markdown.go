package slackbot

import (
	"context"
	"strings"
	"unicode"
	"unicode/utf8"
)

// toMrkdwn converts standard Markdown (what the model writes) to Slack's
// mrkdwn, for places that do not take a markdown block:
//
//   - **b** and __b__ become *b*; *i* and _i_ become _i_; ***bi*** becomes
//     *_bi_*; ~~s~~ becomes ~s~;
//   - [text](url) and ![alt](url) become <url|text> (http, https and mailto
//     URLs only; another URL is shown after the text); <https://...>
//     autolinks stay links;
//   - a heading becomes a bold line; "-", "*" and "+" list items become
//     "•" items (task boxes ☐ and ☑), numbered items and indentation are
//     kept; a block quote stays one; a thematic break becomes a rule;
//   - code spans and fenced code blocks are kept (a fence loses its info
//     string, which Slack would show as code), and nothing inside them is
//     converted; a table becomes a code block with aligned columns;
//   - '&', '<' and '>' are escaped everywhere, code included (Slack reads
//     entities in code too, and "<!channel>" in code would still notify).
//
// thread renders a "<thread:KEY>" token (see Links) outside code; nil
// leaves tokens as escaped text. Conversion is line by line: an emphasis
// never spans lines.
func toMrkdwn(md string, thread func(key string) string) string {
	c := mrkdwnConv{thread: thread}
	lines := strings.Split(md, "\n")
	var out []string
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSuffix(lines[i], "\r")
		if f, ok := openFence(line); ok {
			var body []string
			j := i + 1
			for ; j < len(lines); j++ {
				l := strings.TrimSuffix(lines[j], "\r")
				if f.closedBy(l) {
					break
				}
				body = append(body, l)
			}
			out = append(out, codeBlockMrkdwn(body))
			i = j // the closing line, or past the end
			continue
		}
		if isTableRow(line) && i+1 < len(lines) && isTableDelimiter(strings.TrimSuffix(lines[i+1], "\r")) {
			rows := [][]string{tableCells(line)}
			j := i + 2
			for ; j < len(lines) && isTableRow(strings.TrimSuffix(lines[j], "\r")); j++ {
				rows = append(rows, tableCells(strings.TrimSuffix(lines[j], "\r")))
			}
			out = append(out, tableMrkdwn(rows))
			i = j - 1
			continue
		}
		out = append(out, c.line(line))
	}
	return strings.Join(out, "\n")
}

// fence is the opening line of a fenced code block.
type fence struct {
	char byte
	n    int
}

// openFence reports whether line opens a fenced code block (CommonMark:
// up to three spaces, then three or more backticks or tildes; a backtick
// fence's info string holds no backtick).
func openFence(line string) (fence, bool) {
	t := strings.TrimLeft(line, " ")
	if len(line)-len(t) > 3 || len(t) < 3 || (t[0] != '`' && t[0] != '~') {
		return fence{}, false
	}
	n := 0
	for n < len(t) && t[n] == t[0] {
		n++
	}
	if n < 3 || (t[0] == '`' && strings.IndexByte(t[n:], '`') >= 0) {
		return fence{}, false
	}
	return fence{char: t[0], n: n}, true
}

// closedBy reports whether line closes the block f opened.
func (f fence) closedBy(line string) bool {
	t := strings.TrimLeft(line, " ")
	if len(line)-len(t) > 3 {
		return false
	}
	n := 0
	for n < len(t) && t[n] == f.char {
		n++
	}
	return n >= f.n && strings.TrimSpace(t[n:]) == ""
}

// codeBlockMrkdwn renders lines as a Slack code block. Slack ends a block
// at the first "```", so one inside is broken with a zero-width space.
func codeBlockMrkdwn(lines []string) string {
	body := strings.ReplaceAll(Escape(strings.Join(lines, "\n")), "```", "``\u200b`")
	if body == "" {
		return "```\n```"
	}
	return "```\n" + body + "\n```"
}

func isTableRow(line string) bool {
	t := strings.TrimSpace(line)
	return len(t) > 1 && t[0] == '|'
}

// isTableDelimiter reports a table's delimiter row: "|---|:--:|".
func isTableDelimiter(line string) bool {
	if !isTableRow(line) {
		return false
	}
	cells := tableCells(line)
	for _, c := range cells {
		c = strings.Trim(c, ":")
		if c == "" || strings.Trim(c, "-") != "" {
			return false
		}
	}
	return len(cells) > 0
}

// tableCells splits a table row into its trimmed cells.
func tableCells(line string) []string {
	t := strings.TrimSpace(line)
	t = strings.TrimPrefix(t, "|")
	t = strings.TrimSuffix(t, "|")
	cells := strings.Split(t, "|")
	for i, c := range cells {
		cells[i] = strings.TrimSpace(c)
	}
	return cells
}

// tableMrkdwn renders a table (header row first) as a code block with
// aligned columns and a rule under the header.
func tableMrkdwn(rows [][]string) string {
	var widths []int
	for _, r := range rows {
		for i, c := range r {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	format := func(r []string) string {
		var b strings.Builder
		for i, c := range r {
			if i > 0 {
				b.WriteString(" | ")
			}
			b.WriteString(c)
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c)))
			}
		}
		return strings.TrimRight(b.String(), " ")
	}
	lines := []string{format(rows[0])}
	var rule []string
	for _, w := range widths {
		rule = append(rule, strings.Repeat("-", max(w, 1)))
	}
	lines = append(lines, strings.Join(rule, "-+-"))
	for _, r := range rows[1:] {
		lines = append(lines, format(r))
	}
	return codeBlockMrkdwn(lines)
}

// mrkdwnConv converts the lines outside code blocks and tables.
type mrkdwnConv struct {
	thread func(key string) string
}

// line converts one line: its block syntax, then its inline syntax.
func (c mrkdwnConv) line(line string) string {
	body := strings.TrimLeft(line, " \t")
	indent := line[:len(line)-len(body)]
	switch {
	case isHeading(body):
		text := strings.TrimLeft(body, "#")
		text = strings.TrimSpace(strings.TrimRight(strings.TrimSpace(text), "#"))
		// Emphasis inside would close the bold early.
		text = strings.NewReplacer("**", "", "__", "").Replace(text)
		if text == "" {
			return ""
		}
		return "*" + c.inline(text) + "*"
	case len(indent) <= 3 && isBreak(body):
		return "──────────"
	case len(indent) <= 3 && strings.HasPrefix(body, ">"):
		rest := strings.TrimLeft(body, "> ")
		return "> " + c.inline(rest)
	}
	if len(body) >= 2 && strings.ContainsRune("-*+", rune(body[0])) && (body[1] == ' ' || body[1] == '\t') {
		item := strings.TrimLeft(body[2:], " \t")
		bullet := "• "
		switch {
		case strings.HasPrefix(item, "[ ] "):
			bullet, item = "☐ ", item[4:]
		case strings.HasPrefix(item, "[x] "), strings.HasPrefix(item, "[X] "):
			bullet, item = "☑ ", item[4:]
		}
		return indent + bullet + c.inline(item)
	}
	return indent + c.inline(body)
}

// isHeading reports an ATX heading: one to six '#', then a space or the
// end of the line.
func isHeading(s string) bool {
	n := 0
	for n < len(s) && s[n] == '#' {
		n++
	}
	return n >= 1 && n <= 6 && (n == len(s) || s[n] == ' ' || s[n] == '\t')
}

// isBreak reports a thematic break: three or more '-', '*' or '_' (and
// spaces) alone on a line.
func isBreak(s string) bool {
	s = strings.TrimSpace(s)
	if s == "" || !strings.ContainsRune("-*_", rune(s[0])) {
		return false
	}
	n := 0
	for _, r := range s {
		switch {
		case r == rune(s[0]):
			n++
		case r == ' ' || r == '\t':
		default:
			return false
		}
	}
	return n >= 3
}

// inline converts the inline syntax of s.
func (c mrkdwnConv) inline(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		ch := s[i]
		switch ch {
		case '\\':
			if i+1 < len(s) && isASCIIPunct(s[i+1]) {
				b.WriteString(Escape(s[i+1 : i+2]))
				i += 2
				continue
			}
		case '`':
			n := runLen(s, i, '`')
			if j := findRun(s, i+n, '`', n); j >= 0 {
				code := s[i+n : j]
				if len(code) >= 2 && code[0] == ' ' && code[len(code)-1] == ' ' && strings.TrimSpace(code) != "" {
					code = code[1 : len(code)-1]
				}
				if code != "" {
					b.WriteString("`" + strings.ReplaceAll(Escape(code), "`", "'") + "`")
					i = j + n
					continue
				}
			}
			b.WriteString(s[i : i+n])
			i += n
			continue
		case '<':
			if out, n, ok := c.angle(s[i:]); ok {
				b.WriteString(out)
				i += n
				continue
			}
		case '!', '[':
			start := i
			if ch == '!' {
				start++
			}
			if start < len(s) && s[start] == '[' {
				if out, n, ok := c.link(s[start:]); ok {
					b.WriteString(out)
					i = start + n
					continue
				}
			}
		case '*', '_', '~':
			if out, n, ok := c.emphasis(s, i); ok {
				b.WriteString(out)
				i += n
				continue
			}
			n := runLen(s, i, ch)
			b.WriteString(s[i : i+n])
			i += n
			continue
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		b.WriteString(Escape(s[i : i+size]))
		i += size
	}
	return b.String()
}

// angle converts what starts with '<': a "<thread:KEY>" token or an
// autolink. ok is false for a '<' that is text.
func (c mrkdwnConv) angle(s string) (string, int, bool) {
	end := strings.IndexByte(s, '>')
	if end < 0 {
		return "", 0, false
	}
	inner := s[1:end]
	if inner == "" || strings.ContainsAny(inner, " \t<") {
		return "", 0, false
	}
	if key, ok := strings.CutPrefix(inner, "thread:"); ok && key != "" && c.thread != nil {
		return c.thread(key), end + 1, true
	}
	if linkable(inner) {
		return "<" + linkURL(inner) + ">", end + 1, true
	}
	return "", 0, false
}

// link converts "[text](url)" at the start of s.
func (c mrkdwnConv) link(s string) (string, int, bool) {
	depth, close := 0, -1
	for i := 0; i < len(s) && close < 0; i++ {
		switch s[i] {
		case '\\':
			i++
		case '[':
			depth++
		case ']':
			if depth--; depth == 0 {
				close = i
			}
		}
	}
	if close < 0 || close+1 >= len(s) || s[close+1] != '(' {
		return "", 0, false
	}
	end := strings.IndexByte(s[close+2:], ')')
	if end < 0 {
		return "", 0, false
	}
	end += close + 2
	target := strings.TrimSpace(s[close+2 : end])
	if f := strings.Fields(target); len(f) > 0 {
		target = f[0] // drop a title
	}
	target = strings.TrimSuffix(strings.TrimPrefix(target, "<"), ">")
	label := strings.TrimSpace(strings.NewReplacer("**", "", "__", "", "`", "").Replace(s[1:close]))
	label = strings.ReplaceAll(Escape(label), "|", "¦")
	switch {
	case target == "":
		return c.inline(s[1:close]), end + 1, true
	case !linkable(target):
		return c.inline(s[1:close]) + " (" + Escape(target) + ")", end + 1, true
	case label == "" || label == target:
		return "<" + linkURL(target) + ">", end + 1, true
	}
	return "<" + linkURL(target) + "|" + label + ">", end + 1, true
}

// linkable says whether Slack should get target as a link.
func linkable(target string) bool {
	l := strings.ToLower(target)
	return (strings.HasPrefix(l, "https://") || strings.HasPrefix(l, "http://") || strings.HasPrefix(l, "mailto:")) &&
		!strings.ContainsAny(target, " \t\n")
}

// linkURL makes a URL safe inside "<...|...>".
func linkURL(u string) string {
	return strings.NewReplacer("<", "%3C", ">", "%3E", "|", "%7C", "&", "&amp;").Replace(u)
}

// emphasis converts "**b**", "__b__", "*i*", "_i_", "***bi***" or "~~s~~"
// starting at s[i].
func (c mrkdwnConv) emphasis(s string, i int) (string, int, bool) {
	ch := s[i]
	n := runLen(s, i, ch)
	if ch == '~' && n != 2 {
		return "", 0, false
	}
	if n > 3 || i+n >= len(s) || isSpace(s[i+n]) {
		return "", 0, false
	}
	if ch == '_' && i > 0 && isWordByte(s, i-1) {
		return "", 0, false // snake_case
	}
	for j := i + n; j < len(s); j++ {
		if s[j] == '`' { // no emphasis closes inside a code span
			m := runLen(s, j, '`')
			if k := findRun(s, j+m, '`', m); k >= 0 {
				j = k + m - 1
			} else {
				j += m - 1
			}
			continue
		}
		if s[j] != ch || runLen(s, j, ch) != n || isSpace(s[j-1]) {
			if s[j] == ch {
				j += runLen(s, j, ch) - 1
			}
			continue
		}
		if ch == '_' && j+n < len(s) && isWordByte(s, j+n) {
			j += n - 1
			continue
		}
		inner := c.inline(s[i+n : j])
		switch {
		case ch == '~':
			return "~" + inner + "~", j + n - i, true
		case n == 1:
			return "_" + inner + "_", j + n - i, true
		case n == 2:
			return "*" + inner + "*", j + n - i, true
		default:
			return "*_" + inner + "_*", j + n - i, true
		}
	}
	return "", 0, false
}

// runLen counts the bytes ch from s[i].
func runLen(s string, i int, ch byte) int {
	n := 0
	for i+n < len(s) && s[i+n] == ch {
		n++
	}
	return n
}

// findRun returns the index of the next run of exactly n ch from s[i], or
// -1.
func findRun(s string, i int, ch byte, n int) int {
	for i < len(s) {
		j := strings.IndexByte(s[i:], ch)
		if j < 0 {
			return -1
		}
		j += i
		m := runLen(s, j, ch)
		if m == n {
			return j
		}
		i = j + m
	}
	return -1
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' }

func isASCIIPunct(b byte) bool {
	return b < utf8.RuneSelf && unicode.IsPunct(rune(b)) || strings.IndexByte("$+<=>^`|~", b) >= 0
}

// isWordByte reports whether the rune that ends at or covers s[i] is a
// letter or digit.
func isWordByte(s string, i int) bool {
	if s[i] < utf8.RuneSelf {
		r := rune(s[i])
		return unicode.IsLetter(r) || unicode.IsDigit(r)
	}
	start := i
	for start > 0 && !utf8.RuneStart(s[start]) {
		start--
	}
	r, _ := utf8.DecodeRuneInString(s[start:])
	return unicode.IsLetter(r) || unicode.IsDigit(r)
}

// renderMarkdown makes an answer ready for a markdown block: "<thread:KEY>"
// tokens become Markdown links to the thread. Nothing else is changed:
// Slack renders the Markdown itself.
func (l *Links) renderMarkdown(ctx context.Context, text string) string {
	if !strings.Contains(text, threadToken) {
		return text
	}
	var b strings.Builder
	for {
		i := strings.Index(text, threadToken)
		if i < 0 {
			break
		}
		end := strings.IndexByte(text[i:], '>')
		key := ""
		if end >= 0 {
			key = text[i+len(threadToken) : i+end]
		}
		if end < 0 || key == "" || strings.ContainsAny(key, " \t\n<") {
			b.WriteString(text[:i+1])
			text = text[i+1:]
			continue
		}
		b.WriteString(text[:i])
		b.WriteString(l.markdownLink(ctx, key))
		text = text[i+end+1:]
	}
	b.WriteString(text)
	return b.String()
}

// markdownLink renders one thread key as Markdown.
func (l *Links) markdownLink(ctx context.Context, key string) string {
	_, channel, _, err := ParseThreadKey(key)
	if err != nil {
		return "`" + strings.ReplaceAll(key, "`", "'") + "`"
	}
	if url, err := l.Permalink(ctx, key); err == nil && url != "" {
		return "[thread](" + url + ")"
	}
	return "<#" + channel + "> thread"
}
