package fakeslack

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
)

// request is a request the test app received, after its signature checked.
type request struct {
	header http.Header
	body   []byte
	form   *http.Request // for the slack-go parsers
}

// app is an HTTP endpoint as an app serves it: it verifies the signature
// with slack-go and answers 401 if it does not hold; otherwise it records
// the request and answers with reply.
type app struct {
	t      *testing.T
	secret string
	mu     sync.Mutex
	reqs   []request
	reply  func(n int, w http.ResponseWriter, r *http.Request)
}

func newApp(t *testing.T, secret string, reply func(n int, w http.ResponseWriter, r *http.Request)) (*app, string) {
	a := &app{t: t, secret: secret, reply: reply}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	return a, srv.URL
}

func (a *app) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	sv, err := slack.NewSecretsVerifier(r.Header, a.secret)
	if err == nil {
		_, _ = sv.Write(body)
		err = sv.Ensure()
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	clone := r.Clone(r.Context())
	clone.Body = io.NopCloser(bytes.NewReader(body))
	a.mu.Lock()
	n := len(a.reqs)
	a.reqs = append(a.reqs, request{header: r.Header.Clone(), body: body, form: clone})
	a.mu.Unlock()
	if a.reply != nil {
		a.reply(n, w, r)
	}
}

func (a *app) requests() []request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]request(nil), a.reqs...)
}

func TestHTTPEvents(t *testing.T) {
	const secret = "fake-signing-secret"

	t.Run("retried after an error", func(t *testing.T) {
		s := newServer(t, Options{})
		a, url := newApp(t, secret, func(n int, w http.ResponseWriter, r *http.Request) {
			if n == 0 {
				w.WriteHeader(http.StatusInternalServerError)
			}
		})
		s.SetEventsURL(url)
		ts := s.PostUserMessage("C1", "U1", "hello", "")
		waitFor(t, s, "two deliveries", func(s *Server) bool { return len(s.Deliveries()) == 2 })

		d := s.Deliveries()
		if d[0].Status != 500 || d[0].RetryNum != 0 || d[1].Status != 200 || d[1].RetryNum != 1 || d[1].RetryReason != "http_error" {
			t.Errorf("deliveries = %+v", d)
		}
		reqs := a.requests()
		if len(reqs) != 2 {
			t.Fatalf("app got %d requests, want 2", len(reqs))
		}
		if h := reqs[1].header; h.Get("X-Slack-Retry-Num") != "1" || h.Get("X-Slack-Retry-Reason") != "http_error" {
			t.Errorf("retry headers = %v", h)
		}
		if reqs[0].header.Get("X-Slack-Retry-Num") != "" || reqs[0].header.Get("Content-Type") != "application/json" {
			t.Errorf("first request headers = %v", reqs[0].header)
		}
		var ids []string
		for _, r := range reqs {
			ev, err := slackevents.ParseEvent(r.body, slackevents.OptionVerifyToken(&slackevents.TokenComparator{VerificationToken: "fake-verification-token"}))
			if err != nil {
				t.Fatalf("ParseEvent: %v", err)
			}
			m, ok := ev.InnerEvent.Data.(*slackevents.MessageEvent)
			if !ok || m.TimeStamp != ts {
				t.Errorf("inner event = %+v", ev.InnerEvent)
			}
			ids = append(ids, ev.Data.(*slackevents.EventsAPICallbackEvent).EventID)
		}
		if ids[0] != ids[1] {
			t.Errorf("event IDs %v, want the same on retry", ids)
		}
	})

	t.Run("retried after a timeout", func(t *testing.T) {
		s := newServer(t, Options{AckTimeout: 200 * time.Millisecond})
		_, url := newApp(t, secret, func(n int, w http.ResponseWriter, r *http.Request) {
			if n == 0 {
				select {
				case <-r.Context().Done():
				case <-time.After(2 * time.Second):
				}
			}
		})
		s.SetEventsURL(url)
		s.PostUserMessage("C1", "U1", "hello", "")
		waitFor(t, s, "two deliveries", func(s *Server) bool { return len(s.Deliveries()) == 2 })
		d := s.Deliveries()
		if d[0].Status != 0 || d[0].Err == "" || d[1].RetryReason != "http_timeout" || d[1].Status != 200 {
			t.Errorf("deliveries = %+v", d)
		}
	})

	t.Run("three retries at most", func(t *testing.T) {
		s := newServer(t, Options{})
		a, url := newApp(t, secret, func(n int, w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
		})
		s.SetEventsURL(url)
		s.PostUserMessage("C1", "U1", "hello", "")
		waitFor(t, s, "four deliveries", func(s *Server) bool { return len(s.Deliveries()) == 4 })
		time.Sleep(200 * time.Millisecond)
		if n := len(a.requests()); n != 4 {
			t.Errorf("app got %d requests, want 4", n)
		}
	})

	t.Run("X-Slack-No-Retry", func(t *testing.T) {
		s := newServer(t, Options{})
		a, url := newApp(t, secret, func(n int, w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Slack-No-Retry", "1")
			w.WriteHeader(http.StatusInternalServerError)
		})
		s.SetEventsURL(url)
		s.PostUserMessage("C1", "U1", "hello", "")
		waitFor(t, s, "a delivery", func(s *Server) bool { return len(s.Deliveries()) == 1 })
		time.Sleep(200 * time.Millisecond)
		if n := len(a.requests()); n != 1 {
			t.Errorf("app got %d requests, want 1", n)
		}
	})

	t.Run("mention makes two deliveries", func(t *testing.T) {
		s := newServer(t, Options{})
		a, url := newApp(t, secret, nil)
		s.SetEventsURL(url)
		s.PostUserMessage("C1", "U1", "hi <@UBOT|agentbot>", "")
		waitFor(t, s, "two deliveries", func(s *Server) bool { return len(s.Deliveries()) == 2 })
		types := map[string]bool{}
		for _, r := range a.requests() {
			ev, err := slackevents.ParseEvent(r.body, slackevents.OptionNoVerifyToken())
			if err != nil {
				t.Fatal(err)
			}
			types[ev.InnerEvent.Type] = true
		}
		if !types["message"] || !types["app_mention"] {
			t.Errorf("inner event types %v", types)
		}
	})
}

func TestHTTPSlashAndInteractions(t *testing.T) {
	s := newServer(t, Options{})
	a, url := newApp(t, "fake-signing-secret", func(n int, w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Type") == "application/x-www-form-urlencoded" && n == 0 {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"response_type":"in_channel","text":"on it"}`)
		}
	})
	s.SetSlashURL(url)
	s.SetInteractivityURL(url)

	s.SlashCommand("C1", "U1", "status")
	waitFor(t, s, "slash response", func(s *Server) bool { return len(s.Responses()) == 1 })
	cmd, err := slack.SlashCommandParse(a.requests()[0].form)
	if err != nil {
		t.Fatal(err)
	}
	if cmd.Command != "/agent" || cmd.Text != "status" || cmd.ChannelID != "C1" || cmd.UserID != "U1" || cmd.ResponseURL == "" {
		t.Errorf("slash command = %+v", cmd)
	}
	if r := s.Responses()[0]; r.Via != "http" || r.ResponseType != "in_channel" || r.Text != "on it" {
		t.Errorf("response = %+v", r)
	}
	msgs := s.Messages("C1")
	if len(msgs) != 1 || msgs[0].Text != "on it" {
		t.Fatalf("Messages = %+v", msgs)
	}

	s.BlockAction("C1", "U1", msgs[0].TS, "done", "wf1")
	waitFor(t, s, "interaction", func(s *Server) bool { return len(s.Deliveries()) == 2 })
	cb, err := slack.InteractionCallbackParse(a.requests()[1].form)
	if err != nil {
		t.Fatal(err)
	}
	if cb.Type != slack.InteractionTypeBlockActions || cb.ActionCallback.BlockActions[0].ActionID != "done" ||
		cb.ActionCallback.BlockActions[0].Value != "wf1" || cb.Container.MessageTs != msgs[0].TS {
		t.Errorf("interaction = %+v", cb)
	}
}

func TestSendSigned(t *testing.T) {
	s := newServer(t, Options{})
	_, url := newApp(t, "fake-signing-secret", nil)
	body := []byte(`{"type":"event_callback"}`)
	tests := []struct {
		name   string
		ts     time.Time
		secret string
		want   int
	}{
		{"valid", time.Now(), "fake-signing-secret", 200},
		{"stale", time.Now().Add(-6 * time.Minute), "fake-signing-secret", 401},
		{"from the future", time.Now().Add(6 * time.Minute), "fake-signing-secret", 401},
		{"wrong secret", time.Now(), "other-secret", 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := s.SendSigned(url, body, "application/json", tt.ts, tt.secret, 2)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.want)
			}
		})
	}

	t.Run("slack-go verifies Sign", func(t *testing.T) {
		now := time.Now()
		h := http.Header{}
		h.Set("X-Slack-Request-Timestamp", jsonNumber(now.Unix()))
		h.Set("X-Slack-Signature", Sign("k", now, body))
		sv, err := slack.NewSecretsVerifier(h, "k")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = sv.Write(body)
		if err := sv.Ensure(); err != nil {
			t.Fatal(err)
		}
		h.Set("X-Slack-Request-Timestamp", jsonNumber(now.Add(-10*time.Minute).Unix()))
		if _, err := slack.NewSecretsVerifier(h, "k"); !errors.Is(err, slack.ErrExpiredTimestamp) {
			t.Errorf("stale: %v, want ErrExpiredTimestamp", err)
		}
	})
}

func jsonNumber(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestVerifyURL(t *testing.T) {
	s := newServer(t, Options{})
	challenge := func(r *http.Request) string {
		body, _ := io.ReadAll(r.Body)
		ev, err := slackevents.ParseEvent(body, slackevents.OptionNoVerifyToken())
		if err != nil || ev.Type != slackevents.URLVerification {
			return ""
		}
		return ev.Data.(*slackevents.EventsAPIURLVerificationEvent).Challenge
	}
	tests := []struct {
		name    string
		handler http.HandlerFunc
		ok      bool
	}{
		{"plain text", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, challenge(r))
		}, true},
		{"JSON", func(w http.ResponseWriter, r *http.Request) {
			_ = json.NewEncoder(w).Encode(map[string]string{"challenge": challenge(r)})
		}, true},
		{"wrong challenge", func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "nope")
		}, false},
		{"error status", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, challenge(r), http.StatusForbidden)
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.handler)
			defer srv.Close()
			if err := s.VerifyURL(srv.URL); (err == nil) != tt.ok {
				t.Errorf("VerifyURL = %v, want ok %v", err, tt.ok)
			}
		})
	}
}
