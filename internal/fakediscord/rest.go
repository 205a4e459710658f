package fakediscord

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"mime"
	"mime/multipart"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// apiErr is a Discord REST error: {"message": ..., "code": ...}, with
// "errors" for Invalid Form Body.
type apiErr struct {
	status int
	code   int
	msg    string
	errors any
}

var (
	errUnauthorized   = &apiErr{http.StatusUnauthorized, 0, "401: Unauthorized", nil}
	errNotFound       = &apiErr{http.StatusNotFound, 0, "404: Not Found", nil}
	errUnknownChannel = &apiErr{http.StatusNotFound, 10003, "Unknown Channel", nil}
	errUnknownMessage = &apiErr{http.StatusNotFound, 10008, "Unknown Message", nil}
	errUnknownWebhook = &apiErr{http.StatusNotFound, 10015, "Unknown Webhook", nil}
	errUnknownInter   = &apiErr{http.StatusNotFound, 10062, "Unknown interaction", nil}
	errMissingAccess  = &apiErr{http.StatusForbidden, 50001, "Missing Access", nil}
	errNotAuthor      = &apiErr{http.StatusForbidden, 50005, "Cannot edit a message authored by another user", nil}
	errEmptyMessage   = &apiErr{http.StatusBadRequest, 50006, "Cannot send an empty message", nil}
	errChannelType    = &apiErr{http.StatusBadRequest, 50024, "Cannot execute action on this channel type", nil}
	errBadJSON        = &apiErr{http.StatusBadRequest, 50109, "The request body contains invalid JSON.", nil}
	errAcked          = &apiErr{http.StatusBadRequest, 40060, "Interaction has already been acknowledged.", nil}
	errThreadExists   = &apiErr{http.StatusBadRequest, 160004, "A thread has already been created for this message", nil}
)

// formErr is a 50035 Invalid Form Body error for the field at path (JSON
// keys, array indexes as strings), as Discord nests them.
func formErr(code, msg string, path ...string) *apiErr {
	var e any = map[string]any{"_errors": []map[string]string{{"code": code, "message": msg}}}
	for i := len(path) - 1; i >= 0; i-- {
		e = map[string]any{path[i]: e}
	}
	return &apiErr{http.StatusBadRequest, 50035, "Invalid Form Body", e}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeErr(w http.ResponseWriter, e *apiErr) {
	body := map[string]any{"message": e.msg, "code": e.code}
	if e.errors != nil {
		body["errors"] = e.errors
	}
	writeJSON(w, e.status, body)
}

// handler answers a REST call: a status and a JSON body (nil for 204), or
// an error.
type handler func(r *http.Request) (int, any, *apiErr)

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	api := func(method, path string, auth bool, h handler) {
		key := method + " " + path
		mux.HandleFunc(method+" /api/{ver}"+path, func(w http.ResponseWriter, r *http.Request) {
			s.serveREST(w, r, key, auth, h)
		})
	}
	api("GET", "/gateway", false, s.getGateway)
	api("GET", "/gateway/bot", true, s.getGatewayBot)
	api("GET", "/users/@me", true, s.getMe)
	api("POST", "/users/@me/channels", true, s.createDM)
	api("GET", "/channels/{channel}", true, s.getChannel)
	api("PATCH", "/channels/{channel}", true, s.patchChannel)
	api("POST", "/channels/{channel}/typing", true, s.typing)
	api("GET", "/channels/{channel}/messages", true, s.listMessages)
	api("POST", "/channels/{channel}/messages", true, s.postMessage)
	api("GET", "/channels/{channel}/messages/{message}", true, s.getMessage)
	api("PATCH", "/channels/{channel}/messages/{message}", true, s.patchMessage)
	api("DELETE", "/channels/{channel}/messages/{message}", true, s.deleteMessage)
	api("POST", "/channels/{channel}/threads", true, s.startThread)
	api("POST", "/channels/{channel}/messages/{message}/threads", true, s.startMessageThread)
	api("GET", "/applications/{app}/commands", true, s.getCommands)
	api("PUT", "/applications/{app}/commands", true, s.putCommands)
	api("GET", "/applications/{app}/guilds/{guild}/commands", true, s.getCommands)
	api("PUT", "/applications/{app}/guilds/{guild}/commands", true, s.putCommands)
	// Interaction endpoints are authorised by the token in the path, as in
	// Discord; an Authorization header is ignored.
	api("POST", "/interactions/{interaction}/{token}/callback", false, s.callback)
	api("POST", "/webhooks/{app}/{token}", false, s.followup)
	api("GET", "/webhooks/{app}/{token}/messages/{message}", false, s.getWebhookMessage)
	api("PATCH", "/webhooks/{app}/{token}/messages/{message}", false, s.editWebhookMessage)
	api("DELETE", "/webhooks/{app}/{token}/messages/{message}", false, s.deleteWebhookMessage)
	mux.HandleFunc("GET /gateway", s.serveGateway)
	mux.HandleFunc("GET /gateway/", s.serveGateway)
	mux.HandleFunc("GET /attachments/{channel}/{id}/{name}", s.serveAttachment)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { writeErr(w, errNotFound) })
	return mux
}

func (s *Server) serveREST(w http.ResponseWriter, r *http.Request, key string, auth bool, h handler) {
	s.mu.Lock()
	s.calls[key]++
	var limited *rateLimit
	if l := s.limits[key]; l != nil && l.n > 0 {
		l.n--
		limited = &rateLimit{n: l.n, retryAfter: l.retryAfter}
	}
	s.mu.Unlock()
	if auth && r.Header.Get("Authorization") != "Bot "+s.opts.BotToken {
		writeErr(w, errUnauthorized)
		return
	}
	if limited != nil {
		writeRateLimited(w, key, limited.retryAfter)
		return
	}
	status, body, e := h(r)
	if e != nil {
		writeErr(w, e)
		return
	}
	if body == nil {
		w.WriteHeader(status)
		return
	}
	writeJSON(w, status, body)
}

// writeRateLimited answers 429 as Discord does: the JSON body discordgo
// decodes (retry_after in seconds, fractional), Retry-After in whole
// seconds and the X-RateLimit-* headers discordgo's bucket reads.
func writeRateLimited(w http.ResponseWriter, route string, retryAfter time.Duration) {
	secs := retryAfter.Seconds()
	h := w.Header()
	h.Set("Retry-After", strconv.Itoa(int(math.Ceil(secs))))
	h.Set("X-RateLimit-Limit", "5")
	h.Set("X-RateLimit-Remaining", "0")
	h.Set("X-RateLimit-Reset", strconv.FormatFloat(float64(time.Now().Add(retryAfter).UnixMilli())/1000, 'f', 3, 64))
	h.Set("X-RateLimit-Reset-After", strconv.FormatFloat(secs, 'f', 3, 64))
	h.Set("X-RateLimit-Bucket", strconv.FormatUint(uint64(len(route))*2654435761, 16))
	h.Set("X-RateLimit-Scope", "user")
	writeJSON(w, http.StatusTooManyRequests, map[string]any{
		"message": "You are being rate limited.", "retry_after": secs, "global": false,
	})
}

func (s *Server) getGateway(r *http.Request) (int, any, *apiErr) {
	return 200, map[string]any{"url": s.GatewayURL()}, nil
}

func (s *Server) getGatewayBot(r *http.Request) (int, any, *apiErr) {
	return 200, map[string]any{
		"url": s.GatewayURL(), "shards": 1,
		"session_start_limit": map[string]any{"total": 1000, "remaining": 999, "reset_after": 86400000, "max_concurrency": 1},
	}, nil
}

func (s *Server) getMe(r *http.Request) (int, any, *apiErr) {
	return 200, s.botUser(), nil
}

func (s *Server) botUser() map[string]any {
	return map[string]any{"id": s.opts.BotUserID, "username": s.opts.BotName, "discriminator": "0",
		"global_name": nil, "avatar": nil, "bot": true}
}

func userObject(id string) map[string]any {
	return map[string]any{"id": id, "username": "user" + id, "discriminator": "0",
		"global_name": "User " + id, "avatar": nil}
}

// readBody reads a request's JSON body, or a multipart one as discordgo
// sends uploads. An empty body reads as {}.
func readBody(r *http.Request) (json.RawMessage, []Attachment, *apiErr) {
	return readPayload(r.Header.Get("Content-Type"), r.Body)
}

// readPayload reads a JSON body, or a multipart one (payload_json and
// files[n]). An empty body reads as {}.
func readPayload(contentType string, body io.Reader) (json.RawMessage, []Attachment, *apiErr) {
	mt, params, _ := mime.ParseMediaType(contentType)
	if mt == "multipart/form-data" {
		form, err := multipart.NewReader(body, params["boundary"]).ReadForm(32 << 20)
		if err != nil {
			return nil, nil, errBadJSON
		}
		defer func() { _ = form.RemoveAll() }()
		raw := json.RawMessage("{}")
		if v := form.Value["payload_json"]; len(v) > 0 {
			raw = json.RawMessage(v[0])
		}
		if !json.Valid(raw) {
			return nil, nil, errBadJSON
		}
		type part struct {
			idx int
			a   Attachment
		}
		var parts []part
		for name, fhs := range form.File {
			idx := 0
			if n, ok := strings.CutPrefix(name, "files["); ok {
				i, err := strconv.Atoi(strings.TrimSuffix(n, "]"))
				if err != nil {
					continue
				}
				idx = i
			} else if name != "file" {
				continue
			}
			for _, fh := range fhs {
				f, err := fh.Open()
				if err != nil {
					return nil, nil, errBadJSON
				}
				b, err := io.ReadAll(f)
				_ = f.Close()
				if err != nil {
					return nil, nil, errBadJSON
				}
				parts = append(parts, part{idx, Attachment{Filename: fh.Filename, ContentType: fh.Header.Get("Content-Type"), Content: b}})
			}
		}
		sort.SliceStable(parts, func(i, j int) bool { return parts[i].idx < parts[j].idx })
		files := make([]Attachment, len(parts))
		for i, p := range parts {
			files[i] = p.a
		}
		return raw, files, nil
	}
	b, err := io.ReadAll(body)
	if err != nil {
		return nil, nil, errBadJSON
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return json.RawMessage("{}"), nil, nil
	}
	if !json.Valid(b) {
		return nil, nil, errBadJSON
	}
	return b, nil, nil
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

// msgPayload is the message part of a create or edit (also an
// interaction callback's data).
type msgPayload struct {
	Content          *string         `json:"content"`
	Embeds           json.RawMessage `json:"embeds"`
	Components       json.RawMessage `json:"components"`
	Flags            *int            `json:"flags"`
	Attachments      json.RawMessage `json:"attachments"`
	MessageReference *struct {
		MessageID string `json:"message_id"`
	} `json:"message_reference"`
}

func parsePayload(raw json.RawMessage) (msgPayload, *apiErr) {
	var p msgPayload
	if isNull(raw) {
		return p, nil
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return p, formErr("MODEL_TYPE_CONVERT", "Invalid payload: "+err.Error())
	}
	if isNull(p.Embeds) {
		p.Embeds = nil
	}
	if isNull(p.Components) {
		p.Components = nil
	}
	if isNull(p.Attachments) {
		p.Attachments = nil
	}
	return p, nil
}

// validate checks a payload as Discord does; create also refuses an empty
// message.
func (p msgPayload) validate(nfiles int, create bool) *apiErr {
	if p.Content != nil && utf8.RuneCountInString(*p.Content) > 2000 {
		return formErr("BASE_TYPE_MAX_LENGTH", "Must be 2000 or fewer in length.", "content")
	}
	var embeds []map[string]any
	if p.Embeds != nil {
		if err := json.Unmarshal(p.Embeds, &embeds); err != nil {
			return formErr("MODEL_TYPE_CONVERT", "Only iterables may be used in a ListType", "embeds")
		}
		if len(embeds) > 10 {
			return formErr("BASE_TYPE_MAX_LENGTH", "Must be 10 or fewer in length.", "embeds")
		}
		for i, e := range embeds {
			if d, _ := e["description"].(string); utf8.RuneCountInString(d) > 4096 {
				return formErr("BASE_TYPE_MAX_LENGTH", "Must be 4096 or fewer in length.", "embeds", strconv.Itoa(i), "description")
			}
			if t, _ := e["title"].(string); utf8.RuneCountInString(t) > 256 {
				return formErr("BASE_TYPE_MAX_LENGTH", "Must be 256 or fewer in length.", "embeds", strconv.Itoa(i), "title")
			}
		}
	}
	ncomp := 0
	if p.Components != nil {
		n, e := validateComponents(p.Components)
		if e != nil {
			return e
		}
		ncomp = n
	}
	if create && (p.Content == nil || *p.Content == "") && len(embeds) == 0 && ncomp == 0 && nfiles == 0 {
		return errEmptyMessage
	}
	return nil
}

// validateComponents checks the classic layout: at most 5 action rows
// (type 1) of 1 to 5 components; buttons need a custom_id (or a url for
// style 5), custom_ids are at most 100 characters and unique. It returns
// how many rows there are.
func validateComponents(raw json.RawMessage) (int, *apiErr) {
	var rows []struct {
		Type       int              `json:"type"`
		Components []map[string]any `json:"components"`
	}
	if err := json.Unmarshal(raw, &rows); err != nil {
		return 0, formErr("MODEL_TYPE_CONVERT", "Only iterables may be used in a ListType", "components")
	}
	if len(rows) > 5 {
		return 0, formErr("BASE_TYPE_MAX_LENGTH", "Must be 5 or fewer in length.", "components")
	}
	seen := map[string]bool{}
	for i, row := range rows {
		ri := strconv.Itoa(i)
		if row.Type != 1 {
			return 0, formErr("UNION_TYPE_CHOICES", "Value of field \"type\" must be one of (1,).", "components", ri, "type")
		}
		if len(row.Components) < 1 || len(row.Components) > 5 {
			return 0, formErr("BASE_TYPE_BAD_LENGTH", "Must be between 1 and 5 in length.", "components", ri, "components")
		}
		for j, c := range row.Components {
			ci := strconv.Itoa(j)
			typ, _ := c["type"].(float64)
			id, _ := c["custom_id"].(string)
			style, _ := c["style"].(float64)
			if typ == 2 && style == 5 {
				if u, _ := c["url"].(string); u == "" {
					return 0, formErr("BASE_TYPE_REQUIRED", "This field is required", "components", ri, "components", ci, "url")
				}
				continue
			}
			if id == "" {
				return 0, formErr("BASE_TYPE_REQUIRED", "This field is required", "components", ri, "components", ci, "custom_id")
			}
			if utf8.RuneCountInString(id) > 100 {
				return 0, formErr("BASE_TYPE_MAX_LENGTH", "Must be 100 or fewer in length.", "components", ri, "components", ci, "custom_id")
			}
			if seen[id] {
				return 0, formErr("COMPONENT_CUSTOM_ID_DUPLICATED", "Component custom id cannot be duplicated", "components", ri, "components", ci, "custom_id")
			}
			seen[id] = true
		}
	}
	return len(rows), nil
}

func (s *Server) getChannel(r *http.Request) (int, any, *apiErr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.channels[r.PathValue("channel")]
	if !ok {
		return 0, nil, errUnknownChannel
	}
	return 200, s.wireChannelLocked(c), nil
}

func (s *Server) patchChannel(r *http.Request) (int, any, *apiErr) {
	raw, _, e := readBody(r)
	if e != nil {
		return 0, nil, e
	}
	var p struct {
		Name     *string `json:"name"`
		Archived *bool   `json:"archived"`
		Locked   *bool   `json:"locked"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return 0, nil, formErr("MODEL_TYPE_CONVERT", "Invalid payload", "name")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.channels[r.PathValue("channel")]
	if !ok {
		return 0, nil, errUnknownChannel
	}
	if p.Name != nil {
		if n := utf8.RuneCountInString(*p.Name); n < 1 || n > 100 {
			return 0, nil, formErr("BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length.", "name")
		}
		c.Name = *p.Name
	}
	if c.isThread() {
		if p.Archived != nil {
			c.Archived = *p.Archived
		}
		if p.Locked != nil {
			c.Locked = *p.Locked
		}
	}
	w := s.wireChannelLocked(c)
	if c.isThread() {
		s.dispatchLocked("THREAD_UPDATE", w, IntentGuilds)
	} else {
		s.dispatchLocked("CHANNEL_UPDATE", w, IntentGuilds)
	}
	return 200, w, nil
}

func (s *Server) typing(r *http.Request) (int, any, *apiErr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.channels[r.PathValue("channel")]; !ok {
		return 0, nil, errUnknownChannel
	}
	return http.StatusNoContent, nil, nil
}

func (s *Server) wireChannelLocked(c *Channel) map[string]any {
	if c.Type == ChannelDM {
		return s.wireDMLocked(c)
	}
	out := map[string]any{"id": c.ID, "type": c.Type, "guild_id": c.GuildID, "name": c.Name,
		"flags": 0, "rate_limit_per_user": 0}
	if c.isThread() {
		n := len(s.chanMsgs[c.ID])
		out["parent_id"] = c.ParentID
		out["owner_id"] = c.OwnerID
		out["message_count"] = n
		out["total_message_sent"] = n
		out["member_count"] = 1
		out["thread_metadata"] = map[string]any{"archived": c.Archived, "locked": c.Locked,
			"auto_archive_duration": c.AutoArchiveDuration, "archive_timestamp": time.Now().UTC().Format(time.RFC3339Nano)}
	} else {
		out["position"] = 0
		out["permission_overwrites"] = []any{}
		out["nsfw"] = false
		out["topic"] = nil
	}
	if ms := s.chanMsgs[c.ID]; len(ms) > 0 {
		out["last_message_id"] = ms[len(ms)-1].ID
	}
	return out
}

func (s *Server) wireMessageLocked(m *Message) map[string]any {
	var author map[string]any
	if m.Bot {
		author = s.botUser()
	} else {
		author = userObject(m.AuthorID)
	}
	atts := make([]map[string]any, len(m.Attachments))
	for i, a := range m.Attachments {
		u := s.attachmentURLLocked(m.ChannelID, a)
		atts[i] = map[string]any{"id": a.ID, "filename": a.Filename, "size": len(a.Content),
			"url": u, "proxy_url": u, "content_type": a.ContentType}
	}
	mentions := []any{}
	if mentionsBot(m.Content, s.opts.BotUserID) {
		mentions = append(mentions, s.botUser())
	}
	var edited any
	if m.edited != nil {
		edited = m.edited.Format(time.RFC3339Nano)
	}
	typ := 0
	if m.ReferenceID != "" {
		typ = 19
	}
	out := map[string]any{
		"id": m.ID, "channel_id": m.ChannelID, "guild_id": s.opts.GuildID, "type": typ,
		"content": m.Content, "author": author, "timestamp": m.Timestamp.Format(time.RFC3339Nano),
		"edited_timestamp": edited, "tts": false, "mention_everyone": false, "mentions": mentions,
		"mention_roles": []any{}, "attachments": atts, "embeds": rawOr(m.Embeds), "components": rawOr(m.Components),
		"pinned": false, "flags": m.Flags,
	}
	if !m.Bot {
		out["member"] = map[string]any{"roles": nonNil(m.Roles), "joined_at": "2024-01-01T00:00:00Z", "deaf": false, "mute": false}
	}
	if m.ReferenceID != "" {
		out["message_reference"] = map[string]any{"message_id": m.ReferenceID, "channel_id": m.ChannelID, "guild_id": s.opts.GuildID}
	}
	if s.isDMLocked(m.ChannelID) {
		// A DM is in no guild: its messages have no guild_id and no
		// member, as Discord sends them.
		delete(out, "guild_id")
		delete(out, "member")
		if ref, ok := out["message_reference"].(map[string]any); ok {
			delete(ref, "guild_id")
		}
	}
	if m.InteractionID != "" {
		out["webhook_id"] = s.opts.AppID
		out["application_id"] = s.opts.AppID
		if ir := s.interactionByIDLocked(m.InteractionID); ir != nil {
			out["interaction_metadata"] = map[string]any{"id": ir.id, "type": ir.typ, "user": userObject(ir.userID)}
			if ir.typ == 2 {
				out["type"] = 20
			}
		}
	}
	if m.thread != "" {
		if c, ok := s.channels[m.thread]; ok {
			out["thread"] = s.wireChannelLocked(c)
		}
	}
	return out
}

func rawOr(raw json.RawMessage) any {
	if raw == nil {
		return []any{}
	}
	return raw
}

func nonNil(ss []string) []string {
	if ss == nil {
		return []string{}
	}
	return ss
}

func mentionsBot(content, botID string) bool {
	return strings.Contains(content, "<@"+botID+">") || strings.Contains(content, "<@!"+botID+">")
}

func (s *Server) listMessages(r *http.Request) (int, any, *apiErr) {
	q := r.URL.Query()
	limit := 50
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return 0, nil, formErr("NUMBER_TYPE_MAX", "int value should be between 1 and 100.", "limit")
		}
		limit = n
	}
	before, after := parseID(q.Get("before")), parseID(q.Get("after"))
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.channels[r.PathValue("channel")]; !ok {
		return 0, nil, errUnknownChannel
	}
	out := []map[string]any{}
	ms := s.chanMsgs[r.PathValue("channel")]
	if q.Get("after") != "" {
		// Oldest after the cursor, returned newest first.
		var sel []*Message
		for _, m := range ms {
			if m.Flags&FlagEphemeral == 0 && parseID(m.ID) > after && len(sel) < limit {
				sel = append(sel, m)
			}
		}
		for i := len(sel) - 1; i >= 0; i-- {
			out = append(out, s.wireMessageLocked(sel[i]))
		}
		return 200, out, nil
	}
	for i := len(ms) - 1; i >= 0 && len(out) < limit; i-- {
		m := ms[i]
		if m.Flags&FlagEphemeral != 0 || (q.Get("before") != "" && parseID(m.ID) >= before) {
			continue
		}
		out = append(out, s.wireMessageLocked(m))
	}
	return 200, out, nil
}

func parseID(s string) uint64 {
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}

func (s *Server) postMessage(r *http.Request) (int, any, *apiErr) {
	raw, files, e := readBody(r)
	if e != nil {
		return 0, nil, e
	}
	p, e := parsePayload(raw)
	if e != nil {
		return 0, nil, e
	}
	if e := p.validate(len(files), true); e != nil {
		return 0, nil, e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := r.PathValue("channel")
	c, ok := s.channels[ch]
	if !ok {
		return 0, nil, errUnknownChannel
	}
	if c.Type == ChannelForum {
		return 0, nil, errNonText // a forum takes posts (threads), not messages
	}
	if p.MessageReference != nil && p.MessageReference.MessageID != "" {
		if ref, ok := s.msgs[p.MessageReference.MessageID]; !ok || ref.ChannelID != ch {
			return 0, nil, formErr("MESSAGE_REFERENCE_UNKNOWN_MESSAGE", "Unknown message", "message_reference", "message_id")
		}
	}
	m := s.newBotMessageLocked(ch, p, files, "")
	return 200, s.wireMessageLocked(m), nil
}

// newBotMessageLocked stores a message the app posted and dispatches it
// (unless ephemeral) as Discord echoes a bot's own messages.
func (s *Server) newBotMessageLocked(ch string, p msgPayload, files []Attachment, interactionID string) *Message {
	m := &Message{ID: s.nextIDLocked(), ChannelID: ch, AuthorID: s.opts.BotUserID, Bot: true,
		Embeds: p.Embeds, Components: p.Components, InteractionID: interactionID, Timestamp: time.Now().UTC()}
	if p.Content != nil {
		m.Content = *p.Content
	}
	if p.Flags != nil {
		m.Flags = *p.Flags
	}
	if p.MessageReference != nil {
		m.ReferenceID = p.MessageReference.MessageID
	}
	for _, f := range files {
		f.ID = s.nextIDLocked()
		m.Attachments = append(m.Attachments, f)
	}
	s.addMessageLocked(m)
	return m
}

func (s *Server) addMessageLocked(m *Message) {
	s.msgs[m.ID] = m
	s.chanMsgs[m.ChannelID] = append(s.chanMsgs[m.ChannelID], m)
	if m.Flags&FlagEphemeral == 0 {
		s.dispatchMessageLocked("MESSAGE_CREATE", m)
	}
}

// editMessageLocked applies an edit: fields present in p replace the
// message's; an attachments array keeps only the listed attachments; new
// files are added.
func (s *Server) editMessageLocked(m *Message, p msgPayload, files []Attachment) {
	if p.Content != nil {
		m.Content = *p.Content
	}
	if p.Embeds != nil {
		m.Embeds = p.Embeds
	}
	if p.Components != nil {
		m.Components = p.Components
	}
	if p.Attachments != nil {
		var keep []struct {
			ID json.RawMessage `json:"id"`
		}
		_ = json.Unmarshal(p.Attachments, &keep)
		ids := map[string]bool{}
		for _, k := range keep {
			ids[strings.Trim(string(k.ID), `"`)] = true
		}
		var kept []Attachment
		for _, a := range m.Attachments {
			if ids[a.ID] {
				kept = append(kept, a)
			}
		}
		m.Attachments = kept
	}
	for _, f := range files {
		f.ID = s.nextIDLocked()
		m.Attachments = append(m.Attachments, f)
	}
	now := time.Now().UTC()
	m.edited = &now
	m.Edits++
	if m.Flags&FlagEphemeral == 0 {
		s.dispatchMessageLocked("MESSAGE_UPDATE", m)
	}
}

func (s *Server) getMessage(r *http.Request) (int, any, *apiErr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, e := s.channelMessageLocked(r)
	if e != nil {
		return 0, nil, e
	}
	return 200, s.wireMessageLocked(m), nil
}

func (s *Server) channelMessageLocked(r *http.Request) (*Message, *apiErr) {
	if _, ok := s.channels[r.PathValue("channel")]; !ok {
		return nil, errUnknownChannel
	}
	m, ok := s.msgs[r.PathValue("message")]
	if !ok || m.ChannelID != r.PathValue("channel") || m.Flags&FlagEphemeral != 0 {
		return nil, errUnknownMessage
	}
	return m, nil
}

func (s *Server) patchMessage(r *http.Request) (int, any, *apiErr) {
	raw, files, e := readBody(r)
	if e != nil {
		return 0, nil, e
	}
	p, e := parsePayload(raw)
	if e != nil {
		return 0, nil, e
	}
	if e := p.validate(len(files), false); e != nil {
		return 0, nil, e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m, e := s.channelMessageLocked(r)
	if e != nil {
		return 0, nil, e
	}
	if !m.Bot || m.InteractionID != "" {
		return 0, nil, errNotAuthor
	}
	s.editMessageLocked(m, p, files)
	return 200, s.wireMessageLocked(m), nil
}

func (s *Server) deleteMessage(r *http.Request) (int, any, *apiErr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, e := s.channelMessageLocked(r)
	if e != nil {
		return 0, nil, e
	}
	s.deleteMessageLocked(m)
	return http.StatusNoContent, nil, nil
}

func (s *Server) deleteMessageLocked(m *Message) {
	delete(s.msgs, m.ID)
	ms := s.chanMsgs[m.ChannelID]
	for i, x := range ms {
		if x == m {
			s.chanMsgs[m.ChannelID] = append(ms[:i:i], ms[i+1:]...)
			break
		}
	}
	if m.Flags&FlagEphemeral == 0 {
		s.dispatchLocked("MESSAGE_DELETE", map[string]any{"id": m.ID, "channel_id": m.ChannelID, "guild_id": s.opts.GuildID}, IntentGuildMessages)
	}
}

type threadPayload struct {
	Name                string `json:"name"`
	Type                *int   `json:"type"`
	AutoArchiveDuration int    `json:"auto_archive_duration"`
	// Message is a forum post's starter message.
	Message json.RawMessage `json:"message"`

	files []Attachment // a forum post's uploads
}

func readThreadPayload(r *http.Request) (threadPayload, *apiErr) {
	var p threadPayload
	raw, files, e := readBody(r)
	if e != nil {
		return p, e
	}
	p.files = files
	if err := json.Unmarshal(raw, &p); err != nil {
		return p, formErr("MODEL_TYPE_CONVERT", "Invalid payload", "name")
	}
	if n := utf8.RuneCountInString(p.Name); n < 1 || n > 100 {
		return p, formErr("BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length.", "name")
	}
	switch p.AutoArchiveDuration {
	case 0:
		p.AutoArchiveDuration = 4320
	case 60, 1440, 4320, 10080:
	default:
		return p, formErr("BASE_TYPE_CHOICES", "Value must be one of {60, 1440, 4320, 10080}.", "auto_archive_duration")
	}
	return p, nil
}

// startThread is "Start Thread without Message". As in API v9/v10, type
// defaults to a private thread. In a forum it is "Start Thread in Forum
// or Media Channel" (see forumPostLocked).
func (s *Server) startThread(r *http.Request) (int, any, *apiErr) {
	p, e := readThreadPayload(r)
	if e != nil {
		return 0, nil, e
	}
	s.mu.Lock()
	if parent, ok := s.channels[r.PathValue("channel")]; ok && parent.Type == ChannelForum {
		defer s.mu.Unlock()
		return s.forumPostLocked(parent, p, p.files)
	}
	s.mu.Unlock()
	typ := ChannelPrivateThread
	if p.Type != nil {
		typ = *p.Type
	}
	if typ != ChannelPublicThread && typ != ChannelPrivateThread && typ != 10 {
		return 0, nil, formErr("BASE_TYPE_CHOICES", "Value must be one of {10, 11, 12}.", "type")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	parent, ok := s.channels[r.PathValue("channel")]
	if !ok {
		return 0, nil, errUnknownChannel
	}
	if parent.Type != ChannelText && parent.Type != ChannelAnnouncement {
		return 0, nil, errChannelType
	}
	c := &Channel{ID: s.nextIDLocked(), GuildID: s.opts.GuildID, Name: p.Name, Type: typ,
		ParentID: parent.ID, OwnerID: s.opts.BotUserID, AutoArchiveDuration: p.AutoArchiveDuration}
	return 201, s.createThreadLocked(c), nil
}

func (s *Server) createThreadLocked(c *Channel) map[string]any {
	s.addChannelLocked(c)
	w := s.wireChannelLocked(c)
	ev := map[string]any{"newly_created": true}
	for k, v := range w {
		ev[k] = v
	}
	s.dispatchLocked("THREAD_CREATE", ev, IntentGuilds)
	return w
}

// startMessageThread is "Start Thread from Message": the thread gets the
// message's ID, as in Discord.
func (s *Server) startMessageThread(r *http.Request) (int, any, *apiErr) {
	p, e := readThreadPayload(r)
	if e != nil {
		return 0, nil, e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m, e := s.channelMessageLocked(r)
	if e != nil {
		return 0, nil, e
	}
	parent := s.channels[m.ChannelID]
	if parent.Type != ChannelText && parent.Type != ChannelAnnouncement {
		return 0, nil, errChannelType
	}
	if m.thread != "" {
		return 0, nil, errThreadExists
	}
	typ := ChannelPublicThread
	if parent.Type == ChannelAnnouncement {
		typ = 10
	}
	c := &Channel{ID: m.ID, GuildID: s.opts.GuildID, Name: p.Name, Type: typ, ParentID: parent.ID,
		OwnerID: s.opts.BotUserID, AutoArchiveDuration: p.AutoArchiveDuration, StarterMessageID: m.ID}
	m.thread = c.ID
	m.Flags |= 1 << 5 // HAS_THREAD
	return 201, s.createThreadLocked(c), nil
}

func (s *Server) serveAttachment(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.attachmentValid(r, r.PathValue("channel"), r.PathValue("id"), r.PathValue("name")) {
		http.Error(w, "This content is no longer available.", http.StatusNotFound)
		return
	}
	for _, m := range s.chanMsgs[r.PathValue("channel")] {
		for _, a := range m.Attachments {
			if a.ID == r.PathValue("id") && a.Filename == r.PathValue("name") {
				if a.ContentType != "" {
					w.Header().Set("Content-Type", a.ContentType)
				}
				// The CDN says the length, as Discord's does.
				w.Header().Set("Content-Length", strconv.Itoa(len(a.Content)))
				_, _ = w.Write(a.Content)
				return
			}
		}
	}
	http.NotFound(w, r)
}

var commandName = regexp.MustCompile(`^[-_\p{L}\p{N}]{1,32}$`)

func (s *Server) commandScope(r *http.Request) (string, *apiErr) {
	if r.PathValue("app") != s.opts.AppID {
		return "", errMissingAccess
	}
	g := r.PathValue("guild")
	if g != "" && g != s.opts.GuildID {
		return "", errMissingAccess
	}
	return g, nil
}

func (s *Server) getCommands(r *http.Request) (int, any, *apiErr) {
	g, e := s.commandScope(r)
	if e != nil {
		return 0, nil, e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []json.RawMessage{}
	for _, c := range s.commands {
		if c.GuildID == g {
			out = append(out, c.Raw)
		}
	}
	return 200, out, nil
}

// putCommands is Bulk Overwrite: the commands of the scope become exactly
// these; a command keeps its ID when one of the same name and type was
// there.
func (s *Server) putCommands(r *http.Request) (int, any, *apiErr) {
	g, e := s.commandScope(r)
	if e != nil {
		return 0, nil, e
	}
	raw, _, e := readBody(r)
	if e != nil {
		return 0, nil, e
	}
	var cmds []map[string]any
	if err := json.Unmarshal(raw, &cmds); err != nil {
		return 0, nil, formErr("MODEL_TYPE_CONVERT", "Only iterables may be used in a ListType")
	}
	if len(cmds) > 100 {
		return 0, nil, formErr("BASE_TYPE_MAX_LENGTH", "Must be 100 or fewer in length.")
	}
	for i, c := range cmds {
		if e := validateCommand(c, strconv.Itoa(i)); e != nil {
			return 0, nil, e
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var kept []Command
	old := map[string]string{}
	for _, c := range s.commands {
		if c.GuildID == g {
			old[strconv.Itoa(c.Type)+"/"+c.Name] = c.ID
		} else {
			kept = append(kept, c)
		}
	}
	out := make([]json.RawMessage, 0, len(cmds))
	for _, c := range cmds {
		typ := 1
		if t, ok := c["type"].(float64); ok {
			typ = int(t)
		}
		name, _ := c["name"].(string)
		desc, _ := c["description"].(string)
		id := old[strconv.Itoa(typ)+"/"+name]
		if id == "" {
			id = s.nextIDLocked()
		}
		c["id"], c["application_id"], c["version"], c["type"] = id, s.opts.AppID, s.nextIDLocked(), typ
		if g != "" {
			c["guild_id"] = g
		}
		if _, ok := c["default_member_permissions"]; !ok {
			c["default_member_permissions"] = nil
		}
		b, _ := json.Marshal(c)
		kept = append(kept, Command{ID: id, GuildID: g, Name: name, Type: typ, Description: desc, Raw: b})
		out = append(out, b)
	}
	s.commands = kept
	return 200, out, nil
}

// validateCommand checks names and descriptions as Discord does: chat
// input commands and their options need a lowercase name and a 1-100
// character description; user and message commands have no description.
func validateCommand(c map[string]any, idx string) *apiErr {
	typ := 1
	if t, ok := c["type"].(float64); ok {
		typ = int(t)
	}
	name, _ := c["name"].(string)
	if typ == 1 && (!commandName.MatchString(name) || strings.ToLower(name) != name) {
		return formErr("APPLICATION_COMMAND_INVALID_NAME", "Command name is invalid", idx, "name")
	}
	if typ != 1 && (name == "" || utf8.RuneCountInString(name) > 32) {
		return formErr("BASE_TYPE_BAD_LENGTH", "Must be between 1 and 32 in length.", idx, "name")
	}
	desc, _ := c["description"].(string)
	if typ == 1 {
		if n := utf8.RuneCountInString(desc); n < 1 || n > 100 {
			return formErr("BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length.", idx, "description")
		}
	} else if desc != "" {
		return formErr("APPLICATION_COMMAND_CONTEXT_MENU_DESCRIPTION", "Context menu commands cannot have description", idx, "description")
	}
	return validateOptions(c["options"], idx, "options")
}

func validateOptions(v any, path ...string) *apiErr {
	opts, _ := v.([]any)
	if len(opts) > 25 {
		return formErr("BASE_TYPE_MAX_LENGTH", "Must be 25 or fewer in length.", path...)
	}
	for i, o := range opts {
		m, _ := o.(map[string]any)
		p := append(append([]string{}, path...), strconv.Itoa(i))
		name, _ := m["name"].(string)
		if !commandName.MatchString(name) || strings.ToLower(name) != name {
			return formErr("APPLICATION_COMMAND_INVALID_NAME", "Command name is invalid", append(p, "name")...)
		}
		desc, _ := m["description"].(string)
		if n := utf8.RuneCountInString(desc); n < 1 || n > 100 {
			return formErr("BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length.", append(p, "description")...)
		}
		if t, _ := m["type"].(float64); t < 1 || t > 11 {
			return formErr("BASE_TYPE_CHOICES", "Value must be one of {1..11}.", append(p, "type")...)
		}
		if e := validateOptions(m["options"], append(p, "options")...); e != nil {
			return e
		}
	}
	return nil
}
