package agentflow

import (
	"time"

	"github.com/agentbot/agentbot/agentflow/llm"
	"github.com/agentbot/agentbot/sandboxes"
)

// AgentState is all the state of an AgentWorkflow, carried whole through
// continue-as-new. It is small by construction: the transcript and the
// workspace live in the blob store and are referenced here by key, and every
// list is bounded.
type AgentState struct {
	ThreadKey string `json:"thread_key"`
	Title     string `json:"title"`
	Backend   string `json:"backend"`
	Root      string `json:"root,omitempty"`
	Requester string `json:"requester,omitempty"`
	// Admins may control the session as its requester may.
	Admins  []string     `json:"admins,omitempty"`
	Parent  string       `json:"parent,omitempty"`
	Created time.Time    `json:"created"`
	Options AgentOptions `json:"options"`
	Usage   llm.Usage    `json:"usage"`
	Forks   int          `json:"forks,omitempty"`
	Renames int          `json:"renames,omitempty"`
	// Resets counts the conversations archived by reset.
	Resets    int    `json:"resets,omitempty"`
	Turn      int    `json:"turn"`
	LastError string `json:"last_error,omitempty"`
	// LastTrace is the trace ID of the last turn, when it was traced.
	LastTrace string `json:"last_trace,omitempty"`
	Paused    bool   `json:"paused,omitempty"`
	Destroyed bool   `json:"destroyed,omitempty"`

	// Sandbox is the session's sandbox, nil before the first turn. SandboxUp
	// says it is running (not stopped by idle or pause).
	Sandbox   *sandboxes.State `json:"sandbox,omitempty"`
	SandboxUp bool             `json:"sandbox_up,omitempty"`
	// SandboxGen counts the sandboxes created for the session; the next
	// one created is SandboxGen+1 (see EnsureSandboxInput.Generation).
	SandboxGen int64 `json:"sandbox_gen,omitempty"`
	// SnapshotKey is the newest good snapshot of the workspace; SnapshotGen
	// numbers snapshots so each gets a key of its own.
	SnapshotKey string `json:"snapshot_key,omitempty"`
	SnapshotGen int64  `json:"snapshot_gen,omitempty"`
	// Dirty says the workspace may have changed since SnapshotKey.
	Dirty bool `json:"dirty,omitempty"`
	// SnapshotFingerprint is the workspace's fingerprint when SnapshotKey
	// was taken (SnapshotResult.Fingerprint), so that a snapshot of an
	// unchanged workspace is skipped.
	SnapshotFingerprint string `json:"snapshot_fingerprint,omitempty"`

	// Transcript is the conversation in the blob store; Pending holds
	// messages not yet written to it (tool results of a stopped turn, the
	// user message of a failed one), sent with the next model call.
	Transcript TranscriptRef `json:"transcript"`
	Pending    []llm.Message `json:"pending,omitempty"`

	Queue []QueuedMessage `json:"queue,omitempty"`
	// MsgSeq numbers queued messages; DrainedSeq is the highest number a
	// turn has taken. A handler that must run after the messages sent
	// before it waits for DrainedSeq to reach the MsgSeq it saw.
	MsgSeq     int64            `json:"msg_seq,omitempty"`
	DrainedSeq int64            `json:"drained_seq,omitempty"`
	Seen       []SeenMessage    `json:"seen,omitempty"`
	Results    []TurnResult     `json:"results,omitempty"`
	Summaries  []TurnSummary    `json:"summaries,omitempty"`
	ForkSeeds  []ForkSeedRecord `json:"fork_seeds,omitempty"`
	// Notices are told to the user with the next answer ("the sandbox was
	// lost and restored from the last snapshot").
	Notices []string `json:"notices,omitempty"`
	// Undelivered are answers the chat refused for good (bounded).
	Undelivered []UndeliveredAnswer `json:"undelivered,omitempty"`
	// Registered says the session manager knows this session.
	Registered bool `json:"registered,omitempty"`
	// Policy is the tenant's policy as the manager last sent it; nil for
	// sessions from before policies (no limits).
	Policy *TenantPolicy `json:"policy,omitempty"`
	// Model is the session's model; empty: the worker's default.
	Model string `json:"model,omitempty"`
	// DefaultBackend: see AgentInput.
	DefaultBackend bool `json:"default_backend,omitempty"`
	// ApprovalMode is the session's own approval mode ("" or never: its
	// tenant's and channel's decide).
	ApprovalMode string `json:"approval_mode,omitempty"`
	// MemoAt is when the memo last recorded the session as active.
	MemoAt time.Time `json:"memo_at,omitempty"`
}

// QueuedMessage is a user message waiting for the next turn.
type QueuedMessage struct {
	ID     string        `json:"id"`
	Author string        `json:"author,omitempty"`
	Text   string        `json:"text"`
	At     time.Time     `json:"at"`
	Seq    int64         `json:"seq"`
	Files  []InboundFile `json:"files,omitempty"`
	// Trace is MessageRequest.Trace.
	Trace string `json:"trace,omitempty"`
	// User is MessageRequest.User.
	User string `json:"user,omitempty"`
}

// SeenMessage remembers a message ID and the turn that handled it (0 while
// queued), so a platform retry starts no second turn.
type SeenMessage struct {
	ID   string `json:"id"`
	Turn int    `json:"turn"`
}

// ForkSeedRecord remembers the seed handed to one fork, so a retried
// fork_source returns it again.
type ForkSeedRecord struct {
	ForkThreadKey string   `json:"fork_thread_key"`
	Seed          ForkSeed `json:"seed"`
}

// TranscriptRef points at one version of a session's transcript in the blob
// store.
type TranscriptRef struct {
	Key      string `json:"key,omitempty"`
	Version  int64  `json:"version"`
	Messages int    `json:"messages"`
}

// Bounds of the lists in AgentState.
const (
	maxSeen      = 256
	maxResults   = 16
	maxSummaries = 20
	maxForkSeeds = 16
	maxNotices   = 8
)
