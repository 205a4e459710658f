package tui

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/textinput"
	"github.com/charmbracelet/bubbles/viewport"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
)

type screen int

const (
	screenPicker screen = iota
	screenSession
)

// purpose is what an overlay asks for.
type purpose int

const (
	forNew purpose = iota + 1
	forSwitch
	forFork
	forDestroy // destroy a session from the picker
	forDone    // keep or destroy the open session
	forEnd     // destroy the open session (/destroy)
)

// overlay is a question over the screen: a backend to pick, a line to
// type, or yes/no.
type overlay struct {
	purpose purpose
	// step: 0 the backend list, 1 the root, 2 the title, 3 a yes/no.
	step    int
	cursor  int
	backend string
	root    string
	thread  string // forDestroy
	label   string
	input   textinput.Model
}

// Model is the UI's state: a bubbletea model. Make one with New.
type Model struct {
	c      *core
	o      Options
	width  int
	height int
	screen screen

	// The picker.
	entries []agentflow.SessionEntry
	rows    []bot.TreeRow
	cursor  int // 0: "+ New session"; i: rows[i-1]
	listErr string
	listed  bool

	// The open session.
	thread   string
	view     agentflow.SessionView
	viewErr  string
	items    []*item
	pending  map[string]time.Time // message IDs not yet answered
	vp       viewport.Model
	input    textinput.Model
	browsing bool // the keys move between tool rows, not the input
	selected int  // index in items of the selected tool row, -1: none
	loading  bool // the conversation is being read for an expanded row
	flash    string
	ticks    int

	ov *overlay
	ap approvals // see approval.go

	md mdRenderer
}

// New returns the UI's model; ctx bounds what it asks of the bot core.
func New(ctx context.Context, o Options) *Model {
	in := textinput.New()
	in.Placeholder = "Type a message, or / for commands"
	in.Prompt = "› "
	in.CharLimit = agentflow.MaxMessageBytes
	in.Focus()
	return &Model{
		c: &core{ctx: ctx, o: o}, o: o, width: 80, height: 24,
		input: in, vp: viewport.New(80, 20), selected: -1,
		pending: map[string]time.Time{},
	}
}

// Run shows the UI on in and out until the person quits or ctx ends.
func Run(ctx context.Context, o Options, in io.Reader, out io.Writer) error {
	p := tea.NewProgram(New(ctx, o), tea.WithContext(ctx), tea.WithInput(in), tea.WithOutput(out), tea.WithAltScreen())
	_, err := p.Run()
	if errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil {
		return nil
	}
	return err
}

// Init starts the list of sessions, the clock and, embedded, the feed.
func (m *Model) Init() tea.Cmd {
	return tea.Batch(m.c.list(), m.c.tick(), m.c.feed(), textinput.Blink)
}

// Update handles one message.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.layout()
		return m, nil
	case tea.KeyMsg:
		return m.key(msg)
	case tickMsg:
		return m, m.onTick()
	case listMsg:
		m.listed = true
		if msg.err != nil {
			m.listErr = sayErr(msg.err)
			return m, nil
		}
		m.listErr = ""
		m.setEntries(msg.entries)
		return m, nil
	case stateMsg:
		if msg.thread != m.thread {
			return m, nil
		}
		m.onState(msg)
		return m, nil
	case feedMsg:
		m.onFeed(agentflow.Outbound(msg))
		return m, m.c.feed()
	case historyMsg:
		if msg.thread != m.thread {
			return m, nil
		}
		if msg.err != nil && !errors.Is(msg.err, agentflow.ErrNoSession) {
			m.add(&item{kind: itemError, text: sayErr(msg.err)})
			return m, nil
		}
		live := m.items
		m.items = nil
		for i := range msg.items {
			it := msg.items[i]
			m.items = append(m.items, &it)
		}
		m.items = append(m.items, live...)
		m.refresh(true)
		return m, nil
	case sentMsg:
		if msg.err != nil {
			m.addTo(msg.thread, &item{kind: itemError, text: "not sent: " + sayErr(msg.err)})
			return m, nil
		}
		if msg.replies != "" {
			m.addTo(msg.thread, &item{kind: itemNotice, text: msg.replies})
		}
		if msg.thread == m.thread {
			m.pending[msg.id] = m.o.now()
		}
		return m, nil
	case replyMsg:
		if msg.err != nil {
			m.addTo(msg.thread, &item{kind: itemError, text: sayErr(msg.err)})
		}
		if msg.text != "" {
			m.addTo(msg.thread, &item{kind: itemNotice, text: msg.text})
		}
		if m.screen == screenPicker {
			return m, m.c.list()
		}
		return m, m.c.state(m.thread)
	case answeredMsg:
		if msg.thread != m.thread {
			return m, nil
		}
		delete(m.pending, msg.id)
		switch {
		case msg.err != nil:
			m.add(&item{kind: itemError, text: sayErr(msg.err)})
		case msg.res.Result != nil:
			m.endTools(*msg.res.Result)
			m.addAnswer(msg.res.Result.Turn, fmt.Sprintf("answer/%d", msg.res.Result.Turn), answerText(*msg.res.Result))
			// Tool calls that began and ended between two looks at
			// the session are in its conversation.
			return m, m.c.turnTools(m.thread, msg.res.Result.Turn)
		}
		return m, nil
	case turnToolsMsg:
		if msg.thread != m.thread {
			return m, nil
		}
		known := map[string]*item{}
		for _, it := range m.items {
			if it.tool != nil {
				known[it.tool.st.ID] = it
			}
		}
		for _, row := range msg.rows {
			it := known[row.st.ID]
			if it == nil {
				m.insertTool(&item{kind: itemTool, turn: msg.turn, key: toolKey(msg.turn, row.st.ID), tool: row})
				continue
			}
			// A call the polls last saw running ended as the
			// conversation says.
			if unsettled(it.tool.st.State) && it.tool.st.State != row.st.State {
				it.tool.st.State, it.tool.st.Head, it.tool.st.Lines = row.st.State, row.st.Head, row.st.Lines
				it.rendered = ""
			}
		}
		m.refresh(false)
		return m, nil
	case conversationMsg:
		m.loading = false
		if msg.thread == m.thread {
			m.onConversation(msg)
		}
		return m, nil
	}
	if m.screen == screenSession && m.ov == nil {
		var cmd tea.Cmd
		m.input, cmd = m.input.Update(msg)
		return m, cmd
	}
	return m, nil
}

func (m *Model) onTick() tea.Cmd {
	m.ticks++
	cmds := []tea.Cmd{m.c.tick()}
	switch m.screen {
	case screenPicker:
		if m.ticks%3 == 0 && m.ov == nil {
			cmds = append(cmds, m.c.list())
		}
	case screenSession:
		cmds = append(cmds, m.c.state(m.thread))
		// A running row counts its time: draw it again.
		redraw := false
		for _, it := range m.items {
			if it.tool != nil && it.tool.st.State == "running" {
				it.rendered, redraw = "", true
			}
		}
		if redraw {
			m.refresh(false)
		}
		if m.o.Feed == nil {
			for _, id := range sortedKeys(m.pending) {
				cmds = append(cmds, m.c.answered(m.thread, id))
			}
		}
		// A message the session never took (refused before it
		// arrived) is not waited for forever.
		for id, at := range m.pending {
			if m.o.now().Sub(at) > 30*time.Minute {
				delete(m.pending, id)
			}
		}
	}
	return tea.Batch(cmds...)
}

// endTools ends the rows of a finished turn that the polls last saw
// pending, running or waiting for approval (without a Feed they rarely
// see a turn's last call end): they no longer run, and until the
// conversation says how they ended (turnTools), they say only that.
func (m *Model) endTools(r agentflow.TurnResult) {
	state := "ended"
	if r.Status == agentflow.TurnStopped || r.Status == agentflow.TurnCanceled {
		state = "cancelled"
	}
	changed := false
	for _, it := range m.items {
		if it.tool != nil && it.turn == r.Turn && (it.tool.st.State == "pending" || it.tool.st.State == "running" || it.tool.st.State == "approval") {
			it.tool.st.State, it.rendered, changed = state, "", true
		}
	}
	if changed {
		m.refresh(false)
	}
}

// unsettled says a row's state is not how its call ended for sure.
func unsettled(state string) bool {
	return state == "pending" || state == "running" || state == "approval" || state == "ended"
}

func sortedKeys(m map[string]time.Time) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// open shows the session of thread, its history first.
func (m *Model) open(thread string) tea.Cmd {
	m.screen = screenSession
	m.thread = thread
	m.items = nil
	m.view = agentflow.SessionView{}
	m.viewErr = ""
	m.pending = map[string]time.Time{}
	m.browsing, m.selected = false, -1
	m.flash = ""
	m.input.Reset()
	m.input.Focus()
	m.layout()
	return tea.Batch(m.c.history(thread), m.c.state(thread))
}

// toPicker leaves the session for the picker.
func (m *Model) toPicker() tea.Cmd {
	m.screen = screenPicker
	m.ov = nil
	return m.c.list()
}

func (m *Model) setEntries(entries []agentflow.SessionEntry) {
	// Destroyed sessions are left out, unless a live fork hangs under one
	// (the tree shows where it came from).
	live := map[string]bool{}
	for _, e := range entries {
		if e.Status != agentflow.StatusDestroyed {
			for p := e.Parent; p != "" && !live[p]; {
				live[p] = true
				p = parentOf(entries, p)
			}
		}
	}
	var keep []agentflow.SessionEntry
	for _, e := range entries {
		if e.Status != agentflow.StatusDestroyed || live[e.ThreadKey] {
			keep = append(keep, e)
		}
	}
	m.entries = keep
	m.rows = bot.TreeRows(keep)
	m.cursor = min(m.cursor, len(m.rows))
}

func parentOf(entries []agentflow.SessionEntry, thread string) string {
	for _, e := range entries {
		if e.ThreadKey == thread {
			return e.Parent
		}
	}
	return ""
}

// onState takes the session's state: the status bar, and (with no feed,
// or when a delivery was missed) the running turn's tool rows.
func (m *Model) onState(msg stateMsg) {
	if msg.err != nil {
		if errors.Is(msg.err, agentflow.ErrNoSession) {
			m.viewErr = "no session yet: type a message to start one"
		} else {
			m.viewErr = sayErr(msg.err)
		}
		return
	}
	m.viewErr = ""
	m.view = msg.view
	m.syncApproval(msg.view)
	if msg.view.Status == agentflow.StatusRunning && len(msg.view.Tools) > 0 {
		m.mergeTools(msg.view.Turn, msg.view.Tools)
	}
}

// onFeed takes a delivery of the worker in this process.
func (m *Model) onFeed(o agentflow.Outbound) {
	if o.Kind == agentflow.OutboundApproval {
		m.onApproval(o)
		return
	}
	if o.Thread != m.thread || m.screen != screenSession {
		if o.Kind == agentflow.OutboundAnswer {
			m.flash = "new answer in " + strings.TrimPrefix(o.Thread, "term:")
		}
		return
	}
	switch o.Kind {
	case agentflow.OutboundProgress:
		m.mergeTools(o.Turn, o.Tools)
	case agentflow.OutboundAnswer:
		for _, id := range o.MessageIDs {
			delete(m.pending, id)
		}
		m.addAnswer(o.Turn, o.Key, o.Text.Inline)
	case agentflow.OutboundTitle:
		m.view.Title = o.Title
	default:
		if strings.TrimSpace(o.Text.Inline) != "" {
			m.addKeyed(&item{kind: itemNotice, text: o.Text.Inline, key: o.Key + "\x00" + o.Text.Inline})
		}
	}
}

// mergeTools updates the rows of turn's tool calls, adding new ones.
func (m *Model) mergeTools(turn int, tools []agentflow.ToolStatus) {
	changed := false
	for _, t := range tools {
		key := toolKey(turn, t.ID)
		if it := m.find(key); it != nil {
			if it.tool.st != t {
				it.tool.st = t
				it.rendered = ""
				changed = true
			}
			continue
		}
		m.insertTool(&item{kind: itemTool, turn: turn, key: key, tool: &toolRow{st: t}})
		changed = true
	}
	if changed {
		m.refresh(false)
	}
}

// insertTool adds a tool row before its turn's answer: an answer may be
// delivered before the last edit of the turn's progress.
func (m *Model) insertTool(it *item) {
	for i, x := range m.items {
		if x.kind == itemAnswer && x.turn == it.turn && it.turn > 0 {
			m.items = slices.Insert(m.items, i, it)
			if m.selected >= i {
				m.selected++
			}
			return
		}
	}
	m.items = append(m.items, it)
}

func (m *Model) find(key string) *item {
	for i := len(m.items) - 1; i >= 0; i-- {
		if m.items[i].key == key {
			return m.items[i]
		}
	}
	return nil
}

func (m *Model) addAnswer(turn int, key, text string) {
	m.addKeyed(&item{kind: itemAnswer, turn: turn, text: text, key: key})
}

// addKeyed adds it unless an item of the same key is there.
func (m *Model) addKeyed(it *item) {
	if it.key != "" && m.find(it.key) != nil {
		return
	}
	m.add(it)
}

func (m *Model) add(it *item) {
	m.items = append(m.items, it)
	m.refresh(false)
}

// addTo adds it to thread's transcript when it is the open one, else
// flashes it.
func (m *Model) addTo(thread string, it *item) {
	if m.screen == screenSession && thread == m.thread {
		m.add(it)
		return
	}
	m.flash = oneLine(it.text, 200)
}

// onConversation fills the tool rows with their arguments and outputs.
func (m *Model) onConversation(msg conversationMsg) {
	byID := map[string]*toolRow{}
	if msg.err == nil {
		for _, it := range conversationItems(msg.msgs) {
			if it.tool != nil {
				byID[it.tool.st.ID] = it.tool
			}
		}
	}
	for _, it := range m.items {
		if it.tool == nil || !it.tool.expanded || it.tool.loaded {
			continue
		}
		it.rendered = ""
		switch got := byID[it.tool.st.ID]; {
		case msg.err != nil:
			it.tool.loadErr = sayErr(msg.err)
		case got == nil:
			it.tool.loadErr = "not in the conversation yet: the output is written there once the model has read it"
		default:
			it.tool.args, it.tool.output, it.tool.loaded, it.tool.loadErr = got.args, got.output, true, ""
		}
	}
	m.refresh(false)
	if m.selected >= 0 && m.selected < len(m.items) && m.items[m.selected].tool != nil && m.items[m.selected].tool.expanded {
		m.scrollTo(m.selected)
	}
}

// key handles a key press.
func (m *Model) key(k tea.KeyMsg) (tea.Model, tea.Cmd) {
	if m.ov != nil {
		return m.overlayKey(k)
	}
	if m.screen == screenPicker {
		return m.pickerKey(k)
	}
	return m.sessionKey(k)
}

func (m *Model) pickerKey(k tea.KeyMsg) (tea.Model, tea.Cmd) {
	switch k.String() {
	case "ctrl+c", "q":
		return m, tea.Quit
	case "up", "k":
		m.cursor = max(0, m.cursor-1)
	case "down", "j":
		m.cursor = min(len(m.rows), m.cursor+1)
	case "home":
		m.cursor = 0
	case "end":
		m.cursor = len(m.rows)
	case "r":
		return m, m.c.list()
	case "enter":
		if m.cursor == 0 {
			m.ov = &overlay{purpose: forNew}
			m.ov.cursor = m.firstAvailable()
			return m, nil
		}
		e := m.entries[m.rows[m.cursor-1].Index]
		if e.Status == agentflow.StatusDestroyed {
			m.listErr = "that session was destroyed; its forks live on"
			return m, nil
		}
		return m, m.open(e.ThreadKey)
	case "d":
		if m.cursor == 0 {
			return m, nil
		}
		e := m.entries[m.rows[m.cursor-1].Index]
		if e.Status == agentflow.StatusDestroyed {
			return m, nil
		}
		m.ov = &overlay{purpose: forDestroy, step: 3, thread: e.ThreadKey,
			label: fmt.Sprintf("Destroy %q? Its sandbox and workspace are deleted for good. y: destroy · n: keep", e.Title)}
	}
	return m, nil
}

func (m *Model) sessionKey(k tea.KeyMsg) (tea.Model, tea.Cmd) {
	if k.String() == "ctrl+a" && m.reopenApproval() {
		return m, nil
	}
	switch k.String() {
	case "ctrl+c":
		m.ov = &overlay{purpose: forDone, step: 3, label: keepQuestion}
		return m, nil
	case "esc":
		if m.browsing {
			m.browsing = false
			m.input.Focus()
			m.refresh(false)
			return m, nil
		}
		return m, m.toPicker()
	case "pgup", "pgdown":
		var cmd tea.Cmd
		m.vp, cmd = m.vp.Update(k)
		return m, cmd
	case "tab":
		if !m.browsing && strings.HasPrefix(m.input.Value(), "/") {
			if s := m.suggestions(); len(s) > 0 {
				m.input.SetValue("/" + string(s[0]) + " ")
				m.input.CursorEnd()
				m.layout()
			}
			return m, nil
		}
		return m, m.browse(!m.browsing)
	}
	if m.browsing {
		switch k.String() {
		case "up", "k":
			m.moveSelection(-1)
		case "down", "j":
			m.moveSelection(1)
		case "enter", " ":
			return m, m.toggle()
		}
		return m, nil
	}
	switch k.String() {
	case "enter":
		line := strings.TrimSpace(m.input.Value())
		m.input.Reset()
		m.layout()
		return m, m.submit(line)
	case "up", "down":
		var cmd tea.Cmd
		m.vp, cmd = m.vp.Update(k)
		return m, cmd
	}
	var cmd tea.Cmd
	m.input, cmd = m.input.Update(k)
	m.layout()
	return m, cmd
}

// browse switches the keys between the input and the tool rows.
func (m *Model) browse(on bool) tea.Cmd {
	m.browsing = on
	if on {
		m.input.Blur()
		if m.selected < 0 || m.selected >= len(m.items) || m.items[m.selected].tool == nil {
			m.selected = -1
			m.moveSelection(-1)
		}
		if m.selected < 0 {
			m.browsing = false
			m.input.Focus()
			m.flash = "no tool calls to look at yet"
		}
	} else {
		m.input.Focus()
	}
	m.refresh(false)
	return nil
}

// moveSelection selects the previous (-1) or next (+1) tool row; from no
// selection, the last one.
func (m *Model) moveSelection(d int) {
	start := m.selected
	if start < 0 {
		start = len(m.items)
		d = -1
	}
	for i := start + d; i >= 0 && i < len(m.items); i += d {
		if m.items[i].tool != nil {
			if m.selected >= 0 && m.selected < len(m.items) {
				m.items[m.selected].rendered = ""
			}
			m.selected = i
			m.items[i].rendered = ""
			m.refresh(false)
			m.scrollTo(i)
			return
		}
	}
}

// toggle expands or collapses the selected row, reading the conversation
// for its arguments and output the first time.
func (m *Model) toggle() tea.Cmd {
	if m.selected < 0 || m.selected >= len(m.items) || m.items[m.selected].tool == nil {
		return nil
	}
	it := m.items[m.selected]
	it.tool.expanded = !it.tool.expanded
	it.rendered = ""
	m.refresh(false)
	m.scrollTo(m.selected)
	if it.tool.expanded && !it.tool.loaded && !m.loading {
		m.loading = true
		return m.c.conversation(m.thread)
	}
	return nil
}

const keepQuestion = "Keep this session? y: keep it (paused, resume it from the picker) · n: destroy it · esc: go on here"

// submit sends what was typed: a message, or a command.
func (m *Model) submit(line string) tea.Cmd {
	if line == "" {
		return nil
	}
	if !strings.HasPrefix(line, "/") {
		id := m.c.nextID()
		m.add(&item{kind: itemUser, text: line, key: "user/" + id})
		m.follow()
		return m.c.send(m.thread, id, line)
	}
	cmdline := strings.TrimPrefix(line, "/")
	word, rest, _ := strings.Cut(cmdline, " ")
	rest = strings.TrimSpace(rest)
	switch word {
	case "quit", "exit":
		return tea.Quit
	case "sessions", "picker":
		return m.toPicker()
	case string(bot.VerbSwitch), string(bot.VerbFork):
		if rest == "" {
			p := forSwitch
			if word == string(bot.VerbFork) {
				p = forFork
			}
			m.ov = &overlay{purpose: p}
			m.ov.cursor = m.firstAvailable()
			return nil
		}
	case string(bot.VerbDone):
		m.ov = &overlay{purpose: forDone, step: 3, label: keepQuestion}
		return nil
	case string(bot.VerbDestroy):
		m.ov = &overlay{purpose: forEnd, step: 3, label: "Destroy this session? Its sandbox and workspace are deleted for good. y: destroy · n: keep"}
		return nil
	}
	m.add(&item{kind: itemUser, text: line})
	m.follow()
	return m.c.command(m.thread, cmdline)
}

func (m *Model) defaultBackend() string {
	if m.o.Router != nil && m.o.Router.DefaultBackend != "" {
		return m.o.Router.DefaultBackend
	}
	return "local"
}

// backendChoices are the backends the picker offers: those that run
// here, then those that do not (greyed, with why).
func (m *Model) backendChoices() []string {
	out := slices.Clone(m.o.Backends)
	var off []string
	for b := range m.o.Unavailable {
		if !slices.Contains(out, b) {
			off = append(off, b)
		}
	}
	slices.Sort(off)
	return append(out, off...)
}

func (m *Model) firstAvailable() int {
	choices := m.backendChoices()
	if m.screen == screenPicker || m.o.Router == nil {
		if i := slices.Index(choices, m.defaultBackend()); i >= 0 {
			return i
		}
	}
	for i, b := range choices {
		if slices.Contains(m.o.Backends, b) {
			if m.screen == screenSession && m.view.Backend == b && len(m.o.Backends) > 1 {
				continue
			}
			return i
		}
	}
	return 0
}

func (m *Model) overlayKey(k tea.KeyMsg) (tea.Model, tea.Cmd) {
	ov := m.ov
	if k.String() == "esc" {
		m.ov = nil
		return m, nil
	}
	if ov.purpose == forApproval {
		return m.approvalKeyPress(k)
	}
	switch ov.step {
	case 0: // the backend list
		choices := m.backendChoices()
		switch k.String() {
		case "ctrl+c":
			m.ov = nil
		case "up", "k":
			ov.cursor = max(0, ov.cursor-1)
		case "down", "j":
			ov.cursor = min(len(choices)-1, ov.cursor+1)
		case "enter":
			if len(choices) == 0 {
				return m, nil
			}
			b := choices[ov.cursor]
			if why, off := m.o.Unavailable[b]; off && !slices.Contains(m.o.Backends, b) {
				ov.label = fmt.Sprintf("%s is not available here: %s", b, why)
				return m, nil
			}
			ov.backend = b
			if b == "local" {
				m.prompt(1, "Workspace root for local (a directory on this machine):", "./workspace")
				return m, textinput.Blink
			}
			if ov.purpose == forNew {
				m.prompt(2, "Title (optional):", "")
				return m, textinput.Blink
			}
			return m, m.finish()
		}
		return m, nil
	case 1, 2: // a line to type
		switch k.String() {
		case "ctrl+c":
			m.ov = nil
			return m, nil
		case "enter":
			v := strings.TrimSpace(ov.input.Value())
			if ov.step == 1 {
				if v == "" {
					v = ov.input.Placeholder
				}
				root, err := m.absRoot(v)
				if err != nil {
					ov.label = err.Error()
					return m, nil
				}
				ov.root = root
				if ov.purpose == forNew {
					m.prompt(2, "Title (optional):", "")
					return m, textinput.Blink
				}
				return m, m.finish()
			}
			return m, m.finishNew(v)
		}
		var cmd tea.Cmd
		ov.input, cmd = ov.input.Update(k)
		return m, cmd
	default: // yes or no
		switch strings.ToLower(k.String()) {
		case "y":
			return m, m.answer(true)
		case "n":
			return m, m.answer(false)
		case "ctrl+c":
			if ov.purpose == forDone {
				// A second Ctrl+C leaves the session as it is.
				m.ov = nil
				return m, m.toPicker()
			}
			m.ov = nil
		}
		return m, nil
	}
}

func (m *Model) prompt(step int, label, placeholder string) {
	in := textinput.New()
	in.Prompt = "› "
	in.Placeholder = placeholder
	in.CharLimit = 4096
	in.Focus()
	m.ov.step, m.ov.label, m.ov.input = step, label, in
}

func (m *Model) absRoot(v string) (string, error) {
	if strings.HasPrefix(v, "~/") {
		return "", errors.New("write the root without ~ (an absolute path, or one relative to the current directory)")
	}
	if !filepath.IsAbs(v) {
		base := m.o.Workdir
		if base == "" {
			var err error
			if base, err = filepath.Abs("."); err != nil {
				return "", err
			}
		}
		v = filepath.Join(base, v)
	}
	v = filepath.Clean(v)
	if strings.ContainsAny(v, " \t\n") {
		return "", errors.New("the root may not contain spaces")
	}
	// With the worker in this process the local sandbox is on this
	// machine: the directory is made if need be, as a person who typed
	// ./workspace expects. A remote worker's machine is not ours to touch.
	if m.o.Feed != nil {
		if err := os.MkdirAll(v, 0o755); err != nil {
			return "", fmt.Errorf("making the root: %w", err)
		}
	}
	return v, nil
}

// finish runs the /switch or /fork the backend picker was for.
func (m *Model) finish() tea.Cmd {
	ov := m.ov
	m.ov = nil
	var line string
	switch ov.purpose {
	case forSwitch:
		line = "switch " + ov.backend
		if ov.root != "" {
			line += " " + ov.root
		}
	case forFork:
		line = "fork --backend " + ov.backend
		if ov.root != "" {
			line += " --root " + ov.root
		}
	default:
		return nil
	}
	m.add(&item{kind: itemUser, text: "/" + line})
	m.follow()
	return m.c.command(m.thread, line)
}

// finishNew starts a session in a thread of its own and opens it.
func (m *Model) finishNew(title string) tea.Cmd {
	ov := m.ov
	m.ov = nil
	thread := "term:" + newThreadName(title, m.o.now())
	line := "new " + ov.backend
	if ov.root != "" {
		line += " --root " + ov.root
	}
	if title != "" {
		line += " " + title
	}
	open := m.open(thread)
	m.add(&item{kind: itemUser, text: "/" + line})
	return tea.Batch(open, m.c.command(thread, line))
}

// answer takes the yes or no of a question.
func (m *Model) answer(yes bool) tea.Cmd {
	ov := m.ov
	m.ov = nil
	switch ov.purpose {
	case forDestroy:
		if yes {
			return m.c.command(ov.thread, "destroy")
		}
	case forEnd:
		if yes {
			m.add(&item{kind: itemUser, text: "/destroy"})
			return tea.Batch(m.c.command(m.thread, "destroy"), m.toPicker())
		}
	case forDone:
		verb := "done"
		if !yes {
			verb = "destroy"
		}
		thread := m.thread
		return tea.Batch(m.c.command(thread, verb), m.toPicker())
	}
	return nil
}

// newThreadName names the thread of a new session: its title's words and
// the time, so that names do not clash.
func newThreadName(title string, now time.Time) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
		if b.Len() >= 24 {
			break
		}
	}
	name := strings.Trim(b.String(), "-")
	if name == "" {
		name = "session"
	}
	return name + "-" + now.Format("0102-150405")
}

// suggestions are the verbs that complete what is typed after "/".
func (m *Model) suggestions() []bot.Verb {
	v := m.input.Value()
	if !strings.HasPrefix(v, "/") || strings.Contains(v, " ") {
		return nil
	}
	prefix := strings.TrimPrefix(v, "/")
	var out []bot.Verb
	for _, verb := range bot.Verbs() {
		if strings.HasPrefix(string(verb), prefix) {
			out = append(out, verb)
		}
	}
	return out
}

func (m *Model) follow() { m.vp.GotoBottom() }

// sayErr is an error as a sentence for the person.
func sayErr(err error) string {
	var refused *agentflow.RefusedError
	switch {
	case errors.Is(err, agentflow.ErrNoSession):
		return "no session in this thread yet: send a message to start one"
	case errors.Is(err, agentflow.ErrDestroyed):
		return agentflow.ErrDestroyedText
	case errors.Is(err, agentflow.ErrUnavailable):
		return "Temporal does not answer; try again in a moment"
	case errors.As(err, &refused):
		return refused.Msg
	}
	return err.Error()
}

// answerText is what a finished turn says.
func answerText(r agentflow.TurnResult) string {
	if r.Error != "" {
		return r.Error
	}
	return r.Answer
}
