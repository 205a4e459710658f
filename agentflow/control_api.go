package agentflow

import "time"

// The session manager as the tenant's control plane: control verbs are
// updates on it (ManagerUpdateControl); it checks who asks and what the
// tenant's policy allows, records the request in its audit log, and hands
// the request to the session's workflow, answering as soon as the session
// accepted it. Plain messages never pass through it.
const (
	// ManagerUpdateControl carries one control request (ControlRequest →
	// ControlResult).
	ManagerUpdateControl = "control"
	// ManagerUpdateRegister admits a new session (SessionEntry →
	// Admission): the tenant's caps are checked here, one session at a
	// time, and the policy is handed to the session.
	ManagerUpdateRegister = "register"
	// ManagerQueryPolicy returns the tenant's policy (TenantPolicy).
	ManagerQueryPolicy = "policy"
	// ManagerQueryAudit returns a page of the audit log (AuditQuery →
	// AuditPage); only admins may read it.
	ManagerQueryAudit = "audit"
	// ManagerQueryUsage returns one person's token use today (user ID →
	// UsageView).
	ManagerQueryUsage = "usage"
	// ManagerSignalTurn asks for, or gives back, a turn slot (TurnTicket):
	// sessions send it when the policy limits turns across sessions.
	ManagerSignalTurn = "turn"

	// UpdateModel sets the session's model (ModelRequest → SessionView).
	UpdateModel = "model"
	// UpdateFork forks the session into a new thread: the session opens the
	// thread, copies its transcript and workspace and starts the fork
	// (ForkRequest → ForkResult). It is what the manager hands a fork to.
	UpdateFork = "fork"
	// SignalPolicy hands a session its tenant's new policy (TenantPolicy).
	SignalPolicy = "policy"
	// SignalTurnGrant answers a TurnTicket (TurnGrant).
	SignalTurnGrant = "turn_grant"
)

// Control verbs of ControlRequest.
const (
	ControlNew     = "new"
	ControlSwitch  = "switch"
	ControlFork    = "fork"
	ControlTitle   = "title"
	ControlPause   = "pause"
	ControlDestroy = "destroy"
	ControlStop    = "stop"
	ControlReset   = "reset"
	ControlModel   = "model"
	ControlPolicy  = "policy"
)

// ControlRequest is one control request to a tenant's session manager.
type ControlRequest struct {
	// RequestID names the request after the platform event that carried
	// it: a platform's retry is the same request.
	RequestID string `json:"request_id"`
	Verb      string `json:"verb"`
	// Thread is the session's thread (for new: the thread to start in).
	Thread string `json:"thread"`
	// By is who asks (a platform user ID).
	By      string `json:"by"`
	Backend string `json:"backend,omitempty"`
	Root    string `json:"root,omitempty"`
	Title   string `json:"title,omitempty"`
	Model   string `json:"model,omitempty"`
	// Decision, All (approve) and Mode (approvals) are the approval
	// verbs' arguments; ApprovalID names the approval answered ("": the
	// one waiting).
	Decision   string `json:"decision,omitempty"`
	All        bool   `json:"all,omitempty"`
	ApprovalID string `json:"approval_id,omitempty"`
	Mode       string `json:"mode,omitempty"`
	// Start is the input of the session that new starts.
	Start *AgentInput `json:"start,omitempty"`
	// Policy verbs: set PolicyKey to PolicyValue, or reset PolicyKey (all
	// keys when empty); neither: show.
	PolicyKey   string `json:"policy_key,omitempty"`
	PolicyValue string `json:"policy_value,omitempty"`
	PolicyReset bool   `json:"policy_reset,omitempty"`
	// Config is the policy of the gateway's configuration. The manager
	// keeps it as the base that admins' changes apply to, so that a
	// changed configuration reaches tenants that exist.
	Config *TenantPolicy `json:"config,omitempty"`
}

// ControlResult is what the manager answers a control request.
type ControlResult struct {
	// Accepted says the session took the request and works on it (it may
	// wait for the running turn); it posts the outcome to the thread.
	// Otherwise the request is done.
	Accepted bool   `json:"accepted,omitempty"`
	Message  string `json:"message,omitempty"`
	// Stop is the session's answer to a stop it finished at once.
	Stop *StopResult `json:"stop,omitempty"`
	// Policy is the policy after a policy verb.
	Policy *TenantPolicy `json:"policy,omitempty"`
	// Thread is the session's thread (new).
	Thread string `json:"thread,omitempty"`
}

// Admission is the manager's answer to a session that registers.
type Admission struct {
	Admitted bool   `json:"admitted"`
	Reason   string `json:"reason,omitempty"`
	// Policy is the tenant's policy, for the session to enforce on turns.
	Policy *TenantPolicy `json:"policy,omitempty"`
	// Backend is the tenant's default backend, for a session that named
	// none.
	Backend string `json:"backend,omitempty"`
}

// ModelRequest is the argument of UpdateModel.
type ModelRequest struct {
	Model  string `json:"model"`
	By     string `json:"by,omitempty"`
	Notify bool   `json:"notify,omitempty"`
}

// AuditEntry is one control request in the manager's audit log.
type AuditEntry struct {
	Seq       int       `json:"seq"`
	At        time.Time `json:"at"`
	RequestID string    `json:"request_id,omitempty"`
	Verb      string    `json:"verb"`
	Thread    string    `json:"thread,omitempty"`
	By        string    `json:"by"`
	// Detail is what was asked ("docker", "max-sessions=3").
	Detail string `json:"detail,omitempty"`
	// Outcome is accepted, done or refused; Reason says why a request was
	// refused.
	Outcome string `json:"outcome"`
	Reason  string `json:"reason,omitempty"`
	// Stop is a stop's answer, for a repeated request.
	Stop *StopResult `json:"stop,omitempty"`
}

// Audit outcomes.
const (
	AuditAccepted = "accepted"
	AuditDone     = "done"
	AuditRefused  = "refused"
)

// AuditQuery asks for a page of the audit log, newest first.
type AuditQuery struct {
	By   string `json:"by"`
	Page int    `json:"page,omitempty"`
}

// AuditPage is one page of the audit log, newest first.
type AuditPage struct {
	Entries []AuditEntry `json:"entries"`
	Page    int          `json:"page"`
	Pages   int          `json:"pages"`
	// Archived are the blob keys of older entries, moved out of the
	// manager's state (oldest first).
	Archived []string `json:"archived,omitempty"`
}

// TurnTicket asks the manager for a turn slot (Phase "request") or gives
// one back with what the turn used (Phase "done").
type TurnTicket struct {
	Phase  string `json:"phase"`
	Thread string `json:"thread"`
	Turn   int    `json:"turn"`
	User   string `json:"user,omitempty"`
	Tokens int64  `json:"tokens,omitempty"`
}

// Phases of TurnTicket.
const (
	TicketRequest = "request"
	TicketDone    = "done"
)

// TurnGrant answers a TurnTicket request: granted, queued behind Behind
// sessions (a grant follows), or refused (a budget is spent).
type TurnGrant struct {
	Turn    int    `json:"turn"`
	Granted bool   `json:"granted,omitempty"`
	Behind  int    `json:"behind,omitempty"`
	Refused string `json:"refused,omitempty"`
}

// UsageView is one person's token use of the day against the budget.
type UsageView struct {
	User   string `json:"user"`
	Day    string `json:"day"`
	Tokens int64  `json:"tokens"`
	Budget int64  `json:"budget,omitempty"`
}

// HandOverInput hands a control request to a session's workflow: the
// update Name with Arg (JSON), under UpdateID.
type HandOverInput struct {
	WorkflowID string `json:"workflow_id"`
	Name       string `json:"name"`
	UpdateID   string `json:"update_id"`
	Arg        any    `json:"arg"`
}

// HandOverResult says whether the session finished the request at once
// (Done; Stop is a stop's answer) or accepted it.
type HandOverResult struct {
	Done bool        `json:"done,omitempty"`
	Stop *StopResult `json:"stop,omitempty"`
}

// StartSessionResult says StartSession made the session (or found it).
type StartSessionResult struct {
	Created bool `json:"created"`
}

// TurnSlot is a turn holding or waiting for a slot of the tenant.
type TurnSlot struct {
	Thread string    `json:"thread"`
	Turn   int       `json:"turn"`
	User   string    `json:"user,omitempty"`
	Since  time.Time `json:"since"`
}

// UserDay is one person's tokens of one UTC day.
type UserDay struct {
	User   string `json:"user"`
	Day    string `json:"day"`
	Tokens int64  `json:"tokens"`
}

// ErrRestartingText is the manager's refusal while it continues as new;
// Client.Control asks again.
const ErrRestartingText = "the session manager is restarting; try again"
