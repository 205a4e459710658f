package agentflow

import (
	"fmt"

	"github.com/agentbot/agentbot/store"
)

// Blob keys of a session all live under store.SessionPrefix(sessionID), so
// destroying a session deletes one prefix, and a fork writes only under its
// own.

func snapshotKey(sessionID string, gen int64) string { return store.SnapshotKey(sessionID, gen) }

func transcriptKey(sessionID string, version int64) string {
	return fmt.Sprintf("%stranscript/%016d.json", store.SessionPrefix(sessionID), version)
}

func answerKey(sessionID string, turn int) string {
	return fmt.Sprintf("%sanswers/%08d.txt", store.SessionPrefix(sessionID), turn)
}

// streamKey holds the messages a model step's answer stream posted
// (AnswerStream refs) until the step ends, so that a retry after a crash
// removes what the dead attempt left in the thread.
func streamKey(sessionID string, turn, step int) string {
	return fmt.Sprintf("%sstreams/%08d-%04d.json", store.SessionPrefix(sessionID), turn, step)
}

func argsKey(sessionID string, turn, step int, callID string) string {
	return fmt.Sprintf("%sargs/%08d-%04d-%x.json", store.SessionPrefix(sessionID), turn, step, callID)
}

// archiveKey is where reset keeps the n-th archived transcript of a session
// (deleted with the session's other data when it is destroyed).
func archiveKey(sessionID string, n int) string {
	return fmt.Sprintf("%sarchive/%08d.json", store.SessionPrefix(sessionID), n)
}
