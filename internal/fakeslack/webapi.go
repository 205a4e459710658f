package fakeslack

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// tokenKind is the kind of token a Web API method takes.
type tokenKind int

const (
	botToken tokenKind = iota
	appToken
)

// apiError is a Web API error: {"ok":false,"error":code} plus details.
type apiError struct {
	code   string
	errors []string
	// needed and provided are the scopes a missing_scope error names.
	needed, provided string
}

func errCode(code string) *apiError { return &apiError{code: code} }

// apiHandler answers one Web API method; the map is the answer without "ok".
type apiHandler func(s *Server, p params) (map[string]any, *apiError)

type apiMethod struct {
	token tokenKind
	fn    apiHandler
}

var apiMethods = map[string]apiMethod{
	"auth.test":                      {botToken, (*Server).authTest},
	"apps.connections.open":          {appToken, (*Server).appsConnectionsOpen},
	"chat.postMessage":               {botToken, (*Server).chatPostMessage},
	"chat.update":                    {botToken, (*Server).chatUpdate},
	"chat.delete":                    {botToken, (*Server).chatDelete},
	"chat.postEphemeral":             {botToken, (*Server).chatPostEphemeral},
	"chat.getPermalink":              {botToken, (*Server).chatGetPermalink},
	"conversations.replies":          {botToken, (*Server).conversationsReplies},
	"conversations.history":          {botToken, (*Server).conversationsHistory},
	"users.info":                     {botToken, (*Server).usersInfo},
	"files.getUploadURLExternal":     {botToken, (*Server).filesGetUploadURLExternal},
	"files.completeUploadExternal":   {botToken, (*Server).filesCompleteUploadExternal},
	"files.info":                     {botToken, (*Server).filesInfo},
	"conversations.info":             {botToken, (*Server).conversationsInfo},
	"apps.event.authorizations.list": {appToken, (*Server).appsEventAuthorizationsList},
}

// maxTextRunes is the longest text chat.postMessage and chat.update take.
const maxTextRunes = 40000

// serveAPI answers /api/{method} as Slack's Web API: HTTP 200 with
// {"ok":true,...} or {"ok":false,"error":"..."}; HTTP 429 with Retry-After
// when rate-limited.
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	method := r.PathValue("method")
	s.mu.Lock()
	s.calls[method]++
	rl, limited := s.rateLimits[method]
	if limited && rl.n > 0 {
		rl.n--
		s.rateLimits[method] = rl
	} else {
		limited = false
	}
	refusal := s.refusedMethods[method]
	s.mu.Unlock()
	if limited {
		secs := int(math.Ceil(rl.retryAfter.Seconds()))
		w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
		writeJSON(w, http.StatusTooManyRequests, map[string]any{"ok": false, "error": "ratelimited"})
		return
	}

	if refusal != "" {
		writeAPIError(w, refusalError(method, refusal))
		return
	}
	m, ok := apiMethods[method]
	if !ok {
		writeJSON(w, http.StatusOK, map[string]any{"ok": false, "error": "unknown_method", "req_method": method})
		return
	}
	p, perr := parseParams(r)
	if perr != nil {
		writeAPIError(w, perr)
		return
	}
	if aerr := s.checkToken(r, p, m.token); aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	out, aerr := m.fn(s, p)
	if aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	if out == nil {
		out = map[string]any{}
	}
	out["ok"] = true
	writeJSON(w, http.StatusOK, out)
}

// checkToken checks the request's token as Slack does: from the
// Authorization header, or from the token argument of a form or query (never
// from a JSON body).
func (s *Server) checkToken(r *http.Request, p params, want tokenKind) *apiError {
	tok, hasBearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !hasBearer {
		if p.js == nil {
			tok = p.v.Get("token")
		} else {
			tok = ""
		}
	}
	tok = strings.TrimSpace(tok)
	switch {
	case tok == "":
		return errCode("not_authed")
	case want == botToken && tok == s.opts.BotToken, want == appToken && tok == s.opts.AppToken:
		return nil
	case tok == s.opts.BotToken, tok == s.opts.AppToken:
		return errCode("not_allowed_token_type")
	default:
		return errCode("invalid_auth")
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeAPIError(w http.ResponseWriter, e *apiError) {
	out := map[string]any{"ok": false, "error": e.code}
	if e.needed != "" {
		out["needed"], out["provided"] = e.needed, e.provided
	}
	if len(e.errors) > 0 {
		out["errors"] = e.errors
		msgs := make([]string, len(e.errors))
		for i, m := range e.errors {
			msgs[i] = "[ERROR] " + m
		}
		out["response_metadata"] = map[string]any{"messages": msgs}
	}
	writeJSON(w, http.StatusOK, out)
}

// params are a Web API call's arguments: form and query values, or the
// fields of a JSON body.
type params struct {
	v  url.Values
	js map[string]json.RawMessage
}

// parseParams reads the arguments from the query and from a form,
// multipart or JSON body, as Slack accepts them.
func parseParams(r *http.Request) (params, *apiError) {
	p := params{v: r.URL.Query()}
	ct := r.Header.Get("Content-Type")
	if ct == "" || r.Body == nil {
		return p, nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return p, errCode("invalid_form_data")
	}
	switch mt {
	case "application/json":
		body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
		if err != nil {
			return p, errCode("invalid_json")
		}
		p.js = map[string]json.RawMessage{}
		if len(bytes.TrimSpace(body)) > 0 {
			if err := json.Unmarshal(body, &p.js); err != nil {
				return p, errCode("invalid_json")
			}
		}
	case "application/x-www-form-urlencoded":
		if err := r.ParseForm(); err != nil {
			return p, errCode("invalid_form_data")
		}
		for k, vs := range r.PostForm {
			p.v[k] = append(p.v[k], vs...)
		}
	case "multipart/form-data":
		if err := r.ParseMultipartForm(32 << 20); err != nil {
			return p, errCode("invalid_form_data")
		}
		for k, vs := range r.MultipartForm.Value {
			p.v[k] = append(p.v[k], vs...)
		}
	}
	return p, nil
}

// get returns an argument as a string: a JSON string's value, another JSON
// value's text, or the form value.
func (p params) get(k string) string {
	if p.js != nil {
		raw, ok := p.js[k]
		if !ok || string(raw) == "null" {
			return p.v.Get(k)
		}
		var str string
		if json.Unmarshal(raw, &str) == nil {
			return str
		}
		return string(raw)
	}
	return p.v.Get(k)
}

func (p params) has(k string) bool {
	if p.js != nil {
		if _, ok := p.js[k]; ok {
			return true
		}
	}
	return p.v.Has(k)
}

// bool reads a boolean argument as Slack does: "true" or "1".
func (p params) bool(k string) bool {
	v := p.get(k)
	return v == "true" || v == "1"
}

// rawJSON returns a JSON-valued argument (blocks, metadata, files): a JSON
// body carries it as a value or as a string of JSON, a form as a string of
// JSON. ok is false when the argument is absent or empty; err when it is not
// JSON.
func (p params) rawJSON(k string) (raw json.RawMessage, ok bool, err error) {
	if !p.has(k) {
		return nil, false, nil
	}
	if p.js != nil {
		if r, in := p.js[k]; in {
			var str string
			if json.Unmarshal(r, &str) != nil {
				if string(r) == "null" {
					return nil, false, nil
				}
				return r, true, nil
			}
			raw = json.RawMessage(str)
		}
	}
	if raw == nil {
		raw = json.RawMessage(p.v.Get(k))
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, false, nil
	}
	if !json.Valid(raw) {
		return nil, true, fmt.Errorf("%s is not JSON", k)
	}
	return raw, true, nil
}

func (s *Server) authTest(p params) (map[string]any, *apiError) {
	return map[string]any{
		"url":                   "https://" + teamDomain + ".slack.com/",
		"team":                  "Fake Workspace",
		"user":                  "agentbot",
		"team_id":               s.opts.TeamID,
		"user_id":               s.opts.BotUserID,
		"bot_id":                s.opts.BotID,
		"is_enterprise_install": false,
	}, nil
}

func (s *Server) appsConnectionsOpen(p params) (map[string]any, *apiError) {
	ticket := newUUID()
	s.mu.Lock()
	s.tickets[ticket] = true
	s.mu.Unlock()
	u := "ws" + strings.TrimPrefix(s.srv.URL, "http") + "/socketmode?ticket=" + ticket + "&app_id=" + s.opts.AppID
	return map[string]any{"url": u}, nil
}

func (s *Server) appsEventAuthorizationsList(p params) (map[string]any, *apiError) {
	return map[string]any{"authorizations": s.authorizations()}, nil
}

// content is what chat.postMessage, chat.update and chat.postEphemeral take
// besides their addressing.
type content struct {
	text                      string
	hasText                   bool
	blocks, attachments       json.RawMessage
	hasBlocks, hasAttachments bool
	metadata                  *Metadata
	hasMetadata               bool
}

func (c content) empty() bool {
	return c.text == "" && len(c.blocks) == 0 && len(c.attachments) == 0
}

// readContent reads and checks text, blocks, attachments and metadata.
func readContent(p params) (content, *apiError) {
	c := content{text: p.get("text"), hasText: p.has("text")}
	if utf8.RuneCountInString(c.text) > maxTextRunes {
		return c, errCode("msg_too_long")
	}
	var err error
	c.blocks, c.hasBlocks, err = p.rawJSON("blocks")
	if err != nil {
		return c, errCode("invalid_blocks_format")
	}
	if c.hasBlocks {
		if e := validateBlocks(c.blocks); e != nil {
			return c, e
		}
	}
	c.attachments, c.hasAttachments, err = p.rawJSON("attachments")
	if err != nil || (c.hasAttachments && !isJSONArray(c.attachments)) {
		return c, errCode("invalid_attachments")
	}
	md, hasMD, err := p.rawJSON("metadata")
	if err != nil {
		return c, errCode("invalid_metadata_format")
	}
	if hasMD {
		var m struct {
			EventType    string          `json:"event_type"`
			EventPayload json.RawMessage `json:"event_payload"`
		}
		if json.Unmarshal(md, &m) != nil || m.EventType == "" || !isJSONObject(m.EventPayload) {
			return c, errCode("invalid_metadata_format")
		}
		c.metadata = &Metadata{EventType: m.EventType, EventPayload: m.EventPayload}
		c.hasMetadata = true
	}
	return c, nil
}

func isJSONArray(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && t[0] == '['
}

func isJSONObject(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && t[0] == '{'
}

// validateBlocks checks Block Kit limits Slack enforces: at most 50 blocks,
// each with a type, a section's text at most 3000 characters and its fields
// at most 10 of 2000, a header's at most 150, block IDs at most 255 and
// unique.
func validateBlocks(raw json.RawMessage) *apiError {
	var blocks []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return errCode("invalid_blocks_format")
	}
	var problems []string
	bad := func(i int, format string, args ...any) {
		problems = append(problems, fmt.Sprintf(format, args...)+fmt.Sprintf(" [json-pointer:/blocks/%d]", i))
	}
	if len(blocks) > 50 {
		problems = append(problems, fmt.Sprintf("must provide an array with no more than 50 items, got %d [json-pointer:/blocks]", len(blocks)))
	}
	ids := map[string]bool{}
	markdownTotal := 0
	for i, b := range blocks {
		var typ, id string
		_ = json.Unmarshal(b["type"], &typ)
		if typ == "" {
			bad(i, "missing required field: type")
			continue
		}
		if json.Unmarshal(b["block_id"], &id) == nil && id != "" {
			if len(id) > 255 {
				bad(i, "block_id must be less than 256 characters")
			}
			if ids[id] {
				bad(i, "block_id %q is not unique", id)
			}
			ids[id] = true
		}
		textLen := func(field string) (int, bool) {
			var t struct {
				Text *string `json:"text"`
			}
			if json.Unmarshal(b[field], &t) != nil || t.Text == nil {
				return 0, false
			}
			return utf8.RuneCountInString(*t.Text), true
		}
		switch typ {
		case "section":
			n, hasText := textLen("text")
			if n > 3000 {
				bad(i, "must be less than 3001 characters [json-pointer:/blocks/%d/text/text]", i)
			}
			var fields []struct {
				Text string `json:"text"`
			}
			_ = json.Unmarshal(b["fields"], &fields)
			if len(fields) > 10 {
				bad(i, "must provide an array with no more than 10 items [json-pointer:/blocks/%d/fields]", i)
			}
			for _, f := range fields {
				if utf8.RuneCountInString(f.Text) > 2000 {
					bad(i, "must be less than 2001 characters [json-pointer:/blocks/%d/fields]", i)
				}
			}
			if !hasText && len(fields) == 0 {
				bad(i, "must provide either text or fields")
			}
		case "markdown":
			n, hasText := markdownLen(b)
			if !hasText {
				bad(i, "missing required field: text")
			}
			if n > maxMarkdownRunes {
				bad(i, "must be less than %d characters [json-pointer:/blocks/%d/text]", maxMarkdownRunes+1, i)
			}
			markdownTotal += n
		case "header":
			n, hasText := textLen("text")
			if !hasText {
				bad(i, "missing required field: text")
			}
			if n > 150 {
				bad(i, "must be less than 151 characters [json-pointer:/blocks/%d/text/text]", i)
			}
		}
	}
	if markdownTotal > maxMarkdownRunes {
		problems = append(problems, fmt.Sprintf("the markdown blocks of a message must total at most %d characters, not %d [json-pointer:/blocks]", maxMarkdownRunes, markdownTotal))
	}
	if len(problems) > 0 {
		return &apiError{code: "invalid_blocks", errors: problems}
	}
	return nil
}

// channelArg returns the channel argument, or channel_not_found.
func channelArg(p params, name string) (string, *apiError) {
	ch := p.get(name)
	if ch == "" {
		return "", errCode("channel_not_found")
	}
	return ch, nil
}

func (s *Server) chatPostMessage(p params) (map[string]any, *apiError) {
	ch, aerr := channelArg(p, "channel")
	if aerr != nil {
		return nil, aerr
	}
	c, aerr := s.readChatContent(p)
	if aerr != nil {
		return nil, aerr
	}
	if c.empty() {
		return nil, errCode("no_text")
	}
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
	m := &Message{
		Channel: ch, TS: s.nextTSLocked(), ThreadTS: threadTS,
		User: s.opts.BotUserID, BotID: s.opts.BotID,
		Text: c.text, Blocks: c.blocks, Attachments: c.attachments, Metadata: c.metadata,
	}
	s.addMessageLocked(m)
	if threadTS != "" {
		// Slack clears a thread's status when the app replies in it.
		delete(s.statuses, msgKey{ch, threadTS})
	}
	wire := s.wireMessageLocked(m, true)
	echo := s.botEchoLocked(m)
	s.mu.Unlock()
	s.deliverEvent(echo)
	return map[string]any{"channel": ch, "ts": m.TS, "message": wire}, nil
}

func (s *Server) chatUpdate(p params) (map[string]any, *apiError) {
	ch, aerr := channelArg(p, "channel")
	if aerr != nil {
		return nil, aerr
	}
	c, aerr := s.readChatContent(p)
	if aerr != nil {
		return nil, aerr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.msgs[msgKey{ch, p.get("ts")}]
	if m == nil {
		return nil, errCode("message_not_found")
	}
	if m.BotID != s.opts.BotID {
		return nil, errCode("cant_update_message")
	}
	if !c.hasText && !c.hasBlocks && !c.hasAttachments && !c.hasMetadata {
		return nil, errCode("no_text")
	}
	if c.hasText {
		m.Text = c.text
	}
	if c.hasBlocks {
		m.Blocks = c.blocks
	}
	if c.hasAttachments {
		m.Attachments = c.attachments
	}
	if c.hasMetadata {
		m.Metadata = c.metadata
	}
	if m.Text == "" && len(m.Blocks) == 0 && len(m.Attachments) == 0 && len(m.Files) == 0 {
		return nil, errCode("no_text")
	}
	m.Edits++
	m.editedTS = s.nextTSLocked()
	return map[string]any{"channel": ch, "ts": m.TS, "text": m.Text, "message": s.wireMessageLocked(m, true)}, nil
}

func (s *Server) chatDelete(p params) (map[string]any, *apiError) {
	ch, aerr := channelArg(p, "channel")
	if aerr != nil {
		return nil, aerr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := p.get("ts")
	m := s.msgs[msgKey{ch, ts}]
	if m == nil {
		return nil, errCode("message_not_found")
	}
	if m.BotID != s.opts.BotID {
		return nil, errCode("cant_delete_message")
	}
	delete(s.msgs, msgKey{ch, ts})
	return map[string]any{"channel": ch, "ts": ts}, nil
}

func (s *Server) chatPostEphemeral(p params) (map[string]any, *apiError) {
	ch, aerr := channelArg(p, "channel")
	if aerr != nil {
		return nil, aerr
	}
	user := p.get("user")
	if user == "" {
		return nil, errCode("user_not_found")
	}
	c, aerr := s.readChatContent(p)
	if aerr != nil {
		return nil, aerr
	}
	if c.empty() {
		return nil, errCode("no_text")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	threadTS := ""
	if t := p.get("thread_ts"); t != "" {
		root, ok := s.resolveThreadLocked(ch, t)
		if !ok {
			return nil, errCode("invalid_thread_ts")
		}
		threadTS = root
	}
	m := &Message{
		Channel: ch, TS: s.nextTSLocked(), ThreadTS: threadTS,
		User: s.opts.BotUserID, BotID: s.opts.BotID, Recipient: user,
		Text: c.text, Blocks: c.blocks, Attachments: c.attachments,
	}
	s.ephemerals = append(s.ephemerals, m)
	return map[string]any{"message_ts": m.TS}, nil
}

func (s *Server) chatGetPermalink(p params) (map[string]any, *apiError) {
	ch, aerr := channelArg(p, "channel")
	if aerr != nil {
		return nil, aerr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.msgs[msgKey{ch, p.get("message_ts")}]
	if m == nil {
		return nil, errCode("message_not_found")
	}
	return map[string]any{"channel": ch, "permalink": permalink(m)}, nil
}

// permalink is a message's link as Slack forms it.
func permalink(m *Message) string {
	u := "https://" + teamDomain + ".slack.com/archives/" + m.Channel + "/p" + strings.Replace(m.TS, ".", "", 1)
	if m.ThreadTS != "" {
		u += "?thread_ts=" + m.ThreadTS + "&cid=" + m.Channel
	}
	return u
}

func (s *Server) conversationsReplies(p params) (map[string]any, *apiError) {
	ch, aerr := channelArg(p, "channel")
	if aerr != nil {
		return nil, aerr
	}
	withMeta := p.bool("include_all_metadata")
	s.mu.Lock()
	defer s.mu.Unlock()
	thread := s.threadLocked(ch, p.get("ts"))
	if thread == nil {
		return nil, errCode("thread_not_found")
	}
	thread = filterRange(thread, p)
	msgs := make([]map[string]any, 0, len(thread))
	for _, m := range thread {
		msgs = append(msgs, s.wireMessageLocked(m, withMeta))
	}
	if limit, err := strconv.Atoi(p.get("limit")); err == nil && limit > 0 && len(msgs) > limit {
		msgs = msgs[:limit]
	}
	return map[string]any{"messages": msgs, "has_more": false, "response_metadata": map[string]any{"next_cursor": ""}}, nil
}

func (s *Server) conversationsHistory(p params) (map[string]any, *apiError) {
	ch, aerr := channelArg(p, "channel")
	if aerr != nil {
		return nil, aerr
	}
	withMeta := p.bool("include_all_metadata")
	limit, err := strconv.Atoi(p.get("limit"))
	if err != nil || limit <= 0 {
		limit = 100
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var roots []*Message
	for _, m := range s.order {
		if m.Channel == ch && m.ThreadTS == "" && s.msgs[msgKey{m.Channel, m.TS}] == m {
			roots = append(roots, m)
		}
	}
	roots = filterRange(roots, p)
	slices.Reverse(roots)
	hasMore := len(roots) > limit
	if hasMore {
		roots = roots[:limit]
	}
	msgs := make([]map[string]any, 0, len(roots))
	for _, m := range roots {
		msgs = append(msgs, s.wireMessageLocked(m, withMeta))
	}
	return map[string]any{"messages": msgs, "has_more": hasMore, "pin_count": 0, "response_metadata": map[string]any{"next_cursor": ""}}, nil
}

// filterRange keeps the messages between the oldest and latest arguments,
// which are exclusive unless inclusive is set.
func filterRange(msgs []*Message, p params) []*Message {
	oldest, latest := p.get("oldest"), p.get("latest")
	incl := p.bool("inclusive")
	if oldest == "" && latest == "" {
		return msgs
	}
	var out []*Message
	for _, m := range msgs {
		if oldest != "" {
			if c := compareTS(m.TS, oldest); c < 0 || (c == 0 && !incl) {
				continue
			}
		}
		if latest != "" {
			if c := compareTS(m.TS, latest); c > 0 || (c == 0 && !incl) {
				continue
			}
		}
		out = append(out, m)
	}
	return out
}

// compareTS compares two "<seconds>.<micros>" timestamps numerically.
func compareTS(a, b string) int {
	pa, pb := parseTS(a), parseTS(b)
	switch {
	case pa < pb:
		return -1
	case pa > pb:
		return 1
	}
	return 0
}

func parseTS(ts string) int64 {
	sec, frac, _ := strings.Cut(ts, ".")
	n, _ := strconv.ParseInt(sec, 10, 64)
	frac = (frac + "000000")[:6]
	f, _ := strconv.ParseInt(frac, 10, 64)
	return n*1e6 + f
}

func (s *Server) usersInfo(p params) (map[string]any, *apiError) {
	id := p.get("user")
	s.mu.Lock()
	u, ok := s.users[id]
	s.mu.Unlock()
	if !ok {
		switch {
		case id == s.opts.BotUserID:
			u = User{ID: id, Name: "agentbot", RealName: "agentbot", IsBot: true}
		case len(id) > 1 && (id[0] == 'U' || id[0] == 'W') && strings.ToUpper(id) == id:
			u = User{ID: id, Name: strings.ToLower(id), RealName: "User " + id}
		default:
			return nil, errCode("user_not_found")
		}
	}
	return map[string]any{"user": s.wireUser(u)}, nil
}

func (s *Server) wireUser(u User) map[string]any {
	return map[string]any{
		"id": u.ID, "team_id": s.opts.TeamID, "name": u.Name, "deleted": false,
		"real_name": u.RealName, "tz": "Europe/London", "tz_label": "Greenwich Mean Time", "tz_offset": 0,
		"profile": map[string]any{
			"real_name": u.RealName, "real_name_normalized": u.RealName,
			"display_name": u.Name, "display_name_normalized": u.Name, "team": s.opts.TeamID,
		},
		"is_admin": u.IsAdmin, "is_owner": false, "is_primary_owner": false,
		"is_restricted": false, "is_ultra_restricted": false, "is_bot": u.IsBot, "is_app_user": false,
		"updated": time.Now().Unix(),
	}
}

func (s *Server) conversationsInfo(p params) (map[string]any, *apiError) {
	ch, aerr := channelArg(p, "channel")
	if aerr != nil {
		return nil, aerr
	}
	return map[string]any{"channel": map[string]any{
		"id": ch, "name": channelName(ch), "is_channel": channelType(ch) == "channel",
		"is_group": channelType(ch) == "group", "is_im": channelType(ch) == "im",
		"is_private": channelType(ch) != "channel", "is_member": true, "created": 1700000000,
	}}, nil
}

// channelType is the channel_type of events in a channel, from its ID's
// prefix as Slack assigns them.
func channelType(ch string) string {
	switch {
	case strings.HasPrefix(ch, "D"):
		return "im"
	case strings.HasPrefix(ch, "G"):
		return "group"
	}
	return "channel"
}

// channelName is the name the fake gives a channel.
func channelName(ch string) string {
	switch channelType(ch) {
	case "im":
		return "directmessage"
	case "group":
		return "privategroup"
	}
	return strings.ToLower(ch)
}

// wireMessageLocked renders a message as conversations.replies/history and
// chat.postMessage return it; metadata only when withMeta.
func (s *Server) wireMessageLocked(m *Message, withMeta bool) map[string]any {
	w := map[string]any{"type": "message", "ts": m.TS, "text": m.Text, "user": m.User, "team": s.opts.TeamID}
	if m.Subtype != "" {
		w["subtype"] = m.Subtype
	}
	if m.BotID != "" {
		w["bot_id"] = m.BotID
		w["app_id"] = s.opts.AppID
		w["bot_profile"] = s.botProfile()
	}
	if len(m.Blocks) > 0 {
		w["blocks"] = m.Blocks
	}
	if len(m.Attachments) > 0 {
		w["attachments"] = m.Attachments
	}
	if m.Edits > 0 {
		w["edited"] = map[string]any{"user": m.User, "ts": m.editedTS}
	}
	if len(m.Files) > 0 {
		files := make([]map[string]any, 0, len(m.Files))
		for _, f := range m.Files {
			files = append(files, s.wireFileLocked(s.files[f.ID]))
		}
		w["files"] = files
		w["upload"] = false
		w["display_as_bot"] = false
	}
	if withMeta && m.Metadata != nil {
		w["metadata"] = m.Metadata
	}
	if m.ThreadTS != "" {
		w["thread_ts"] = m.ThreadTS
		if root := s.msgs[msgKey{m.Channel, m.ThreadTS}]; root != nil {
			w["parent_user_id"] = root.User
		}
	} else {
		var replies []*Message
		for _, r := range s.order {
			if r.Channel == m.Channel && r.ThreadTS == m.TS && s.msgs[msgKey{r.Channel, r.TS}] == r {
				replies = append(replies, r)
			}
		}
		if len(replies) > 0 {
			var users []string
			for _, r := range replies {
				if !slices.Contains(users, r.User) {
					users = append(users, r.User)
				}
			}
			w["thread_ts"] = m.TS
			w["reply_count"] = len(replies)
			w["reply_users"] = users
			w["reply_users_count"] = len(users)
			w["latest_reply"] = replies[len(replies)-1].TS
			w["is_locked"] = false
			w["subscribed"] = false
		}
	}
	return w
}

func (s *Server) botProfile() map[string]any {
	return map[string]any{
		"id": s.opts.BotID, "app_id": s.opts.AppID, "name": "agentbot", "deleted": false,
		"team_id": s.opts.TeamID, "updated": 1700000000,
		"icons": map[string]any{"image_36": "https://a.slack-edge.com/80588/img/plugins/app/bot_36.png"},
	}
}
