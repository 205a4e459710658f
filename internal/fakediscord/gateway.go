package fakediscord

import (
	"bytes"
	"compress/zlib"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Gateway opcodes.
const (
	opDispatch       = 0
	opHeartbeat      = 1
	opIdentify       = 2
	opPresence       = 3
	opVoiceState     = 4
	opResume         = 6
	opReconnect      = 7
	opRequestMembers = 8
	opInvalidSession = 9
	opHello          = 10
	opHeartbeatACK   = 11
)

// knownIntents are the intent bits Discord defines (0 to 25); others
// close the connection with 4013.
const knownIntents = 1<<26 - 1

// maxBuffered is how many dispatches a session keeps for RESUME.
const maxBuffered = 1000

// session is a gateway session: what READY started and RESUME continues.
type session struct {
	id       string
	seq      int64
	intents  int
	compress bool
	events   []sentEvent
	conn     *gwConn
}

type sentEvent struct {
	seq     int64
	payload []byte
}

// frame is one thing for a connection's writer to send.
type frame struct {
	payload   []byte
	compress  bool
	closeCode int // when non-zero, a close frame with closeText, then close
	closeText string
}

// gwConn is one websocket. Writes go through a queue drained by one
// goroutine, so dispatches keep their order and never block the server's
// lock on a slow reader.
type gwConn struct {
	ws       *websocket.Conn
	mu       sync.Mutex
	queue    []frame
	wake     chan struct{}
	done     chan struct{}
	killOnce sync.Once

	// sess is guarded by Server.mu.
	sess *session
}

func (c *gwConn) send(f frame) {
	c.mu.Lock()
	c.queue = append(c.queue, f)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// kill drops the connection without a close frame, as a network failure.
func (c *gwConn) kill() {
	c.killOnce.Do(func() {
		close(c.done)
		_ = c.ws.Close()
	})
}

func (c *gwConn) writer() {
	for {
		select {
		case <-c.done:
			return
		case <-c.wake:
		}
		c.mu.Lock()
		q := c.queue
		c.queue = nil
		c.mu.Unlock()
		for _, f := range q {
			_ = c.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if f.closeCode != 0 {
				_ = c.ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(f.closeCode, f.closeText))
				c.kill()
				return
			}
			var err error
			if f.compress {
				var b bytes.Buffer
				z := zlib.NewWriter(&b)
				_, _ = z.Write(f.payload)
				_ = z.Close()
				err = c.ws.WriteMessage(websocket.BinaryMessage, b.Bytes())
			} else {
				err = c.ws.WriteMessage(websocket.TextMessage, f.payload)
			}
			if err != nil {
				c.kill()
				return
			}
		}
	}
}

func (c *gwConn) closeWith(code int, text string) {
	c.send(frame{closeCode: code, closeText: text})
}

func marshalPayload(op int, d any, seq int64, t string) []byte {
	p := map[string]any{"op": op, "d": d, "s": nil, "t": nil}
	if op == opDispatch {
		p["s"], p["t"] = seq, t
	}
	b, _ := json.Marshal(p)
	return b
}

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

// serveGateway runs one gateway connection: HELLO, then IDENTIFY or
// RESUME, heartbeats, and dispatches until either side closes.
func (s *Server) serveGateway(w http.ResponseWriter, r *http.Request) {
	if enc := r.URL.Query().Get("encoding"); enc != "" && enc != "json" {
		http.Error(w, "fakediscord: only encoding=json is supported", http.StatusBadRequest)
		return
	}
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	c := &gwConn{ws: ws, wake: make(chan struct{}, 1), done: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ws.Close()
		return
	}
	s.conns[c] = true
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		c.writer()
	}()
	c.send(frame{payload: marshalPayload(opHello, map[string]any{"heartbeat_interval": s.opts.HeartbeatInterval.Milliseconds()}, 0, "")})
	s.readLoop(c)
}

type inbound struct {
	Op int             `json:"op"`
	D  json.RawMessage `json:"d"`
}

func (s *Server) readLoop(c *gwConn) {
	var err error
	defer func() { s.dropConn(c, err) }()
	for {
		var msg []byte
		if _, msg, err = c.ws.ReadMessage(); err != nil {
			return
		}
		var in inbound
		if json.Unmarshal(msg, &in) != nil {
			c.closeWith(4002, "Error while decoding payload.")
			continue
		}
		s.mu.Lock()
		identified := c.sess != nil
		s.mu.Unlock()
		switch in.Op {
		case opHeartbeat:
			s.mu.Lock()
			s.heartbeats++
			s.mu.Unlock()
			c.send(frame{payload: marshalPayload(opHeartbeatACK, nil, 0, ""), compress: s.compressed(c)})
		case opIdentify:
			if identified {
				c.closeWith(4005, "Already authenticated.")
				continue
			}
			s.identify(c, in.D)
		case opResume:
			if identified {
				c.closeWith(4005, "Already authenticated.")
				continue
			}
			s.resume(c, in.D)
		case opPresence, opVoiceState, opRequestMembers:
			if !identified {
				c.closeWith(4003, "Not authenticated.")
			}
		default:
			c.closeWith(4001, "Unknown opcode.")
		}
	}
}

func (s *Server) compressed(c *gwConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return c.sess != nil && c.sess.compress
}

// dropConn forgets a closed connection. Its session stays resumable
// unless the client closed with 1000 or 1001, which ends a session in
// Discord.
func (s *Server) dropConn(c *gwConn, err error) {
	c.kill()
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
	if c.sess != nil && c.sess.conn == c {
		c.sess.conn = nil
		if websocket.IsCloseError(err, websocket.CloseNormalClosure, websocket.CloseGoingAway) {
			delete(s.sessions, c.sess.id)
		}
	}
}

func (s *Server) tokenOK(tok string) bool {
	return strings.TrimPrefix(tok, "Bot ") == s.opts.BotToken
}

func (s *Server) identify(c *gwConn, raw json.RawMessage) {
	var d struct {
		Token    string  `json:"token"`
		Intents  *int    `json:"intents"`
		Compress bool    `json:"compress"`
		Shard    *[2]int `json:"shard"`
	}
	if json.Unmarshal(raw, &d) != nil {
		c.closeWith(4002, "Error while decoding payload.")
		return
	}
	switch {
	case !s.tokenOK(d.Token):
		c.closeWith(4004, "Authentication failed.")
		return
	case d.Intents == nil || *d.Intents&^knownIntents != 0:
		c.closeWith(4013, "Invalid intent(s).")
		return
	case *d.Intents&s.opts.DisallowedIntents != 0:
		c.closeWith(4014, "Disallowed intent(s).")
		return
	case d.Shard != nil && (d.Shard[1] != 1 || d.Shard[0] != 0):
		c.closeWith(4010, "Invalid shard.")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := &session{id: randomHex(16), intents: *d.Intents, compress: d.Compress, conn: c}
	s.sessions[sess.id] = sess
	s.intents = *d.Intents
	s.connects++
	c.sess = sess
	ready := map[string]any{
		"v": 10, "user": s.botUser(), "session_id": sess.id, "session_type": "normal",
		"resume_gateway_url": s.GatewayURL(),
		"guilds":             []any{map[string]any{"id": s.opts.GuildID, "unavailable": true}},
		"application":        map[string]any{"id": s.opts.AppID, "flags": 0},
		"private_channels":   []any{}, "relationships": []any{}, "user_settings": map[string]any{},
	}
	if d.Shard != nil {
		ready["shard"] = d.Shard
	}
	s.sendLocked(sess, "READY", ready)
	if sess.intents&IntentGuilds != 0 {
		s.sendLocked(sess, "GUILD_CREATE", s.wireGuildLocked())
	}
}

func (s *Server) resume(c *gwConn, raw json.RawMessage) {
	var d struct {
		Token     string `json:"token"`
		SessionID string `json:"session_id"`
		Seq       int64  `json:"seq"`
	}
	if json.Unmarshal(raw, &d) != nil {
		c.closeWith(4002, "Error while decoding payload.")
		return
	}
	if !s.tokenOK(d.Token) {
		c.closeWith(4004, "Authentication failed.")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := s.sessions[d.SessionID]
	if sess == nil || d.Seq > sess.seq || (len(sess.events) > 0 && d.Seq < sess.events[0].seq-1) {
		// Not resumable: the client must IDENTIFY anew.
		c.send(frame{payload: marshalPayload(opInvalidSession, false, 0, "")})
		return
	}
	if old := sess.conn; old != nil && old != c {
		old.kill()
	}
	sess.conn = c
	c.sess = sess
	s.connects++
	for _, e := range sess.events {
		if e.seq > d.Seq {
			c.send(frame{payload: e.payload, compress: sess.compress})
		}
	}
	s.sendLocked(sess, "RESUMED", map[string]any{})
}

// sendLocked dispatches one event to one session: it takes the next
// sequence number, is kept for RESUME, and goes out if connected.
func (s *Server) sendLocked(sess *session, t string, d any) {
	sess.seq++
	p := marshalPayload(opDispatch, d, sess.seq, t)
	sess.events = append(sess.events, sentEvent{sess.seq, p})
	if len(sess.events) > maxBuffered {
		sess.events = sess.events[len(sess.events)-maxBuffered:]
	}
	if sess.conn != nil {
		sess.conn.send(frame{payload: p, compress: sess.compress})
	}
}

// dispatchLocked sends an event to every session whose intents include
// intent (0: no intent needed).
func (s *Server) dispatchLocked(t string, d any, intent int) {
	s.dispatchFuncLocked(t, intent, func(*session) any { return d })
}

func (s *Server) dispatchFuncLocked(t string, intent int, d func(*session) any) {
	for _, sess := range s.sessions {
		if intent != 0 && sess.intents&intent == 0 {
			continue
		}
		s.sendLocked(sess, t, d(sess))
	}
}

// dispatchMessageLocked sends MESSAGE_CREATE or MESSAGE_UPDATE. Without
// MESSAGE_CONTENT a session gets content, embeds, attachments and
// components blank, except for the bot's own messages and messages that
// mention it, as Discord.
func (s *Server) dispatchMessageLocked(t string, m *Message) {
	full := s.wireMessageLocked(m)
	blank := full
	if !m.Bot && !mentionsBot(m.Content, s.opts.BotUserID) {
		blank = map[string]any{}
		for k, v := range full {
			blank[k] = v
		}
		blank["content"] = ""
		blank["embeds"], blank["attachments"], blank["components"] = []any{}, []any{}, []any{}
	}
	intent := IntentGuildMessages
	if s.isDMLocked(m.ChannelID) {
		// Content in DMs with the app needs no MESSAGE_CONTENT.
		intent, blank = IntentDirectMessages, full
	}
	s.dispatchFuncLocked(t, intent, func(sess *session) any {
		if sess.intents&IntentMessageContent != 0 {
			return full
		}
		return blank
	})
}

func (s *Server) wireGuildLocked() map[string]any {
	channels, threads := []any{}, []any{}
	for _, id := range s.chanOrder {
		c := s.channels[id]
		switch {
		case !c.isThread():
			channels = append(channels, s.wireChannelLocked(c))
		case !c.Archived:
			threads = append(threads, s.wireChannelLocked(c))
		}
	}
	return map[string]any{
		"id": s.opts.GuildID, "name": "Fake Guild", "owner_id": "1", "unavailable": false, "large": false,
		"member_count": 1, "joined_at": "2024-01-01T00:00:00Z", "channels": channels, "threads": threads,
		"roles": []any{map[string]any{"id": s.opts.GuildID, "name": "@everyone", "permissions": "104324673",
			"position": 0, "color": 0, "hoist": false, "managed": false, "mentionable": false}},
		"members": []any{map[string]any{"user": s.botUser(), "roles": []string{}, "joined_at": "2024-01-01T00:00:00Z",
			"deaf": false, "mute": false}},
		"emojis": []any{}, "stickers": []any{}, "voice_states": []any{}, "presences": []any{},
		"stage_instances": []any{}, "guild_scheduled_events": []any{}, "features": []any{},
	}
}

// DropConnections cuts every gateway connection without a close frame, as
// a network failure would; sessions stay resumable.
func (s *Server) DropConnections() {
	s.mu.Lock()
	conns := make([]*gwConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.kill()
	}
}

// Reconnect sends op 7 RECONNECT on every gateway connection, as Discord
// does before moving a session; clients should close and RESUME.
func (s *Server) Reconnect() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.send(frame{payload: marshalPayload(opReconnect, nil, 0, "")})
	}
}
