package bot

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentbot/agentbot/agentflow"
)

// DefaultTreePageSize is how many sessions a page of TreeText shows when
// TreeOptions.PageSize is not set.
const DefaultTreePageSize = 20

// TreeOptions says how TreeText renders sessions. The zero value renders
// the first page of DefaultTreePageSize sessions, with dates only.
type TreeOptions struct {
	// Now is what relative times ("5m ago") count from, and its location
	// is the one dates are written in. Zero: dates only, in UTC.
	Now time.Time
	// Page is the page to render, from 1; 0 (or less) is the first.
	Page int
	// PageSize is how many sessions a page shows; 0 (or less):
	// DefaultTreePageSize.
	PageSize int
	// Mention renders a session's owner from their platform user ID. Nil:
	// "<@ID>", which Slack and Discord both read as a mention.
	Mention func(id string) string
	// Heading is the first line of every page, when not empty.
	Heading string
	// More is the command that gives these sessions, which the footer
	// extends with "--page N" ("list --mine"). Empty: "list".
	More string
}

// TreeText renders sessions as a tree of forks, one line per session: the
// roots (sessions whose Parent is empty or not among entries) oldest
// first, each followed by its forks, oldest first, indented under it with
// tree glyphs, depth first. A line gives the thread's link
// (agentflow.LinkThread), the title, the status, the backend, the owner,
// when the session was created and when it was last active (Updated, or
// Created when Updated is zero).
//
// Pages cut the depth-first list of lines, o.PageSize lines each; every
// line keeps its indentation, so a page may start inside a subtree. A
// footer tells how to get the next page. Sessions whose parents form a
// cycle (which only corrupt data can make) are shown as roots. TreeText
// does not modify entries.
func TreeText(entries []agentflow.SessionEntry, o TreeOptions) string {
	if len(entries) == 0 {
		return "No sessions yet."
	}
	size := o.PageSize
	if size <= 0 {
		size = DefaultTreePageSize
	}
	page := max(o.Page, 1)
	rows := treeRows(entries)
	pages := (len(rows) + size - 1) / size
	if page > pages {
		if pages == 1 {
			return fmt.Sprintf("No page %d: there is 1.", page)
		}
		return fmt.Sprintf("No page %d: there are %d.", page, pages)
	}
	var b strings.Builder
	if o.Heading != "" {
		b.WriteString(o.Heading + "\n")
	}
	start := (page - 1) * size
	for _, r := range rows[start:min(start+size, len(rows))] {
		b.WriteString(r.prefix + treeLine(entries[r.entry], o) + "\n")
	}
	switch {
	case page < pages:
		more := strings.TrimSpace(o.More)
		if more == "" {
			more = string(VerbList)
		}
		fmt.Fprintf(&b, "Page %d of %d — `%s --page %d` for more.", page, pages, more, page+1)
	case pages > 1:
		fmt.Fprintf(&b, "Page %d of %d.", page, pages)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// treeRow is one line of the tree: which entry, after which glyphs.
type treeRow struct {
	entry  int
	prefix string
}

// treeRows orders entries depth first, forks under their parents.
func treeRows(entries []agentflow.SessionEntry) []treeRow {
	n := len(entries)
	index := make(map[string]int, n) // the first entry of each thread
	for i, e := range entries {
		if _, dup := index[e.ThreadKey]; !dup {
			index[e.ThreadKey] = i
		}
	}
	parent := make([]int, n)
	for i, e := range entries {
		parent[i] = -1
		if p, ok := index[e.Parent]; ok && e.Parent != "" && p != i {
			parent[i] = p
		}
	}
	breakCycles(parent)

	kids := make([][]int, n)
	var roots []int
	for i, p := range parent {
		if p < 0 {
			roots = append(roots, i)
		} else {
			kids[p] = append(kids[p], i)
		}
	}
	// Oldest first; the thread key, then the input order, break ties so
	// that the same sessions always render the same.
	byCreated := func(a, b int) int {
		return cmp.Or(entries[a].Created.Compare(entries[b].Created),
			strings.Compare(entries[a].ThreadKey, entries[b].ThreadKey), cmp.Compare(a, b))
	}
	slices.SortFunc(roots, byCreated)
	for _, k := range kids {
		slices.SortFunc(k, byCreated)
	}

	rows := make([]treeRow, 0, n)
	var walk func(i int, prefix, indent string)
	walk = func(i int, prefix, indent string) {
		rows = append(rows, treeRow{entry: i, prefix: prefix})
		for j, k := range kids[i] {
			if j == len(kids[i])-1 {
				walk(k, indent+"└─ ", indent+"   ")
			} else {
				walk(k, indent+"├─ ", indent+"│  ")
			}
		}
	}
	for _, r := range roots {
		walk(r, "", "")
	}
	return rows
}

// breakCycles makes every entry on a cycle of parents a root, in one pass:
// each entry is walked up from once.
func breakCycles(parent []int) {
	const (
		unseen = iota
		onPath
		done
	)
	state := make([]uint8, len(parent))
	var path []int
	for i := range parent {
		path = path[:0]
		j := i
		for j >= 0 && state[j] == unseen {
			state[j] = onPath
			path = append(path, j)
			j = parent[j]
		}
		if j >= 0 && state[j] == onPath { // the walk came back to itself
			for _, c := range path[slices.Index(path, j):] {
				parent[c] = -1
			}
		}
		for _, c := range path {
			state[c] = done
		}
	}
}

// treeLine renders one session, without its glyphs.
func treeLine(e agentflow.SessionEntry, o TreeOptions) string {
	owner := "—"
	if e.Requester != "" {
		if o.Mention != nil {
			owner = o.Mention(e.Requester)
		} else {
			owner = "<@" + e.Requester + ">"
		}
	}
	title := e.Title
	if title == "" {
		title = "(untitled)"
	}
	active := e.Updated
	if active.IsZero() {
		active = e.Created
	}
	return fmt.Sprintf("%s *%s* — %s on `%s`, owner %s, created %s, active %s",
		agentflow.LinkThread(e.ThreadKey), title, e.Status, e.Backend, owner,
		treeDate(e.Created, o.Now), treeAgo(active, o.Now))
}

// treeAgo says how long before now t was: "just now", "5m ago", "3h ago",
// "2d ago", or, from 7 days on (or when now is zero), t's date.
func treeAgo(t, now time.Time) string {
	if t.IsZero() || now.IsZero() {
		return treeDate(t, now)
	}
	switch d := now.Sub(t); {
	case d < time.Minute: // a clock ahead of now's, too
		return "just now"
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d/time.Minute))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh ago", int(d/time.Hour))
	case d < 7*24*time.Hour:
		return fmt.Sprintf("%dd ago", int(d/(24*time.Hour)))
	}
	return treeDate(t, now)
}

// treeDate is t's date in now's location; "—" for an unknown time.
func treeDate(t, now time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.In(now.Location()).Format(time.DateOnly)
}

// TreeRow is one line of a fork tree: entries[Index], drawn after Prefix
// (the tree glyphs: "", "├─ ", "│  └─ ", ...).
type TreeRow struct {
	Index  int
	Prefix string
}

// TreeRows orders entries as TreeText draws them — roots oldest first,
// each followed by its forks, depth first — for a UI that draws its own
// lines. It does not modify entries.
func TreeRows(entries []agentflow.SessionEntry) []TreeRow {
	rows := treeRows(entries)
	out := make([]TreeRow, len(rows))
	for i, r := range rows {
		out[i] = TreeRow{Index: r.entry, Prefix: r.prefix}
	}
	return out
}
