package agentflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentbot/agentbot/agentflow/llm"
	"github.com/agentbot/agentbot/store"
)

// DefaultContextChars is the default context budget of the model, in
// characters of transcript.
const DefaultContextChars = 300_000

// maxInlineArgs bounds the tool-call arguments carried in a payload; larger
// ones (a big write_file) go to the blob store.
const maxInlineArgs = 16 << 10

// ModelStep appends in.Append to the session's transcript, asks the model
// for the next step, records its reply as a new transcript version and
// returns the tool calls to run or the final answer. Permanent model errors
// (bad key, unknown model, bad request) are non-retryable. Known secrets are
// replaced in the transcript before the model reads it and in the model's
// reply before it is recorded, so neither the transcript nor the tool calls
// and answer returned to the workflow hold one; a command the model writes
// with a secret in it runs with the placeholder instead.
func (a *Activities) ModelStep(ctx context.Context, in ModelStepInput) (res ModelStepResult, err error) {
	defer a.redactOut(&res, &err)
	defer heartbeat(ctx)()
	rd := a.redactor()
	var msgs []llm.Message
	if in.Transcript.Key != "" {
		if err := a.getJSON(ctx, in.Transcript.Key, &msgs); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return ModelStepResult{}, permanent("the conversation transcript is missing from the blob store", err)
			}
			return ModelStepResult{}, err
		}
	}
	msgs = append(msgs, in.Append...)
	// The whole transcript, not only what is new: a secret added to the
	// worker's list later is gone from older turns too.
	rd.Walk(&msgs)
	req := llm.Request{
		Model:    a.ModelName,
		Messages: append([]llm.Message{{Role: llm.RoleSystem, Content: systemPrompt(in.Backend, in.Root)}}, compact(msgs, a.contextChars())...),
	}
	if !in.FinalOnly {
		req.Tools = Tools
	} else {
		req.Messages = append(req.Messages, llm.Message{Role: llm.RoleSystem,
			Content: "This is the last step of the turn: answer now, without tools."})
	}
	resp, err := a.Model.Complete(ctx, req)
	if err != nil {
		if llm.IsPermanent(err) {
			return ModelStepResult{}, permanent(err.Error(), err)
		}
		return ModelStepResult{}, err
	}
	reply := resp.Message
	reply.Role = llm.RoleAssistant
	rd.Walk(&reply)
	if in.FinalOnly && len(reply.ToolCalls) > 0 {
		// No tools were offered; calls made anyway are dropped (they
		// would need results) and said instead.
		reply.ToolCalls = nil
		if reply.Content == "" {
			reply.Content = "(I wanted to run more tools, but this turn reached its step limit.)"
		}
	}
	msgs = append(msgs, reply)

	version := in.Transcript.Version + 1
	key := transcriptKey(in.SessionID, version)
	data, err := json.Marshal(msgs)
	if err != nil {
		return ModelStepResult{}, err
	}
	if err := a.putBlob(ctx, key, "application/json", data); err != nil {
		return ModelStepResult{}, err
	}
	// The version before the input is superseded for good (the workflow
	// moved past it); the input itself stays, for a retry of this step.
	if version >= 2 {
		old := transcriptKey(in.SessionID, version-2)
		if old != in.Transcript.Key {
			if err := a.Blobs.Delete(ctx, old); err != nil && !errors.Is(err, store.ErrNotFound) {
				a.log().Warn("deleting an old transcript version", "key", old, "error", err)
			}
		}
	}

	out := ModelStepResult{
		Transcript: TranscriptRef{Key: key, Version: version, Messages: len(msgs)},
		Usage:      resp.Usage,
	}
	for _, c := range reply.ToolCalls {
		tc := ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments}
		tc.Summary = toolSummary(tc)
		if len(c.Arguments) > maxInlineArgs {
			tc.ArgsRef = argsKey(in.SessionID, in.Turn, in.Step, c.ID)
			if err := a.putBlob(ctx, tc.ArgsRef, "application/json", []byte(c.Arguments)); err != nil {
				return ModelStepResult{}, err
			}
			tc.Arguments = ""
		}
		out.ToolCalls = append(out.ToolCalls, tc)
	}
	if len(out.ToolCalls) == 0 {
		out.Answer, err = a.putText(ctx, answerKey(in.SessionID, in.Turn), reply.Content)
		if err != nil {
			return ModelStepResult{}, err
		}
	}
	return out, nil
}

func (a *Activities) contextChars() int {
	if a.ContextChars > 0 {
		return a.ContextChars
	}
	return DefaultContextChars
}

func systemPrompt(backend, root string) string {
	return fmt.Sprintf(`You are a coding agent working with a team in a chat thread. You work in a sandbox (backend %q) whose workspace root is %s; every command and path is relative to it.
Use the tools: shell runs a command, read_file and write_file read and write files. Look before you change things, run the tests you touch, and keep answers short: say what you did and what you found. Long tool outputs are cut; the whole output is saved in a file under .agentbot/outputs that you can read.`, backend, root)
}

// compact keeps the newest messages within budget characters, cutting only
// before a user message so that tool calls and their results stay
// together, and says how many were left out. The newest user message and
// what follows it are always kept.
func compact(msgs []llm.Message, budget int) []llm.Message {
	size := 0
	for _, m := range msgs {
		size += msgSize(m)
	}
	if size <= budget {
		return msgs
	}
	lastUser := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == llm.RoleUser {
			lastUser = i
			break
		}
	}
	cutAt := lastUser
	total := 0
	for i := len(msgs) - 1; i >= 0; i-- {
		total += msgSize(msgs[i])
		if msgs[i].Role == llm.RoleUser {
			if total > budget {
				break
			}
			cutAt = i
		}
	}
	if cutAt <= 0 {
		return msgs
	}
	note := llm.Message{Role: llm.RoleSystem,
		Content: fmt.Sprintf("(%d earlier messages of this conversation are left out to fit the context.)", cutAt)}
	return append([]llm.Message{note}, msgs[cutAt:]...)
}

func msgSize(m llm.Message) int {
	n := len(m.Content) + 16
	for _, c := range m.ToolCalls {
		n += len(c.Name) + len(c.Arguments) + 16
	}
	return n
}
