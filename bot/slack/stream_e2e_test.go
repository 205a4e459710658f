package slackbot_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/internal/fakeopenai"
	"github.com/agentbot/agentbot/internal/fakeslack"
	"github.com/agentbot/agentbot/internal/stacktest"
)

const (
	streamPreface = "Running the command first, then I will tell you what it printed."
	streamAnswer  = "The command ran and printed its word. "
)

// streamE2EScript answers a user message with a preface and a shell call
// (the text before the call is streamed, then taken back), and the call's
// result with a long answer, slowly, so that it streams over several
// appends.
func streamE2EScript(ctx context.Context, c fakeopenai.Call) (fakeopenai.Reply, error) {
	last := c.Messages[len(c.Messages)-1]
	if last.Role == "user" {
		return fakeopenai.Reply{Text: streamPreface, ToolCalls: []fakeopenai.ReplyToolCall{{
			Name: fakeopenai.ToolShell, Arguments: json.RawMessage(`{"command":"echo word"}`)}}}, nil
	}
	return fakeopenai.Reply{Text: strings.Repeat(streamAnswer, 12) + "**Done.**"}, nil
}

// TestStreamedAnswerEndToEnd: on the real stack (Temporal, the worker's
// model step streaming from the fake model over server-sent events), an
// answer grows in its Slack thread as one streamed reply while the model
// writes it, and the end of the turn edits that reply into the answer:
// one answer message, never posted twice; the text the model wrote before
// calling a tool is taken back. Where Slack refuses chat.startStream, the
// same happens through one message edited in place.
func TestStreamedAnswerEndToEnd(t *testing.T) {
	final := strings.Repeat(streamAnswer, 12) + "**Done.**"
	for _, refused := range []bool{false, true} {
		name := "streamed"
		if refused {
			name = "streaming refused: edits"
		}
		t.Run(name, func(t *testing.T) {
			h := startAccSlackWith(t, accOptions{stack: stacktest.Options{StreamAnswers: true,
				Model: fakeopenai.Options{Script: streamE2EScript, StreamChunk: 6, StreamDelay: 40 * time.Millisecond}}})
			if refused {
				h.fs.Refuse("chat.startStream", "missing_scope")
			}
			root := h.fs.PostUserMessage(accOpen, accAlice, h.mention()+"what does echo say?", "")
			key := h.key(accOpen, root)
			h.keep(key)

			// While the turn runs, the answer shows part of its text.
			var partial fakeslack.Message
			until(t, "part of the answer in the thread", func() (bool, string) {
				for _, m := range h.botMessages(accOpen) {
					if m.ThreadTS == root && strings.HasPrefix(final, m.Text) && len(m.Text) > 0 && len(m.Text) < len(final)/2 {
						partial = m
						return true, ""
					}
				}
				return false, fmt.Sprintf("%d bot messages", len(h.botMessages(accOpen)))
			})
			if partial.Streaming == refused {
				t.Errorf("partial answer %+v: streaming %v, want %v", partial, partial.Streaming, !refused)
			}
			if res := h.answered(t, key, root); res.Status != agentflow.TurnDone {
				t.Fatalf("turn: %+v", res)
			}
			var answers []fakeslack.Message
			until(t, "the answer finished", func() (bool, string) {
				answers = answers[:0]
				for _, m := range h.botMessages(accOpen) {
					if m.ThreadTS == root && strings.Contains(m.Text+string(m.Blocks), "The command ran") {
						answers = append(answers, m)
					}
				}
				return len(answers) == 1 && strings.Contains(string(answers[0].Blocks), "**Done.**") && !answers[0].Streaming,
					fmt.Sprintf("%+v", answers)
			})
			got := answers[0]
			if got.TS != partial.TS || got.Edits < 1 {
				t.Errorf("the answer %s (edits %d) is not the message that streamed (%s)", got.TS, got.Edits, partial.TS)
			}
			for _, m := range h.botMessages(accOpen) {
				if m.ThreadTS == root && strings.Contains(m.Text, "Running the command first") {
					t.Errorf("the preface before the tool call stayed: %+v", m)
				}
			}
			starts, appends, stops := h.fs.Calls("chat.startStream"), h.fs.Calls("chat.appendStream"), h.fs.Calls("chat.stopStream")
			switch {
			case !refused && (starts < 2 || appends < 2 || stops < 2):
				// Two streams: the preface (taken back) and the answer.
				t.Errorf("startStream %d, appendStream %d, stopStream %d: want the preface and the answer streamed", starts, appends, stops)
			case refused && (appends != 0 || h.fs.Calls("chat.update") < 2):
				t.Errorf("refused: appendStream %d, chat.update %d", appends, h.fs.Calls("chat.update"))
			}
			if h.fs.Calls("chat.delete") < 1 {
				t.Errorf("the preface was never deleted")
			}
		})
	}
}
