package discordbot

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bwmarrin/discordgo"

	"github.com/agentbot/agentbot/bot"
)

// maxInteractionBody bounds a signed interaction request.
const maxInteractionBody = 1 << 20

// ackTimeout bounds the deferred response to a gateway interaction:
// Discord drops interactions unanswered after 3 seconds.
const ackTimeout = 3 * time.Second

// onInteraction acknowledges an interaction received over the gateway
// with a deferred response, then hands it to the pool.
func (in *Inbound) onInteraction(i *discordgo.Interaction) {
	p, ok := in.prepare(i)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	defer cancel()
	err := callREST(ctx, "acknowledge interaction", func(o ...discordgo.RequestOption) error {
		return in.dg.InteractionRespond(i, deferred(p.ephemeral), o...)
	})
	if err != nil {
		in.log.Warn("could not acknowledge a discord interaction", "interaction", i.ID, "error", err)
		return
	}
	if err := in.submit(context.Background(), func(ctx context.Context) { in.handleInteraction(ctx, i, p) }); err != nil {
		in.log.Warn("dropped a discord interaction", "interaction", i.ID, "error", err)
	}
}

// HTTPHandler serves Discord's "Interactions Endpoint URL" (POST
// /discord/interactions): requests are verified with the application's
// Ed25519 PublicKey (a bad or missing signature gets 401 and starts
// nothing), PING is answered PONG, and every other interaction is
// answered at once with a deferred response and then handled on the
// pool, its answer sent as a follow-up. A shut-down or overloaded Inbound
// answers 503.
func (in *Inbound) HTTPHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxInteractionBody)
		if in.pubKey == nil || !discordgo.VerifyInteraction(r, in.pubKey) {
			in.metrics.Refused(r.Context(), Platform, bot.RefusedSignature)
			http.Error(w, "invalid request signature", http.StatusUnauthorized)
			return
		}
		// The signature covers the timestamp: one outside the window is
		// a captured request sent again (Slack's rule, 5 minutes).
		if !freshTimestamp(r.Header.Get("X-Signature-Timestamp"), time.Now()) {
			in.metrics.Refused(r.Context(), Platform, bot.RefusedSignature)
			http.Error(w, "request timestamp outside the allowed window", http.StatusUnauthorized)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "cannot read the request", http.StatusBadRequest)
			return
		}
		var i discordgo.Interaction
		if err := json.Unmarshal(body, &i); err != nil {
			http.Error(w, "not an interaction", http.StatusBadRequest)
			return
		}
		if i.Type == discordgo.InteractionPing {
			writeJSON(w, &discordgo.InteractionResponse{Type: discordgo.InteractionResponsePong})
			return
		}
		p, ok := in.prepare(&i)
		if !ok {
			http.Error(w, "unsupported interaction", http.StatusBadRequest)
			return
		}
		// The job waits for the acknowledgement to be written, so its
		// follow-up never overtakes it.
		acked := make(chan struct{})
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		err = in.submit(ctx, func(ctx context.Context) {
			select {
			case <-acked:
			case <-ctx.Done():
				return
			}
			in.handleInteraction(ctx, &i, p)
		})
		if err != nil {
			in.log.Warn("refused a discord interaction", "interaction", i.ID, "error", err)
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		writeJSON(w, deferred(p.ephemeral))
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		close(acked)
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func deferred(ephemeral bool) *discordgo.InteractionResponse {
	resp := &discordgo.InteractionResponse{Type: discordgo.InteractionResponseDeferredChannelMessageWithSource}
	if ephemeral {
		resp.Data = &discordgo.InteractionResponseData{Flags: discordgo.MessageFlagsEphemeral}
	}
	return resp
}

// prepared is what is known of an interaction before acknowledging it.
type prepared struct {
	text      string // command text for the grammar
	ephemeral bool   // the answer will be private: defer it so
	cmd       bot.Command
	parsed    bool
}

// prepare reads the command an interaction stands for; ok is false for
// interactions the adapter does not handle (other commands, autocomplete).
func (in *Inbound) prepare(i *discordgo.Interaction) (prepared, bool) {
	// Its channel and guild become the thread key: Discord's IDs only.
	if !validSnowflake(i.ChannelID) || (i.GuildID != "" && !validSnowflake(i.GuildID)) {
		return prepared{}, false
	}
	text, ok := commandText(i)
	if !ok {
		return prepared{}, false
	}
	p := prepared{text: text}
	cmd, err := bot.Parse(text, in.cfg.Backends)
	if err != nil {
		p.ephemeral = true // the router answers a parse error privately
		return p, true
	}
	p.cmd, p.parsed = cmd, true
	switch cmd.Verb {
	case bot.VerbHelp, bot.VerbBackends, bot.VerbList, bot.VerbPolicy, bot.VerbAudit:
		p.ephemeral = true
	}
	return p, true
}

// commandText maps an interaction to command text: "/agent switch
// backend:docker" is "switch docker", "/agent approve id:t3-call_1
// all:True" is "approve t3-call_1 --all", a click on Fork is "fork", a
// click on an approval's Deny is "deny <id>" (approvalCommand).
func commandText(i *discordgo.Interaction) (string, bool) {
	switch i.Type {
	case discordgo.InteractionApplicationCommand:
		data := i.ApplicationCommandData()
		if data.Name != CommandName || len(data.Options) == 0 {
			return "", false
		}
		sub := data.Options[0]
		opt := map[string]string{}
		num := map[string]int{}
		flag := map[string]bool{}
		for _, o := range sub.Options {
			switch v := o.Value.(type) {
			case bool:
				flag[o.Name] = v
			case string:
				opt[o.Name] = strings.TrimSpace(v)
			case float64:
				// An integer option, as a JSON number. Discord sends whole
				// numbers within ±2^53; the check only keeps int() defined.
				if v == math.Trunc(v) && math.Abs(v) <= 1<<53 {
					num[o.Name] = int(v)
				}
			}
		}
		c := bot.Command{Verb: bot.Verb(sub.Name), Backend: opt["backend"], Root: opt["root"], Title: opt["title"],
			Topic: bot.Verb(opt["verb"])}
		switch c.Verb {
		case bot.VerbTitle:
			c.Title = opt["name"]
		case bot.VerbModel:
			c.Model = opt["name"]
		case bot.VerbPolicy:
			c.PolicyAction, c.PolicyKey, c.PolicyValue = opt["action"], opt["key"], opt["value"]
			return policyText(c), true
		case bot.VerbList:
			c.Scope, c.Page = opt["scope"], num["page"]
		case bot.VerbAudit:
			c.Page = num["page"]
		case bot.VerbApprove, bot.VerbDeny:
			c.All = c.Verb == bot.VerbApprove && flag["all"]
			if id := opt["id"]; id != "" && !bot.ValidApprovalID(id) {
				// String writes a word like "--all" bare, which Parse
				// would read as the option: quoted, it is refused as no
				// approval ID.
				verb, rest, _ := strings.Cut(c.String(), " ")
				return strings.TrimSpace(verb + " " + strconv.Quote(id) + " " + rest), true
			}
			c.ApprovalID = opt["id"]
		case bot.VerbApprovals:
			c.Mode = opt["mode"]
		}
		if !c.Verb.Valid() {
			return "", false
		}
		return c.String(), true
	case discordgo.InteractionMessageComponent:
		data := i.MessageComponentData()
		switch data.CustomID {
		case ActionSwitch:
			if len(data.Values) == 0 {
				return "", false
			}
			return bot.Command{Verb: bot.VerbSwitch, Backend: data.Values[0]}.String(), true
		case ActionFork:
			return string(bot.VerbFork), true
		case ActionStop:
			return string(bot.VerbStop), true
		case ActionDone:
			return string(bot.VerbDone), true
		}
		if text := approvalCommand(data.CustomID); text != "" {
			return text, true
		}
	}
	return "", false
}

// policyText is the text of "/agent policy" with c's action, key and value
// options. Discord cannot make options depend on each other, so they need
// not fit the action; where they do, the text is c.String(). Where they do
// not, every option keeps its place in the grammar, an empty place before
// a filled one written "", so that Parse refuses the command instead of
// reading an option as another: a value given to reset must not make it
// reset every key, a value given to set without a key must not lend its
// first word as the key, and a key named "reset" given without an action
// must not be taken for the action.
func policyText(c bot.Command) string {
	a, k, v := c.PolicyAction, c.PolicyKey, c.PolicyValue
	if (a == bot.PolicySet && k != "") || (v == "" && (a != "" || k == "")) {
		return c.String()
	}
	// Each word quoted as String quotes it, so Parse reads it back as is.
	word := func(w string) string {
		if w == "" {
			return `""`
		}
		return strings.TrimPrefix(bot.Command{Verb: bot.VerbModel, Model: w}.String(), string(bot.VerbModel)+" ")
	}
	parts := []string{string(bot.VerbPolicy), word(a), word(k)}
	if v != "" {
		parts = append(parts, strings.TrimPrefix(bot.Command{Verb: bot.VerbTitle, Title: v}.String(), string(bot.VerbTitle)+" "))
	}
	return strings.Join(parts, " ")
}

// handleInteraction makes the event of an acknowledged interaction and
// hands it to the Handler; the answer replaces the deferred message.
func (in *Inbound) handleInteraction(ctx context.Context, i *discordgo.Interaction, p prepared) {
	key := ThreadKey(i.GuildID, i.ChannelID)
	ev := bot.Event{ID: i.ID, Platform: Platform, Kind: bot.KindCommand, Text: p.text, ThreadKey: key, NewThreadKey: key}
	user := i.User
	if i.Member != nil {
		ev.Roles = i.Member.Roles
		if i.Member.User != nil {
			user = i.Member.User
		}
	}
	if user != nil {
		ev.User = user.ID
	}
	ev.UserName = displayName(user, i.Member)
	ch := in.channelInfo(ctx, i.ChannelID)
	ev.Channel = allowChannel(ch, i.ChannelID)
	if in.cfg.ThreadPerSession && p.parsed && p.cmd.Verb == bot.VerbNew && i.GuildID != "" && ch != nil &&
		!ch.IsThread() && ch.Type != discordgo.ChannelTypeGuildForum {
		name := threadName(p.cmd.Title)
		if p.cmd.Title == "" {
			name = "agent session"
		}
		var th *discordgo.Channel
		err := callREST(ctx, "start thread", func(o ...discordgo.RequestOption) (err error) {
			th, err = in.dg.ThreadStartComplex(i.ChannelID, &discordgo.ThreadStart{Name: name, AutoArchiveDuration: 1440,
				Type: discordgo.ChannelTypeGuildPublicThread}, o...)
			return err
		})
		if err != nil {
			in.log.Warn("could not open a thread for a new session; using the channel", "channel", i.ChannelID, "error", err)
		} else {
			ev.ThreadKey, ev.NewThreadKey = "", ThreadKey(i.GuildID, th.ID)
		}
	}
	r := &interactionReplier{in: in, i: i, ephemeral: p.ephemeral}
	in.dispatch(ctx, ev, r)
	if !r.replied() {
		// Nothing to say (a fork links itself): remove the "thinking" message.
		if err := r.call(ctx, "delete response", func(o ...discordgo.RequestOption) error {
			return in.dg.InteractionResponseDelete(i, o...)
		}); err != nil {
			in.log.Debug("could not delete a deferred response", "interaction", i.ID, "error", err)
		}
	}
}

// interactionReplier answers an acknowledged interaction: the first part
// replaces the deferred message (@original), further parts are
// follow-ups. A private answer to a public deferral deletes it and is sent
// as ephemeral follow-ups.
type interactionReplier struct {
	in        *Inbound
	i         *discordgo.Interaction
	ephemeral bool

	mu   sync.Mutex
	done bool
}

func (r *interactionReplier) replied() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.done
}

// Reply sends resp as the interaction's answer (see interactionReplier).
func (r *interactionReplier) Reply(ctx context.Context, resp bot.Response) error {
	r.mu.Lock()
	first := !r.done
	r.done = true
	r.mu.Unlock()
	parts := responseParts(resp)
	comps := r.in.components(resp)
	editOriginal := first && (r.ephemeral || !resp.Private)
	if first && !editOriginal {
		if err := r.call(ctx, "delete response", func(o ...discordgo.RequestOption) error {
			return r.in.dg.InteractionResponseDelete(r.i, o...)
		}); err != nil {
			r.in.log.Debug("could not delete a deferred response", "interaction", r.i.ID, "error", err)
		}
	}
	for n, part := range parts {
		var c []discordgo.MessageComponent
		var embeds []*discordgo.MessageEmbed
		if n == len(parts)-1 {
			c, embeds = comps, statusEmbeds(resp)
		}
		content := part
		var err error
		if n == 0 && editOriginal {
			err = r.call(ctx, "edit response", func(o ...discordgo.RequestOption) error {
				edit := &discordgo.WebhookEdit{Content: &content, AllowedMentions: noMentions()}
				if c != nil {
					edit.Components = &c
				}
				if embeds != nil {
					edit.Embeds = &embeds
				}
				_, err := r.in.dg.InteractionResponseEdit(r.i, edit, o...)
				return err
			})
		} else {
			params := &discordgo.WebhookParams{Content: content, Components: c, Embeds: embeds, AllowedMentions: noMentions()}
			if resp.Private || r.ephemeral {
				params.Flags = discordgo.MessageFlagsEphemeral
			}
			err = r.call(ctx, "follow up", func(o ...discordgo.RequestOption) error {
				_, err := r.in.dg.FollowupMessageCreate(r.i, true, params, o...)
				return err
			})
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// call runs a webhook call, trying again briefly when Discord does not
// know the interaction's webhook yet (an edit racing its acknowledgement).
func (r *interactionReplier) call(ctx context.Context, op string, f func(...discordgo.RequestOption) error) error {
	for attempt := 0; ; attempt++ {
		err := callREST(ctx, op, f)
		var re *discordgo.RESTError
		if err == nil || attempt == 3 || !errors.As(err, &re) || re.Response == nil || re.Response.StatusCode != http.StatusNotFound {
			return err
		}
		select {
		case <-time.After(100 * time.Millisecond << attempt):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// maxRequestAge is how far a signed request's timestamp may be from now.
const maxRequestAge = 5 * time.Minute

// freshTimestamp says a request's X-Signature-Timestamp (Unix seconds) is
// within maxRequestAge of now.
func freshTimestamp(ts string, now time.Time) bool {
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return false
	}
	d := now.Sub(time.Unix(sec, 0))
	return d <= maxRequestAge && d >= -maxRequestAge
}
