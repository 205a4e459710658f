package bot

import (
	"fmt"

	"github.com/agentbot/agentbot/agentflow"
)

// ProgressStatus is the first line of a turn's progress message, the same
// on every platform: a marker, the turn and its state, and how many tool
// calls it made. escape makes an unknown status safe for the platform.
func ProgressStatus(m agentflow.Outbound, escape func(string) string) string {
	turn := "Turn"
	if m.Turn > 0 {
		turn = fmt.Sprintf("Turn %d", m.Turn)
	}
	var line string
	switch m.Status {
	case agentflow.TurnDone:
		line = "✅ " + turn + " done"
	case agentflow.TurnFailed:
		line = "❌ " + turn + " failed"
	case agentflow.TurnStopped:
		line = "⏹️ " + turn + " stopped"
	case agentflow.TurnStepCap:
		line = "⚠️ " + turn + " reached the step limit"
	case agentflow.TurnCanceled:
		line = "🚫 " + turn + " canceled: the session was destroyed"
	case agentflow.TurnRunning, "":
		if m.Final {
			line = "✅ " + turn + " finished"
		} else {
			line = "🔄 " + turn + ": working…"
		}
	default:
		line = "• " + turn + ": " + escape(string(m.Status))
	}
	if n := len(m.Tools); n > 0 {
		s := "s"
		if n == 1 {
			s = ""
		}
		line += fmt.Sprintf(" · %d tool call%s", n, s)
	}
	return line
}

// ToolMarker is the marker of a tool call's state in progress messages.
func ToolMarker(state string) string {
	switch state {
	case "pending":
		return "⏳"
	case "running":
		return "🔄"
	case "done":
		return "✅"
	case "failed":
		return "❌"
	case "cancelled", "canceled":
		return "⏹️"
	case "approval":
		return "✋"
	case "denied":
		return "🚫"
	}
	return "•"
}
