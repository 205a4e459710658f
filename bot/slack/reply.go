package slackbot

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/slack-go/slack"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
)

// Limits of what one reply posts.
const (
	// maxReplyRunes is the most one message carries: Slack advises at
	// most 4,000 characters; longer answers go out in several messages.
	maxReplyRunes = 3500
	// maxSectionText is the most a section block's text holds, and
	// maxSectionRunes how much of a status text goes in before rendering.
	maxSectionText  = 3000
	maxSectionRunes = 2900
	// maxReplyParts bounds the messages of one reply in a thread.
	maxReplyParts = 10
	// maxWebhookParts bounds the answers through one response_url (Slack
	// takes five within 30 minutes).
	maxWebhookParts = 5
	// controlsBlockID names the actions block of a status message.
	controlsBlockID = "agent_controls"
)

// threadReplier answers an event in its thread: in public with
// chat.postMessage, or with chat.postEphemeral to the person alone.
type threadReplier struct {
	in                      *Inbound
	channel, threadTS, user string
}

// Reply implements bot.Replier.
func (r *threadReplier) Reply(ctx context.Context, resp bot.Response) error {
	for _, p := range r.in.parts(ctx, resp, maxReplyParts) {
		opts := append(p.options(), slack.MsgOptionTS(r.threadTS))
		var err error
		if resp.Private {
			_, err = r.in.poster.PostEphemeralContext(ctx, r.channel, r.user, opts...)
		} else {
			_, _, err = r.in.poster.PostMessageContext(ctx, r.channel, opts...)
		}
		if err != nil {
			return fmt.Errorf("slack: replying in channel %s thread %s: %w", r.channel, r.threadTS, err)
		}
	}
	return nil
}

// slashReplier answers a slash command through its response_url,
// privately unless the response is public; a public answer to "/agent
// new" goes into the thread the adapter opened for the session instead,
// where the status message's controls can find the session.
type slashReplier struct {
	in                         *Inbound
	responseURL, channel, user string
	threadTS                   string // the thread opened for "new", if any
}

// Reply implements bot.Replier.
func (r *slashReplier) Reply(ctx context.Context, resp bot.Response) error {
	if !resp.Private && r.threadTS != "" {
		t := &threadReplier{in: r.in, channel: r.channel, threadTS: r.threadTS, user: r.user}
		return t.Reply(ctx, resp)
	}
	for _, p := range r.in.parts(ctx, resp, maxWebhookParts) {
		if err := r.webhook(ctx, p.text, p.blocks, resp.Private); err != nil {
			return err
		}
	}
	return nil
}

// webhook posts one answer to the response_url.
func (r *slashReplier) webhook(ctx context.Context, text string, blocks []slack.Block, private bool) error {
	if r.responseURL == "" {
		return errors.New("slack: the slash command came without a response_url")
	}
	msg := &slack.WebhookMessage{Text: text, ResponseType: slack.ResponseTypeInChannel}
	if private {
		msg.ResponseType = slack.ResponseTypeEphemeral
	}
	if len(blocks) > 0 {
		msg.Blocks = &slack.Blocks{BlockSet: blocks}
	}
	if err := slack.PostWebhookCustomHTTPContext(ctx, r.responseURL, r.in.out, msg); err != nil {
		return fmt.Errorf("slack: answering a slash command in channel %s: %w", r.channel, err)
	}
	return nil
}

// part is one message of a reply.
type part struct {
	text   string
	blocks []slack.Block
}

func (p part) options() []slack.MsgOption {
	opts := []slack.MsgOption{slack.MsgOptionText(p.text, false), slack.MsgOptionDisableLinkUnfurl()}
	if len(p.blocks) > 0 {
		opts = append(opts, slack.MsgOptionBlocks(p.blocks...))
	}
	return opts
}

// parts renders a response as Slack messages: a status message with
// controls when it is about a session, else its text in as many messages
// as it needs (at most most).
func (in *Inbound) parts(ctx context.Context, resp bot.Response, most int) []part {
	if resp.Session != nil {
		// Escapes and links make the text longer: cut it until the
		// rendered text fits a section block.
		var text string
		for limit := maxSectionRunes; ; limit -= maxSectionRunes / 4 {
			text = in.links.Render(ctx, bot.Truncate(resp.Text, limit))
			if utf8.RuneCountInString(text) <= maxSectionText || limit <= maxSectionRunes/4 {
				break
			}
		}
		if strings.TrimSpace(text) == "" {
			text = Escape(resp.Session.Title)
		}
		return []part{{text: text, blocks: StatusBlocks(text, *resp.Session, resp.WebUI, in.cfg.Backends)}}
	}
	var ps []part
	for _, t := range splitText(resp.Text, maxReplyRunes, most) {
		ps = append(ps, part{text: in.links.Render(ctx, t)})
	}
	return ps
}

// StatusBlocks renders a session's status message: text (Slack mrkdwn,
// already escaped and rendered) and, unless the session is destroyed,
// its controls — a select of backends (ActionSwitch; the current one
// chosen), buttons Fork (ActionFork), Stop (ActionStop), Done
// (ActionDone), and a link to webUI (ActionWebUI) when it is not empty.
// Clicking a control comes back as an interaction the Inbound maps to the
// command of the same name in the message's thread.
func StatusBlocks(text string, v agentflow.SessionView, webUI string, backends []string) []slack.Block {
	blocks := []slack.Block{slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, text, false, false), nil, nil)}
	if v.Status == agentflow.StatusDestroyed {
		return blocks
	}
	var els []slack.BlockElement
	if len(backends) > 0 {
		opts := make([]*slack.OptionBlockObject, 0, min(len(backends), 100))
		var current *slack.OptionBlockObject
		for _, b := range backends[:min(len(backends), 100)] { // Slack's limit
			o := slack.NewOptionBlockObject(b, plain(b), nil)
			if b == v.Backend {
				current = o
			}
			opts = append(opts, o)
		}
		sel := slack.NewOptionsSelectBlockElement(slack.OptTypeStatic, plain("Backend"), ActionSwitch, opts...)
		if current != nil {
			sel = sel.WithInitialOption(current)
		}
		els = append(els, sel)
	}
	els = append(els,
		slack.NewButtonBlockElement(ActionFork, v.ThreadKey, plain("Fork")),
		slack.NewButtonBlockElement(ActionStop, v.ThreadKey, plain("Stop")).WithStyle(slack.StyleDanger),
		slack.NewButtonBlockElement(ActionDone, v.ThreadKey, plain("Pause")),
	)
	if webUI != "" {
		els = append(els, slack.NewButtonBlockElement(ActionWebUI, "", plain("Open in Temporal")).WithURL(webUI))
	}
	return append(blocks, slack.NewActionBlock(controlsBlockID, els...))
}

func plain(s string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.PlainTextType, s, false, false)
}

// splitText cuts s into messages of at most limit characters (bot.Chunk:
// code fences are closed and reopened across a cut); past maxParts the
// rest is left out and the last message says so.
func splitText(s string, limit, maxParts int) []string {
	parts := bot.Chunk(s, limit)
	if len(parts) > maxParts {
		left := len(parts) - maxParts
		parts = parts[:maxParts]
		parts[maxParts-1] += fmt.Sprintf("\n… (%d more messages' worth left out)", left)
	}
	return parts
}
