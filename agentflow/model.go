package agentflow

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/temporal"

	"github.com/agentbot/agentbot/agentflow/llm"
	"github.com/agentbot/agentbot/store"
)

// DefaultContextChars is the default context budget of the model, in
// characters of transcript.
const DefaultContextChars = 300_000

// maxInlineArgs bounds the tool-call arguments carried in a payload; larger
// ones (a big write_file) go to the blob store.
const maxInlineArgs = 16 << 10

// maxFitAttempts bounds the model calls of one ModelStep after the endpoint
// said the conversation does not fit its context window: each sends a
// harder compacted conversation (see fit).
const maxFitAttempts = 6

// ModelStep appends in.Append to the session's transcript, asks the model
// for the next step, records its reply as a new transcript version and
// returns the tool calls to run or the final answer. Permanent model errors
// (bad key, unknown model, bad request) are non-retryable; a failure that
// came with Retry-After is retried after that delay (at most
// modelMaxInterval). Known secrets are replaced in the transcript before
// the model reads it and in the model's reply before it is recorded, so
// neither the transcript nor the tool calls and answer returned to the
// workflow hold one; a command the model writes with a secret in it runs
// with the placeholder instead.
//
// The IDs of the reply's tool calls are the session's, not the endpoint's
// (see callID): endpoints may reuse IDs (a server numbering its calls from
// 1 since it started, a switch to another endpoint), and a conversation
// that holds an ID twice is refused by every API for good.
//
// When the endpoint says the conversation is too long for the model
// (llm.ErrContextLength), ModelStep compacts it harder and asks again,
// within this call (see fit); the transcript itself keeps everything.
func (a *Activities) ModelStep(ctx context.Context, in ModelStepInput) (res ModelStepResult, err error) {
	defer a.redactOut(&res, &err)
	defer heartbeat(ctx)()
	defer func() {
		// Counts only: the conversation never goes to the log.
		if err == nil {
			a.log().InfoContext(ctx, "model step", "turn", in.Turn, "step", in.Step, "backend", in.Backend,
				"tool_calls", len(res.ToolCalls))
		}
	}()
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
	// Transcripts written before the session chose its own IDs may hold an
	// endpoint's ID twice; renaming the later one heals them.
	taken := uniqueCallIDs(msgs)
	began := time.Now()
	st := a.newAnswerStream(ctx, in)
	answered := false // the step ends with an answer, not tool calls
	defer func() {
		// A failed step (a retry asks again) or one that called tools
		// takes back what was shown; an answer stays for its delivery.
		// Secrets are replaced already: reply was walked.
		if st != nil {
			st.finish(err == nil && answered, st.answer)
			res.Streamed = err == nil && answered && st.stream != nil
		}
	}()
	resp, err := a.complete(ctx, in, msgs, st)
	a.recordModel(ctx, began, resp.Usage, err)
	if err != nil {
		if llm.IsPermanent(err) {
			return ModelStepResult{}, permanent(err.Error(), err)
		}
		if unreachable(err) {
			// The raw error names internal addresses (the endpoint's, a
			// proxy's, a DNS server's): it goes to the log, the chat gets
			// a sentence and the reference. Retried like any outage.
			ref := logRef()
			a.log().WarnContext(ctx, "the model endpoint could not be reached", "ref", ref, "workflow_id", in.SessionID,
				"turn", in.Turn, "step", in.Step, "error", err)
			return ModelStepResult{}, temporal.NewApplicationError(
				fmt.Sprintf("the model endpoint could not be reached (ref %s)", ref), errTypeUnreachable)
		}
		var apiErr *llm.APIError
		if errors.As(err, &apiErr) && apiErr.RetryAfter > 0 {
			// The endpoint said when to come back (a rate limit, an
			// overloaded server): the next attempt waits that long
			// rather than the retry policy's backoff, which may be
			// shorter and waste an attempt, but never longer than the
			// policy's longest interval.
			return ModelStepResult{}, temporal.NewApplicationErrorWithOptions(err.Error(), errTypeRetryAfter,
				temporal.ApplicationErrorOptions{NextRetryDelay: min(apiErr.RetryAfter, modelMaxInterval)})
		}
		return ModelStepResult{}, err
	}
	reply := resp.Message
	reply.Role = llm.RoleAssistant
	rd.Walk(&reply)
	traceAttrs(ctx, attribute.String("agentbot.workflow_id", in.SessionID), attribute.Int("agentbot.turn", in.Turn),
		attribute.Int("agentbot.step", in.Step), attribute.String("gen_ai.request.model", a.modelFor(in)),
		attribute.Int64("gen_ai.usage.input_tokens", resp.Usage.InputTokens), attribute.Int64("gen_ai.usage.output_tokens", resp.Usage.OutputTokens),
		attribute.String("gen_ai.response.finish_reason", resp.FinishReason), attribute.Int("agentbot.tool_calls", len(reply.ToolCalls)))
	a.traceContent(trace.SpanFromContext(ctx), "agentbot.answer", reply.Content)
	if in.FinalOnly && len(reply.ToolCalls) > 0 {
		// No tools were offered; calls made anyway are dropped (they
		// would need results) and said instead.
		reply.ToolCalls = nil
		if reply.Content == "" {
			reply.Content = "(I wanted to run more tools, but this turn reached its step limit.)"
		}
	}
	reply.ToolCalls = slices.Clone(reply.ToolCalls)
	for i := range reply.ToolCalls {
		reply.ToolCalls[i].ID = callID(taken, in, i)
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
				a.log().WarnContext(ctx, "deleting an old transcript version", "key", old, "error", err)
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
		answered = strings.TrimSpace(reply.Content) != ""
		if st != nil {
			st.answer = reply.Content
		}
	}
	return out, nil
}

// complete asks the model for the next message of msgs, compacted to the
// context budget (Activities.ContextChars). When the endpoint answers that
// it does not fit the model's context window (the budget is larger than
// the model's window), it asks again with the conversation compacted
// harder, each time smaller, up to maxFitAttempts times; only then is the
// error returned. Every attempt keeps each tool call with its result.
func (a *Activities) complete(ctx context.Context, in ModelStepInput, msgs []llm.Message, st *answerStream) (llm.Response, error) {
	budget := a.contextChars()
	convo := compact(msgs, budget)
	if size(convo) > budget {
		// The current turn alone is over the budget, which says what the
		// model takes: cut it now rather than after a refusal.
		convo = fit(msgs, budget)
	}
	for attempt := 1; ; attempt++ {
		req := a.request(in, convo)
		var (
			resp llm.Response
			err  error
		)
		if st != nil {
			// Only a refusal before any text (a context overflow is
			// one) asks again, so a retry never streams twice.
			resp, err = a.Model.(StreamingModel).Stream(ctx, req, st.text)
		} else {
			resp, err = a.Model.Complete(ctx, req)
		}
		if err == nil || !errors.Is(err, llm.ErrContextLength) || attempt > maxFitAttempts {
			return resp, err
		}
		sent := size(convo)
		budget = smallerBudget(err, sent, requestSize(req)-sent)
		next := fit(msgs, budget)
		if size(next) >= sent {
			// Nothing left to cut: the error stands.
			return resp, err
		}
		a.log().InfoContext(ctx, "the conversation does not fit the model's context; compacting it harder",
			"workflow_id", in.SessionID, "turn", in.Turn, "step", in.Step,
			"attempt", attempt, "sent_chars", sent, "budget_chars", budget, "error", err)
		convo = next
	}
}

// modelFor is the model a step asks: the session's, else the worker's
// default.
func (a *Activities) modelFor(in ModelStepInput) string {
	if in.Model != "" {
		return in.Model
	}
	return a.ModelName
}

// request builds the model call of a step for the (compacted) conversation
// convo.
func (a *Activities) request(in ModelStepInput, convo []llm.Message) llm.Request {
	req := llm.Request{
		Model:    a.modelFor(in),
		Messages: append([]llm.Message{{Role: llm.RoleSystem, Content: systemPrompt(in.Backend, in.Root)}}, convo...),
	}
	if !in.FinalOnly {
		req.Tools = Tools
	} else {
		req.Messages = append(req.Messages, llm.Message{Role: llm.RoleSystem,
			Content: "This is the last step of the turn: answer now, without tools."})
	}
	return req
}

// requestSize estimates a request's size in characters, tool definitions
// included: the endpoint counts them against the context window too.
func requestSize(req llm.Request) int {
	n := size(req.Messages)
	if len(req.Tools) > 0 {
		b, _ := json.Marshal(req.Tools)
		n += len(b)
	}
	return n
}

// smallerBudget returns the character budget for the conversation after a
// request whose conversation had sent characters (and overhead more: the
// system prompt, the tools) did not fit. When the endpoint said its window
// and the request's size in tokens, the budget is aimed just under the
// window, assuming the same characters per token; otherwise it is half of
// what was sent. Either way it is less than sent.
func smallerBudget(err error, sent, overhead int) int {
	budget := sent / 2
	var apiErr *llm.APIError
	if errors.As(err, &apiErr) && apiErr.ContextTokens > 0 && apiErr.RequestTokens > apiErr.ContextTokens {
		total := float64(sent + overhead)
		fits := total * float64(apiErr.ContextTokens) / float64(apiErr.RequestTokens)
		// 10% to spare: characters per token differ from one message
		// to another.
		if b := int(fits*0.9) - overhead; b > 0 {
			budget = b
		}
	}
	return min(budget, sent*9/10)
}

// callID returns the ID of the i-th tool call of the reply of step
// in.Step of turn in.Turn, unique in the session's transcript by
// construction: a tag of the session (a fork starts numbering its turns
// again with a copy of its source's transcript), the turn, the step and
// the index, with a suffix in the unlikely case that the transcript holds
// it already (an endpoint's ID of that form). taken holds the IDs of the
// transcript; the new one is added. The same step of the same transcript
// gives the same IDs, so a retried ModelStep returns what the first
// attempt recorded. Letters, digits and '_' only, at most 40 characters,
// which every OpenAI-compatible API takes.
func callID(taken map[string]bool, in ModelStepInput, i int) string {
	base := fmt.Sprintf("call_%s_t%ds%dc%d", sessionTag(in.SessionID), in.Turn, in.Step, i)
	id := base
	for n := 2; taken[id]; n++ {
		id = base + "_" + strconv.Itoa(n)
	}
	taken[id] = true
	return id
}

// sessionTag is a short, stable tag of a session ID: six letters and
// digits.
func sessionTag(sessionID string) string {
	sum := sha256.Sum256([]byte(sessionID))
	return strings.ToLower(base32.StdEncoding.EncodeToString(sum[:])[:6])
}

// uniqueCallIDs renames, in place, every tool call whose ID an earlier call
// of msgs already has, and the tool results answering it (the results that
// follow its assistant message, in order), so that no ID appears twice. It
// returns every tool-call ID of msgs after that. A transcript written by
// the session itself never needs it (see callID); one written before
// ModelStep chose the IDs may.
func uniqueCallIDs(msgs []llm.Message) map[string]bool {
	taken := map[string]bool{}
	for _, m := range msgs {
		for _, c := range m.ToolCalls {
			taken[c.ID] = true
		}
		if m.ToolCallID != "" {
			taken[m.ToolCallID] = true
		}
	}
	seen := map[string]bool{}
	for i := range msgs {
		if len(msgs[i].ToolCalls) == 0 {
			continue
		}
		calls := slices.Clone(msgs[i].ToolCalls)
		renamed := map[string][]string{} // old ID -> the IDs of its calls here, in order
		changed := false
		for j := range calls {
			old := calls[j].ID
			if seen[old] {
				id := fmt.Sprintf("%s_m%d", old, i)
				for n := 2; taken[id]; n++ {
					id = fmt.Sprintf("%s_m%d_%d", old, i, n)
				}
				taken[id] = true
				calls[j].ID = id
				changed = true
			}
			seen[calls[j].ID] = true
			renamed[old] = append(renamed[old], calls[j].ID)
		}
		if !changed {
			continue
		}
		msgs[i].ToolCalls = calls
		for k := i + 1; k < len(msgs) && msgs[k].Role == llm.RoleTool; k++ {
			old := msgs[k].ToolCallID
			if ids := renamed[old]; len(ids) > 0 {
				msgs[k].ToolCallID = ids[0]
				renamed[old] = ids[1:]
			}
		}
	}
	return taken
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
// what follows it are always kept (fit goes further).
func compact(msgs []llm.Message, budget int) []llm.Message {
	if size(msgs) <= budget {
		return msgs
	}
	cutAt := lastUser(msgs)
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

// How much of a tool output (or of a long string in a tool call's
// arguments) fit keeps, head and tail, with the cut said.
const (
	// oldOutputKeep is for the turns before the current one: the model
	// has already acted on them, and the whole outputs are in files.
	oldOutputKeep = 2 << 10
	// minOutputKeep is the least kept of one in the current turn.
	minOutputKeep = 512
)

// cutWhere completes the note of a cut made to fit the context.
const cutWhere = " to fit the model's context"

// fit returns msgs (not changed) compacted to budget characters, for a
// model whose context window proved smaller than the usual budget. It goes
// step by step, stopping as soon as the conversation fits:
//
//  1. tool outputs and long tool-call arguments of earlier turns are cut to
//     oldOutputKeep (head and tail kept, the cut said);
//  2. earlier turns are left out, oldest first (compact);
//  3. tool outputs and long arguments of the current turn are cut to an
//     equal share of what is left, at least minOutputKeep;
//  4. the current turn's earliest steps (an assistant message and its
//     tool results) are left out, the last one kept, and a note says so;
//     then the user's message itself is cut.
//
// Nothing ever separates a tool call from its result: a cut shortens a
// text, and whatever is left out is whole turns or whole steps. The result
// may still exceed budget when even step 4 cannot reach it.
func fit(msgs []llm.Message, budget int) []llm.Message {
	out := cloneMessages(msgs)
	if size(out) <= budget {
		return out
	}
	// 1.
	cur := lastUser(out)
	for i := range out[:max(cur, 0)] {
		shorten(&out[i], oldOutputKeep)
	}
	if size(out) <= budget {
		return out
	}
	// 2.
	out = compact(out, budget)
	if size(out) <= budget {
		return out
	}
	// 3.
	cur = lastUser(out)
	long, n := 0, 0
	for _, m := range out[cur+1:] {
		if m.Role == llm.RoleTool {
			long += len(m.Content)
			n++
		}
		for _, c := range m.ToolCalls {
			long += len(c.Arguments)
			n++
		}
	}
	if n > 0 {
		keep := max((budget-(size(out)-long))/n, minOutputKeep)
		for i := range out[cur+1:] {
			shorten(&out[cur+1+i], keep)
		}
	}
	if size(out) <= budget {
		return out
	}
	// 4. Tool results first after the user's message (or first of all,
	// in a transcript without one) would answer a call in head: they
	// stay with it.
	start := cur + 1
	for start < len(out) && out[start].Role == llm.RoleTool {
		start++
	}
	head := out[:start]
	var steps [][]llm.Message // the rest of the current turn, by step
	for _, m := range out[start:] {
		if m.Role != llm.RoleTool || len(steps) == 0 {
			steps = append(steps, nil)
		}
		steps[len(steps)-1] = append(steps[len(steps)-1], m)
	}
	dropped := 0
	for len(steps) > 1 && size(head)+size(slices.Concat(steps...)) > budget {
		dropped += len(steps[0])
		steps = steps[1:]
	}
	if dropped > 0 {
		note := llm.Message{Role: llm.RoleSystem, Content: fmt.Sprintf(
			"(%d earlier messages of this turn, your tool calls and their results, are left out to fit the context; the calls ran.)", dropped)}
		head = append(slices.Clone(head), note)
	}
	out = append(head, slices.Concat(steps...)...)
	if over := size(out) - budget; over > 0 && cur >= 0 {
		out[cur].Content = capText(out[cur].Content, max(len(out[cur].Content)-over, minOutputKeep), cutWhere)
	}
	return out
}

// shorten cuts, in place, a tool message's output and the long strings in
// a message's tool-call arguments to keep bytes each. m's ToolCalls must be
// its own (see cloneMessages).
func shorten(m *llm.Message, keep int) {
	if m.Role == llm.RoleTool && len(m.Content) > keep {
		m.Content = capText(m.Content, keep, cutWhere)
	}
	for i := range m.ToolCalls {
		if len(m.ToolCalls[i].Arguments) > keep {
			m.ToolCalls[i].Arguments = shortenArgs(m.ToolCalls[i].Arguments, keep)
		}
	}
}

// shortenArgs cuts the long string values of a JSON object of arguments
// (a write_file's content) to keep bytes each, so that what the model reads
// back is still the JSON object it wrote, with its short values (a path)
// whole. Arguments that are not such an object are cut as text.
func shortenArgs(args string, keep int) string {
	var obj map[string]any
	if err := json.Unmarshal([]byte(args), &obj); err != nil {
		return capText(args, keep, cutWhere)
	}
	for k, v := range obj {
		if s, ok := v.(string); ok && len(s) > keep {
			obj[k] = capText(s, keep, cutWhere)
		}
	}
	b, err := json.Marshal(obj)
	if err != nil || len(b) > len(args) {
		return capText(args, keep, cutWhere)
	}
	return string(b)
}

// cloneMessages copies msgs deep enough for fit to change the copy: the
// slice and each message's tool calls.
func cloneMessages(msgs []llm.Message) []llm.Message {
	out := slices.Clone(msgs)
	for i := range out {
		out[i].ToolCalls = slices.Clone(out[i].ToolCalls)
	}
	return out
}

// lastUser returns the index of the last user message of msgs, or -1.
func lastUser(msgs []llm.Message) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == llm.RoleUser {
			return i
		}
	}
	return -1
}

// size is the size of msgs in characters, as the context budget counts
// them.
func size(msgs []llm.Message) int {
	n := 0
	for _, m := range msgs {
		n += msgSize(m)
	}
	return n
}

func msgSize(m llm.Message) int {
	n := len(m.Content) + 16
	for _, c := range m.ToolCalls {
		n += len(c.Name) + len(c.Arguments) + 16
	}
	return n
}

// errTypeUnreachable: the model endpoint could not be reached (retryable).
const errTypeUnreachable = "ModelUnreachable"

// errTypeRetryAfter: the model endpoint failed and said when to try again
// (retryable, after that delay).
const errTypeRetryAfter = "ModelRetryAfter"

// unreachable reports a transport failure: no HTTP answer came (refused,
// reset, DNS, TLS, proxy, timeout before an answer).
func unreachable(err error) bool {
	var urlErr *url.Error
	var netErr net.Error
	var opErr *net.OpError
	var dnsErr *net.DNSError
	return errors.As(err, &urlErr) || errors.As(err, &opErr) || errors.As(err, &dnsErr) ||
		(errors.As(err, &netErr) && !errors.Is(err, context.Canceled))
}

// logRef is a short reference to a log line, told to the user with an
// error whose details only the log holds.
func logRef() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
