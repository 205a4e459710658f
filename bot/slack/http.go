package slackbot

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/slack-go/slack"

	"github.com/agentbot/agentbot/bot"
)

// Paths HTTPHandler serves; the HTTP manifest's request URLs end in them.
const (
	PathEvents        = "/slack/events"
	PathCommands      = "/slack/commands"
	PathInteractivity = "/slack/interactivity"
)

const (
	// maxBodyBytes bounds a request body; Slack's are far smaller.
	maxBodyBytes = 1 << 20
	// queueWait is how long a request waits for room in the worker queue
	// before it is refused with 503 (Slack wants an answer within 3 s).
	queueWait = time.Second
)

// HTTPHandler serves the Events API over HTTP: POST PathEvents (events
// and url_verification), PathCommands (slash commands) and
// PathInteractivity (buttons, selects, shortcuts). Every request must
// carry a valid Slack signature made with SigningSecret at most 5 minutes
// ago, or it gets 401 and nothing starts. A good request is answered 200
// at once and handled after, on the worker pool; a full pool answers 503
// so that Slack retries. Retried events (X-Slack-Retry-Num) are handed on
// like the first with the same event ID, for the Router to drop.
func (in *Inbound) HTTPHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathEvents, in.serveEvents)
	mux.HandleFunc("POST "+PathCommands, in.serveCommands)
	mux.HandleFunc("POST "+PathInteractivity, in.serveInteractivity)
	return mux
}

// verified reads the body of r and checks its signature. On failure it
// has answered and returns false.
func (in *Inbound) verified(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		http.Error(w, "unreadable body", http.StatusBadRequest)
		return nil, false
	}
	if in.cfg.SigningSecret == "" {
		in.log.Error("refused a slack request: no signing secret is configured (SLACK_SIGNING_SECRET)")
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return nil, false
	}
	sv, err := slack.NewSecretsVerifier(r.Header, in.cfg.SigningSecret)
	if err == nil {
		_, _ = sv.Write(body)
		err = sv.Ensure()
	}
	if err != nil {
		in.log.Warn("refused a slack request with a bad or stale signature", "path", r.URL.Path, "remote", r.RemoteAddr, "error", err)
		in.metrics.Refused(r.Context(), Platform, bot.RefusedSignature)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return nil, false
	}
	return body, true
}

// accept hands a verified request's work to the pool and answers.
func (in *Inbound) accept(w http.ResponseWriter, r *http.Request, job func(context.Context)) {
	ctx, cancel := context.WithTimeout(r.Context(), queueWait)
	defer cancel()
	if err := in.submit(ctx, job); err != nil {
		in.log.Warn("refused a slack request: no worker free", "path", r.URL.Path, "error", err)
		w.Header().Set("Retry-After", "1")
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (in *Inbound) serveEvents(w http.ResponseWriter, r *http.Request) {
	body, ok := in.verified(w, r)
	if !ok {
		return
	}
	var env envelope
	if err := json.Unmarshal(body, &env); err != nil {
		http.Error(w, "not an event", http.StatusBadRequest)
		return
	}
	switch env.Type {
	case "url_verification":
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, env.Challenge)
	case "event_callback":
		if n := r.Header.Get("X-Slack-Retry-Num"); n != "" {
			in.log.Info("slack retried an event", "event_id", env.EventID, "retry_num", n,
				"retry_reason", r.Header.Get("X-Slack-Retry-Reason"))
			env.Retry = n != "0"
		}
		in.accept(w, r, func(ctx context.Context) { in.onCallback(ctx, env) })
	default: // app_rate_limited and the like
		in.log.Info("slack sent a notice", "type", env.Type)
		w.WriteHeader(http.StatusOK)
	}
}

func (in *Inbound) serveCommands(w http.ResponseWriter, r *http.Request) {
	body, ok := in.verified(w, r)
	if !ok {
		return
	}
	cmd, ok := slashCommandOf(body)
	if !ok {
		http.Error(w, "not a slash command", http.StatusBadRequest)
		return
	}
	// An empty 200 acknowledges without a visible answer; the answer
	// comes through response_url.
	in.accept(w, r, func(ctx context.Context) { in.onSlash(ctx, cmd) })
}

// slashCommandOf reads a slash command's form body; ok is false for a body
// that is no form or names no channel or user.
func slashCommandOf(body []byte) (cmd slack.SlashCommand, ok bool) {
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return cmd, false
	}
	cmd = slack.SlashCommand{
		TeamID:      form.Get("team_id"),
		ChannelID:   form.Get("channel_id"),
		UserID:      form.Get("user_id"),
		UserName:    form.Get("user_name"),
		Command:     form.Get("command"),
		Text:        form.Get("text"),
		ResponseURL: form.Get("response_url"),
		TriggerID:   form.Get("trigger_id"),
		APIAppID:    form.Get("api_app_id"),
	}
	return cmd, cmd.ChannelID != "" && cmd.UserID != ""
}

func (in *Inbound) serveInteractivity(w http.ResponseWriter, r *http.Request) {
	body, ok := in.verified(w, r)
	if !ok {
		return
	}
	cb, err := interactionOf(body)
	if err != nil {
		http.Error(w, "not an interaction", http.StatusBadRequest)
		return
	}
	in.accept(w, r, func(ctx context.Context) { in.onInteraction(ctx, cb) })
}

// interactionOf reads the form-encoded "payload" of an interactivity
// request.
func interactionOf(body []byte) (slack.InteractionCallback, error) {
	var cb slack.InteractionCallback
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return cb, err
	}
	p := form.Get("payload")
	if p == "" {
		return cb, errors.New("no payload")
	}
	err = json.Unmarshal([]byte(p), &cb)
	return cb, err
}
