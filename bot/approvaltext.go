package bot

import (
	"fmt"
	"strings"
	"time"

	"github.com/agentbot/agentbot/agentflow"
)

// ApprovalStyle is how a platform writes the people and times of an
// approval line.
type ApprovalStyle struct {
	// People names users (mentions where the platform has them).
	People func(ids []string) string
	// Time writes a time; due says it is a deadline (a platform may show
	// it relative to now).
	Time func(t time.Time, due bool) string
	// Strong writes a short label in bold, escaped as the platform needs.
	Strong func(label string) string
}

// ApprovalHeadline is the first lines of an approval message: its state
// (an emoji and a bold word), its turn, and what the agent asks. style
// writes the bold.
func ApprovalHeadline(v agentflow.ApprovalView, style ApprovalStyle) string {
	var h string
	switch v.State {
	case agentflow.ApprovalWaiting:
		h = "🔐 " + style.Strong("Approval needed")
	case agentflow.ApprovalApproved:
		h = "✅ " + style.Strong("Approved")
	case agentflow.ApprovalDenied:
		h = "🚫 " + style.Strong("Denied")
	case agentflow.ApprovalExpired:
		h = "⌛ " + style.Strong("Expired")
	case agentflow.ApprovalCancelled:
		h = "⏹️ " + style.Strong("Cancelled")
	default:
		h = "• " + style.Strong(Truncate(strings.Join(strings.Fields(v.State), " "), 40))
	}
	if v.Turn > 0 {
		h += fmt.Sprintf(" · turn %d", v.Turn)
	}
	if v.State == agentflow.ApprovalWaiting {
		return h + "\nThe agent wants to run this command:"
	}
	return h + "\nThe agent asked to run this command:"
}

// BreakFences keeps text inside a code block: Slack and Discord end a
// block at the first "```", so runs of backticks are broken with
// zero-width spaces (a command reads the same).
func BreakFences(s string) string {
	for strings.Contains(s, "``") {
		s = strings.ReplaceAll(s, "``", "`\u200b`")
	}
	return s
}

// ApprovalOutcome is the line under an approval message: who must approve
// and until when while it waits, else how it was decided and by whom. The
// words are the same on every platform; style writes people and times.
func ApprovalOutcome(v agentflow.ApprovalView, style ApprovalStyle) string {
	at := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return ", " + style.Time(t, false)
	}
	by := v.DecidedBy
	switch v.State {
	case agentflow.ApprovalWaiting:
		s := "Needs an approval by the session's owner or an admin"
		if v.Need > 1 {
			s = fmt.Sprintf("Needs %d approvals by different people (the session's owner or admins)", v.Need)
			if n := len(v.Approvers); n > 0 {
				s += fmt.Sprintf("; %d so far: %s", n, style.People(v.Approvers))
			}
		}
		if !v.Expires.IsZero() {
			s += " · expires " + style.Time(v.Expires, true)
		}
		return s + "."
	case agentflow.ApprovalApproved:
		s := "Approved"
		if len(v.Approvers) > 0 {
			s += " by " + style.People(v.Approvers)
		} else if by != "" {
			s += " by " + style.People([]string{by})
		}
		s += at(v.DecidedAt)
		if v.All {
			s += ", with the rest of this turn's commands"
		}
		return s + "."
	case agentflow.ApprovalDenied:
		s := "Denied"
		if by != "" {
			s += " by " + style.People([]string{by})
		}
		return s + at(v.DecidedAt) + ". The command was not run."
	case agentflow.ApprovalExpired:
		when := v.DecidedAt
		if when.IsZero() {
			when = v.Expires
		}
		s := "Nobody answered"
		if !when.IsZero() {
			s += " by " + style.Time(when, false)
		}
		return s + ". The command was not run."
	case agentflow.ApprovalCancelled:
		s := "The turn was stopped"
		if by != "" {
			s += " by " + style.People([]string{by})
		}
		return s + at(v.DecidedAt) + " before an answer. The command was not run."
	}
	return "The command was not run."
}
