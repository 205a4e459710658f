package terminal

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
)

// Chat is the terminal's inbound side: it reads lines, sends plain lines to
// the current thread's session as messages and runs "/verb ..." lines as
// commands of the bot grammar (see bot.Help), plus "/use <thread>" to change
// thread and "/quit".
type Chat struct {
	// Client reaches the sessions.
	Client *agentflow.Client
	// In and Out are the terminal.
	In  io.Reader
	Out io.Writer
	// User names the person typing (the requester of sessions).
	User string
	// Thread is the first thread's name (default "main").
	Thread string
	// Backends are the backend names the grammar accepts; DefaultBackend
	// is used by new sessions.
	Backends       []string
	DefaultBackend string
	// Options are the settings of new sessions.
	Options agentflow.AgentOptions
	// PrintAnswers prints each turn's answer when it returns; leave it
	// off when a Sender on the same terminal already prints them (the
	// embedded default, where the worker runs in-process).
	PrintAnswers bool

	mu       sync.Mutex
	seq      int
	thread   string
	inflight sync.WaitGroup // messages sent and not yet answered
}

// Run reads lines until In ends, ctx is done or "/quit", and waits for the
// turns it started.
func (c *Chat) Run(ctx context.Context) error {
	c.thread = "term:" + orDefault(c.Thread, "main")
	lines := make(chan string)
	readErr := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(c.In)
		sc.Buffer(make([]byte, 64<<10), agentflow.MaxMessageBytes+1024)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
		readErr <- sc.Err()
		close(lines)
	}()
	c.printf("agentbot terminal — thread %q. Type a message, or /help.\n", c.name())
	var turns sync.WaitGroup
	defer turns.Wait()
	for {
		select {
		case <-ctx.Done():
			return nil
		case line, ok := <-lines:
			if !ok {
				return <-readErr
			}
			line = strings.TrimSpace(line)
			if line == "" {
				continue
			}
			if strings.HasPrefix(line, "/") {
				if quit := c.command(ctx, strings.TrimPrefix(line, "/")); quit {
					return nil
				}
				continue
			}
			// Send in order (the update returns at once), then wait for
			// the answer in the background so /stop stays typeable.
			thread, id := c.next()
			if _, err := c.Client.Send(ctx, c.start(thread), agentflow.MessageRequest{ID: id, Author: c.User, Text: line}); err != nil {
				c.printf("[%s] ! %s\n", strings.TrimPrefix(thread, "term:"), sayError(err))
				continue
			}
			turns.Add(1)
			c.inflight.Add(1)
			go func() {
				defer turns.Done()
				defer c.inflight.Done()
				c.wait(ctx, thread, id)
			}()
		}
	}
}

func (c *Chat) next() (thread, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	return c.thread, fmt.Sprintf("term-%d-%d", time.Now().UnixNano(), c.seq)
}

func (c *Chat) name() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.TrimPrefix(c.thread, "term:")
}

func (c *Chat) start(thread string) agentflow.AgentInput {
	return agentflow.AgentInput{ThreadKey: thread, Backend: c.DefaultBackend, Requester: c.User,
		Title: strings.TrimPrefix(thread, "term:"), Options: c.Options}
}

func (c *Chat) wait(ctx context.Context, thread, id string) {
	res, err := c.Client.Wait(ctx, thread, id)
	if err != nil {
		if ctx.Err() == nil {
			c.printf("[%s] ! %s\n", strings.TrimPrefix(thread, "term:"), sayError(err))
		}
		return
	}
	if c.PrintAnswers && res.Result != nil {
		c.printf("[%s] agent: %s\n", strings.TrimPrefix(thread, "term:"), res.Result.Answer)
	}
}

func (c *Chat) printf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintf(c.Out, format, args...)
}

// command runs one command line; it reports whether to quit.
func (c *Chat) command(ctx context.Context, line string) bool {
	word, rest, _ := strings.Cut(line, " ")
	switch word {
	case "quit", "exit":
		return true
	case "use":
		name := strings.TrimSpace(rest)
		if name == "" {
			c.printf("usage: /use <thread>\n")
			return false
		}
		c.mu.Lock()
		c.thread = "term:" + strings.TrimPrefix(name, "term:")
		c.mu.Unlock()
		c.printf("now in thread %q\n", name)
		return false
	}
	cmd, err := bot.Parse(line, c.Backends)
	if err != nil {
		c.printf("! %v\n", err)
		return false
	}
	switch cmd.Verb {
	case bot.VerbStop, bot.VerbStatus, bot.VerbList, bot.VerbHelp, bot.VerbBackends:
		// These answer at once, even while a turn runs.
	default:
		// What changes the session applies after the messages typed
		// before it, as a person reading the terminal expects.
		c.inflight.Wait()
	}
	c.mu.Lock()
	thread := c.thread
	c.mu.Unlock()
	out, err := c.run(ctx, thread, cmd)
	if err != nil {
		c.printf("! %s\n", sayError(err))
		return false
	}
	if out != "" {
		c.printf("%s\n", out)
	}
	return false
}

func (c *Chat) run(ctx context.Context, thread string, cmd bot.Command) (string, error) {
	cl := c.Client
	switch cmd.Verb {
	case bot.VerbHelp:
		return bot.Help() + "\nterminal only: /use <thread>, /quit", nil
	case bot.VerbBackends:
		return "backends: " + strings.Join(c.Backends, ", "), nil
	case bot.VerbNew:
		in := c.start(thread)
		if cmd.Backend != "" {
			in.Backend = cmd.Backend
		}
		if cmd.Title != "" {
			in.Title = cmd.Title
		}
		v, err := cl.Start(ctx, in)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("session %q on %s", v.Title, v.Backend), nil
	case bot.VerbSwitch:
		r, err := cl.Switch(ctx, thread, agentflow.SwitchRequest{Backend: cmd.Backend, Root: cmd.Root, By: c.User})
		if err != nil {
			return "", err
		}
		return r.Message, nil
	case bot.VerbFork:
		c.mu.Lock()
		c.seq++
		reqID := fmt.Sprintf("term-fork-%d-%d", time.Now().UnixNano(), c.seq)
		c.mu.Unlock()
		r, err := cl.Fork(ctx, agentflow.ForkRequest{SourceThread: thread, Backend: cmd.Backend, Title: cmd.Title,
			Requester: c.User, RequestID: reqID})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("forked into %q (%s) — /use %s", r.Title, r.Backend, strings.TrimPrefix(r.ThreadKey, "term:")), nil
	case bot.VerbTitle:
		v, err := cl.Title(ctx, thread, agentflow.TitleRequest{Title: cmd.Title, By: c.User})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("title: %q", v.Title), nil
	case bot.VerbStop:
		r, err := cl.Stop(ctx, thread, agentflow.StopRequest{By: c.User})
		if err != nil {
			return "", err
		}
		if !r.Stopped {
			return "nothing was running", nil
		}
		return fmt.Sprintf("stopped turn %d", r.Turn), nil
	case bot.VerbDone:
		if _, err := cl.Pause(ctx, thread, agentflow.PauseRequest{By: c.User}); err != nil {
			return "", err
		}
		return "paused: the workspace is saved and the sandbox stopped; the next message resumes it", nil
	case bot.VerbDestroy:
		if _, err := cl.Destroy(ctx, thread, agentflow.DestroyRequest{By: c.User}); err != nil {
			return "", err
		}
		return "destroyed", nil
	case bot.VerbStatus:
		v, err := cl.State(ctx, thread)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%q: %s on %s (sandbox %s), turn %d, %d queued, tokens in/out %d/%d, forks %d",
			v.Title, v.Status, v.Backend, orDefault(v.SandboxID, "none yet"), v.Turn, v.Queued,
			v.Usage.InputTokens, v.Usage.OutputTokens, v.Forks), nil
	case bot.VerbList:
		l, err := cl.List(ctx, thread)
		if err != nil {
			return "", err
		}
		var b strings.Builder
		for _, e := range l {
			fmt.Fprintf(&b, "%-24s %-10s %-8s %q\n", strings.TrimPrefix(e.ThreadKey, "term:"), e.Status, e.Backend, e.Title)
		}
		if b.Len() == 0 {
			return "no sessions yet", nil
		}
		return strings.TrimRight(b.String(), "\n"), nil
	case bot.VerbExport:
		t, err := cl.Transcript(ctx, thread)
		if err != nil {
			return "", err
		}
		var b strings.Builder
		for _, s := range t {
			fmt.Fprintf(&b, "--- turn %d (%s)\nuser: %s\nagent: %s\n", s.Turn, s.Status, s.User, s.Answer)
		}
		return b.String(), nil
	}
	return "", fmt.Errorf("%s is not available in the terminal", cmd.Verb)
}

func sayError(err error) string {
	switch {
	case errors.Is(err, agentflow.ErrNoSession):
		return "no session in this thread yet: send a message or /new"
	case errors.Is(err, agentflow.ErrDestroyed):
		return agentflow.ErrDestroyedText
	}
	return err.Error()
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
