package tui

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/agentflow/llm"
	"github.com/agentbot/agentbot/bot"
	"github.com/agentbot/agentbot/store"
)

// Options configure the UI.
type Options struct {
	// Router handles what the person types, as for every chat; Client
	// answers what the UI shows (sessions, their state and transcript).
	Router *bot.Router
	Client *agentflow.Client
	// Feed, when set, is the chat sender of the worker in this process:
	// answers and tool rows are pushed. Nil (a worker elsewhere): the UI
	// asks the sessions every Poll.
	Feed *Feed
	// Blobs is the blob store the sessions' workers write, when this
	// process can read it (the embedded default): expanded tool rows then
	// show the whole output, and a resumed session its tool calls. Nil:
	// the turns' summaries only.
	Blobs *store.Blobs
	// User is the person typing (the owner of the sessions they start).
	User string
	// Backends are the backends that run here, Unavailable those that do
	// not, with why (the backend picker greys them out).
	Backends    []string
	Unavailable map[string]string
	// WebUI is the Temporal Web UI's address ("" when there is none);
	// Namespace the sessions' namespace (default "default").
	WebUI     string
	Namespace string
	// Poll is how often the UI asks the open session for its state (and,
	// without Feed, for answers): at most a second (the default).
	Poll time.Duration
	// Workdir makes the root a person types for the local backend
	// absolute ("./workspace" is the default); empty: the process's
	// working directory.
	Workdir string
	// Now is the clock (tests); nil: time.Now.
	Now func() time.Time
}

func (o Options) poll() time.Duration {
	if o.Poll <= 0 || o.Poll > time.Second {
		return time.Second
	}
	return o.Poll
}

func (o Options) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

// Messages the commands of core send back to the model.
type (
	listMsg struct {
		entries []agentflow.SessionEntry
		err     error
	}
	stateMsg struct {
		thread string
		view   agentflow.SessionView
		err    error
	}
	historyMsg struct {
		thread string
		items  []item
		err    error
	}
	replyMsg struct {
		thread string
		text   string
		err    error
	}
	sentMsg struct {
		thread, id string
		replies    string // what the router said, if anything
		err        error
	}
	answeredMsg struct {
		thread, id string
		res        agentflow.MessageResult
		err        error
	}
	conversationMsg struct {
		thread string
		msgs   []llm.Message
		err    error
	}
	// turnToolsMsg holds the tool calls of a turn that ended between two
	// looks at the session (no Feed), read from the conversation.
	turnToolsMsg struct {
		thread string
		turn   int
		rows   []*toolRow
	}
	feedMsg agentflow.Outbound
	tickMsg time.Time
)

// core runs the UI's requests to the bot core, each in a tea.Cmd: nothing
// the UI asks ever blocks the keyboard.
type core struct {
	ctx context.Context
	o   Options
	seq atomic.Int64
}

// tenantThread is any thread of the terminal's tenant: sessions are
// listed per tenant, and every terminal thread is of the one tenant.
const tenantThread = "term:main"

func (c *core) list() tea.Cmd {
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
		defer cancel()
		entries, err := c.o.Client.List(ctx, tenantThread)
		return listMsg{entries: entries, err: err}
	}
}

func (c *core) state(thread string) tea.Cmd {
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
		defer cancel()
		v, err := c.o.Client.State(ctx, thread)
		return stateMsg{thread: thread, view: v, err: err}
	}
}

// history reads what the thread's session said so far: the whole
// conversation when the blob store is readable here, else the turns'
// summaries.
func (c *core) history(thread string) tea.Cmd {
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(c.ctx, 20*time.Second)
		defer cancel()
		if c.o.Blobs != nil {
			msgs, err := c.o.Client.Conversation(ctx, c.o.Blobs, thread, c.o.User)
			if err == nil {
				return historyMsg{thread: thread, items: conversationItems(msgs)}
			}
		}
		turns, err := c.o.Client.Transcript(ctx, thread, c.o.User)
		if err != nil {
			return historyMsg{thread: thread, err: err}
		}
		var items []item
		for _, t := range turns {
			items = append(items, item{kind: itemUser, text: t.User, turn: t.Turn},
				item{kind: itemAnswer, text: t.Answer, turn: t.Turn})
		}
		return historyMsg{thread: thread, items: items}
	}
}

func (c *core) conversation(thread string) tea.Cmd {
	return func() tea.Msg {
		if c.o.Blobs == nil {
			return conversationMsg{thread: thread, err: errNoBlobs}
		}
		ctx, cancel := context.WithTimeout(c.ctx, 20*time.Second)
		defer cancel()
		msgs, err := c.o.Client.Conversation(ctx, c.o.Blobs, thread, c.o.User)
		return conversationMsg{thread: thread, msgs: msgs, err: err}
	}
}

// turnTools reads the tool calls of the conversation's last turn.
func (c *core) turnTools(thread string, turn int) tea.Cmd {
	if c.o.Blobs == nil {
		return nil
	}
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(c.ctx, 20*time.Second)
		defer cancel()
		msgs, err := c.o.Client.Conversation(ctx, c.o.Blobs, thread, c.o.User)
		if err != nil {
			return nil
		}
		items := conversationItems(msgs)
		last := 0
		for i, it := range items {
			if it.kind == itemUser {
				last = i
			}
		}
		var rows []*toolRow
		for _, it := range items[last:] {
			if it.tool != nil {
				rows = append(rows, it.tool)
			}
		}
		return turnToolsMsg{thread: thread, turn: turn, rows: rows}
	}
}

var errNoBlobs = fmt.Errorf("the whole output is in the blob store, which this process does not read (set AGENTBOT_BLOB_URL to the workers' store)")

func (c *core) nextID() string {
	return fmt.Sprintf("tui-%d-%d", time.Now().UnixNano(), c.seq.Add(1))
}

// send hands a message to the thread's session (starting it when needed).
func (c *core) send(thread, id, text string) tea.Cmd {
	return func() tea.Msg {
		ev := bot.Event{ID: id, Platform: "term", Kind: bot.KindMention, ThreadKey: thread,
			User: c.o.User, UserName: c.o.User, Text: text, MessageID: id}
		var replies []string
		err := c.o.Router.Handle(c.ctx, ev, collect(&replies))
		return sentMsg{thread: thread, id: id, replies: strings.Join(replies, "\n"), err: err}
	}
}

// command runs a command line of the grammar ("switch docker") in thread.
func (c *core) command(thread, line string) tea.Cmd {
	return func() tea.Msg {
		ev := bot.Event{ID: c.nextID(), Platform: "term", Kind: bot.KindCommand, ThreadKey: thread,
			User: c.o.User, UserName: c.o.User, Text: line}
		var replies []string
		err := c.o.Router.Handle(c.ctx, ev, collect(&replies))
		return replyMsg{thread: thread, text: strings.Join(replies, "\n"), err: err}
	}
}

// answered asks the session whether message id was answered (no Feed).
func (c *core) answered(thread, id string) tea.Cmd {
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
		defer cancel()
		res, done, err := c.o.Client.Answered(ctx, thread, id)
		if !done && err == nil {
			return nil
		}
		return answeredMsg{thread: thread, id: id, res: res, err: err}
	}
}

func (c *core) feed() tea.Cmd {
	if c.o.Feed == nil {
		return nil
	}
	return func() tea.Msg {
		select {
		case m := <-c.o.Feed.C():
			return feedMsg(m)
		case <-c.ctx.Done():
			return nil
		}
	}
}

func (c *core) tick() tea.Cmd {
	return tea.Tick(c.o.poll(), func(t time.Time) tea.Msg { return tickMsg(t) })
}

// collect gathers the router's replies.
func collect(into *[]string) bot.Replier {
	return bot.ReplierFunc(func(ctx context.Context, r bot.Response) error {
		if strings.TrimSpace(r.Text) != "" {
			*into = append(*into, r.Text)
		}
		return nil
	})
}
