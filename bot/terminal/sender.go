// Package terminal is the line-based terminal chat of agentbot: a full chat
// adapter (it receives commands and messages, and it delivers the sessions'
// outbound messages), used by the embedded default and by tests to drive the
// bot core with no chat platform.
//
// Thread keys are "term:<name>". The terminal shows one thread at a time;
// messages of other threads are printed with their thread's name. What it
// prints is plain text: the bot's chat markup and the model's Markdown go
// through Plain.
package terminal

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"

	"github.com/agentbot/agentbot/agentflow"
)

// Sender delivers sessions' outbound messages to a terminal (any
// io.Writer). It implements agentflow.ChatSender and agentflow.ThreadCreator.
// A terminal cannot edit what it printed, so a progress message prints one
// line per tool state change; a repeated delivery of the same key and
// content prints nothing (activity retries stay silent).
type Sender struct {
	mu       sync.Mutex
	w        io.Writer
	last     map[string]string        // outbound key → what was printed last
	answered map[string]chan struct{} // message ID → closed once its answer printed
}

// NewSender returns a Sender printing to w.
func NewSender(w io.Writer) *Sender {
	return &Sender{w: w, last: map[string]string{}, answered: map[string]chan struct{}{}}
}

// Deliver prints m. Answers and notices are shown as plain text (Plain);
// progress lines show a tool's command and outcome as they are, since they
// are not markup ("echo `date`" is a command, not code in a sentence). An
// approval prints the command that waits, with its control characters as
// escapes (Visible), why it waits and what to type; the edit that decides
// it prints the decision.
func (s *Sender) Deliver(ctx context.Context, m agentflow.Outbound) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := strings.TrimPrefix(m.Thread, "term:")
	var text string
	switch m.Kind {
	case agentflow.OutboundProgress:
		var b strings.Builder
		for _, t := range m.Tools {
			line := fmt.Sprintf("[%s] · %s (%s", name, t.Summary, t.State)
			if t.Detail != "" {
				line += ": " + t.Detail
			}
			line += ")\n"
			key := m.Key + "/" + t.ID + "/" + t.State
			if s.last[key] == "" {
				s.last[key] = line
				b.WriteString(line)
			}
		}
		text = b.String()
		if text == "" {
			return nil
		}
		_, err := io.WriteString(s.w, text)
		return err
	case agentflow.OutboundAnswer:
		text = fmt.Sprintf("[%s] agent:%s\n", name, answerText(m.Text.Inline))
		defer s.markAnswered(m.MessageIDs)
	case agentflow.OutboundTitle:
		return nil // the command's own answer says it
	case agentflow.OutboundApproval:
		if m.Approval == nil {
			if strings.TrimSpace(m.Text.Inline) == "" {
				return nil
			}
			text = fmt.Sprintf("[%s] * %s\n", name, Plain(m.Text.Inline))
			break
		}
		// Edited when decided (same key): the decision prints.
		text = approvalText(name, *m.Approval)
	default:
		if strings.TrimSpace(m.Text.Inline) == "" {
			return nil
		}
		text = fmt.Sprintf("[%s] * %s\n", name, Plain(m.Text.Inline))
	}
	if s.last[m.Key] == text {
		return nil
	}
	s.last[m.Key] = text
	_, err := io.WriteString(s.w, text)
	return err
}

// Answered returns a channel that is closed once the answer to the message
// with this ID was printed: the terminal's chat waits on it instead of
// asking the session (in the embedded default the sender runs in the same
// process). Each ID is waited for once.
func (s *Sender) Answered(id string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.answered[id]
	if !ok {
		c = make(chan struct{})
		s.answered[id] = c
	}
	return c
}

// Forget drops what Answered keeps for id (its wait ended another way).
func (s *Sender) Forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.answered, id)
}

// markAnswered closes the channels of ids; s.mu is held. An answer that
// comes before anyone waits leaves a closed channel for Answered to find.
func (s *Sender) markAnswered(ids []string) {
	for _, id := range ids {
		c, ok := s.answered[id]
		if !ok {
			c = make(chan struct{})
			s.answered[id] = c
		}
		select {
		case <-c:
		default:
			close(c)
		}
	}
}

// CreateThread names a new terminal thread after the fork's title and the
// request: the same requestID always gives the same thread, in this process
// or after a restart, and different requests never share one.
func (s *Sender) CreateThread(ctx context.Context, sourceThread, title, requestID string) (string, error) {
	base := slug(title)
	if base == "" {
		base = slug(strings.TrimPrefix(sourceThread, "term:")) + "-fork"
	}
	sum := sha256.Sum256([]byte(sourceThread + "\x00" + requestID))
	return fmt.Sprintf("term:%s-%x", base, sum[:3]), nil
}

var nonSlug = regexp.MustCompile(`[^a-z0-9]+`)

func slug(s string) string {
	s = nonSlug.ReplaceAllString(strings.ToLower(s), "-")
	s = strings.Trim(s, "-")
	if len(s) > 40 {
		s = strings.TrimRight(s[:40], "-")
	}
	return s
}

// answerText is a model's answer (Markdown) as the terminal shows it after
// "agent:": plain, on the next line when it starts with code, so that the
// code keeps its indentation.
func answerText(answer string) string {
	text := Plain(answer)
	if strings.HasPrefix(text, codeIndent) {
		return "\n" + text
	}
	return " " + text
}
