package tui

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/charmbracelet/glamour"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
	"github.com/agentbot/agentbot/bot/terminal"
)

var (
	styleTitle    = lipgloss.NewStyle().Bold(true)
	styleDim      = lipgloss.NewStyle().Faint(true)
	styleUser     = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("12"))
	styleNotice   = lipgloss.NewStyle().Foreground(lipgloss.Color("3"))
	styleError    = lipgloss.NewStyle().Foreground(lipgloss.Color("9"))
	styleSelected = lipgloss.NewStyle().Reverse(true)
	styleBar      = lipgloss.NewStyle().Reverse(true)
	styleBox      = lipgloss.NewStyle().Border(lipgloss.RoundedBorder()).Padding(0, 1)
	styleOff      = lipgloss.NewStyle().Faint(true).Strikethrough(false)
	stateStyles   = map[string]lipgloss.Style{
		"pending": styleDim, "running": lipgloss.NewStyle().Foreground(lipgloss.Color("11")),
		"done": lipgloss.NewStyle().Foreground(lipgloss.Color("10")), "failed": styleError,
		"cancelled": styleDim, "unknown": styleError,
		"approval": lipgloss.NewStyle().Foreground(lipgloss.Color("11")), "denied": styleError,
	}
	stateGlyphs = map[string]string{
		"pending": "○", "running": "◐", "done": "✓", "failed": "✗", "cancelled": "⊘", "unknown": "?",
		"approval": "◌", "denied": "⊘",
	}
)

// threadLinks are the thread tokens of a text (agentflow.LinkThread).
var threadLinks = regexp.MustCompile(`<thread:term:([^>]+)>`)

// inert makes text safe to put on the screen: what a command printed, or
// the model wrote, may hold escape sequences that would move the cursor,
// retitle the window or worse. They are dropped, with every other control
// character but the newline and the tab.
func inert(s string) string {
	s = ansi.Strip(s)
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t':
			return r
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			return -1
		}
		return r
	}, s)
}

// mdRenderer renders Markdown at one width, made again when it changes.
type mdRenderer struct {
	r     *glamour.TermRenderer
	width int
}

func (md *mdRenderer) render(text string, width int) string {
	if md.r == nil || md.width != width {
		r, err := glamour.NewTermRenderer(glamour.WithStandardStyle("dark"), glamour.WithWordWrap(width),
			glamour.WithEmoji(), glamour.WithPreservedNewLines())
		if err != nil {
			return text
		}
		md.r, md.width = r, width
	}
	out, err := md.r.Render(text)
	if err != nil {
		return text
	}
	return strings.Trim(out, "\n")
}

// layout sizes the transcript to what the input, completions and status
// bar leave of the screen.
func (m *Model) layout() {
	m.input.Width = max(10, m.width-4)
	used := 3 // the header, the input and the status bar
	used += len(m.completionLines())
	m.vp.Width = m.width
	m.vp.Height = max(1, m.height-used)
	for _, it := range m.items {
		if it.width != m.width {
			it.rendered = ""
		}
	}
	m.refresh(false)
}

// refresh draws the transcript again; the view follows the end when it
// was at the end (or when told to).
func (m *Model) refresh(bottom bool) {
	atEnd := m.vp.AtBottom() || bottom
	var b strings.Builder
	for i, it := range m.items {
		if it.rendered == "" || it.width != m.width {
			it.rendered = m.renderItem(i, it)
			it.width = m.width
		}
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(it.rendered)
	}
	m.vp.SetContent(b.String())
	if atEnd {
		m.vp.GotoBottom()
	}
}

// scrollTo shows item i: all of it when it fits, else its start.
func (m *Model) scrollTo(i int) {
	line := 0
	for _, it := range m.items[:i] {
		line += strings.Count(it.rendered, "\n") + 1
	}
	h := strings.Count(m.items[i].rendered, "\n") + 1
	switch {
	case line < m.vp.YOffset || h >= m.vp.Height:
		m.vp.SetYOffset(line)
	case line+h > m.vp.YOffset+m.vp.Height:
		m.vp.SetYOffset(line + h - m.vp.Height)
	}
}

func (m *Model) renderItem(i int, it *item) string {
	w := max(20, m.width)
	text := inert(it.text)
	switch it.kind {
	case itemUser:
		return styleUser.Render("you ›") + " " + wrap(text, w-6)
	case itemAnswer:
		return m.md.render(threadLinks.ReplaceAllString(text, "'$1'"), w-2) + "\n"
	case itemNotice:
		return styleNotice.Render("• " + wrap(terminal.Plain(text), w-2))
	case itemError:
		return styleError.Render("! " + wrap(text, w-2))
	case itemTool:
		return m.renderTool(it.tool, i == m.selected && m.browsing, w)
	}
	return it.text
}

// renderTool draws a tool row: its state, what it runs, how long it took,
// the first line of its output; expanded, the arguments and the output.
func (m *Model) renderTool(t *toolRow, selected bool, w int) string {
	st := t.st
	st.Summary, st.Head, st.Detail = inert(st.Summary), inert(st.Head), inert(st.Detail)
	glyph := stateGlyphs[st.State]
	if glyph == "" {
		glyph = "·"
	}
	var meta []string
	meta = append(meta, st.State)
	switch {
	case st.Elapsed > 0:
		meta = append(meta, fmtDuration(st.Elapsed))
	case st.State == "running" && !st.Started.IsZero():
		meta = append(meta, fmtDuration(m.o.now().Sub(st.Started))+"…")
	}
	if st.Detail != "" && !strings.HasPrefix(st.Detail, "exit 0 in") {
		meta = append(meta, st.Detail)
	}
	line := fmt.Sprintf("  %s %s  (%s)", glyph, oneLine(st.Summary, max(10, w-30)), strings.Join(meta, ", "))
	if st.Head != "" {
		more := ""
		if st.Lines > 1 {
			more = fmt.Sprintf("  +%d lines", st.Lines-1)
		}
		line += "\n      " + styleDim.Render(oneLine(st.Head, max(10, w-20))+more)
	}
	style, ok := stateStyles[st.State]
	if !ok {
		style = styleDim
	}
	head, rest, _ := strings.Cut(line, "\n")
	if selected {
		head = styleSelected.Render(head)
	} else {
		head = style.Render(head)
	}
	out := head
	if rest != "" {
		out += "\n" + rest
	}
	if !t.expanded {
		return out
	}
	var b strings.Builder
	b.WriteString(out)
	switch {
	// Wrapped to the screen: the viewport cuts what is wider, and the
	// whole of a call is what an expanded row is for.
	case t.loaded:
		b.WriteString("\n" + indent(styleDim.Render("arguments:")+"\n"+wrap(inert(t.args), w-6), "      "))
		b.WriteString("\n" + indent(styleDim.Render("output:")+"\n"+wrap(inert(strings.TrimRight(t.output, "\n")), w-6), "      "))
	case t.loadErr != "":
		b.WriteString("\n" + indent(styleDim.Render(wrap(t.loadErr, w-6)), "      "))
	default:
		b.WriteString("\n" + indent(styleDim.Render("reading the conversation…"), "      "))
	}
	return b.String()
}

func indent(s, by string) string {
	return by + strings.ReplaceAll(s, "\n", "\n"+by)
}

func wrap(s string, w int) string {
	return lipgloss.NewStyle().Width(max(10, w)).Render(s)
}

func fmtDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return d.Round(time.Second).String()
}

// View draws the screen.
func (m *Model) View() string {
	var body string
	if m.screen == screenPicker {
		body = m.pickerView()
	} else {
		body = m.sessionView()
	}
	if m.ov != nil {
		body = m.overlayOn(body)
	}
	return body
}

func (m *Model) pickerView() string {
	var b strings.Builder
	b.WriteString(styleTitle.Render("agentbot — sessions") + styleDim.Render("  (forks under their parents)") + "\n\n")
	now := m.o.now()
	// Columns: the tree and title take what the others leave.
	const fixed = 2 + 8 + 11 + 10 + 10 + 4
	titleW := max(12, m.width-fixed)
	header := fmt.Sprintf("  %-*s %-8s %-11s %-10s %-10s", titleW, "SESSION", "BACKEND", "STATE", "CREATED", "ACTIVE")
	b.WriteString(styleDim.Render(header) + "\n")
	lines := []string{"+ New session"}
	for _, r := range m.rows {
		e := m.entries[r.Index]
		title := r.Prefix + e.Title
		updated := e.Updated
		if updated.IsZero() {
			updated = e.Created
		}
		line := fmt.Sprintf("%-*s %-8s %-11s %-10s %-10s", titleW, oneLine(title, titleW), oneLine(e.Backend, 8),
			oneLine(string(e.Status), 11), since(e.Created, now), since(updated, now))
		if e.Status == agentflow.StatusDestroyed {
			line = styleOff.Render(line)
		}
		lines = append(lines, line)
	}
	// Only what fits, around the cursor.
	room := max(3, m.height-7)
	first := max(0, min(m.cursor-room/2, len(lines)-room))
	for i := first; i < len(lines) && i < first+room; i++ {
		if i == m.cursor {
			b.WriteString(styleSelected.Render("› "+lines[i]) + "\n")
		} else {
			b.WriteString("  " + lines[i] + "\n")
		}
	}
	if !m.listed {
		b.WriteString(styleDim.Render("  reading the sessions…") + "\n")
	} else if len(m.rows) == 0 {
		b.WriteString(styleDim.Render("  no sessions yet") + "\n")
	}
	if m.listErr != "" {
		b.WriteString(styleError.Render("! "+m.listErr) + "\n")
	}
	if m.flash != "" {
		b.WriteString(styleNotice.Render(m.flash) + "\n")
	}
	content := b.String()
	pad := m.height - 1 - strings.Count(content, "\n")
	if pad > 0 {
		content += strings.Repeat("\n", pad)
	}
	return content + styleDim.Render(oneLine("↑/↓ move · enter open · d destroy · r refresh · ctrl+c quit", m.width))
}

func (m *Model) sessionView() string {
	title := m.view.Title
	if title == "" {
		title = strings.TrimPrefix(m.thread, "term:")
	}
	header := styleTitle.Render(oneLine(title, max(10, m.width-30))) + styleDim.Render("  esc: sessions · tab: tool rows · ctrl+c: done")
	var b strings.Builder
	b.WriteString(lipgloss.NewStyle().MaxWidth(m.width).Render(header) + "\n")
	b.WriteString(m.vp.View() + "\n")
	for _, l := range m.completionLines() {
		b.WriteString(l + "\n")
	}
	b.WriteString(m.input.View() + "\n")
	b.WriteString(m.statusBar())
	return b.String()
}

// completionLines are the verbs that complete the input, with their usage.
func (m *Model) completionLines() []string {
	s := m.suggestions()
	if len(s) == 0 {
		return nil
	}
	if len(s) > 6 {
		s = s[:6]
	}
	lines := make([]string, len(s))
	for i, v := range s {
		lines[i] = styleDim.Render(oneLine("  /"+bot.Usage(v), max(10, m.width-2)))
	}
	return lines
}

// activity says what the session is doing, in words.
func (m *Model) activity() string {
	v := m.view
	switch v.Status {
	case agentflow.StatusRunning:
		if m.waitingApproval() != nil {
			return "waiting for approval"
		}
		for _, t := range v.Tools {
			if t.State == "running" {
				return "running a tool"
			}
		}
		if v.QueuedBehind > 0 {
			return fmt.Sprintf("waiting (%d ahead)", v.QueuedBehind)
		}
		return "thinking"
	case agentflow.StatusBusy:
		switch v.Activity {
		case "switch":
			return "switching"
		case "fork":
			return "forking"
		case "pause", "idle":
			return "saving"
		case "destroy":
			return "destroying"
		case "reset":
			return "resetting"
		}
		return "busy"
	case agentflow.StatusPaused:
		return "paused"
	case agentflow.StatusDestroyed:
		return "destroyed"
	case agentflow.StatusIdle:
		if len(m.pending) > 0 {
			return "thinking"
		}
		return "idle"
	}
	if len(m.pending) > 0 {
		return "starting"
	}
	return "new"
}

func (m *Model) statusBar() string {
	parts := []string{m.activity()}
	if h := m.approvalHint(); h != "" {
		parts = append(parts, h)
	}
	if m.view.Backend != "" {
		parts = append(parts, m.view.Backend)
	}
	parts = append(parts, fmt.Sprintf("turn %d", m.view.Turn), fmt.Sprintf("%s tokens", thousands(m.view.Usage.TotalTokens)))
	if m.loading {
		parts = append(parts, "reading…")
	}
	left := " " + strings.Join(parts, " · ")
	right := ""
	if m.o.WebUI != "" && m.view.WorkflowID != "" {
		right = webUILink(m.o.WebUI, m.o.Namespace, m.view.WorkflowID) + " "
	}
	if m.viewErr != "" {
		right = m.viewErr + " "
	}
	if m.flash != "" {
		right = m.flash + " "
	}
	gap := m.width - lipgloss.Width(left) - lipgloss.Width(right)
	if gap < 1 {
		right = oneLine(right, max(0, m.width-lipgloss.Width(left)-2))
		gap = max(1, m.width-lipgloss.Width(left)-lipgloss.Width(right))
	}
	return styleBar.Render(lipgloss.NewStyle().MaxWidth(m.width).Render(left + strings.Repeat(" ", gap) + right))
}

func thousands(n int64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// overlayOn draws the open question in a box at the bottom of body.
func (m *Model) overlayOn(body string) string {
	ov := m.ov
	var b strings.Builder
	switch ov.step {
	case 0:
		what := map[purpose]string{forNew: "New session on", forSwitch: "Switch this session to", forFork: "Fork this session onto"}[ov.purpose]
		b.WriteString(styleTitle.Render(what) + "\n")
		for i, name := range m.backendChoices() {
			line := name
			if why, off := m.o.Unavailable[name]; off && !slices.Contains(m.o.Backends, name) {
				line = styleOff.Render(name + " — unavailable: " + oneLine(why, max(10, m.width-30)))
			} else if m.screen == screenSession && name == m.view.Backend {
				line += styleDim.Render(" (current)")
			}
			if i == ov.cursor {
				b.WriteString("› " + line + "\n")
			} else {
				b.WriteString("  " + line + "\n")
			}
		}
		if ov.label != "" {
			b.WriteString(styleError.Render(ov.label) + "\n")
		}
		b.WriteString(styleDim.Render("↑/↓ choose · enter pick · esc cancel"))
	case 1, 2:
		label := ov.label
		b.WriteString(styleTitle.Render(label) + "\n" + ov.input.View() + "\n")
		b.WriteString(styleDim.Render("enter ok · esc cancel"))
	case approvalStep:
		b.WriteString(m.approvalBox())
	default:
		b.WriteString(wrap(ov.label, max(20, m.width-8)))
	}
	box := styleBox.Width(max(20, m.width-4)).Render(b.String())
	lines := strings.Split(body, "\n")
	boxLines := strings.Split(box, "\n")
	keep := max(0, len(lines)-len(boxLines))
	return strings.Join(append(lines[:keep], boxLines...), "\n")
}

func webUILink(base, ns, workflowID string) string {
	if ns == "" {
		ns = "default"
	}
	return fmt.Sprintf("%s/namespaces/%s/workflows/%s", strings.TrimRight(base, "/"), ns, strings.ReplaceAll(workflowID, "/", "%2F"))
}
