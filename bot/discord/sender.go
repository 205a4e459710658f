package discordbot

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/bwmarrin/discordgo"
	"go.opentelemetry.io/otel/metric"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
)

// Limits of Discord and defaults of SenderConfig.
const (
	// MaxMessage is Discord's limit on a message's content, in characters.
	MaxMessage = 2000
	// MaxThreadName is Discord's limit on a thread's name, in characters.
	MaxThreadName = 100
	// DefaultUploadOver is the answer length, in characters, past which an
	// answer is attached as a file under a short preview.
	DefaultUploadOver = 8000
)

// Error types of the temporal ApplicationErrors that the Sender returns.
const (
	// ErrTypeRateLimited is a retryable error carrying Discord's
	// retry_after as NextRetryDelay.
	ErrTypeRateLimited = "DiscordRateLimited"
	// ErrTypePermanent is a non-retryable error: a bad token, a channel the
	// bot cannot see or post to, a malformed thread key.
	ErrTypePermanent = "DiscordPermanent"
)

const (
	maxRemembered    = 10000 // outbound keys and fork requests remembered
	historyLimit     = 50    // recent messages searched on a retry
	maxRateRetries   = 2     // 429s waited out within one call
	maxRateWait      = 5 * time.Second
	maxProgressTools = 20
	maxToolField     = 120
	previewChars     = 1200
	previewLines     = 15
)

// SenderConfig configures a Sender. Only Token is required.
type SenderConfig struct {
	// Token is the bot token (without "Bot "). It is never logged nor put
	// in an error.
	Token string
	// HTTPClient makes the REST calls and downloads. Nil means a client
	// over a clone of http.DefaultTransport, so proxy variables and the
	// system's CAs apply.
	HTTPClient *http.Client
	// Logger receives the Sender's logs (never message bodies above
	// debug); nil means slog.Default.
	Logger *slog.Logger
	// UploadOver is the answer length in characters past which the answer
	// is attached as a file (default DefaultUploadOver).
	UploadOver int
	// Meter counts the REST calls (see bot.Metrics.ChatCall); nil counts
	// nothing.
	Meter metric.Meter
}

// Sender posts sessions' outbound messages to Discord channels and
// threads over the REST API (it never opens the gateway). It implements
// agentflow.ChatSender, agentflow.ThreadCreator and agentflow.FileFetcher,
// and is safe for concurrent use.
//
// Idempotency: every message it posts ends with an invisible marker, a
// U+2063 (invisible separator) followed by 32 zero-width characters
// (U+200B, U+200C, U+200D, U+2060, two bits each) that spell the first 64
// bits of SHA-256 of the outbound key (see Marker). The Sender remembers
// key → message ID in memory; a key it does not remember is searched for
// among the channel's last 50 messages written by a bot before posting
// when the delivery may have been made before: a retried activity
// (attempt > 1), a progress message (its edits may run on another worker),
// or a call outside an activity. A match is edited instead of posted again.
type Sender struct {
	dg         *discordgo.Session
	http       *http.Client
	log        *slog.Logger
	uploadOver int

	mu     sync.Mutex
	posted *bot.Recent[postedMsg] // outbound key (or "thread/"+requestID) → what was posted
	locks  map[string]*keyLock
}

// postedMsg is a message the Sender posted (or found it had posted).
type postedMsg struct {
	channel, id string
	thread      string   // a thread key (CreateThread)
	sum         [16]byte // of the content last sent
	file        bool     // carries an attachment: never edited
}

type keyLock struct {
	sem  chan struct{}
	refs int
}

// NewSender returns a Sender for cfg. It makes no call to Discord.
func NewSender(cfg SenderConfig) (*Sender, error) {
	if strings.TrimSpace(cfg.Token) == "" {
		return nil, errors.New("discord sender: Token is empty")
	}
	if cfg.UploadOver == 0 {
		cfg.UploadOver = DefaultUploadOver
	}
	if cfg.UploadOver < 0 {
		return nil, fmt.Errorf("discord sender: UploadOver must not be negative, not %d", cfg.UploadOver)
	}
	dg, err := newSession(cfg.Token, cfg.HTTPClient)
	if err != nil {
		return nil, fmt.Errorf("discord sender: %w", err)
	}
	dg.Client = meteredClient(dg.Client, meterOf(cfg.Meter))
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Sender{dg: dg, http: dg.Client, log: log.With("platform", Platform), uploadOver: cfg.UploadOver,
		posted: bot.NewRecent[postedMsg](maxRemembered), locks: map[string]*keyLock{}}, nil
}

// newSession makes a discordgo session that does not retry rate limits on
// its own (its retry is unbounded and ignores ctx; see call).
func newSession(token string, hc *http.Client) (*discordgo.Session, error) {
	token = strings.TrimPrefix(strings.TrimSpace(token), "Bot ")
	dg, err := discordgo.New("Bot " + token)
	if err != nil {
		return nil, err
	}
	if hc == nil {
		hc = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone(), Timeout: 2 * time.Minute}
	}
	dg.Client = hc
	dg.ShouldRetryOnRateLimit = false
	dg.MaxRestRetries = 2 // of 502s
	return dg, nil
}

// Deliver posts or edits m in its Discord channel (see Sender for how a
// retry finds what it posted):
//   - a progress message is one message per m.Key, posted once and then
//     edited in place;
//   - an answer is posted in parts that fit Discord's 2,000 characters, cut
//     on line boundaries with code fences closed and reopened, keyed
//     m.Key+"/part-N"; one longer than UploadOver characters is one message
//     with a short preview and the whole answer attached as a file;
//   - a notice is one message;
//   - an approval is one message per m.Key (see renderApproval): the
//     command, why it needs approval and, while it waits, buttons
//     Approve, Approve all for this turn and Deny; the delivery of its
//     decision edits the message, which loses its buttons;
//   - a title renames the thread, when the session is in a thread.
//
// "<thread:KEY>" tokens become channel mentions ("<#id>"). Messages never
// ping anyone (allowed_mentions is empty). Errors are temporal
// ApplicationErrors: ErrTypeRateLimited (retryable, NextRetryDelay =
// Discord's retry_after) or ErrTypePermanent (non-retryable); other errors
// (network, 5xx) are plain and retryable. ctx bounds the calls.
func (s *Sender) Deliver(ctx context.Context, m agentflow.Outbound) error {
	_, channel, err := ParseThreadKey(m.Thread)
	if err != nil {
		return permanent(err.Error(), err)
	}
	if m.Key == "" {
		return permanent("discord: an outbound message needs a key", nil)
	}
	if err := s.lock(ctx, m.Key); err != nil {
		return err
	}
	defer s.unlock(m.Key)
	// A progress message's or an approval's later edits may run on
	// another worker, or after a restart.
	d := &delivery{s: s, channel: channel,
		lookUp: s.isRetry(ctx) || m.Kind == agentflow.OutboundProgress || m.Kind == agentflow.OutboundApproval}
	switch m.Kind {
	case agentflow.OutboundProgress:
		return d.put(ctx, m.Key, renderProgress(m), nil)
	case agentflow.OutboundAnswer:
		return s.deliverAnswer(ctx, d, m)
	case agentflow.OutboundApproval:
		if m.Approval == nil {
			return s.deliverNotice(ctx, d, m)
		}
		content, comps := renderApproval(*m.Approval)
		return d.putComponents(ctx, m.Key, content, nil, &comps)
	case agentflow.OutboundTitle:
		if strings.TrimSpace(m.Title) == "" {
			return nil
		}
		ch, err := s.channel(ctx, channel)
		if err != nil {
			return err
		}
		if !ch.IsThread() {
			return nil // never rename a whole text channel
		}
		return s.RenameThread(ctx, m.Thread, m.Title)
	default: // notices, and kinds added later
		return s.deliverNotice(ctx, d, m)
	}
}

// deliverNotice posts (or edits) m's text as one message.
func (s *Sender) deliverNotice(ctx context.Context, d *delivery, m agentflow.Outbound) error {
	text := strings.TrimSpace(m.Text.Inline)
	if text == "" {
		return nil
	}
	return d.put(ctx, m.Key, bot.Truncate(renderLinks(text), chunkLimit), nil)
}

// chunkLimit leaves room for the marker (and the line break before it).
const chunkLimit = MaxMessage - markerRunes - 1

func (s *Sender) deliverAnswer(ctx context.Context, d *delivery, m agentflow.Outbound) error {
	text := renderLinks(strings.TrimRight(m.Text.Inline, " \t\r\n"))
	if strings.TrimSpace(text) == "" {
		return nil
	}
	if n := utf8.RuneCountInString(text); n > s.uploadOver {
		preview := fmt.Sprintf("The answer is long (%d lines, %d characters), so it is attached as a file. It begins:\n%s",
			strings.Count(text, "\n")+1, n, head(text))
		return d.put(ctx, m.Key, bot.Truncate(preview, chunkLimit), &discordgo.File{
			Name: fmt.Sprintf("answer-turn-%d.md", m.Turn), ContentType: "text/markdown; charset=utf-8",
			Reader: strings.NewReader(text),
		})
	}
	for i, part := range bot.Chunk(text, chunkLimit) {
		if err := d.put(ctx, fmt.Sprintf("%s/part-%d", m.Key, i+1), part, nil); err != nil {
			return err
		}
	}
	return nil
}

// head returns the beginning of text for a preview, a code block cut there
// closed.
func head(text string) string {
	n := previewChars
	lines := 0
	for i := 0; i < len(text); i++ {
		if text[i] == '\n' {
			if lines++; lines == previewLines {
				n = min(n, utf8.RuneCountInString(text[:i])+1)
				break
			}
		}
	}
	return bot.Truncate(text, n)
}

// delivery is one Deliver call: where it goes, whether it may repeat an
// earlier one, and the channel's marked messages once read.
type delivery struct {
	s       *Sender
	channel string
	lookUp  bool

	loaded bool
	found  map[string]string // marker → message ID
}

// load reads the channel's recent messages (once per delivery) and
// indexes the markers of those written by a bot.
func (d *delivery) load(ctx context.Context) error {
	if d.loaded {
		return nil
	}
	var msgs []*discordgo.Message
	err := d.s.call(ctx, "get messages", func(o ...discordgo.RequestOption) (err error) {
		msgs, err = d.s.dg.ChannelMessages(d.channel, historyLimit, "", "", "", o...)
		return err
	})
	if err != nil {
		return err
	}
	d.found = map[string]string{}
	for _, msg := range msgs {
		if msg.Author == nil || !msg.Author.Bot {
			continue
		}
		if mk := findMarker(msg.Content); mk != "" {
			if _, dup := d.found[mk]; !dup { // newest first: keep the newest
				d.found[mk] = msg.ID
			}
		}
	}
	d.loaded = true
	return nil
}

// put posts content under key, or edits the message already posted under
// it. A message with a file is posted once and never edited.
func (d *delivery) put(ctx context.Context, key, content string, file *discordgo.File) error {
	return d.putComponents(ctx, key, content, file, nil)
}

// putComponents is put for a message with components: when comps is not
// nil they are posted with the message, and an edit replaces the ones
// posted before (an empty slice removes them); nil leaves them alone.
func (d *delivery) putComponents(ctx context.Context, key, content string, file *discordgo.File, comps *[]discordgo.MessageComponent) error {
	s := d.s
	content = withMarker(content, key)
	sum := digest(content)
	if comps != nil {
		b, err := json.Marshal(*comps)
		if err != nil {
			return permanent("discord: rendering components: "+err.Error(), err)
		}
		sum = digest(content + "\x00" + string(b))
	}
	prev, known := s.recall(key)
	if !known && d.lookUp {
		if err := d.load(ctx); err != nil {
			return err
		}
		if id, ok := d.found[Marker(key)]; ok {
			prev, known = postedMsg{channel: d.channel, id: id, file: file != nil}, true
			s.log.Debug("found an earlier post of a retried message", "key", key, "channel", d.channel, "message", id)
		}
	}
	if known {
		if prev.sum == sum || file != nil {
			s.remember(key, prev)
			return nil
		}
		err := s.call(ctx, "edit message", func(o ...discordgo.RequestOption) error {
			_, err := s.dg.ChannelMessageEditComplex(&discordgo.MessageEdit{
				ID: prev.id, Channel: prev.channel, Content: &content, Components: comps, AllowedMentions: noMentions(),
			}, o...)
			return err
		})
		if err == nil {
			prev.sum = sum
			s.remember(key, prev)
			return nil
		}
		if !isCode(err, codeUnknownMessage) {
			return err
		}
		s.log.Info("a posted message is gone; posting it again", "key", key, "channel", d.channel)
		s.forget(key)
	}
	var msg *discordgo.Message
	err := s.call(ctx, "post message", func(o ...discordgo.RequestOption) (err error) {
		send := &discordgo.MessageSend{Content: content, AllowedMentions: noMentions()}
		if comps != nil {
			send.Components = *comps
		}
		if file != nil {
			// A fresh reader per attempt: a rate-limited attempt read it.
			body := file.Reader.(*strings.Reader)
			if _, err := body.Seek(0, 0); err != nil {
				return err
			}
			send.Files = []*discordgo.File{file}
		}
		msg, err = s.dg.ChannelMessageSendComplex(d.channel, send, o...)
		return err
	})
	if err != nil {
		return err
	}
	s.remember(key, postedMsg{channel: d.channel, id: msg.ID, sum: sum, file: file != nil})
	return nil
}

func noMentions() *discordgo.MessageAllowedMentions {
	return &discordgo.MessageAllowedMentions{Parse: []discordgo.AllowedMentionType{}}
}

// CreateThread opens a public thread for a fork in the parent channel of
// sourceThread (the channel itself when the source is a whole channel; its
// parent when the source is a thread), named after title (at most 100
// characters), and returns its thread key.
//
// The thread is started on a message "🍴 Fork: **title**" that the Sender
// posts in the parent channel, carrying the marker of "thread/"+requestID;
// a thread started on a message has the message's ID. So the call is
// idempotent: requestID → thread is remembered in memory, and a retried
// call (or one outside an activity) that does not remember it finds the
// marked message among the parent's last 50 messages and (re)starts the
// thread on it. In a forum the thread is a new post, found again only in
// memory: a worker restart between a forum post and its recording can
// make a duplicate post, a rare case accepted. Errors are as for Deliver.
func (s *Sender) CreateThread(ctx context.Context, sourceThread, title, requestID string) (string, error) {
	guild, channel, err := ParseThreadKey(sourceThread)
	if err != nil {
		return "", permanent(err.Error(), err)
	}
	if guild == dmGuild {
		return "", permanent("discord: a direct-message channel cannot hold threads", nil)
	}
	if requestID == "" {
		return "", permanent("discord: opening a thread needs a request ID", nil)
	}
	key := "thread/" + requestID
	if err := s.lock(ctx, key); err != nil {
		return "", err
	}
	defer s.unlock(key)
	if p, ok := s.recall(key); ok {
		return p.thread, nil
	}
	src, err := s.channel(ctx, channel)
	if err != nil {
		return "", err
	}
	parent := src
	if src.IsThread() && src.ParentID != "" {
		if parent, err = s.channel(ctx, src.ParentID); err != nil {
			return "", err
		}
	}
	name := threadName(title)
	starter := withMarker("🍴 Fork: **"+strings.ReplaceAll(name, "*", "")+"**", key)
	var threadID string
	if parent.Type == discordgo.ChannelTypeGuildForum || parent.Type == discordgo.ChannelTypeGuildMedia {
		err = s.call(ctx, "start forum post", func(o ...discordgo.RequestOption) error {
			th, err := s.dg.ForumThreadStartComplex(parent.ID, &discordgo.ThreadStart{Name: name, AutoArchiveDuration: 1440},
				&discordgo.MessageSend{Content: starter, AllowedMentions: noMentions()}, o...)
			if err == nil {
				threadID = th.ID
			}
			return err
		})
	} else {
		threadID, err = s.threadOnMessage(ctx, parent.ID, name, key, starter)
	}
	if err != nil {
		return "", err
	}
	thread := ThreadKey(guild, threadID)
	s.remember(key, postedMsg{channel: threadID, thread: thread})
	s.log.Info("opened a fork thread", "thread", thread, "source", sourceThread)
	return thread, nil
}

// threadOnMessage posts starter in parent under key (or finds it posted
// by an earlier attempt) and starts a thread on it; the thread has the
// message's ID.
func (s *Sender) threadOnMessage(ctx context.Context, parent, name, key, starter string) (string, error) {
	d := &delivery{s: s, channel: parent, lookUp: s.isRetry(ctx)}
	msgID := ""
	if d.lookUp {
		if err := d.load(ctx); err != nil {
			return "", err
		}
		msgID = d.found[Marker(key)]
	}
	if msgID == "" {
		err := s.call(ctx, "post message", func(o ...discordgo.RequestOption) error {
			m, err := s.dg.ChannelMessageSendComplex(parent, &discordgo.MessageSend{Content: starter, AllowedMentions: noMentions()}, o...)
			if err == nil {
				msgID = m.ID
			}
			return err
		})
		if err != nil {
			return "", err
		}
	}
	err := s.call(ctx, "start thread", func(o ...discordgo.RequestOption) error {
		_, err := s.dg.MessageThreadStartComplex(parent, msgID, &discordgo.ThreadStart{Name: name, AutoArchiveDuration: 1440}, o...)
		return err
	})
	if err != nil && !isCode(err, codeThreadExists) {
		return "", err
	}
	return msgID, nil
}

// threadName makes a title a valid thread name: one line, at most
// MaxThreadName characters, never empty.
func threadName(title string) string {
	t := strings.Join(strings.Fields(title), " ")
	if t == "" {
		t = "fork"
	}
	return bot.Truncate(t, MaxThreadName)
}

// RenameThread renames the thread of threadKey to name (one line, cut to
// 100 characters). Renaming a channel that is not a thread renames the
// channel, so callers check first. Errors are as for Deliver.
func (s *Sender) RenameThread(ctx context.Context, threadKey, name string) error {
	_, channel, err := ParseThreadKey(threadKey)
	if err != nil {
		return permanent(err.Error(), err)
	}
	n := threadName(name)
	return s.call(ctx, "rename thread", func(o ...discordgo.RequestOption) error {
		_, err := s.dg.ChannelEdit(channel, &discordgo.ChannelEdit{Name: n}, o...)
		return err
	})
}

// channel returns a channel's description (GET /channels/{id}).
func (s *Sender) channel(ctx context.Context, id string) (*discordgo.Channel, error) {
	var ch *discordgo.Channel
	err := s.call(ctx, "get channel", func(o ...discordgo.RequestOption) (err error) {
		ch, err = s.dg.Channel(id, o...)
		return err
	})
	return ch, err
}

// call runs one REST call with ctx, waiting out at most maxRateRetries
// rate limits of at most maxRateWait each (discordgo's own retry would
// wait without bound and without ctx), and translates its error (see fail).
func (s *Sender) call(ctx context.Context, op string, f func(...discordgo.RequestOption) error) error {
	return callREST(ctx, op, f)
}

func callREST(ctx context.Context, op string, f func(...discordgo.RequestOption) error) error {
	for attempt := 0; ; attempt++ {
		err := f(discordgo.WithContext(ctx), discordgo.WithRetryOnRatelimit(false))
		var rl *discordgo.RateLimitError
		if errors.As(err, &rl) && attempt < maxRateRetries && rl.RetryAfter <= maxRateWait {
			t := time.NewTimer(max(rl.RetryAfter, 10*time.Millisecond))
			select {
			case <-t.C:
				continue
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
		if err != nil {
			return fail(op, err)
		}
		return nil
	}
}

// Discord JSON error codes the adapter acts on.
const (
	codeUnknownChannel     = 10003
	codeUnknownMessage     = 10008
	codeMissingAccess      = 50001
	codeMissingPermissions = 50013
	codeThreadExists       = 160004
)

// permanentCodes are the Discord errors no retry can fix, with what they
// mean for whoever reads the activity's failure.
var permanentCodes = map[int]string{
	codeUnknownChannel:     "the channel does not exist or the bot cannot see it",
	codeMissingAccess:      "the bot has no access to the channel",
	codeMissingPermissions: "the bot lacks a permission here (send messages, create threads, attach files)",
	50035:                  "Discord refused the request's form",
	40005:                  "the attachment is too large",
	50006:                  "the message is empty",
}

// fail translates a discordgo error of operation op: rate limits are
// retryable after Discord's delay; known permanent codes and other 4xx
// statuses are non-retryable; anything else (network, 5xx) is returned
// wrapped, retryable. The token is never part of the result: discordgo's
// errors quote the response, not the request's headers.
func fail(op string, err error) error {
	var rl *discordgo.RateLimitError
	if errors.As(err, &rl) {
		return temporal.NewApplicationErrorWithOptions(
			fmt.Sprintf("discord %s: rate limited; retry after %s", op, rl.RetryAfter), ErrTypeRateLimited,
			temporal.ApplicationErrorOptions{NextRetryDelay: max(rl.RetryAfter, time.Second), Cause: err})
	}
	var re *discordgo.RESTError
	if errors.As(err, &re) && re.Response != nil {
		if re.Message != nil {
			if why, ok := permanentCodes[re.Message.Code]; ok {
				return permanent(fmt.Sprintf("discord %s: %d: %s", op, re.Message.Code, why), err)
			}
		}
		if c := re.Response.StatusCode; c >= 400 && c < 500 && c != http.StatusTooManyRequests && c != http.StatusRequestTimeout {
			return permanent(fmt.Sprintf("discord %s: HTTP %d", op, c), err)
		}
	}
	return fmt.Errorf("discord %s: %w", op, err)
}

func permanent(msg string, cause error) error {
	return temporal.NewNonRetryableApplicationError(msg, ErrTypePermanent, cause)
}

// isCode reports whether err is (or wraps) a Discord error with one of the
// JSON error codes.
func isCode(err error, codes ...int) bool {
	var re *discordgo.RESTError
	if !errors.As(err, &re) || re.Message == nil {
		return false
	}
	for _, c := range codes {
		if re.Message.Code == c {
			return true
		}
	}
	return false
}

// isRetry says whether this call may repeat an earlier one: a retried
// activity, or a call from outside any activity (nothing says it is not).
func (s *Sender) isRetry(ctx context.Context) bool {
	if activity.IsActivity(ctx) {
		return activity.GetInfo(ctx).Attempt > 1
	}
	return true
}

// lock waits (within ctx) until no other delivery of key runs.
func (s *Sender) lock(ctx context.Context, key string) error {
	s.mu.Lock()
	lk := s.locks[key]
	if lk == nil {
		lk = &keyLock{sem: make(chan struct{}, 1)}
		s.locks[key] = lk
	}
	lk.refs++
	s.mu.Unlock()
	select {
	case lk.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		s.release(key, lk)
		return ctx.Err()
	}
}

func (s *Sender) unlock(key string) {
	s.mu.Lock()
	lk := s.locks[key]
	s.mu.Unlock()
	<-lk.sem
	s.release(key, lk)
}

func (s *Sender) release(key string, lk *keyLock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if lk.refs--; lk.refs == 0 {
		delete(s.locks, key)
	}
}

func (s *Sender) recall(key string) (postedMsg, bool) { return s.posted.Get(key) }

func (s *Sender) remember(key string, p postedMsg) { s.posted.Put(key, p) }

func (s *Sender) forget(key string) { s.posted.Delete(key) }

func digest(text string) [16]byte {
	full := sha256.Sum256([]byte(text))
	var d [16]byte
	copy(d[:], full[:])
	return d
}

// Marker encoding: markerSep, then 32 of markerAlphabet, two bits each.
const (
	markerSep   = '\u2063'
	markerRunes = 33
)

var markerAlphabet = [4]rune{'\u200B', '\u200C', '\u200D', '\u2060'}

// Marker returns the invisible marker the Sender appends to a message
// posted under key: U+2063 and 32 zero-width characters spelling the first
// 64 bits of SHA-256 of key. People see nothing; a retry finds the message
// by it.
func Marker(key string) string {
	sum := sha256.Sum256([]byte(key))
	var b strings.Builder
	b.WriteRune(markerSep)
	for _, c := range sum[:8] {
		for shift := 6; shift >= 0; shift -= 2 {
			b.WriteRune(markerAlphabet[(c>>shift)&3])
		}
	}
	return b.String()
}

// withMarker appends key's marker to content: on a line of its own when
// the last line is a code fence (which must stand alone to close).
func withMarker(content, key string) string {
	last := content[strings.LastIndexByte(content, '\n')+1:]
	if t := strings.TrimSpace(last); strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
		return content + "\n" + Marker(key)
	}
	return content + Marker(key)
}

// findMarker returns the marker at the end of content, or "".
func findMarker(content string) string {
	i := strings.LastIndex(content, string(markerSep))
	if i < 0 {
		return ""
	}
	mk := content[i:]
	if utf8.RuneCountInString(mk) != markerRunes {
		return ""
	}
	for _, r := range mk[len(string(markerSep)):] {
		if r != markerAlphabet[0] && r != markerAlphabet[1] && r != markerAlphabet[2] && r != markerAlphabet[3] {
			return ""
		}
	}
	return mk
}

var threadToken = regexp.MustCompile(`<thread:([^<>\s]+)>`)

// renderLinks turns "<thread:KEY>" tokens into channel mentions ("<#id>"),
// and keys of other platforms into code.
func renderLinks(text string) string {
	return threadToken.ReplaceAllStringFunc(text, func(tok string) string {
		key := threadToken.FindStringSubmatch(tok)[1]
		if _, id, err := ParseThreadKey(key); err == nil {
			return "<#" + id + ">"
		}
		return "`" + strings.ReplaceAll(key, "`", "'") + "`"
	})
}

// renderProgress renders a turn's progress: a status line, then one line
// per tool call (the last maxProgressTools), within a message.
func renderProgress(m agentflow.Outbound) string {
	var b strings.Builder
	b.WriteString(bot.ProgressStatus(m, oneLine))
	tools := m.Tools
	if n := len(tools) - maxProgressTools; n > 0 {
		fmt.Fprintf(&b, "\n*… %d earlier tool call%s*", n, plural(n))
		tools = tools[n:]
	}
	for _, t := range tools {
		summary := t.Summary
		if summary == "" {
			summary = t.Name
		}
		b.WriteString("\n" + bot.ToolMarker(t.State) + " `" + strings.ReplaceAll(oneLine(summary), "`", "'") + "`")
		if t.Detail != "" {
			b.WriteString(" — " + oneLine(t.Detail))
		}
	}
	return bot.Truncate(b.String(), chunkLimit)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func oneLine(s string) string {
	return bot.Truncate(strings.Join(strings.Fields(s), " "), maxToolField)
}
