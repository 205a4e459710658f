package store

import "time"

// ThreadEntry is what the thread cache knows of a chat thread: its session,
// or (Missing) that it has none. It is a cache, never the source of truth:
// the session manager workflow is.
type ThreadEntry struct {
	WorkflowID string `json:"workflow_id,omitempty"`
	Title      string `json:"title,omitempty"`
	Backend    string `json:"backend,omitempty"`
	Requester  string `json:"requester,omitempty"`
	// Missing is a negative entry: the thread has no session.
	Missing bool `json:"missing,omitempty"`
}

// Default lifetimes of cache entries.
const (
	// ThreadTTL is how long a thread's session is cached.
	ThreadTTL = 24 * time.Hour
	// MissingTTL is how long "no session here" is cached: short, so a
	// session started elsewhere (a fork) is found soon.
	MissingTTL = 30 * time.Second
	// EventTTL is how long a platform event ID is remembered once the
	// event was handed to Temporal; platforms retry within minutes.
	EventTTL = time.Hour
	// ClaimTTL is how long an event is "in progress" before it was handed
	// to Temporal: a retry that comes later (the process handling it died)
	// is handled again, which is safe — sessions drop repeated message
	// IDs, and control requests are updates named after the event.
	ClaimTTL = 20 * time.Second
)
