package fakeslack

import (
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"
)

// Slack's agent sessions: the app side is agents.sessions.setStatus and
// agents.sessions.rename; the user side is the stop button and the title
// of a session, which raise agent_session_stopped and
// agent_session_title_changed (StopAgentSession, RetitleAgentSession).
// Sessions here are thread-based, the only kind the fake has: one per
// thread root, made by the first setStatus on it.

// The lifecycle statuses agents.sessions.setStatus accepts.
const (
	AgentStatusActive     = "active"
	AgentStatusProcessing = "processing"
	AgentStatusSuspended  = "suspended"
	AgentStatusClosed     = "closed"
)

// maxAgentTitleRunes is the longest title of an agent session.
const maxAgentTitleRunes = 200

// The Web API methods of agent sessions.
const (
	methodAgentSetStatus = "agents.sessions.setStatus"
	methodAgentRename    = "agents.sessions.rename"
)

func init() {
	apiMethods[methodAgentSetStatus] = apiMethod{botToken, (*Server).agentsSessionsSetStatus}
	apiMethods[methodAgentRename] = apiMethod{botToken, (*Server).agentsSessionsRename}
}

// AgentSession is an agent session as the fake holds it.
type AgentSession struct {
	// Channel and ThreadTS are the thread the session is scoped to (its
	// root message).
	Channel, ThreadTS string
	// Status is the lifecycle status last set: AgentStatusActive,
	// AgentStatusProcessing, AgentStatusSuspended or AgentStatusClosed.
	Status string
	// Title is the session's title; empty when it has none.
	Title string
	// Initiator is the initiator_user_id given when the session was made.
	Initiator string
}

// AgentSessionCall is one accepted agents.sessions.setStatus or
// agents.sessions.rename call.
type AgentSessionCall struct {
	// Method is "agents.sessions.setStatus" or "agents.sessions.rename".
	Method string
	// Channel and ThreadTS are the session's thread (its root).
	Channel, ThreadTS string
	// Status is what setStatus set; empty for rename.
	Status string
	// Title is the title argument as sent (setStatus's applies only when
	// it made the session).
	Title string
}

// agentState is a Server's agent sessions, guarded by Server.mu.
type agentState struct {
	sessions map[msgKey]*AgentSession
	calls    []AgentSessionCall
}

// agentsLocked returns s's agent sessions, made at first use; s.mu is
// held.
func (s *Server) agentsLocked() *agentState {
	if s.agents == nil {
		s.agents = &agentState{sessions: map[msgKey]*AgentSession{}}
	}
	return s.agents
}

// AgentSession returns the agent session of the thread threadTS (a root or
// a reply in it), and false when the thread has none.
func (s *Server) AgentSession(channel, threadTS string) (AgentSession, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if root, ok := s.resolveThreadLocked(channel, threadTS); ok {
		threadTS = root
	}
	a := s.agentsLocked().sessions[msgKey{channel, threadTS}]
	if a == nil {
		return AgentSession{}, false
	}
	return *a, true
}

// AgentSessionCalls returns the accepted agents.sessions.setStatus and
// agents.sessions.rename calls, in order. Calls counts every call,
// refused ones included.
func (s *Server) AgentSessionCalls() []AgentSessionCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.agentsLocked().calls)
}

// agentThreadLocked checks the channel_id and thread_ts arguments of an
// agents.sessions method and returns the thread's root: both are required
// (the fake has no session channels, whose sessions take no thread_ts),
// the channel must hold messages and the thread must be in it.
func (s *Server) agentThreadLocked(p params) (msgKey, *apiError) {
	ch, ts := p.get("channel_id"), p.get("thread_ts")
	if !s.channelKnownLocked(ch) {
		return msgKey{}, errCode("channel_not_found")
	}
	root, ok := s.resolveThreadLocked(ch, ts)
	if !ok {
		return msgKey{}, errCode("thread_not_found")
	}
	return msgKey{ch, root}, nil
}

// requireArgs answers invalid_arguments naming the arguments of keys that
// are absent or empty.
func requireArgs(p params, keys ...string) *apiError {
	var missing []string
	for _, k := range keys {
		if p.get(k) == "" {
			missing = append(missing, "missing required field: "+k)
		}
	}
	if len(missing) > 0 {
		return &apiError{code: "invalid_arguments", errors: missing}
	}
	return nil
}

// agentsSessionsSetStatus sets a thread's agent session status, making the
// session (with title and initiator_user_id, if given) when the thread has
// none, with the argument checks Slack documents: status is one of active,
// processing, suspended and closed; channel_id and thread_ts are required;
// a title is at most 200 characters. It answers the session's status,
// the app's own (agent_status, the same here: the fake has one agent) and
// title.
func (s *Server) agentsSessionsSetStatus(p params) (map[string]any, *apiError) {
	if aerr := requireArgs(p, "status", "channel_id", "thread_ts"); aerr != nil {
		return nil, aerr
	}
	status, title := p.get("status"), p.get("title")
	switch status {
	case AgentStatusActive, AgentStatusProcessing, AgentStatusSuspended, AgentStatusClosed:
	default:
		return nil, &apiError{code: "invalid_arguments",
			errors: []string{"status must be one of active, processing, suspended, closed [json-pointer:/status]"}}
	}
	if utf8.RuneCountInString(title) > maxAgentTitleRunes {
		return nil, &apiError{code: "invalid_arguments", errors: []string{"title must be at most 200 characters [json-pointer:/title]"}}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k, aerr := s.agentThreadLocked(p)
	if aerr != nil {
		return nil, aerr
	}
	st := s.agentsLocked()
	a := st.sessions[k]
	if a == nil {
		a = &AgentSession{Channel: k.channel, ThreadTS: k.ts, Title: title, Initiator: p.get("initiator_user_id")}
		st.sessions[k] = a
	}
	a.Status = status
	st.calls = append(st.calls, AgentSessionCall{Method: methodAgentSetStatus, Channel: k.channel, ThreadTS: k.ts, Status: status, Title: title})
	out := map[string]any{"status": a.Status, "agent_status": a.Status}
	if a.Title != "" {
		out["title"] = a.Title
	}
	return out, nil
}

// agentsSessionsRename sets the title of a thread's agent session, with
// the argument checks Slack documents: channel_id, thread_ts and a title
// of 1 to 200 characters are required; a thread with no session is
// session_not_found. As on Slack, the app's own rename raises no
// agent_session_title_changed.
func (s *Server) agentsSessionsRename(p params) (map[string]any, *apiError) {
	if aerr := requireArgs(p, "channel_id", "thread_ts", "title"); aerr != nil {
		return nil, aerr
	}
	title := p.get("title")
	if utf8.RuneCountInString(title) > maxAgentTitleRunes {
		return nil, &apiError{code: "invalid_arguments", errors: []string{"title must be 1 to 200 characters [json-pointer:/title]"}}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k, aerr := s.agentThreadLocked(p)
	if aerr != nil {
		return nil, aerr
	}
	st := s.agentsLocked()
	a := st.sessions[k]
	if a == nil {
		return nil, errCode("session_not_found")
	}
	a.Title = title
	st.calls = append(st.calls, AgentSessionCall{Method: methodAgentRename, Channel: k.channel, ThreadTS: k.ts, Title: title})
	return map[string]any{"title": a.Title}, nil
}

// ErrNoStopButton is StopAgentSession's error for a thread whose agent
// session is not processing: Slack shows its stop button only then.
var ErrNoStopButton = errors.New("fakeslack: the thread's agent session shows no stop button (it is not processing)")

// ErrNoAgentSession is RetitleAgentSession's error for a thread with no
// agent session.
var ErrNoAgentSession = errors.New("fakeslack: the thread has no agent session")

// StopAgentSession clicks, as user, the stop button of the agent session
// of the thread threadTS in channel. The app gets agent_session_stopped
// (channel, thread_ts, user, streaming_message_ts: [] as the fake streams
// nothing, event_ts); as on Slack the session's status does not change,
// the app must set it. It returns ErrNoStopButton when the session is not
// processing (or there is none), and delivers nothing then.
func (s *Server) StopAgentSession(channel, threadTS, user string) error {
	s.mu.Lock()
	if root, ok := s.resolveThreadLocked(channel, threadTS); ok {
		threadTS = root
	}
	a := s.agentsLocked().sessions[msgKey{channel, threadTS}]
	if a == nil || a.Status != AgentStatusProcessing {
		s.mu.Unlock()
		return fmt.Errorf("stop in %s/%s: %w", channel, threadTS, ErrNoStopButton)
	}
	ev := map[string]any{
		"type": "agent_session_stopped", "channel": channel, "thread_ts": threadTS, "user": user,
		"streaming_message_ts": []string{}, "event_ts": s.nextTSLocked(),
	}
	s.mu.Unlock()
	s.deliverEvent(ev)
	return nil
}

// RetitleAgentSession renames, as user, the agent session of the thread
// threadTS in channel to title. The app gets agent_session_title_changed
// (channel, thread_ts, user, team_id, title, previous_title unless the
// session had no title, event_ts). A title the session has already
// changes nothing and raises no event. It returns ErrNoAgentSession for a
// thread with no session, and an error for a title that is empty or
// longer than 200 characters, which Slack's UI does not take.
func (s *Server) RetitleAgentSession(channel, threadTS, user, title string) error {
	if n := utf8.RuneCountInString(title); n == 0 || n > maxAgentTitleRunes {
		return fmt.Errorf("fakeslack: an agent session's title has 1 to 200 characters, not %d", n)
	}
	s.mu.Lock()
	if root, ok := s.resolveThreadLocked(channel, threadTS); ok {
		threadTS = root
	}
	a := s.agentsLocked().sessions[msgKey{channel, threadTS}]
	if a == nil {
		s.mu.Unlock()
		return fmt.Errorf("retitle in %s/%s: %w", channel, threadTS, ErrNoAgentSession)
	}
	if a.Title == title {
		s.mu.Unlock()
		return nil
	}
	ev := map[string]any{
		"type": "agent_session_title_changed", "channel": channel, "thread_ts": threadTS, "user": user,
		"team_id": s.opts.TeamID, "title": title, "event_ts": s.nextTSLocked(),
	}
	if a.Title != "" {
		ev["previous_title"] = a.Title
	}
	a.Title = title
	s.mu.Unlock()
	s.deliverEvent(ev)
	return nil
}
