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
	// started.
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

// CanControl reports whether user may change or end a session started by
// requester (switch, title, stop, done, destroy).
func (a Access) CanControl(user, requester string) bool {
	return requester == "" || user == requester || slices.Contains(a.Admins, user)
}

// Controls reports whether a verb changes or ends the session it is sent
// to, and so is for the session's requester and admins only.
func Controls(v Verb) bool {
	switch v {
	case VerbSwitch, VerbTitle, VerbStop, VerbDone, VerbDestroy:
		return true
	}
	return false
}
