package bot

import "slices"

// Access is who may use the bot and who may control sessions. Empty lists
// allow everyone.
type Access struct {
	// Users, Channels and Roles are allowlists: an event must pass each
	// non-empty one (a user passes Roles with any one of the roles).
	Users    []string
	Channels []string
	Roles    []string
	// Admins may control any session; others only the sessions they
	// started. New sessions get a copy of the list in their input
	// (agentflow.AgentInput.Admins), and each session checks control
	// requests against its own copy: a later change of the list applies
	// to sessions started after it.
	Admins []string
}

// Allowed reports whether ev may reach the bot at all.
func (a Access) Allowed(ev Event) bool {
	if len(a.Users) > 0 && !slices.Contains(a.Users, ev.User) && !slices.Contains(a.Admins, ev.User) {
		return false
	}
	if len(a.Channels) > 0 && !slices.Contains(a.Channels, ev.Channel) {
		return false
	}
	if len(a.Roles) > 0 && !slices.Contains(a.Admins, ev.User) &&
		!slices.ContainsFunc(ev.Roles, func(r string) bool { return slices.Contains(a.Roles, r) }) {
		return false
	}
	return true
}

// Admin reports whether user is an admin.
func (a Access) Admin(user string) bool {
	return user != "" && slices.Contains(a.Admins, user)
}

// CanControl reports whether user may use the controls (see Controls) of a
// session started by requester. requester must be what the session says of
// itself (its state or its registry entry), never what an event says: the
// author of a later message in the thread is not the session's owner. A
// session that names no requester (started with no user, e.g. from a
// terminal without $USER) passes here; the session itself decides.
func (a Access) CanControl(user, requester string) bool {
	return requester == "" || (user != "" && user == requester) || a.Admin(user)
}

// Controls reports whether a verb is for the session's requester and admins
// only: it changes or ends the session (switch, title, stop, done,
// destroy), copies it (fork: its conversation and workspace go to a new
// thread), reads its whole conversation out (export), or decides what its
// commands may do (approve, deny, approvals with a mode). The Router checks
// this before it calls the session, for a friendly refusal; the session
// enforces it (every control request carries who asks).
func Controls(v Verb) bool {
	switch v {
	case VerbSwitch, VerbTitle, VerbStop, VerbDone, VerbDestroy, VerbFork, VerbExport, VerbReset, VerbApprove, VerbDeny:
		return true
	}
	return false
}
