package slackbot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"
	"go.opentelemetry.io/otel/metric"

	"github.com/agentbot/agentbot/bot"
)

// Handler is what Inbound hands events to; *bot.Router satisfies it.
// Handle is called on a worker goroutine after the delivery was
// acknowledged; its error (the reply failed) is logged.
type Handler interface {
	Handle(ctx context.Context, ev bot.Event, r bot.Replier) error
}

// ReplyPoster is what Inbound needs of the Slack Web API to answer people
// and to open threads (chat.postMessage, chat.postEphemeral). *slack.Client
// satisfies it; the outbound sender may be passed to share its client.
type ReplyPoster interface {
	PostMessageContext(ctx context.Context, channelID string, options ...slack.MsgOption) (channel, timestamp string, err error)
	PostEphemeralContext(ctx context.Context, channelID, userID string, options ...slack.MsgOption) (timestamp string, err error)
}

// InboundConfig configures an Inbound. Only cmd/* fills it from the
// environment.
type InboundConfig struct {
	// BotToken ("xoxb-...") calls the Web API; required.
	BotToken string
	// AppToken ("xapp-...", scope connections:write) opens Socket Mode
	// connections; required by RunSocketMode only.
	AppToken string
	// SigningSecret verifies Events API requests; required by HTTPHandler
	// only (without it every request is refused).
	SigningSecret string
	// APIURL is the Web API's base URL ("https://slack.com/api/"); empty
	// means Slack itself. Tests point it at a fake.
	APIURL string
	// HTTPClient makes every outbound call (Web API, response_url, and
	// the Socket Mode dial's proxy and TLS settings). Nil means a client
	// on a clone of http.DefaultTransport, so proxy variables and the
	// system's CAs apply.
	HTTPClient *http.Client
	// Logger receives the adapter's logs; nil means slog.Default.
	Logger *slog.Logger
	// Meter counts Web API calls and refused signatures (see
	// bot.Metrics); nil counts nothing.
	Meter metric.Meter
	// Workers is how many events are handled at once (default 8).
	Workers int
	// QueueSize is how many acknowledged events may wait for a worker
	// (default 64 per worker). A full queue holds up Socket Mode reads and
	// makes the Events API answer 503, so Slack retries later.
	QueueSize int
	// HandleTimeout bounds the handling of one event (default 2 minutes).
	HandleTimeout time.Duration
	// Backends are the options of the backend select on status messages.
	Backends []string
	// Access, when set, is checked before the adapter posts anything on a
	// person's behalf (the thread root of "/agent new"); the Router checks
	// it again for everything.
	Access *bot.Access
	// Home, when set, publishes people's App Home when they open it and
	// after they click its buttons (see Home); nil leaves the Home tab
	// alone and ignores its clicks.
	Home *Home
}

// Defaults of InboundConfig.
const (
	DefaultWorkers       = 8
	DefaultHandleTimeout = 2 * time.Minute
)

// Callback and action IDs of the app's interactive parts. The manifests
// and the status message use the same names.
const (
	ActionSwitch       = "agent_switch"
	ActionFork         = "agent_fork"
	ActionStop         = "agent_stop"
	ActionDone         = "agent_done"
	ActionWebUI        = "agent_webui"
	ShortcutForkFromID = "fork_from_here"
	// The buttons of an approval message (see ApprovalBlocks); their
	// value is the approval's ID.
	ActionApprove    = "agent_approve"
	ActionApproveAll = "agent_approve_all"
	ActionDeny       = "agent_deny"
)

// ErrClosed is returned for work handed to an Inbound after Shutdown.
var ErrClosed = bot.ErrPoolClosed

// Inbound receives from Slack and hands bot.Events to a Handler. One
// Inbound may serve Socket Mode and HTTP at once. Safe for concurrent use.
type Inbound struct {
	cfg     InboundConfig
	api     *slack.Client
	poster  ReplyPoster
	handler Handler
	links   *Links
	log     *slog.Logger
	http    *http.Client
	// out is http, counted (metrics); nil metrics count nothing.
	out     *http.Client
	metrics *bot.Metrics

	idMu sync.Mutex
	id   *identity // nil until Start succeeds

	names nameCache

	pool *bot.Pool

	conn connState // of Socket Mode; see Connected
}

// identity is who the bot is, from auth.test.
type identity struct {
	team, user, bot string
	mention         *regexp.Regexp // "<@U1>" or "<@U1|name>", and a following blank
}

// NewInbound returns an Inbound that hands events to h. replier posts the
// answers and thread roots; nil means the Inbound's own Web API client.
// Nothing is contacted until Start, RunSocketMode or the first request.
func NewInbound(cfg InboundConfig, h Handler, replier ReplyPoster) *Inbound {
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
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	ms := meterOf(cfg.Meter)
	// The Web API calls and answers to response URLs are counted; the
	// Socket Mode dial takes its proxy and TLS settings from the plain
	// client (in.http).
	out := meteredClient(cfg.HTTPClient, ms)
	opts := []slack.Option{slack.OptionHTTPClient(out)}
	if cfg.APIURL != "" {
		opts = append(opts, slack.OptionAPIURL(strings.TrimRight(cfg.APIURL, "/")+"/"))
	}
	if cfg.AppToken != "" {
		opts = append(opts, slack.OptionAppLevelToken(cfg.AppToken))
	}
	api := slack.New(cfg.BotToken, opts...)
	if replier == nil {
		replier = api
	}
	return &Inbound{
		cfg:     cfg,
		api:     api,
		poster:  replier,
		handler: h,
		links:   NewLinks(api, cfg.Logger),
		log:     cfg.Logger.With("platform", Platform),
		http:    cfg.HTTPClient,
		out:     out,
		metrics: ms,
		names:   nameCache{m: make(map[string]cachedName)},
		pool:    bot.NewPool(Platform, cfg.Workers, cfg.QueueSize, cfg.HandleTimeout, cfg.Logger.With("platform", Platform)),
	}
}

// Links returns the Inbound's permalink renderer (shared with whatever
// else posts with the same client).
func (in *Inbound) Links() *Links { return in.links }

// Start checks the configuration and asks auth.test who the bot is (its
// team and user IDs). RunSocketMode calls it; call it before serving
// HTTPHandler so that a bad token fails at start rather than at the first
// event. Calling it again after success does nothing.
func (in *Inbound) Start(ctx context.Context) error {
	_, err := in.identity(ctx)
	return err
}

func (in *Inbound) identity(ctx context.Context) (*identity, error) {
	in.idMu.Lock()
	defer in.idMu.Unlock()
	if in.id != nil {
		return in.id, nil
	}
	if in.cfg.BotToken == "" {
		return nil, errors.New("slack: no bot token (SLACK_BOT_TOKEN, xoxb-...)")
	}
	res, err := in.api.AuthTestContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("slack: auth.test with the bot token: %w", err)
	}
	if res.TeamID == "" || res.UserID == "" {
		return nil, fmt.Errorf("slack: auth.test named no team or user (team %q, user %q)", res.TeamID, res.UserID)
	}
	in.id = &identity{team: res.TeamID, user: res.UserID, bot: res.BotID,
		mention: regexp.MustCompile(`<@` + regexp.QuoteMeta(res.UserID) + `(?:\|[^>]*)?>[ \t]?`)}
	in.log.Info("connected to slack", "team", res.TeamID, "bot_user", res.UserID)
	return in.id, nil
}

// submit hands an acknowledged delivery to the worker pool, waiting for
// room in the queue until ctx is done.
func (in *Inbound) submit(ctx context.Context, job func(context.Context)) error {
	return in.pool.Submit(ctx, job)
}

// Shutdown stops taking deliveries (HTTP answers 503, so Slack retries
// elsewhere) and waits for the events already acknowledged to be handled,
// until ctx is done; then it cancels the handlers still running and
// returns ctx's error. Stop RunSocketMode first, by cancelling its ctx.
func (in *Inbound) Shutdown(ctx context.Context) error {
	return in.pool.Shutdown(ctx)
}

// dispatch is the work of one delivery: make the event, hand it over.
func (in *Inbound) dispatch(ctx context.Context, ev bot.Event, r bot.Replier) {
	if err := in.handler.Handle(ctx, ev, r); err != nil {
		in.log.Warn("answering a slack event failed", "event_id", ev.ID, "thread", threadOf(ev), "error", err)
	}
}

func threadOf(ev bot.Event) string {
	if ev.ThreadKey != "" {
		return ev.ThreadKey
	}
	return ev.NewThreadKey
}

// userName returns a person's display name from users.info (cached), or
// "" when it cannot be had: the name is for authorship, never required.
func (in *Inbound) userName(ctx context.Context, user string) string {
	if user == "" {
		return ""
	}
	if n, ok := in.names.get(user); ok {
		return n
	}
	u, err := in.api.GetUserInfoContext(ctx, user)
	if err != nil {
		in.log.Debug("users.info failed; going without a name", "user", user, "error", err)
		return ""
	}
	n := u.Profile.DisplayName
	if n == "" {
		n = u.RealName
	}
	if n == "" {
		n = u.Name
	}
	in.names.put(user, n)
	return n
}

// nameCache holds display names for an hour.
type nameCache struct {
	mu sync.Mutex
	m  map[string]cachedName
}

type cachedName struct {
	name    string
	expires time.Time
}

const (
	nameTTL       = time.Hour
	maxCachedName = 10000
)

func (c *nameCache) get(user string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[user]
	if !ok || time.Now().After(e.expires) {
		return "", false
	}
	return e.name, true
}

func (c *nameCache) put(user, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxCachedName {
		clear(c.m)
	}
	c.m[user] = cachedName{name: name, expires: time.Now().Add(nameTTL)}
}
