package slackbot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
)

// envelope is an Events API delivery: the body of an HTTP request to
// /slack/events, and the payload of a Socket Mode "events_api" envelope.
type envelope struct {
	Type      string `json:"type"`
	Challenge string `json:"challenge"`
	TeamID    string `json:"team_id"`
	EventID   string `json:"event_id"`
	Event     inner  `json:"event"`
	// Retry says Slack delivers the event again (X-Slack-Retry-Num, a
	// Socket Mode retry_attempt): the first delivery may have been
	// acknowledged by a process that died before handing it on.
	Retry bool `json:"-"`
}

// inner is the part of an app_mention or message event the adapter reads.
type inner struct {
	Type        string          `json:"type"`
	SubType     string          `json:"subtype"`
	User        string          `json:"user"`
	BotID       string          `json:"bot_id"`
	Text        string          `json:"text"`
	TS          string          `json:"ts"`
	ThreadTS    string          `json:"thread_ts"`
	Channel     string          `json:"channel"`
	ChannelType string          `json:"channel_type"`
	Edited      json.RawMessage `json:"edited"`
	Files       []sharedFile    `json:"files"`
	// Title and PreviousTitle are of agent_session_title_changed.
	Title         string `json:"title"`
	PreviousTitle string `json:"previous_title"`
	// Tab is the App Home tab an app_home_opened is about ("home").
	Tab string `json:"tab"`
}

// sharedFile is a file attached to a message.
type sharedFile struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Title       string `json:"title"`
	Size        int64  `json:"size"`
	URLPrivate  string `json:"url_private"`
	URLDownload string `json:"url_private_download"`
	// FileAccess "check_file_info" means Slack left the details out: ask
	// files.info.
	FileAccess string `json:"file_access"`
	Mode       string `json:"mode"` // "tombstone" for a deleted file
}

// onCallback handles one acknowledged Events API callback.
func (in *Inbound) onCallback(ctx context.Context, env envelope) {
	id, err := in.identity(ctx)
	if err != nil {
		in.log.Error("cannot handle a slack event without knowing the bot", "event_id", env.EventID, "error", err)
		return
	}
	if env.Type == "event_callback" && env.Event.Type == "app_home_opened" {
		in.onHomeOpened(ctx, id, env) // no command: the home is published (homeinbound.go)
		return
	}
	ev, ok := eventOf(id, env)
	if !ok {
		in.log.Debug("ignored a slack event", "event_id", env.EventID, "type", env.Event.Type, "subtype", env.Event.SubType)
		return
	}
	ev.UserName = in.userName(ctx, ev.User)
	ev.Retry = env.Retry
	if ev.Kind != bot.KindCommand {
		ev.Files = in.files(ctx, env.Event.Files)
	}
	_, _, root, _ := ParseThreadKey(threadOf(ev))
	in.dispatch(ctx, ev, &threadReplier{in: in, channel: ev.Channel, threadTS: root, user: ev.User})
}

// eventOf maps an Events API callback to a bot.Event; ok is false for
// events the bot ignores.
func eventOf(id *identity, env envelope) (ev bot.Event, ok bool) {
	m := env.Event
	if env.Type == "event_callback" && strings.HasPrefix(m.Type, "agent_session_") {
		return agentSessionEventOf(id, env) // they have no ts (agentsession.go)
	}
	// Slack's own IDs only: they become the thread key.
	if env.Type != "event_callback" || !validChannel(m.Channel) || !validTS(m.TS) || (m.ThreadTS != "" && !validTS(m.ThreadTS)) {
		return bot.Event{}, false
	}
	switch m.Type {
	case "app_mention":
		return mentionOf(id, env)
	case "message":
		return messageOf(id, env)
	}
	return bot.Event{}, false
}

// base fills what every message-like event has, and the thread: a reply
// in a thread gets ThreadKey; a message in the channel gets NewThreadKey,
// the thread under itself.
func base(id *identity, env envelope) bot.Event {
	m := env.Event
	ev := bot.Event{ID: env.EventID, Platform: Platform, Channel: m.Channel, User: m.User, MessageID: m.TS}
	if inThread(m) {
		ev.ThreadKey = ThreadKey(id.team, m.Channel, m.ThreadTS)
		ev.ThreadStarted = tsTime(m.ThreadTS)
	} else {
		ev.NewThreadKey = ThreadKey(id.team, m.Channel, m.TS)
	}
	return ev
}

func inThread(m inner) bool { return m.ThreadTS != "" && m.ThreadTS != m.TS }

// tsTime is the time of a Slack message timestamp ("1712345678.000200");
// zero when it is not one.
func tsTime(ts string) time.Time {
	sec, frac, _ := strings.Cut(ts, ".")
	s, err := strconv.ParseInt(sec, 10, 64)
	if err != nil || s <= 0 {
		return time.Time{}
	}
	us, _ := strconv.ParseInt((frac + "000000")[:6], 10, 64)
	return time.Unix(s, us*1000)
}

// mentionOf maps app_mention: a command when the text after the mention
// is one (bot.Trigger), else a mention with the mention removed.
func mentionOf(id *identity, env envelope) (bot.Event, bool) {
	m := env.Event
	// Mentions by bots (this one included) are never acted on: two bots
	// mentioning each other would never stop. An edit that keeps a
	// mention is delivered again; the first delivery was the one meant.
	if m.User == "" || m.BotID != "" || m.User == id.user || (len(m.Edited) > 0 && string(m.Edited) != "null") {
		return bot.Event{}, false
	}
	ev := base(id, env)
	if rest, ok := bot.Trigger(m.Text, "<@"+id.user+">"); ok {
		ev.Kind = bot.KindCommand
		ev.Text = unescape(strings.TrimSpace(id.strip(rest)))
		return ev, true
	}
	ev.Kind = bot.KindMention
	ev.Text = unescape(strings.TrimSpace(id.strip(m.Text)))
	return ev, true
}

// messageOf maps a plain message event (message.channels, message.groups).
func messageOf(id *identity, env envelope) (bot.Event, bool) {
	m := env.Event
	if m.User == "" || m.BotID != "" || m.SubType == "bot_message" || m.User == id.user {
		return bot.Event{}, false
	}
	switch m.SubType {
	case "", "file_share", "thread_broadcast":
	default: // edits, deletions, joins, topic changes...
		return bot.Event{}, false
	}
	switch m.ChannelType {
	case "", "channel", "group":
	default:
		return bot.Event{}, false
	}
	// Slack sends both a message and an app_mention for a message that
	// mentions the bot; it must count once, so the app_mention carries it.
	if id.mentions(m.Text) {
		return bot.Event{}, false
	}
	ev := base(id, env)
	if rest, ok := bot.Trigger(m.Text, ""); ok {
		ev.Kind = bot.KindCommand
		ev.Text = unescape(rest)
		return ev, true
	}
	if !inThread(m) {
		return bot.Event{}, false // people talking in the channel
	}
	ev.Kind = bot.KindMessage
	ev.Text = unescape(m.Text)
	return ev, true
}

// files describes the files shared with a message for the session, which
// fetches them into the workspace with the worker's own token (the
// sender's FileFetcher): URLs only, never a credential. A file whose
// details Slack left out is looked up with files.info; one that cannot be
// is still listed, without a URL, so the agent hears of it.
func (in *Inbound) files(ctx context.Context, shared []sharedFile) []agentflow.InboundFile {
	var out []agentflow.InboundFile
	for _, f := range shared {
		if f.Mode == "tombstone" {
			continue
		}
		if (f.URLDownload == "" && f.URLPrivate == "") || f.FileAccess == "check_file_info" {
			info, _, _, err := in.api.GetFileInfoContext(ctx, f.ID, 0, 0)
			if err != nil {
				in.log.Warn("files.info failed for a shared file", "file_id", f.ID, "error", err)
			} else {
				f = sharedFile{ID: info.ID, Name: info.Name, Title: info.Title, Size: int64(info.Size),
					URLPrivate: info.URLPrivate, URLDownload: info.URLPrivateDownload}
			}
		}
		name := firstOf(f.Name, f.Title, f.ID)
		out = append(out, agentflow.InboundFile{Name: name, URL: firstOf(f.URLDownload, f.URLPrivate), Size: f.Size})
	}
	return out
}

// strip removes the bot's mentions from text.
func (id *identity) strip(text string) string {
	return id.mention.ReplaceAllString(text, "")
}

// mentions reports whether text mentions the bot.
func (id *identity) mentions(text string) bool {
	return id.mention.MatchString(text)
}

// slashEvent is the event of a slash command, before any thread is opened
// for it; ok is false when its channel is no Slack channel ID.
func slashEvent(cmd slack.SlashCommand) (ev bot.Event, ok bool) {
	if !validChannel(cmd.ChannelID) {
		return ev, false
	}
	return bot.Event{ID: cmd.TriggerID, Platform: Platform, Kind: bot.KindCommand, Channel: cmd.ChannelID,
		User: cmd.UserID, Text: strings.TrimSpace(unescape(cmd.Text))}, true
}

// onSlash handles one acknowledged slash command ("/agent <text>").
func (in *Inbound) onSlash(ctx context.Context, cmd slack.SlashCommand) {
	id, err := in.identity(ctx)
	if err != nil {
		in.log.Error("cannot handle a slash command without knowing the bot", "trigger_id", cmd.TriggerID, "error", err)
		return
	}
	ev, ok := slashEvent(cmd)
	if !ok {
		in.log.Warn("ignored a slash command from a channel that is no Slack channel ID", "trigger_id", cmd.TriggerID)
		return
	}
	text := ev.Text
	ev.UserName = in.userName(ctx, cmd.UserID)
	r := &slashReplier{in: in, responseURL: cmd.ResponseURL, channel: cmd.ChannelID, user: cmd.UserID}
	if parsed, err := bot.Parse(text, in.cfg.Backends); err == nil {
		switch parsed.Verb {
		case bot.VerbNew:
			// Slack refuses slash commands in threads, so a session
			// started by one needs a thread: open it under a message of
			// the bot's own, before the Router starts the session there.
			if in.cfg.Access != nil && !in.cfg.Access.Allowed(ev) {
				break // the Router refuses it; post nothing for them
			}
			_, ts, err := in.poster.PostMessageContext(ctx, cmd.ChannelID,
				slack.MsgOptionText(fmt.Sprintf("Session started by <@%s>", cmd.UserID), false))
			if err != nil {
				in.log.Warn("could not open a thread for /agent new", "channel", cmd.ChannelID, "error", err)
				msg := fmt.Sprintf("I couldn't start a thread in this channel (%s). Invite me with `/invite <@%s>` and try again.",
					slackError(err), id.user)
				if rerr := r.webhook(ctx, msg, nil, true); rerr != nil {
					in.log.Warn("answering a slash command failed", "trigger_id", cmd.TriggerID, "error", rerr)
				}
				return
			}
			ev.NewThreadKey = ThreadKey(id.team, cmd.ChannelID, ts)
			r.threadTS = ts
		case bot.VerbList, bot.VerbPolicy, bot.VerbAudit:
			// They need only the tenant; the Router reads it from
			// NewThreadKey. The key names the channel, not a thread.
			ev.NewThreadKey = ThreadKey(id.team, cmd.ChannelID, "")
		}
	}
	in.dispatch(ctx, ev, r)
}

// slackError is the short code of a Web API error ("not_in_channel").
func slackError(err error) string {
	var se slack.SlackErrorResponse
	if errors.As(err, &se) && se.Err != "" {
		return se.Err
	}
	s := err.Error()
	if len(s) > 60 {
		s = s[:60] + "…"
	}
	return s
}

// onInteraction handles one acknowledged interactivity payload: the
// status message's controls, an approval message's buttons and the "Fork
// from here" shortcut.
func (in *Inbound) onInteraction(ctx context.Context, cb slack.InteractionCallback) {
	id, err := in.identity(ctx)
	if err != nil {
		in.log.Error("cannot handle an interaction without knowing the bot", "trigger_id", cb.TriggerID, "error", err)
		return
	}
	if cb.Type == slack.InteractionTypeBlockActions && cb.View.Type == slack.VTHomeTab {
		in.onHomeAction(ctx, id, cb) // a button of the App Home (homeinbound.go)
		return
	}
	for _, ev := range interactionEvents(id, cb) {
		ev.UserName = in.userName(ctx, ev.User)
		_, _, root, _ := ParseThreadKey(ev.ThreadKey)
		in.dispatch(ctx, ev, &threadReplier{in: in, channel: ev.Channel, threadTS: root, user: ev.User})
	}
}

// interactionEvents maps an interactivity payload to command events.
func interactionEvents(id *identity, cb slack.InteractionCallback) []bot.Event {
	channel := cb.Channel.ID
	if channel == "" {
		channel = cb.Container.ChannelID
	}
	if !validChannel(channel) || cb.User.ID == "" {
		return nil
	}
	switch cb.Type {
	case slack.InteractionTypeBlockActions:
		root := firstOf(cb.Message.ThreadTimestamp, cb.Container.ThreadTs, cb.Message.Timestamp, cb.Container.MessageTs)
		if !validTS(root) {
			return nil
		}
		var evs []bot.Event
		for _, a := range cb.ActionCallback.BlockActions {
			text := actionCommand(a)
			if text == "" {
				continue // the Web UI link button, or not ours
			}
			evs = append(evs, bot.Event{ID: a.ActionTs + ":" + cb.User.ID, Platform: Platform, Kind: bot.KindCommand,
				ThreadKey: ThreadKey(id.team, channel, root), Channel: channel, User: cb.User.ID, Text: text})
		}
		return evs
	case slack.InteractionTypeMessageAction:
		if cb.CallbackID != ShortcutForkFromID {
			return nil
		}
		root := firstOf(cb.Message.ThreadTimestamp, cb.Message.Timestamp, cb.MessageTs)
		if !validTS(root) {
			return nil
		}
		return []bot.Event{{ID: cb.TriggerID, Platform: Platform, Kind: bot.KindCommand,
			ThreadKey: ThreadKey(id.team, channel, root), Channel: channel, User: cb.User.ID, Text: string(bot.VerbFork)}}
	}
	return nil
}

// actionCommand is the command a control of the status message, or a
// button of an approval message, stands for; "" for none.
func actionCommand(a *slack.BlockAction) string {
	switch a.ActionID {
	case ActionSwitch:
		b := strings.TrimSpace(a.SelectedOption.Value)
		if b == "" || strings.ContainsAny(b, " \t\n") {
			return ""
		}
		return string(bot.VerbSwitch) + " " + b
	case ActionFork:
		return string(bot.VerbFork)
	case ActionStop:
		return string(bot.VerbStop)
	case ActionDone:
		return string(bot.VerbDone)
	case ActionApprove, ActionApproveAll, ActionDeny:
		return approvalCommand(a.ActionID, a.Value)
	}
	return ""
}

func firstOf(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
