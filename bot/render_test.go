package bot_test

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/agentbot/agentbot/bot"
)

// The test's own reading of fenced code blocks (CommonMark, top level), to
// check Chunk against something it does not share code with.

var (
	openFenceRE = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})(.*)$")
	fenceRunRE  = regexp.MustCompile("`{3,}|~{3,}")
)

var closeFenceRE sync.Map // fence → *regexp.Regexp

// closerOf returns the pattern of the lines that close a block opened with
// fence.
func closerOf(fence string) *regexp.Regexp {
	if re, ok := closeFenceRE.Load(fence); ok {
		return re.(*regexp.Regexp)
	}
	re := regexp.MustCompile("^ {0,3}" + regexp.QuoteMeta(fence) + regexp.QuoteMeta(fence[:1]) + "*[ \t]*$")
	closeFenceRE.Store(fence, re)
	return re
}

// refFence is a fenced block of a text: [start, openEnd) is the opening
// line without trailing white space, body the line after it; a closed block
// has its closing line at closeStart, its fence from closeRun, and
// closeEnd after its last non-space byte.
type refFence struct {
	start, openEnd, body           int
	closeStart, closeRun, closeEnd int
	closed                         bool
	ok                             bool // fence lines short enough to close and reopen
	reopen, close                  string
}

func refFences(text string, lim bot.Limits) []refFence {
	var (
		out    []refFence
		cur    *refFence
		closer *regexp.Regexp
		pos    int
	)
	short := func(open, close string) bool {
		return (lim.Runes <= 0 || utf8.RuneCountInString(open+close)+7 <= lim.Runes) &&
			(lim.Bytes <= 0 || len(open+close)+7 <= lim.Bytes)
	}
	var openLine string
	for _, raw := range strings.SplitAfter(text, "\n") {
		next := pos + len(raw)
		noNL := strings.TrimSuffix(raw, "\n")
		line := strings.TrimSuffix(noNL, "\r")
		switch {
		case cur == nil:
			m := openFenceRE.FindStringSubmatch(line)
			if m == nil || (m[1][0] == '`' && strings.Contains(m[2], "`")) {
				break
			}
			cur = &refFence{
				start: pos, openEnd: pos + len(strings.TrimRightFunc(noNL, unicode.IsSpace)), body: next,
				closeStart: len(text), closeRun: len(text), closeEnd: len(text),
				reopen: strings.TrimRightFunc(noNL, unicode.IsSpace), close: m[1],
			}
			openLine = noNL
			closer = closerOf(m[1])
		case closer.MatchString(line):
			cur.closed = true
			cur.closeStart = pos
			cur.closeRun = pos + len(line) - len(strings.TrimLeft(line, " "))
			cur.closeEnd = pos + len(strings.TrimRightFunc(noNL, unicode.IsSpace))
			cur.ok = short(openLine, noNL)
			out = append(out, *cur)
			cur = nil
		}
		pos = next
	}
	if cur != nil {
		cur.ok = short(openLine, cur.close)
		out = append(out, *cur)
	}
	return out
}

// balanced reports whether every fenced block in s is closed.
func balanced(s string) bool {
	f := refFences(s, bot.Limits{})
	return len(f) == 0 || f[len(f)-1].closed
}

type endState int

const (
	outside endState = iota
	inside           // inside a block's code: a part ending here must close it
	broken           // inside a fence line
)

// stateAt says where a part whose text ends at p (just after a non-space
// byte) leaves the reopenable blocks of text.
func stateAt(fences []refFence, p int) (endState, *refFence) {
	for i := range fences {
		f := &fences[i]
		if !f.ok {
			continue
		}
		switch {
		case f.start < p && p < f.openEnd:
			return broken, f
		case f.openEnd <= p && (!f.closed || p <= f.closeStart):
			return inside, f
		case f.closed && f.closeStart < p && p < f.closeEnd:
			return broken, f
		}
	}
	return outside, nil
}

// continued returns the block a part starting at p (a non-space byte)
// continues, which it must reopen.
func continued(fences []refFence, p int) *refFence {
	for i := range fences {
		f := &fences[i]
		if f.ok && f.body <= p && (!f.closed || p <= f.closeRun) {
			return f
		}
	}
	return nil
}

func skipSpace(text string, p int) int {
	return len(text) - len(strings.TrimLeftFunc(text[p:], unicode.IsSpace))
}

func clip(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

// reassemble checks that parts, with the fence lines Chunk adds at cuts
// (a reopening line exactly where a part continues a block, a closing line
// exactly where a part ends inside one) taken away, are text in order,
// except for white space at the cuts.
func reassemble(text string, fences []refFence, parts []string) error {
	failed := map[[2]int]bool{}
	var why error
	var walk func(i, pos int) bool
	walk = func(i, pos int) bool {
		pos = skipSpace(text, pos)
		if i == len(parts) {
			if pos != len(text) {
				why = fmt.Errorf("text left over after the last part: %q", clip(text[pos:]))
				return false
			}
			return true
		}
		key := [2]int{i, pos}
		if failed[key] {
			return false
		}
		failed[key] = true
		s := parts[i]
		if f := continued(fences, pos); f != nil {
			if !strings.HasPrefix(s, f.reopen+"\n") {
				why = fmt.Errorf("part %d continues a code block but does not start with %q: %q", i, f.reopen, clip(s))
				return false
			}
			s = s[len(f.reopen)+1:]
		}
		for _, closed := range []bool{false, true} {
			body, last := s, ""
			if closed {
				k := strings.LastIndexByte(s, '\n')
				if k < 0 {
					continue
				}
				body, last = s[:k], s[k+1:]
			}
			content := strings.TrimSpace(body)
			if content == "" || !strings.HasPrefix(text[pos:], content) {
				why = fmt.Errorf("part %d is not the text at byte %d: part %q, text %q", i, pos, clip(content), clip(text[pos:]))
				continue
			}
			end := pos + len(content)
			st, f := stateAt(fences, end)
			switch {
			case st == broken:
				why = fmt.Errorf("part %d ends inside a fence line", i)
				continue
			case closed != (st == inside):
				why = fmt.Errorf("part %d: ends inside a block %v, closes one %v", i, st == inside, closed)
				continue
			case closed && last != f.close:
				why = fmt.Errorf("part %d closes with %q, want %q", i, last, f.close)
				continue
			}
			if walk(i+1, end) {
				return true
			}
		}
		return false
	}
	if walk(0, 0) {
		return nil
	}
	return why
}

// normalized is how Chunk treats limits.
func normalized(l bot.Limits) bot.Limits {
	c := func(n int) int {
		if n <= 0 {
			return 0
		}
		return max(n, bot.MinLimit)
	}
	return bot.Limits{Runes: c(l.Runes), Bytes: c(l.Bytes)}
}

// checkChunks checks the whole contract of ChunkLimits(text, lim) = parts.
func checkChunks(t testing.TB, text string, lim bot.Limits, parts []string) {
	t.Helper()
	lim = normalized(lim)
	if strings.TrimSpace(text) == "" {
		if parts != nil {
			t.Fatalf("blank text gave %d parts, want none", len(parts))
		}
		return
	}
	fences := refFences(text, lim)
	// Parts are balanced unless text has what ChunkLimits cuts as plain
	// text: a block with fence lines too long, or a run of fence characters
	// too long to fit a part with six more characters and the fence lines
	// of its block.
	allOK := true
	for _, f := range fences {
		allOK = allOK && f.ok
	}
	for _, run := range fenceRunRE.FindAllStringIndex(text, -1) {
		t := run[1] - run[0]
		r, b := t+6, t+6
		for _, f := range fences {
			if f.ok && f.body <= run[0] && (!f.closed || run[0] < f.closeStart) {
				r += utf8.RuneCountInString(f.reopen) + len(f.close)
				b += len(f.reopen) + len(f.close)
			}
		}
		if (lim.Runes > 0 && r > lim.Runes) || (lim.Bytes > 0 && b > lim.Bytes) {
			allOK = false
		}
	}
	for i, p := range parts {
		if strings.TrimSpace(p) == "" {
			t.Fatalf("part %d of %d is empty or blank: %q", i, len(parts), p)
		}
		if n := utf8.RuneCountInString(p); lim.Runes > 0 && n > lim.Runes {
			t.Fatalf("part %d has %d runes, limit %d: %q", i, n, lim.Runes, clip(p))
		}
		if lim.Bytes > 0 && len(p) > lim.Bytes {
			t.Fatalf("part %d has %d bytes, limit %d: %q", i, len(p), lim.Bytes, clip(p))
		}
		if allOK && !balanced(p) {
			t.Fatalf("part %d leaves a code block open: %q", i, p)
		}
		if utf8.ValidString(text) && !utf8.ValidString(p) {
			t.Fatalf("part %d is not valid UTF-8 (cut inside a rune): %q", i, p)
		}
	}
	if err := reassemble(text, fences, parts); err != nil {
		t.Fatalf("parts do not reassemble to the text (limits %+v, %d parts): %v\ntext: %q\nparts: %q", lim, len(parts), err, text, parts)
	}
}

func TestChunk(t *testing.T) {
	family := "👨\u200d👩\u200d👧\u200d👦" // 7 runes, one grapheme cluster
	words := func(n int) string { return strings.TrimSpace(strings.Repeat("word ", n)) }
	tests := []struct {
		name  string
		text  string
		limit int
		want  []string // nil: only the contract is checked, and check
		check func(t *testing.T, parts []string)
	}{
		{name: "plain text fits", text: "Hello, world.", limit: 2000, want: []string{"Hello, world."}},
		{name: "white space at the ends dropped", text: "\n\n  Hello\n\n", limit: 2000, want: []string{"  Hello"}},
		{name: "blank text", text: " \n\t \r\n", limit: 2000, want: nil},
		{name: "plain text split at spaces", text: "alpha beta gamma delta epsilon zeta eta theta", limit: 20,
			want: []string{"alpha beta gamma", "delta epsilon zeta", "eta theta"}},
		{name: "many paragraphs split at blank lines", text: "One.\n\nTwo two.\n\nThree three three.\n\nFour.", limit: 20,
			want: []string{"One.\n\nTwo two.", "Three three three.", "Four."}},
		{name: "lines split at line breaks", text: "- item one\n- item two\n- item three\n- item four", limit: 24,
			want: []string{"- item one\n- item two", "- item three\n- item four"}},
		{name: "one huge fence", text: "```go\na := 1\nb := 2\nc := 3\nd := 4\n```", limit: 24,
			want: []string{"```go\na := 1\nb := 2\n```", "```go\nc := 3\nd := 4\n```"}},
		{name: "huge fence at the Discord limit", text: "```go\n" + strings.Repeat("fmt.Println(\"hello, world\") // say it\n", 200) + "```", limit: 2000,
			check: func(t *testing.T, parts []string) {
				for i, p := range parts {
					if !strings.HasPrefix(p, "```go\nfmt.Println") || !strings.HasSuffix(p, "// say it\n```") {
						t.Errorf("part %d is not whole lines of code in a go block: %q … %q", i, clip(p), p[max(0, len(p)-30):])
					}
				}
			}},
		{name: "several fences each kept whole", limit: 40,
			text: "First:\n\n```sh\nmake build\n```\n\nThen:\n\n```sh\nmake test\n```\n\nDone.",
			want: []string{"First:\n\n```sh\nmake build\n```\n\nThen:", "```sh\nmake test\n```\n\nDone."}},
		{name: "fence moved whole rather than cut", limit: 40,
			text: "Here is the fix for it.\n\n```go\nx := 1\ny := 2\nz := 3\n```",
			want: []string{"Here is the fix for it.", "```go\nx := 1\ny := 2\nz := 3\n```"}},
		{name: "fence kept whole when parts have room to spare", limit: 100,
			text: words(11) + ".\n\n```go\n" + strings.Repeat("x := 1\n", 7) + "```\n\n" + words(24) + ".",
			want: []string{words(11) + ".", "```go\n" + strings.Repeat("x := 1\n", 7) + "```\n\n" + words(8), words(16) + "."}},
		{name: "fence with info string", limit: 40,
			text: "```python title=\"a.py\"\nprint(1)\nprint(2)\nprint(3)\n```",
			want: []string{"```python title=\"a.py\"\nprint(1)\n```", "```python title=\"a.py\"\nprint(2)\n```", "```python title=\"a.py\"\nprint(3)\n```"}},
		{name: "tilde fences", limit: 20,
			text: "~~~\nline one\nline two\nline 3\n~~~",
			want: []string{"~~~\nline one\n~~~", "~~~\nline two\n~~~", "~~~\nline 3\n~~~"}},
		{name: "nested-looking backticks inside a fence", limit: 30,
			text: "````md\n```go\nx := 1\n```\nmore\n````",
			want: []string{"````md\n```go\nx := 1\n```\n````", "````md\nmore\n````"}},
		{name: "unclosed fence is closed", text: "```sh\necho hi\n", limit: 2000, want: []string{"```sh\necho hi\n```"}},
		{name: "code line ending in a fence-like run", text: "```000000000000000000000\n00          ```", limit: 40,
			want: []string{"```000000000000000000000\n00\n```", "```000000000000000000000\n    ```\n```"}},
		{name: "prose with a fence-like run", text: "see the " + strings.Repeat(" ", 20) + "```go part", limit: 20,
			want: []string{"see the", "    ```go part"}},
		{name: "fence with white space for info", text: "```\f\nx", limit: 20, want: []string{"```\f\nx\n```"}},
		{name: "closing line stays with its code", text: "```\n" + strings.Repeat("a", 12) + "\n`````", limit: 20,
			want: []string{"```\n" + strings.Repeat("a", 11) + "\n```", "```\na\n`````"}},
		{name: "fewest parts beats a nicer cut", limit: 40,
			text: strings.Repeat("a", 22) + "\n\n" + strings.Repeat("b", 16) + "\n" + strings.Repeat("c", 16) + "\n" + strings.Repeat("d", 20),
			want: []string{strings.Repeat("a", 22) + "\n\n" + strings.Repeat("b", 16), strings.Repeat("c", 16) + "\n" + strings.Repeat("d", 20)}},
		{name: "inline code span kept whole", text: "run `go test ./...` now please", limit: 20,
			want: []string{"run `go test ./...`", "now please"}},
		{name: "inline code span moved whole", text: "some words here then `go test -race ./...`", limit: 30,
			want: []string{"some words here then", "`go test -race ./...`"}},
		{name: "CJK near the limit", text: strings.Repeat("漢字", 25), limit: 20,
			want: []string{strings.Repeat("漢字", 10), strings.Repeat("漢字", 10), strings.Repeat("漢字", 5)}},
		{name: "CJK breaks after punctuation", text: "これはテストです。" + strings.Repeat("漢", 15), limit: 20,
			want: []string{"これはテストです。", strings.Repeat("漢", 15)}},
		{name: "emoji ZWJ sequences not split", text: strings.Repeat(family, 5), limit: 20,
			want: []string{family + family, family + family, family}},
		{name: "flags not split", text: strings.Repeat("🇯🇵", 11), limit: 21,
			want: []string{strings.Repeat("🇯🇵", 10), "🇯🇵"}},
		{name: "skin tones and combining marks not split", text: strings.Repeat("👍🏽", 6) + strings.Repeat("e\u0301", 6), limit: 21,
			want: []string{strings.Repeat("👍🏽", 6) + strings.Repeat("e\u0301", 4), strings.Repeat("e\u0301", 2)}},
		{name: "line longer than the limit", text: strings.Repeat("a", 50), limit: 20,
			want: []string{strings.Repeat("a", 20), strings.Repeat("a", 20), strings.Repeat("a", 10)}},
		{name: "code line longer than the limit", text: "```\n" + strings.Repeat("b", 50) + "\n```", limit: 20,
			check: func(t *testing.T, parts []string) {
				var code string
				for i, p := range parts {
					if !strings.HasPrefix(p, "```\n") || !strings.HasSuffix(p, "\n```") {
						t.Fatalf("part %d is not one block: %q", i, p)
					}
					code += strings.TrimSuffix(strings.TrimPrefix(p, "```\n"), "\n```")
				}
				if code != strings.Repeat("b", 50) {
					t.Errorf("code reassembles to %q", code)
				}
			}},
		{name: "Windows newlines", text: "para one\r\n\r\npara two\r\n```\r\ncode\r\n```\r\n", limit: 20,
			want: []string{"para one\r\n\r\npara two", "```\r\ncode\r\n```"}},
		{name: "Windows newlines in a cut fence", text: "```go\r\nline one\r\nline two\r\n```\r\n", limit: 20,
			want: []string{"```go\r\nline one\n```", "```go\nline two\r\n```"}},
		{name: "no fence made by a cut inside a line", text: strings.Repeat("a", 17) + " ```x y z", limit: 20,
			check: func(t *testing.T, parts []string) {
				for i, p := range parts[1:] {
					if strings.HasPrefix(p, "```") {
						t.Errorf("part %d starts with a fence it did not have: %q", i+1, p)
					}
				}
			}},
		{name: "limit below the minimum is raised", text: strings.Repeat("word ", 30), limit: 3,
			check: func(t *testing.T, parts []string) {
				if want := bot.Chunk(strings.Repeat("word ", 30), bot.MinLimit); !slices.Equal(parts, want) {
					t.Errorf("limit 3 gave %q, limit %d gave %q", parts, bot.MinLimit, want)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			parts := bot.Chunk(tc.text, tc.limit)
			checkChunks(t, tc.text, bot.Limits{Runes: tc.limit}, parts)
			if tc.check != nil {
				tc.check(t, parts)
				return
			}
			if !slices.Equal(parts, tc.want) {
				t.Errorf("Chunk(%q, %d) =\n%q\nwant\n%q", clip(tc.text), tc.limit, parts, tc.want)
			}
		})
	}
}

func TestChunkLimits(t *testing.T) {
	tests := []struct {
		name string
		text string
		lim  bot.Limits
		want []string
	}{
		{"bytes cap", strings.Repeat("é", 25), bot.Limits{Bytes: 20}, []string{strings.Repeat("é", 10), strings.Repeat("é", 10), strings.Repeat("é", 5)}},
		{"bytes tighter than runes", strings.Repeat("漢", 12), bot.Limits{Runes: 2000, Bytes: 21}, []string{strings.Repeat("漢", 7), strings.Repeat("漢", 5)}},
		{"runes tighter than bytes", strings.Repeat("ab ", 10), bot.Limits{Runes: 20, Bytes: 2000}, []string{"ab ab ab ab ab ab ab", "ab ab ab"}},
		{"no cap is one part", strings.Repeat("x", 100000) + "\n```\ny", bot.Limits{}, []string{strings.Repeat("x", 100000) + "\n```\ny\n```"}},
		{"bytes cap below the minimum is raised", strings.Repeat("a", 30), bot.Limits{Bytes: 1}, []string{strings.Repeat("a", 20), strings.Repeat("a", 10)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			parts := bot.ChunkLimits(tc.text, tc.lim)
			checkChunks(t, tc.text, tc.lim, parts)
			if !slices.Equal(parts, tc.want) {
				t.Errorf("ChunkLimits(%q, %+v) =\n%q\nwant\n%q", clip(tc.text), tc.lim, parts, tc.want)
			}
		})
	}
}

// discordAnswer is a 5,000-character answer of prose around a code block
// of codeLines lines, as a model writes them.
func discordAnswer(t *testing.T, codeLines int) (answer, block string) {
	t.Helper()
	para := "The build fails because the generated client is stale: the schema gained a field and the checked-in code still has the old shape, so the compiler rejects every call site that passes it. "
	var code strings.Builder
	code.WriteString("```go\n")
	for i := range codeLines {
		fmt.Fprintf(&code, "\tif err := client.Update(ctx, req%02d); err != nil { return err }\n", i)
	}
	code.WriteString("```")
	block = code.String()
	var b strings.Builder
	for b.Len() < 1700 {
		b.WriteString(para)
		b.WriteString("\n\n")
	}
	b.WriteString(block)
	b.WriteString("\n\n")
	for utf8.RuneCountInString(b.String()) < 5000-len(para)-2 {
		b.WriteString(para)
		b.WriteString("\n\n")
	}
	answer = b.String()
	answer += strings.Repeat("x", 5000-utf8.RuneCountInString(answer))
	if n := utf8.RuneCountInString(answer); n != 5000 {
		t.Fatalf("answer has %d characters, want 5000", n)
	}
	return answer, block
}

// TestChunkDiscordAnswer is the Discord scenario: a 5,000-character answer
// with a code block, at Discord's 2,000, is three messages with the code
// block intact.
func TestChunkDiscordAnswer(t *testing.T) {
	t.Run("block fits in a message", func(t *testing.T) {
		answer, block := discordAnswer(t, 20)
		parts := bot.Chunk(answer, 2000)
		checkChunks(t, answer, bot.Limits{Runes: 2000}, parts)
		if len(parts) != 3 {
			t.Fatalf("%d parts, want 3: %q", len(parts), parts)
		}
		whole := 0
		for _, p := range parts {
			if strings.Contains(p, block) {
				whole++
			}
		}
		if whole != 1 {
			t.Errorf("the code block is whole in %d parts, want 1", whole)
		}
	})
	t.Run("block longer than a message", func(t *testing.T) {
		answer, _ := discordAnswer(t, 36) // about 2,300 characters of code
		parts := bot.Chunk(answer, 2000)
		checkChunks(t, answer, bot.Limits{Runes: 2000}, parts)
		if len(parts) != 3 {
			t.Fatalf("%d parts, want 3: %q", len(parts), parts)
		}
		pieces := 0 // the block is cut once: opened in one part, reopened in the next
		for _, p := range parts {
			if strings.Contains(p, "```go\n") {
				pieces++
			}
		}
		if pieces != 2 {
			t.Errorf("%d parts hold pieces of the block, want 2", pieces)
			for i, p := range parts {
				t.Logf("part %d: %d runes: %q … %q", i, utf8.RuneCountInString(p), clip(p), p[max(0, len(p)-40):])
			}
		}
	})
}

// TestChunkProperties runs the contract over generated markdown: prose,
// lists, code spans, fences of every kind (some long, some left open),
// lines longer than the limit, CJK, emoji and CR LF.
func TestChunkProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		text := genMarkdown(rng)
		var lim bot.Limits
		switch rng.IntN(4) {
		case 0:
			lim.Runes = 20 + rng.IntN(20)
		case 1:
			lim.Runes = 20 + rng.IntN(400)
		case 2:
			lim.Runes = 20 + rng.IntN(4981)
		default:
			lim.Runes, lim.Bytes = 20+rng.IntN(200), 20+rng.IntN(200)
		}
		checkChunks(t, text, lim, bot.ChunkLimits(text, lim))
		tl := 1 + rng.IntN(60)
		if got := bot.Truncate(text, tl); !truncateOK(text, tl, got) {
			t.Fatalf("Truncate(%q, %d) = %q", text, tl, got)
		}
	}
}

func genMarkdown(rng *rand.Rand) string {
	words := []string{"the", "build", "fails", "because", "`go vet`", "`a b`", "漢字テスト", "👨\u200d👩\u200d👧", "🇯🇵", "e\u0301",
		"https://example.com/" + strings.Repeat("p", 30), "```", "~~~", "x```y", "\\`", "**bold**", "``", "\t", "é"}
	word := func() string {
		if rng.IntN(30) == 0 {
			return strings.Repeat(string(rune('a'+rng.IntN(26))), 1+rng.IntN(80))
		}
		return words[rng.IntN(len(words))]
	}
	line := func(n int) string {
		ws := make([]string, n)
		for i := range ws {
			ws[i] = word()
		}
		return strings.Join(ws, " ")
	}
	var b strings.Builder
	nl := "\n"
	if rng.IntN(5) == 0 {
		nl = "\r\n"
	}
	for range 1 + rng.IntN(12) {
		switch rng.IntN(6) {
		case 0, 1:
			for range 1 + rng.IntN(4) {
				b.WriteString(line(1 + rng.IntN(25)))
				b.WriteString(nl)
			}
		case 2:
			for range 1 + rng.IntN(5) {
				b.WriteString([]string{"- ", "1. ", "  - ", "> "}[rng.IntN(4)] + line(1+rng.IntN(8)) + nl)
			}
		default:
			ch := []string{"`", "~"}[rng.IntN(2)]
			fence := strings.Repeat(ch, 3+rng.IntN(3)*rng.IntN(4))
			info := []string{"", "go", "python title=\"x y\"", " sh ", strings.Repeat("i", rng.IntN(40))}[rng.IntN(5)]
			b.WriteString(strings.Repeat(" ", rng.IntN(2)*rng.IntN(4)) + fence + info + nl)
			for range rng.IntN(15) {
				switch rng.IntN(8) {
				case 0:
					b.WriteString("```" + nl) // shorter or other fence: code
				case 1:
					b.WriteString(nl)
				case 2:
					b.WriteString(fence + "x" + nl) // not a closing line
				default:
					b.WriteString(strings.Repeat("\t", rng.IntN(3)) + line(rng.IntN(12)) + nl)
				}
			}
			if rng.IntN(8) != 0 {
				b.WriteString(fence + strings.Repeat(ch, rng.IntN(2)) + strings.Repeat(" ", rng.IntN(2)) + nl)
			}
		}
		b.WriteString(strings.Repeat(nl, rng.IntN(3)))
	}
	return b.String()
}

// truncateOK checks Truncate's contract: text that fits comes back (less
// white space at its end), otherwise a prefix of text (less white space at
// the cut) plus "…" and a closing fence if the cut is inside a block, at
// most limit runes, with every code block closed.
func truncateOK(text string, limit int, got string) bool {
	if utf8.RuneCountInString(text) <= limit {
		return got == text
	}
	if t := strings.TrimRightFunc(text, unicode.IsSpace); utf8.RuneCountInString(t) <= limit {
		return got == t
	}
	if utf8.RuneCountInString(got) > limit {
		return false
	}
	i := strings.LastIndex(got, "…")
	if i < 0 {
		return false
	}
	head, tail := strings.TrimSuffix(got[:i], "\n"), got[i+len("…"):]
	if !strings.HasPrefix(text, head) {
		return false
	}
	if tail != "" && (tail[0] != '\n' || strings.Trim(tail[1:], "`~") != "") {
		return false
	}
	return balanced(got)
}

func TestCodeBlock(t *testing.T) {
	tests := []struct {
		name, body, lang, want string
	}{
		{"plain", "fmt.Println(1)", "go", "```go\nfmt.Println(1)\n```"},
		{"no language", "ls -l", "", "```\nls -l\n```"},
		{"trailing newline dropped", "a\nb\n", "sh", "```sh\na\nb\n```"},
		{"empty body", "", "go", "```go\n```"},
		{"body with a fence", "```go\nx\n```", "md", "````md\n```go\nx\n```\n````"},
		{"body with a longer run", "a ````` b", "", "``````\na ````` b\n``````"},
		{"language first word only", "x", "go run", "```go\nx\n```"},
		{"backticks dropped from language", "x", "g`o", "```go\nx\n```"},
		{"tilde fence in body", "~~~\nx", "", "```\n~~~\nx\n```"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := bot.CodeBlock(tc.body, tc.lang)
			if got != tc.want {
				t.Errorf("CodeBlock(%q, %q) = %q, want %q", tc.body, tc.lang, got, tc.want)
			}
			f := refFences(got, bot.Limits{})
			if len(f) != 1 || !f[0].closed || f[0].closeEnd != len(got) {
				t.Fatalf("CodeBlock(%q, %q) = %q does not read as one closed block", tc.body, tc.lang, got)
			}
			if code := strings.TrimSuffix(got[f[0].body:f[0].closeStart], "\n"); code != strings.TrimSuffix(tc.body, "\n") {
				t.Errorf("its code is %q, want %q", code, tc.body)
			}
		})
	}
}

func TestTruncate(t *testing.T) {
	family := "👨\u200d👩\u200d👧\u200d👦"
	tests := []struct {
		name  string
		text  string
		limit int
		want  string
	}{
		{"fits", "Hello", 5, "Hello"},
		{"fits with open fence", "```go\nx", 20, "```go\nx"},
		{"trailing space dropped to fit", "Hello   \n", 6, "Hello"},
		{"cut with ellipsis", "Hello, world", 8, "Hello,…"},
		{"cut mid word", "Supercalifragilistic", 6, "Super…"},
		{"emoji cluster not split", family + family, 10, family + "…"},
		{"cut inside a code block closes it", "```go\nfunc main() {}\n```", 15, "```go\nfunc…\n```"},
		{"not cut before any code", "Hi\n```go\nsome code\n```", 6, "Hi…"},
		{"not after a closing fence on its line", "```\nx\n```\nmore text here", 11, "```\nx\n```\n…"},
		{"cut inside a line never opens a block", "```a`b c d e f g", 8, "```a`b…"},
		{"limit one", "Hello", 1, "…"},
		{"limit zero", "Hello", 0, ""},
		{"CJK", "漢字漢字漢字", 4, "漢字漢…"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := bot.Truncate(tc.text, tc.limit)
			if got != tc.want {
				t.Errorf("Truncate(%q, %d) = %q, want %q", tc.text, tc.limit, got, tc.want)
			}
			if tc.limit > 0 && !truncateOK(tc.text, tc.limit, got) {
				t.Errorf("Truncate(%q, %d) = %q breaks the contract", tc.text, tc.limit, got)
			}
		})
	}
}

// FuzzChunk checks the contract of Chunk (and of ChunkLimits with a byte
// cap) for any text and limits from 20 to 5,000.
func FuzzChunk(f *testing.F) {
	seeds := []string{
		"",
		"Hello, world.",
		"One.\n\nTwo two.\n\nThree three three.\n\nFour.",
		"```go\na := 1\nb := 2\nc := 3\nd := 4\n```",
		"````md\n```go\nx := 1\n```\nmore\n````",
		"~~~\nline one\nline two\n~~~\n\n```\nunclosed",
		"para one\r\n\r\npara two\r\n```\r\ncode\r\n```\r\n",
		"run `go test ./...` now please and ``a ` b`` too",
		strings.Repeat("漢字", 30) + "。" + strings.Repeat("👨\u200d👩\u200d👧\u200d👦🇯🇵👍🏽e\u0301", 5),
		"aaaaaaaaaaaaaaaaa ```x y z\n```a`b\n~~~~x\n",
		"```" + strings.Repeat("i", 30) + "\ncode\n" + strings.Repeat("`", 12),
		"\xed\xa0\x80\xed\xb0\x80 invalid \xff\xfe utf-8",
		"```\f", // white space other than spaces after a fence
		"```000000000000000000000\n00          ```", // code ending in a fence-like run
	}
	for i, s := range seeds {
		f.Add(s, uint16(i*7), uint16(0))
		f.Add(s, uint16(i*131), uint16(i*29+1))
	}
	f.Fuzz(func(t *testing.T, text string, runes, bytes uint16) {
		lim := bot.Limits{Runes: 20 + int(runes)%4981}
		var parts []string
		if bytes == 0 {
			parts = bot.Chunk(text, lim.Runes)
		} else {
			lim.Bytes = 20 + int(bytes)%4981
			parts = bot.ChunkLimits(text, lim)
		}
		checkChunks(t, text, lim, parts)
		if got := bot.Truncate(text, lim.Runes/10); !truncateOK(text, lim.Runes/10, got) {
			t.Fatalf("Truncate(%q, %d) = %q", text, lim.Runes/10, got)
		}
	})
}

func BenchmarkChunk(b *testing.B) {
	answer := strings.Repeat("Some prose about the change, with `code` in it.\n\n```go\nfunc f() error {\n\treturn nil\n}\n```\n\n", 2000)
	b.SetBytes(int64(len(answer)))
	for b.Loop() {
		bot.Chunk(answer, 2000)
	}
}
