package terminal

import (
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/agentbot/agentbot/agentflow"
)

// approvalText is what the terminal prints of an approval message
// (agentflow.OutboundApproval) of thread name: while it waits, the
// command, why it asks and what to type; once decided (the same message
// edited), how.
//
//	[main] approval needed (git-push): git push origin main
//	[main] type /approve, /approve --all or /deny (expires 14:05)
//	[main] approved by alice: git push origin main
func approvalText(name string, a agentflow.ApprovalView) string {
	cmd := Visible(a.Command)
	if strings.Contains(cmd, "\n") {
		// A script: its lines under the first, indented.
		cmd = "\n    " + strings.ReplaceAll(cmd, "\n", "\n    ")
	} else {
		cmd = " " + cmd
	}
	switch a.State {
	case agentflow.ApprovalWaiting, "":
		if len(a.Approvers) > 0 && a.Need > len(a.Approvers) {
			return fmt.Sprintf("[%s] approved by %s (%d of %d):%s\n[%s] another person must approve it too: type /approve or /deny%s\n",
				name, strings.Join(a.Approvers, ", "), len(a.Approvers), a.Need, cmd, name, expires(a))
		}
		return fmt.Sprintf("[%s] approval needed (%s):%s\n[%s] type /approve, /approve --all or /deny%s\n",
			name, approvalWhy(a), cmd, name, expires(a))
	case agentflow.ApprovalApproved:
		all := ""
		if a.All {
			all = ", with the rest of this turn's commands"
		}
		return fmt.Sprintf("[%s] approved%s%s:%s\n", name, by(a.DecidedBy), all, cmd)
	case agentflow.ApprovalDenied:
		return fmt.Sprintf("[%s] denied%s:%s\n", name, by(a.DecidedBy), cmd)
	case agentflow.ApprovalExpired:
		return fmt.Sprintf("[%s] not approved in time, not run:%s\n", name, cmd)
	case agentflow.ApprovalCancelled:
		return fmt.Sprintf("[%s] approval cancelled, not run:%s\n", name, cmd)
	}
	return fmt.Sprintf("[%s] approval %s:%s\n", name, Visible(a.State), cmd)
}

// approvalWhy names the rules that ask for the approval, or the mode when
// it asks for every command.
func approvalWhy(a agentflow.ApprovalView) string {
	var rules []string
	for _, f := range a.Findings {
		if r := Visible(f.Rule); r != "" && !slices.Contains(rules, r) {
			rules = append(rules, r)
		}
	}
	if len(rules) == 0 {
		return "approvals " + Visible(a.Mode)
	}
	return strings.Join(rules, ", ")
}

func expires(a agentflow.ApprovalView) string {
	if a.Expires.IsZero() {
		return ""
	}
	return " (expires " + a.Expires.Local().Format("15:04") + ")"
}

func by(who string) string {
	if who == "" {
		return ""
	}
	return " by " + Visible(who)
}

// Visible makes a command safe to show for a decision: control
// characters other than newline and tab, and the bidirectional controls
// that make text read otherwise than it runs, are written as escapes
// (\x1b, \u202e) rather than acted on by the terminal, so that a command
// cannot hide what it does behind a carriage return or a colour.
func Visible(s string) string {
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		switch {
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r < 0x100 && unicode.IsControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r) || bidiControl(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func bidiControl(r rune) bool {
	return (r >= '\u202A' && r <= '\u202E') || (r >= '\u2066' && r <= '\u2069') ||
		r == '\u200E' || r == '\u200F' || r == '\u061C'
}
