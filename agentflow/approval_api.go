package agentflow

import (
	"time"

	"github.com/agentbot/agentbot/agentflow/risk"
)

// In-chat approvals: a session whose approval mode says so holds a shell
// command the model asked for until its owner (or an admin) approves it in
// the chat. The wait is part of the turn, in the workflow: it outlives
// worker and server restarts; a stop cancels it; with no answer within the
// policy's time the command is denied and the model is told.

// Approval modes, from the least to the most asking: a session's mode is
// the strictest of its tenant's, its channel's and its own.
const (
	// ApprovalNever runs every command without asking (the default).
	ApprovalNever = "never"
	// ApprovalRisky asks for the commands the risk classifier flags
	// (agentflow/risk: its rules and the tenant's patterns).
	ApprovalRisky = "risky"
	// ApprovalAlways asks for every shell command.
	ApprovalAlways = "always"
)

// DefaultApprovalTimeout is how long a command waits for an answer before
// it is denied, when the policy sets no time.
const DefaultApprovalTimeout = 10 * time.Minute

// Decisions of ApproveRequest.
const (
	DecisionApprove = "approve"
	DecisionDeny    = "deny"
)

// Updates of AgentWorkflow for approvals.
const (
	// UpdateApprove answers the command waiting for approval
	// (ApproveRequest → ApprovalView). Only the session's owner and
	// admins may; under the two-person rule the second approval must be
	// someone else's.
	UpdateApprove = "approve"
	// UpdateApprovals sets the session's own approval mode
	// (ApprovalsRequest → SessionView); it can make the session stricter
	// than its tenant and channel, never laxer.
	UpdateApprovals = "approvals"
)

// Control verbs of the manager for approvals (ControlRequest.Verb): the
// manager records who answered in its audit log and hands the answer to
// the session.
const (
	ControlApprove   = "approve"
	ControlApprovals = "approvals"
)

// ApproveRequest is the argument of UpdateApprove.
type ApproveRequest struct {
	// ID is the approval's ID (ApprovalView.ID); empty: the one waiting.
	ID       string `json:"id,omitempty"`
	Decision string `json:"decision"`
	// All approves the rest of the turn's commands too.
	All    bool   `json:"all,omitempty"`
	By     string `json:"by"`
	Notify bool   `json:"notify,omitempty"`
}

// ApprovalsRequest is the argument of UpdateApprovals.
type ApprovalsRequest struct {
	Mode   string `json:"mode"`
	By     string `json:"by"`
	Notify bool   `json:"notify,omitempty"`
}

// Approval states of ApprovalView.
const (
	ApprovalWaiting   = "waiting"
	ApprovalApproved  = "approved"
	ApprovalDenied    = "denied"
	ApprovalExpired   = "expired"
	ApprovalCancelled = "cancelled"
)

// ApprovalView is a command waiting for approval, or how it was decided:
// what an OutboundApproval message shows (with buttons while Waiting), and
// what UpdateApprove answers.
type ApprovalView struct {
	// ID names the approval in the session ("t3-call_abc": the turn and
	// the tool call).
	ID   string `json:"id"`
	Turn int    `json:"turn"`
	// Command is the shell command, secrets redacted.
	Command string `json:"command"`
	// Findings say why it needs approval (empty when the mode asks for
	// every command).
	Findings []risk.Finding `json:"findings,omitempty"`
	Mode     string         `json:"mode"`
	// Need is how many people must approve (2 under the two-person
	// rule); Approvers who did so far.
	Need      int       `json:"need"`
	Approvers []string  `json:"approvers,omitempty"`
	Expires   time.Time `json:"expires"`
	State     string    `json:"state"`
	// DecidedBy and DecidedAt say who decided and when ("" for an expiry
	// or a stop).
	DecidedBy string    `json:"decided_by,omitempty"`
	DecidedAt time.Time `json:"decided_at,omitempty"`
	// All says the approval covers the rest of the turn.
	All bool `json:"all,omitempty"`
}

// OutboundApproval is the message that asks for an approval: posted when
// a command starts waiting and edited (same Key) when it is decided.
// Outbound.Approval holds it; Outbound.Text a plain-text rendering for
// senders that draw no buttons.
const OutboundApproval OutboundKind = "approval"
