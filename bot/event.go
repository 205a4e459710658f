package bot

import (
	"context"
	"time"

	"github.com/agentbot/agentbot/agentflow"
)

// Kind says what an inbound event is.
type Kind string

// Event kinds.
const (
	// KindMessage is plain chat in a thread: it goes to the thread's
	// session if it has one, and is ignored otherwise.
	KindMessage Kind = "message"
	// KindMention addresses the bot: in a channel it starts a session in
	// a new thread (NewThreadKey); in a thread it is a message to the
	// thread's session, starting one if there is none. A mention whose text
	// is a command (see Trigger) should be sent as KindCommand.
	KindMention Kind = "mention"
	// KindCommand is an explicit command: a slash command, "!agent ...",
	// "@bot <verb> ...", a button or a shortcut. Text is the command text
	// ("switch docker").
	KindCommand Kind = "command"
)

// Event is one inbound thing from a chat platform, in the core's terms.
type Event struct {
	// ID is the platform's ID of this delivery (Slack's event_id, a slash
	// command's trigger_id): a retried delivery has the same ID and is
	// dropped. Empty means no de-duplication.
	ID       string
	Platform string // "slack", "discord", "term"
	Kind     Kind
	// ThreadKey is the thread the event happened in, if it is one that can
	// hold a session ("slack:T1:C1:1712.5"); empty for a channel-level
	// slash command or mention.
	ThreadKey string
	// NewThreadKey is where a session started by this event lives when
	// ThreadKey is empty (a mention in a channel starts the thread under
	// its own message).
	NewThreadKey string
	// Channel is the channel ID, for allowlists.
	Channel string
	// User is the platform user ID; UserName a display name for authorship.
	User, UserName string
	// Roles are the user's roles (Discord), for allowlists.
	Roles []string
	// Text is the message or the command text, trigger removed.
	Text string
	// MessageID is the platform's ID of the message (Slack ts): the
	// session uses it to run a retried message only once.
	MessageID string
	// Files were shared with the message; the session copies them into
	// the workspace.
	Files []agentflow.InboundFile
	// Retry says the platform delivers this event again because its first
	// delivery may not have been handled: a retry that finds the event only
	// claimed (not yet handed to Temporal) is handled all the same.
	Retry bool
	// ThreadStarted is when the thread's root message was posted, where
	// the platform says (Slack's thread_ts, a Discord thread's ID): a reply
	// in a thread that young may be racing the mention that starts its
	// session, and is not dropped for want of one at once.
	ThreadStarted time.Time
}

// Response is what the router answers the person who sent an event.
type Response struct {
	// Text is the answer (markdown-ish; the platform renders it).
	Text string
	// Session, when set, is the session the answer is about: platforms
	// show it with controls (backend select, Fork, Stop, Done buttons).
	Session *agentflow.SessionView
	// Private asks for an answer only the person sees where the platform
	// can (refusals, errors, help).
	Private bool
	// WebUI is a link to the session in the Temporal Web UI, when known.
	WebUI string
}

// Replier answers the person who sent an event, in the place it came from.
type Replier interface {
	Reply(ctx context.Context, r Response) error
}

// ReplierFunc adapts a function to Replier.
type ReplierFunc func(ctx context.Context, r Response) error

// Reply calls f.
func (f ReplierFunc) Reply(ctx context.Context, r Response) error { return f(ctx, r) }
