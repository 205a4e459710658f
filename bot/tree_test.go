package bot_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
)

var treeNow = time.Date(2025, 6, 10, 12, 0, 0, 0, time.UTC)

func day(d, h int) time.Time { return time.Date(2025, 6, d, h, 0, 0, 0, time.UTC) }

func TestTreeText(t *testing.T) {
	// In no particular order: TreeText orders by creation.
	entries := []agentflow.SessionEntry{
		{ThreadKey: "t:rest", Title: "try rest", Backend: "local", Parent: "t:api", Status: agentflow.StatusPaused,
			Created: day(4, 9), Updated: day(4, 13)},
		{ThreadKey: "t:stream", Title: "grpc streaming", Backend: "e2b", Parent: "t:grpc", Requester: "U2",
			Status: agentflow.StatusIdle, Created: day(8, 12)},
		{ThreadKey: "t:api", Title: "api rewrite", Backend: "docker", Requester: "U1", Status: agentflow.StatusIdle,
			Created: day(1, 9), Updated: treeNow.Add(-5 * time.Minute)},
		{ThreadKey: "t:grpc", Title: "try grpc", Backend: "e2b", Parent: "t:api", Requester: "U2",
			Status: agentflow.StatusRunning, Created: day(2, 9), Updated: treeNow.Add(-3*time.Hour - 59*time.Minute)},
		{ThreadKey: "t:rest2", Title: "rest v2", Backend: "local", Parent: "t:rest", Requester: "U1",
			Status: agentflow.StatusIdle, Created: day(5, 9), Updated: treeNow.Add(-30 * time.Second)},
		{ThreadKey: "t:docs", Title: "docs", Backend: "daytona", Requester: "U1", Status: agentflow.StatusDestroyed,
			Created: time.Date(2025, 5, 20, 8, 0, 0, 0, time.UTC), Updated: time.Date(2025, 5, 25, 8, 0, 0, 0, time.UTC)},
	}
	orig := append([]agentflow.SessionEntry(nil), entries...)
	want := strings.Join([]string{
		"Sessions in this channel",
		"<thread:t:docs> *docs* — destroyed on `daytona`, owner <@U1>, created 2025-05-20, active 2025-05-25",
		"<thread:t:api> *api rewrite* — idle on `docker`, owner <@U1>, created 2025-06-01, active 5m ago",
		"├─ <thread:t:grpc> *try grpc* — running on `e2b`, owner <@U2>, created 2025-06-02, active 3h ago",
		"│  └─ <thread:t:stream> *grpc streaming* — idle on `e2b`, owner <@U2>, created 2025-06-08, active 2d ago",
		"└─ <thread:t:rest> *try rest* — paused on `local`, owner —, created 2025-06-04, active 5d ago",
		"   └─ <thread:t:rest2> *rest v2* — idle on `local`, owner <@U1>, created 2025-06-05, active just now",
	}, "\n")
	got := bot.TreeText(entries, bot.TreeOptions{Now: treeNow, Heading: "Sessions in this channel"})
	if got != want {
		t.Errorf("TreeText:\n%s\nwant:\n%s", got, want)
	}
	for i := range entries {
		if entries[i] != orig[i] {
			t.Fatalf("TreeText changed entry %d: %+v, was %+v", i, entries[i], orig[i])
		}
	}

	t.Run("mention", func(t *testing.T) {
		got := bot.TreeText(entries[2:3], bot.TreeOptions{Now: treeNow, Mention: func(id string) string { return "@" + id + "!" }})
		const want = "<thread:t:api> *api rewrite* — idle on `docker`, owner @U1!, created 2025-06-01, active 5m ago"
		if got != want {
			t.Errorf("TreeText = %q, want %q", got, want)
		}
	})
	t.Run("no owner is not mentioned", func(t *testing.T) {
		got := bot.TreeText(entries[:1], bot.TreeOptions{Now: treeNow, Mention: func(id string) string {
			t.Errorf("Mention(%q) called for a session without an owner", id)
			return id
		}})
		if !strings.Contains(got, "owner —,") {
			t.Errorf("TreeText = %q, want owner —", got)
		}
	})
}

func TestTreeTextEmpty(t *testing.T) {
	for _, entries := range [][]agentflow.SessionEntry{nil, {}} {
		if got := bot.TreeText(entries, bot.TreeOptions{Heading: "Sessions", Page: 3}); got != "No sessions yet." {
			t.Errorf("TreeText(%v) = %q, want No sessions yet.", entries, got)
		}
	}
}

// forest makes 25 sessions: 5 roots r<i>, each with forks r<i>.0, r<i>.1
// and r<i>.2, and r<i>.1 with a fork r<i>.1.0; in no particular order, so
// the depth-first order is r<i>, r<i>.0, r<i>.1, r<i>.1.0, r<i>.2.
func forest() []agentflow.SessionEntry {
	var es []agentflow.SessionEntry
	add := func(key, parent string, created time.Time) {
		es = append(es, agentflow.SessionEntry{ThreadKey: key, Title: key, Backend: "local", Parent: parent,
			Status: agentflow.StatusIdle, Created: created})
	}
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 5 {
		r := fmt.Sprintf("r%d", i)
		at := base.Add(time.Duration(i) * time.Hour)
		add(r, "", at)
		add(r+".2", r, at.Add(3*time.Minute))
		add(r+".1.0", r+".1", at.Add(4*time.Minute))
		add(r+".1", r, at.Add(2*time.Minute))
		add(r+".0", r, at.Add(1*time.Minute))
	}
	return es
}

// keysOf returns the thread key on each session line of a tree, with its
// glyphs, skipping heading and footer.
func keysOf(text string) []string {
	var keys []string
	for _, l := range strings.Split(text, "\n") {
		before, rest, ok := strings.Cut(l, "<thread:")
		if !ok {
			continue
		}
		key, _, _ := strings.Cut(rest, ">")
		keys = append(keys, before+key)
	}
	return keys
}

func TestTreeTextPages(t *testing.T) {
	es := forest()
	all := keysOf(bot.TreeText(es, bot.TreeOptions{Now: treeNow, PageSize: 100}))
	wantStart := []string{"r0", "├─ r0.0", "├─ r0.1", "│  └─ r0.1.0", "└─ r0.2", "r1"}
	if len(all) != 25 || strings.Join(all[:6], "|") != strings.Join(wantStart, "|") {
		t.Fatalf("one page of everything: %d lines starting %q, want 25 starting %q", len(all), all[:min(6, len(all))], wantStart)
	}

	tests := []struct {
		name       string
		o          bot.TreeOptions
		first      string // the first session line, glyphs included
		lines      int
		lastLine   string // the footer, or the last session's key
		exactWhole string // when set, the whole text
	}{
		{name: "default size, first page", o: bot.TreeOptions{},
			first: "r0", lines: 20, lastLine: "Page 1 of 2 — `list --page 2` for more."},
		{name: "page 0 is page 1", o: bot.TreeOptions{Page: 0, PageSize: 10},
			first: "r0", lines: 10, lastLine: "Page 1 of 3 — `list --page 2` for more."},
		{name: "default size, last page", o: bot.TreeOptions{Page: 2},
			first: "r4", lines: 5, lastLine: "Page 2 of 2."},
		{name: "a page starts inside a subtree", o: bot.TreeOptions{Page: 2, PageSize: 7, More: "list --mine"},
			first: "├─ r1.1", lines: 7, lastLine: "Page 2 of 4 — `list --mine --page 3` for more."},
		{name: "scope in the footer", o: bot.TreeOptions{Page: 1, PageSize: 10, More: "list --all"},
			first: "r0", lines: 10, lastLine: "Page 1 of 3 — `list --all --page 2` for more."},
		{name: "last page of three", o: bot.TreeOptions{Page: 3, PageSize: 10},
			first: "r4", lines: 5, lastLine: "Page 3 of 3."},
		{name: "one page, no footer", o: bot.TreeOptions{PageSize: 25},
			first: "r0", lines: 25, lastLine: "r4.2"},
		{name: "past the end", o: bot.TreeOptions{Page: 4, PageSize: 10, Heading: "Sessions"},
			exactWhole: "No page 4: there are 3."},
		{name: "past the only page", o: bot.TreeOptions{Page: 2, PageSize: 25},
			exactWhole: "No page 2: there is 1."},
		{name: "far past the end", o: bot.TreeOptions{Page: int(^uint(0) >> 1), PageSize: 10},
			exactWhole: fmt.Sprintf("No page %d: there are 3.", int(^uint(0)>>1))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.o.Now = treeNow
			got := bot.TreeText(es, tt.o)
			if tt.exactWhole != "" {
				if got != tt.exactWhole {
					t.Errorf("TreeText = %q, want %q", got, tt.exactWhole)
				}
				return
			}
			keys := keysOf(got)
			if len(keys) != tt.lines || keys[0] != tt.first {
				t.Errorf("page has %d sessions starting %q, want %d starting %q:\n%s", len(keys), keys[0], tt.lines, tt.first, got)
			}
			lines := strings.Split(got, "\n")
			last := lines[len(lines)-1]
			if k := keysOf(last); len(k) == 1 {
				last = strings.TrimLeft(k[0], "├└│─ ")
			}
			if last != tt.lastLine {
				t.Errorf("last line %q, want %q", last, tt.lastLine)
			}
		})
	}

	t.Run("pages put together are the whole tree", func(t *testing.T) {
		for _, size := range []int{1, 3, 7, 24, 25} {
			var joined []string
			for p := 1; ; p++ {
				text := bot.TreeText(es, bot.TreeOptions{Now: treeNow, Page: p, PageSize: size, Heading: "H"})
				if strings.HasPrefix(text, "No page") {
					break
				}
				if !strings.HasPrefix(text, "H\n") {
					t.Fatalf("size %d page %d has no heading:\n%s", size, p, text)
				}
				joined = append(joined, keysOf(text)...)
			}
			if strings.Join(joined, "|") != strings.Join(all, "|") {
				t.Errorf("size %d: pages give %q, want %q", size, joined, all)
			}
		}
	})
}

func TestTreeTextBrokenParents(t *testing.T) {
	mk := func(key, parent string, hour int) agentflow.SessionEntry {
		return agentflow.SessionEntry{ThreadKey: key, Title: key, Backend: "local", Parent: parent,
			Status: agentflow.StatusIdle, Created: day(9, hour)}
	}
	tests := []struct {
		name    string
		entries []agentflow.SessionEntry
		want    []string
	}{
		{"two-cycle: both roots, a fork of one under it",
			[]agentflow.SessionEntry{mk("b", "a", 2), mk("a", "b", 1), mk("c", "a", 3)},
			[]string{"a", "└─ c", "b"}},
		{"three-cycle with a tail into it",
			[]agentflow.SessionEntry{mk("x", "z", 1), mk("y", "x", 2), mk("z", "y", 3), mk("tail", "y", 4), mk("tip", "tail", 5)},
			[]string{"x", "y", "└─ tail", "   └─ tip", "z"}},
		{"own parent", []agentflow.SessionEntry{mk("self", "self", 1), mk("kid", "self", 2)},
			[]string{"self", "└─ kid"}},
		{"orphan: parent not listed is a root",
			[]agentflow.SessionEntry{mk("fork", "gone", 1), mk("root", "", 2), mk("forkfork", "fork", 3)},
			[]string{"fork", "└─ forkfork", "root"}},
		{"destroyed parent still holds its forks",
			[]agentflow.SessionEntry{{ThreadKey: "p", Title: "p", Status: agentflow.StatusDestroyed, Created: day(9, 1)},
				mk("k", "p", 2)},
			[]string{"p", "└─ k"}},
		{"same creation time: by thread key",
			[]agentflow.SessionEntry{mk("n2", "", 1), mk("n1", "", 1)},
			[]string{"n1", "n2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := keysOf(bot.TreeText(tt.entries, bot.TreeOptions{Now: treeNow}))
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("tree %q, want %q", got, tt.want)
			}
		})
	}
}

func TestTreeTextTimes(t *testing.T) {
	created := time.Date(2025, 5, 1, 5, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		now     time.Time
		updated time.Time
		want    string // the line's end: created and active
	}{
		{"just now", treeNow, treeNow, "created 2025-05-01, active just now"},
		{"59 seconds", treeNow, treeNow.Add(-59 * time.Second), "active just now"},
		{"a clock ahead", treeNow, treeNow.Add(time.Hour), "active just now"},
		{"one minute", treeNow, treeNow.Add(-time.Minute), "active 1m ago"},
		{"59 minutes", treeNow, treeNow.Add(-59*time.Minute - 59*time.Second), "active 59m ago"},
		{"one hour", treeNow, treeNow.Add(-time.Hour), "active 1h ago"},
		{"23 hours", treeNow, treeNow.Add(-24*time.Hour + time.Second), "active 23h ago"},
		{"one day", treeNow, treeNow.Add(-24 * time.Hour), "active 1d ago"},
		{"six days", treeNow, treeNow.Add(-7*24*time.Hour + time.Second), "active 6d ago"},
		{"a week is a date", treeNow, treeNow.Add(-7 * 24 * time.Hour), "active 2025-06-03"},
		{"no update: created", treeNow, time.Time{}, "created 2025-05-01, active 2025-05-01"},
		{"no now: dates only", time.Time{}, treeNow.Add(-5 * time.Minute), "created 2025-05-01, active 2025-06-10"},
		{"dates in now's zone", treeNow.In(time.FixedZone("HST", -10*3600)), time.Time{},
			"created 2025-04-30, active 2025-04-30"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := agentflow.SessionEntry{ThreadKey: "t", Title: "x", Backend: "local", Status: agentflow.StatusIdle,
				Created: created, Updated: tt.updated}
			got := bot.TreeText([]agentflow.SessionEntry{e}, bot.TreeOptions{Now: tt.now})
			if !strings.HasSuffix(got, tt.want) {
				t.Errorf("TreeText = %q, want it to end %q", got, tt.want)
			}
		})
	}
	t.Run("no times at all", func(t *testing.T) {
		got := bot.TreeText([]agentflow.SessionEntry{{ThreadKey: "t", Status: agentflow.StatusIdle, Backend: "local"}},
			bot.TreeOptions{Now: treeNow})
		const want = "<thread:t> *(untitled)* — idle on `local`, owner —, created —, active —"
		if got != want {
			t.Errorf("TreeText = %q, want %q", got, want)
		}
	})
}
