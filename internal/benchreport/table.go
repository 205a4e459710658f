package benchreport

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Table is a titled grid of preformatted cells with footnotes, rendered by
// [Table.Markdown] for a report file and by [Table.Text] for a terminal.
//
// Cells are shown as given; format numbers (precision, units) before
// putting them in. A row may be shorter or longer than Columns: missing
// cells are blank, and extra cells get a column with a blank header.
//
// A column is right-aligned when it looks numeric: at least one of its
// cells, and every cell that is not a placeholder ("", "-", "–", "—",
// "n/a"), starts with a number, after an optional sign or comparison
// ("+", "-", "−", "~", "≈", "<", ">", "≤", "≥"). "1.23x", "45 ms" and
// "-3%" are numeric; "v1.2" is not. Other columns are left-aligned.
type Table struct {
	// Title is shown above the table; it may be empty.
	Title string
	// Columns are the header cells.
	Columns []string
	// Rows are the body cells, row by row.
	Rows [][]string
	// Notes are shown as a list below the table, one item each.
	Notes []string
}

// Markdown renders t as GitHub-flavoured Markdown: the title as a level-3
// heading, a pipe table with numeric columns right-aligned, and the notes
// as a bullet list. "|" in cells is escaped and line breaks in cells become
// "<br>", so a cell cannot break the table. The result ends in a newline.
func (t Table) Markdown() string {
	cells := t.grid(func(s string) string {
		s = strings.ReplaceAll(s, "|", `\|`)
		return strings.Join(splitLines(s), "<br>")
	})
	var b strings.Builder
	section := func() {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
	}
	if t.Title != "" {
		b.WriteString("### " + strings.Join(splitLines(t.Title), " ") + "\n")
	}
	if len(cells) > 0 && len(cells[0]) > 0 {
		section()
		right := numericColumns(cells[1:], len(cells[0]))
		widths := columnWidths(cells, 3) // GitHub wants at least three characters of delimiter.
		writeRow := func(row []string) {
			for i, c := range row {
				b.WriteString("| " + pad(c, widths[i], right[i]) + " ")
			}
			b.WriteString("|\n")
		}
		writeRow(cells[0])
		for i, w := range widths {
			if right[i] {
				b.WriteString("|" + strings.Repeat("-", w+1) + ":")
			} else {
				b.WriteString("|" + strings.Repeat("-", w+2))
			}
		}
		b.WriteString("|\n")
		for _, row := range cells[1:] {
			writeRow(row)
		}
	}
	if len(t.Notes) > 0 {
		section()
		for _, n := range t.Notes {
			// Continuation lines are indented to stay in the list item.
			b.WriteString("- " + strings.Join(splitLines(n), "\n  ") + "\n")
		}
	}
	return b.String()
}

// Text renders t as plain text for a fixed-width terminal: the title
// underlined with "=", the columns separated by two spaces and aligned like
// [Table.Markdown] aligns them, a "-" rule under the header, and the notes
// as a "- " list after a blank line. Line breaks in cells become spaces.
// Lines carry no trailing spaces, and the result ends in a newline.
func (t Table) Text() string {
	cells := t.grid(func(s string) string {
		return strings.Join(splitLines(strings.ReplaceAll(s, "\t", " ")), " ")
	})
	var b strings.Builder
	writeLine := func(s string) {
		b.WriteString(strings.TrimRight(s, " ") + "\n")
	}
	if t.Title != "" {
		title := strings.Join(splitLines(t.Title), " ")
		writeLine(title)
		writeLine(strings.Repeat("=", utf8.RuneCountInString(title)))
	}
	if len(cells) > 0 && len(cells[0]) > 0 {
		right := numericColumns(cells[1:], len(cells[0]))
		widths := columnWidths(cells, 1)
		row := func(r []string) string {
			padded := make([]string, len(r))
			for i, c := range r {
				padded[i] = pad(c, widths[i], right[i])
			}
			return strings.Join(padded, "  ")
		}
		writeLine(row(cells[0]))
		rules := make([]string, len(widths))
		for i, w := range widths {
			rules[i] = strings.Repeat("-", w)
		}
		writeLine(strings.Join(rules, "  "))
		for _, r := range cells[1:] {
			writeLine(row(r))
		}
	}
	if len(t.Notes) > 0 {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		for _, n := range t.Notes {
			for i, line := range splitLines(n) {
				if i == 0 {
					writeLine("- " + line)
				} else {
					writeLine("  " + line)
				}
			}
		}
	}
	return b.String()
}

// grid returns the header followed by the rows, every row as wide as the
// widest one, with each cell passed through clean. It returns nil when the
// table has no cells at all.
func (t Table) grid(clean func(string) string) [][]string {
	n := len(t.Columns)
	for _, r := range t.Rows {
		n = max(n, len(r))
	}
	if n == 0 {
		return nil
	}
	out := make([][]string, 0, 1+len(t.Rows))
	for _, r := range append([][]string{t.Columns}, t.Rows...) {
		row := make([]string, n)
		for i, c := range r {
			row[i] = clean(c)
		}
		out = append(out, row)
	}
	return out
}

// splitLines splits s at "\n", "\r\n" and "\r".
func splitLines(s string) []string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	return strings.Split(s, "\n")
}

// columnWidths returns the width in runes of the widest cell of each
// column, and at least minWidth.
func columnWidths(cells [][]string, minWidth int) []int {
	widths := make([]int, len(cells[0]))
	for i := range widths {
		widths[i] = minWidth
	}
	for _, row := range cells {
		for i, c := range row {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	return widths
}

// pad pads s with spaces to width runes, on the left when right is set.
func pad(s string, width int, right bool) string {
	fill := strings.Repeat(" ", max(0, width-utf8.RuneCountInString(s)))
	if right {
		return fill + s
	}
	return s + fill
}

// numericColumns reports, for each of n columns, whether the body rows
// make it numeric in the sense documented on [Table].
func numericColumns(rows [][]string, n int) []bool {
	numeric := make([]bool, n)
	for i := range numeric {
		seen, ok := false, true
		for _, r := range rows {
			c := strings.TrimSpace(r[i])
			switch {
			case isPlaceholder(c):
			case looksNumeric(c):
				seen = true
			default:
				ok = false
			}
		}
		numeric[i] = seen && ok
	}
	return numeric
}

func isPlaceholder(c string) bool {
	switch strings.ToLower(c) {
	case "", "-", "–", "—", "n/a":
		return true
	}
	return false
}

func looksNumeric(c string) bool {
	c = strings.TrimLeft(c, "+-−~≈<>≤≥")
	c = strings.TrimPrefix(c, ".")
	r, _ := utf8.DecodeRuneInString(c)
	return r < utf8.RuneSelf && unicode.IsDigit(r)
}
