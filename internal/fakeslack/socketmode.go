package fakeslack

import (
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// smConn is one Socket Mode connection.
type smConn struct {
	ws        *websocket.Conn
	wmu       sync.Mutex // gorilla allows one writer at a time
	done      chan struct{}
	closeOnce sync.Once
}

func (c *smConn) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.ws.SetWriteDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return err
	}
	return c.ws.WriteMessage(websocket.TextMessage, b)
}

func (c *smConn) close() {
	c.closeOnce.Do(func() {
		close(c.done)
		_ = c.ws.Close()
	})
}

// queuedEnvelope waits for a Socket Mode connection.
type queuedEnvelope struct {
	o   *outbound
	env Envelope
}

var upgrader = websocket.Upgrader{
	// slack-go dials with "Origin: https://api.slack.com".
	CheckOrigin: func(*http.Request) bool { return true },
}

// serveSocket accepts a Socket Mode connection on a ticket from
// apps.connections.open (each ticket once), sends hello, then the envelopes
// waiting for a connection; it pings the connection every PingInterval and
// reads acks until it closes.
func (s *Server) serveSocket(w http.ResponseWriter, r *http.Request) {
	ticket := r.URL.Query().Get("ticket")
	s.mu.Lock()
	ok := s.tickets[ticket]
	delete(s.tickets, ticket)
	s.mu.Unlock()
	if !ok {
		http.Error(w, "invalid or used ticket", http.StatusUnauthorized)
		return
	}
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	c := &smConn{ws: ws, done: make(chan struct{})}
	if !s.enter() {
		c.close()
		return
	}
	defer s.wg.Done()

	s.mu.Lock()
	n := len(s.conns) + 1
	s.mu.Unlock()
	hello := map[string]any{
		"type":            "hello",
		"num_connections": n,
		"debug_info": map[string]any{
			"host": "applink-fake", "build_number": 1, "approximate_connection_time": 18060,
		},
		"connection_info": map[string]any{"app_id": s.opts.AppID},
	}
	if err := c.write(hello); err != nil {
		c.close()
		return
	}

	// The connection takes envelopes only once hello is out.
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.close()
		return
	}
	s.conns = append(s.conns, c)
	s.connects++
	queued := s.pending
	s.pending = nil
	for _, q := range queued {
		s.recordSentLocked(q.o, q.env)
	}
	s.mu.Unlock()
	for _, q := range queued {
		s.transmit(c, q.o, q.env)
	}

	s.spawn(func() { s.pinger(c) })
	s.readAcks(c)
	s.dropConn(c)
}

// pinger sends a websocket ping every PingInterval, as Slack does;
// slack-go's client reconnects when the pings stop.
func (s *Server) pinger(c *smConn) {
	t := time.NewTicker(s.opts.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-s.ctx.Done():
			return
		case <-t.C:
			if err := c.ws.WriteControl(websocket.PingMessage, []byte("ping"), time.Now().Add(5*time.Second)); err != nil {
				return
			}
		}
	}
}

// readAcks reads the app's messages until the connection fails. An
// acknowledgement is {"envelope_id":...,"payload":...}.
func (s *Server) readAcks(c *smConn) {
	for {
		_, data, err := c.ws.ReadMessage()
		if err != nil {
			return
		}
		var ack struct {
			EnvelopeID string          `json:"envelope_id"`
			Payload    json.RawMessage `json:"payload"`
		}
		if json.Unmarshal(data, &ack) != nil || ack.EnvelopeID == "" {
			continue
		}
		s.recordAck(ack.EnvelopeID, ack.Payload)
	}
}

func (s *Server) recordAck(envelopeID string, payload json.RawMessage) {
	if len(payload) == 0 || string(payload) == "null" {
		payload = nil
	}
	s.mu.Lock()
	o := s.envOwner[envelopeID]
	a := Ack{EnvelopeID: envelopeID, Payload: payload}
	var respond bool
	if o != nil {
		a.Type = o.kind
		a.Late = time.Since(s.sentAt[envelopeID]) > s.opts.AckTimeout
		if !o.acked {
			o.acked = true
			respond = o.resp != nil && payload != nil
		}
	}
	s.acks = append(s.acks, a)
	s.mu.Unlock()
	if respond {
		s.applyResponse(o.resp, "ack", "", payload)
	}
}

// dropConn forgets a connection and closes it.
func (s *Server) dropConn(c *smConn) {
	s.mu.Lock()
	s.conns = slices.DeleteFunc(s.conns, func(x *smConn) bool { return x == c })
	s.mu.Unlock()
	c.close()
}

// sendEnvelope sends a new envelope for o over a Socket Mode connection,
// or queues it until one opens.
func (s *Server) sendEnvelope(o *outbound, attempt int, reason string) {
	env := Envelope{
		EnvelopeID:             newUUID(),
		Type:                   o.kind,
		Payload:                o.payload,
		AcceptsResponsePayload: o.acceptsResponse,
		RetryAttempt:           attempt,
		RetryReason:            reason,
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	o.last = env
	if attempt == 0 {
		s.socketOut = append(s.socketOut, o)
	}
	if len(s.conns) == 0 {
		s.pending = append(s.pending, queuedEnvelope{o, env})
		s.mu.Unlock()
		return
	}
	c := s.conns[s.nextConn%len(s.conns)]
	s.nextConn++
	s.recordSentLocked(o, env)
	s.mu.Unlock()
	s.transmit(c, o, env)
}

func (s *Server) recordSentLocked(o *outbound, env Envelope) {
	s.envelopes = append(s.envelopes, env)
	s.envOwner[env.EnvelopeID] = o
	s.sentAt[env.EnvelopeID] = time.Now()
}

// transmit writes env to c and starts its ack timer. A failed write is left
// to the timer, as a lost envelope is to Slack's.
func (s *Server) transmit(c *smConn, o *outbound, env Envelope) {
	_ = c.write(env)
	time.AfterFunc(s.opts.AckTimeout, func() {
		if !s.enter() {
			return
		}
		defer s.wg.Done()
		s.ackTimedOut(o, env)
	})
}

// maxRetries is how often Slack retries an event delivery.
const maxRetries = 3

// ackTimedOut redelivers an unacknowledged events_api envelope as a new
// envelope with retry_attempt one higher, up to maxRetries times. Slash
// commands and interactions are not redelivered: Slack shows the user an
// error instead.
func (s *Server) ackTimedOut(o *outbound, env Envelope) {
	s.mu.Lock()
	retry := !o.acked && o.kind == typeEventsAPI && env.RetryAttempt < maxRetries && o.last.EnvelopeID == env.EnvelopeID
	s.mu.Unlock()
	if retry {
		s.sendEnvelope(o, env.RetryAttempt+1, "timeout")
	}
}

// Disconnect sends every open Socket Mode connection a
// {"type":"disconnect","reason":reason} message, as Slack does before it
// recycles a connection ("warning", "refresh_requested") or when Socket
// Mode is turned off ("link_disabled"), and closes the connections a second
// later unless the app has closed them. slack-go's client reconnects through
// apps.connections.open. Unacknowledged envelopes are redelivered on the new
// connection when their ack timer fires.
func (s *Server) Disconnect(reason string) {
	s.mu.Lock()
	conns := slices.Clone(s.conns)
	s.mu.Unlock()
	msg := map[string]any{
		"type":       "disconnect",
		"reason":     reason,
		"debug_info": map[string]any{"host": "applink-fake"},
	}
	for _, c := range conns {
		_ = c.write(msg)
		s.spawn(func() {
			select {
			case <-c.done:
			case <-s.ctx.Done():
			case <-time.After(time.Second):
			}
			s.dropConn(c)
		})
	}
}

// DropConnections closes every Socket Mode connection at once, without a
// disconnect message, as a network failure would.
func (s *Server) DropConnections() {
	s.mu.Lock()
	conns := slices.Clone(s.conns)
	s.mu.Unlock()
	for _, c := range conns {
		s.dropConn(c)
	}
}
