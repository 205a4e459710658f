package slackbot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/slack-go/slack"
	"go.opentelemetry.io/otel/metric"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
)

// Defaults of SenderConfig.
const (
	// DefaultMaxChunk is the longest message part, in characters: well
	// under Slack's 4,000-character display limit, with room for the
	// escaping and links Render adds.
	DefaultMaxChunk = 3500
	// DefaultUploadOver is the answer length, in characters, past which an
	// answer goes as a file.
	DefaultUploadOver = 12000
	// DefaultUploadLines is the line count past which an answer goes as a
	// file.
	DefaultUploadLines = 120
)

// Message metadata event types the Sender attaches to what it posts, so a
// retry (possibly in another worker process) finds what was posted.
const (
	// MessageEventType marks a message posted by Deliver; its payload's
	// "key" is the outbound key (with "/part-N" for answer parts).
	MessageEventType = "agentbot_message"
	// ThreadEventType marks the root message of a thread opened by
	// CreateThread; its payload's "request_id" is the fork request.
	ThreadEventType = "agentbot_thread"
)

// Error types of the temporal ApplicationErrors that Deliver and
// CreateThread return.
const (
	// ErrTypeRateLimited is a retryable error carrying Slack's Retry-After
	// as NextRetryDelay.
	ErrTypeRateLimited = "SlackRateLimited"
	// ErrTypePermanent is a non-retryable error: a bad token, a channel
	// the bot cannot post to, a malformed thread key.
	ErrTypePermanent = "SlackPermanent"
)

// Limits of the in-process memory and of the searches made on a retry.
const (
	maxRemembered    = 10000 // outbound keys and fork requests remembered
	maxReplyPages    = 20    // conversations.replies pages read on a lookup
	replyPageSize    = 200
	historyLimit     = 100  // conversations.history messages searched by CreateThread
	maxProgressTools = 20   // tool lines shown in a progress message
	maxToolField     = 120  // characters of a tool's summary or detail
	previewChars     = 1200 // of the preview of an uploaded answer
	previewLines     = 15
	maxMaxChunk      = 8000
)

// SenderConfig configures a Sender. Only BotToken is required.
type SenderConfig struct {
	// BotToken is the bot's OAuth token (xoxb-...). It is never logged nor
	// put in an error.
	BotToken string
	// APIURL is the base URL of the Slack Web API ("https://slack.com/api/",
	// the default); tests point it at a fake.
	APIURL string
	// HTTPClient makes the calls. Nil means a client over a clone of
	// http.DefaultTransport, so proxy variables and the system's CAs apply.
	HTTPClient *http.Client
	// Logger receives the Sender's logs (never message bodies above debug);
	// nil means slog.Default.
	Logger *slog.Logger
	// MaxChunk is the longest message part in characters as people read
	// them (default DefaultMaxChunk; at most 8,000, so that escaping and
	// links, which at worst make a text five times longer, stay within
	// Slack's 40,000).
	MaxChunk int
	// UploadOver is the answer length in characters past which the answer
	// is uploaded as a file with a short preview message (default
	// DefaultUploadOver).
	UploadOver int
	// UploadLines is the line count past which an answer is uploaded as a
	// file (default DefaultUploadLines).
	UploadLines int
	// Meter counts the Web API calls (see bot.Metrics.ChatCall); nil
	// counts nothing.
	Meter metric.Meter
	// SnippetOver is the length in characters of a fenced code block past
	// which it is taken out of the answer and uploaded as a file snippet
	// (default DefaultSnippetOver; negative never).
	SnippetOver int
	// MarkdownRetry is how long answers go as mrkdwn text after Slack
	// refused a markdown block, before one is tried again (default
	// DefaultMarkdownRetry).
	MarkdownRetry time.Duration
	// StatusEvery is how often a running turn's thread status is set again
	// (assistant.threads.setStatus; Slack clears it after two minutes);
	// default DefaultStatusEvery.
	StatusEvery time.Duration
	// StatusFor bounds how long a thread's status is kept up without news
	// of the turn; default DefaultStatusFor.
	StatusFor time.Duration
	// Home, when set, keeps the App Home of a session's owner up to date
	// after each delivery that changes the session's state (see Home);
	// nil publishes no home. Give it the Home of the Inbound of the same
	// process.
	Home *Home
}

// Sender posts sessions' outbound messages to Slack threads. It
// implements agentflow.ChatSender and agentflow.ThreadCreator, and is safe
// for concurrent use.
//
// Idempotency: every message it posts carries Slack message metadata
// ({event_type: MessageEventType, event_payload: {key}}), and the Sender
// remembers key → message in memory. A delivery of a key it remembers
// edits that message. A key it does not remember is looked up in the
// thread (conversations.replies with metadata) before posting when the
// delivery may have been made before: a retried activity (attempt > 1), a
// progress message (its later edits may run on another worker or after a
// restart), or any call outside an activity.
type Sender struct {
	api         *slack.Client
	token       string
	log         *slog.Logger
	links       *Links
	maxChunk    int
	uploadOver  int
	uploadLines int
	snippetOver int
	mdRetry     time.Duration
	now         func() time.Time
	status      *statusKeeper
	streams     *streamState
	home        *homeKeeper // nil without SenderConfig.Home

	mu          sync.Mutex
	mdRefusedAt time.Time              // when Slack last refused a markdown block
	posted      *bot.Recent[postedMsg] // outbound key (or "thread/"+requestID) → what was posted
	locks       map[string]*keyLock

	agentsOnce sync.Once
	agents     *agentSessions // see agentsession.go
}

// postedMsg is a message the Sender posted (or found it had posted).
type postedMsg struct {
	channel, ts string
	fileID      string   // an uploaded file instead of a message
	thread      string   // a thread key (CreateThread)
	sum         [16]byte // of the text last sent, to skip edits that change nothing
	streamed    bool     // a streamed answer (stream.go): an edit without blocks clears its own
}

// keyLock serialises deliveries of one key; seq lets a progress edit that
// waited see that a newer state arrived meanwhile.
type keyLock struct {
	sem    chan struct{}
	refs   int
	latest uint64
}

// NewSender returns a Sender for cfg. It makes no call to Slack.
func NewSender(cfg SenderConfig) (*Sender, error) {
	if strings.TrimSpace(cfg.BotToken) == "" {
		return nil, errors.New("slack sender: BotToken is empty")
	}
	if cfg.MaxChunk == 0 {
		cfg.MaxChunk = DefaultMaxChunk
	}
	if cfg.UploadOver == 0 {
		cfg.UploadOver = DefaultUploadOver
	}
	if cfg.UploadLines == 0 {
		cfg.UploadLines = DefaultUploadLines
	}
	if cfg.SnippetOver == 0 {
		cfg.SnippetOver = DefaultSnippetOver
	}
	if cfg.MarkdownRetry == 0 {
		cfg.MarkdownRetry = DefaultMarkdownRetry
	}
	if cfg.StatusEvery == 0 {
		cfg.StatusEvery = DefaultStatusEvery
	}
	if cfg.StatusFor == 0 {
		cfg.StatusFor = DefaultStatusFor
	}
	switch {
	case cfg.MaxChunk < 200 || cfg.MaxChunk > maxMaxChunk:
		return nil, fmt.Errorf("slack sender: MaxChunk must be between 200 and %d characters, not %d", maxMaxChunk, cfg.MaxChunk)
	case cfg.UploadOver < 0:
		return nil, fmt.Errorf("slack sender: UploadOver must not be negative, not %d", cfg.UploadOver)
	case cfg.UploadLines < 0:
		return nil, fmt.Errorf("slack sender: UploadLines must not be negative, not %d", cfg.UploadLines)
	case cfg.MarkdownRetry < 0:
		return nil, fmt.Errorf("slack sender: MarkdownRetry must not be negative, not %s", cfg.MarkdownRetry)
	case cfg.StatusEvery < 0 || cfg.StatusEvery >= 2*time.Minute:
		return nil, fmt.Errorf("slack sender: StatusEvery must be under Slack's 2 minutes, not %s", cfg.StatusEvery)
	case cfg.StatusFor < 0:
		return nil, fmt.Errorf("slack sender: StatusFor must not be negative, not %s", cfg.StatusFor)
	}
	opts := []slack.Option{}
	if cfg.APIURL != "" {
		u, err := url.Parse(cfg.APIURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("slack sender: APIURL %q is not an http(s) URL", cfg.APIURL)
		}
		api := cfg.APIURL
		if !strings.HasSuffix(api, "/") {
			api += "/" // slack-go appends method names to it
		}
		opts = append(opts, slack.OptionAPIURL(api))
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone(), Timeout: 2 * time.Minute}
	}
	opts = append(opts, slack.OptionHTTPClient(meteredClient(hc, meterOf(cfg.Meter))))
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	api := slack.New(cfg.BotToken, opts...)
	s := &Sender{
		api: api, token: cfg.BotToken, log: log, links: NewLinks(api, log),
		maxChunk: cfg.MaxChunk, uploadOver: cfg.UploadOver, uploadLines: cfg.UploadLines,
		snippetOver: cfg.SnippetOver, mdRetry: cfg.MarkdownRetry, now: time.Now,
		status: newStatusKeeper(api, log, cfg.StatusEvery, cfg.StatusFor), streams: newStreamState(),
		posted: bot.NewRecent[postedMsg](maxRemembered), locks: map[string]*keyLock{},
	}
	if cfg.Home != nil {
		s.home = newHomeKeeper(cfg.Home, api, s.links, log)
	}
	return s, nil
}

// Deliver posts or edits m in its Slack thread (see Sender for how a
// retry finds what it posted):
//   - a progress message is one message per m.Key, posted once and then
//     edited in place (chat.update); when deliveries of the same key
//     overlap, the newest state wins and the ones it overtook return nil;
//   - an answer is posted as standard Markdown in markdown blocks, one a
//     message of at most 11,500 characters (code fences closed and
//     reopened at the cuts), keyed m.Key+"/part-N"; where Slack refuses
//     markdown blocks (remembered for MarkdownRetry) it is converted to
//     mrkdwn and posted as text in parts of at most MaxChunk characters; a
//     code block longer than SnippetOver is uploaded as a file snippet
//     after the message, which names it; a long answer is uploaded as a
//     file with a short preview message; a message streamed by
//     StreamAnswer is edited into part 1 (once this process streams
//     answers, the thread is searched for one streamed elsewhere);
//   - while a turn runs, its progress sets the thread's status ("is
//     working…", see statusKeeper), cleared by the final progress or the
//     answer;
//   - a notice is one thread reply;
//   - an approval is one message per m.Key in Block Kit (ApprovalBlocks):
//     the command, why it needs approval and, while it waits, buttons
//     Approve, Approve all for this turn and Deny; the delivery of its
//     decision edits the message, which loses its buttons.
//
// "<thread:KEY>" tokens become links. Errors are temporal
// ApplicationErrors: ErrTypeRateLimited (retryable, NextRetryDelay =
// Slack's Retry-After) or ErrTypePermanent (non-retryable); other errors
// (network, Slack 5xx) are plain and retryable. ctx bounds the calls.
func (s *Sender) Deliver(ctx context.Context, m agentflow.Outbound) (err error) {
	_, channel, threadTS, err := ParseThreadKey(m.Thread)
	if err != nil {
		return permanent(err.Error(), err)
	}
	if m.Key == "" {
		return permanent("slack: an outbound message needs a key", nil)
	}
	lk, seq, err := s.lock(ctx, m.Key)
	if err != nil {
		return err
	}
	defer s.unlock(m.Key, lk)
	d := &delivery{s: s, channel: channel, threadTS: threadTS, kind: m.Kind, retry: s.isRetry(ctx)}
	// What shows the session's state outside the thread (its Slack agent
	// session, the owner's App Home) follows each message delivered.
	defer func() {
		if err == nil {
			s.after(ctx, m)
		}
	}()
	switch m.Kind {
	case agentflow.OutboundLifecycle:
		return nil // no message: only what after shows
	case agentflow.OutboundProgress:
		if s.superseded(lk, seq) {
			s.log.Debug("progress edit overtaken by a newer one", "thread", m.Thread, "key", m.Key)
			return nil
		}
		if err := d.put(ctx, m.Key, renderProgress(m, s.maxChunk), true); err != nil {
			return err
		}
		s.status.progress(ctx, m, channel, threadTS)
		return nil
	case agentflow.OutboundAnswer:
		defer s.status.answered(ctx, m.Thread, channel, threadTS)
		s.settleStream(ctx, d, m.Key, m.Streamed) // its first part may have been streamed
		return s.deliverAnswer(ctx, d, m)
	case agentflow.OutboundApproval:
		if m.Approval != nil {
			return s.deliverApproval(ctx, d, m)
		}
		return s.deliverNotice(ctx, d, m)
	default:
		return s.deliverNotice(ctx, d, m)
	}
}

// deliverNotice posts (or edits) m's text as one thread reply.
func (s *Sender) deliverNotice(ctx context.Context, d *delivery, m agentflow.Outbound) error {
	text := strings.TrimSpace(m.Text.Inline)
	if text == "" {
		return nil
	}
	return d.put(ctx, m.Key, s.links.Render(ctx, bot.Truncate(text, s.maxChunk)), true)
}

func (s *Sender) deliverAnswer(ctx context.Context, d *delivery, m agentflow.Outbound) error {
	text := strings.TrimRight(m.Text.Inline, " \t\r\n")
	if strings.TrimSpace(text) == "" {
		s.log.Debug("empty answer; nothing posted", "thread", m.Thread, "key", m.Key)
		return nil
	}
	text, snips := takeSnippets(m, text, s.snippetOver)
	var err error
	if utf8.RuneCountInString(text) > s.uploadOver || strings.Count(text, "\n")+1 > s.uploadLines {
		err = s.uploadAnswer(ctx, d, m, text)
	} else {
		err = s.postAnswer(ctx, d, m, text)
	}
	if err != nil {
		return err
	}
	return s.uploadSnippets(ctx, d, m, snips)
}

// uploadAnswer posts a preview of a long answer (part 1) and uploads the
// whole answer as a file in the thread (part 2).
func (s *Sender) uploadAnswer(ctx context.Context, d *delivery, m agentflow.Outbound, text string) error {
	lines := strings.Count(text, "\n") + 1
	preview := fmt.Sprintf("The answer is long (%d lines, %d characters), so it is attached as a file. It begins:\n%s",
		lines, utf8.RuneCountInString(text), head(text))
	if err := d.put(ctx, partKey(m.Key, 1), s.links.Render(ctx, preview), false); err != nil {
		return err
	}
	title := "Answer"
	if m.Turn > 0 {
		title = fmt.Sprintf("Answer to turn %d", m.Turn)
	}
	return s.uploadFile(ctx, d, partKey(m.Key, 2), fileName(m), title, text)
}

// head returns the beginning of text for a preview: at most previewLines
// lines and previewChars characters, a code block cut there closed.
func head(text string) string {
	n := previewChars
	if i := nthIndex(text, '\n', previewLines); i >= 0 {
		n = min(n, utf8.RuneCountInString(text[:i])+1) // room for "…"
	}
	return bot.Truncate(text, n)
}

// nthIndex returns the index of the nth c in s, or -1.
func nthIndex(s string, c byte, n int) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			if n--; n == 0 {
				return i
			}
		}
	}
	return -1
}

// fileName names the file of an answer after its turn and a hash of its
// key, so a retry can recognise the file in the thread.
func fileName(m agentflow.Outbound) string {
	sum := sha256.Sum256([]byte(m.Key))
	return fmt.Sprintf("answer-turn-%d-%s.md", m.Turn, hex.EncodeToString(sum[:4]))
}

func partKey(key string, n int) string { return fmt.Sprintf("%s/part-%d", key, n) }

// delivery is one Deliver call: where it goes, whether it may repeat an
// earlier one, and the thread's messages once read.
type delivery struct {
	s                 *Sender
	channel, threadTS string
	kind              agentflow.OutboundKind
	retry             bool
	lookUp            bool // an answer another process may have streamed (settleStream)

	loaded   bool
	keys     map[string]string // metadata key → ts of messages in the thread
	streamed map[string]bool   // metadata keys of streamed messages
	files    map[string]string // file name → file ID of files in the thread
}

// mustLookUp says whether a key unknown in memory may have been posted
// already: by an earlier attempt, (progress, approvals) by an earlier
// delivery on another worker or before a restart, or (answers) by a
// stream on another worker.
func (d *delivery) mustLookUp() bool {
	return d.retry || d.lookUp || d.kind == agentflow.OutboundProgress || d.kind == agentflow.OutboundApproval
}

// load reads the thread's messages (once per delivery) and indexes those
// carrying Sender metadata and files.
func (d *delivery) load(ctx context.Context) error {
	if d.loaded {
		return nil
	}
	d.keys, d.files, d.streamed = map[string]string{}, map[string]string{}, map[string]bool{}
	cursor := ""
	for range maxReplyPages {
		msgs, more, next, err := d.s.api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{
			ChannelID: d.channel, Timestamp: d.threadTS, Cursor: cursor, Limit: replyPageSize,
			Inclusive: true, IncludeAllMetadata: true,
		})
		if isSlackError(err, "thread_not_found") {
			break // nothing posted there yet
		}
		if err != nil {
			return d.s.fail("conversations.replies", err)
		}
		for _, msg := range msgs {
			if msg.Metadata.EventType == MessageEventType {
				if k, ok := msg.Metadata.EventPayload["key"].(string); ok {
					d.keys[k] = msg.Timestamp
					d.streamed[k], _ = msg.Metadata.EventPayload["streamed"].(bool)
				}
			}
			for _, f := range msg.Files {
				d.files[f.Name] = f.ID
			}
		}
		if !more || next == "" {
			break
		}
		cursor = next
	}
	d.loaded = true
	return nil
}

// put posts text under key, or edits the message already posted under it.
func (d *delivery) put(ctx context.Context, key, text string, quiet bool) error {
	return d.putBlocks(ctx, key, text, nil, quiet)
}

// putBlocks is put for a message with blocks (text is then the fallback
// for notifications). An edit sends the blocks too, so it replaces those
// posted before.
func (d *delivery) putBlocks(ctx context.Context, key, text string, blocks []slack.Block, quiet bool) error {
	s := d.s
	sum := digest(text)
	if len(blocks) > 0 {
		b, err := json.Marshal(blocks)
		if err != nil {
			return permanent("slack: rendering blocks: "+err.Error(), err)
		}
		sum = digest(text + "\x00" + string(b))
	}
	prev, known := s.recall(key)
	if !known && d.mustLookUp() {
		if err := d.load(ctx); err != nil {
			return err
		}
		if ts, ok := d.keys[key]; ok {
			prev, known = postedMsg{channel: d.channel, ts: ts, streamed: d.streamed[key]}, true
			s.log.Debug("found an earlier post of a retried message", "key", key, "channel", d.channel, "ts", ts)
		}
	}
	opts := []slack.MsgOption{
		slack.MsgOptionText(text, false),
		slack.MsgOptionMetadata(slack.SlackMetadata{EventType: MessageEventType, EventPayload: map[string]any{"key": key}}),
	}
	if len(blocks) > 0 {
		opts = append(opts, slack.MsgOptionBlocks(blocks...))
	}
	if quiet {
		opts = append(opts, slack.MsgOptionDisableLinkUnfurl(), slack.MsgOptionDisableMediaUnfurl())
	}
	if known {
		if prev.sum == sum {
			return nil
		}
		edit := opts
		if prev.streamed && len(blocks) == 0 {
			// A streamed message shows its text as blocks, which an edit
			// sending none would keep.
			edit = append(edit[:len(edit):len(edit)], slack.MsgOptionBlocks())
		}
		_, _, _, err := s.api.UpdateMessageContext(ctx, prev.channel, prev.ts, edit...)
		switch {
		case err == nil:
			prev.sum = sum
			s.remember(key, prev)
			return nil
		case isSlackError(err, "message_not_found", "cant_update_message", "edit_window_closed"):
			// Deleted by someone, or no longer editable: post it again.
			s.log.Info("a posted message can no longer be edited; posting it again", "key", key, "error", err)
			s.forget(key)
		default:
			return s.fail("chat.update", err)
		}
	}
	opts = append(opts, slack.MsgOptionTS(d.threadTS))
	channel, ts, err := s.api.PostMessageContext(ctx, d.channel, opts...)
	if err != nil {
		return s.fail("chat.postMessage", err)
	}
	if channel == "" {
		channel = d.channel
	}
	s.remember(key, postedMsg{channel: channel, ts: ts, sum: sum})
	return nil
}

// CreateThread opens a thread for a fork: a new root message ("🍴 Fork:
// *title*") in the channel of sourceThread, and returns its thread key.
// The root carries metadata {event_type: ThreadEventType, event_payload:
// {request_id}}; before posting, the channel's recent history (the last
// 100 messages) is searched for it, so the same requestID gives the same
// thread. Errors are as for Deliver.
func (s *Sender) CreateThread(ctx context.Context, sourceThread, title, requestID string) (string, error) {
	team, channel, _, err := ParseThreadKey(sourceThread)
	if err != nil {
		return "", permanent(err.Error(), err)
	}
	if requestID == "" {
		return "", permanent("slack: opening a thread needs a request ID", nil)
	}
	key := "thread/" + team + "/" + channel + "/" + requestID
	lk, _, err := s.lock(ctx, key)
	if err != nil {
		return "", err
	}
	defer s.unlock(key, lk)
	if p, ok := s.recall(key); ok {
		return p.thread, nil
	}
	h, err := s.api.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{
		ChannelID: channel, Limit: historyLimit, IncludeAllMetadata: true,
	})
	if err != nil {
		return "", s.fail("conversations.history", err)
	}
	for _, msg := range h.Messages {
		if msg.Metadata.EventType != ThreadEventType || (msg.ThreadTimestamp != "" && msg.ThreadTimestamp != msg.Timestamp) {
			continue
		}
		if id, _ := msg.Metadata.EventPayload["request_id"].(string); id == requestID {
			thread := ThreadKey(team, channel, msg.Timestamp)
			s.remember(key, postedMsg{channel: channel, ts: msg.Timestamp, thread: thread})
			return thread, nil
		}
	}
	_, ts, err := s.api.PostMessageContext(ctx, channel,
		slack.MsgOptionText("🍴 Fork: *"+forkTitle(title)+"*", false),
		slack.MsgOptionMetadata(slack.SlackMetadata{EventType: ThreadEventType, EventPayload: map[string]any{"request_id": requestID}}),
	)
	if err != nil {
		return "", s.fail("chat.postMessage", err)
	}
	thread := ThreadKey(team, channel, ts)
	s.remember(key, postedMsg{channel: channel, ts: ts, thread: thread})
	s.log.Info("opened a fork thread", "thread", thread, "source", sourceThread)
	return thread, nil
}

// forkTitle makes a title safe inside "*...*" on one line.
func forkTitle(title string) string {
	t := strings.Join(strings.Fields(title), " ")
	t = strings.NewReplacer("*", "", "`", "'").Replace(t)
	if t == "" {
		t = "untitled"
	}
	return Escape(bot.Truncate(t, 150))
}

// isRetry says whether this call may repeat an earlier one: a retried
// activity, or a call from outside any activity (nothing says it is not).
func (s *Sender) isRetry(ctx context.Context) bool {
	if activity.IsActivity(ctx) {
		return activity.GetInfo(ctx).Attempt > 1
	}
	return true
}

// lock waits (within ctx) for the key's turn and returns the lock and the
// caller's sequence number.
func (s *Sender) lock(ctx context.Context, key string) (*keyLock, uint64, error) {
	s.mu.Lock()
	lk := s.locks[key]
	if lk == nil {
		lk = &keyLock{sem: make(chan struct{}, 1)}
		s.locks[key] = lk
	}
	lk.refs++
	lk.latest++
	seq := lk.latest
	s.mu.Unlock()
	select {
	case lk.sem <- struct{}{}:
		return lk, seq, nil
	case <-ctx.Done():
		s.release(key, lk)
		return nil, 0, ctx.Err()
	}
}

func (s *Sender) unlock(key string, lk *keyLock) {
	<-lk.sem
	s.release(key, lk)
}

func (s *Sender) release(key string, lk *keyLock) {
	s.mu.Lock()
	lk.refs--
	if lk.refs == 0 {
		delete(s.locks, key)
	}
	s.mu.Unlock()
}

// superseded says a newer delivery of the same key arrived while this one
// waited.
func (s *Sender) superseded(lk *keyLock, seq uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return lk.latest != seq
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

// permanentErrors are the Slack errors no retry can fix, with what they
// mean for whoever reads the activity's failure.
var permanentErrors = map[string]string{
	"invalid_auth":            "the Slack bot token is not valid",
	"not_authed":              "no Slack bot token was sent",
	"account_inactive":        "the Slack bot token belongs to a deactivated app or user",
	"token_revoked":           "the Slack bot token was revoked",
	"token_expired":           "the Slack bot token has expired",
	"no_permission":           "the Slack app is not allowed to do this",
	"missing_scope":           "the Slack app lacks an OAuth scope",
	"not_allowed_token_type":  "the Slack token is not a bot token",
	"channel_not_found":       "the bot cannot see the channel",
	"not_in_channel":          "the bot is not a member of the channel; invite it",
	"is_archived":             "the channel is archived",
	"restricted_action":       "the workspace does not let the bot post in this channel",
	"msg_too_long":            "the message is too long for Slack even after chunking",
	"invalid_thread_ts":       "the thread no longer exists",
	"thread_not_found":        "the thread no longer exists",
	"invalid_metadata_format": "Slack refused the message metadata",
	"invalid_metadata_schema": "Slack refused the message metadata",
	"metadata_too_large":      "Slack refused the message metadata",
	"invalid_arguments":       "Slack refused the call's arguments",
}

// fail translates a Slack error of operation op into what the activity
// returns: rate limits are retryable after Slack's delay, the errors in
// permanentErrors and 4xx statuses are non-retryable, anything else is
// returned as is (retryable). The bot token is never part of the result.
func (s *Sender) fail(op string, err error) error {
	err = s.redact(err)
	var rl *slack.RateLimitedError
	if errors.As(err, &rl) {
		return temporal.NewApplicationErrorWithOptions(
			fmt.Sprintf("slack %s: rate limited; retry after %s", op, rl.RetryAfter), ErrTypeRateLimited,
			temporal.ApplicationErrorOptions{NextRetryDelay: rl.RetryAfter, Cause: err})
	}
	var se slack.SlackErrorResponse
	if errors.As(err, &se) {
		if why, ok := permanentErrors[se.Err]; ok {
			if se.Err == "missing_scope" && se.Needed != "" {
				why += " (needed: " + se.Needed + ")"
			}
			return permanent(fmt.Sprintf("slack %s: %s: %s", op, se.Err, why), err)
		}
	}
	var sc slack.StatusCodeError
	if errors.As(err, &sc) && sc.Code >= 400 && sc.Code < 500 && sc.Code != http.StatusTooManyRequests && sc.Code != http.StatusRequestTimeout {
		return permanent(fmt.Sprintf("slack %s: %s", op, sc.Error()), err)
	}
	return fmt.Errorf("slack %s: %w", op, err)
}

// redact removes the bot token from an error's text (a transport error
// may quote a request); the error's type is kept when the token is absent.
func (s *Sender) redact(err error) error {
	if err == nil || s.token == "" || !strings.Contains(err.Error(), s.token) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), s.token, "[redacted]"))
}

func permanent(msg string, cause error) error {
	return temporal.NewNonRetryableApplicationError(msg, ErrTypePermanent, cause)
}

// isSlackError reports err is a Slack API error with one of the codes.
func isSlackError(err error, codes ...string) bool {
	var se slack.SlackErrorResponse
	if !errors.As(err, &se) {
		return false
	}
	for _, c := range codes {
		if se.Err == c {
			return true
		}
	}
	return false
}

// renderProgress renders a turn's progress: a status line, then one line
// per tool call (the last maxProgressTools of them), within max characters.
func renderProgress(m agentflow.Outbound, max int) string {
	var b strings.Builder
	b.WriteString(bot.ProgressStatus(m, Escape))
	tools := m.Tools
	if n := len(tools) - maxProgressTools; n > 0 {
		fmt.Fprintf(&b, "\n_… %d earlier tool call%s_", n, plural(n))
		tools = tools[n:]
	}
	for _, t := range tools {
		b.WriteString("\n")
		b.WriteString(bot.ToolMarker(t.State))
		b.WriteString(" ")
		summary := t.Summary
		if summary == "" {
			summary = t.Name
		}
		b.WriteString("`" + strings.ReplaceAll(Escape(oneLine(summary, maxToolField)), "`", "'") + "`")
		if t.Detail != "" {
			b.WriteString(" — " + Escape(oneLine(t.Detail, maxToolField)))
		}
	}
	return bot.Truncate(b.String(), max)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// oneLine collapses s to one line of at most n characters.
func oneLine(s string, n int) string {
	return bot.Truncate(strings.Join(strings.Fields(s), " "), n)
}
