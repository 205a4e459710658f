package slackbot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"
)

// ackTimeout bounds the wait to queue an acknowledgement; past it the
// envelope is left to Slack's retry.
const ackTimeout = 5 * time.Second

// RunSocketMode receives events over Socket Mode (no public URL needed)
// until ctx is done, reconnecting as Slack asks. It calls Start first.
// Every envelope is acknowledged as it arrives, before any work; the work
// then goes to the worker pool. It returns nil when ctx ends, and an error
// when the configuration or the tokens are refused. Handlers still running
// when it returns keep going: call Shutdown to wait for them.
func (in *Inbound) RunSocketMode(ctx context.Context) error {
	if in.cfg.AppToken == "" {
		return errors.New("slack: socket mode needs an app-level token (SLACK_APP_TOKEN, xapp-..., scope connections:write)")
	}
	if !strings.HasPrefix(in.cfg.AppToken, "xapp-") {
		return errors.New("slack: SLACK_APP_TOKEN is not an app-level token (it starts with xapp-)")
	}
	if err := in.Start(ctx); err != nil {
		return err
	}
	smc := socketmode.New(in.api,
		socketmode.OptionDialer(in.dialer()),
		socketmode.OptionLog(slog.NewLogLogger(in.log.Handler(), slog.LevelDebug)),
	)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer in.setConn(errors.New("socket mode is not running"))
	runErr := make(chan error, 1)
	go func() { runErr <- smc.RunContext(runCtx) }()
	for {
		select {
		case err := <-runErr:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("slack: socket mode: %w", err)
		case evt := <-smc.Events:
			in.onSocketEvent(runCtx, smc, evt)
		}
	}
}

// onSocketEvent acknowledges one Socket Mode event, then hands its work
// to the pool.
func (in *Inbound) onSocketEvent(ctx context.Context, smc *socketmode.Client, evt socketmode.Event) {
	in.track(evt)
	switch evt.Type {
	case socketmode.EventTypeConnected:
		in.log.Info("slack socket mode connected")
		return
	case socketmode.EventTypeConnectionError, socketmode.EventTypeIncomingError, socketmode.EventTypeErrorWriteFailed:
		in.log.Warn("slack socket mode trouble", "type", string(evt.Type), "detail", fmt.Sprint(evt.Data))
		return
	case socketmode.EventTypeErrorBadMessage:
		// slack-go could not read the envelope; acknowledge it anyway,
		// or Slack sends it again and again.
		in.log.Warn("slack sent an envelope slack-go cannot read; acknowledged and dropped", "detail", fmt.Sprint(evt.Data))
		if bad, ok := evt.Data.(*socketmode.ErrorBadMessage); ok {
			var req socketmode.Request
			if json.Unmarshal(bad.Message, &req) == nil && req.EnvelopeID != "" {
				in.ack(ctx, smc, req)
			}
		}
		return
	}
	if evt.Request == nil || evt.Request.EnvelopeID == "" {
		return // hello, connecting, ...: nothing to acknowledge
	}
	req := *evt.Request
	in.ack(ctx, smc, req)
	if req.RetryAttempt > 0 {
		in.log.Info("slack retried an envelope", "envelope_id", req.EnvelopeID, "retry_attempt", req.RetryAttempt,
			"retry_reason", req.RetryReason)
	}
	var job func(context.Context)
	switch evt.Type {
	case socketmode.EventTypeEventsAPI:
		var env envelope
		if err := json.Unmarshal(req.Payload, &env); err != nil {
			in.log.Warn("unreadable slack event", "envelope_id", req.EnvelopeID, "error", err)
			return
		}
		env.Retry = req.RetryAttempt > 0
		job = func(ctx context.Context) { in.onCallback(ctx, env) }
	case socketmode.EventTypeSlashCommand:
		cmd, ok := evt.Data.(slack.SlashCommand)
		if !ok {
			return
		}
		job = func(ctx context.Context) { in.onSlash(ctx, cmd) }
	case socketmode.EventTypeInteractive:
		cb, ok := evt.Data.(slack.InteractionCallback)
		if !ok {
			return
		}
		job = func(ctx context.Context) { in.onInteraction(ctx, cb) }
	default:
		return
	}
	if err := in.submit(ctx, job); err != nil {
		in.log.Warn("an acknowledged slack envelope was not handled", "envelope_id", req.EnvelopeID, "error", err)
	}
}

// connState is what Connected reports: nil while a Socket Mode
// connection is up.
type connState struct {
	mu  sync.Mutex
	err error
	set bool // false until RunSocketMode has seen an event
}

// Connected returns nil while a Socket Mode connection is open, and an
// error saying why not otherwise: not connected yet, reconnecting (Slack
// asked for it, or the connection broke) with the last dial error, or
// RunSocketMode not running. It is a readiness check: an Inbound that
// serves only HTTP has no connection to report, and callers do not ask it.
func (in *Inbound) Connected() error {
	in.conn.mu.Lock()
	defer in.conn.mu.Unlock()
	if !in.conn.set {
		return errors.New("socket mode not connected yet")
	}
	return in.conn.err
}

func (in *Inbound) setConn(err error) {
	in.conn.mu.Lock()
	defer in.conn.mu.Unlock()
	in.conn.err, in.conn.set = err, true
}

// track follows the connection's state through slack-go's events.
func (in *Inbound) track(evt socketmode.Event) {
	switch evt.Type {
	case socketmode.EventTypeConnected:
		in.setConn(nil)
	case socketmode.EventTypeConnecting:
		in.setConn(errors.New("socket mode connecting"))
	case socketmode.EventTypeDisconnect:
		in.setConn(errors.New("socket mode reconnecting (slack asked to)"))
	case socketmode.EventTypeInvalidAuth:
		in.setConn(errors.New("socket mode: the app token was refused"))
	case socketmode.EventTypeConnectionError:
		err := errors.New("socket mode connection failed")
		if ce, ok := evt.Data.(*slack.ConnectionErrorEvent); ok && ce.ErrorObj != nil {
			err = fmt.Errorf("socket mode connection failed: %w", ce.ErrorObj)
		}
		in.setConn(err)
	}
}

// ack acknowledges an envelope, with an empty payload.
func (in *Inbound) ack(ctx context.Context, smc *socketmode.Client, req socketmode.Request) {
	ctx, cancel := context.WithTimeout(ctx, ackTimeout)
	defer cancel()
	if err := smc.AckCtx(ctx, req.EnvelopeID, nil); err != nil {
		in.log.Warn("could not acknowledge a slack envelope; slack will retry it", "envelope_id", req.EnvelopeID, "error", err)
	}
}

// dialer is the websocket dialer of Socket Mode: the proxy and TLS
// settings of the configured HTTP client's transport, so proxies and
// private CAs work the same for the websocket as for the Web API.
func (in *Inbound) dialer() *websocket.Dialer {
	d := &websocket.Dialer{Proxy: http.ProxyFromEnvironment, HandshakeTimeout: 45 * time.Second}
	if t, ok := in.http.Transport.(*http.Transport); ok {
		if t.Proxy != nil {
			d.Proxy = t.Proxy
		}
		if t.TLSClientConfig != nil {
			d.TLSClientConfig = t.TLSClientConfig.Clone()
		}
	}
	return d
}
