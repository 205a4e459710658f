package agentflow

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/agentbot/agentbot/agentflow/llm"
	"github.com/agentbot/agentbot/store"
)

// AppendInput asks for messages to be added to a session's transcript.
type AppendInput struct {
	SessionID  string        `json:"session_id"`
	Transcript TranscriptRef `json:"transcript"`
	Messages   []llm.Message `json:"messages"`
}

// AppendTranscript writes a new version of the session's transcript with
// in.Messages at its end, without asking the model: the input of a turn
// that failed or was stopped goes into the conversation at once, so that
// nothing of it has to be carried in the workflow's state (and in every
// later payload) until the next model call succeeds. Like ModelStep, it
// deletes the version before its input and keeps the input itself, so a
// retry finds it.
func (a *Activities) AppendTranscript(ctx context.Context, in AppendInput) (ref TranscriptRef, err error) {
	defer a.redactOut(&ref, &err)
	var msgs []llm.Message
	if in.Transcript.Key != "" {
		if err := a.getJSON(ctx, in.Transcript.Key, &msgs); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return TranscriptRef{}, permanent("the conversation transcript is missing from the blob store", err)
			}
			return TranscriptRef{}, err
		}
	}
	msgs = append(msgs, in.Messages...)
	version := in.Transcript.Version + 1
	key := transcriptKey(in.SessionID, version)
	data, err := json.Marshal(msgs)
	if err != nil {
		return TranscriptRef{}, err
	}
	if err := a.putBlob(ctx, key, "application/json", data); err != nil {
		return TranscriptRef{}, err
	}
	if version >= 2 {
		if old := transcriptKey(in.SessionID, version-2); old != in.Transcript.Key {
			if err := a.Blobs.Delete(ctx, old); err != nil && !errors.Is(err, store.ErrNotFound) {
				a.log().WarnContext(ctx, "deleting an old transcript version", "key", old, "error", err)
			}
		}
	}
	return TranscriptRef{Key: key, Version: version, Messages: len(msgs)}, nil
}
