package slackbot

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/slack-go/slack"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
)

// Pacing and limits of streamed answers.
const (
	// streamEvery is the least time between two calls that add text to a
	// streamed answer (chat.startStream, chat.appendStream): at most four
	// a second, whatever the model's pace; text in between is buffered.
	streamEvery = 250 * time.Millisecond
	// editEvery is the least time between two edits of an answer shown by
	// editing a message, where Slack will not stream.
	editEvery = time.Second
	// maxStreamRunes is the most text streamed into one message: the
	// answer's first part as Deliver cuts it, under Slack's 12,000
	// characters a call. The rest comes with the answer's Deliver.
	maxStreamRunes = maxMarkdownBlock
	// maxTokenHold is the longest possible "<thread:KEY>" token held back
	// from a flush until its '>' arrives, so it is never shown half-made.
	maxTokenHold = 200
	// maxStreamWaits is how many times Finish waits out Slack's
	// Retry-After (at most maxStreamWait each) before it gives up.
	maxStreamWaits = 3
	maxStreamWait  = 30 * time.Second
)

// streamRefusals are the errors of chat.startStream (or appendStream,
// stopStream) that say the app may not stream at all: after one, the
// team's answers are shown by editing a message instead, for the life of
// the process.
var streamRefusals = []string{
	"unknown_method", "method_deprecated", "deprecated_endpoint", "missing_scope",
	"not_allowed_token_type", "feature_not_enabled", "not_allowed", "enterprise_is_restricted", "is_bot",
}

// streamFallbacks are the errors of chat.startStream that say this answer
// cannot be streamed where it goes (a channel type, a recipient Slack does
// not take): it is shown by editing a message instead.
var streamFallbacks = []string{
	"channel_type_not_supported", "missing_recipient_user_id", "missing_recipient_team_id",
	"user_not_found", "team_not_found",
}

// errStreamFinished is what Append returns after Finish.
var errStreamFinished = errors.New("slack stream: the answer's stream is finished")

// streamState is what a Sender knows of streamed answers.
type streamState struct {
	mu      sync.Mutex
	refused map[string]string        // team → the error that refused streaming
	open    map[string]*answerStream // answer key → its stream, until Finish
	// opened is set once this process opened a stream: from then on an
	// answer's Deliver searches its thread before posting, since the
	// answer may have been streamed by another process (a Deliver on the
	// stream's own process knows it from memory).
	opened bool
}

func newStreamState() *streamState {
	return &streamState{refused: map[string]string{}, open: map[string]*answerStream{}}
}

// StreamAnswer implements agentflow.AnswerStreamer. Nothing is posted
// until the first Append with text; then the answer shows as a reply in
// t.Thread that grows as text arrives:
//   - with chat.startStream / appendStream / stopStream where the
//     workspace allows them (the recipient is t.User of the thread's team;
//     outside a DM a stream needs one), at most four calls a second;
//   - else (a refusal of the methods is remembered for the team; no
//     t.User outside a DM) as a message posted as the answer's first part
//     is (markdown block, or mrkdwn where Slack refuses those) and edited
//     at most once a second.
//
// The message is the answer's first part (key t.Key+"/part-1"): it holds
// at most the part's 11,500 characters, and the answer's Deliver edits
// it into the final rendering and posts the rest. A stopped stream
// carries the part's metadata, so a Deliver in another process finds it
// when it searches the thread (see Deliver). A rate limit pauses the
// stream for Slack's Retry-After, buffering the text; any other failure
// ends streaming for the answer (Append returns it) and leaves the answer
// to its Deliver. The text is never logged. ctx only bounds this call.
func (s *Sender) StreamAnswer(ctx context.Context, t agentflow.StreamTarget) (agentflow.AnswerStream, error) {
	team, channel, threadTS, err := ParseThreadKey(t.Thread)
	if err != nil {
		return nil, fmt.Errorf("slack stream: %w", err)
	}
	if t.Key == "" {
		return nil, errors.New("slack stream: an answer stream needs the answer's key")
	}
	s.removeStale(ctx, channel, partKey(t.Key, 1), t.Stale)
	st := &answerStream{
		s: s, team: team, channel: channel, threadTS: threadTS, key: t.Key, part: partKey(t.Key, 1), user: t.User,
		d: &delivery{s: s, channel: channel, threadTS: threadTS, kind: agentflow.OutboundAnswer, retry: s.isRetry(ctx)},
	}
	s.streams.mu.Lock()
	if len(s.streams.open) >= maxRemembered {
		// Streams never finished (a crashed activity): forgetting them
		// only spares their Deliver stopping them first.
		clear(s.streams.open)
	}
	s.streams.open[t.Key] = st
	s.streams.opened = true
	s.streams.mu.Unlock()
	return st, nil
}

// settleStream readies the Deliver of answer key: a stream of it still
// open in this process is finished (kept, so the Deliver edits it), and
// the delivery searches the thread before posting when the answer was
// streamed (streamed: the workflow says so, whichever process streamed
// it) or once this process streams answers.
func (s *Sender) settleStream(ctx context.Context, d *delivery, key string, streamed bool) {
	s.streams.mu.Lock()
	st := s.streams.open[key]
	opened := s.streams.opened
	s.streams.mu.Unlock()
	if st != nil {
		if err := st.Finish(ctx, true); err != nil {
			s.log.Info("stopping an answer's stream before its delivery failed", "key", key, "error", err)
		}
	}
	d.lookUp = opened || streamed
}

// streamMode is how an answerStream shows its text.
type streamMode int

const (
	modeIdle   streamMode = iota // nothing shown yet
	modeStream                   // a Slack stream
	modeEdit                     // a message edited as text arrives
)

// answerStream is one streamed answer (agentflow.AnswerStream). Its
// methods are called in order from one goroutine, but a Deliver of the
// answer may Finish it meanwhile: mu guards everything.
type answerStream struct {
	s                            *Sender
	team, channel, threadTS, key string
	part                         string // the key of the answer's first part
	user                         string
	d                            *delivery

	mu    sync.Mutex
	mode  streamMode
	text  strings.Builder // every Append, in order
	sent  int             // bytes of text shown
	shown int             // characters streamed (modeStream)
	ts    string          // the message, once posted or started
	live  bool            // the Slack stream is not stopped yet
	full  bool            // the message holds all it may
	last  time.Time       // the last call that showed text
	until time.Time       // rate limited until
	err   error           // what ended streaming
	done  bool            // Finish was called
}

// Ref implements agentflow.StreamRef: "<channel>/<ts>" of the message
// once posted.
func (st *answerStream) Ref() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.ts == "" {
		return ""
	}
	return st.channel + "/" + st.ts
}

// removeStale deletes the messages that streams of a dead attempt left in
// channel (refs from Ref), stopping them first; a ref of another channel
// or not of Ref's form is ignored. Best effort: failures are logged.
func (s *Sender) removeStale(ctx context.Context, channel, part string, refs []string) {
	for _, ref := range refs {
		ch, ts, ok := strings.Cut(ref, "/")
		if !ok || ch != channel || !validTS(ts) {
			s.log.Warn("ignored a stale stream reference that is not this thread's", "channel", channel)
			continue
		}
		if _, _, err := s.api.StopStreamContext(ctx, ch, ts); err != nil && !isSlackError(err, "message_not_in_streaming_state", "message_not_found") {
			s.log.Info("stopping a stale stream", "channel", ch, "ts", ts, "error", s.redact(err))
		}
		if _, _, err := s.api.DeleteMessageContext(ctx, ch, ts); err != nil && !isSlackError(err, "message_not_found") {
			s.log.Warn("deleting a stale streamed message failed", "channel", ch, "ts", ts, "error", s.redact(err))
			continue
		}
		if p, ok := s.recall(part); ok && p.ts == ts {
			s.forget(part)
		}
	}
}

// Append implements agentflow.AnswerStream.
func (st *answerStream) Append(ctx context.Context, text string) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case st.done:
		return errStreamFinished
	case st.err != nil:
		return st.err
	}
	st.text.WriteString(text)
	if st.full {
		return nil
	}
	if err := st.flush(ctx); err != nil {
		st.err = err
		return err
	}
	return nil
}

// flush shows the text not shown yet, when the pace allows.
func (st *answerStream) flush(ctx context.Context) error {
	now := st.s.now()
	every := streamEvery
	if st.mode == modeEdit {
		every = editEvery
	}
	if now.Before(st.until) || (!st.last.IsZero() && now.Sub(st.last) < every) {
		return nil
	}
	all := st.text.String()
	end := holdBack(all, st.sent)
	if end <= st.sent || (st.mode == modeIdle && strings.TrimSpace(all[:end]) == "") {
		return nil
	}
	if st.mode == modeIdle {
		st.mode = modeStream
		if why := st.s.streams.refusal(st.team); why != "" || (st.user == "" && !isDM(st.channel)) {
			st.mode = modeEdit
		}
	}
	if st.mode == modeStream {
		return st.stream(ctx, all, end, now)
	}
	return st.edit(ctx, all[:end], end, now)
}

// stream sends text[st.sent:end] to the Slack stream, starting it first.
func (st *answerStream) stream(ctx context.Context, all string, end int, now time.Time) error {
	s := st.s
	chunk := all[st.sent:end]
	md := s.links.renderMarkdown(ctx, chunk)
	full := false
	if room := maxStreamRunes - st.shown; utf8.RuneCountInString(md) > room {
		// The message is as long as the first part gets: the rest waits
		// for the Deliver, which posts it as further parts.
		md = prefixRunes(s.links.renderMarkdown(ctx, prefixRunes(chunk, room)), room)
		full = true
	}
	if md == "" {
		st.full = true
		return nil
	}
	method := "chat.appendStream"
	var err error
	if st.ts == "" {
		method = "chat.startStream"
		opts := []slack.MsgOption{slack.MsgOptionTS(st.threadTS), slack.MsgOptionMarkdownText(md)}
		if st.user != "" {
			opts = append(opts, slack.MsgOptionRecipientUserID(st.user), slack.MsgOptionRecipientTeamID(st.team))
		}
		var channel, ts string
		channel, ts, err = s.api.StartStreamContext(ctx, st.channel, opts...)
		if err == nil {
			if channel != "" {
				st.channel = channel
			}
			st.ts, st.live = ts, true
			// The Deliver of the answer edits this message.
			s.remember(st.part, postedMsg{channel: st.channel, ts: ts, streamed: true})
		}
	} else {
		_, _, err = s.api.AppendStreamContext(ctx, st.channel, st.ts, slack.MsgOptionMarkdownText(md))
	}
	var rl *slack.RateLimitedError
	switch {
	case err == nil:
		st.sent, st.last, st.full = end, now, full
		st.shown += utf8.RuneCountInString(md)
		return nil
	case errors.As(err, &rl):
		st.until = now.Add(rl.RetryAfter)
		s.log.Debug("slack rate-limited an answer's stream; buffering", "key", st.key, "method", method, "retry_after", rl.RetryAfter)
		return nil
	case isSlackError(err, streamRefusals...):
		s.streams.refuse(st.team, err)
		s.log.Info("slack refused streaming; this team's answers are shown by editing a message", "team", st.team, "method", method, "error", err)
	case st.ts == "" && isSlackError(err, streamFallbacks...):
		s.log.Info("slack cannot stream this answer; showing it by editing a message", "key", st.key, "error", err)
	default:
		return fmt.Errorf("slack %s: %w", method, s.redact(err))
	}
	if st.ts != "" {
		// Refused mid-stream: the message stays as it is for the Deliver.
		return fmt.Errorf("slack %s: %w", method, s.redact(err))
	}
	st.mode = modeEdit
	return st.edit(ctx, all[:end], end, now)
}

// edit posts or edits the answer's first part with text so far.
func (st *answerStream) edit(ctx context.Context, text string, end int, now time.Time) error {
	more, err := st.s.showFirstPart(ctx, st.d, st.part, text)
	var rl *slack.RateLimitedError
	switch {
	case err == nil:
		st.sent, st.last, st.full = end, now, more
		if p, ok := st.s.recall(st.part); ok {
			st.ts = p.ts
		}
		return nil
	case errors.As(err, &rl):
		st.until = now.Add(rl.RetryAfter)
		st.s.log.Debug("slack rate-limited an answer's edits; buffering", "key", st.key, "retry_after", rl.RetryAfter)
		return nil
	}
	return err
}

// showFirstPart posts, or edits, the first part of an answer whose text
// so far is text, as deliverAnswer posts it (a markdown block, or mrkdwn
// text where Slack refuses those), under key. more says text goes past
// the part.
func (s *Sender) showFirstPart(ctx context.Context, d *delivery, key, text string) (more bool, err error) {
	if strings.TrimSpace(text) == "" {
		return false, nil
	}
	if s.markdownAllowed() {
		parts := bot.ChunkLimits(text, bot.Limits{Runes: maxMarkdownBlock})
		md := s.links.renderMarkdown(ctx, parts[0])
		fallback := s.mrkdwn(ctx, parts[0])
		if utf8.RuneCountInString(fallback) > maxFallbackText {
			fallback = s.mrkdwn(ctx, bot.Truncate(parts[0], previewChars))
		}
		err := d.putBlocks(ctx, key, fallback, []slack.Block{slack.NewMarkdownBlock("", md)}, false)
		if err == nil || !isSlackError(err, "invalid_blocks", "msg_blocks_too_long") {
			return len(parts) > 1, err
		}
		if isSlackError(err, "invalid_blocks") {
			s.refuseMarkdown()
		}
	}
	parts := bot.Chunk(text, s.maxChunk)
	return len(parts) > 1, d.put(ctx, key, s.mrkdwn(ctx, parts[0]), false)
}

// Finish implements agentflow.AnswerStream. A kept stream is stopped
// with the first part's metadata (the rest of the buffered text with it);
// a stream not kept is stopped and its message deleted, as is a message
// edited in its place. Rate limits are waited out (within ctx); other
// failures are returned. A second Finish does nothing.
func (st *answerStream) Finish(ctx context.Context, keep bool) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.done {
		return nil
	}
	st.done = true
	s := st.s
	s.streams.mu.Lock()
	if s.streams.open[st.key] == st {
		delete(s.streams.open, st.key)
	}
	s.streams.mu.Unlock()
	var errs []error
	if st.live {
		opts := []slack.MsgOption{}
		if keep {
			if rest := st.rest(ctx); rest != "" {
				opts = append(opts, slack.MsgOptionMarkdownText(rest))
			}
			opts = append(opts, slack.MsgOptionMetadata(slack.SlackMetadata{
				EventType: MessageEventType, EventPayload: map[string]any{"key": st.part, "streamed": true},
			}))
		}
		err := st.retry(ctx, func() error {
			_, _, err := s.api.StopStreamContext(ctx, st.channel, st.ts, opts...)
			return err
		})
		st.live = false
		if err != nil && !(isSlackError(err, "message_not_in_streaming_state") && !keep) {
			errs = append(errs, fmt.Errorf("slack chat.stopStream: %w", s.redact(err)))
		}
	}
	if !keep && st.ts != "" {
		err := st.retry(ctx, func() error {
			_, _, err := s.api.DeleteMessageContext(ctx, st.channel, st.ts)
			return err
		})
		switch {
		case err == nil || isSlackError(err, "message_not_found"):
			s.forget(st.part)
		default:
			// Left for the Deliver, which edits it into the answer.
			errs = append(errs, fmt.Errorf("slack chat.delete: %w", s.redact(err)))
		}
	}
	return errors.Join(errs...)
}

// rest is the buffered text not streamed yet, as much as the message
// still takes, rendered; "" after a failure (the Deliver has it all).
func (st *answerStream) rest(ctx context.Context) string {
	all := st.text.String()
	if st.err != nil || st.full || st.sent >= len(all) {
		return ""
	}
	room := maxStreamRunes - st.shown
	md := st.s.links.renderMarkdown(ctx, all[st.sent:])
	if utf8.RuneCountInString(md) > room {
		md = prefixRunes(md, room)
	}
	return md
}

// retry calls call, waiting out up to maxStreamWaits rate limits.
func (st *answerStream) retry(ctx context.Context, call func() error) error {
	for i := 0; ; i++ {
		err := call()
		var rl *slack.RateLimitedError
		if err == nil || i == maxStreamWaits || !errors.As(err, &rl) {
			return err
		}
		t := time.NewTimer(min(rl.RetryAfter, maxStreamWait))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// refusal returns the error that refused streaming to team, or "".
func (ss *streamState) refusal(team string) string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.refused[team]
}

func (ss *streamState) refuse(team string, err error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.refused[team] = err.Error()
}

// isDM says channel is a direct message, where a stream needs no
// recipient.
func isDM(channel string) bool { return strings.HasPrefix(channel, "D") }

// holdBack returns where a flush of text (from from on) should end: before
// a "<thread:KEY>" token whose '>' has not arrived (or the start of one:
// "<thr"), unless it has grown past any key's length.
func holdBack(text string, from int) int {
	i := strings.LastIndexByte(text[from:], '<')
	if i < 0 {
		return len(text)
	}
	i += from
	tail := text[i:]
	switch {
	case len(tail) > maxTokenHold || strings.ContainsAny(tail, "> \t\n"):
		return len(text)
	case strings.HasPrefix(threadToken, tail), strings.HasPrefix(tail, threadToken):
		return i
	}
	return len(text)
}

// prefixRunes returns s cut to at most n characters.
func prefixRunes(s string, n int) string {
	if n <= 0 {
		return ""
	}
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}
