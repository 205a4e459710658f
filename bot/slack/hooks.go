package slackbot

import (
	"context"

	"github.com/agentbot/agentbot/agentflow"
)

// after runs, once m is delivered, what shows the session's state outside
// its thread: Slack's agent session (agentsession.go) and the App Home of
// the session's owner (home.go). Neither may fail the delivery: their
// errors are logged where they happen.
func (s *Sender) after(ctx context.Context, m agentflow.Outbound) {
	s.agentSession(ctx, m)
	s.homeChanged(ctx, m)
}
