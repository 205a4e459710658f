package fakeslack

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// maxMarkdownRunes is the most text a markdown block takes, and the most
// the markdown blocks of one message take together, as Slack documents.
const maxMarkdownRunes = 12000

// statusTimeout is how long Slack shows a thread's status when the app
// posts nothing: two minutes.
const statusTimeout = 2 * time.Minute

// maxLoadingMessages is the most loading_messages setStatus takes.
const maxLoadingMessages = 10

func init() {
	apiMethods["assistant.threads.setStatus"] = apiMethod{botToken, (*Server).assistantThreadsSetStatus}
}

// StatusCall is one accepted assistant.threads.setStatus call.
type StatusCall struct {
	Channel, ThreadTS string
	// Status is as sent; "" clears the status.
	Status          string
	LoadingMessages []string
}

type threadStatus struct {
	text string
	at   time.Time
}

// Refuse makes every call of the Web API method answer
// {"ok":false,"error":code}, as Slack does for a method the app may not
// call: "missing_scope" (with needed and provided), "not_allowed_token_type",
// "method_deprecated", "feature_not_enabled" and so on. The refusal comes
// after rate limiting and before the method's own checks; calls are still
// counted. An empty code lifts the refusal.
func (s *Server) Refuse(method, code string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refusedMethods == nil {
		s.refusedMethods = map[string]string{}
	}
	if code == "" {
		delete(s.refusedMethods, method)
		return
	}
	s.refusedMethods[method] = code
}

// RefuseBlockType makes chat.postMessage, chat.update and
// chat.postEphemeral answer invalid_blocks for a message holding a block of
// type typ, as Slack does for a block type it does not support where the
// message goes (markdown blocks, for one, are for apps using its AI
// features). refuse false accepts the type again.
func (s *Server) RefuseBlockType(typ string, refuse bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refusedBlocks == nil {
		s.refusedBlocks = map[string]bool{}
	}
	if refuse {
		s.refusedBlocks[typ] = true
	} else {
		delete(s.refusedBlocks, typ)
	}
}

// ThreadStatus returns the status shown in a thread now: the last one set
// with assistant.threads.setStatus, unless it was cleared, the app has
// replied in the thread since, or two minutes have passed.
func (s *Server) ThreadStatus(channel, threadTS string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.statuses[msgKey{channel, threadTS}]
	if !ok || time.Since(st.at) >= statusTimeout {
		return ""
	}
	return st.text
}

// StatusCalls returns the accepted assistant.threads.setStatus calls, in
// order.
func (s *Server) StatusCalls() []StatusCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.statusCalls)
	for i := range out {
		out[i].LoadingMessages = slices.Clone(out[i].LoadingMessages)
	}
	return out
}

func refusalError(method, code string) *apiError {
	e := errCode(code)
	if code == "missing_scope" && method == "assistant.threads.setStatus" {
		e.needed, e.provided = "chat:write", "channels:history"
	}
	return e
}

// readChatContent is readContent plus the block types refused with
// RefuseBlockType.
func (s *Server) readChatContent(p params) (content, *apiError) {
	c, aerr := readContent(p)
	if aerr != nil || !c.hasBlocks {
		return c, aerr
	}
	var blocks []struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(c.blocks, &blocks)
	s.mu.Lock()
	defer s.mu.Unlock()
	var problems []string
	for i, b := range blocks {
		if s.refusedBlocks[b.Type] {
			problems = append(problems, "unsupported type: "+b.Type+" [json-pointer:/blocks/"+itoa(i)+"/type]")
		}
	}
	if len(problems) > 0 {
		return c, &apiError{code: "invalid_blocks", errors: problems}
	}
	return c, nil
}

// markdownLen returns the length in characters of a markdown block's text,
// which is a string (not a text object), and whether it has one.
func markdownLen(b map[string]json.RawMessage) (int, bool) {
	var t *string
	if json.Unmarshal(b["text"], &t) != nil || t == nil {
		return 0, false
	}
	return utf8.RuneCountInString(*t), true
}

// assistantThreadsSetStatus sets or clears (status "") the status shown
// in a thread, with the argument checks Slack documents: channel_id,
// thread_ts and status are required; the thread must exist in the channel;
// at most 10 loading messages.
func (s *Server) assistantThreadsSetStatus(p params) (map[string]any, *apiError) {
	var missing []string
	for _, k := range []string{"channel_id", "thread_ts", "status"} {
		if !p.has(k) || (k != "status" && p.get(k) == "") {
			missing = append(missing, "missing required field: "+k)
		}
	}
	if len(missing) > 0 {
		return nil, &apiError{code: "invalid_arguments", errors: missing}
	}
	ch, ts, status := p.get("channel_id"), p.get("thread_ts"), p.get("status")
	var loading []string
	if raw, ok, err := p.rawJSON("loading_messages"); err == nil && ok {
		if json.Unmarshal(raw, &loading) != nil {
			return nil, &apiError{code: "invalid_arguments", errors: []string{"loading_messages must be an array of strings"}}
		}
	} else if v := p.get("loading_messages"); v != "" {
		loading = strings.Split(v, ",") // slack-go sends them comma-separated in a form
	}
	if len(loading) > maxLoadingMessages {
		return nil, &apiError{code: "invalid_arguments", errors: []string{"loading_messages must have at most 10 items"}}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.channelKnownLocked(ch) {
		return nil, errCode("channel_not_found")
	}
	root, ok := s.resolveThreadLocked(ch, ts)
	if !ok {
		return nil, errCode("invalid_thread_ts")
	}
	if s.statuses == nil {
		s.statuses = map[msgKey]threadStatus{}
	}
	if status == "" {
		delete(s.statuses, msgKey{ch, root})
	} else {
		s.statuses[msgKey{ch, root}] = threadStatus{text: status, at: time.Now()}
	}
	s.statusCalls = append(s.statusCalls, StatusCall{Channel: ch, ThreadTS: root, Status: status, LoadingMessages: loading})
	return nil, nil
}

// channelKnownLocked says whether the channel holds any message: the fake
// has no channel list, so a channel exists once something was posted in it.
func (s *Server) channelKnownLocked(ch string) bool {
	for _, m := range s.order {
		if m.Channel == ch {
			return true
		}
	}
	return false
}

func itoa(n int) string { return strconv.Itoa(n) }
