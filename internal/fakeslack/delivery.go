package fakeslack

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The Socket Mode envelope types, which also name HTTP deliveries.
const (
	typeEventsAPI   = "events_api"
	typeSlash       = "slash_commands"
	typeInteractive = "interactive"
)

// outbound is one payload for the app, delivered over Socket Mode or HTTP.
type outbound struct {
	kind    string
	eventID string
	// payload is the envelope payload: the event_callback, the slash
	// command's fields as a JSON object, or the interaction.
	payload json.RawMessage
	// form is the HTTP body of a slash command.
	form            url.Values
	acceptsResponse bool
	// resp is where the app's answers go, for slash commands and
	// interactions.
	resp *respContext

	// Guarded by Server.mu.
	acked bool
	last  Envelope
}

// httpBody is the body and content type of an HTTP delivery: the JSON
// event, the slash command's form, or the interaction as the form field
// "payload".
func (o *outbound) httpBody() ([]byte, string) {
	switch o.kind {
	case typeSlash:
		return []byte(o.form.Encode()), "application/x-www-form-urlencoded"
	case typeInteractive:
		return []byte(url.Values{"payload": {string(o.payload)}}.Encode()), "application/x-www-form-urlencoded"
	}
	return o.payload, "application/json"
}

// authorizations is the authorizations field of an event_callback.
func (s *Server) authorizations() []map[string]any {
	return []map[string]any{{
		"enterprise_id": nil, "team_id": s.opts.TeamID, "user_id": s.opts.BotUserID,
		"is_bot": true, "is_enterprise_install": false,
	}}
}

// deliverEvent wraps inner in an event_callback with its own event_id and
// delivers it; nil does nothing.
func (s *Server) deliverEvent(inner map[string]any) {
	if inner == nil {
		return
	}
	s.mu.Lock()
	eventID := fmt.Sprintf("Ev%010X", s.nextSeqLocked())
	s.mu.Unlock()
	cb := map[string]any{
		"token":                 s.opts.VerificationToken,
		"team_id":               s.opts.TeamID,
		"context_team_id":       s.opts.TeamID,
		"context_enterprise_id": nil,
		"api_app_id":            s.opts.AppID,
		"event":                 inner,
		"type":                  "event_callback",
		"event_id":              eventID,
		"event_time":            time.Now().Unix(),
		"authorizations":        s.authorizations(),
		"is_ext_shared_channel": false,
		"event_context":         "4-" + randomHex(20),
	}
	payload, err := json.Marshal(cb)
	if err != nil {
		panic(fmt.Sprintf("fakeslack: marshal event: %v", err))
	}
	s.deliver(&outbound{kind: typeEventsAPI, eventID: eventID, payload: payload})
}

// deliver sends o to the URL set for its kind, or over Socket Mode when none
// is set.
func (s *Server) deliver(o *outbound) {
	s.mu.Lock()
	var target string
	switch o.kind {
	case typeEventsAPI:
		target = s.eventsURL
	case typeSlash:
		target = s.slashURL
	case typeInteractive:
		target = s.interactivityURL
	}
	s.mu.Unlock()
	if target == "" {
		s.sendEnvelope(o, 0, "")
		return
	}
	s.spawn(func() { s.deliverHTTP(o, target) })
}

// deliverHTTP POSTs o, signed, and retries an event that is not answered
// 2xx within AckTimeout up to maxRetries times, immediately (Slack waits
// about 1 and 5 minutes between retries). "X-Slack-No-Retry: 1" in an answer
// stops the retries.
func (s *Server) deliverHTTP(o *outbound, target string) {
	retries := 0
	if o.kind == typeEventsAPI {
		retries = maxRetries
	}
	body, ctype := o.httpBody()
	reason := ""
	for n := 0; ; n++ {
		d := Delivery{URL: target, Type: o.kind, EventID: o.eventID, RetryNum: n, RetryReason: reason}
		status, header, answer, err := s.postOnce(target, body, ctype, n, reason)
		d.Status, d.Body = status, answer
		noRetry := false
		switch {
		case err != nil:
			d.Err = err.Error()
			reason = "connection_failed"
			if isTimeout(err) {
				reason = "http_timeout"
			}
		case status >= 200 && status < 300:
			s.mu.Lock()
			o.acked = true
			s.deliveries = append(s.deliveries, d)
			s.mu.Unlock()
			if o.kind == typeSlash && len(bytes.TrimSpace(answer)) > 0 {
				msg := answer
				if !json.Valid(answer) || !isJSONObject(answer) {
					msg, _ = json.Marshal(map[string]string{"text": string(answer)})
				}
				s.applyResponse(o.resp, "http", "", msg)
			}
			return
		default:
			reason = "http_error"
			noRetry = header.Get("X-Slack-No-Retry") == "1"
		}
		s.mu.Lock()
		s.deliveries = append(s.deliveries, d)
		s.mu.Unlock()
		if noRetry || n >= retries || s.ctx.Err() != nil {
			return
		}
	}
}

// postOnce makes one signed POST with the AckTimeout deadline and reads the
// answer.
func (s *Server) postOnce(target string, body []byte, ctype string, retryNum int, reason string) (int, http.Header, []byte, error) {
	ctx, cancel := context.WithTimeout(s.ctx, s.opts.AckTimeout)
	defer cancel()
	req, err := s.signedRequest(ctx, target, body, ctype, time.Now(), s.opts.SigningSecret, retryNum, reason)
	if err != nil {
		return 0, nil, nil, err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, resp.Header, answer, err
	}
	return resp.StatusCode, resp.Header, answer, nil
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Sign returns Slack's X-Slack-Signature for a body sent at ts:
// "v0=" + hex(HMAC-SHA256(secret, "v0:<unix seconds>:<body>")).
func Sign(secret string, ts time.Time, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "v0:%d:", ts.Unix())
	mac.Write(body)
	return "v0=" + hex.EncodeToString(mac.Sum(nil))
}

func (s *Server) signedRequest(ctx context.Context, target string, body []byte, ctype string, ts time.Time, secret string, retryNum int, reason string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("User-Agent", "Slackbot 1.0 (+https://api.slack.com/robots)")
	req.Header.Set("X-Slack-Request-Timestamp", strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set("X-Slack-Signature", Sign(secret, ts, body))
	if retryNum > 0 {
		req.Header.Set("X-Slack-Retry-Num", strconv.Itoa(retryNum))
		req.Header.Set("X-Slack-Retry-Reason", reason)
	}
	return req, nil
}

// SendSigned POSTs body to url as Slack would at time ts, signed with
// secret, for tests of stale or forged requests; retryNum > 0 adds
// X-Slack-Retry-Num and "X-Slack-Retry-Reason: http_timeout". It waits at
// most 30 s. The caller closes the response body.
func (s *Server) SendSigned(url string, body []byte, contentType string, ts time.Time, secret string, retryNum int) (*http.Response, error) {
	req, err := s.signedRequest(context.Background(), url, body, contentType, ts, secret, retryNum, "http_timeout")
	if err != nil {
		return nil, err
	}
	c := &http.Client{Transport: s.http.Transport, Timeout: 30 * time.Second}
	return c.Do(req)
}

// VerifyURL sends url the url_verification request Slack sends when an
// Events API request URL is saved, and checks the answer as Slack does: HTTP
// 200 with the challenge as plain text, as JSON {"challenge":...} or as the
// form challenge=....
func (s *Server) VerifyURL(url string) error {
	challenge := randomHex(24)
	body, _ := json.Marshal(map[string]string{
		"token": s.opts.VerificationToken, "challenge": challenge, "type": "url_verification",
	})
	resp, err := s.SendSigned(url, body, "application/json", time.Now(), s.opts.SigningSecret, 0)
	if err != nil {
		return fmt.Errorf("fakeslack: url_verification: %w", err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("fakeslack: url_verification: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fakeslack: url_verification: HTTP %d: %q", resp.StatusCode, answer)
	}
	got := strings.TrimSpace(string(answer))
	var js struct {
		Challenge string `json:"challenge"`
	}
	if json.Unmarshal(answer, &js) == nil && js.Challenge != "" {
		got = js.Challenge
	} else if form, err := url2Values(got); err == nil && form.Get("challenge") != "" {
		got = form.Get("challenge")
	}
	if got != challenge {
		return fmt.Errorf("fakeslack: url_verification: challenge %q not echoed, got %q", challenge, answer)
	}
	return nil
}

func url2Values(s string) (url.Values, error) {
	if !strings.Contains(s, "=") {
		return nil, errors.New("not a form")
	}
	return url.ParseQuery(s)
}
