package agentflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"go.temporal.io/sdk/activity"

	"github.com/agentbot/agentbot/agentflow/llm"
	"github.com/agentbot/agentbot/internal/redact"
	"github.com/agentbot/agentbot/store"
)

// AnswerStreamer is an optional interface of a ChatSender that shows an
// answer while the model writes it: a platform's token stream where it has
// one (Slack's chat.startStream), a message edited as text arrives where it
// has not (at most once a second).
//
// The streamed message is the answer's first part: the Deliver of the
// answer (the same Outbound key as StreamTarget.Key) later edits it into
// the final rendering instead of posting again. A sender that cannot
// stream returns errors.ErrUnsupported from StreamAnswer, and the answer
// is posted whole when the turn ends, as without streaming.
type AnswerStreamer interface {
	// StreamAnswer opens a stream in t.Thread. It posts nothing yet: the
	// message appears with the first Append. ctx bounds the call only; the
	// stream lives until Finish.
	StreamAnswer(ctx context.Context, t StreamTarget) (AnswerStream, error)
}

// StreamTarget says where an answer is streamed and for whom.
type StreamTarget struct {
	// Thread is the session's thread key.
	Thread string
	// Key is the Outbound key of the answer the stream becomes
	// ("agent/<thread>/<turn>/answer").
	Key string
	// User is the platform user ID the answer is for (the turn's first
	// author); Slack needs it to stream outside a DM. It may be empty.
	User string
	// Stale are messages that earlier attempts of the same model step
	// posted and could not take back (the worker died): StreamAnswer
	// removes them, best effort. They are refs an AnswerStream of this
	// sender gave (StreamRef); a ref that is not its own is ignored.
	Stale []string
}

// StreamRef is an optional interface of an AnswerStream: Ref names the
// message the stream posted, "" until it posted one. The model step keeps
// it in the blob store until the step ends, so that a retry after a crash
// hands it back as StreamTarget.Stale.
type StreamRef interface {
	Ref() string
}

// AnswerStream is one open stream. Its methods are called from one
// goroutine, in order.
type AnswerStream interface {
	// Append adds text to what is shown: the message is the
	// concatenation of every Append. The text is already redacted. An
	// error ends streaming for this answer (the activity stops calling
	// Append and the answer is delivered whole at the end of the turn).
	Append(ctx context.Context, text string) error
	// Finish ends the stream. keep false says the text was not an answer
	// (the model went on to call tools, or the call failed): the message
	// is removed. keep true leaves it for the answer's Deliver to finish.
	Finish(ctx context.Context, keep bool) error
}

// StreamingModel is an optional interface of a Model that can stream its
// answer (*llm.Client): Stream is Complete with the answer's text handed
// to onText as it arrives.
type StreamingModel interface {
	Stream(ctx context.Context, req llm.Request, onText func(string)) (llm.Response, error)
}

// answerStream carries one model step's text to the thread's
// AnswerStreamer, redacted. Nothing it does fails the step: a chat error
// ends the streaming of this answer, which is then delivered whole.
type answerStream struct {
	a      *Activities
	ctx    context.Context
	target StreamTarget
	sender AnswerStreamer
	rd     *redact.Redactor
	hold   int // bytes kept back, in which a secret may still be forming

	raw    strings.Builder // the text so far, as the model wrote it
	sent   string          // what was appended: a prefix of the redacted text
	stream AnswerStream
	dead   bool
	// refKey is where the stream's message is noted (streamKey) once
	// posted; noted says it was.
	refKey string
	noted  bool
	// answer is the step's answer, once known (redacted).
	answer string
}

// newAnswerStream returns the stream of step in's answer, or nil when
// answers are not streamed here.
func (a *Activities) newAnswerStream(ctx context.Context, in ModelStepInput) *answerStream {
	if !a.StreamAnswers || in.SessionID == "" {
		return nil
	}
	if _, ok := a.Model.(StreamingModel); !ok {
		return nil
	}
	thread := strings.TrimPrefix(in.SessionID, "agent/")
	sender, ok := a.Chat[Platform(thread)].(AnswerStreamer)
	if !ok {
		return nil
	}
	rd := a.redactor()
	hold := 0
	if !rd.Empty() {
		hold = rd.Longest() + len(redact.Placeholder)
	}
	s := &answerStream{
		a: a, ctx: ctx, sender: sender, rd: rd, hold: hold, refKey: streamKey(in.SessionID, in.Turn, in.Step),
		target: StreamTarget{Thread: thread, Key: fmt.Sprintf("%s/%d/answer", in.SessionID, in.Turn), User: in.User},
	}
	// An earlier attempt of this step that died mid-stream left its
	// message: the stream opens now, which removes it, even if this
	// attempt shows nothing. Only a retry can find one.
	if !activity.IsActivity(ctx) || activity.GetInfo(ctx).Attempt < 2 {
		return s
	}
	if err := a.getJSON(ctx, s.refKey, &s.target.Stale); err == nil && len(s.target.Stale) > 0 {
		st, err := sender.StreamAnswer(ctx, s.target)
		if err != nil {
			s.end(err)
		} else {
			s.stream = st
		}
		s.target.Stale = nil
		s.forget()
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		a.log().WarnContext(ctx, "reading what an earlier attempt streamed", "key", s.refKey, "error", err)
	}
	return s
}

// note records the stream's message, once it has one, for a retry.
func (s *answerStream) note() {
	if s.noted {
		return
	}
	r, ok := s.stream.(StreamRef)
	if !ok {
		s.noted = true
		return
	}
	ref := r.Ref()
	if ref == "" {
		return
	}
	s.noted = true
	data, _ := json.Marshal([]string{ref})
	if err := s.a.putBlob(s.ctx, s.refKey, "application/json", data); err != nil {
		s.a.log().WarnContext(s.ctx, "noting a streamed message for a retry", "key", s.refKey, "error", err)
	}
}

// forget drops the note of the stream's message: the step is over, or the
// message was removed.
func (s *answerStream) forget() {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), 10*time.Second)
	defer cancel()
	if err := s.a.Blobs.Delete(ctx, s.refKey); err != nil && !errors.Is(err, store.ErrNotFound) {
		s.a.log().WarnContext(ctx, "dropping the note of a streamed message", "key", s.refKey, "error", err)
	}
}

// text takes a delta from the model.
func (s *answerStream) text(delta string) {
	if s.dead {
		return
	}
	s.raw.WriteString(delta)
	red := s.rd.String(s.raw.String())
	cut := len(red) - s.hold
	for cut > len(s.sent) && cut < len(red) && !utf8.RuneStart(red[cut]) {
		cut--
	}
	if cut <= len(s.sent) {
		return
	}
	s.send(red[:cut])
}

// send appends what upto holds beyond what was sent; upto must extend it.
func (s *answerStream) send(upto string) {
	if !strings.HasPrefix(upto, s.sent) {
		// A replacement reached back into what was shown (it cannot,
		// given hold; but never show a text that is not the answer's).
		s.end(errors.New("the redacted text changed behind the stream"))
		return
	}
	if s.stream == nil {
		st, err := s.sender.StreamAnswer(s.ctx, s.target)
		if err != nil {
			s.end(err)
			return
		}
		s.stream = st
	}
	if err := s.stream.Append(s.ctx, upto[len(s.sent):]); err != nil {
		s.end(err)
		return
	}
	s.sent = upto
	s.note()
}

// end stops streaming this answer after err; what was shown stays until
// finish.
func (s *answerStream) end(err error) {
	s.dead = true
	if !errors.Is(err, errors.ErrUnsupported) {
		s.a.log().WarnContext(s.ctx, "streaming the answer stopped; it comes whole at the end of the turn",
			"thread", s.target.Thread, "error", err)
	}
}

// finish ends the stream: answer is the step's final answer (redacted,
// whole) when keep, and the streamed message is removed otherwise.
func (s *answerStream) finish(keep bool, answer string) {
	if s == nil {
		return
	}
	if keep && !s.dead && answer != s.sent && strings.HasPrefix(answer, s.sent) {
		s.send(answer)
	}
	if s.stream == nil {
		return
	}
	// The step's ctx may be done (a failed call); removing what was shown
	// still needs a moment.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), 30*time.Second)
	defer cancel()
	if err := s.stream.Finish(ctx, keep); err != nil {
		s.a.log().WarnContext(ctx, "ending an answer's stream failed", "thread", s.target.Thread, "keep", keep, "error", err)
		if !keep {
			return // left noted: a retry removes it
		}
	}
	if s.noted {
		s.forget()
	}
}
