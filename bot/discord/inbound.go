package discordbot

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/bwmarrin/discordgo"
	"go.opentelemetry.io/otel/metric"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
)

// Handler is what Inbound hands events to; *bot.Router satisfies it.
// Handle is called on a worker goroutine after the delivery was
// acknowledged; its error (the reply failed) is logged.
type Handler interface {
	Handle(ctx context.Context, ev bot.Event, r bot.Replier) error
}

// InboundConfig configures an Inbound. Only cmd/* fills it from the
// environment.
type InboundConfig struct {
	// Token is the bot token (without "Bot "); required.
	Token string
	// AppID is the application's ID, for registering commands; empty
	// means the bot user's ID (the same for bot applications).
	AppID string
	// PublicKey is the application's Ed25519 public key, hex-encoded as
	// the developer portal shows it; required by HTTPHandler only (without
	// it every request is refused).
	PublicKey string
	// GuildID, when set, registers the /agent command in that guild only
	// (instantly available); empty registers it globally.
	GuildID string
	// Backends are the choices of the commands' backend options and of
	// the backend select on status messages.
	Backends []string
	// HTTPClient makes the REST calls. Nil means a client over a clone of
	// http.DefaultTransport, so proxy variables and the system's CAs
	// apply; the gateway's websocket dialer honours the proxy variables.
	HTTPClient *http.Client
	// Logger receives the adapter's logs; nil means slog.Default.
	Logger *slog.Logger
	// Meter counts REST calls and refused signatures (see bot.Metrics);
	// nil counts nothing.
	Meter metric.Meter
	// Workers is how many events are handled at once (default 8).
	Workers int
	// QueueSize is how many acknowledged events may wait for a worker
	// (default 64 per worker).
	QueueSize int
	// HandleTimeout bounds the handling of one event (default 2 minutes;
	// an interaction's token lasts 15).
	HandleTimeout time.Duration
	// ThreadPerSession: false (the default) makes a text channel itself
	// the session of "/agent new" and of a mention there; true opens a
	// thread for each new session instead.
	ThreadPerSession bool
}

// Defaults of InboundConfig.
const (
	DefaultWorkers       = 8
	DefaultHandleTimeout = 2 * time.Minute
)

// CommandName is the application command the adapter registers.
const CommandName = "agent"

// Custom IDs of the components on status messages.
const (
	ActionSwitch = "agent_switch" // select menu; its value is a backend
	ActionFork   = "agent_fork"
	ActionStop   = "agent_stop"
	ActionDone   = "agent_done"
)

// Custom ID prefixes of the buttons on approval messages: a button's
// custom ID is the prefix, ':' and the approval's ID
// ("agent_approve:t3-call_abc").
const (
	ActionApprove    = "agent_approve"
	ActionApproveAll = "agent_approve_all"
	ActionDeny       = "agent_deny"
)

// Intents is what the gateway connection asks for. MessageContent is a
// privileged intent: switch it on in the developer portal.
const Intents = discordgo.IntentsGuilds | discordgo.IntentsGuildMessages |
	discordgo.IntentsMessageContent | discordgo.IntentsDirectMessages

// ErrClosed is returned for work handed to an Inbound after Shutdown.
var ErrClosed = bot.ErrPoolClosed

// Inbound receives from Discord — MESSAGE_CREATE and INTERACTION_CREATE
// over the gateway, and signed interactions over HTTP — and hands
// bot.Events to a Handler. Every interaction is acknowledged with a
// deferred response before any work starts; the work runs on a bounded
// pool of workers. Safe for concurrent use.
type Inbound struct {
	cfg     InboundConfig
	dg      *discordgo.Session
	handler Handler
	log     *slog.Logger
	pubKey  ed25519.PublicKey
	metrics *bot.Metrics // nil counts nothing

	startMu sync.Mutex
	opened  bool

	idMu  sync.RWMutex
	botID string
	appID string

	chMu     sync.Mutex
	channels map[string]*discordgo.Channel

	pool *bot.Pool

	connMu  sync.Mutex
	connErr error // nil while the gateway is connected; see Connected
}

// NewInbound returns an Inbound that hands events to h. It checks cfg
// and contacts nothing; Start connects.
func NewInbound(cfg InboundConfig, h Handler) (*Inbound, error) {
	if strings.TrimSpace(cfg.Token) == "" {
		return nil, errors.New("discord: no bot token (DISCORD_BOT_TOKEN)")
	}
	if h == nil {
		return nil, errors.New("discord: no handler")
	}
	var key ed25519.PublicKey
	if cfg.PublicKey != "" {
		b, err := hex.DecodeString(strings.TrimSpace(cfg.PublicKey))
		if err != nil || len(b) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("discord: PublicKey must be %d hex-encoded bytes, as the developer portal shows it", ed25519.PublicKeySize)
		}
		key = b
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 64 * cfg.Workers
	}
	if cfg.HandleTimeout <= 0 {
		cfg.HandleTimeout = DefaultHandleTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	dg, err := newSession(cfg.Token, cfg.HTTPClient)
	if err != nil {
		return nil, fmt.Errorf("discord: %w", err)
	}
	ms := meterOf(cfg.Meter)
	dg.Client = meteredClient(dg.Client, ms)
	dg.Identify.Intents = Intents
	in := &Inbound{cfg: cfg, dg: dg, handler: h, metrics: ms, log: cfg.Logger.With("platform", Platform), pubKey: key,
		appID: cfg.AppID, channels: map[string]*discordgo.Channel{},
		pool: bot.NewPool(Platform, cfg.Workers, cfg.QueueSize, cfg.HandleTimeout, cfg.Logger.With("platform", Platform))}
	dg.AddHandler(func(_ *discordgo.Session, m *discordgo.MessageCreate) { in.onMessage(m.Message) })
	dg.AddHandler(func(_ *discordgo.Session, i *discordgo.InteractionCreate) { in.onInteraction(i.Interaction) })
	in.connErr = errors.New("gateway not connected yet")
	dg.AddHandler(func(*discordgo.Session, *discordgo.Ready) { in.setConn(nil) })
	dg.AddHandler(func(*discordgo.Session, *discordgo.Resumed) { in.setConn(nil) })
	dg.AddHandler(func(*discordgo.Session, *discordgo.Disconnect) {
		in.setConn(errors.New("gateway disconnected; reconnecting"))
	})
	return in, nil
}

// Connected returns nil while the gateway connection is up (Discord said
// Ready or Resumed since the last disconnect), and an error saying why not
// otherwise. It is a readiness check.
func (in *Inbound) Connected() error {
	in.connMu.Lock()
	defer in.connMu.Unlock()
	return in.connErr
}

func (in *Inbound) setConn(err error) {
	in.connMu.Lock()
	defer in.connMu.Unlock()
	in.connErr = err
}

// Start learns who the bot is, registers the /agent command (a bulk
// overwrite, so calling it again changes nothing), and opens the gateway
// connection the first time it is called. ctx bounds the REST calls, not
// the connection, which lasts until Close.
func (in *Inbound) Start(ctx context.Context) error {
	in.startMu.Lock()
	defer in.startMu.Unlock()
	if in.id() == "" {
		var me *discordgo.User
		err := callREST(ctx, "get current user", func(o ...discordgo.RequestOption) (err error) {
			me, err = in.dg.User("@me", o...)
			return err
		})
		if err != nil {
			return fmt.Errorf("discord: who am I (check the bot token): %w", err)
		}
		in.idMu.Lock()
		in.botID = me.ID
		if in.appID == "" {
			in.appID = me.ID
		}
		in.idMu.Unlock()
	}
	err := callREST(ctx, "register commands", func(o ...discordgo.RequestOption) error {
		_, err := in.dg.ApplicationCommandBulkOverwrite(in.app(), in.cfg.GuildID, Commands(in.cfg.Backends), o...)
		return err
	})
	if err != nil {
		return fmt.Errorf("discord: registering /%s: %w", CommandName, err)
	}
	if !in.opened {
		if err := in.dg.Open(); err != nil {
			return fmt.Errorf("discord: opening the gateway: %w", err)
		}
		in.opened = true
		in.log.Info("connected to discord", "bot_user", in.id(), "guild", in.cfg.GuildID)
	}
	return nil
}

// Close closes the gateway connection. Call Shutdown after it to let the
// acknowledged events finish.
func (in *Inbound) Close() error {
	in.startMu.Lock()
	defer in.startMu.Unlock()
	if !in.opened {
		return nil
	}
	in.opened = false
	return in.dg.Close()
}

func (in *Inbound) id() string {
	in.idMu.RLock()
	defer in.idMu.RUnlock()
	return in.botID
}

func (in *Inbound) app() string {
	in.idMu.RLock()
	defer in.idMu.RUnlock()
	return in.appID
}

// Commands returns the /agent application command with one subcommand per
// verb of the grammar, and options for the verbs' arguments: backend
// options offer backends as choices (at most 25, Discord's limit); the
// policy action and the list scope offer the grammar's; pages are integers
// from 1. commandText turns an invocation back into command text.
func Commands(backends []string) []*discordgo.ApplicationCommand {
	var choices []*discordgo.ApplicationCommandOptionChoice
	for _, b := range backends {
		if len(choices) == 25 {
			break
		}
		choices = append(choices, &discordgo.ApplicationCommandOptionChoice{Name: b, Value: b})
	}
	str := func(name, desc string, required bool, ch []*discordgo.ApplicationCommandOptionChoice, maxLen int) *discordgo.ApplicationCommandOption {
		return &discordgo.ApplicationCommandOption{Type: discordgo.ApplicationCommandOptionString, Name: name,
			Description: desc, Required: required, Choices: ch, MaxLength: maxLen}
	}
	backend := func(required bool) *discordgo.ApplicationCommandOption {
		return str("backend", "sandbox backend", required, choices, 0)
	}
	choicesOf := func(values ...string) []*discordgo.ApplicationCommandOptionChoice {
		var ch []*discordgo.ApplicationCommandOptionChoice
		for _, v := range values {
			ch = append(ch, &discordgo.ApplicationCommandOptionChoice{Name: v, Value: v})
		}
		return ch
	}
	var verbs []string
	for _, v := range bot.Verbs() {
		verbs = append(verbs, string(v))
	}
	page := func() *discordgo.ApplicationCommandOption {
		minPage := 1.0
		return &discordgo.ApplicationCommandOption{Type: discordgo.ApplicationCommandOptionInteger, Name: "page",
			Description: "page to show, from 1 (the first)", MinValue: &minPage}
	}
	opts := map[bot.Verb][]*discordgo.ApplicationCommandOption{
		bot.VerbNew:    {backend(false), str("title", "session title", false, nil, bot.MaxTitleRunes)},
		bot.VerbSwitch: {backend(true), str("root", "workspace root, an absolute path (local backend)", false, nil, 0)},
		bot.VerbFork:   {backend(false), str("title", "title of the fork", false, nil, bot.MaxTitleRunes)},
		bot.VerbTitle:  {str("name", "new title", true, nil, bot.MaxTitleRunes)},
		bot.VerbModel:  {str("name", "model to use; leave out to see the current one", false, nil, bot.MaxModelLen)},
		bot.VerbPolicy: {
			str("action", "set a key, or reset one (or every key); leave out to see the policy", false,
				choicesOf(bot.PolicySet, bot.PolicyReset), 0),
			str("key", "policy key to set or reset", false, nil, bot.MaxPolicyKeyLen),
			str("value", "value to set the key to", false, nil, bot.MaxPolicyValueRunes),
		},
		bot.VerbAudit: {page()},
		bot.VerbList: {
			str("scope", "mine: the sessions you started; all: every channel's (admins); default: this channel", false,
				choicesOf(bot.ScopeMine, bot.ScopeAll), 0),
			page(),
		},
		bot.VerbHelp: {str("verb", "the command to explain", false, choicesOf(verbs...), 0)},
		bot.VerbApprove: {
			str("id", "the approval to answer; leave out for the command waiting", false, nil, bot.MaxApprovalIDLen),
			{Type: discordgo.ApplicationCommandOptionBoolean, Name: "all", Description: "approve the rest of this turn's commands too"},
		},
		bot.VerbDeny: {str("id", "the approval to deny; leave out for the command waiting", false, nil, bot.MaxApprovalIDLen)},
		bot.VerbApprovals: {str("mode", "which shell commands wait for approval; leave out to see it", false,
			choicesOf(agentflow.ApprovalNever, agentflow.ApprovalRisky, agentflow.ApprovalAlways), 0)},
	}
	var subs []*discordgo.ApplicationCommandOption
	for _, v := range bot.Verbs() {
		desc := bot.Usage(v)
		if _, d, ok := strings.Cut(desc, " - "); ok {
			desc = d
		}
		subs = append(subs, &discordgo.ApplicationCommandOption{Type: discordgo.ApplicationCommandOptionSubCommand,
			Name: string(v), Description: bot.Truncate(desc, 100), Options: opts[v]})
	}
	return []*discordgo.ApplicationCommand{{Name: CommandName, Description: "Talk to the agent: sessions, backends, forks",
		Type: discordgo.ChatApplicationCommand, Options: subs}}
}

// onMessage turns a MESSAGE_CREATE into an event for the pool. The bot's
// own messages, other bots', webhooks' and system messages are ignored.
func (in *Inbound) onMessage(m *discordgo.Message) {
	if m == nil || m.Author == nil || m.Author.Bot || m.WebhookID != "" || m.Author.ID == in.id() {
		return
	}
	if m.Type != discordgo.MessageTypeDefault && m.Type != discordgo.MessageTypeReply {
		return
	}
	if err := in.submit(context.Background(), func(ctx context.Context) { in.handleMessage(ctx, m) }); err != nil {
		in.log.Warn("dropped a discord message", "message", m.ID, "error", err)
	}
}

func (in *Inbound) handleMessage(ctx context.Context, m *discordgo.Message) {
	botID := in.id()
	key := ThreadKey(m.GuildID, m.ChannelID)
	ev := bot.Event{ID: m.ID, Platform: Platform, ThreadKey: key, NewThreadKey: key, MessageID: m.ID,
		User: m.Author.ID, UserName: displayName(m.Author, m.Member)}
	if m.Member != nil {
		ev.Roles = m.Member.Roles
	}
	for _, a := range m.Attachments {
		ev.Files = append(ev.Files, agentflow.InboundFile{Name: a.Filename, URL: a.URL, Size: int64(a.Size)})
	}
	ch := in.channelInfo(ctx, m.ChannelID)
	ev.Channel = allowChannel(ch, m.ChannelID)
	if ch != nil && ch.IsThread() {
		// A thread's ID is a snowflake: it says when the thread began.
		if t, err := discordgo.SnowflakeTimestamp(m.ChannelID); err == nil {
			ev.ThreadStarted = t
		}
	}
	replyIn := m.ChannelID
	mention := ""
	if botID != "" {
		mention = "<@" + botID + ">"
	}
	switch rest, ok := bot.Trigger(m.Content, mention); {
	case ok:
		ev.Kind, ev.Text = bot.KindCommand, rest
		if cmd, err := bot.Parse(rest, in.cfg.Backends); err == nil && cmd.Verb == bot.VerbNew {
			replyIn = in.placeNew(ctx, &ev, m, ch, cmd.Title)
		}
	case in.mentioned(m, botID) || m.GuildID == "":
		ev.Kind, ev.Text = bot.KindMention, stripMention(m.Content, botID)
		replyIn = in.placeNew(ctx, &ev, m, ch, ev.Text)
	default:
		ev.Kind, ev.Text = bot.KindMessage, m.Content
	}
	r := &messageReplier{in: in, channel: replyIn, ref: m.ID, refChannel: m.ChannelID, guild: m.GuildID}
	in.dispatch(ctx, ev, r)
}

// placeNew, in ThreadPerSession mode, opens a thread on the message m (in
// a text channel; threads and direct messages are places already) and
// makes the event start its session there. It returns the channel to
// answer in.
func (in *Inbound) placeNew(ctx context.Context, ev *bot.Event, m *discordgo.Message, ch *discordgo.Channel, title string) string {
	if !in.cfg.ThreadPerSession || m.GuildID == "" || ch == nil || ch.IsThread() || ch.Type == discordgo.ChannelTypeGuildForum {
		return m.ChannelID
	}
	name := threadName(title)
	if strings.TrimSpace(title) == "" {
		name = "agent session"
	}
	err := callREST(ctx, "start thread", func(o ...discordgo.RequestOption) error {
		_, err := in.dg.MessageThreadStartComplex(m.ChannelID, m.ID, &discordgo.ThreadStart{Name: name, AutoArchiveDuration: 1440}, o...)
		return err
	})
	if err != nil && !isCode(err, codeThreadExists) {
		in.log.Warn("could not open a thread for a new session; using the channel", "channel", m.ChannelID, "error", err)
		return m.ChannelID
	}
	// A thread started on a message has the message's ID, so a repeated
	// delivery finds the same thread.
	ev.ThreadKey, ev.NewThreadKey = "", ThreadKey(m.GuildID, m.ID)
	return m.ID
}

func (in *Inbound) mentioned(m *discordgo.Message, botID string) bool {
	if botID == "" {
		return false
	}
	for _, u := range m.Mentions {
		if u != nil && u.ID == botID {
			return true
		}
	}
	return strings.Contains(m.Content, "<@"+botID+">") || strings.Contains(m.Content, "<@!"+botID+">")
}

// stripMention removes the bot's mentions from a message's text.
func stripMention(text, botID string) string {
	if botID != "" {
		text = strings.NewReplacer("<@"+botID+">", "", "<@!"+botID+">", "").Replace(text)
	}
	return strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(text), ":,"))
}

func displayName(u *discordgo.User, mem *discordgo.Member) string {
	switch {
	case mem != nil && mem.Nick != "":
		return mem.Nick
	case u == nil:
		return ""
	case u.GlobalName != "":
		return u.GlobalName
	}
	return u.Username
}

// allowChannel is the channel allowlists see: a thread's parent, so a
// thread of an allowed channel is allowed.
func allowChannel(ch *discordgo.Channel, id string) string {
	if ch != nil && ch.IsThread() && ch.ParentID != "" {
		return ch.ParentID
	}
	return id
}

// channelInfo describes a channel from the gateway's state, else from
// REST (cached); nil when it cannot be had.
func (in *Inbound) channelInfo(ctx context.Context, id string) *discordgo.Channel {
	if ch, err := in.dg.State.Channel(id); err == nil {
		return ch
	}
	in.chMu.Lock()
	ch, ok := in.channels[id]
	in.chMu.Unlock()
	if ok {
		return ch
	}
	err := callREST(ctx, "get channel", func(o ...discordgo.RequestOption) (err error) {
		ch, err = in.dg.Channel(id, o...)
		return err
	})
	if err != nil {
		in.log.Debug("could not describe a channel", "channel", id, "error", err)
		return nil
	}
	in.chMu.Lock()
	if len(in.channels) >= 10000 {
		clear(in.channels)
	}
	in.channels[id] = ch
	in.chMu.Unlock()
	return ch
}

func (in *Inbound) dispatch(ctx context.Context, ev bot.Event, r bot.Replier) {
	if err := in.handler.Handle(ctx, ev, r); err != nil {
		in.log.Warn("answering a discord event failed", "event_id", ev.ID, "thread", ev.ThreadKey, "error", err)
	}
}

// messageReplier answers a message in its channel (or the thread opened
// for it), as a reply to it.
type messageReplier struct {
	in                *Inbound
	channel, ref      string
	refChannel, guild string
}

// Reply posts r in parts of at most 2,000 characters; the first part
// replies to the message; a session's controls go under the last part.
// Discord has no private answers to a plain message, so Private ones are
// posted like the others.
func (r *messageReplier) Reply(ctx context.Context, resp bot.Response) error {
	parts := responseParts(resp)
	for i, part := range parts {
		send := &discordgo.MessageSend{Content: part, AllowedMentions: noMentions()}
		if i == 0 && r.channel == r.refChannel {
			send.Reference = &discordgo.MessageReference{MessageID: r.ref, ChannelID: r.refChannel, GuildID: r.guild, FailIfNotExists: new(bool)}
		}
		if i == len(parts)-1 {
			send.Components = r.in.components(resp)
			send.Embeds = statusEmbeds(resp)
		}
		err := callREST(ctx, "post reply", func(o ...discordgo.RequestOption) error {
			_, err := r.in.dg.ChannelMessageSendComplex(r.channel, send, o...)
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// responseParts renders a response's text (thread links, the Web UI link)
// in parts that fit a message.
func responseParts(resp bot.Response) []string {
	text := renderLinks(strings.TrimSpace(resp.Text))
	if resp.WebUI != "" && resp.Session == nil {
		text += "\n<" + resp.WebUI + ">"
	}
	if strings.TrimSpace(text) == "" {
		text = "Done."
	}
	return bot.Chunk(text, MaxMessage)
}

// components are a session's controls: a backend select and Fork, Stop,
// Done buttons (and a Web UI link), or nothing without a session.
func (in *Inbound) components(resp bot.Response) []discordgo.MessageComponent {
	v := resp.Session
	if v == nil {
		return nil
	}
	var rows []discordgo.MessageComponent
	if len(in.cfg.Backends) > 0 {
		var opts []discordgo.SelectMenuOption
		for _, b := range in.cfg.Backends {
			if len(opts) == 25 {
				break
			}
			opts = append(opts, discordgo.SelectMenuOption{Label: b, Value: b, Default: b == v.Backend})
		}
		rows = append(rows, discordgo.ActionsRow{Components: []discordgo.MessageComponent{
			discordgo.SelectMenu{CustomID: ActionSwitch, Placeholder: "Switch backend", Options: opts},
		}})
	}
	buttons := []discordgo.MessageComponent{
		discordgo.Button{CustomID: ActionFork, Label: "Fork", Style: discordgo.PrimaryButton},
		discordgo.Button{CustomID: ActionStop, Label: "Stop", Style: discordgo.DangerButton},
		discordgo.Button{CustomID: ActionDone, Label: "Pause", Style: discordgo.SecondaryButton},
	}
	if strings.HasPrefix(resp.WebUI, "https://") || strings.HasPrefix(resp.WebUI, "http://") {
		buttons = append(buttons, discordgo.Button{Label: "Web UI", Style: discordgo.LinkButton, URL: resp.WebUI})
	}
	return append(rows, discordgo.ActionsRow{Components: buttons})
}

// submit hands an acknowledged delivery to the worker pool, waiting for
// room in the queue until ctx is done.
func (in *Inbound) submit(ctx context.Context, job func(context.Context)) error {
	return in.pool.Submit(ctx, job)
}

// Shutdown stops taking deliveries (HTTP interactions get 503) and waits
// for the events already acknowledged to be handled, until ctx is done;
// then it cancels the handlers still running and returns ctx's error.
// Call Close first to stop the gateway.
func (in *Inbound) Shutdown(ctx context.Context) error {
	return in.pool.Shutdown(ctx)
}
