package agentflow_test

// Tests of streamed answers: ModelStep hands the model's text, redacted,
// to the thread's AnswerStreamer while the model writes it. The model is
// the fake endpoint streaming over server-sent events, read by the real
// llm.Client; the streamer records what it was given (the platforms' own
// streaming is tested in bot/slack against the fake Slack).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/agentflow/llm"
	"github.com/agentbot/agentbot/internal/fakeopenai"
)

// streamRecorder is the terminal's ChatSender plus an AnswerStreamer that
// records every stream.
type streamRecorder struct {
	agentflow.ChatSender
	mu      sync.Mutex
	streams []*recordedStream
	answers []agentflow.Outbound
	// failTakeBack, when above 0, makes the failTakeBack-th Finish(false)
	// fail, as a worker that dies before it takes its message back.
	failTakeBack int
	takeBacks    int
}

type recordedStream struct {
	target   agentflow.StreamTarget
	ref      string
	appends  []string
	finished int
	keep     bool
}

func (r *streamRecorder) StreamAnswer(ctx context.Context, t agentflow.StreamTarget) (agentflow.AnswerStream, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &recordedStream{target: t, ref: fmt.Sprintf("msg-%d", len(r.streams)+1)}
	r.streams = append(r.streams, s)
	return &recStream{r: r, s: s}, nil
}

func (r *streamRecorder) Deliver(ctx context.Context, m agentflow.Outbound) error {
	if m.Kind == agentflow.OutboundAnswer {
		r.mu.Lock()
		r.answers = append(r.answers, m)
		r.mu.Unlock()
	}
	return r.ChatSender.Deliver(ctx, m)
}

func (r *streamRecorder) snapshot() []recordedStream {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]recordedStream, len(r.streams))
	for i, s := range r.streams {
		out[i] = *s
		out[i].appends = append([]string(nil), s.appends...)
	}
	return out
}

type recStream struct {
	r *streamRecorder
	s *recordedStream
}

func (s *recStream) Append(ctx context.Context, text string) error {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	if s.s.finished > 0 {
		panic("Append after Finish")
	}
	s.s.appends = append(s.s.appends, text)
	return nil
}

func (s *recStream) Finish(ctx context.Context, keep bool) error {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	s.s.finished++
	s.s.keep = keep
	if !keep {
		s.r.takeBacks++
		if s.r.takeBacks == s.r.failTakeBack {
			return errors.New("the worker died")
		}
	}
	return nil
}

func (s *recStream) Ref() string {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	if len(s.s.appends) == 0 {
		return ""
	}
	return s.s.ref
}

// streamScript answers a user message with some words and a shell call,
// and the call's result with answer (once cut mid-stream when cut is set).
func streamScript(answer string, cut *int) fakeopenai.Script {
	var mu sync.Mutex
	return func(ctx context.Context, c fakeopenai.Call) (fakeopenai.Reply, error) {
		last := c.Messages[len(c.Messages)-1]
		if last.Role == "user" {
			return fakeopenai.Reply{Text: "Let me look at the files in the workspace first, then I will answer.",
				ToolCalls: []fakeopenai.ReplyToolCall{{Name: fakeopenai.ToolShell, Arguments: json.RawMessage(`{"command":"echo hi"}`)}}}, nil
		}
		mu.Lock()
		defer mu.Unlock()
		r := fakeopenai.Reply{Text: answer}
		if cut != nil && *cut > 0 {
			*cut--
			r.Stream.CutAfter = 30
		}
		return r, nil
	}
}

func TestStreamedAnswer(t *testing.T) {
	answer := "All done. The workspace holds one file, and the key you asked about is " + unitKey +
		", which I will not repeat. Nothing else changed; the tests pass and the build is clean."
	redacted := strings.ReplaceAll(answer, unitKey, "[redacted]")

	var failTakeBack int
	run := func(t *testing.T, stream bool, cut int, secrets ...string) (*fakeopenai.Server, *streamRecorder) {
		p := newParts(t, nil)
		if secrets != nil {
			p.acts.Secrets = secrets
		}
		want := redacted
		if !slices.Contains(p.acts.Secrets, unitKey) {
			want = answer
		}
		srv := p.useModel(fakeopenai.Options{Script: streamScript(answer, &cut), StreamChunk: 3}, llm.APIChat)
		rec := &streamRecorder{ChatSender: p.acts.Chat["term"], failTakeBack: failTakeBack}
		p.acts.Chat["term"] = rec
		p.acts.StreamAnswers = stream
		e := p.newEnv("term:stream")
		err := e.runAgent(agentflow.AgentInput{},
			e.send(agentflow.MessageRequest{ID: "m1", Author: "tester", User: "U1", Text: "what is there?"},
				func(r agentflow.MessageResult, err error) {
					if err != nil {
						t.Errorf("message: %v", err)
					}
				}),
			e.resultOf("m1", func(r agentflow.TurnResult) {
				if r.Status != agentflow.TurnDone || r.Answer != want {
					t.Errorf("turn: %+v", r)
				}
			}),
			e.destroy(),
		)
		if err != nil {
			t.Fatal(err)
		}
		return srv, rec
	}

	t.Run("streamed, redacted, kept for the answer", func(t *testing.T) {
		srv, rec := run(t, true, 0)
		streams := rec.snapshot()
		var kept []recordedStream
		for _, s := range streams {
			if s.finished != 1 {
				t.Errorf("stream %+v finished %d times", s.target, s.finished)
			}
			if s.keep {
				kept = append(kept, s)
			} else if got := strings.Join(s.appends, ""); !strings.HasPrefix("Let me look at the files in the workspace first, then I will answer.", got) {
				t.Errorf("a stream taken back showed %q", got)
			}
			for _, a := range s.appends {
				if strings.Contains(a, "sk-unit") || strings.Contains(a, "test-key") {
					t.Errorf("a secret was streamed: %q", a)
				}
			}
		}
		if len(kept) != 1 {
			t.Fatalf("want one stream kept, got %+v", streams)
		}
		s := kept[0]
		if got := strings.Join(s.appends, ""); got != redacted {
			t.Errorf("streamed %q\nwant %q", got, redacted)
		}
		if len(s.appends) < 3 {
			t.Errorf("the answer came in %d appends, want it in pieces: %q", len(s.appends), s.appends)
		}
		want := agentflow.StreamTarget{Thread: "term:stream", Key: "agent/term:stream/1/answer", User: "U1"}
		if s.target.Thread != want.Thread || s.target.Key != want.Key || s.target.User != want.User || len(s.target.Stale) != 0 {
			t.Errorf("target %+v, want %+v", s.target, want)
		}
		if len(rec.answers) != 1 || rec.answers[0].Key != want.Key || rec.answers[0].Text.Inline != redacted {
			t.Errorf("answers delivered: %+v", rec.answers)
		}
		for _, r := range srv.Requests() {
			if !r.Call.Stream {
				t.Errorf("a model call did not stream: %+v", r.Call)
			}
		}
	})

	t.Run("no secret known: nothing held back", func(t *testing.T) {
		_, rec := run(t, true, 0, "")
		var kept []string
		for _, s := range rec.snapshot() {
			if s.keep {
				kept = append(kept, strings.Join(s.appends, ""))
			}
		}
		if len(kept) != 1 || kept[0] != answer {
			t.Errorf("kept streams %q, want the answer as written", kept)
		}
	})

	t.Run("a dead attempt's message removed by the retry", func(t *testing.T) {
		failTakeBack = 2 // the first is the step that called a tool
		defer func() { failTakeBack = 0 }()
		_, rec := run(t, true, 1)
		streams := rec.snapshot()
		var dead *recordedStream
		for i, s := range streams {
			if !s.keep && len(s.appends) > 0 && strings.HasPrefix(redacted, strings.Join(s.appends, "")) {
				dead = &streams[i]
			}
		}
		if dead == nil {
			t.Fatalf("no stream of the cut attempt: %+v", streams)
		}
		found := false
		for _, s := range streams {
			if slices.Equal(s.target.Stale, []string{dead.ref}) {
				found = true
			}
		}
		if !found {
			t.Errorf("the retry was not handed %s to remove: %+v", dead.ref, streams)
		}
	})

	t.Run("off", func(t *testing.T) {
		srv, rec := run(t, false, 0)
		if s := rec.snapshot(); len(s) != 0 {
			t.Errorf("streams with StreamAnswers off: %+v", s)
		}
		for _, r := range srv.Requests() {
			if r.Call.Stream {
				t.Errorf("a model call streamed with StreamAnswers off")
			}
		}
	})

	t.Run("cut mid-answer, retried", func(t *testing.T) {
		_, rec := run(t, true, 1)
		streams := rec.snapshot()
		var kept, taken []recordedStream
		for _, s := range streams {
			if s.keep {
				kept = append(kept, s)
			} else {
				taken = append(taken, s)
			}
		}
		if len(kept) != 1 || strings.Join(kept[0].appends, "") != redacted {
			t.Fatalf("kept streams: %+v", kept)
		}
		// The cut attempt's stream showed part of the answer and was
		// taken back.
		found := false
		for _, s := range taken {
			got := strings.Join(s.appends, "")
			if got != "" && strings.HasPrefix(redacted, got) && s.finished == 1 {
				found = true
			}
		}
		if !found {
			t.Errorf("no stream of the cut attempt taken back: %+v", taken)
		}
		if len(rec.answers) != 1 {
			t.Errorf("answers delivered: %+v", rec.answers)
		}
	})
}
