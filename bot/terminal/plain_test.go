package terminal_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
	"github.com/agentbot/agentbot/bot/terminal"
)

var plainCases = []struct {
	name, in, want string
}{
	// The bot's own texts (bot.Response.Text, the sessions' notices).
	{"status", "*first* — idle on `local` (sandbox `local-1a2b`)", "first — idle on local (sandbox local-1a2b)"},
	{"new session", "Session *fix the build* on `docker`. Tell me what to do.", "Session fix the build on docker. Tell me what to do."},
	{"thread link", `Forked into <thread:term:the-fork-0a1b2c> ("the fork") on local.`, `Forked into 'the-fork-0a1b2c' ("the fork") on local.`},
	{"thread link of another platform", "forked from <thread:slack:T1:C1:1.2>", "forked from 'slack:T1:C1:1.2'"},
	{"mentions", "owner <@tester>, <@U1|alice> in <#C1|general>, <!here>", "owner @tester, @alice in #general, @here"},
	{"url with text", "Open <https://example.com/a_b|the docs> now", "Open the docs (https://example.com/a_b) now"},
	{"bare url in brackets", "UI: <http://localhost:8233/namespaces/default>", "UI: http://localhost:8233/namespaces/default"},
	{"bullets stay", "• shell: ls (done)\n• write_file: a.txt (pending)", "• shell: ls (done)\n• write_file: a.txt (pending)"},
	{"footer", "Page 1 of 2 — `list --page 2` for more.", "Page 1 of 2 — list --page 2 for more."},
	{"audit line", "• #3 2025-06-10 12:00:00Z <@U1> `switch` docker in <thread:term:main> — done", "• #3 2025-06-10 12:00:00Z @U1 switch docker in 'main' — done"},

	// The model's Markdown.
	{"strong and emphasis", "**Done.** The *tests* pass, _all_ of them, ***really***.", "Done. The tests pass, all of them, really."},
	{"strong with underscores", "__Note__: it works", "Note: it works"},
	{"markdown link", "See [the guide](https://go.dev/doc/a_b_c) and [https://x.org](https://x.org).", "See the guide (https://go.dev/doc/a_b_c) and https://x.org."},
	{"link with parentheses and code", "[`Foo`](https://en.wikipedia.org/wiki/Foo_(bar))", "Foo (https://en.wikipedia.org/wiki/Foo_(bar))"},
	{"image", "![the plot](plot.png)", "the plot (plot.png)"},
	{"headings", "# Plan\n## Step *one* ##\n#hashtag\n#!/bin/sh\n####### seven", "Plan\nStep one\n#hashtag\n#!/bin/sh\n####### seven"},
	{"fenced code", "Run:\n```sh\ngo test ./... # *all*\n\n  echo `date`\n```\nthen look.", "Run:\n    go test ./... # *all*\n\n      echo `date`\nthen look."},
	{"tilde fence and indented fence", "1. Build:\n   ~~~\n   make **all**\n   ~~~", "1. Build:\n    make **all**"},
	{"unclosed fence runs to the end", "```\nx := *p\n__y__", "    x := *p\n    __y__"},
	{"inline triple backticks", "```x := 1```", "x := 1"},

	// What is not markup stays.
	{"markup inside a code span", "use `*` or `a*b*c` or `__init__`", "use * or a*b*c or __init__"},
	{"backtick inside a code span", "`` `x` `` and ``a`b``", "`x` and a`b"},
	{"snake case", "snake_case_name, _private_var and MAX_SIZE_", "snake_case_name, _private_var and MAX_SIZE_"},
	{"math", "2*3*4 = 24, 2 * 3 * 4, 2*(3+4)*5, a**2", "2*3*4 = 24, 2 * 3 * 4, 2*(3+4)*5, a**2"},
	{"paths", "/tmp/_cache_/x, __init__.py, src/**/*.go, *.txt, C:\\_a_\\b", "/tmp/_cache_/x, __init__.py, src/**/*.go, *.txt, C:\\_a_\\b"},
	{"urls with underscores", "https://x.com/_a_/b_c_ and *https://y.org/x_y*.", "https://x.com/_a_/b_c_ and https://y.org/x_y."},
	{"url ending a sentence", "(see https://x.com/a_(b)_c_).", "(see https://x.com/a_(b)_c_)."},
	{"list markers", "* item\n- * star\n* * *\n***", "* item\n- * star\n* * *\n***"},
	{"unmatched delimiters", "a * b, *open only, **x*", "a * b, *open only, *x"},
	{"italic of an identifier stays", "_my_var_ and *my_var*", "_my_var_ and my_var"},
	{"escapes", `\*not bold\* and *a \* b*`, `\*not bold\* and a \* b`},
	{"nested", "*bold _and it_ and `*code*`*", "bold and it and *code*"},
	{"overlapping", "*a _b* c_", "a _b c_"},
	{"intraword emphasis stays", "foo*bar*baz and un_frigging_believable", "foo*bar*baz and un_frigging_believable"},
	{"not links", "a < b > c, Vec<T>, <div>, <!-- x -->, <mailbox@x.com>, [x] done, [a](b c)", "a < b > c, Vec<T>, <div>, <!-- x -->, <mailbox@x.com>, [x] done, [a](b c)"},
	{"strike stays", "a ~~wrong~~ right, ~x~", "a ~~wrong~~ right, ~x~"},
	{"unicode", "*héllo wörld* — 这是**重要**的 — _日本語_ — **🚀 launch**", "héllo wörld — 这是重要的 — 日本語 — 🚀 launch"},
	{"crlf", "*a*\r\n# b\r\n", "a\r\nb\n"},
	{"empty", "", ""},
}

func TestPlain(t *testing.T) {
	for _, tc := range plainCases {
		t.Run(tc.name, func(t *testing.T) {
			if got := terminal.Plain(tc.in); got != tc.want {
				t.Errorf("Plain(%q)\n got %q\nwant %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestPlainTree: /list in the terminal is the router's fork tree
// (bot.TreeText, the answer of /list on every platform) through Plain:
// forks indented under their parents, each with its thread's name (what
// /use takes), title, state, backend, owner, creation and last activity,
// and no markup.
func TestPlainTree(t *testing.T) {
	now := time.Date(2025, 6, 10, 12, 0, 0, 0, time.UTC)
	entries := []agentflow.SessionEntry{
		{ThreadKey: "term:the-fork-0a1b2c", Title: "the fork", Backend: "local", Parent: "term:main", Requester: "tester",
			Status: agentflow.StatusIdle, Created: now.Add(-time.Minute), Updated: now.Add(-30 * time.Second)},
		{ThreadKey: "term:main", Title: "first", Backend: "local", Requester: "tester", Status: agentflow.StatusIdle,
			Created: now.Add(-time.Hour), Updated: now.Add(-5 * time.Minute)},
		{ThreadKey: "term:deep", Title: "snake_case *title*", Backend: "docker", Parent: "term:the-fork-0a1b2c",
			Status: agentflow.StatusPaused, Created: now.Add(-30 * time.Second)},
		{ThreadKey: "term:other", Title: "second", Backend: "local", Requester: "tester", Status: agentflow.StatusRunning,
			Created: now.Add(-10 * time.Minute)},
	}
	got := terminal.Plain(bot.TreeText(entries, bot.TreeOptions{Now: now, Heading: "Sessions in this channel"}))
	want := strings.Join([]string{
		"Sessions in this channel",
		"'main' first — idle on local, owner @tester, created 2025-06-10, active 5m ago",
		"└─ 'the-fork-0a1b2c' the fork — idle on local, owner @tester, created 2025-06-10, active just now",
		"   └─ 'deep' snake_case title — paused on docker, owner —, created 2025-06-10, active just now",
		"'other' second — running on local, owner @tester, created 2025-06-10, active 10m ago",
	}, "\n")
	if got != want {
		t.Errorf("the terminal's /list:\n%s\nwant:\n%s", got, want)
	}
}

// TestSenderPrintsPlain: what the sessions post reaches the terminal
// without markup: answers (Markdown), notices (the bot's markup, thread
// links); progress lines print a tool's command as it is, backticks and
// all, since it is not markup.
func TestSenderPrintsPlain(t *testing.T) {
	var out strings.Builder
	s := terminal.NewSender(&out)
	ctx := context.Background()
	for _, m := range []agentflow.Outbound{
		{Thread: "term:main", Key: "p", Kind: agentflow.OutboundProgress,
			Tools: []agentflow.ToolStatus{{ID: "1", Summary: "shell: echo `date` *.go", State: "done", Detail: "exit 0"}}},
		{Thread: "term:main", Key: "a", Kind: agentflow.OutboundAnswer,
			Text: agentflow.Text{Inline: "**Done**: see [the log](https://x.org/a_b) and `main.go`."}},
		{Thread: "term:main", Key: "c", Kind: agentflow.OutboundAnswer, Text: agentflow.Text{Inline: "```go\nx := *p\n```"}},
		{Thread: "term:main", Key: "n", Kind: agentflow.OutboundNotice,
			Text: agentflow.Text{Inline: `Forked into <thread:term:f-1a2b3c> ("*f*") on local.`}},
	} {
		if err := s.Deliver(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	want := "[main] · shell: echo `date` *.go (done: exit 0)\n" +
		"[main] agent: Done: see the log (https://x.org/a_b) and main.go.\n" +
		"[main] agent:\n    x := *p\n" +
		"[main] * Forked into 'f-1a2b3c' (\"f\") on local.\n"
	if got := out.String(); got != want {
		t.Errorf("the terminal shows:\n%s\nwant:\n%s", got, want)
	}
}

// FuzzPlain: Plain never panics; it adds at most four bytes a line (the
// indentation of code); without fences it keeps every line; and where
// there are no links and no fences, it only ever removes markup
// characters (delimiters, backticks, heading hashes, blanks next to
// them), so no word is lost.
func FuzzPlain(f *testing.F) {
	for _, tc := range plainCases {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := terminal.Plain(in)
		if limit := len(in) + 4*strings.Count(in, "\n"); len(out) > limit {
			t.Fatalf("Plain(%q) = %q: %d bytes, more than %d", in, out, len(out), limit)
		}
		if strings.Contains(in, "```") || strings.Contains(in, "~~~") {
			return
		}
		if a, b := strings.Count(in, "\n"), strings.Count(out, "\n"); a != b {
			t.Fatalf("Plain(%q) = %q: %d lines, was %d", in, out, b+1, a+1)
		}
		if strings.Contains(in, "<") || strings.Contains(in, "](") {
			return
		}
		if a, b := unmarked(in), unmarked(out); a != b {
			t.Fatalf("Plain(%q) = %q lost more than markup: %q, was %q", in, out, b, a)
		}
	})
}

// unmarked is s without what Plain may drop of text with no links or
// fences.
// Bytes, not runes: a byte of invalid UTF-8 stays itself.
func unmarked(s string) string {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if strings.IndexByte("*_`# \t\r", s[i]) < 0 {
			b = append(b, s[i])
		}
	}
	return string(b)
}
