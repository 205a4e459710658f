package tui_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/exp/teatest"
	"github.com/muesli/termenv"
	"go.temporal.io/sdk/client"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
	"github.com/agentbot/agentbot/bot/terminal"
	"github.com/agentbot/agentbot/bot/terminal/tui"
	"github.com/agentbot/agentbot/internal/agentworker"
	"github.com/agentbot/agentbot/internal/config"
	"github.com/agentbot/agentbot/internal/testenv"
	"github.com/agentbot/agentbot/store"
)

// The stack every test drives: one Temporal dev server, the worker of the
// embedded default (local backend, offline model) and the bot core, for
// the whole file. Each test uses threads of its own.
var stack struct {
	router *bot.Router
	client *agentflow.Client
	blobs  *store.Blobs
	// board is the worker's "term" sender: the test that runs says where
	// the deliveries go (its UI's Feed, or nowhere for a worker elsewhere).
	board *switchboard
	// run makes names unique to this run of the file.
	run string
}

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	// A terminal has colours: render the styles as it would, so that the
	// widths measured include what escapes do to layout.
	lipgloss.SetColorProfile(termenv.TrueColor)
	ctx := context.Background()
	srv, err := testenv.StartTemporal(ctx, testenv.TemporalOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = srv.Stop() }()
	dir, err := os.MkdirTemp("", "tui-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	for _, d := range []string{"local", "state", "blobs"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	tc, err := client.Dial(client.Options{HostPort: srv.FrontendHostPort(), Logger: testenv.Logger()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer tc.Close()
	blobURL := "file://" + filepath.Join(dir, "blobs")
	cfg, err := config.Load([]string{
		"OPENAI_BASE_URL=fake", "AGENTBOT_BACKENDS=local",
		"AGENTBOT_LOCAL_DIR=" + filepath.Join(dir, "local"), "AGENTBOT_STATE_DIR=" + filepath.Join(dir, "state"),
		"AGENTBOT_BLOB_URL=" + blobURL,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	stack.board = &switchboard{threads: terminal.NewSender(io.Discard)}
	w, err := agentworker.New(ctx, tc, agentworker.Options{Config: cfg, Logger: slog.New(slog.DiscardHandler),
		Chat: map[string]agentflow.ChatSender{"term": stack.board}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := w.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer w.Stop()
	blobs, err := store.OpenBlobs(ctx, blobURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer blobs.Close()
	stack.client = agentflow.NewClient(tc)
	stack.router = &bot.Router{Sessions: stack.client, Backends: w.Registry.Names(), DefaultBackend: "local",
		Logger: slog.New(slog.DiscardHandler)}
	stack.blobs = blobs
	stack.run = strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	return m.Run()
}

// switchboard is the worker's chat sender for "term": it hands each
// delivery to the sender of the test that runs (tests run one at a time),
// so that one worker serves a test with a Feed (embedded) and one with a
// worker elsewhere (whose sender prints to a terminal nobody reads).
type switchboard struct {
	mu      sync.Mutex
	to      agentflow.ChatSender
	threads *terminal.Sender
}

func (s *switchboard) Deliver(ctx context.Context, m agentflow.Outbound) error {
	s.mu.Lock()
	to := s.to
	s.mu.Unlock()
	if to == nil {
		return nil
	}
	return to.Deliver(ctx, m)
}

func (s *switchboard) CreateThread(ctx context.Context, sourceThread, title, requestID string) (string, error) {
	return s.threads.CreateThread(ctx, sourceThread, title, requestID)
}

// use sends the deliveries to to until t ends.
func (s *switchboard) use(t *testing.T, to agentflow.ChatSender) {
	s.mu.Lock()
	s.to = to
	s.mu.Unlock()
	t.Cleanup(func() {
		s.mu.Lock()
		s.to = nil
		s.mu.Unlock()
	})
}

// embedded are the options of the embedded default: the worker pushes to
// a Feed, the blob store is readable here.
func embedded(t *testing.T) tui.Options {
	feed := tui.NewFeed()
	stack.board.use(t, feed)
	return tui.Options{Router: stack.router, Client: stack.client, Feed: feed, Blobs: stack.blobs,
		User: "tester", Backends: stack.router.Backends, Poll: 200 * time.Millisecond, Workdir: t.TempDir()}
}

var names atomic.Int64

// unique makes a name unique to this run of the file, and to this run of
// the test (-count=N).
func unique(name string) string {
	return name + " " + stack.run + strconv.FormatInt(names.Add(1), 36)
}

// probe wraps the model so that a test reads View from the program's own
// goroutine: calling View from the test while the program runs Update
// would race. teatest's Output is the renderer's stream, which already
// cuts lines to the terminal's width; the tests measure View itself.
type probe struct{ *tui.Model }

type viewMsg chan string

func (p probe) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	if ch, ok := msg.(viewMsg); ok {
		ch <- p.View()
		return p, nil
	}
	_, cmd := p.Model.Update(msg)
	return p, cmd
}

// ui is one running UI.
type ui struct {
	t  *testing.T
	tm *teatest.TestModel
}

func start(t *testing.T, o tui.Options, w, h int) *ui {
	t.Helper()
	tm := teatest.NewTestModel(t, probe{tui.New(t.Context(), o)}, teatest.WithInitialTermSize(w, h))
	t.Cleanup(func() {
		_ = tm.Quit()
		tm.WaitFinished(t, teatest.WithFinalTimeout(10*time.Second))
	})
	return &ui{t: t, tm: tm}
}

// view is what the model draws now, escapes and all.
func (u *ui) view() string {
	u.t.Helper()
	ch := make(viewMsg, 1)
	u.tm.Send(ch)
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		u.t.Fatal("the UI does not draw (its program is stuck or ended)")
		return ""
	}
}

// screen is what the person reads now.
func (u *ui) screen() string { return ansi.Strip(u.view()) }

// waitFor waits until the screen satisfies ok, and returns it.
func (u *ui) waitFor(what string, d time.Duration, ok func(screen string) bool) string {
	u.t.Helper()
	deadline := time.Now().Add(d)
	for {
		s := u.screen()
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			u.t.Fatalf("%s: not on the screen after %s:\n%s", what, d, s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitText waits until the screen shows every one of wants.
func (u *ui) waitText(what string, d time.Duration, wants ...string) string {
	u.t.Helper()
	return u.waitFor(what, d, func(s string) bool {
		for _, w := range wants {
			if !strings.Contains(s, w) {
				return false
			}
		}
		return true
	})
}

func (u *ui) key(k tea.KeyType) { u.tm.Send(tea.KeyMsg{Type: k}) }

func (u *ui) rune(r rune) { u.tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}}) }

// say types a line and Enter.
func (u *ui) say(line string) {
	u.tm.Type(line)
	u.key(tea.KeyEnter)
}

// newSession starts a session from the picker as a person does: the
// backend picker (the default, local), the root (the default), a title;
// it waits for the session to be idle.
func (u *ui) newSession(title string) {
	u.t.Helper()
	u.waitText("the picker", 20*time.Second, "+ New session")
	u.key(tea.KeyHome)
	u.key(tea.KeyEnter)
	u.waitText("the backend picker", 10*time.Second, "New session on", "local")
	u.key(tea.KeyEnter)
	u.waitText("the root prompt", 10*time.Second, "Workspace root for local")
	u.key(tea.KeyEnter)
	u.waitText("the title prompt", 10*time.Second, "Title (optional)")
	u.say(title)
	u.waitFor("the new session, idle", 30*time.Second, func(s string) bool {
		return strings.Contains(s, title) && activity(s) == "idle"
	})
}

// statusBar is the last line of a screen.
func statusBar(screen string) string {
	lines := strings.Split(screen, "\n")
	return lines[len(lines)-1]
}

// activity is what the status bar says the session does.
func activity(screen string) string {
	a, _, _ := strings.Cut(strings.TrimSpace(statusBar(screen)), " · ")
	return a
}

// fits checks the invariant of every screen: exactly h lines, none wider
// than w cells.
func fits(t *testing.T, what, view string, w, h int) {
	t.Helper()
	lines := strings.Split(view, "\n")
	if len(lines) != h {
		t.Errorf("%s: %d lines on a terminal of %d:\n%s", what, len(lines), h, ansi.Strip(view))
	}
	for i, l := range lines {
		if n := ansi.StringWidth(l); n > w {
			t.Errorf("%s: line %d is %d cells wide on a terminal of %d: %q", what, i+1, n, w, ansi.Strip(l))
		}
	}
}

// TestNarrowTerminal draws the picker, the backend picker and a session
// with long content (a long answer, a tool row running a command of 300
// characters, expanded; a notice of many lines; the question of ctrl+c)
// on a terminal of 80×24: every screen is 24 lines of at most 80 cells.
func TestNarrowTerminal(t *testing.T) {
	const w, h = 80, 24
	u := start(t, embedded(t), w, h)
	u.waitText("the picker", 20*time.Second, "+ New session")
	fits(t, "the picker", u.view(), w, h)
	u.key(tea.KeyEnter)
	u.waitText("the backend picker", 10*time.Second, "New session on")
	fits(t, "the backend picker", u.view(), w, h)
	u.key(tea.KeyEsc)

	title := unique("narrow")
	u.newSession(title)
	long := strings.Repeat("the quick brown fox jumps over the lazy dog ", 12) + strings.Repeat("y", 150)
	u.say(long)
	u.waitFor("the long answer", 30*time.Second, func(s string) bool {
		return strings.Contains(s, "echo: the quick") && activity(s) == "idle"
	})
	token := strings.Repeat("0123456789", 29) + "END01"
	cmd := "echo " + token
	if len(cmd) != 300 {
		t.Fatalf("the command is %d bytes, want 300", len(cmd))
	}
	u.say("sh: " + cmd)
	u.waitFor("the tool row and its answer", 30*time.Second, func(s string) bool {
		return strings.Contains(s, "✓ shell: echo 0123") && strings.Contains(s, "done.") && activity(s) == "idle"
	})
	u.say("/help")
	u.waitText("the help notice", 20*time.Second, "help [verb]")
	fits(t, "the session", u.view(), w, h)

	// The tool row expanded: its arguments hold the whole command,
	// wrapped to the screen (the lines joined again give it back).
	u.key(tea.KeyTab)
	u.key(tea.KeyEnter)
	s := u.waitText("the expanded row", 20*time.Second, "arguments:", "output:")
	fits(t, "the session with an expanded row", u.view(), w, h)
	if !strings.Contains(strings.Join(strings.Fields(s), ""), token) {
		t.Errorf("the expanded row does not show the whole command:\n%s", s)
	}
	u.key(tea.KeyEsc)

	u.key(tea.KeyCtrlC)
	u.waitText("the keep question", 10*time.Second, "Keep this session?")
	fits(t, "the keep question", u.view(), w, h)
	u.key(tea.KeyEsc)
	u.waitFor("the question gone", 10*time.Second, func(s string) bool { return !strings.Contains(s, "Keep this session?") })

	// The picker again, with the session's row.
	u.key(tea.KeyEsc)
	u.waitText("the picker with the session", 20*time.Second, "+ New session", title)
	fits(t, "the picker with sessions", u.view(), w, h)
}

// TestResize resizes a session to 120×40 and then to 60×20: each time
// the screen takes the new size (the status bar spans it) and the
// transcript is still there; the picker follows too.
func TestResize(t *testing.T) {
	u := start(t, embedded(t), 80, 24)
	u.newSession(unique("resize"))
	u.say("resize marker " + strings.Repeat("wide words to wrap ", 10))
	u.waitText("the answer", 30*time.Second, "echo: resize marker")

	for _, size := range []struct{ w, h int }{{120, 40}, {60, 20}} {
		u.tm.Send(tea.WindowSizeMsg{Width: size.w, Height: size.h})
		what := fmt.Sprintf("the session at %d×%d", size.w, size.h)
		v := u.view()
		fits(t, what, v, size.w, size.h)
		lines := strings.Split(v, "\n")
		if n := ansi.StringWidth(lines[len(lines)-1]); n != size.w {
			t.Errorf("%s: the status bar is %d cells wide, want %d (the view does not follow)", what, n, size.w)
		}
		s := ansi.Strip(v)
		if !strings.Contains(s, "you ›") || !strings.Contains(s, "echo: resize marker") {
			t.Errorf("%s: the transcript is gone:\n%s", what, s)
		}
	}
	u.key(tea.KeyEsc)
	u.waitText("the picker", 10*time.Second, "+ New session")
	fits(t, "the picker at 60×20", u.view(), 60, 20)
}

// TestCompletion types "/s": the verbs that start with s are offered with
// their usage; Tab completes the first.
func TestCompletion(t *testing.T) {
	u := start(t, embedded(t), 100, 30)
	u.newSession(unique("completion"))
	var want []string
	for _, v := range bot.Verbs() {
		if strings.HasPrefix(string(v), "s") {
			want = append(want, "/"+string(v))
		}
	}
	if len(want) < 2 {
		t.Fatalf("the grammar has %d verbs starting with s; the test needs two or more", len(want))
	}
	u.tm.Type("/s")
	s := u.waitText("the completions", 10*time.Second, "› /s")
	var offered []string
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		if verb, _, ok := strings.Cut(l, " "); ok && strings.HasPrefix(l, "/") {
			offered = append(offered, verb)
			usage := bot.Usage(bot.Verb(strings.TrimPrefix(verb, "/")))
			// The line is the usage, cut to the screen with an ellipsis.
			if got := strings.TrimSuffix(l, "…"); !strings.HasPrefix("/"+usage, got) || len(got) < min(len(usage), 40) {
				t.Errorf("the completion of %s is %q, want its usage %q", verb, l, usage)
			}
		}
	}
	if !slices.Equal(offered, want) {
		t.Errorf("\"/s\" offers %q, want %q:\n%s", offered, want, s)
	}
	u.key(tea.KeyTab)
	s = u.waitText("the completed verb", 10*time.Second, "› "+want[0]+" ")
	for _, v := range want[1:] {
		if strings.Contains(s, "  "+v) {
			t.Errorf("after Tab the completions still show %s:\n%s", v, s)
		}
	}
}

// TestBackendPickerGreysUnavailable offers a backend that cannot run here
// greyed, with why; picking it refuses with that reason and starts
// nothing.
func TestBackendPickerGreysUnavailable(t *testing.T) {
	o := embedded(t)
	o.Backends = []string{"local"}
	o.Unavailable = map[string]string{"docker": "the image is missing"}
	before := threads(t)
	u := start(t, o, 80, 24)
	u.waitText("the picker", 20*time.Second, "+ New session")
	u.key(tea.KeyHome)
	u.key(tea.KeyEnter)
	u.waitText("the backend picker", 10*time.Second, "New session on", "docker — unavailable: the image is missing")
	u.key(tea.KeyDown)
	u.waitText("docker chosen", 10*time.Second, "› docker — unavailable")
	faint := regexp.MustCompile(`\x1b\[(?:[0-9]+;)*2(?:;[0-9]+)*m[^\n]*docker`)
	seen := 0
	for _, l := range strings.Split(u.view(), "\n") {
		switch s := strings.Trim(ansi.Strip(l), "│› "); {
		case strings.HasPrefix(s, "docker —"):
			seen++
			if !faint.MatchString(l) {
				t.Errorf("docker is not greyed: %q", l)
			}
		case s == "local":
			seen++
			if strings.Contains(l, "\x1b[2m") {
				t.Errorf("local is greyed: %q", l)
			}
		}
	}
	if seen != 2 {
		t.Errorf("the backend picker has %d lines of local and docker, want 2:\n%s", seen, u.screen())
	}
	u.key(tea.KeyEnter)
	s := u.waitText("the refusal", 10*time.Second, "docker is not available here: the image is missing")
	if !strings.Contains(s, "New session on") || strings.Contains(s, "Workspace root") || strings.Contains(s, "Title (optional)") {
		t.Errorf("after the refusal the backend picker should stay:\n%s", s)
	}
	u.key(tea.KeyEsc)
	u.waitFor("the picker", 10*time.Second, func(s string) bool { return !strings.Contains(s, "New session on") })
	if after := threads(t); !slices.Equal(after, before) {
		t.Errorf("sessions after the refusal: %q, before: %q", after, before)
	}
}

// threads are the terminal's sessions.
func threads(t *testing.T) []string {
	t.Helper()
	entries, err := stack.client.List(t.Context(), "term:main")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.ThreadKey)
	}
	slices.Sort(out)
	return out
}

// command runs a command of the grammar in thread, as the UI does.
func command(t *testing.T, thread, line string) string {
	t.Helper()
	var replies []string
	ev := bot.Event{ID: fmt.Sprintf("test-%d", time.Now().UnixNano()), Platform: "term", Kind: bot.KindCommand,
		ThreadKey: thread, User: "tester", UserName: "tester", Text: line}
	err := stack.router.Handle(t.Context(), ev, bot.ReplierFunc(func(_ context.Context, r bot.Response) error {
		replies = append(replies, r.Text)
		return nil
	}))
	if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	return strings.Join(replies, "\n")
}

// TestDestroyFromPicker destroys a session from the picker: d asks, n
// keeps it; d then y destroys it, and it leaves the list.
func TestDestroyFromPicker(t *testing.T) {
	title := unique("doomed")
	thread := "term:" + strings.ReplaceAll(title, " ", "-")
	command(t, thread, "new local --root "+t.TempDir()+" "+title)
	u := start(t, embedded(t), 80, 24)
	u.waitText("the session in the picker", 20*time.Second, title)
	selectRow(u, title)

	question := `Destroy "` + title + `"?`
	u.rune('d')
	u.waitText("the question", 10*time.Second, question)
	u.rune('n')
	s := u.waitFor("the question gone", 10*time.Second, func(s string) bool { return !strings.Contains(s, question) })
	if !strings.Contains(s, title) {
		t.Errorf("n should keep the session in the list:\n%s", s)
	}
	if p, err := stack.client.Describe(t.Context(), thread); err != nil || p != agentflow.PresenceRunning {
		t.Errorf("after n the session is %v (%v), want running", p, err)
	}

	u.rune('d')
	u.waitText("the question", 10*time.Second, question)
	u.rune('y')
	u.waitFor("the session gone from the picker", 30*time.Second, func(s string) bool {
		return !strings.Contains(s, title)
	})
	// The registry says destroyed as the destroy begins; the workflow
	// ends once the sandbox is gone.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		p, err := stack.client.Describe(t.Context(), thread)
		if err == nil && p == agentflow.PresenceEnded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after y the session is %v (%v), want ended", p, err)
		}
	}
}

// selectRow moves the picker's cursor to the row of title.
func selectRow(u *ui, title string) {
	u.t.Helper()
	for range 100 {
		s := u.screen()
		for _, l := range strings.Split(s, "\n") {
			if strings.HasPrefix(l, "› ") && strings.Contains(l, title) {
				return
			}
		}
		u.key(tea.KeyDown)
	}
	u.t.Fatalf("no row of %q to select:\n%s", title, u.screen())
}

// TestRemoteMode runs the UI with no Feed, as against a worker elsewhere
// (whose deliveries go to a terminal nobody reads): the running tool row,
// the running state and the answer come from asking the session. With the
// workers' blob store readable, the rows of a turn too quick for the
// polls come from its conversation, and every row ends as the
// conversation says; without it, a row seen running is at least not
// shown running once its turn has answered.
func TestRemoteMode(t *testing.T) {
	for _, tc := range []struct {
		name  string
		blobs *store.Blobs
	}{
		{"shared blob store", stack.blobs},
		{"no blob store", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stack.board.use(t, terminal.NewSender(io.Discard))
			workdir := t.TempDir()
			// A remote worker's machine is not the UI's to touch: the
			// root must be there.
			if err := os.Mkdir(filepath.Join(workdir, "workspace"), 0o755); err != nil {
				t.Fatal(err)
			}
			o := tui.Options{Router: stack.router, Client: stack.client, Blobs: tc.blobs, User: "tester",
				Backends: stack.router.Backends, Poll: 200 * time.Millisecond, Workdir: workdir}
			u := start(t, o, 100, 30)
			u.newSession(unique("remote"))
			u.say("sleep: 2")
			u.waitFor("the running tool", 20*time.Second, func(s string) bool {
				return strings.Contains(s, "◐ shell: sleep 2") && activity(s) == "running a tool"
			})
			u.waitFor("the answer, idle, the row no longer running", 20*time.Second, func(s string) bool {
				return strings.Contains(s, "done.") && activity(s) == "idle" &&
					strings.Contains(s, "shell: sleep 2") && !strings.Contains(s, "◐ shell: sleep 2")
			})
			if tc.blobs == nil {
				return
			}
			u.waitText("the row as the conversation ends it", 20*time.Second, "✓ shell: sleep 2")
			u.say("sh: echo remote-quick")
			u.waitFor("the quick turn's row and answer", 20*time.Second, func(s string) bool {
				return strings.Contains(s, "✓ shell: echo remote-quick") && strings.Contains(s, "[shell] exit code: 0") &&
					activity(s) == "idle"
			})
		})
	}
}

// TestStopWhileRunning stops a turn that sleeps 30 s: its row becomes
// cancelled and the session idle long before the sleep would end.
func TestStopWhileRunning(t *testing.T) {
	u := start(t, embedded(t), 100, 30)
	u.newSession(unique("stop"))
	u.say("sleep: 30")
	u.waitFor("the running tool", 20*time.Second, func(s string) bool {
		return strings.Contains(s, "◐ shell: sleep 30") && activity(s) == "running a tool"
	})
	// The running row counts its time: a second or more shows up.
	counting := regexp.MustCompile(`◐ shell: sleep 30  \(running, [1-9][0-9.]*s…\)`)
	u.waitFor("the running row counting", 20*time.Second, counting.MatchString)
	u.say("/stop")
	u.waitFor("the cancelled row, idle", 20*time.Second, func(s string) bool {
		return strings.Contains(s, "⊘ shell: sleep 30") && strings.Contains(s, "cancelled") && activity(s) == "idle"
	})
}

// TestExpandWithoutBlobs expands a tool row in a UI that cannot read the
// blob store: the row says so, whole and legible, and the UI goes on.
func TestExpandWithoutBlobs(t *testing.T) {
	o := embedded(t)
	o.Blobs = nil
	const w, h = 80, 24
	u := start(t, o, w, h)
	u.newSession(unique("noblobs"))
	u.say("sh: echo expand-me")
	u.waitFor("the tool row and the answer", 30*time.Second, func(s string) bool {
		return strings.Contains(s, "✓ shell: echo expand-me") && strings.Contains(s, "done.") && activity(s) == "idle"
	})
	u.key(tea.KeyTab)
	u.key(tea.KeyEnter)
	// The sentence may be wrapped: compare the words.
	words := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	s := u.waitFor("why the output is missing", 10*time.Second, func(s string) bool {
		return strings.Contains(words(s), "the whole output is in the blob store")
	})
	if !strings.Contains(words(s), "(set AGENTBOT_BLOB_URL to the workers' store)") {
		t.Errorf("the reason is cut off: the person cannot read what to do:\n%s", s)
	}
	if strings.Contains(s, "reading the conversation") || strings.Contains(s, "reading…") {
		t.Errorf("the row still reads:\n%s", s)
	}
	fits(t, "the row expanded without blobs", u.view(), w, h)
	// Collapsing, leaving the rows and typing go on.
	u.key(tea.KeyEnter)
	u.waitFor("the row collapsed", 10*time.Second, func(s string) bool {
		return !strings.Contains(words(s), "the whole output is in the blob store")
	})
	u.key(tea.KeyEsc)
	u.say("still here")
	u.waitText("an answer after the expansion", 30*time.Second, "echo: still here")
	if err := u.tm.Quit(); err != nil {
		t.Fatal(err)
	}
	final := u.tm.FinalModel(t, teatest.WithFinalTimeout(10*time.Second))
	if final == nil || !strings.Contains(ansi.Strip(final.View()), "echo: still here") {
		t.Errorf("the final model does not show the transcript")
	}
}
