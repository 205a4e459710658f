package agentflow

import (
	"time"

	"github.com/agentbot/agentbot/agentflow/llm"
	"github.com/agentbot/agentbot/sandboxes"
)

// Text is a piece of text that may be too large for a workflow payload: it
// is either inline or, past MaxInlineText bytes, a key in the blob store
// (a claim check) with its first bytes inline as a preview.
type Text struct {
	Inline string `json:"inline,omitempty"`
	Ref    string `json:"ref,omitempty"`
	Size   int    `json:"size"`
}

// MaxInlineText is the largest text carried inline in a payload.
const MaxInlineText = 32 << 10

// EnsureSandboxInput asks for a running sandbox for a session.
type EnsureSandboxInput struct {
	SessionID string `json:"session_id"`
	// Current is the sandbox the session has, if any: attach to it
	// (starting it if stopped).
	Current *sandboxes.State `json:"current,omitempty"`
	// Backend and Root say where to create one when there is none (or it
	// was lost).
	Backend string `json:"backend"`
	Root    string `json:"root,omitempty"`
	Title   string `json:"title,omitempty"`
	// SnapshotKey, when set, is restored into a sandbox this call creates.
	SnapshotKey string `json:"snapshot_key,omitempty"`
	// Generation numbers the sandboxes a session has had; a sandbox this
	// call creates is the Generation-th, and is named after the session
	// and it, so that a retried call finds the one it made instead of
	// making another. 0 in inputs recorded before it existed.
	Generation int64 `json:"generation,omitempty"`
}

// EnsureSandboxResult says which sandbox to use and how it was obtained.
type EnsureSandboxResult struct {
	State sandboxes.State `json:"state"`
	// Created says a new sandbox was made; Lost says it was made because
	// Current no longer exists; Restored says SnapshotKey was restored.
	Created  bool                   `json:"created,omitempty"`
	Lost     bool                   `json:"lost,omitempty"`
	Restored bool                   `json:"restored,omitempty"`
	Info     sandboxes.SnapshotInfo `json:"info"`
}

// SnapshotInput asks for the workspace of State to be written to Key.
type SnapshotInput struct {
	State sandboxes.State `json:"state"`
	Key   string          `json:"key"`
	// Previous, when set, is the snapshot this one replaces; it is deleted
	// once the new one is written.
	Previous string `json:"previous,omitempty"`
	// Fingerprint, when set, is the workspace's fingerprint when Previous
	// was taken (SnapshotResult.Fingerprint): a workspace that still has
	// it is not written again.
	Fingerprint string `json:"fingerprint,omitempty"`
}

// SnapshotResult describes a snapshot written to the blob store.
type SnapshotResult struct {
	Key  string                 `json:"key"`
	Size int64                  `json:"size"`
	Info sandboxes.SnapshotInfo `json:"info"`
	// Unchanged says the workspace still had SnapshotInput.Fingerprint:
	// nothing was written and Key is SnapshotInput.Previous.
	Unchanged bool `json:"unchanged,omitempty"`
	// Fingerprint is the workspace's fingerprint, taken before the
	// snapshot was (so a change made while it was written shows as one
	// next time), prefixed with the sandbox's ID: fingerprints of two
	// sandboxes never compare equal. Empty when the backend has none.
	Fingerprint string `json:"fingerprint,omitempty"`
}

// SandboxInput names a sandbox to stop or destroy.
type SandboxInput struct {
	State sandboxes.State `json:"state"`
}

// ToolInput is one tool call to run in a session's sandbox.
type ToolInput struct {
	SessionID string          `json:"session_id"`
	Turn      int             `json:"turn"`
	Step      int             `json:"step"`
	State     sandboxes.State `json:"state"`
	Call      ToolCall        `json:"call"`
	// DefaultTimeout applies to shell commands that name none.
	DefaultTimeout time.Duration `json:"default_timeout"`
}

// ToolCall is a model's tool call; arguments too large for a payload are in
// the blob store (ArgsRef).
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments,omitempty"`
	ArgsRef   string `json:"args_ref,omitempty"`
	// Summary is a one-line description for progress messages.
	Summary string `json:"summary,omitempty"`
}

// ToolResult is what a tool call gave, as the model will read it (at most
// MaxToolOutput bytes).
type ToolResult struct {
	CallID string `json:"call_id"`
	Name   string `json:"name"`
	Output string `json:"output"`
	// OK is false when the tool failed (bad arguments, non-zero exit,
	// timeout); the model reads why in Output.
	OK bool `json:"ok"`
	// Mutating says the call may have changed the workspace.
	Mutating bool `json:"mutating,omitempty"`
	// Summary is a short line for progress messages ("exit 0 in 1.2s").
	Summary string `json:"summary,omitempty"`
	// Head is the first line of a command's output (stdout, else
	// stderr), cut to a line's width; Lines counts the lines it printed.
	// Both are for progress rows.
	Head  string `json:"head,omitempty"`
	Lines int    `json:"lines,omitempty"`
	// Fingerprint is the workspace's fingerprint after the call, when it
	// could be taken quickly (see SnapshotResult.Fingerprint).
	Fingerprint string `json:"fingerprint,omitempty"`
}

// MaxToolOutput bounds a tool result as the model reads it; longer outputs
// keep their head and tail, say what was cut, and are kept whole in a file
// in the workspace.
const MaxToolOutput = 16 << 10

// ModelStepInput is one model call of a turn.
type ModelStepInput struct {
	SessionID  string        `json:"session_id"`
	Turn       int           `json:"turn"`
	Step       int           `json:"step"`
	Transcript TranscriptRef `json:"transcript"`
	// Append is added to the transcript before the call: the user's
	// message, tool results.
	Append []llm.Message `json:"append,omitempty"`
	// Backend and Root describe the sandbox to the model.
	Backend string `json:"backend"`
	Root    string `json:"root"`
	// FinalOnly asks for an answer without tools (the step limit is near).
	FinalOnly bool `json:"final_only,omitempty"`
	// Model is the session's model; empty: the worker's default.
	Model string `json:"model,omitempty"`
	// User is the platform ID of the person the turn answers, for a
	// streamed answer (StreamTarget.User).
	User string `json:"user,omitempty"`
}

// ModelStepResult is the model's reply, recorded in a new transcript
// version.
type ModelStepResult struct {
	Transcript TranscriptRef `json:"transcript"`
	ToolCalls  []ToolCall    `json:"tool_calls,omitempty"`
	Answer     Text          `json:"answer"`
	Usage      llm.Usage     `json:"usage"`
	// Streamed says the answer was shown as the model wrote it (an
	// AnswerStreamer kept its message): its Deliver finishes that message.
	Streamed bool `json:"streamed,omitempty"`
}

// OutboundKind says what an outbound chat message is.
type OutboundKind string

// Outbound kinds.
const (
	// OutboundProgress is the one progress message of a turn, edited in
	// place as tools run.
	OutboundProgress OutboundKind = "progress"
	// OutboundAnswer is a turn's final answer.
	OutboundAnswer OutboundKind = "answer"
	// OutboundNotice is anything else the session says (switched, forked,
	// destroyed).
	OutboundNotice OutboundKind = "notice"
	// OutboundTitle says the session was renamed (Outbound.Title); it has
	// no text. Platforms whose threads have names rename the thread;
	// others ignore it.
	OutboundTitle OutboundKind = "title"
	// OutboundLifecycle says the session was paused or destroyed
	// (Outbound.Lifecycle), whoever asked and whether or not a notice was
	// posted; it has no text. Platforms that show an agent session's state
	// (Slack's agent sessions, its App Home) update it; others ignore it.
	OutboundLifecycle OutboundKind = "lifecycle"
)

// Lifecycle states of an OutboundLifecycle message.
const (
	LifecyclePaused    = "paused"
	LifecycleDestroyed = "destroyed"
)

// Outbound is one message for a chat thread, posted by the Deliver
// activity through the platform's ChatSender.
type Outbound struct {
	Thread string `json:"thread"`
	// Key identifies the message for idempotency: the same key posts once
	// and edits after ("agent/term:x/3/progress").
	Key   string       `json:"key"`
	Kind  OutboundKind `json:"kind"`
	Turn  int          `json:"turn,omitempty"`
	Title string       `json:"title,omitempty"`
	// Text is the message (answers, notices). Deliver resolves a claim
	// check before handing it to the ChatSender.
	Text Text `json:"text"`
	// Tools and Status describe a progress message.
	Tools  []ToolStatus `json:"tools,omitempty"`
	Status TurnStatus   `json:"status,omitempty"`
	// Final marks the last edit of a progress message.
	Final bool `json:"final,omitempty"`
	// Approval is the approval an OutboundApproval message asks for.
	Approval *ApprovalView `json:"approval,omitempty"`
	// MessageIDs are, on an answer, the IDs of the user messages the turn
	// answered: an adapter whose sender runs in its own process (the
	// terminal of the embedded default) learns from them that a message
	// was answered, with no query.
	MessageIDs []string `json:"message_ids,omitempty"`
	// Lifecycle is, on an OutboundLifecycle message, LifecyclePaused or
	// LifecycleDestroyed.
	Lifecycle string `json:"lifecycle,omitempty"`
	// Streamed is, on an answer, that its first part was streamed into
	// the thread already (perhaps by another worker process): the sender
	// looks for that message and edits it rather than posting.
	Streamed bool `json:"streamed,omitempty"`
}

// ImportInput asks for shared files to be copied into a sandbox.
type ImportInput struct {
	Thread string          `json:"thread"`
	State  sandboxes.State `json:"state"`
	Files  []InboundFile   `json:"files"`
}

// ImportResult says where each file went, or why not.
type ImportResult struct {
	Files []ImportedFile `json:"files"`
}

// ImportedFile is one file of ImportResult.
type ImportedFile struct {
	Name  string `json:"name"`
	Path  string `json:"path,omitempty"`
	Size  int64  `json:"size,omitempty"`
	Error string `json:"error,omitempty"`
}

// ReportInput tells a session manager about a change of one session.
type ReportInput struct {
	Update string       `json:"update"`
	Entry  SessionEntry `json:"entry"`
}

// CopyInput copies one blob to another key (for forks).
type CopyInput struct {
	Src string `json:"src"`
	Dst string `json:"dst"`
}

// ForkSessionInput is the fork work a manager hands to an activity.
type ForkSessionInput struct {
	Request ForkRequest `json:"request"`
	// Number is the manager's count of forks of the source, this one
	// included, to name the new thread.
	Number int `json:"number"`
}
