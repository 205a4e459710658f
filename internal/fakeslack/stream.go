package fakeslack

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// Streamed messages (chat.startStream, chat.appendStream, chat.stopStream):
// a message of the thread whose text grows with each append, flagged
// Message.Streaming until it is stopped. Its Text is the markdown as
// streamed and its Blocks one markdown block of that text (then the blocks
// given to chat.stopStream), so an edit that sends text alone leaves the
// streamed content showing, as chat.update keeps blocks it is not sent.

func init() {
	apiMethods["chat.startStream"] = apiMethod{botToken, (*Server).chatStartStream}
	apiMethods["chat.appendStream"] = apiMethod{botToken, (*Server).chatAppendStream}
	apiMethods["chat.stopStream"] = apiMethod{botToken, (*Server).chatStopStream}
}

// markdownText reads the markdown_text argument, which Slack limits to
// 12,000 characters a call.
func markdownText(p params) (string, *apiError) {
	text := p.get("markdown_text")
	if utf8.RuneCountInString(text) > maxMarkdownRunes {
		return "", errCode("msg_too_long")
	}
	return text, nil
}

// knownUserIDLocked says whether id names a member, as users.info would.
func (s *Server) knownUserIDLocked(id string) bool {
	if _, ok := s.users[id]; ok || id == s.opts.BotUserID {
		return true
	}
	return len(id) > 1 && (id[0] == 'U' || id[0] == 'W') && strings.ToUpper(id) == id
}

// chatStartStream starts a streamed message with the checks Slack
// documents: channel required; thread_ts, when given, an existing message
// (its thread's root is used); recipient_user_id and recipient_team_id
// required outside a DM, the team this workspace and the user a member;
// markdown_text at most 12,000 characters.
func (s *Server) chatStartStream(p params) (map[string]any, *apiError) {
	ch, aerr := channelArg(p, "channel")
	if aerr != nil {
		return nil, aerr
	}
	text, aerr := markdownText(p)
	if aerr != nil {
		return nil, aerr
	}
	user, team := p.get("recipient_user_id"), p.get("recipient_team_id")
	s.mu.Lock()
	threadTS := ""
	if t := p.get("thread_ts"); t != "" {
		root, ok := s.resolveThreadLocked(ch, t)
		if !ok {
			s.mu.Unlock()
			return nil, errCode("invalid_thread_ts")
		}
		threadTS = root
	}
	if channelType(ch) != "im" || user != "" || team != "" {
		var e *apiError
		switch {
		case user == "":
			e = errCode("missing_recipient_user_id")
		case team == "":
			e = errCode("missing_recipient_team_id")
		case team != s.opts.TeamID:
			e = errCode("team_not_found")
		case !s.knownUserIDLocked(user):
			e = errCode("user_not_found")
		}
		if e != nil {
			s.mu.Unlock()
			return nil, e
		}
	}
	m := &Message{
		Channel: ch, TS: s.nextTSLocked(), ThreadTS: threadTS,
		User: s.opts.BotUserID, BotID: s.opts.BotID, Text: text, Streaming: true,
	}
	m.Blocks = streamBlocks(m.Text, nil)
	s.addMessageLocked(m)
	if threadTS != "" {
		// As for chat.postMessage: the app's reply clears the thread's status.
		delete(s.statuses, msgKey{ch, threadTS})
	}
	echo := s.botEchoLocked(m)
	s.mu.Unlock()
	s.deliverEvent(echo)
	return map[string]any{"channel": ch, "ts": m.TS}, nil
}

// streamingMessageLocked finds the message a chat.appendStream or
// chat.stopStream call names: channel required (channel_not_found), ts
// an existing message (message_not_found); a message that is not (or no
// longer) streaming, such as one posted with chat.postMessage or a
// person's, answers message_not_in_streaming_state.
func (s *Server) streamingMessageLocked(p params) (*Message, *apiError) {
	ch, aerr := channelArg(p, "channel")
	if aerr != nil {
		return nil, aerr
	}
	m := s.msgs[msgKey{ch, p.get("ts")}]
	switch {
	case m == nil:
		return nil, errCode("message_not_found")
	case !m.Streaming || m.BotID != s.opts.BotID:
		return nil, errCode("message_not_in_streaming_state")
	}
	return m, nil
}

// chatAppendStream appends markdown_text (required, at most 12,000
// characters) to a streaming message; the message's text may not pass
// 40,000 characters.
func (s *Server) chatAppendStream(p params) (map[string]any, *apiError) {
	text, aerr := markdownText(p)
	if aerr != nil {
		return nil, aerr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m, aerr := s.streamingMessageLocked(p)
	if aerr != nil {
		return nil, aerr
	}
	if text == "" {
		return nil, errCode("no_text")
	}
	if utf8.RuneCountInString(m.Text)+utf8.RuneCountInString(text) > maxTextRunes {
		return nil, errCode("msg_too_long")
	}
	m.Text += text
	m.Blocks = streamBlocks(m.Text, nil)
	return map[string]any{"channel": m.Channel, "ts": m.TS}, nil
}

// chatStopStream ends a streaming message: markdown_text (optional) is
// appended, blocks (optional) are rendered after the streamed text,
// metadata (optional) is set. The message is then an ordinary message of
// the app: chat.update edits it, chat.delete removes it, and further
// appends or stops answer message_not_in_streaming_state.
func (s *Server) chatStopStream(p params) (map[string]any, *apiError) {
	text, aerr := markdownText(p)
	if aerr != nil {
		return nil, aerr
	}
	c, aerr := s.readChatContent(p)
	if aerr != nil {
		return nil, aerr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m, aerr := s.streamingMessageLocked(p)
	if aerr != nil {
		return nil, aerr
	}
	if utf8.RuneCountInString(m.Text)+utf8.RuneCountInString(text) > maxTextRunes {
		return nil, errCode("msg_too_long")
	}
	m.Text += text
	m.Blocks = streamBlocks(m.Text, c.blocks)
	if c.hasMetadata {
		m.Metadata = c.metadata
	}
	m.Streaming = false
	return map[string]any{"channel": m.Channel, "ts": m.TS, "message": s.wireMessageLocked(m, true)}, nil
}

// streamBlocks is a streamed message's blocks: its text as a markdown
// block, then extra (a JSON array); nil when there is neither.
func streamBlocks(text string, extra json.RawMessage) json.RawMessage {
	var blocks []json.RawMessage
	if text != "" {
		b, _ := json.Marshal(map[string]string{"type": "markdown", "text": text})
		blocks = append(blocks, b)
	}
	var more []json.RawMessage
	if len(bytes.TrimSpace(extra)) > 0 && json.Unmarshal(extra, &more) == nil {
		blocks = append(blocks, more...)
	}
	if len(blocks) == 0 {
		return nil
	}
	out, _ := json.Marshal(blocks)
	return out
}
