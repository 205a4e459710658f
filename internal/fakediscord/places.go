package fakediscord

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// More channel kinds, as Discord's channel "type" field.
const (
	// ChannelDM is a direct-message channel between the bot and one user:
	// it belongs to no guild.
	ChannelDM = 1
	// ChannelForum holds only posts: threads (ChannelPublicThread) each
	// started with a message; nothing is posted in the forum itself.
	ChannelForum = 15
)

// IntentDirectMessages is the gateway intent for MESSAGE_CREATE in DMs.
// Discord's MESSAGE_CONTENT rule does not apply there: content in DMs
// with the app is always sent.
const IntentDirectMessages = 1 << 12

// attachmentTTL is how long an attachment URL is valid, as the "ex"
// parameter of Discord's signed CDN URLs says.
const attachmentTTL = 24 * time.Hour

var (
	errNonText  = &apiErr{http.StatusBadRequest, 50008, "Cannot send messages in a non-text channel", nil}
	errCannotDM = &apiErr{http.StatusForbidden, 50007, "Cannot send messages to this user", nil}
)

// DMChannel returns the DM channel between the bot and user userID,
// opening it the first time, as POST /users/@me/channels does (Discord
// keeps one such channel per user, and sends no CHANNEL_CREATE for it).
func (s *Server) DMChannel(userID string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dmLocked(userID).ID
}

func (s *Server) dmLocked(userID string) *Channel {
	for _, id := range s.chanOrder {
		if c := s.channels[id]; c.Type == ChannelDM && c.RecipientID == userID {
			return c
		}
	}
	c := &Channel{ID: s.nextIDLocked(), Type: ChannelDM, RecipientID: userID}
	s.addChannelLocked(c)
	return c
}

// createDM is "Create DM": {"recipient_id": snowflake} gives the DM
// channel with that user, the same one every time.
func (s *Server) createDM(r *http.Request) (int, any, *apiErr) {
	raw, _, e := readBody(r)
	if e != nil {
		return 0, nil, e
	}
	var p struct {
		RecipientID json.RawMessage `json:"recipient_id"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return 0, nil, formErr("MODEL_TYPE_CONVERT", "Invalid payload", "recipient_id")
	}
	if isNull(p.RecipientID) {
		return 0, nil, formErr("BASE_TYPE_REQUIRED", "This field is required", "recipient_id")
	}
	var id string
	if err := json.Unmarshal(p.RecipientID, &id); err != nil {
		id = string(p.RecipientID) // a JSON number is a snowflake too
	}
	if _, err := strconv.ParseUint(id, 10, 64); err != nil {
		return 0, nil, formErr("NUMBER_TYPE_COERCE", "Value \""+id+"\" is not snowflake.", "recipient_id")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if id == s.opts.BotUserID {
		return 0, nil, errCannotDM
	}
	return 200, s.wireChannelLocked(s.dmLocked(id)), nil
}

func (s *Server) wireDMLocked(c *Channel) map[string]any {
	out := map[string]any{"id": c.ID, "type": ChannelDM, "flags": 0, "recipients": []any{userObject(c.RecipientID)},
		"last_message_id": nil}
	if ms := s.chanMsgs[c.ID]; len(ms) > 0 {
		out["last_message_id"] = ms[len(ms)-1].ID
	}
	return out
}

// isDMLocked says channel id is a DM channel.
func (s *Server) isDMLocked(id string) bool {
	c, ok := s.channels[id]
	return ok && c.Type == ChannelDM
}

// UserForumPost has user userID (a member with roles) open a post titled
// title in forum forumID, its starter message content with files
// attached: the post is a public thread whose ID is the starter message's,
// as in Discord. It dispatches THREAD_CREATE, then MESSAGE_CREATE in the
// thread, and returns the post's (thread's) ID. It panics when forumID is
// not a forum: that is a mistake in the test.
func (s *Server) UserForumPost(forumID, userID, title, content string, roles []string, files ...Attachment) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := s.channels[forumID]; !ok || f.Type != ChannelForum {
		panic("fakediscord: UserForumPost: no forum " + forumID)
	}
	id := s.nextIDLocked()
	s.createThreadLocked(&Channel{ID: id, GuildID: s.opts.GuildID, Name: title, Type: ChannelPublicThread,
		ParentID: forumID, OwnerID: userID, AutoArchiveDuration: 4320, StarterMessageID: id})
	m := &Message{ID: id, ChannelID: id, AuthorID: userID, Roles: append([]string(nil), roles...), Content: content,
		Timestamp: time.Now().UTC()}
	for _, f := range files {
		f.ID = s.nextIDLocked()
		m.Attachments = append(m.Attachments, f)
	}
	s.addMessageLocked(m)
	return id
}

// UserMessageFiles is UserMessage with files attached (Filename,
// ContentType and Content; the ID is assigned). Their URLs in the
// message, like Discord's CDN URLs, carry an expiry and a signature;
// GET on them serves the content.
func (s *Server) UserMessageFiles(channelID, userID, content string, roles []string, files ...Attachment) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.channels[channelID]; !ok {
		panic("fakediscord: UserMessageFiles: unknown channel " + channelID)
	}
	m := &Message{ID: s.nextIDLocked(), ChannelID: channelID, AuthorID: userID, Roles: append([]string(nil), roles...),
		Content: content, Timestamp: time.Now().UTC()}
	for _, f := range files {
		f.ID = s.nextIDLocked()
		m.Attachments = append(m.Attachments, f)
	}
	s.addMessageLocked(m)
	return m.ID
}

// forumPostLocked is "Start Thread in Forum or Media Channel": the body's
// message (required) becomes the starter message of a new public thread
// with the message's ID.
func (s *Server) forumPostLocked(forum *Channel, p threadPayload, files []Attachment) (int, any, *apiErr) {
	if isNull(p.Message) {
		return 0, nil, formErr("BASE_TYPE_REQUIRED", "This field is required", "message")
	}
	mp, e := parsePayload(p.Message)
	if e != nil {
		return 0, nil, e
	}
	if e := mp.validate(len(files), true); e != nil {
		return 0, nil, e
	}
	id := s.nextIDLocked()
	w := s.createThreadLocked(&Channel{ID: id, GuildID: s.opts.GuildID, Name: p.Name, Type: ChannelPublicThread,
		ParentID: forum.ID, OwnerID: s.opts.BotUserID, AutoArchiveDuration: p.AutoArchiveDuration, StarterMessageID: id})
	m := &Message{ID: id, ChannelID: id, AuthorID: s.opts.BotUserID, Bot: true, Embeds: mp.Embeds,
		Components: mp.Components, Timestamp: time.Now().UTC()}
	if mp.Content != nil {
		m.Content = *mp.Content
	}
	for _, f := range files {
		f.ID = s.nextIDLocked()
		m.Attachments = append(m.Attachments, f)
	}
	s.addMessageLocked(m)
	w["message"] = s.wireMessageLocked(m)
	return 201, w, nil
}

// attachmentURLLocked is where an attachment is served: the path of
// Discord's CDN (/attachments/<channel>/<id>/<name>) with its "ex"
// (expiry, hex Unix seconds), "is" (issued) and "hm" (signature)
// parameters.
func (s *Server) attachmentURLLocked(channel string, a Attachment) string {
	now := time.Now()
	ex := strconv.FormatInt(now.Add(attachmentTTL).Unix(), 16)
	is := strconv.FormatInt(now.Unix(), 16)
	q := url.Values{"ex": {ex}, "is": {is}, "hm": {s.attachmentSig(channel, a.ID, a.Filename, ex, is)}}
	return s.srv.URL + "/attachments/" + channel + "/" + a.ID + "/" + url.PathEscape(a.Filename) + "?" + q.Encode()
}

func (s *Server) attachmentSig(channel, id, name, ex, is string) string {
	mac := hmac.New(sha256.New, s.opts.PrivateKey.Seed())
	mac.Write([]byte(channel + "/" + id + "/" + name + "?" + ex + "&" + is))
	return hex.EncodeToString(mac.Sum(nil))
}

// attachmentValid says a request carries the signature and an unexpired
// "ex" of the attachment's URL; Discord answers others 404 ("This content
// is no longer available.").
func (s *Server) attachmentValid(r *http.Request, channel, id, name string) bool {
	q := r.URL.Query()
	ex, is := q.Get("ex"), q.Get("is")
	until, err := strconv.ParseInt(ex, 16, 64)
	if err != nil || time.Now().Unix() > until {
		return false
	}
	return hmac.Equal([]byte(q.Get("hm")), []byte(s.attachmentSig(channel, id, name, ex, is)))
}
