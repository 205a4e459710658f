package tui

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/agentflow/llm"
)

// itemKind is what a line of the transcript is.
type itemKind int

const (
	itemUser   itemKind = iota // what the person typed
	itemAnswer                 // the agent's answer (Markdown)
	itemTool                   // one tool call
	itemNotice                 // what the bot said (command replies, notices)
	itemError                  // something went wrong
)

// item is one entry of the transcript view.
type item struct {
	kind itemKind
	text string
	turn int
	tool *toolRow
	// key dedupes deliveries (an outbound's key, a message ID).
	key string
	// rendered is the item as last drawn, at width; "" to draw again.
	rendered string
	width    int
}

// toolRow is a tool call as the view shows it.
type toolRow struct {
	st agentflow.ToolStatus
	// args and output, once read from the conversation; loaded says so.
	args, output string
	loaded       bool
	expanded     bool
	// loadErr says why the whole output cannot be shown.
	loadErr string
}

// conversationItems turns a session's conversation into transcript items:
// the person's messages, tool calls with their outputs, the answers.
// System text is left out.
func conversationItems(msgs []llm.Message) []item {
	var items []item
	calls := map[string]*toolRow{}
	turn := 0
	for _, m := range msgs {
		switch m.Role {
		case llm.RoleUser:
			turn++
			items = append(items, item{kind: itemUser, text: m.Content, turn: turn})
		case llm.RoleAssistant:
			for _, c := range m.ToolCalls {
				row := &toolRow{st: agentflow.ToolStatus{ID: c.ID, Name: c.Name, Summary: agentflow.CallSummary(c.Name, c.Arguments), State: "done"},
					args: prettyArgs(c.Arguments), loaded: true}
				calls[c.ID] = row
				items = append(items, item{kind: itemTool, turn: turn, tool: row, key: toolKey(turn, c.ID)})
			}
			if strings.TrimSpace(m.Content) != "" && len(m.ToolCalls) == 0 {
				items = append(items, item{kind: itemAnswer, text: m.Content, turn: turn})
			}
		case llm.RoleTool:
			if row := calls[m.ToolCallID]; row != nil {
				row.output = m.Content
				row.st.Head, row.st.Lines = headOf(m.Content)
				if strings.HasPrefix(m.Content, "exit code: ") && !strings.HasPrefix(m.Content, "exit code: 0\n") ||
					strings.HasPrefix(m.Content, "the tool could not run") || strings.HasPrefix(m.Content, "timed out") {
					row.st.State = "failed"
				}
				if strings.HasPrefix(m.Content, "not run:") || strings.HasPrefix(m.Content, "stopped by the user") {
					row.st.State = "cancelled"
				}
			}
		}
	}
	return items
}

// prettyArgs indents a call's JSON arguments for reading.
func prettyArgs(raw string) string {
	var v any
	if json.Unmarshal([]byte(raw), &v) != nil {
		return raw
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return raw
	}
	return string(b)
}

// headOf is the first line of a tool output past the lines the tool adds
// ("exit code: 0", "stdout:"), and how many lines the output has.
func headOf(out string) (string, int) {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	n := 0
	head := ""
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "exit code:") || t == "stdout:" || t == "stderr:" {
			continue
		}
		n++
		if head == "" && t != "" {
			head = oneLine(t, 120)
		}
	}
	return head, n
}

func toolKey(turn int, id string) string { return fmt.Sprintf("%d/%s", turn, id) }

// oneLine squeezes s to one line of at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// since is how long ago t was, short ("4m", "2h", "3d").
func since(t, now time.Time) string {
	if t.IsZero() {
		return "—"
	}
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return "now"
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd ago", int(d/(24*time.Hour)))
}
