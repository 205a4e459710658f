package risk

import (
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"mvdan.cc/sh/v3/syntax"
)

// dynMark stands for a part of a word only known at run time (a
// parameter, a command substitution ...). It can never be part of a
// literal shell word, so it also separates tokens when scanning for
// credential paths.
const dynMark = "\x00"

// maxFields bounds brace expansion: a word expanding to more fields is
// treated as only known at run time.
const maxFields = 256

// field is one shell word after the expansions the classifier can do
// without running anything: quote removal, escapes, $'...' and brace
// expansion. Globs and tilde are recorded, not expanded.
type field struct {
	val  string       // the value; parts only known at run time appear as dynMark
	src  string       // the word as written, for messages; see source
	pat  string       // when glob: val with quoted glob characters escaped by a backslash
	glob bool         // contains an unquoted *, ? or [ (or an extended glob)
	dyn  bool         // some part is only known at run time
	home bool         // starts with an unquoted ~ (a home directory)
	word *syntax.Word // the word it came from; nil for fields the classifier made up
	code bool         // already analysed as a script, so not scanned again
}

// display is how the field is shown to a person.
func (f *field) display() string {
	if f.dyn {
		return f.source()
	}
	return f.val
}

// source is the word as written. It is printed on demand: printing every
// word of a deeply nested script up front costs more than the rest of
// the classification.
func (f *field) source() string {
	if f.src == "" && f.word != nil {
		f.src = printNode(f.word)
	}
	if f.src == "" {
		return f.val
	}
	return f.src
}

// lit makes a literal field that did not come from a word of its own
// (an option value split off "--opt=value", a path made up for find).
func lit(s string) *field {
	return &field{val: s, src: s, home: s == "~" || strings.HasPrefix(s, "~/")}
}

// dynField makes a field only known at run time, shown as src.
func dynField(src string) *field {
	return &field{val: dynMark, src: src, dyn: true}
}

// sub makes a field of f's value after the first n bytes, for option
// values attached to the option ("-tDIR", "--target=DIR").
func (f *field) sub(n int) *field {
	if f.dyn {
		return &field{val: f.val[n:], src: f.src, dyn: true, word: f.word}
	}
	s := lit(f.val[n:])
	if f.glob {
		s.glob, s.pat = true, patTail(f.pat, n)
	}
	return s
}

// patTail returns the part of pattern pat after the pattern bytes that
// encode the first n value bytes.
func patTail(pat string, n int) string {
	i := 0
	for ; n > 0 && i < len(pat); n-- {
		if pat[i] == '\\' && i+1 < len(pat) {
			i++
		}
		i++
	}
	return pat[i:]
}

// partial is one expansion of a word under construction.
type partial struct {
	val, pat        string
	glob, dyn, home bool
}

func (p partial) plus(q partial) partial {
	return partial{val: p.val + q.val, pat: p.pat + q.pat, glob: p.glob || q.glob, dyn: p.dyn || q.dyn, home: p.home}
}

// fields expands one word into its fields.
func fields(w *syntax.Word) []*field {
	split := &syntax.Word{Parts: slices.Clone(w.Parts)}
	syntax.SplitBraces(split)
	exps, ok := expandParts(split.Parts, []partial{{}})
	if !ok {
		return []*field{{val: dynMark, dyn: true, word: w}}
	}
	home := startsWithTilde(w)
	out := make([]*field, 0, len(exps))
	for _, e := range exps {
		f := &field{val: e.val, glob: e.glob, dyn: e.dyn, home: home, word: w}
		if e.glob {
			f.pat = e.pat
		}
		out = append(out, f)
	}
	return out
}

// startsWithTilde reports an unquoted ~ or ~user at the start of w,
// followed by a slash or the end of the word.
func startsWithTilde(w *syntax.Word) bool {
	if len(w.Parts) == 0 {
		return false
	}
	l, ok := w.Parts[0].(*syntax.Lit)
	if !ok || !strings.HasPrefix(l.Value, "~") {
		return false
	}
	user, _, found := strings.Cut(l.Value[1:], "/")
	if !found && len(w.Parts) > 1 {
		return false
	}
	for _, c := range user {
		if !(c == '_' || c == '-' || c == '.' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// expandParts appends the expansions of parts to each partial in acc.
// It returns false when the word expands to too many fields.
func expandParts(parts []syntax.WordPart, acc []partial) ([]partial, bool) {
	for _, part := range parts {
		var alts []partial
		switch p := part.(type) {
		case *syntax.Lit:
			alts = []partial{unquotedLit(p.Value)}
		case *syntax.SglQuoted:
			v := p.Value
			if p.Dollar {
				v = ansiC(v)
			}
			alts = []partial{{val: v, pat: globEscape(v)}}
		case *syntax.DblQuoted:
			alts = []partial{doubleQuoted(p.Parts)}
		case *syntax.ExtGlob:
			g := p.Op.String() + p.Pattern.Value + ")"
			alts = []partial{{val: g, pat: g, glob: true}}
		case *syntax.BraceExp:
			var ok bool
			if alts, ok = braceAlternatives(p); !ok {
				return nil, false
			}
		default: // parameters, substitutions, arithmetic
			alts = []partial{{val: dynMark, pat: dynMark, dyn: true}}
		}
		if len(acc)*len(alts) > maxFields {
			return nil, false
		}
		next := make([]partial, 0, len(acc)*len(alts))
		for _, a := range acc {
			for _, b := range alts {
				next = append(next, a.plus(b))
			}
		}
		acc = next
	}
	return acc, true
}

func braceAlternatives(b *syntax.BraceExp) ([]partial, bool) {
	if b.Sequence {
		seq, ok := braceSequence(b)
		if !ok {
			return nil, false
		}
		alts := make([]partial, len(seq))
		for i, s := range seq {
			alts[i] = partial{val: s, pat: globEscape(s)}
		}
		return alts, true
	}
	var alts []partial
	for _, elem := range b.Elems {
		exps, ok := expandParts(elem.Parts, []partial{{}})
		if !ok || len(alts)+len(exps) > maxFields {
			return nil, false
		}
		alts = append(alts, exps...)
	}
	return alts, true
}

// braceSequence expands {a..e} and {1..10..2}.
func braceSequence(b *syntax.BraceExp) ([]string, bool) {
	if len(b.Elems) < 2 {
		return nil, false
	}
	from, to := b.Elems[0].Lit(), b.Elems[1].Lit()
	step := 1
	if len(b.Elems) == 3 {
		n, err := strconv.Atoi(b.Elems[2].Lit())
		if err != nil {
			return nil, false
		}
		if n < 0 {
			n = -n
		}
		if n != 0 {
			step = n
		}
	}
	x, errFrom := strconv.Atoi(from)
	y, errTo := strconv.Atoi(to)
	isChar := false
	if errFrom != nil || errTo != nil {
		if len(from) != 1 || len(to) != 1 {
			return nil, false
		}
		x, y, isChar = int(from[0]), int(to[0]), true
	}
	if x > y {
		step = -step
	}
	var out []string
	for i := x; (step > 0 && i <= y) || (step < 0 && i >= y); i += step {
		if len(out) == maxFields {
			return nil, false
		}
		if isChar {
			out = append(out, string(rune(i)))
		} else {
			out = append(out, strconv.Itoa(i))
		}
	}
	return out, true
}

// unquotedLit resolves backslash escapes in an unquoted literal and
// records its glob characters.
func unquotedLit(s string) partial {
	var val, pat strings.Builder
	glob := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			i++
			val.WriteByte(s[i])
			pat.WriteString(globEscape(s[i : i+1]))
		case c == '*' || c == '?' || c == '[':
			glob = true
			val.WriteByte(c)
			pat.WriteByte(c)
		default:
			val.WriteByte(c)
			pat.WriteString(globEscape(s[i : i+1]))
		}
	}
	return partial{val: val.String(), pat: pat.String(), glob: glob}
}

// doubleQuoted resolves the parts of a "..." string: inside double quotes
// a backslash only escapes $ ` " \ and newline.
func doubleQuoted(parts []syntax.WordPart) partial {
	var p partial
	for _, part := range parts {
		if l, ok := part.(*syntax.Lit); ok {
			v := unescapeIn(l.Value, "$`\"\\\n")
			p = p.plus(partial{val: v, pat: globEscape(v)})
			continue
		}
		p = p.plus(partial{val: dynMark, pat: dynMark, dyn: true})
	}
	return p
}

// unescapeIn removes a backslash before any byte of special (and drops an
// escaped newline, a line continuation).
func unescapeIn(s, special string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) && strings.IndexByte(special, s[i+1]) >= 0 {
			i++
			if s[i] != '\n' {
				b.WriteByte(s[i])
			}
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// globEscape quotes the glob characters of a literal.
func globEscape(s string) string {
	if !strings.ContainsAny(s, `*?[]\(`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`*?[]\(`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ansiC decodes the escapes of a $'...' string.
func ansiC(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch c := s[i]; c {
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'e', 'E':
			b.WriteByte(0x1b)
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case 'c':
			if i+1 < len(s) {
				i++
				b.WriteByte(s[i] & 0x1f)
			}
		case 'x', 'u', 'U':
			width := 8
			switch c {
			case 'x':
				width = 2
			case 'u':
				width = 4
			}
			j := i + 1
			for j < len(s) && j-i-1 < width && isHex(s[j]) {
				j++
			}
			if j == i+1 {
				b.WriteByte('\\')
				b.WriteByte(c)
				continue
			}
			n, _ := strconv.ParseUint(s[i+1:j], 16, 32)
			if c == 'x' {
				b.WriteByte(byte(n))
			} else if r := rune(n); utf8.ValidRune(r) {
				b.WriteRune(r)
			}
			i = j - 1
		case '0', '1', '2', '3', '4', '5', '6', '7':
			j := i
			for j < len(s) && j-i < 3 && s[j] >= '0' && s[j] <= '7' {
				j++
			}
			n, _ := strconv.ParseUint(s[i:j], 8, 16)
			b.WriteByte(byte(n))
			i = j - 1
		case '\\', '\'', '"', '?':
			b.WriteByte(c)
		default:
			b.WriteByte('\\')
			b.WriteByte(c)
		}
	}
	return b.String()
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// heredoc turns a here-document body into a field. Bodies with a quoted
// delimiter are literal; others expand $ and ` and resolve \$ \` \\ and
// line continuations.
func heredoc(r *syntax.Redirect) *field {
	body := r.Hdoc
	if body == nil {
		return lit("")
	}
	quoted := r.Word != nil && (r.Word.Lit() == "" || strings.Contains(r.Word.Lit(), `\`))
	f := &field{word: body}
	var b strings.Builder
	for _, part := range body.Parts {
		l, ok := part.(*syntax.Lit)
		switch {
		case ok && quoted:
			b.WriteString(l.Value)
		case ok:
			b.WriteString(unescapeIn(l.Value, "$`\\\n"))
		default:
			b.WriteString(dynMark)
			f.dyn = true
		}
	}
	f.val = b.String()
	return f
}

// maxText bounds Finding.Command, which goes to chat.
const maxText = 300

// printNode renders a node as the shell printer does, on one line where
// the syntax allows, shortened to maxText bytes.
func printNode(n syntax.Node) string {
	var b strings.Builder
	if err := syntax.NewPrinter(syntax.SingleLine(true)).Print(&b, n); err != nil {
		return ""
	}
	return shorten(strings.TrimSpace(b.String()))
}

func shorten(s string) string {
	if len(s) <= maxText {
		return s
	}
	cut := maxText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
