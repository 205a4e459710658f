package fakediscord

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// Interaction types, as Discord's interaction "type" field.
const (
	InteractionPing               = 1
	InteractionApplicationCommand = 2
	InteractionMessageComponent   = 3
	InteractionAutocomplete       = 4
	InteractionModalSubmit        = 5
)

// webhookTokenTTL is how long an interaction token serves follow-ups.
const webhookTokenTTL = 15 * time.Minute

// Option is a slash command option as the user filled it in: a
// sub-command (Type 1) or group (2) with Options, or a value (Type 3
// string, 4 integer, 5 boolean, ...).
type Option struct {
	Name    string
	Type    int
	Value   any
	Options []Option
}

// SubCommand is a sub-command option holding opts.
func SubCommand(name string, opts ...Option) Option {
	return Option{Name: name, Type: 1, Options: opts}
}

// StringOption is a string option.
func StringOption(name, value string) Option { return Option{Name: name, Type: 3, Value: value} }

// IntegerOption is an integer option.
func IntegerOption(name string, value int) Option { return Option{Name: name, Type: 4, Value: value} }

// BooleanOption is a boolean option.
func BooleanOption(name string, value bool) Option { return Option{Name: name, Type: 5, Value: value} }

func wireOptions(opts []Option) []any {
	out := make([]any, len(opts))
	for i, o := range opts {
		w := map[string]any{"name": o.Name, "type": o.Type}
		if o.Value != nil {
			w["value"] = o.Value
		}
		if len(o.Options) > 0 {
			w["options"] = wireOptions(o.Options)
		}
		out[i] = w
	}
	return out
}

// UserMessage posts content as user userID (a guild member with roleIDs)
// in a channel or thread, dispatches MESSAGE_CREATE and returns the
// message ID. It panics if the channel does not exist: that is a mistake
// in the test.
func (s *Server) UserMessage(channelID, userID, content string, roleIDs []string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.channels[channelID]; !ok {
		panic("fakediscord: UserMessage: unknown channel " + channelID)
	}
	m := &Message{ID: s.nextIDLocked(), ChannelID: channelID, AuthorID: userID, Roles: append([]string(nil), roleIDs...),
		Content: content, Timestamp: time.Now().UTC()}
	s.addMessageLocked(m)
	return m.ID
}

// SlashCommand has user userID (with roles) run the chat input command
// command with opts in channelID, and delivers the INTERACTION_CREATE
// over the gateway or, after SetInteractionsURL, by signed HTTP POST. The
// command need not be registered (data.id is then made up). For
// "/agent switch backend:docker":
//
//	s.SlashCommand(ch, "42", nil, "agent",
//		fakediscord.SubCommand("switch", fakediscord.StringOption("backend", "docker")))
func (s *Server) SlashCommand(channelID, userID string, roles []string, command string, opts ...Option) Invocation {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmdID := ""
	for _, c := range s.commands {
		if c.Name == command && c.Type == 1 {
			cmdID = c.ID
			break
		}
	}
	if cmdID == "" {
		cmdID = s.nextIDLocked()
	}
	data := map[string]any{"id": cmdID, "name": command, "type": 1, "options": wireOptions(opts)}
	ir, w := s.newInteractionLocked(InteractionApplicationCommand, channelID, userID, roles, data, nil)
	s.deliverLocked(ir, w)
	return Invocation{ID: ir.id, Token: ir.token}
}

// ComponentClick has user userID click the button, or choose values in
// the select menu, with customID on message messageID, and delivers the
// MESSAGE_COMPONENT interaction like SlashCommand. It fails if the message
// or the component does not exist.
func (s *Server) ComponentClick(channelID, messageID, userID string, roles []string, customID string, values ...string) (Invocation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.msgs[messageID]
	if !ok || m.ChannelID != channelID {
		return Invocation{}, fmt.Errorf("fakediscord: no message %s in channel %s", messageID, channelID)
	}
	ctype := findComponent(m.Components, customID)
	if ctype == 0 {
		return Invocation{}, fmt.Errorf("fakediscord: message %s has no component %q", messageID, customID)
	}
	data := map[string]any{"custom_id": customID, "component_type": ctype}
	if ctype != 2 {
		data["values"] = append([]string{}, values...)
	}
	ir, w := s.newInteractionLocked(InteractionMessageComponent, channelID, userID, roles, data, m)
	s.deliverLocked(ir, w)
	return Invocation{ID: ir.id, Token: ir.token}, nil
}

// findComponent returns the type of the component with customID in
// action rows, or 0.
func findComponent(raw json.RawMessage, customID string) int {
	var rows []struct {
		Components []struct {
			Type     int    `json:"type"`
			CustomID string `json:"custom_id"`
		} `json:"components"`
	}
	_ = json.Unmarshal(raw, &rows)
	for _, r := range rows {
		for _, c := range r.Components {
			if c.CustomID == customID {
				return c.Type
			}
		}
	}
	return 0
}

func (s *Server) newInteractionLocked(typ int, channelID, userID string, roles []string, data map[string]any, m *Message) (*interactionRec, map[string]any) {
	ir := &interactionRec{id: s.nextIDLocked(), token: "aW50ZXJhY3Rpb246" + randomHex(24), channelID: channelID,
		typ: typ, userID: userID, created: time.Now()}
	s.interactions[ir.token] = ir
	w := map[string]any{
		"id": ir.id, "application_id": s.opts.AppID, "type": typ, "data": data, "token": ir.token, "version": 1,
		"guild_id": s.opts.GuildID, "channel_id": channelID,
		"member": map[string]any{"user": userObject(userID), "roles": nonNil(roles), "permissions": "2248473465835073",
			"joined_at": "2024-01-01T00:00:00Z", "deaf": false, "mute": false},
		"app_permissions": "2248473465835073", "locale": "en-US", "guild_locale": "en-US", "entitlements": []any{},
		"authorizing_integration_owners": map[string]any{"0": s.opts.GuildID}, "context": 0,
	}
	if c, ok := s.channels[channelID]; ok {
		w["channel"] = s.wireChannelLocked(c)
		if c.Type == ChannelDM {
			// In a DM there is no guild and no member: the user comes as
			// "user", and the context is BOT_DM.
			delete(w, "guild_id")
			delete(w, "member")
			delete(w, "guild_locale")
			w["user"] = userObject(userID)
			w["context"] = 1
			w["authorizing_integration_owners"] = map[string]any{"1": userID}
		}
	}
	if m != nil {
		ir.messageID = m.ID
		w["message"] = s.wireMessageLocked(m)
	}
	return ir, w
}

func (s *Server) interactionByIDLocked(id string) *interactionRec {
	for _, ir := range s.interactions {
		if ir.id == id {
			return ir
		}
	}
	return nil
}

// deliverLocked sends an interaction over the gateway (no intent needed)
// or by HTTP. Over the gateway, with no session it is lost, as in Discord.
func (s *Server) deliverLocked(ir *interactionRec, w map[string]any) {
	if s.intURL == "" {
		s.dispatchLocked("INTERACTION_CREATE", w, 0)
		return
	}
	url := s.intURL
	body, _ := json.Marshal(w)
	if s.closed {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.deliverHTTP(ir, url, body)
	}()
}

// deliverHTTP posts a signed interaction and takes the answer as its
// callback, as Discord does with an Interactions Endpoint URL.
func (s *Server) deliverHTTP(ir *interactionRec, url string, body []byte) {
	rec := InteractionResponse{InteractionID: ir.id, Token: ir.token, Kind: "callback", Via: "http"}
	req, err := s.signedRequest(url, body, SignValid)
	if err != nil {
		return
	}
	resp, err := s.http.Do(req.WithContext(s.ctx))
	if err != nil {
		rec.Error = "interaction failed: " + err.Error()
		s.record(rec)
		return
	}
	defer resp.Body.Close()
	rec.Status = resp.StatusCode
	raw, files, e := readPayload(resp.Header.Get("Content-Type"), resp.Body)
	if e == nil {
		rec.Body = raw
	}
	if resp.StatusCode/100 != 2 || e != nil {
		rec.Error = "interaction failed"
		s.record(rec)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	msgID, typ, e := s.applyCallbackLocked(ir, raw, files)
	rec.Type, rec.MessageID = typ, msgID
	if e != nil {
		rec.Error = e.msg
	}
	s.responses = append(s.responses, rec)
}

func (s *Server) record(r InteractionResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.responses = append(s.responses, r)
}

// applyCallbackLocked applies an interaction response (callback) and
// returns the message it created or edited and the callback type.
func (s *Server) applyCallbackLocked(ir *interactionRec, raw json.RawMessage, files []Attachment) (string, int, *apiErr) {
	var cb struct {
		Type int             `json:"type"`
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &cb); err != nil {
		return "", 0, formErr("MODEL_TYPE_CONVERT", "Invalid payload", "type")
	}
	if time.Since(ir.created) > s.opts.InteractionTimeout {
		return "", cb.Type, errUnknownInter
	}
	if ir.acked {
		return "", cb.Type, errAcked
	}
	p, e := parsePayload(cb.Data)
	if e != nil {
		return "", cb.Type, e
	}
	badType := formErr("BASE_TYPE_CHOICES", "Interaction callback type is not valid for this interaction.", "type")
	component := ir.typ == InteractionMessageComponent || ir.typ == InteractionModalSubmit
	msgID := ""
	switch cb.Type {
	case 1:
		if ir.typ != InteractionPing {
			return "", cb.Type, badType
		}
	case 4:
		if ir.typ == InteractionPing || ir.typ == InteractionAutocomplete {
			return "", cb.Type, badType
		}
		if e := p.validate(len(files), true); e != nil {
			return "", cb.Type, e
		}
		p.MessageReference = nil
		if p.Flags != nil {
			f := *p.Flags & (FlagEphemeral | 1<<2 | 1<<12) // EPHEMERAL, SUPPRESS_EMBEDS, SUPPRESS_NOTIFICATIONS
			p.Flags = &f
		}
		m := s.newBotMessageLocked(ir.channelID, p, files, ir.id)
		msgID = m.ID
	case 5:
		if ir.typ == InteractionPing || ir.typ == InteractionAutocomplete {
			return "", cb.Type, badType
		}
		f := FlagLoading
		if p.Flags != nil {
			f |= *p.Flags & FlagEphemeral
		}
		m := s.newBotMessageLocked(ir.channelID, msgPayload{Flags: &f}, nil, ir.id)
		msgID = m.ID
	case 6:
		if !component {
			return "", cb.Type, badType
		}
		msgID = ir.messageID
	case 7:
		if !component || ir.messageID == "" {
			return "", cb.Type, badType
		}
		if e := p.validate(len(files), false); e != nil {
			return "", cb.Type, e
		}
		m, ok := s.msgs[ir.messageID]
		if !ok {
			return "", cb.Type, errUnknownMessage
		}
		s.editMessageLocked(m, p, files)
		msgID = m.ID
	case 8:
		if ir.typ != InteractionAutocomplete {
			return "", cb.Type, badType
		}
	case 9:
		if ir.typ != InteractionApplicationCommand && ir.typ != InteractionMessageComponent {
			return "", cb.Type, badType
		}
	default:
		return "", cb.Type, badType
	}
	ir.acked = true
	ir.callbackType = cb.Type
	ir.originalID = msgID
	return msgID, cb.Type, nil
}

// interactionForLocked finds the interaction a callback or webhook call
// names; nil when unknown.
func (s *Server) interactionForLocked(token string) *interactionRec {
	return s.interactions[token]
}

func (s *Server) callback(r *http.Request) (int, any, *apiErr) {
	raw, files, e := readBody(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := InteractionResponse{InteractionID: r.PathValue("interaction"), Token: r.PathValue("token"), Kind: "callback", Via: "rest", Body: raw}
	status, msgID, typ := http.StatusNoContent, "", 0
	if e == nil {
		ir := s.interactionForLocked(r.PathValue("token"))
		if ir == nil || ir.id != r.PathValue("interaction") {
			e = errUnknownInter
		} else {
			msgID, typ, e = s.applyCallbackLocked(ir, raw, files)
		}
	}
	rec.Type, rec.MessageID = typ, msgID
	if e != nil {
		status, rec.Error = e.status, e.msg
	}
	rec.Status = status
	s.responses = append(s.responses, rec)
	if e != nil {
		return 0, nil, e
	}
	return status, nil, nil
}

// webhookInteractionLocked resolves /webhooks/{app}/{token}: the
// application must match and the interaction must be acknowledged and
// younger than 15 minutes.
func (s *Server) webhookInteractionLocked(r *http.Request) (*interactionRec, *apiErr) {
	ir := s.interactionForLocked(r.PathValue("token"))
	if r.PathValue("app") != s.opts.AppID || ir == nil || !ir.acked {
		return nil, errUnknownWebhook
	}
	if time.Since(ir.created) > webhookTokenTTL {
		return nil, &apiErr{http.StatusUnauthorized, 50027, "Invalid Webhook Token", nil}
	}
	return ir, nil
}

func (s *Server) followup(r *http.Request) (int, any, *apiErr) {
	raw, files, e := readBody(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := InteractionResponse{Token: r.PathValue("token"), Kind: "followup", Via: "rest", Body: raw}
	var out map[string]any
	if e == nil {
		out, rec.MessageID, e = s.followupLocked(r, raw, files)
		if ir := s.interactionForLocked(r.PathValue("token")); ir != nil {
			rec.InteractionID = ir.id
		}
	}
	status := http.StatusOK
	if r.URL.Query().Get("wait") != "true" {
		status, out = http.StatusNoContent, nil
	}
	if e != nil {
		status, rec.Error = e.status, e.msg
	}
	rec.Status = status
	s.responses = append(s.responses, rec)
	if e != nil {
		return 0, nil, e
	}
	if out == nil {
		return status, nil, nil
	}
	return status, out, nil
}

// followupLocked creates a follow-up message; the first after a deferred
// response replaces the loading message instead, as in Discord.
func (s *Server) followupLocked(r *http.Request, raw json.RawMessage, files []Attachment) (map[string]any, string, *apiErr) {
	ir, e := s.webhookInteractionLocked(r)
	if e != nil {
		return nil, "", e
	}
	p, e := parsePayload(raw)
	if e != nil {
		return nil, "", e
	}
	if e := p.validate(len(files), true); e != nil {
		return nil, "", e
	}
	p.MessageReference = nil
	if orig, ok := s.msgs[ir.originalID]; ok && ir.callbackType == 5 && orig.Flags&FlagLoading != 0 {
		orig.Flags &^= FlagLoading
		p.Flags = nil
		s.editMessageLocked(orig, p, files)
		orig.Edits--
		return s.wireMessageLocked(orig), orig.ID, nil
	}
	if p.Flags != nil {
		f := *p.Flags & (FlagEphemeral | 1<<2 | 1<<12)
		p.Flags = &f
	}
	m := s.newBotMessageLocked(ir.channelID, p, files, ir.id)
	return s.wireMessageLocked(m), m.ID, nil
}

// webhookMessageLocked resolves {message}: "@original" or a follow-up.
func (s *Server) webhookMessageLocked(r *http.Request) (*interactionRec, *Message, *apiErr) {
	ir, e := s.webhookInteractionLocked(r)
	if e != nil {
		return nil, nil, e
	}
	id := r.PathValue("message")
	if id == "@original" {
		id = ir.originalID
	}
	m, ok := s.msgs[id]
	if !ok || (m.InteractionID != ir.id && id != ir.originalID) {
		return ir, nil, errUnknownMessage
	}
	return ir, m, nil
}

func (s *Server) getWebhookMessage(r *http.Request) (int, any, *apiErr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, m, e := s.webhookMessageLocked(r)
	if e != nil {
		return 0, nil, e
	}
	return 200, s.wireMessageLocked(m), nil
}

func (s *Server) editWebhookMessage(r *http.Request) (int, any, *apiErr) {
	raw, files, e := readBody(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	kind := "edit_followup"
	if r.PathValue("message") == "@original" {
		kind = "edit_original"
	}
	rec := InteractionResponse{Token: r.PathValue("token"), Kind: kind, Via: "rest", Body: raw, Status: 200}
	var out map[string]any
	if e == nil {
		var ir *interactionRec
		var m *Message
		ir, m, e = s.webhookMessageLocked(r)
		if ir != nil {
			rec.InteractionID = ir.id
		}
		if e == nil {
			var p msgPayload
			if p, e = parsePayload(raw); e == nil {
				if e = p.validate(len(files), false); e == nil {
					p.Flags = nil
					m.Flags &^= FlagLoading
					s.editMessageLocked(m, p, files)
					rec.MessageID = m.ID
					out = s.wireMessageLocked(m)
				}
			}
		}
	}
	if e != nil {
		rec.Status, rec.Error = e.status, e.msg
	}
	s.responses = append(s.responses, rec)
	if e != nil {
		return 0, nil, e
	}
	return 200, out, nil
}

func (s *Server) deleteWebhookMessage(r *http.Request) (int, any, *apiErr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ir, m, e := s.webhookMessageLocked(r)
	if e != nil {
		return 0, nil, e
	}
	s.deleteMessageLocked(m)
	s.responses = append(s.responses, InteractionResponse{InteractionID: ir.id, Token: ir.token, Kind: "delete",
		Via: "rest", Status: http.StatusNoContent, MessageID: m.ID})
	return http.StatusNoContent, nil, nil
}

// Sign returns the hex Ed25519 signature Discord puts in
// X-Signature-Ed25519: over the X-Signature-Timestamp value followed by
// the body.
func Sign(priv ed25519.PrivateKey, timestamp string, body []byte) string {
	return hex.EncodeToString(ed25519.Sign(priv, append([]byte(timestamp), body...)))
}

// SignMode says how PostInteraction signs.
type SignMode int

const (
	// SignValid signs with the server's private key, as Discord.
	SignValid SignMode = iota
	// SignTampered sends a well-formed signature that does not match the
	// body, as a forged or altered request would.
	SignTampered
	// SignNone sends no signature headers.
	SignNone
	// SignStale signs validly a request whose timestamp is six minutes
	// old: a captured request replayed later.
	SignStale
	// SignFuture signs validly a request timestamped six minutes ahead.
	SignFuture
)

func (s *Server) signedRequest(url string, body []byte, mode SignMode) (*http.Request, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("fakediscord: interaction request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Discord-Interactions/1.0 (+https://discord.com)")
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	switch mode {
	case SignValid:
		req.Header.Set("X-Signature-Ed25519", Sign(s.opts.PrivateKey, ts, body))
		req.Header.Set("X-Signature-Timestamp", ts)
	case SignTampered:
		req.Header.Set("X-Signature-Ed25519", Sign(s.opts.PrivateKey, ts, append(append([]byte{}, body...), ' ')))
		req.Header.Set("X-Signature-Timestamp", ts)
	case SignStale, SignFuture:
		skew := -6 * time.Minute
		if mode == SignFuture {
			skew = -skew
		}
		ts = strconv.FormatInt(time.Now().Add(skew).Unix(), 10)
		req.Header.Set("X-Signature-Ed25519", Sign(s.opts.PrivateKey, ts, body))
		req.Header.Set("X-Signature-Timestamp", ts)
	}
	return req, nil
}

// PostInteraction POSTs body (an interaction's JSON) to url with the
// signature headers as mode says, and returns the response for the caller
// to read and close. It records nothing: it is for testing an endpoint's
// signature checks directly.
func (s *Server) PostInteraction(url string, body []byte, mode SignMode) (*http.Response, error) {
	req, err := s.signedRequest(url, body, mode)
	if err != nil {
		return nil, err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fakediscord: posting interaction: %w", err)
	}
	return resp, nil
}

// VerifyInteractionsURL checks url as Discord does when an Interactions
// Endpoint URL is saved: a signed PING must be answered 200 with
// {"type":1}, and a PING with a bad signature must be answered 401.
func (s *Server) VerifyInteractionsURL(url string) error {
	ping, _ := json.Marshal(map[string]any{"id": "1", "application_id": s.opts.AppID, "type": InteractionPing,
		"token": "ping-" + randomHex(8), "version": 1})
	resp, err := s.PostInteraction(url, ping, SignValid)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var pong struct {
		Type int `json:"type"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &pong) != nil || pong.Type != 1 {
		return fmt.Errorf("fakediscord: signed PING answered %d %q, want 200 {\"type\":1}", resp.StatusCode, b)
	}
	resp, err = s.PostInteraction(url, ping, SignTampered)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		return errors.New("fakediscord: PING with a bad signature answered " + resp.Status + ", want 401")
	}
	return nil
}
