package slackbot

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slack-go/slack"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
)

// Slack's agent sessions show a thread's session outside it: a status
// (processing, with a stop button, while a turn runs; active; suspended
// once paused; closed once destroyed) and a title. The Sender sets them
// after each delivery (agents.sessions.setStatus, agents.sessions.rename);
// the Inbound turns the stop button and a person's new title into the
// stop and title verbs (agentSessionEventOf). Both are best effort: a
// workspace or app that refuses the methods gets none of it, and
// everything else works as without.

// Lifecycle statuses of a Slack agent session.
const (
	agentProcessing = slack.AgentSessionStatusProcessing
	agentActive     = slack.AgentSessionStatusActive
	agentSuspended  = slack.AgentSessionStatusSuspended
	agentClosed     = slack.AgentSessionStatusClosed
)

const (
	// agentCallTimeout bounds one agents.sessions call: the delivery it
	// follows holds its key's lock meanwhile.
	agentCallTimeout = 5 * time.Second
	// maxAgentThreads is how many threads' agent sessions are remembered.
	maxAgentThreads = 10000

	methodAgentSetStatus = "agents.sessions.setStatus"
	methodAgentRename    = "agents.sessions.rename"
)

// agentStatusOf is the agent session status a delivered m asks for, ""
// for none: a running turn's progress is processing; its final progress
// and its answer (unless the turn was refused, which shows nothing) are
// active; a pause is suspended and a destroy closed.
func agentStatusOf(m agentflow.Outbound) string {
	switch m.Kind {
	case agentflow.OutboundProgress:
		if m.Final {
			return agentActive
		}
		return agentProcessing
	case agentflow.OutboundAnswer:
		if m.Status == agentflow.TurnRefused {
			return ""
		}
		return agentActive
	case agentflow.OutboundLifecycle:
		switch m.Lifecycle {
		case agentflow.LifecyclePaused:
			return agentSuspended
		case agentflow.LifecycleDestroyed:
			return agentClosed
		}
	}
	return ""
}

// agentSessions is what a Sender knows of the agent sessions of its
// threads, and which teams refused the methods. Safe for concurrent use.
type agentSessions struct {
	mu      sync.Mutex
	teams   map[string]*agentTeam
	threads *bot.Recent[*agentThread]
}

// agentTeam is one team's standing with the agents.sessions methods.
type agentTeam struct {
	// probe is held by each call while no call of the team has worked
	// yet, so that a refusal is met once, not by every thread at once.
	probe sync.Mutex
	works atomic.Bool
	// refused is the methods the team refused, with the error.
	mu      sync.Mutex
	refused map[string]string
}

// agentThread is one thread's agent session as this process knows it.
// mu is held across its calls, so they go in the order of the
// deliveries.
type agentThread struct {
	mu sync.Mutex
	// status is the last status set ("" unknown); set also when the call
	// failed, so that a thread Slack refuses is not asked at every edit.
	status string
	// running is the newest turn whose progress said it runs; ended the
	// newest turn that ended (final progress, answer or pause). A late
	// edit of an ended turn, or the answer of a turn overtaken by the
	// next, changes nothing.
	running, ended int
	// title is the title the session has on Slack, as far as known; want
	// the session's own (from its progress and renames), given when the
	// session is made.
	title, want string
}

// agentSessions returns s's agent sessions, made at first use.
func (s *Sender) agentSessions() *agentSessions {
	s.agentsOnce.Do(func() {
		s.agents = &agentSessions{teams: map[string]*agentTeam{}, threads: bot.NewRecent[*agentThread](maxAgentThreads)}
	})
	return s.agents
}

func (a *agentSessions) team(id string) *agentTeam {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.teams[id]
	if t == nil {
		t = &agentTeam{refused: map[string]string{}}
		a.teams[id] = t
	}
	return t
}

func (a *agentSessions) thread(key string) *agentThread {
	a.mu.Lock()
	defer a.mu.Unlock()
	th, ok := a.threads.Get(key)
	if !ok {
		th = &agentThread{}
		a.threads.Put(key, th)
	}
	return th
}

// refuses says the team refused method; a refused setStatus means no
// session can exist, so it stops renames too.
func (t *agentTeam) refuses(method string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, no := t.refused[method]
	_, noStatus := t.refused[methodAgentSetStatus]
	return no || noStatus
}

// next is the status m moves the thread's session to, "" when it stays
// as it is; it notes m's turn.
func (th *agentThread) next(m agentflow.Outbound) string {
	want := agentStatusOf(m)
	if want == "" || th.status == agentClosed {
		return ""
	}
	switch want {
	case agentProcessing:
		if m.Turn <= th.ended {
			return "" // a late edit of a turn that ended
		}
		th.running = max(th.running, m.Turn)
		if th.status == agentProcessing {
			return "" // once per turn, not at every edit
		}
	case agentActive:
		th.ended = max(th.ended, m.Turn)
		if th.running > m.Turn || th.status == agentActive || th.status == agentSuspended {
			return ""
		}
	case agentSuspended:
		th.ended = max(th.ended, m.Turn)
		if th.status == agentSuspended {
			return ""
		}
	}
	return want
}

// agentSession updates the thread's Slack agent session after m: its
// status (see agentStatusOf) or, for a rename, its title. It never fails
// the delivery: errors are logged, and a team that refuses a method is
// not asked again by this Sender.
func (s *Sender) agentSession(ctx context.Context, m agentflow.Outbound) {
	switch m.Kind {
	case agentflow.OutboundProgress, agentflow.OutboundAnswer, agentflow.OutboundLifecycle, agentflow.OutboundTitle:
	default:
		return
	}
	team, channel, threadTS, err := ParseThreadKey(m.Thread)
	if err != nil {
		return
	}
	a := s.agentSessions()
	t := a.team(team)
	if t.refuses(methodAgentSetStatus) {
		return
	}
	th := a.thread(m.Thread)
	th.mu.Lock()
	defer th.mu.Unlock()
	if m.Title != "" {
		th.want = m.Title // progress carries the session's title, a rename the new one
	}
	var method string
	var call func(context.Context) error
	if m.Kind == agentflow.OutboundTitle {
		if m.Title == "" || m.Title == th.title || t.refuses(methodAgentRename) {
			return
		}
		title := m.Title
		method = methodAgentRename
		call = func(ctx context.Context) error {
			res, err := s.api.RenameAgentSessionContext(ctx, slack.AgentSessionRenameParameters{ChannelID: channel, ThreadTS: threadTS, Title: title})
			if err == nil {
				th.title = firstOf(res.Title, title)
			}
			return err
		}
	} else {
		status := th.next(m)
		if status == "" {
			return
		}
		th.status = status
		// The title applies only when the call makes the session.
		title := th.want
		method = methodAgentSetStatus
		call = func(ctx context.Context) error {
			res, err := s.api.SetAgentSessionStatusContext(ctx, slack.AgentSessionSetStatusParameters{
				Status: status, ChannelID: channel, ThreadTS: threadTS, Title: title})
			if err == nil && res.Title != "" {
				th.title = res.Title
			}
			return err
		}
	}
	// Until a call of the team has worked, they go one at a time: a team
	// that refuses the method is asked once.
	if !t.works.Load() {
		t.probe.Lock()
		defer t.probe.Unlock()
		if t.refuses(method) {
			return
		}
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), agentCallTimeout)
	defer cancel()
	err = call(cctx)
	switch {
	case err == nil:
		t.works.Store(true)
	case isSlackError(err, statusRefusals...):
		t.mu.Lock()
		t.refused[method] = slackError(err)
		t.mu.Unlock()
		s.log.Warn("slack refused "+method+"; this team's threads get no agent session status or title from this process",
			"team", team, "error", s.redact(err))
	default:
		// The thread's own trouble (not an agent session, gone, not
		// in the channel) or Slack's: this call only.
		s.log.Debug(method+" failed", "thread", m.Thread, "key", m.Key, "error", s.redact(err))
	}
}

// agentSessionEventOf maps a person's action on a thread's agent session
// to the command it stands for, from that person, so that it goes through
// the Router as if typed (same checks, refusals, audit and
// de-duplication by event ID): agent_session_stopped (the stop button) is
// "stop", agent_session_title_changed is "title <new title>". A title
// change that changes nothing, or that is the app's own, is dropped: it
// would only come back as a rename. ok is false for events the bot
// ignores.
func agentSessionEventOf(id *identity, env envelope) (bot.Event, bool) {
	m := env.Event
	// Slack's own IDs only: they become the thread key.
	if !validChannel(m.Channel) || !validTS(m.ThreadTS) || m.User == "" || m.User == id.user || m.BotID != "" {
		return bot.Event{}, false
	}
	ev := bot.Event{ID: env.EventID, Platform: Platform, Kind: bot.KindCommand, Channel: m.Channel, User: m.User,
		ThreadKey: ThreadKey(id.team, m.Channel, m.ThreadTS), ThreadStarted: tsTime(m.ThreadTS)}
	switch m.Type {
	case "agent_session_stopped":
		ev.Text = string(bot.VerbStop)
	case "agent_session_title_changed":
		title := strings.Join(strings.Fields(m.Title), " ")
		if title == "" || title == strings.Join(strings.Fields(m.PreviousTitle), " ") {
			return bot.Event{}, false
		}
		// In the grammar's own form, quoted where needed, so that no
		// word of the title is read as anything but the title.
		ev.Text = bot.Command{Verb: bot.VerbTitle, Title: title}.String()
	default:
		return bot.Event{}, false
	}
	return ev, true
}
