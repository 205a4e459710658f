package store

// SessionPrefix returns the key prefix, ending in "/", under which all the
// data of one session is kept: its transcript versions, large texts and
// tool arguments (agentflow chooses the names below it). Like
// SnapshotPrefix, it encodes sessionID injectively, and the prefix of one
// session is never a prefix of another's keys, so
// DeletePrefix(ctx, SessionPrefix(id)) removes that session's data and
// nothing else.
func SessionPrefix(sessionID string) string {
	return "sessions/" + encodeSessionID(sessionID) + "/"
}
