package discordbot

import (
	"fmt"
	"strings"
	"time"

	"unicode/utf8"

	"github.com/bwmarrin/discordgo"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
)

// In-chat approvals (issue 18): a shell command the model asked for waits
// until the session's owner (or an admin) approves it. The Sender posts
// an approval message (renderApproval) in the session's channel or thread
// and edits it when the approval is decided; a click on one of its
// buttons comes back, as the member who clicked, as the command "approve
// <id>", "approve <id> --all" or "deny <id>" there. The adapter checks
// nothing more than the ID's shape: who may answer is for the session
// manager to say.

// MaxApprovalID is the longest approval ID a click stands for, as the
// grammar's (bot.MaxApprovalIDLen).
const MaxApprovalID = bot.MaxApprovalIDLen

// maxCustomID is Discord's limit on a component's custom ID.
const maxCustomID = 100

// Words of the approval commands, as the grammar reads them.
const (
	approveVerb = "approve"
	denyVerb    = "deny"
	allOption   = "--all"
)

const (
	maxFindings     = 10
	maxFindingRunes = 200
	maxFindingsText = 700 // of all the findings
	maxApprovers    = 10
)

// approvalCommand is the command text of a click on an approval button,
// whose custom ID is a prefix (ActionApprove, ActionApproveAll,
// ActionDeny), ':' and the approval's ID; "" for any other custom ID, or
// an ID that is no approval ID.
func approvalCommand(customID string) string {
	action, id, ok := strings.Cut(customID, ":")
	if !ok || !bot.ValidApprovalID(id) {
		return ""
	}
	switch action {
	case ActionApprove:
		return approveVerb + " " + id
	case ActionApproveAll:
		return approveVerb + " " + id + " " + allOption
	case ActionDeny:
		return denyVerb + " " + id
	}
	return ""
}

// approvalButtons are the buttons of an approval waiting for an answer;
// nil when its ID cannot make custom IDs.
func approvalButtons(id string) []discordgo.MessageComponent {
	if !bot.ValidApprovalID(id) || len(ActionApproveAll)+1+len(id) > maxCustomID {
		return nil
	}
	return []discordgo.MessageComponent{discordgo.ActionsRow{Components: []discordgo.MessageComponent{
		discordgo.Button{CustomID: ActionApprove + ":" + id, Label: "Approve", Style: discordgo.SuccessButton},
		discordgo.Button{CustomID: ActionApproveAll + ":" + id, Label: "Approve all for this turn", Style: discordgo.PrimaryButton},
		discordgo.Button{CustomID: ActionDeny + ":" + id, Label: "Deny", Style: discordgo.DangerButton},
	}}}
}

// renderApproval renders an approval message: its state and the command
// in a code block, the findings that say why it needs approval, and who
// must approve and when it expires (or, once decided, who decided and
// when), within one message (a long command is cut); and its components:
// while it waits, buttons Approve, Approve all for this turn and Deny
// (custom IDs ActionApprove, ActionApproveAll, ActionDeny, ':' and v.ID),
// else none (an empty slice, so an edit removes them).
func renderApproval(v agentflow.ApprovalView) (string, []discordgo.MessageComponent) {
	comps := []discordgo.MessageComponent{}
	var hint string
	if v.State == agentflow.ApprovalWaiting {
		if b := approvalButtons(v.ID); b != nil {
			comps = b
		} else {
			hint = "\nAnswer with `/" + CommandName + " approve` or `/" + CommandName + " deny`."
		}
	}
	head := bot.ApprovalHeadline(v, approvalStyle)
	tail := ""
	if why := findingsText(v); why != "" {
		tail += "\n" + why
	}
	tail += "\n" + bot.ApprovalOutcome(v, approvalStyle) + hint
	cmd := v.Command
	if strings.TrimSpace(cmd) == "" {
		cmd = "(no command)"
	}
	room := chunkLimit - utf8.RuneCountInString(head) - utf8.RuneCountInString(tail) - len("\n```\n\n```")
	for limit := max(room, 100); ; limit = limit * 3 / 4 {
		content := head + "\n```\n" + bot.BreakFences(bot.Truncate(cmd, limit)) + "\n```" + tail
		if utf8.RuneCountInString(content) <= chunkLimit || limit < 50 {
			return bot.Truncate(content, chunkLimit), comps
		}
	}
}

// escapeMarkdown makes text show as written: Discord's markdown
// characters are escaped with a backslash.
func escapeMarkdown(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune("\\*_~`|<>[]#", r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// findingsText lists why the command needs approval ("rule: reason"), at
// most maxFindings of them; "" when there is nothing to say.
func findingsText(v agentflow.ApprovalView) string {
	if len(v.Findings) == 0 {
		if v.Mode == agentflow.ApprovalAlways {
			return "*This session asks before every shell command.*"
		}
		return ""
	}
	var b strings.Builder
	if v.State == agentflow.ApprovalWaiting {
		b.WriteString("**Why it needs approval:**")
	} else {
		b.WriteString("**Why it needed approval:**")
	}
	for i, f := range v.Findings {
		line := "\n• `" + strings.ReplaceAll(oneLine(f.Rule), "`", "'") + "`"
		if r := bot.Truncate(strings.Join(strings.Fields(f.Reason), " "), maxFindingRunes); r != "" {
			line += ": " + escapeMarkdown(r)
		}
		if i == maxFindings || utf8.RuneCountInString(b.String()+line) > maxFindingsText {
			fmt.Fprintf(&b, "\n• *… and %d more*", len(v.Findings)-i)
			break
		}
		b.WriteString(line)
	}
	return b.String()
}

// approvalStyle writes the people, times and bold of bot.ApprovalOutcome
// and bot.ApprovalHeadline.
var approvalStyle = bot.ApprovalStyle{People: people, Time: func(t time.Time, due bool) string {
	if due {
		return discordTime(t, "R")
	}
	return discordTime(t, "f")
}, Strong: func(s string) string { return "**" + escapeMarkdown(s) + "**" }}

// discordTime is a timestamp Discord shows in the reader's time zone, in
// style ("R": relative, "f": date and time).
func discordTime(t time.Time, style string) string {
	return fmt.Sprintf("<t:%d:%s>", t.Unix(), style)
}

// people names users: a Discord user ID as a mention (messages never
// ping: allowed_mentions is empty), anything else as text.
func people(ids []string) string {
	var names []string
	for i, id := range ids {
		if i == maxApprovers {
			names = append(names, fmt.Sprintf("%d more", len(ids)-i))
			break
		}
		if validSnowflake(id) {
			names = append(names, "<@"+id+">")
		} else {
			names = append(names, escapeMarkdown(oneLine(id)))
		}
	}
	return strings.Join(names, ", ")
}
