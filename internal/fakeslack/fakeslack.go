// Package fakeslack is a fake Slack workspace for tests. It speaks Slack's
// real wire protocol, so a Slack adapter built on github.com/slack-go/slack is
// tested as it runs against Slack: point slack.OptionAPIURL at APIURL and the
// Web API, Socket Mode and the Events API (HTTP, signed) behave as Slack's do,
// errors and rate limits included.
//
// The server has two sides. The app side is what Slack offers an app: Web API
// methods under /api/ (auth.test, chat.*, conversations.replies/history,
// users.info, the external file upload flow, apps.connections.open), a Socket
// Mode websocket, file downloads (url_private) and response_url endpoints.
// The user side is what people do in Slack: PostUserMessage, SlashCommand,
// BlockAction, MessageShortcut and ShareFile record the action in the
// workspace and deliver the matching payloads to the app, over Socket Mode by
// default or by HTTP POST to the URLs set with SetEventsURL,
// SetSlashURL and SetInteractivityURL.
//
// Deliveries follow Slack's rules: every Socket Mode envelope must be
// acknowledged within Options.AckTimeout (3 s, as Slack); an events_api
// envelope that is not is sent again as a new envelope with retry_attempt
// one higher and retry_reason "timeout", at most 3 times. An HTTP event that
// is not answered 2xx in time is retried with X-Slack-Retry-Num and
// X-Slack-Retry-Reason, at most 3 times, unless the answer carries
// "X-Slack-No-Retry: 1". As with Slack, slash commands and interactions are
// never retried: the user sees an error instead.
//
// An envelope raised while no Socket Mode connection is open waits for the
// next one (its ack timer starts when it is sent), so a test may act before
// its client has connected.
//
// State can be inspected at any time (Messages, Thread, Files, Ephemerals,
// Calls, Envelopes, Acks, Unacked, Deliveries, Responses) and waited for
// with WaitFor. All methods are safe for concurrent use.
package fakeslack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"time"
)

// Options configures a Server. Zero fields take the documented defaults.
type Options struct {
	// TeamID is the workspace ID; default "T0001".
	TeamID string
	// BotUserID is the app's bot user; default "UBOT". A message mentioning
	// "<@BotUserID>" also raises an app_mention event.
	BotUserID string
	// BotID is the app's bot ID, set as bot_id on what the app posts;
	// default "BBOT".
	BotID string
	// AppID is the app's ID (api_app_id); default "A0001".
	AppID string
	// BotToken is the bot token every Web API method but
	// apps.connections.open requires; default "xoxb-fake".
	BotToken string
	// AppToken is the app-level token apps.connections.open requires;
	// default "xapp-fake".
	AppToken string
	// SigningSecret signs HTTP deliveries; default "fake-signing-secret".
	SigningSecret string
	// VerificationToken is the deprecated "token" field of payloads;
	// default "fake-verification-token".
	VerificationToken string
	// Command is the slash command SlashCommand invokes; default "/agent".
	Command string
	// AckTimeout is how long a delivery may wait for its acknowledgement
	// (Socket Mode ack or HTTP answer); default 3 s, as Slack.
	AckTimeout time.Duration
	// PingInterval is how often the server pings each Socket Mode
	// connection; default 1 s. slack-go's socketmode client reconnects when
	// it has not been pinged for its OptionPingInterval (30 s by default).
	PingInterval time.Duration
	// EchoBotMessages delivers a message event (with bot_id) for each message
	// the app itself posts, as Slack does for an app subscribed to
	// message.channels; off by default.
	EchoBotMessages bool
}

func (o Options) withDefaults() Options {
	def := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	def(&o.TeamID, "T0001")
	def(&o.BotUserID, "UBOT")
	def(&o.BotID, "BBOT")
	def(&o.AppID, "A0001")
	def(&o.BotToken, "xoxb-fake")
	def(&o.AppToken, "xapp-fake")
	def(&o.SigningSecret, "fake-signing-secret")
	def(&o.VerificationToken, "fake-verification-token")
	def(&o.Command, "/agent")
	if o.AckTimeout <= 0 {
		o.AckTimeout = 3 * time.Second
	}
	if o.PingInterval <= 0 {
		o.PingInterval = time.Second
	}
	return o
}

// teamDomain is the workspace's domain, as in https://fake.slack.com.
const teamDomain = "fake"

// Message is a message in the workspace, as the inspection methods return it.
type Message struct {
	// Channel and TS identify the message.
	Channel, TS string
	// ThreadTS is the root of the thread the message was posted in; empty
	// for a message posted at the top level (even one that has replies).
	ThreadTS string
	// User is the author; the bot user for messages the app posted.
	User string
	// BotID is set on messages the app posted.
	BotID string
	// Subtype is "file_share" for a message that shares files, else empty.
	Subtype string
	// Text is the text as posted (Slack's escaping is kept).
	Text string
	// Blocks and Attachments are the JSON arrays as posted; nil when none.
	Blocks, Attachments json.RawMessage
	// Metadata is the message metadata; nil when none.
	Metadata *Metadata
	// Files are the files the message shares.
	Files []File
	// Edits counts chat.update calls (and replace_original responses).
	Edits int
	// Recipient is the user an ephemeral message was shown to; empty for
	// ordinary messages.
	Recipient string
	// Streaming is set on a message started with chat.startStream until
	// chat.stopStream (stream.go); its Text grows with each append.
	Streaming bool

	editedTS string
}

// Metadata is message metadata (chat.postMessage's metadata argument).
type Metadata struct {
	// EventType names the metadata's kind, e.g. "agentbot_part".
	EventType string `json:"event_type"`
	// EventPayload is the JSON object as posted.
	EventPayload json.RawMessage `json:"event_payload"`
}

// File is a file shared in a channel.
type File struct {
	ID, Name, Title string
	// User uploaded the file: the bot user for files the app uploaded.
	User string
	// Channel, MessageTS and ThreadTS locate the message that shares it.
	Channel, MessageTS, ThreadTS string
	// Content is the file's bytes.
	Content []byte
}

// User is a member of the workspace, as users.info describes it.
type User struct {
	ID, Name, RealName string
	IsAdmin, IsBot     bool
}

// Envelope is a Socket Mode envelope, in its wire form.
type Envelope struct {
	// EnvelopeID is what the app's ack must echo; a redelivery has a new
	// one.
	EnvelopeID string `json:"envelope_id"`
	// Type is "events_api", "slash_commands" or "interactive".
	Type string `json:"type"`
	// Payload is the event_callback, the slash command's fields as a JSON
	// object, or the interaction.
	Payload json.RawMessage `json:"payload"`
	// AcceptsResponsePayload is true for slash commands, whose ack may
	// carry a response message.
	AcceptsResponsePayload bool `json:"accepts_response_payload"`
	// RetryAttempt counts redeliveries (0 first); RetryReason is "timeout"
	// for a redelivery.
	RetryAttempt int    `json:"retry_attempt"`
	RetryReason  string `json:"retry_reason"`
}

// Ack is an acknowledgement the app sent over Socket Mode.
type Ack struct {
	EnvelopeID string
	// Type is the type of the acknowledged envelope; empty when the
	// envelope ID is unknown.
	Type string
	// Payload is the ack's payload (a slash command's response); nil when
	// none.
	Payload json.RawMessage
	// Late is set when the ack came after Options.AckTimeout.
	Late bool
}

// Delivery is one HTTP POST of a payload to the app.
type Delivery struct {
	URL string
	// Type is "events_api", "slash_commands" or "interactive".
	Type string
	// EventID is the event_id of an events_api delivery.
	EventID string
	// RetryNum and RetryReason are the X-Slack-Retry-* headers sent; 0 and
	// empty for a first attempt.
	RetryNum    int
	RetryReason string
	// Status is the HTTP status answered; 0 when there was no answer.
	Status int
	// Err says why there was no answer.
	Err string
	// Body is the answer's body.
	Body []byte
}

// Response is a message the app sent in answer to a slash command or an
// interaction: by POST to its response_url, in a Socket Mode ack payload, or
// in the body of its HTTP answer.
type Response struct {
	// Via is "response_url", "ack" or "http".
	Via string
	// URL is the response_url POSTed to.
	URL string
	// Channel and User are where and by whom the command or interaction was
	// made.
	Channel, User string
	// The message's fields.
	Text            string
	Blocks          json.RawMessage
	ResponseType    string
	ReplaceOriginal bool
	DeleteOriginal  bool
	ThreadTS        string
	// Raw is the message as sent.
	Raw json.RawMessage
}

// Server is a running fake workspace.
type Server struct {
	opts Options
	srv  *httptest.Server
	http *http.Client

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu         sync.Mutex
	closed     bool
	lastMicros int64
	seq        int64
	calls      map[string]int
	rateLimits map[string]rateLimit
	msgs       map[msgKey]*Message
	order      []*Message // creation order, which is ts order
	ephemerals []*Message
	files      map[string]*fileRec
	fileOrder  []*fileRec
	uploads    map[string]string // upload path -> file ID
	users      map[string]User
	responses  []Response
	respURLs   map[string]*respContext

	eventsURL, slashURL, interactivityURL string

	// Socket Mode.
	tickets   map[string]bool
	conns     []*smConn
	nextConn  int
	connects  int
	pending   []queuedEnvelope
	envelopes []Envelope
	envOwner  map[string]*outbound
	sentAt    map[string]time.Time
	acks      []Ack
	socketOut []*outbound

	deliveries []Delivery

	// Refusals and assistant threads (assistant.go).
	refusedMethods map[string]string // method -> error code it answers
	refusedBlocks  map[string]bool   // block types chat.* answer invalid_blocks for
	agents         *agentState       // agents.sessions.* (agents.go)
	statuses       map[msgKey]threadStatus
	statusCalls    []StatusCall

	homes homeState // App Home tabs (views.go)
}

type msgKey struct{ channel, ts string }

type rateLimit struct {
	n          int
	retryAfter time.Duration
}

// New starts a fake workspace on 127.0.0.1. Close it when done.
func New(opts Options) *Server {
	s := &Server{
		opts:       opts.withDefaults(),
		calls:      map[string]int{},
		rateLimits: map[string]rateLimit{},
		msgs:       map[msgKey]*Message{},
		files:      map[string]*fileRec{},
		uploads:    map[string]string{},
		users:      map[string]User{},
		respURLs:   map[string]*respContext{},
		tickets:    map[string]bool{},
		envOwner:   map[string]*outbound{},
		sentAt:     map[string]time.Time{},
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Deliveries go to the test's own listener, never through a proxy.
	tr.Proxy = nil
	s.http = &http.Client{Transport: tr}

	mux := http.NewServeMux()
	mux.HandleFunc("/api/{method}", s.serveAPI)
	mux.HandleFunc("GET /socketmode", s.serveSocket)
	mux.HandleFunc("POST /upload/v1/{id}", s.serveUpload)
	mux.HandleFunc("GET /files-pri/{file}/{rest...}", s.serveFile)
	mux.HandleFunc("GET /signin", serveSignin)
	mux.HandleFunc("POST /commands/{team}/{id}/{secret}", s.serveResponseURL)
	mux.HandleFunc("POST /actions/{team}/{id}/{secret}", s.serveResponseURL)
	// Started only once s.srv is set: handlers read s.srv.URL.
	s.srv = httptest.NewUnstartedServer(mux)
	s.srv.Start()
	return s
}

// URL returns the server's base URL, "http://127.0.0.1:<port>".
func (s *Server) URL() string { return s.srv.URL }

// APIURL returns the Web API base for slack.OptionAPIURL, ending in "/api/".
func (s *Server) APIURL() string { return s.srv.URL + "/api/" }

// Options returns the options in effect, defaults filled in.
func (s *Server) Options() Options { return s.opts }

// Close drops every Socket Mode connection, stops pending deliveries and
// retries, and shuts the server down. It waits for the server's goroutines.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	s.cancel()
	for _, c := range conns {
		c.close()
	}
	s.srv.Close()
	s.wg.Wait()
}

// spawn runs f in a goroutine that Close waits for; after Close it does
// nothing.
func (s *Server) spawn(f func()) {
	if !s.enter() {
		return
	}
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// enter registers a running task with the WaitGroup unless the server is
// closed; the caller must call s.wg.Done when it returns true.
func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	return true
}

// SetEventsURL makes events go by HTTP POST to url (signed, retried) instead
// of over Socket Mode; "" returns them to Socket Mode.
func (s *Server) SetEventsURL(url string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.eventsURL = url
}

// SetSlashURL makes slash commands go by HTTP POST to url (a signed form)
// instead of over Socket Mode; "" returns them to Socket Mode.
func (s *Server) SetSlashURL(url string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slashURL = url
}

// SetInteractivityURL makes interactions go by HTTP POST to url (a signed
// form with a payload field) instead of over Socket Mode; "" returns them to
// Socket Mode.
func (s *Server) SetInteractivityURL(url string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.interactivityURL = url
}

// SetUser adds or replaces a member of the workspace for users.info. Users
// that were never set are described from their ID.
func (s *Server) SetUser(u User) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users[u.ID] = u
}

// RateLimit makes the next n calls of the Web API method answer HTTP 429
// with "Retry-After: <seconds>" (rounded up, at least 1, as Slack never says
// 0) and {"ok":false,"error":"ratelimited"}. It replaces an earlier setting
// for the method.
func (s *Server) RateLimit(method string, n int, retryAfter time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rateLimits[method] = rateLimit{n: n, retryAfter: retryAfter}
}

// Calls returns how many requests the Web API method received, rate-limited
// and refused ones included.
func (s *Server) Calls(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[method]
}

// Messages returns the channel's messages, root and thread messages alike,
// in ts order. Deleted and ephemeral messages are not included.
func (s *Server) Messages(channel string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, m := range s.order {
		if m.Channel == channel && s.msgs[msgKey{m.Channel, m.TS}] == m {
			out = append(out, s.copyMessage(m))
		}
	}
	return out
}

// Thread returns the root message threadTS and its replies, in ts order;
// nil when there is no such message.
func (s *Server) Thread(channel, threadTS string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, m := range s.threadLocked(channel, threadTS) {
		out = append(out, s.copyMessage(m))
	}
	return out
}

// Ephemerals returns the ephemeral messages shown in the channel
// (chat.postEphemeral and ephemeral responses), in order.
func (s *Server) Ephemerals(channel string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, m := range s.ephemerals {
		if m.Channel == channel {
			out = append(out, s.copyMessage(m))
		}
	}
	return out
}

// Files returns the files shared in the channel, by the app or by users, in
// order; a file shared twice appears twice.
func (s *Server) Files(channel string) []File {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []File
	for _, m := range s.order {
		if m.Channel != channel || s.msgs[msgKey{m.Channel, m.TS}] != m {
			continue
		}
		out = append(out, s.copyMessage(m).Files...)
	}
	return out
}

// Responses returns the messages the app sent in answer to slash commands
// and interactions, in order.
func (s *Server) Responses() []Response {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.responses)
}

// Envelopes returns every Socket Mode envelope sent, redeliveries included,
// in order.
func (s *Server) Envelopes() []Envelope {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.envelopes)
}

// Acks returns the Socket Mode acknowledgements received, in order.
func (s *Server) Acks() []Ack {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.acks)
}

// Unacked returns, for each Socket Mode delivery that no envelope of has
// been acknowledged yet, its latest envelope (sent, or waiting for a
// connection). Empty means the app acknowledged everything.
func (s *Server) Unacked() []Envelope {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Envelope
	for _, o := range s.socketOut {
		if !o.acked {
			out = append(out, o.last)
		}
	}
	return out
}

// Deliveries returns every HTTP delivery attempt, in the order they ended.
func (s *Server) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.deliveries)
}

// Connections returns the number of open Socket Mode connections.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Connects returns how many Socket Mode connections were ever opened.
func (s *Server) Connects() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.connects
}

// WaitFor polls cond every 10 ms until it returns true or ctx ends, in
// which case it returns an error wrapping ctx's. cond may call any method of
// the server.
func (s *Server) WaitFor(ctx context.Context, cond func(*Server) bool) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if cond(s) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("fakeslack: condition not met: %w", ctx.Err())
		case <-t.C:
		}
	}
}

func (s *Server) copyMessage(m *Message) Message {
	c := *m
	c.Blocks = slices.Clone(m.Blocks)
	c.Attachments = slices.Clone(m.Attachments)
	if m.Metadata != nil {
		md := *m.Metadata
		md.EventPayload = slices.Clone(md.EventPayload)
		c.Metadata = &md
	}
	c.Files = nil
	for _, f := range m.Files {
		f.Content = slices.Clone(f.Content)
		c.Files = append(c.Files, f)
	}
	return c
}

// threadLocked returns the root threadTS and its replies.
func (s *Server) threadLocked(channel, threadTS string) []*Message {
	root := s.msgs[msgKey{channel, threadTS}]
	if root == nil {
		return nil
	}
	if root.ThreadTS != "" {
		root = s.msgs[msgKey{channel, root.ThreadTS}]
		if root == nil {
			return nil
		}
	}
	out := []*Message{root}
	for _, m := range s.order {
		if m.Channel == channel && m.ThreadTS == root.TS && s.msgs[msgKey{m.Channel, m.TS}] == m {
			out = append(out, m)
		}
	}
	return out
}

// addMessageLocked records a new message.
func (s *Server) addMessageLocked(m *Message) {
	s.msgs[msgKey{m.Channel, m.TS}] = m
	s.order = append(s.order, m)
}

// resolveThreadLocked returns the root of the thread ts belongs to, and
// false when there is no message ts in the channel.
func (s *Server) resolveThreadLocked(channel, ts string) (string, bool) {
	m := s.msgs[msgKey{channel, ts}]
	if m == nil {
		return "", false
	}
	if m.ThreadTS != "" {
		return m.ThreadTS, true
	}
	return m.TS, true
}

// nextTSLocked returns a new message timestamp: Slack's "<unix
// seconds>.<6 digits>", from the clock, strictly increasing.
func (s *Server) nextTSLocked() string {
	us := time.Now().UnixMicro()
	if us <= s.lastMicros {
		us = s.lastMicros + 1
	}
	s.lastMicros = us
	return fmt.Sprintf("%d.%06d", us/1e6, us%1e6)
}

// nextSeqLocked returns a number unique within the server.
func (s *Server) nextSeqLocked() int64 {
	s.seq++
	return s.seq
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newUUID returns a random UUID in its canonical upper-case form, as Slack's
// envelope IDs and client_msg_ids are.
func newUUID() string {
	h := randomHex(16)
	return strings.Join([]string{h[0:8], h[8:12], "4" + h[13:16], h[16:20], h[20:32]}, "-")
}
