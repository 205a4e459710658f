package slackbot

import (
	"context"
	"fmt"
	"strings"
	"time"

	"unicode/utf8"

	"github.com/slack-go/slack"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
)

// In-chat approvals (issue 18): a shell command the model asked for waits
// until the session's owner (or an admin) approves it. The Sender posts
// an approval message (ApprovalBlocks) in the session's thread and edits
// it when the approval is decided; a click on one of its buttons comes
// back, as the person who clicked, as the command "approve <id>",
// "approve <id> --all" or "deny <id>" in that thread. The adapter checks
// nothing more than the ID's shape: who may answer is for the session
// manager to say.

// MaxApprovalID is the longest approval ID a button stands for, as the
// grammar's (bot.MaxApprovalIDLen).
const MaxApprovalID = bot.MaxApprovalIDLen

// Words of the approval commands, as the grammar reads them.
const (
	approveVerb = "approve"
	denyVerb    = "deny"
	allOption   = "--all"
)

// Limits of an approval message.
const (
	// approvalBlockID names the actions block of an approval message.
	approvalBlockID = "agent_approval"
	// maxCommandRunes is the most of a command shown, before escaping.
	maxCommandRunes = 2800
	maxFindings     = 10
	maxFindingRunes = 300
	maxApprovers    = 10
)

// approvalCommand is the command text of a click on an approval button
// (ActionApprove, ActionApproveAll or ActionDeny) carrying id; "" when id
// is no approval ID or the action is another.
func approvalCommand(action, id string) string {
	if !bot.ValidApprovalID(id) {
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

// deliverApproval posts m's approval message, or edits it to its new
// state.
func (s *Sender) deliverApproval(ctx context.Context, d *delivery, m agentflow.Outbound) error {
	v := *m.Approval
	if v.State == agentflow.ApprovalWaiting && !bot.ValidApprovalID(v.ID) {
		s.log.Warn("an approval ID no button can carry; the approval message has no buttons", "thread", m.Thread, "key", m.Key)
	}
	text := strings.TrimSpace(m.Text.Inline)
	if text == "" {
		text = approvalSummary(v)
	}
	return d.putBlocks(ctx, m.Key, s.links.Render(ctx, bot.Truncate(text, s.maxChunk)), ApprovalBlocks(v), true)
}

// approvalSummary is the text of an approval message for notifications,
// when the workflow gave none.
func approvalSummary(v agentflow.ApprovalView) string {
	switch v.State {
	case agentflow.ApprovalWaiting:
		return "Approval needed: the agent wants to run a command."
	case agentflow.ApprovalApproved:
		return "The command was approved."
	case agentflow.ApprovalDenied:
		return "The command was denied."
	case agentflow.ApprovalExpired:
		return "Nobody answered: the command was not run."
	case agentflow.ApprovalCancelled:
		return "The turn was stopped: the command was not run."
	}
	return "Approval: " + v.State
}

// ApprovalBlocks renders an approval message: a section with the state
// and the command in a code block, the findings that say why it needs
// approval, a context line saying who must approve and when it expires
// (or, once decided, who decided and when), and while it waits an actions
// block with buttons Approve (ActionApprove), Approve all for this turn
// (ActionApproveAll) and Deny (ActionDeny), whose value is v.ID. Every
// block fits Slack's limits: a long command is cut.
func ApprovalBlocks(v agentflow.ApprovalView) []slack.Block {
	blocks := []slack.Block{
		slack.NewSectionBlock(mrkdwn(commandSection(v)), nil, nil),
	}
	if why := findingsText(v); why != "" {
		blocks = append(blocks, slack.NewSectionBlock(mrkdwn(why), nil, nil))
	}
	blocks = append(blocks, slack.NewContextBlock("", mrkdwn(bot.ApprovalOutcome(v, approvalStyle))))
	if v.State == agentflow.ApprovalWaiting && bot.ValidApprovalID(v.ID) {
		blocks = append(blocks, slack.NewActionBlock(approvalBlockID,
			slack.NewButtonBlockElement(ActionApprove, v.ID, plain("Approve")).WithStyle(slack.StylePrimary),
			slack.NewButtonBlockElement(ActionApproveAll, v.ID, plain("Approve all for this turn")),
			slack.NewButtonBlockElement(ActionDeny, v.ID, plain("Deny")).WithStyle(slack.StyleDanger),
		))
	}
	return blocks
}

func mrkdwn(s string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.MarkdownType, s, false, false)
}

// commandSection is the headline and the command, cut until the section
// fits Slack's 3,000 characters (escapes make the command longer).
func commandSection(v agentflow.ApprovalView) string {
	head := bot.ApprovalHeadline(v, approvalStyle)
	cmd := v.Command
	if strings.TrimSpace(cmd) == "" {
		cmd = "(no command)"
	}
	var text string
	for limit := maxCommandRunes; ; limit = limit * 3 / 4 {
		text = head + "\n```\n" + bot.BreakFences(Escape(bot.Truncate(cmd, limit))) + "\n```"
		if utf8.RuneCountInString(text) <= maxSectionText || limit < 100 {
			return text
		}
	}
}

// findingsText lists why the command needs approval ("rule: reason"), at
// most maxFindings of them; "" when there is nothing to say.
func findingsText(v agentflow.ApprovalView) string {
	if len(v.Findings) == 0 {
		if v.Mode == agentflow.ApprovalAlways {
			return "_This session asks before every shell command._"
		}
		return ""
	}
	var b strings.Builder
	if v.State == agentflow.ApprovalWaiting {
		b.WriteString("*Why it needs approval:*")
	} else {
		b.WriteString("*Why it needed approval:*")
	}
	for i, f := range v.Findings {
		line := "\n• `" + strings.ReplaceAll(Escape(oneLine(f.Rule, 60)), "`", "'") + "`"
		if r := oneLine(f.Reason, maxFindingRunes); r != "" {
			line += ": " + Escape(r)
		}
		if i == maxFindings || b.Len()+len(line) > maxSectionText-100 {
			fmt.Fprintf(&b, "\n• _… and %d more_", len(v.Findings)-i)
			break
		}
		b.WriteString(line)
	}
	return b.String()
}

// approvalStyle writes the people, times and bold of bot.ApprovalOutcome
// and bot.ApprovalHeadline.
var approvalStyle = bot.ApprovalStyle{People: people, Time: func(t time.Time, _ bool) string { return slackTime(t) },
	Strong: func(s string) string { return "*" + Escape(strings.ReplaceAll(s, "*", "")) + "*" }}

// slackTime shows t in the reader's time zone (a date token), with UTC as
// the fallback.
func slackTime(t time.Time) string {
	return fmt.Sprintf("<!date^%d^{date_short_pretty} at {time}|%s>", t.Unix(), t.UTC().Format("2006-01-02 15:04 UTC"))
}

// people names users: a Slack user ID as a mention, anything else as
// text.
func people(ids []string) string {
	var names []string
	for i, id := range ids {
		if i == maxApprovers {
			names = append(names, fmt.Sprintf("%d more", len(ids)-i))
			break
		}
		if validChannel(id) {
			names = append(names, "<@"+id+">")
		} else {
			names = append(names, Escape(oneLine(id, 80)))
		}
	}
	return strings.Join(names, ", ")
}
