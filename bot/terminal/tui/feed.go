package tui

import (
	"context"
	"io"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot/terminal"
)

// Feed is the terminal's chat sender when the worker runs in this process
// (the embedded default): it hands the sessions' outbound messages to the
// UI instead of printing them. It implements agentflow.ChatSender and
// agentflow.ThreadCreator, naming fork threads as the line terminal does,
// so either may open a session the other made.
//
// Deliver never waits for the screen: when the UI is behind by
// FeedBuffer messages, the oldest progress edits are what it misses (the
// UI also asks the session every second), never an answer or a notice,
// which wait for room as long as ctx allows.
type Feed struct {
	ch      chan agentflow.Outbound
	threads *terminal.Sender
}

// FeedBuffer is how many deliveries a Feed holds for the UI.
const FeedBuffer = 256

// NewFeed returns a Feed.
func NewFeed() *Feed {
	return &Feed{ch: make(chan agentflow.Outbound, FeedBuffer), threads: terminal.NewSender(io.Discard)}
}

// Deliver hands m to the UI.
func (f *Feed) Deliver(ctx context.Context, m agentflow.Outbound) error {
	if m.Kind == agentflow.OutboundProgress && !m.Final {
		select {
		case f.ch <- m:
		default: // a newer edit, or the UI's own polling, shows it
		}
		return nil
	}
	select {
	case f.ch <- m:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// CreateThread names a fork's thread (see terminal.Sender.CreateThread).
func (f *Feed) CreateThread(ctx context.Context, sourceThread, title, requestID string) (string, error) {
	return f.threads.CreateThread(ctx, sourceThread, title, requestID)
}

// C is what the UI reads.
func (f *Feed) C() <-chan agentflow.Outbound { return f.ch }
