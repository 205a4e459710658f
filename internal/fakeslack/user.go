package fakeslack

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// respContext is what a response_url (or a slash command's ack) answers:
// a slash command or an interaction.
type respContext struct {
	kind                string
	channel, user       string
	messageTS, threadTS string
	url                 string
}

// newRespContextLocked registers a response_url under prefix ("commands"
// or "actions", as Slack's hooks.slack.com paths).
func (s *Server) newRespContextLocked(kind, prefix, channel, user, messageTS, threadTS string) *respContext {
	path := fmt.Sprintf("/%s/%s/%d/%s", prefix, s.opts.TeamID, s.nextSeqLocked(), randomHex(12))
	rc := &respContext{kind: kind, channel: channel, user: user, messageTS: messageTS, threadTS: threadTS, url: s.srv.URL + path}
	s.respURLs[path] = rc
	return rc
}

// PostUserMessage posts text as user in channel, in the thread threadTS
// when it is not empty, and returns the new message's ts. The app gets a
// message event (channel_type from the channel ID: C channel, G group, D
// im) and, when the text mentions the bot user as <@BOTUSERID> outside a
// DM, also an app_mention event for the same ts: two deliveries with their
// own event_ids, which the app must count as one message.
func (s *Server) PostUserMessage(channel, user, text string, threadTS string) (ts string) {
	s.mu.Lock()
	root := threadTS
	if threadTS != "" {
		if r, ok := s.resolveThreadLocked(channel, threadTS); ok {
			root = r
		}
	}
	m := &Message{Channel: channel, TS: s.nextTSLocked(), ThreadTS: root, User: user, Text: text, Blocks: richTextBlocks(text)}
	s.addMessageLocked(m)
	cid := strings.ToLower(newUUID())
	msgEvent := s.userEventLocked(m, "message", cid)
	var mention map[string]any
	if mentions(text, s.opts.BotUserID) && channelType(channel) != "im" {
		mention = s.userEventLocked(m, "app_mention", cid)
	}
	s.mu.Unlock()
	s.deliverEvent(msgEvent)
	s.deliverEvent(mention)
	return m.TS
}

func mentions(text, user string) bool {
	return strings.Contains(text, "<@"+user+">") || strings.Contains(text, "<@"+user+"|")
}

// userEventLocked renders m as a message or app_mention event.
func (s *Server) userEventLocked(m *Message, typ, clientMsgID string) map[string]any {
	e := map[string]any{
		"type": typ, "user": m.User, "text": m.Text, "ts": m.TS,
		"team": s.opts.TeamID, "channel": m.Channel, "event_ts": m.TS,
	}
	if clientMsgID != "" && m.Subtype == "" {
		e["client_msg_id"] = clientMsgID
	}
	if typ == "message" {
		e["channel_type"] = channelType(m.Channel)
	}
	s.addEventFieldsLocked(e, m)
	return e
}

// addEventFieldsLocked adds what message events share: blocks, thread and
// files.
func (s *Server) addEventFieldsLocked(e map[string]any, m *Message) {
	if len(m.Blocks) > 0 {
		e["blocks"] = m.Blocks
	}
	if m.ThreadTS != "" {
		e["thread_ts"] = m.ThreadTS
		if root := s.msgs[msgKey{m.Channel, m.ThreadTS}]; root != nil {
			e["parent_user_id"] = root.User
		}
	}
	if m.Subtype != "" {
		e["subtype"] = m.Subtype
	}
	if len(m.Files) > 0 {
		files := make([]map[string]any, 0, len(m.Files))
		for _, f := range m.Files {
			files = append(files, s.wireFileLocked(s.files[f.ID]))
		}
		e["files"] = files
		e["upload"] = false
		e["display_as_bot"] = false
	}
}

// botEchoLocked is the message event Slack sends the app about its own
// message m, or nil unless Options.EchoBotMessages.
func (s *Server) botEchoLocked(m *Message) map[string]any {
	if !s.opts.EchoBotMessages {
		return nil
	}
	e := map[string]any{
		"type": "message", "user": m.User, "bot_id": m.BotID, "app_id": s.opts.AppID,
		"bot_profile": s.botProfile(), "text": m.Text, "ts": m.TS, "team": s.opts.TeamID,
		"channel": m.Channel, "event_ts": m.TS, "channel_type": channelType(m.Channel),
	}
	s.addEventFieldsLocked(e, m)
	return e
}

// richTextBlocks is the rich_text block Slack attaches to a message a
// person types, with <@U...> mentions as user elements; nil for no text.
func richTextBlocks(text string) json.RawMessage {
	if text == "" {
		return nil
	}
	var elems []map[string]any
	addText := func(t string) {
		if t != "" {
			elems = append(elems, map[string]any{"type": "text", "text": t})
		}
	}
	rest := text
	for rest != "" {
		i := strings.Index(rest, "<@")
		if i < 0 {
			addText(rest)
			break
		}
		j := strings.IndexByte(rest[i:], '>')
		if j < 0 {
			addText(rest)
			break
		}
		addText(rest[:i])
		id, _, _ := strings.Cut(rest[i+2:i+j], "|")
		elems = append(elems, map[string]any{"type": "user", "user_id": id})
		rest = rest[i+j+1:]
	}
	b, _ := json.Marshal([]map[string]any{{
		"type":     "rich_text",
		"block_id": randomHex(3)[:5],
		"elements": []map[string]any{{"type": "rich_text_section", "elements": elems}},
	}})
	return b
}

// userName is the name the fake gives a user in payloads.
func (s *Server) userNameLocked(id string) string {
	if u, ok := s.users[id]; ok && u.Name != "" {
		return u.Name
	}
	return strings.ToLower(id)
}

func (s *Server) payloadUserLocked(id string) map[string]any {
	name := s.userNameLocked(id)
	return map[string]any{"id": id, "username": name, "name": name, "team_id": s.opts.TeamID}
}

func (s *Server) triggerIDLocked() string {
	return fmt.Sprintf("%d.%d.%s", s.nextSeqLocked(), time.Now().UnixMilli(), randomHex(16))
}

// SlashCommand runs "<Options.Command> text" as user in channel. The app
// gets Slack's slash command: over Socket Mode a slash_commands envelope
// (accepts_response_payload true) whose payload is the fields as a JSON
// object; over HTTP the same fields as a signed form. The fields are
// token, team_id, team_domain, channel_id, channel_name, user_id,
// user_name, command, text, api_app_id, is_enterprise_install ("false"),
// response_url (on this server; see Responses) and trigger_id. Like Slack it
// is never redelivered.
func (s *Server) SlashCommand(channel, user, text string) {
	s.mu.Lock()
	rc := s.newRespContextLocked(typeSlash, "commands", channel, user, "", "")
	fields := [][2]string{
		{"token", s.opts.VerificationToken},
		{"team_id", s.opts.TeamID},
		{"team_domain", teamDomain},
		{"channel_id", channel},
		{"channel_name", channelName(channel)},
		{"user_id", user},
		{"user_name", s.userNameLocked(user)},
		{"command", s.opts.Command},
		{"text", text},
		{"api_app_id", s.opts.AppID},
		{"is_enterprise_install", "false"},
		{"response_url", rc.url},
		{"trigger_id", s.triggerIDLocked()},
	}
	s.mu.Unlock()
	form := url.Values{}
	obj := map[string]string{}
	for _, f := range fields {
		form.Set(f[0], f[1])
		obj[f[0]] = f[1]
	}
	payload, _ := json.Marshal(obj)
	s.deliver(&outbound{kind: typeSlash, payload: payload, form: form, acceptsResponse: true, resp: rc})
}

// BlockAction clicks the element actionID of the message messageTS in
// channel as user, or picks value in it. The app gets a block_actions
// interaction: the element's block_id and type come from the message's
// blocks (a button when not found), value goes in "value" for a button and
// in selected_option (or selected_user, selected_conversation,
// selected_channel) for a menu; the payload carries the message, its
// container (with thread_ts for a thread message), a trigger_id and a
// response_url.
func (s *Server) BlockAction(channel, user, messageTS, actionID, value string) {
	s.mu.Lock()
	wire, threadTS, blocks := s.interactedMessageLocked(channel, messageTS, "")
	rc := s.newRespContextLocked(typeInteractive, "actions", channel, user, messageTS, threadTS)
	actionTS := s.nextTSLocked()
	container := map[string]any{"type": "message", "message_ts": messageTS, "channel_id": channel, "is_ephemeral": false}
	if threadTS != "" {
		container["thread_ts"] = threadTS
	}
	payload := map[string]any{
		"type":                  "block_actions",
		"user":                  s.payloadUserLocked(user),
		"api_app_id":            s.opts.AppID,
		"token":                 s.opts.VerificationToken,
		"container":             container,
		"trigger_id":            s.triggerIDLocked(),
		"team":                  map[string]any{"id": s.opts.TeamID, "domain": teamDomain},
		"enterprise":            nil,
		"is_enterprise_install": false,
		"channel":               map[string]any{"id": channel, "name": channelName(channel)},
		"message":               wire,
		"state":                 map[string]any{"values": map[string]any{}},
		"response_url":          rc.url,
		"actions":               []map[string]any{buildAction(blocks, actionID, value, actionTS)},
	}
	s.mu.Unlock()
	b, _ := json.Marshal(payload)
	s.deliver(&outbound{kind: typeInteractive, payload: b, resp: rc})
}

// MessageShortcut runs the message shortcut callbackID on the message
// messageTS (in the thread threadTS, if any) as user. The app gets a
// message_action interaction with callback_id, message_ts, the message,
// a trigger_id and a response_url.
func (s *Server) MessageShortcut(channel, user, messageTS, threadTS, callbackID string) {
	s.mu.Lock()
	wire, _, _ := s.interactedMessageLocked(channel, messageTS, threadTS)
	if t, ok := wire["thread_ts"].(string); ok && threadTS == "" {
		threadTS = t
	}
	rc := s.newRespContextLocked(typeInteractive, "actions", channel, user, messageTS, threadTS)
	payload := map[string]any{
		"type":                  "message_action",
		"token":                 s.opts.VerificationToken,
		"action_ts":             s.nextTSLocked(),
		"team":                  map[string]any{"id": s.opts.TeamID, "domain": teamDomain},
		"user":                  s.payloadUserLocked(user),
		"channel":               map[string]any{"id": channel, "name": channelName(channel)},
		"is_enterprise_install": false,
		"enterprise":            nil,
		"callback_id":           callbackID,
		"trigger_id":            s.triggerIDLocked(),
		"response_url":          rc.url,
		"message_ts":            messageTS,
		"message":               wire,
	}
	s.mu.Unlock()
	b, _ := json.Marshal(payload)
	s.deliver(&outbound{kind: typeInteractive, payload: b, resp: rc})
}

// interactedMessageLocked renders the message an interaction is about; a
// message the fake does not know is rendered from its ts and threadTS.
func (s *Server) interactedMessageLocked(channel, ts, threadTS string) (map[string]any, string, json.RawMessage) {
	if m := s.msgs[msgKey{channel, ts}]; m != nil {
		return s.wireMessageLocked(m, false), m.ThreadTS, m.Blocks
	}
	w := map[string]any{"type": "message", "ts": ts, "text": ""}
	if threadTS != "" {
		w["thread_ts"] = threadTS
	}
	return w, threadTS, nil
}

// buildAction renders one entry of a block_actions payload's actions.
func buildAction(blocks json.RawMessage, actionID, value, actionTS string) map[string]any {
	blockID, elem := findElement(blocks, actionID)
	if blockID == "" {
		blockID = randomHex(3)[:5]
	}
	typ, _ := elem["type"].(string)
	if typ == "" {
		typ = "button"
	}
	act := map[string]any{"action_id": actionID, "block_id": blockID, "type": typ, "action_ts": actionTS}
	switch typ {
	case "static_select", "external_select", "overflow", "radio_buttons":
		act["selected_option"] = findOption(elem, value)
	case "users_select":
		act["selected_user"] = value
	case "conversations_select":
		act["selected_conversation"] = value
	case "channels_select":
		act["selected_channel"] = value
	default:
		act["value"] = value
		if t, ok := elem["text"]; ok {
			act["text"] = t
		} else {
			act["text"] = map[string]any{"type": "plain_text", "text": value, "emoji": true}
		}
	}
	return act
}

// findElement finds the interactive element actionID in blocks: a
// section's accessory, an input's element, or one of an actions or
// context block's elements.
func findElement(blocks json.RawMessage, actionID string) (string, map[string]any) {
	var bs []map[string]any
	if json.Unmarshal(blocks, &bs) != nil {
		return "", nil
	}
	for _, b := range bs {
		bid, _ := b["block_id"].(string)
		var cands []any
		for _, k := range []string{"accessory", "element"} {
			if v, ok := b[k]; ok {
				cands = append(cands, v)
			}
		}
		if els, ok := b["elements"].([]any); ok {
			cands = append(cands, els...)
		}
		for _, c := range cands {
			if el, ok := c.(map[string]any); ok && el["action_id"] == actionID {
				return bid, el
			}
		}
	}
	return "", nil
}

// findOption finds the option with value among a menu's options and option
// groups.
func findOption(elem map[string]any, value string) any {
	var opts []any
	if o, ok := elem["options"].([]any); ok {
		opts = append(opts, o...)
	}
	if gs, ok := elem["option_groups"].([]any); ok {
		for _, g := range gs {
			if gm, ok := g.(map[string]any); ok {
				if o, ok := gm["options"].([]any); ok {
					opts = append(opts, o...)
				}
			}
		}
	}
	for _, o := range opts {
		if om, ok := o.(map[string]any); ok && om["value"] == value {
			return om
		}
	}
	return map[string]any{"text": map[string]any{"type": "plain_text", "text": value, "emoji": true}, "value": value}
}

// ShareFile shares a file named name with content in channel as user (in
// the thread threadTS, if any) and returns the message's ts. The app gets
// a message event with subtype file_share and files[]; each file's
// url_private and url_private_download are on this server and need the bot
// token.
func (s *Server) ShareFile(channel, user, threadTS, name string, content []byte) (ts string) {
	s.mu.Lock()
	f := s.newFileLocked(name, user)
	f.content = slices.Clone(content)
	f.uploaded = true
	root := threadTS
	if threadTS != "" {
		if r, ok := s.resolveThreadLocked(channel, threadTS); ok {
			root = r
		}
	}
	m := &Message{Channel: channel, TS: s.nextTSLocked(), ThreadTS: root, User: user, Subtype: "file_share"}
	m.Files = []File{s.shareLocked(f, m)}
	s.addMessageLocked(m)
	ev := s.userEventLocked(m, "message", "")
	s.mu.Unlock()
	s.deliverEvent(ev)
	return m.TS
}

// serveResponseURL takes a message POSTed to a response_url, as JSON
// (slack-go's MsgOptionResponseURL and friends), and answers {"ok":true}.
func (s *Server) serveResponseURL(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	rc := s.respURLs[r.URL.Path]
	s.mu.Unlock()
	if rc == nil {
		writeJSON(w, http.StatusNotFound, map[string]any{"ok": false, "error": "expired_url"})
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil || !json.Valid(body) || !isJSONObject(body) {
		writeJSON(w, http.StatusBadRequest, map[string]any{"ok": false, "error": "invalid_payload"})
		return
	}
	s.applyResponse(rc, "response_url", rc.url, body)
	writeJSON(w, http.StatusOK, map[string]any{"ok": true})
}

// applyResponse records a response message and does what Slack does with
// it: delete_original or replace_original act on the message of an
// interaction; response_type "in_channel" posts it in the channel as the
// app; anything else shows it to the user as an ephemeral message.
func (s *Server) applyResponse(rc *respContext, via, u string, raw json.RawMessage) {
	var msg struct {
		Text            string          `json:"text"`
		Blocks          json.RawMessage `json:"blocks"`
		ResponseType    string          `json:"response_type"`
		ReplaceOriginal bool            `json:"replace_original"`
		DeleteOriginal  bool            `json:"delete_original"`
		ThreadTS        string          `json:"thread_ts"`
	}
	_ = json.Unmarshal(raw, &msg)
	if string(bytes.TrimSpace(msg.Blocks)) == "null" {
		msg.Blocks = nil
	}
	s.mu.Lock()
	s.responses = append(s.responses, Response{
		Via: via, URL: u, Channel: rc.channel, User: rc.user,
		Text: msg.Text, Blocks: msg.Blocks, ResponseType: msg.ResponseType,
		ReplaceOriginal: msg.ReplaceOriginal, DeleteOriginal: msg.DeleteOriginal,
		ThreadTS: msg.ThreadTS, Raw: slices.Clone(raw),
	})
	var echo map[string]any
	key := msgKey{rc.channel, rc.messageTS}
	switch {
	case rc.kind == typeInteractive && rc.messageTS != "" && msg.DeleteOriginal:
		delete(s.msgs, key)
	case rc.kind == typeInteractive && rc.messageTS != "" && msg.ReplaceOriginal:
		if m := s.msgs[key]; m != nil {
			m.Text, m.Blocks = msg.Text, msg.Blocks
			m.Edits++
			m.editedTS = s.nextTSLocked()
		}
	case msg.Text == "" && len(msg.Blocks) == 0:
	case msg.ResponseType == "in_channel":
		thread := rc.threadTS
		if msg.ThreadTS != "" {
			thread = msg.ThreadTS
		}
		if thread != "" {
			if r, ok := s.resolveThreadLocked(rc.channel, thread); ok {
				thread = r
			}
		}
		m := &Message{
			Channel: rc.channel, TS: s.nextTSLocked(), ThreadTS: thread,
			User: s.opts.BotUserID, BotID: s.opts.BotID, Text: msg.Text, Blocks: msg.Blocks,
		}
		s.addMessageLocked(m)
		echo = s.botEchoLocked(m)
	default:
		s.ephemerals = append(s.ephemerals, &Message{
			Channel: rc.channel, TS: s.nextTSLocked(), ThreadTS: rc.threadTS,
			User: s.opts.BotUserID, BotID: s.opts.BotID, Recipient: rc.user,
			Text: msg.Text, Blocks: msg.Blocks,
		})
	}
	s.mu.Unlock()
	s.deliverEvent(echo)
}
