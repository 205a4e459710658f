// Package fakediscord is a fake Discord for tests. It speaks Discord's real
// wire protocol, so a Discord adapter built on github.com/bwmarrin/discordgo
// is tested as it runs against Discord: call Point to aim discordgo's
// endpoint variables at the fake, and the REST API (v9 or v10), the gateway
// websocket and HTTP interactions behave as Discord's do, errors and rate
// limits included.
//
// The server has two sides. The app side is what Discord offers a bot: REST
// routes under /api/v{n}/ (messages, threads, channels, application
// commands, interaction callbacks and webhook follow-ups, the gateway URL)
// and a gateway websocket at /gateway. The user side is what people do in
// Discord: UserMessage, SlashCommand and ComponentClick record the action in
// the guild and deliver the matching gateway dispatch (MESSAGE_CREATE,
// INTERACTION_CREATE) to every identified gateway session, or, once
// SetInteractionsURL is set, POST interactions to that URL signed with
// Ed25519 as Discord does for an "Interactions Endpoint URL".
//
// Discord's rules that an adapter must cope with are kept: the bot's own
// messages are dispatched back to it as MESSAGE_CREATE; MESSAGE_CREATE needs
// the GUILD_MESSAGES intent and its content, embeds, attachments and
// components are blanked without the privileged MESSAGE_CONTENT intent
// (unless the message mentions the bot); an interaction must be answered
// within Options.InteractionTimeout (3 s) and only once; follow-ups need an
// acknowledged interaction; the first follow-up after a deferred response
// replaces the "thinking" message.
//
// State can be inspected at any time (Messages, Channel, Threads, Commands,
// InteractionResponses, Calls, Intents, Connected) and waited for with
// WaitFor. All methods are safe for concurrent use.
package fakediscord

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Options configures a Server. Zero fields take the documented defaults.
type Options struct {
	// AppID is the application ID; default "1000".
	AppID string
	// BotUserID is the bot user's ID; default "2000".
	BotUserID string
	// BotName is the bot user's username; default "agentbot".
	BotName string
	// BotToken is the token REST calls must present as "Bot <token>" and
	// IDENTIFY must carry; default "fake-bot-token".
	BotToken string
	// GuildID is the one guild the bot is in; default "3000".
	GuildID string
	// PublicKey and PrivateKey sign HTTP interactions; a fresh pair is
	// generated when PrivateKey is nil.
	PublicKey  ed25519.PublicKey
	PrivateKey ed25519.PrivateKey
	// HeartbeatInterval is sent in HELLO; default 41.25 s, as Discord.
	HeartbeatInterval time.Duration
	// InteractionTimeout is how long an interaction may wait for its
	// callback (and an HTTP interaction for its answer); default 3 s, as
	// Discord. A later callback gets 404 Unknown interaction.
	InteractionTimeout time.Duration
	// DisallowedIntents are gateway intents not enabled for the app (in
	// Discord, privileged intents not switched on in the developer
	// portal); an IDENTIFY asking for any of them is closed with 4014.
	DisallowedIntents int
}

func (o Options) withDefaults() Options {
	def := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	def(&o.AppID, "1000")
	def(&o.BotUserID, "2000")
	def(&o.BotName, "agentbot")
	def(&o.BotToken, "fake-bot-token")
	def(&o.GuildID, "3000")
	if o.PrivateKey == nil {
		pub, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			panic("fakediscord: generating key: " + err.Error())
		}
		o.PublicKey, o.PrivateKey = pub, priv
	} else if o.PublicKey == nil {
		o.PublicKey = o.PrivateKey.Public().(ed25519.PublicKey)
	}
	if o.HeartbeatInterval <= 0 {
		o.HeartbeatInterval = 41250 * time.Millisecond
	}
	if o.InteractionTimeout <= 0 {
		o.InteractionTimeout = 3 * time.Second
	}
	return o
}

// Channel kinds, as Discord's channel "type" field.
const (
	ChannelText          = 0
	ChannelAnnouncement  = 5
	ChannelPublicThread  = 11
	ChannelPrivateThread = 12
)

// Gateway intents the fake looks at.
const (
	IntentGuilds         = 1 << 0
	IntentGuildMessages  = 1 << 9
	IntentMessageContent = 1 << 15
)

// Message flags the fake sets or reads.
const (
	FlagEphemeral = 1 << 6
	FlagLoading   = 1 << 7
)

// Message is a message in the guild, as the inspection methods return it.
type Message struct {
	ID, ChannelID string
	// AuthorID is the bot user for messages the app posted (including
	// interaction responses and follow-ups).
	AuthorID string
	// Bot is set on messages the app posted.
	Bot bool
	// Roles are the author's member roles (user messages only).
	Roles   []string
	Content string
	// Embeds and Components are the JSON arrays as posted; nil when none.
	Embeds, Components json.RawMessage
	// Attachments are the uploaded files.
	Attachments []Attachment
	// Flags are Discord's message flags (FlagEphemeral, FlagLoading, ...).
	Flags int
	// ReferenceID is the message this one replies to
	// (message_reference.message_id).
	ReferenceID string
	// InteractionID is set on responses and follow-ups to an interaction.
	InteractionID string
	// Edits counts edits (PATCH of the message, @original, or an
	// UPDATE_MESSAGE callback).
	Edits     int
	Timestamp time.Time

	edited *time.Time
	thread string
}

// Attachment is a file attached to a message.
type Attachment struct {
	ID, Filename, ContentType string
	Content                   []byte
}

// Channel is a guild channel or thread.
type Channel struct {
	ID, GuildID, Name string
	// Type is the channel kind (ChannelText, ChannelPublicThread, ...).
	Type int
	// ParentID is the channel a thread lives in; empty for channels.
	ParentID string
	// OwnerID is the thread's creator; empty for channels.
	OwnerID             string
	Archived, Locked    bool
	AutoArchiveDuration int
	// StarterMessageID is the message a thread was started from (the
	// thread has the same ID, as in Discord); empty otherwise.
	StarterMessageID string
	// RecipientID is the user of a DM channel (ChannelDM), which has no
	// GuildID.
	RecipientID string
}

func (c Channel) isThread() bool { return c.Type >= 10 && c.Type <= 12 }

// Command is a registered application command.
type Command struct {
	ID string
	// GuildID is empty for a global command.
	GuildID     string
	Name        string
	Type        int
	Description string
	// Raw is the command as the app sent it, with id, application_id,
	// version and guild_id added.
	Raw json.RawMessage
}

// InteractionResponse is something the app sent in answer to an
// interaction: a callback (REST or the body of the answer to an HTTP
// interaction), a follow-up or an edit.
type InteractionResponse struct {
	InteractionID, Token string
	// Kind is "callback", "followup", "edit_original", "edit_followup" or
	// "delete".
	Kind string
	// Type is the callback type (1 PONG, 4 CHANNEL_MESSAGE_WITH_SOURCE, 5
	// DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE, 6 DEFERRED_UPDATE_MESSAGE, 7
	// UPDATE_MESSAGE, 8, 9); 0 for other kinds.
	Type int
	// Via is "rest" or "http" (the answer to an HTTP interaction).
	Via string
	// Status is the HTTP status the fake answered (for "http", the status
	// the app answered); Error is Discord's error message when rejected.
	Status int
	Error  string
	// Body is the JSON payload (payload_json for multipart).
	Body json.RawMessage
	// MessageID is the message created or edited, if any.
	MessageID string
}

// Invocation identifies an interaction the user side started.
type Invocation struct {
	ID, Token string
}

type interactionRec struct {
	id, token, channelID string
	typ                  int
	messageID            string // component interactions: the clicked message
	userID               string
	created              time.Time
	acked                bool
	callbackType         int
	originalID           string
}

type rateLimit struct {
	n          int
	retryAfter time.Duration
}

// Server is a fake Discord. Create it with New.
type Server struct {
	opts Options
	srv  *httptest.Server
	http *http.Client
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu           sync.Mutex
	closed       bool
	lastID       uint64
	channels     map[string]*Channel
	chanOrder    []string
	msgs         map[string]*Message
	chanMsgs     map[string][]*Message
	commands     []Command
	interactions map[string]*interactionRec // by token
	responses    []InteractionResponse
	calls        map[string]int
	limits       map[string]*rateLimit
	intents      int
	heartbeats   int
	connects     int
	sessions     map[string]*session
	conns        map[*gwConn]bool
	intURL       string
	pointed      map[*string]string
}

// New starts a fake Discord on 127.0.0.1 with one guild (Options.GuildID)
// and no channels. Close it when done.
func New(opts Options) *Server {
	s := &Server{
		opts:         opts.withDefaults(),
		channels:     map[string]*Channel{},
		msgs:         map[string]*Message{},
		chanMsgs:     map[string][]*Message{},
		interactions: map[string]*interactionRec{},
		calls:        map[string]int{},
		limits:       map[string]*rateLimit{},
		sessions:     map[string]*session{},
		conns:        map[*gwConn]bool{},
	}
	s.ctx, s.stop = context.WithCancel(context.Background())
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Interactions go to the test's own listener, never through a proxy.
	tr.Proxy = nil
	s.http = &http.Client{Transport: tr, Timeout: s.opts.InteractionTimeout}
	s.srv = httptest.NewServer(s.routes())
	return s
}

// URL returns the server's base URL, "http://127.0.0.1:<port>".
func (s *Server) URL() string { return s.srv.URL }

// GatewayURL returns the websocket URL GET /gateway hands out.
func (s *Server) GatewayURL() string { return "ws" + s.srv.URL[len("http"):] + "/gateway" }

// Options returns the options in effect, defaults filled in.
func (s *Server) Options() Options { return s.opts }

// PublicKey returns the key HTTP interactions are signed with, as
// discordgo.VerifyInteraction wants it.
func (s *Server) PublicKey() ed25519.PublicKey { return s.opts.PublicKey }

// PublicKeyHex returns PublicKey hex-encoded, as the developer portal shows
// it.
func (s *Server) PublicKeyHex() string { return hex.EncodeToString(s.opts.PublicKey) }

// Close closes every gateway connection, waits for pending HTTP
// interactions, shuts the server down and, if Point was called, restores
// discordgo's endpoint variables. Close discordgo sessions first: they read
// those variables.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	conns := make([]*gwConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	s.stop()
	for _, c := range conns {
		c.kill()
	}
	s.srv.Close()
	s.wg.Wait()
	s.unpoint()
}

// SetInteractionsURL makes interactions go by signed HTTP POST to url (an
// "Interactions Endpoint URL") instead of over the gateway; "" returns them
// to the gateway. The answer to the POST is the interaction's callback.
func (s *Server) SetInteractionsURL(url string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.intURL = url
}

// RateLimit makes the next n calls of route answer 429 with retry_after
// retryAfter. route is a method and path template as Calls counts them,
// e.g. "POST /channels/{channel}/messages".
func (s *Server) RateLimit(route string, n int, retryAfter time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limits[route] = &rateLimit{n: n, retryAfter: retryAfter}
}

// Calls returns how many requests route received, rate-limited and
// rejected ones included. Routes are a method and the path template
// without the /api/v{n} prefix, e.g. "POST /channels/{channel}/messages",
// "PATCH /channels/{channel}/messages/{message}",
// "POST /interactions/{interaction}/{token}/callback",
// "PUT /applications/{app}/commands", "GET /gateway/bot".
func (s *Server) Calls(route string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[route]
}

// Intents returns the intents of the last IDENTIFY; 0 before any.
func (s *Server) Intents() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.intents
}

// Heartbeats returns how many op 1 heartbeats clients have sent.
func (s *Server) Heartbeats() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heartbeats
}

// Connects returns how many gateway handshakes (IDENTIFY answered with
// READY, or RESUME accepted) have completed.
func (s *Server) Connects() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.connects
}

// Connected returns how many gateway connections have completed IDENTIFY
// or RESUME and are open.
func (s *Server) Connected() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for c := range s.conns {
		if c.sess != nil {
			n++
		}
	}
	return n
}

// AddChannel adds a guild channel of the given kind (ChannelText, ...)
// and returns its ID. Identified gateway sessions get CHANNEL_CREATE.
func (s *Server) AddChannel(name string, kind int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := &Channel{ID: s.nextIDLocked(), GuildID: s.opts.GuildID, Name: name, Type: kind}
	s.addChannelLocked(c)
	s.dispatchLocked("CHANNEL_CREATE", s.wireChannelLocked(c), IntentGuilds)
	return c.ID
}

func (s *Server) addChannelLocked(c *Channel) {
	s.channels[c.ID] = c
	s.chanOrder = append(s.chanOrder, c.ID)
}

// Channel returns the channel or thread id.
func (s *Server) Channel(id string) (Channel, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.channels[id]
	if !ok {
		return Channel{}, false
	}
	return *c, true
}

// Threads returns the threads of channel parentID, oldest first.
func (s *Server) Threads(parentID string) []Channel {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Channel
	for _, id := range s.chanOrder {
		if c := s.channels[id]; c.ParentID == parentID && c.isThread() {
			out = append(out, *c)
		}
	}
	return out
}

// Messages returns the messages of a channel or thread, oldest first,
// ephemeral ones included.
func (s *Server) Messages(channelID string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Message, 0, len(s.chanMsgs[channelID]))
	for _, m := range s.chanMsgs[channelID] {
		out = append(out, copyMessage(m))
	}
	return out
}

// Message returns one message by ID.
func (s *Server) Message(id string) (Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.msgs[id]
	if !ok {
		return Message{}, false
	}
	return copyMessage(m), true
}

func copyMessage(m *Message) Message {
	c := *m
	c.Roles = slices.Clone(m.Roles)
	c.Attachments = slices.Clone(m.Attachments)
	c.Embeds = slices.Clone(m.Embeds)
	c.Components = slices.Clone(m.Components)
	return c
}

// Commands returns the registered commands, global ones first.
func (s *Server) Commands() []Command {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.commands)
	slices.SortStableFunc(out, func(a, b Command) int {
		if (a.GuildID == "") != (b.GuildID == "") {
			if a.GuildID == "" {
				return -1
			}
			return 1
		}
		return 0
	})
	return out
}

// InteractionResponses returns callbacks, follow-ups and edits in the
// order they arrived, rejected ones included (with Status and Error).
func (s *Server) InteractionResponses() []InteractionResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.responses)
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
			return fmt.Errorf("fakediscord: condition not met: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// discordEpoch is the start of Discord's snowflakes, 2015-01-01 UTC.
const discordEpoch = 1420070400000

// nextIDLocked returns a new snowflake, increasing, with the current time
// in it as Discord's have (discordgo.SnowflakeTimestamp works on them).
func (s *Server) nextIDLocked() string {
	id := uint64(time.Now().UnixMilli()-discordEpoch) << 22
	if id <= s.lastID {
		id = s.lastID + 1
	}
	s.lastID = id
	return strconv.FormatUint(id, 10)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
