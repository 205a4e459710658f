package slackbot

import (
	"context"
	"strings"
	"sync"

	"github.com/slack-go/slack"

	"github.com/agentbot/agentbot/bot"
)

// onHomeOpened publishes the home of the person who opened the Home tab
// (app_home_opened, tab "home"), and remembers that they did, so that the
// Sender of this process keeps it up to date.
func (in *Inbound) onHomeOpened(ctx context.Context, id *identity, env envelope) {
	m := env.Event
	home := in.cfg.Home
	if home == nil || m.Tab != "home" || m.User == "" || m.User == id.user || !validUser(m.User) {
		in.log.Debug("ignored an app_home_opened", "event_id", env.EventID, "tab", m.Tab)
		return
	}
	home.opened(id.team, m.User)
	pctx, cancel := context.WithTimeout(ctx, homeCallTimeout)
	defer cancel()
	if err := home.publish(pctx, in.api, in.links, id.team, m.User, homeNote{}, nil); err != nil {
		in.log.Warn("publishing a home failed", "user", m.User, "error", err)
	}
}

// onHomeAction handles a click on a button of someone's App Home: each
// action is the command of the same name (homeVerb) in the thread its
// value names, as the person who clicked, through the same Handler (the
// Router) and so the same checks as the thread's own buttons. The home is
// then published again, with the Handler's answer on top.
func (in *Inbound) onHomeAction(ctx context.Context, id *identity, cb slack.InteractionCallback) {
	home, user := in.cfg.Home, cb.User.ID
	if home == nil || !validUser(user) {
		in.log.Debug("ignored a click in an app home", "trigger_id", cb.TriggerID)
		return
	}
	var fresh []string
	r := &homeReplier{}
	for _, a := range cb.ActionCallback.BlockActions {
		verb := homeVerb(a.ActionID)
		thread, ok := homeThread(id, a.Value)
		if verb == "" || !ok {
			continue // the thread link, or not ours
		}
		_, channel, _, _ := ParseThreadKey(thread)
		ev := bot.Event{ID: a.ActionTs + ":" + user, Platform: Platform, Kind: bot.KindCommand,
			ThreadKey: thread, Channel: channel, User: user, Text: string(verb)}
		ev.UserName = in.userName(ctx, user)
		in.dispatch(ctx, ev, r)
		fresh = append(fresh, thread)
	}
	if len(fresh) == 0 {
		return
	}
	home.opened(id.team, user) // they are looking at it
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), homeCallTimeout)
	defer cancel()
	note := r.note()
	note.text = in.links.Render(pctx, oneLine(note.text, maxHomeNote))
	if err := home.publish(pctx, in.api, in.links, id.team, user, note, fresh); err != nil {
		in.log.Warn("publishing a home after a click failed", "user", user, "error", err)
	}
}

// homeThread is the thread key a home button's value names, when it is a
// Slack thread of the bot's own team with Slack-shaped IDs.
func homeThread(id *identity, value string) (string, bool) {
	team, channel, ts, err := ParseThreadKey(value)
	if err != nil || team != id.team || !validChannel(channel) || !validTS(ts) {
		return "", false
	}
	return ThreadKey(team, channel, ts), true
}

// validUser says s is shaped like a Slack user ID (letters and digits).
func validUser(s string) bool { return validChannel(s) }

// homeReplier keeps the answers to a home's clicks, which have no thread
// to go to. The private ones (a refusal, a failure, "nothing was running")
// are shown on top of the home published next; the others say what the
// session will do, which the home itself then shows (and the session
// says in its thread).
type homeReplier struct {
	mu    sync.Mutex
	texts []string
}

// Reply implements bot.Replier.
func (r *homeReplier) Reply(_ context.Context, resp bot.Response) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t := strings.TrimSpace(resp.Text); t != "" && resp.Private {
		r.texts = append(r.texts, t)
	}
	return nil
}

// note is what the home says of the clicks: the private answers, as a
// warning.
func (r *homeReplier) note() homeNote {
	r.mu.Lock()
	defer r.mu.Unlock()
	return homeNote{text: strings.Join(r.texts, " "), warn: len(r.texts) > 0}
}
