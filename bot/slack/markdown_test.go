package slackbot

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestToMrkdwn(t *testing.T) {
	link := func(key string) string { return "<https://fake.slack.com/x|thread>" }
	cases := []struct{ name, in, want string }{
		{"plain", "hello world", "hello world"},
		{"bold stars", "a **bold** word", "a *bold* word"},
		{"bold underscores", "a __bold__ word", "a *bold* word"},
		{"italic star", "an *italic* word", "an _italic_ word"},
		{"italic underscore", "an _italic_ word", "an _italic_ word"},
		{"bold italic", "***both***", "*_both_*"},
		{"strike", "~~gone~~ now", "~gone~ now"},
		{"single tilde kept", "about ~5 minutes", "about ~5 minutes"},
		{"snake case kept", "call snake_case_name()", "call snake_case_name()"},
		{"lone stars kept", "2 * 3 * 4", "2 * 3 * 4"},
		{"nested bold in italic", "_very **much** so_", "_very *much* so_"},
		{"link", "see [the docs](https://example.com/a?b=1&c=2)", "see <https://example.com/a?b=1&amp;c=2|the docs>"},
		{"link label formatting dropped", "[**Go** `pkg`](https://go.dev)", "<https://go.dev|Go pkg>"},
		{"relative link as text", "[file](./main.go)", "file (./main.go)"},
		{"image", "![diagram](https://x.io/d.png)", "<https://x.io/d.png|diagram>"},
		{"autolink", "<https://example.com>", "<https://example.com>"},
		{"angle text escaped", "use <backend> & more > less", "use &lt;backend&gt; &amp; more &gt; less"},
		{"channel ping escaped", "<!channel> hi", "&lt;!channel&gt; hi"},
		{"thread token", "see <thread:slack:T1:C1:1.2>", "see <https://fake.slack.com/x|thread>"},
		{"code span kept", "run `go test ./... **x**`", "run `go test ./... **x**`"},
		{"code span escaped", "`a < b && c`", "`a &lt; b &amp;&amp; c`"},
		{"double backtick span", "``a `b` c``", "`a 'b' c`"},
		{"unclosed backtick", "a ` b", "a ` b"},
		{"heading", "# Title", "*Title*"},
		{"heading with bold", "## The **big** plan ##", "*The big plan*"},
		{"hash without space kept", "#hashtag", "#hashtag"},
		{"bullets", "- one\n* two\n+ three", "• one\n• two\n• three"},
		{"nested bullets", "- one\n  - two", "• one\n  • two"},
		{"numbered kept", "1. first\n2. **second**", "1. first\n2. *second*"},
		{"task list", "- [ ] todo\n- [x] done", "☐ todo\n☑ done"},
		{"quote", "> quoted **text**", "> quoted *text*"},
		{"rule", "---", "──────────"},
		{"fence", "```go\nx := a < b && c\n**not bold**\n```", "```\nx := a &lt; b &amp;&amp; c\n**not bold**\n```"},
		{"tilde fence", "~~~\ncode\n~~~", "```\ncode\n```"},
		{"unclosed fence", "```\ncode", "```\ncode\n```"},
		{"fence with backticks inside", "````\n```\n````", "```\n``\u200b`\n```"},
		{"table", "| a | bb |\n|---|:--:|\n| ccc | d |", "```\na   | bb\n----+---\nccc | d\n```"},
		{"backslash escape", `\*not italic\*`, "*not italic*"},
		{"emphasis not across code", "*a `b*` c", "*a `b*` c"},
		{"crlf", "**a**\r\nb", "*a*\nb"},
	}
	if len(cases) < 25 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := toMrkdwn(tc.in, link); got != tc.want {
				t.Errorf("toMrkdwn(%q)\n got %q\nwant %q", tc.in, got, tc.want)
			}
		})
	}
}

// FuzzToMrkdwn: the converter never panics, keeps valid UTF-8 valid, and a
// fenced code block survives as a Slack code block with its lines escaped.
func FuzzToMrkdwn(f *testing.F) {
	f.Add("**b** _i_ ~~s~~ [t](https://x.y) `c`", "x := 1")
	f.Add("# h\n- a\n| a | b |\n|---|---|\n| 1 | 2 |", "a < b")
	f.Add("***_*_**~~~", "")
	f.Add("<thread:slack:T:C:1.2> <https://a> <b", "```")
	f.Fuzz(func(t *testing.T, rest, code string) {
		// A code body whose lines cannot close the fence.
		var lines []string
		for _, l := range strings.Split(code, "\n") {
			l = strings.TrimRight(strings.NewReplacer("`", "", "~", "", "\r", "").Replace(l), " ")
			lines = append(lines, l)
		}
		body := strings.Join(lines, "\n")
		in := "```sh\n" + body + "\n```\n" + rest
		out := toMrkdwn(in, func(key string) string { return "<x|thread>" })
		if utf8.ValidString(in) && !utf8.ValidString(out) {
			t.Fatalf("valid input gave invalid UTF-8: %q", out)
		}
		want := "```\n" + Escape(body) + "\n```"
		if body == "" {
			want = "```\n```"
		}
		if !strings.HasPrefix(out, want) {
			t.Fatalf("code block lost:\n in %q\nout %q\nwant prefix %q", in, out, want)
		}
		_ = toMrkdwn(rest, nil)
	})
}
