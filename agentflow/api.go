package agentflow

import (
	"strings"
	"time"

	"github.com/agentbot/agentbot/agentflow/llm"
)

// TaskQueue is the one task queue every workflow and activity of agentbot
// runs on.
const TaskQueue = "agentbot"

// Workflow type names.
const (
	AgentWorkflowName          = "AgentWorkflow"
	SessionManagerWorkflowName = "SessionManagerWorkflow"
)

// Updates and queries of AgentWorkflow.
const (
	// UpdateMessage queues a user message (MessageRequest → MessageResult).
	UpdateMessage = "message"
	// UpdateSwitch moves the session to another backend (SwitchRequest →
	// SwitchResult).
	UpdateSwitch = "switch"
	// UpdateForkSource hands a fork its own copies of the transcript and the
	// workspace (ForkSourceRequest → ForkSeed).
	UpdateForkSource = "fork_source"
	// UpdateTitle renames the session (TitleRequest → SessionView).
	UpdateTitle = "title"
	// UpdateStop cancels the running turn (StopRequest → StopResult).
	UpdateStop = "stop"
	// UpdatePause snapshots and stops the sandbox (PauseRequest →
	// SessionView); the next message resumes it.
	UpdatePause = "pause"
	// UpdateDestroy deletes the sandbox and ends the session
	// (DestroyRequest → SessionView).
	UpdateDestroy = "destroy"
	// UpdateReset starts a fresh conversation on the same workspace; the
	// old transcript is archived in the blob store (ResetRequest →
	// ResetResult).
	UpdateReset = "reset"
	// SignalMessage sends a user message (MessageRequest, ID required) as a
	// signal: durable once sent, with or without a worker. Client.Send
	// uses it; the message update remains for what needs an answer.
	SignalMessage = "message"
	// QueryState returns a SessionView.
	QueryState = "state"
	// QueryTranscript returns the recent turns ([]TurnSummary). Its one
	// argument is who asks: only the owner and admins may export.
	QueryTranscript = "transcript"
	// QueryConversation returns where the session's conversation is
	// (Conversation): its one argument is who asks, as for
	// QueryTranscript. Client.Conversation reads it from the blob store.
	QueryConversation = "conversation"
	// QueryMessage returns what became of one message, by ID
	// (MessageResult; ErrUnknownMessage when the ID was never seen or is
	// long forgotten). Client.Wait polls it: update handlers never block on
	// a turn, so continue-as-new is never held up by a waiting client.
	QueryMessage = "message"
)

// Updates and queries of SessionManagerWorkflow.
const (
	// ManagerUpdateCreate registers or refreshes a session (SessionEntry →
	// SessionEntry). Agents send it when they start.
	ManagerUpdateCreate = "create"
	// ManagerUpdateFork forks a session into a new thread (ForkRequest →
	// ForkResult).
	ManagerUpdateFork = "fork"
	// ManagerUpdateSwitch records a session's new backend (SessionEntry →
	// SessionEntry).
	ManagerUpdateSwitch = "switch"
	// ManagerUpdateRename records a session's new title (SessionEntry →
	// SessionEntry).
	ManagerUpdateRename = "rename"
	// ManagerUpdateDestroy marks a session destroyed (SessionEntry →
	// SessionEntry).
	ManagerUpdateDestroy = "destroy"
	// ManagerQueryList returns every session of the tenant
	// ([]SessionEntry, oldest first).
	ManagerQueryList = "list"
	// ManagerQueryLookup returns the session of one thread key
	// (*SessionEntry, nil when unknown).
	ManagerQueryLookup = "lookup"
)

// AgentWorkflowID is the workflow ID of the session of a thread: a pure
// function of the thread key, so a lost cache never loses a session and two
// messages at once never make two sessions.
func AgentWorkflowID(threadKey string) string { return "agent/" + threadKey }

// ManagerWorkflowID is the workflow ID of the session manager of the tenant
// that threadKey belongs to ("sessions/slack:T123", "sessions/term:local").
func ManagerWorkflowID(threadKey string) string {
	platform, tenant := Tenant(threadKey)
	return "sessions/" + platform + ":" + tenant
}

// Tenant splits a thread key into its platform and tenant:
// "slack:T1:C2:123.4" → ("slack", "T1"), "discord:G1:C2" → ("discord", "G1"),
// "term:alice" → ("term", "local").
func Tenant(threadKey string) (platform, tenant string) {
	parts := strings.SplitN(threadKey, ":", 3)
	platform = parts[0]
	switch {
	case platform == "term" || len(parts) < 2:
		return platform, "local"
	default:
		return platform, parts[1]
	}
}

// Platform returns the platform prefix of a thread key ("slack").
func Platform(threadKey string) string {
	p, _ := Tenant(threadKey)
	return p
}

// AgentInput starts an AgentWorkflow; it is also what the workflow carries
// through continue-as-new (with Carry set).
type AgentInput struct {
	ThreadKey string `json:"thread_key"`
	Title     string `json:"title,omitempty"`
	// Backend is the sandbox backend to start on; empty means "local".
	Backend string `json:"backend,omitempty"`
	// Root is a workspace root for backends that take one (local).
	Root string `json:"root,omitempty"`
	// Requester is the user who started the session: its owner. It is set
	// once, here, and never changed by a later event.
	Requester string `json:"requester,omitempty"`
	// Admins may control the session as its owner may. The list is part
	// of the session's input (not read from a gateway at request time);
	// the workflow checks every control request against it.
	Admins []string `json:"admins,omitempty"`
	// Parent is the thread key of the session this one was forked from.
	Parent string `json:"parent,omitempty"`
	// Seed, for a fork, holds its own copies of the parent's transcript
	// and workspace.
	Seed    *ForkSeed    `json:"seed,omitempty"`
	Options AgentOptions `json:"options,omitempty"`
	// Policy is the tenant's policy when the manager started the session
	// (new, fork); a session started by a message gets it when it
	// registers.
	Policy *TenantPolicy `json:"policy,omitempty"`
	// Model is the session's model; empty: the worker's default.
	Model string `json:"model,omitempty"`
	// DefaultBackend says Backend is the gateway's default, not one the
	// person named: the tenant's default backend replaces it.
	DefaultBackend bool `json:"default_backend,omitempty"`
	// Carry is the state handed over by continue-as-new; nil on a first
	// start.
	Carry *AgentState `json:"carry,omitempty"`
}

// AgentOptions tune a session. Zero values mean the defaults.
type AgentOptions struct {
	// MaxSteps bounds the model calls of one turn (default 24).
	MaxSteps int `json:"max_steps,omitempty"`
	// IdleTimeout is how long a sandbox stays up with no turn before it
	// is snapshotted and stopped (default 30 minutes).
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
	// ToolTimeout is the default time limit of a shell command (default
	// 2 minutes); the model may ask for less or up to MaxToolTimeout.
	ToolTimeout time.Duration `json:"tool_timeout,omitempty"`
	// MaxTurnsPerRun forces continue-as-new after so many turns in one run,
	// on top of the server's suggestion (default 200).
	MaxTurnsPerRun int `json:"max_turns_per_run,omitempty"`
}

// Defaults of AgentOptions.
const (
	DefaultMaxSteps       = 24
	DefaultIdleTimeout    = 30 * time.Minute
	DefaultToolTimeout    = 2 * time.Minute
	MaxToolTimeout        = 30 * time.Minute
	DefaultMaxTurnsPerRun = 200
)

func (o AgentOptions) withDefaults() AgentOptions {
	if o.MaxSteps <= 0 {
		o.MaxSteps = DefaultMaxSteps
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.ToolTimeout <= 0 {
		o.ToolTimeout = DefaultToolTimeout
	}
	if o.MaxTurnsPerRun <= 0 {
		o.MaxTurnsPerRun = DefaultMaxTurnsPerRun
	}
	return o
}

// Limits on what a message may carry, so that no payload nears Temporal's.
const (
	// MaxMessageBytes is the largest user message accepted.
	MaxMessageBytes = 32 << 10
	// MaxQueuedMessages is how many messages may wait for the next turn.
	MaxQueuedMessages = 20
	// MaxTitleRunes is the longest title.
	MaxTitleRunes = 100
)

// MessageRequest is the argument of UpdateMessage.
type MessageRequest struct {
	// ID is the platform's message or event ID. A repeated ID starts no
	// second turn: it gets the first one's result.
	ID     string `json:"id"`
	Author string `json:"author,omitempty"`
	Text   string `json:"text"`
	// Files were shared with the message; the turn copies them into the
	// workspace (under uploads/) and tells the agent where they are.
	Files []InboundFile `json:"files,omitempty"`
	// User is the author's platform ID (Author is the name to show): the
	// person whose daily token budget the turn counts against.
	User string `json:"user,omitempty"`
	// Trace is the W3C traceparent of the span that sent the message (the
	// gateway's span of the inbound event; set by Client.Send when
	// tracing is on): the turn's spans join that trace.
	Trace string `json:"trace,omitempty"`
}

// InboundFile is a file shared in the chat, fetched by the platform's
// sender (FileFetcher) when the turn starts. URL is the platform's, never
// signed with a secret: the worker adds its own credentials.
type InboundFile struct {
	Name string `json:"name"`
	URL  string `json:"url"`
	Size int64  `json:"size,omitempty"`
}

// MaxInboundFile bounds a shared file copied into a workspace.
const MaxInboundFile = 50 << 20

// MessageResult is the result of UpdateMessage.
type MessageResult struct {
	// Turn is the turn that handles (or handled) the message; 0 when it is
	// queued behind a running turn and not yet assigned.
	Turn int `json:"turn"`
	// Duplicate says the message ID was seen before; nothing was queued.
	Duplicate bool `json:"duplicate,omitempty"`
	// Queued counts the messages waiting, this one included, when it was
	// accepted.
	Queued int `json:"queued,omitempty"`
	// Forgotten says the turn finished so long ago that its result is no
	// longer kept (only the last few are).
	Forgotten bool `json:"forgotten,omitempty"`
	// Result is the turn's outcome once it has finished (for a duplicate
	// of a handled message, or from QueryMessage).
	Result *TurnResult `json:"result,omitempty"`
}

// TurnStatus is how a turn ended.
type TurnStatus string

// Turn statuses.
const (
	TurnDone     TurnStatus = "done"
	TurnStopped  TurnStatus = "stopped"
	TurnFailed   TurnStatus = "failed"
	TurnStepCap  TurnStatus = "step_limit"
	TurnRunning  TurnStatus = "running"
	TurnCanceled TurnStatus = "canceled" // the session was destroyed mid-turn
	TurnRefused  TurnStatus = "refused"  // a token budget is spent
)

// TurnResult is the outcome of one turn, kept for the last few turns.
type TurnResult struct {
	Turn   int        `json:"turn"`
	Status TurnStatus `json:"status"`
	// Answer is the final answer, cut to MaxResultAnswer bytes (the whole
	// answer is in the transcript and was delivered to the chat).
	Answer string `json:"answer,omitempty"`
	// Error is a short, safe sentence when the turn failed.
	Error string    `json:"error,omitempty"`
	Usage llm.Usage `json:"usage"`
	Steps int       `json:"steps"`
	// MessageIDs are the messages this turn answered.
	MessageIDs []string `json:"message_ids,omitempty"`
	// Delivered says the answer was handed to the chat (or delivering it
	// failed for good): the turn is over for the people in the thread.
	Delivered bool `json:"delivered,omitempty"`
}

// MaxResultAnswer bounds TurnResult.Answer.
const MaxResultAnswer = 8 << 10

// SwitchRequest is the argument of UpdateSwitch.
type SwitchRequest struct {
	Backend string `json:"backend"`
	Root    string `json:"root,omitempty"`
	By      string `json:"by,omitempty"`
	// Notify asks the session to post the outcome to the thread: the
	// gateway answers as soon as the request is accepted, the work may
	// wait for the running turn (Client.Submit).
	Notify bool `json:"notify,omitempty"`
}

// SwitchResult is the result of UpdateSwitch.
type SwitchResult struct {
	From    string `json:"from"`
	To      string `json:"to"`
	Changed bool   `json:"changed"`
	// Message says what happened, for the chat.
	Message string `json:"message"`
}

// ForkSourceRequest is the argument of UpdateForkSource.
type ForkSourceRequest struct {
	// ForkThreadKey is the fork's thread key; repeating a request with the
	// same key returns the same seed.
	ForkThreadKey string `json:"fork_thread_key"`
	Backend       string `json:"backend,omitempty"`
	// By is who asked for the fork: the source's owner or an admin.
	By string `json:"by,omitempty"`
}

// ForkSeed is what a fork starts from: its own copies, under its own keys.
type ForkSeed struct {
	TranscriptKey string `json:"transcript_key,omitempty"`
	SnapshotKey   string `json:"snapshot_key,omitempty"`
	ParentTitle   string `json:"parent_title"`
	ParentBackend string `json:"parent_backend"`
	// ForkNumber counts the parent's forks, this one included.
	ForkNumber int           `json:"fork_number"`
	Usage      llm.Usage     `json:"usage"`
	Turns      []TurnSummary `json:"turns,omitempty"`
	// Pending are messages the parent had not yet written to its
	// transcript (results of a stopped turn's tool calls).
	Pending []llm.Message `json:"pending,omitempty"`
	// Options and Admins are the parent's: a fork runs with the same
	// settings and the same admins (its requester is who forked it).
	Options AgentOptions `json:"options"`
	Admins  []string     `json:"admins,omitempty"`
	// Model and Policy are the parent's: a fork inherits its model.
	Model  string        `json:"model,omitempty"`
	Policy *TenantPolicy `json:"policy,omitempty"`
}

// TitleRequest is the argument of UpdateTitle.
type TitleRequest struct {
	Title string `json:"title"`
	By    string `json:"by,omitempty"`
	// Notify: see SwitchRequest.
	Notify bool `json:"notify,omitempty"`
}

// StopRequest is the argument of UpdateStop.
type StopRequest struct {
	By string `json:"by,omitempty"`
	// Notify: see SwitchRequest.
	Notify bool `json:"notify,omitempty"`
}

// StopResult is the result of UpdateStop.
type StopResult struct {
	// Stopped says a turn was running and was cancelled.
	Stopped bool `json:"stopped"`
	Turn    int  `json:"turn,omitempty"`
	// Queued counts messages still waiting; they run next.
	Queued int `json:"queued,omitempty"`
}

// PauseRequest is the argument of UpdatePause.
type PauseRequest struct {
	By string `json:"by,omitempty"`
	// Notify: see SwitchRequest.
	Notify bool `json:"notify,omitempty"`
}

// DestroyRequest is the argument of UpdateDestroy.
type DestroyRequest struct {
	By string `json:"by,omitempty"`
	// Notify: see SwitchRequest.
	Notify bool `json:"notify,omitempty"`
}

// ResetRequest is the argument of UpdateReset.
type ResetRequest struct {
	By string `json:"by,omitempty"`
	// Notify: see SwitchRequest.
	Notify bool `json:"notify,omitempty"`
}

// ResetResult is the result of UpdateReset.
type ResetResult struct {
	// Archived is the blob key of the old transcript ("" when there was
	// none).
	Archived string `json:"archived,omitempty"`
	// Turns counts the turns of the archived conversation.
	Turns int `json:"turns"`
}

// SessionStatus is the state of a session as a whole.
type SessionStatus string

// Session statuses.
const (
	StatusIdle      SessionStatus = "idle"
	StatusRunning   SessionStatus = "running"
	StatusBusy      SessionStatus = "busy" // switching, forking, pausing
	StatusPaused    SessionStatus = "paused"
	StatusDestroyed SessionStatus = "destroyed"
)

// ToolStatus is one tool call of the running turn, for live progress.
type ToolStatus struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Summary string `json:"summary"` // "shell: go test ./..."
	State   string `json:"state"`   // pending, running, done, failed, cancelled, unknown
	Detail  string `json:"detail,omitempty"`
	// Head and Lines are ToolResult's: the first line of a command's
	// output and how many lines it printed.
	Head  string `json:"head,omitempty"`
	Lines int    `json:"lines,omitempty"`
	// Started is when the call started running (workflow time); Elapsed
	// how long it ran, once it ended.
	Started time.Time     `json:"started,omitempty"`
	Elapsed time.Duration `json:"elapsed,omitempty"`
}

// SessionView is the answer of QueryState.
type SessionView struct {
	ThreadKey  string `json:"thread_key"`
	WorkflowID string `json:"workflow_id"`
	Title      string `json:"title"`
	Backend    string `json:"backend"`
	Root       string `json:"root,omitempty"`
	SandboxID  string `json:"sandbox_id,omitempty"`
	// SandboxUp says the sandbox runs (false after the idle timeout
	// stopped it, and before the first turn made it).
	SandboxUp bool          `json:"sandbox_up,omitempty"`
	Status    SessionStatus `json:"status"`
	Turn      int           `json:"turn"`
	Queued    int           `json:"queued"`
	Tools     []ToolStatus  `json:"tools,omitempty"`
	Usage     llm.Usage     `json:"usage"`
	Forks     int           `json:"forks"`
	Parent    string        `json:"parent,omitempty"`
	Requester string        `json:"requester,omitempty"`
	Created   time.Time     `json:"created"`
	LastError string        `json:"last_error,omitempty"`
	Snapshot  string        `json:"snapshot,omitempty"`
	// Options are the session's settings (with defaults filled in).
	Options AgentOptions `json:"options"`
	// Undelivered are answers the chat refused for good; the next answer
	// that gets through is preceded by a notice about them.
	Undelivered []UndeliveredAnswer `json:"undelivered,omitempty"`
	// Waiting is set by Client.Start when no worker answered for the
	// session yet: it exists, and runs when a worker is back.
	Waiting bool `json:"waiting,omitempty"`
	// Trace is the trace ID of the last turn, when it was traced.
	Trace string `json:"trace,omitempty"`
	// Model is the session's model; empty: the worker's default.
	Model string `json:"model,omitempty"`
	// TokenBudget is the session's budget under the tenant's policy (0:
	// none).
	TokenBudget int64 `json:"token_budget,omitempty"`
	// Waiting for a turn slot: queued behind so many sessions.
	QueuedBehind int `json:"queued_behind,omitempty"`
	// Approval is the command waiting for approval, if any; Approvals
	// the session's approval mode (the strictest of the tenant's, the
	// channel's and its own).
	Approval  *ApprovalView `json:"approval,omitempty"`
	Approvals string        `json:"approvals,omitempty"`
	// Activity says what holds the session while Status is busy:
	// "switch", "fork", "pause", "destroy", "reset", or "idle" (saving
	// the workspace before the idle sandbox stops).
	Activity string `json:"activity,omitempty"`
}

// Conversation is the answer of QueryConversation: the transcript's
// newest version in the blob store, and the messages not yet written to
// it.
type Conversation struct {
	Transcript TranscriptRef `json:"transcript"`
	Pending    []llm.Message `json:"pending,omitempty"`
}

// UndeliveredAnswer is an answer that could not be posted to the chat.
type UndeliveredAnswer struct {
	Turn int `json:"turn"`
	// Preview is the answer's beginning; the whole answer is in the
	// transcript (export).
	Preview string `json:"preview"`
}

// TurnSummary is one turn in QueryTranscript: what was asked and answered,
// each cut to MaxResultAnswer bytes.
type TurnSummary struct {
	Turn   int        `json:"turn"`
	User   string     `json:"user"`
	Answer string     `json:"answer"`
	Status TurnStatus `json:"status"`
}

// SessionEntry is one session in a manager's registry.
type SessionEntry struct {
	ThreadKey  string        `json:"thread_key"`
	WorkflowID string        `json:"workflow_id"`
	Title      string        `json:"title"`
	Backend    string        `json:"backend"`
	Parent     string        `json:"parent,omitempty"`
	Requester  string        `json:"requester,omitempty"`
	Created    time.Time     `json:"created"`
	Status     SessionStatus `json:"status"`
	Forks      int           `json:"forks,omitempty"`
	// Updated is when the manager last heard of the session (in the
	// session's memo: when it was last active).
	Updated time.Time `json:"updated,omitempty"`
	// Model is the session's model; empty: the worker's default.
	Model string `json:"model,omitempty"`
}

// ForkRequest is the argument of ManagerUpdateFork.
type ForkRequest struct {
	SourceThread string `json:"source_thread"`
	Backend      string `json:"backend,omitempty"`
	// Root is the fork's workspace root, for a backend that takes one
	// (local: a host directory the fork works in instead of a fresh one).
	// Like a switch's root, it goes to the backend, which refuses one it
	// cannot use when it makes the fork's sandbox (its first turn).
	Root      string `json:"root,omitempty"`
	Title     string `json:"title,omitempty"`
	Requester string `json:"requester,omitempty"`
	// RequestID makes the fork idempotent: a repeated ID returns the first
	// fork.
	RequestID string `json:"request_id"`
	// Notify asks the manager to post a failure to the source thread (a
	// fork that works links itself in both threads).
	Notify bool `json:"notify,omitempty"`
}

// ForkResult is the result of ManagerUpdateFork.
type ForkResult struct {
	ThreadKey  string `json:"thread_key"`
	WorkflowID string `json:"workflow_id"`
	Title      string `json:"title"`
	Backend    string `json:"backend"`
}

// ManagerInput starts (and continues) a SessionManagerWorkflow.
type ManagerInput struct {
	Platform string `json:"platform"`
	Tenant   string `json:"tenant"`
	// Sessions carries the registry through continue-as-new.
	Sessions []SessionEntry `json:"sessions,omitempty"`
	// Forks carries the results of recent fork requests by request ID.
	Forks []ForkRecord `json:"forks,omitempty"`
	// MaxUpdatesPerRun forces continue-as-new after so many updates
	// (default 1000), on top of the server's suggestion.
	MaxUpdatesPerRun int `json:"max_updates_per_run,omitempty"`
	// Configured is the policy of the configuration (the base), Overrides
	// the keys admins set on top of it.
	Configured TenantPolicy     `json:"configured"`
	Overrides  []PolicyOverride `json:"overrides,omitempty"`
	// Audit is the recent audit log (oldest first); AuditSeq numbers its
	// entries; AuditArchives are the blob keys of older chunks.
	Audit         []AuditEntry `json:"audit,omitempty"`
	AuditSeq      int          `json:"audit_seq,omitempty"`
	AuditArchives []string     `json:"audit_archives,omitempty"`
	// Running are the turns holding a slot, Waiting those queued for one
	// (in order); Usage the tokens per person and day.
	Running []TurnSlot `json:"running,omitempty"`
	Waiting []TurnSlot `json:"waiting,omitempty"`
	Usage   []UserDay  `json:"usage,omitempty"`
}

// ForkRecord remembers the result of one fork request.
type ForkRecord struct {
	RequestID string     `json:"request_id"`
	Result    ForkResult `json:"result"`
}

// Change IDs of workflow.GetVersion: each names one change to the commands
// a workflow issues, so that sessions started on older code replay. Never
// reuse or remove one while a session recorded before it may be running.
const (
	// changeTitleToChat: a rename is delivered to the chat
	// (OutboundTitle) before it is reported to the manager.
	changeTitleToChat = "title-to-chat"
	// changePendingToTranscript: the input of a failed or stopped turn is
	// written to the transcript (AppendTranscript) instead of being
	// carried in the state.
	changePendingToTranscript = "pending-to-transcript"
	// changeOutboxLanes: answers and notices, progress edits, and titles
	// are sent by a coroutine each, so none waits for another; an answer
	// that the chat refuses for good is kept (AgentState.Undelivered).
	changeOutboxLanes = "outbox-lanes"
	// changeRegistryMemo: the session keeps its registry entry in its
	// memo (MemoSession), for Client.List.
	changeRegistryMemo = "registry-memo"
	// changeAdmission: a new session registers with ManagerUpdateRegister
	// and waits for the manager's admission (caps, policy) before its
	// first turn; turns ask for a slot when the policy limits them across
	// sessions; the memo records when the session was last active.
	changeAdmission = "admission"
	// changePolicyDelivery: a policy change is answered once the sessions
	// received it (or after policyDeliveryWait), not at once.
	changePolicyDelivery = "policy-delivery"
	// changeLocalDelivery sends the outbox through local activities.
	changeLocalDelivery = "local-delivery"
	// changePacePerMessage: the progress lane paces edits per message
	// without holding other messages behind one that waits its second:
	// a turn's first progress post (and so its answer) no longer waits
	// for the previous turn's last edit.
	changePacePerMessage = "pace-per-message"
	// changeToolFingerprint: a tool call that leaves the workspace with
	// its snapshot's fingerprint (ToolResult.Fingerprint) does not make it
	// dirty, so the turn runs no SnapshotSandbox.
	changeToolFingerprint = "tool-fingerprint"
	// changeApprovals: a shell command the session's approval mode
	// (never, risky, always) asks about is classified (ClassifyCommand, a
	// local activity) and, when it needs approval, waits for it
	// (UpdateApprove) or for its time to run out. Only sessions whose mode
	// is not "never" reach it.
	changeApprovals = "approvals"
	// changeLifecycleOutbound: a pause and a destroy are told to the chat
	// as an OutboundLifecycle message (no text), whoever asked, so that a
	// platform showing the session's state (Slack's agent sessions and App
	// Home) follows it.
	changeLifecycleOutbound = "lifecycle-outbound"
)

// MemoSession is the memo field of an AgentWorkflow that holds its
// SessionEntry.
const MemoSession = "session"
