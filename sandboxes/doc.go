// Package sandboxes is the sandbox layer of agentbot: the place where the
// agent's shell commands run and its workspace files live.
//
// It is shaped like database/sql. Callers hold a concrete *Sandbox, which
// validates arguments, applies the exec contract (output caps, timeouts) and
// wraps every error with the operation, the backend and the sandbox ID.
// Backends implement the small Backend and Instance interfaces, in their own
// packages (localsandbox, dockersandbox, ...), and are registered by name in
// a Registry that the program builds explicitly; there is no global registry.
//
// What only some backends can do is an optional interface found by type
// assertion on the Instance (Pauser) or the Backend (Lister). A *Sandbox
// method whose capability is missing returns an error matching
// ErrUnsupported.
//
// A sandbox is described by a small serialisable State (backend, ID,
// workspace root, image). Workflows keep the State, never a *Sandbox: after a
// restart, Registry.Attach turns the State back into a live sandbox.
//
// The workspace moves between sandboxes, even between backends, as a portable
// snapshot: a zstd-compressed tar of workspace-relative paths (see
// Sandbox.Snapshot and Sandbox.Restore). Restore refuses archives with
// entries that would land outside the workspace and leaves the workspace
// untouched when it refuses.
package sandboxes
