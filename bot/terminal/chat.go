package terminal

import (
	"bufio"
	"cmp"
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

// Chat is the terminal's inbound side: it reads lines and hands them to the
// bot core's Router as events of thread "term:<name>" — plain lines as
// messages to the session (starting it if needed), "/verb ..." lines as
// commands of the grammar (see bot.Help) — plus the terminal's own
// "/use <thread>" to change thread and "/quit".
type Chat struct {
	// Router routes events; Client waits for answers.
	Router *bot.Router
	Client *agentflow.Client
	// In and Out are the terminal.
	In  io.Reader
	Out io.Writer
	// User names the person typing (the requester of sessions).
	User string
	// Thread is the first thread's name (default "main").
	Thread string
	// PrintAnswers prints each turn's answer when it returns; leave it
	// off when a Sender on the same terminal already prints them (the
	// embedded default, where the worker runs in-process).
	PrintAnswers bool
	// Answers, when set, tells when a message was answered: the Sender
	// printing the answers in this process (the embedded default). The
	// chat then waits on it and asks Temporal nothing. Nil: it asks the
	// session every PollInterval.
	Answers Answers
	// PollInterval is how often the chat asks a session whether a
	// message was answered, without Answers (default 500 ms); with
	// Answers, it asks only every 10 s, to notice a session that ended
	// without answering.
	PollInterval time.Duration

	mu       sync.Mutex
	seq      int
	thread   string
	inflight sync.WaitGroup // messages sent and not yet answered
}

// Answers is what Chat needs of a Sender in the same process (*Sender).
type Answers interface {
	// Answered returns a channel closed once message id was answered.
	Answered(id string) <-chan struct{}
	// Forget drops the channel of id.
	Forget(id string)
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
	defer c.inflight.Wait()
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
			c.message(ctx, line)
		}
	}
}

// message sends a line in order (the router's update returns at once), then
// waits for the answer in the background so /stop stays typeable.
func (c *Chat) message(ctx context.Context, line string) {
	thread, id := c.next()
	ev := bot.Event{ID: id, Platform: "term", Kind: bot.KindMention, ThreadKey: thread,
		User: c.User, UserName: c.User, Text: line, MessageID: id}
	if err := c.Router.Handle(ctx, ev, c.replier(thread)); err != nil {
		c.printf("! %v\n", err)
		return
	}
	c.inflight.Add(1)
	go func() {
		defer c.inflight.Done()
		res, err := c.wait(ctx, thread, id)
		switch {
		case err != nil && ctx.Err() == nil:
			c.printf("[%s] ! %s\n", strings.TrimPrefix(thread, "term:"), sayError(err))
		case err == nil && c.PrintAnswers && res.Result != nil:
			c.printf("[%s] agent:%s\n", strings.TrimPrefix(thread, "term:"), answerText(res.Result.Answer))
		}
	}()
}

// wait waits until message id of thread was answered: pushed by Answers
// when set (with one query every 10 s, for a session that ended without
// answering), else asked of the session every PollInterval.
func (c *Chat) wait(ctx context.Context, thread, id string) (agentflow.MessageResult, error) {
	if c.Answers == nil {
		return c.Client.WaitEvery(ctx, thread, id, cmp.Or(c.PollInterval, defaultPoll))
	}
	answered := c.Answers.Answered(id)
	defer c.Answers.Forget(id)
	tick := time.NewTicker(slowPoll)
	defer tick.Stop()
	for {
		select {
		case <-answered:
			return agentflow.MessageResult{}, nil
		case <-ctx.Done():
			return agentflow.MessageResult{}, ctx.Err()
		case <-tick.C:
			if res, done, err := c.Client.Answered(ctx, thread, id); done || err != nil {
				return res, err
			}
		}
	}
}

// Intervals of wait.
const (
	defaultPoll = 500 * time.Millisecond
	slowPoll    = 10 * time.Second
)

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

func (c *Chat) printf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintf(c.Out, format, args...)
}

func (c *Chat) replier(thread string) bot.Replier {
	return bot.ReplierFunc(func(ctx context.Context, r bot.Response) error {
		text := Plain(r.Text)
		if r.WebUI != "" {
			text += "\n" + r.WebUI
		}
		c.printf("%s\n", text)
		return nil
	})
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
	case "help":
		defer c.printf("terminal only: /use <thread>, /quit\n")
	}
	switch bot.Verb(word) {
	case bot.VerbStop, bot.VerbStatus, bot.VerbList, bot.VerbHelp, bot.VerbBackends,
		bot.VerbApprove, bot.VerbDeny, bot.VerbApprovals:
		// These answer at once, even while a turn runs: the turn that
		// waits for an approval waits for this very command, and a
		// stricter mode applies to the running turn's next command.
	default:
		// What changes the session applies after the messages typed
		// before it, as a person reading the terminal expects.
		c.inflight.Wait()
	}
	thread, id := c.next()
	ev := bot.Event{ID: id, Platform: "term", Kind: bot.KindCommand, ThreadKey: thread,
		User: c.User, UserName: c.User, Text: line}
	if err := c.Router.Handle(ctx, ev, c.replier(thread)); err != nil {
		c.printf("! %v\n", err)
	}
	return false
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
