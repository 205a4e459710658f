package fakeslack

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"
)

func TestAgentSessionMethods(t *testing.T) {
	s := newServer(t, Options{})
	api := client(s)
	ctx := testCtx(t)
	_, root, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("root", false))
	if err != nil {
		t.Fatal(err)
	}
	reply := s.PostUserMessage("C1", "U1", "a reply", root)
	set := func(p slack.AgentSessionSetStatusParameters) (*slack.AgentSessionSetStatusResponse, error) {
		return api.SetAgentSessionStatusContext(ctx, p)
	}
	rename := func(ch, ts, title string) error {
		_, err := api.RenameAgentSessionContext(ctx, slack.AgentSessionRenameParameters{ChannelID: ch, ThreadTS: ts, Title: title})
		return err
	}

	// Renaming before the session exists: there is none to rename.
	if got := slackErr(rename("C1", root, "early")); got != "session_not_found" {
		t.Errorf("rename before setStatus: %q, want session_not_found", got)
	}
	// The first setStatus makes the session with its title and initiator;
	// a reply's ts names its thread.
	res, err := set(slack.AgentSessionSetStatusParameters{Status: slack.AgentSessionStatusProcessing, ChannelID: "C1", ThreadTS: reply,
		Title: "First title", InitiatorUserID: "U1"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != "processing" || res.AgentStatus != "processing" || res.Title != "First title" {
		t.Errorf("setStatus answered %+v", res)
	}
	want := AgentSession{Channel: "C1", ThreadTS: root, Status: "processing", Title: "First title", Initiator: "U1"}
	if a, ok := s.AgentSession("C1", root); !ok || a != want {
		t.Errorf("session %+v, %v; want %+v", a, ok, want)
	}
	// Later titles are ignored by setStatus (rename changes it).
	if res, err = set(slack.AgentSessionSetStatusParameters{Status: "active", ChannelID: "C1", ThreadTS: root, Title: "ignored"}); err != nil || res.Title != "First title" {
		t.Errorf("setStatus with a title on an existing session: %+v, %v", res, err)
	}
	if err := rename("C1", root, "Bora Bora trip prep"); err != nil {
		t.Fatal(err)
	}
	if a, _ := s.AgentSession("C1", reply); a.Title != "Bora Bora trip prep" || a.Status != "active" {
		t.Errorf("after rename: %+v", a)
	}
	wantCalls := []AgentSessionCall{
		{Method: "agents.sessions.setStatus", Channel: "C1", ThreadTS: root, Status: "processing", Title: "First title"},
		{Method: "agents.sessions.setStatus", Channel: "C1", ThreadTS: root, Status: "active", Title: "ignored"},
		{Method: "agents.sessions.rename", Channel: "C1", ThreadTS: root, Title: "Bora Bora trip prep"},
	}
	if got := s.AgentSessionCalls(); !slices.Equal(got, wantCalls) {
		t.Errorf("calls %+v\nwant %+v", got, wantCalls)
	}

	type setP = slack.AgentSessionSetStatusParameters
	errs := []struct {
		name   string
		set    *setP     // a setStatus call, or
		rename [3]string // a rename: channel, thread, title
		want   string
	}{
		{name: "status missing", set: &setP{ChannelID: "C1", ThreadTS: root}, want: "invalid_arguments"},
		{name: "status unknown", set: &setP{Status: "running", ChannelID: "C1", ThreadTS: root}, want: "invalid_arguments"},
		{name: "status without channel", set: &setP{Status: "active", ThreadTS: root}, want: "invalid_arguments"},
		{name: "status without thread", set: &setP{Status: "active", ChannelID: "C1"}, want: "invalid_arguments"},
		{name: "status in an unknown channel", set: &setP{Status: "active", ChannelID: "C404", ThreadTS: root}, want: "channel_not_found"},
		{name: "status in an unknown thread", set: &setP{Status: "active", ChannelID: "C1", ThreadTS: "1.000001"}, want: "thread_not_found"},
		{name: "status with a long title", set: &setP{Status: "active", ChannelID: "C1", ThreadTS: root, Title: strings.Repeat("é", 201)},
			want: "invalid_arguments"},
		{name: "rename without title", rename: [3]string{"C1", root, ""}, want: "invalid_arguments"},
		{name: "rename with a long title", rename: [3]string{"C1", root, strings.Repeat("x", 201)}, want: "invalid_arguments"},
		{name: "rename without thread", rename: [3]string{"C1", "", "t"}, want: "invalid_arguments"},
		{name: "rename in an unknown channel", rename: [3]string{"C404", root, "t"}, want: "channel_not_found"},
		{name: "rename in an unknown thread", rename: [3]string{"C1", "1.000001", "t"}, want: "thread_not_found"},
	}
	for _, tc := range errs {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.set != nil {
				_, err = set(*tc.set)
			} else {
				err = rename(tc.rename[0], tc.rename[1], tc.rename[2])
			}
			if got := slackErr(err); got != tc.want {
				t.Errorf("error %q, want %q", got, tc.want)
			}
		})
	}
	if n := len(s.AgentSessionCalls()); n != len(wantCalls) {
		t.Errorf("%d calls recorded after the refused ones, want %d", n, len(wantCalls))
	}
	if a, _ := s.AgentSession("C1", root); a.Title != "Bora Bora trip prep" || a.Status != "active" {
		t.Errorf("refused calls changed the session: %+v", a)
	}

	t.Run("an app-level token is refused", func(t *testing.T) {
		_, err := slack.New(s.Options().AppToken, slack.OptionAPIURL(s.APIURL())).SetAgentSessionStatusContext(ctx,
			slack.AgentSessionSetStatusParameters{Status: "active", ChannelID: "C1", ThreadTS: root})
		if got := slackErr(err); got != "not_allowed_token_type" {
			t.Errorf("error %q, want not_allowed_token_type", got)
		}
	})
	t.Run("refused", func(t *testing.T) {
		for _, m := range []string{"agents.sessions.setStatus", "agents.sessions.rename"} {
			s.Refuse(m, "feature_not_enabled")
		}
		before := s.Calls("agents.sessions.setStatus")
		if _, err := set(slack.AgentSessionSetStatusParameters{Status: "active", ChannelID: "C1", ThreadTS: root}); slackErr(err) != "feature_not_enabled" {
			t.Errorf("setStatus: %v", err)
		}
		if err := rename("C1", root, "t"); slackErr(err) != "feature_not_enabled" {
			t.Errorf("rename: %v", err)
		}
		if n := s.Calls("agents.sessions.setStatus"); n != before+1 {
			t.Errorf("a refused call was not counted: %d calls, want %d", n, before+1)
		}
	})
}

func TestAgentSessionUserEvents(t *testing.T) {
	s := newServer(t, Options{})
	api := client(s)
	ctx := testCtx(t)
	sm, events := runSocket(t, s)
	root := s.PostUserMessage("C1", "U1", "root", "")
	// The message event of the root, acknowledged and dropped.
	_ = sm.Ack(*nextOf(t, sm, events, socketmode.EventTypeEventsAPI).Request)

	// Without a session there is no stop button and no title to change.
	if err := s.StopAgentSession("C1", root, "U1"); !errors.Is(err, ErrNoStopButton) {
		t.Errorf("stop without a session: %v", err)
	}
	if err := s.RetitleAgentSession("C1", root, "U1", "x"); !errors.Is(err, ErrNoAgentSession) {
		t.Errorf("retitle without a session: %v", err)
	}
	if _, err := api.SetAgentSessionStatusContext(ctx, slack.AgentSessionSetStatusParameters{Status: "processing", ChannelID: "C1", ThreadTS: root}); err != nil {
		t.Fatal(err)
	}

	// The stop button, clicked while the session is processing.
	if err := s.StopAgentSession("C1", root, "U2"); err != nil {
		t.Fatal(err)
	}
	e := nextOf(t, sm, events, socketmode.EventTypeEventsAPI)
	_ = sm.Ack(*e.Request)
	outer := e.Data.(slackevents.EventsAPIEvent)
	stopped, ok := outer.InnerEvent.Data.(*slackevents.AgentSessionStoppedEvent)
	if !ok || stopped.Channel != "C1" || stopped.ThreadTimestamp != root || stopped.User != "U2" || stopped.EventTimestamp == "" ||
		stopped.StreamingMessageTimestamps == nil || len(stopped.StreamingMessageTimestamps) != 0 || outer.TeamID != "T0001" {
		t.Errorf("agent_session_stopped = %+v (team %s)", stopped, outer.TeamID)
	}
	// The app sets the status; the session is then not processing, and
	// shows no stop button.
	if a, _ := s.AgentSession("C1", root); a.Status != "processing" {
		t.Errorf("the click changed the status to %q", a.Status)
	}
	if _, err := api.SetAgentSessionStatusContext(ctx, slack.AgentSessionSetStatusParameters{Status: "active", ChannelID: "C1", ThreadTS: root}); err != nil {
		t.Fatal(err)
	}
	if err := s.StopAgentSession("C1", root, "U2"); !errors.Is(err, ErrNoStopButton) {
		t.Errorf("stop of an active session: %v", err)
	}

	// A person retitles it: first without a previous title, then with one.
	for i, tc := range []struct{ title, previous string }{{"Scuba diving research", ""}, {"Bora Bora trip prep", "Scuba diving research"}} {
		if err := s.RetitleAgentSession("C1", root, "U1", tc.title); err != nil {
			t.Fatal(err)
		}
		e := nextOf(t, sm, events, socketmode.EventTypeEventsAPI)
		_ = sm.Ack(*e.Request)
		changed, ok := e.Data.(slackevents.EventsAPIEvent).InnerEvent.Data.(*slackevents.AgentSessionTitleChangedEvent)
		if !ok || changed.Channel != "C1" || changed.ThreadTimestamp != root || changed.User != "U1" || changed.TeamID != "T0001" ||
			changed.Title != tc.title || changed.PreviousTitle != tc.previous {
			t.Errorf("retitle %d: agent_session_title_changed = %+v", i, changed)
		}
		var raw struct {
			Event map[string]json.RawMessage `json:"event"`
		}
		if err := json.Unmarshal(e.Request.Payload, &raw); err != nil {
			t.Fatal(err)
		}
		if _, has := raw.Event["previous_title"]; has != (tc.previous != "") {
			t.Errorf("retitle %d: previous_title present %v, want %v", i, has, tc.previous != "")
		}
	}
	if a, _ := s.AgentSession("C1", root); a.Title != "Bora Bora trip prep" {
		t.Errorf("title %q after the retitles", a.Title)
	}
	// The same title again changes nothing; the app's rename raises no
	// event either. The next event is the sentinel message.
	if err := s.RetitleAgentSession("C1", root, "U1", "Bora Bora trip prep"); err != nil {
		t.Fatal(err)
	}
	if _, err := api.RenameAgentSessionContext(ctx, slack.AgentSessionRenameParameters{ChannelID: "C1", ThreadTS: root, Title: "By the app"}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", strings.Repeat("x", 201)} {
		if err := s.RetitleAgentSession("C1", root, "U1", bad); err == nil {
			t.Errorf("a title of %d characters was taken", len(bad))
		}
	}
	sentinel := s.PostUserMessage("C1", "U1", "sentinel", root)
	e = nextOf(t, sm, events, socketmode.EventTypeEventsAPI)
	_ = sm.Ack(*e.Request)
	if msg, ok := e.Data.(slackevents.EventsAPIEvent).InnerEvent.Data.(*slackevents.MessageEvent); !ok || msg.TimeStamp != sentinel {
		t.Errorf("an event came before the sentinel: %+v", e.Data.(slackevents.EventsAPIEvent).InnerEvent)
	}
}

// TestAgentSessionEventsOverHTTP checks that the user's stop and retitle
// arrive by the signed Events API too, in slack-go's shapes.
func TestAgentSessionEventsOverHTTP(t *testing.T) {
	const secret = "fake-signing-secret"
	s := newServer(t, Options{})
	a, url := newApp(t, secret, nil)
	s.SetEventsURL(url)
	root := s.PostUserMessage("C1", "U1", "root", "")
	if _, err := client(s).SetAgentSessionStatusContext(testCtx(t),
		slack.AgentSessionSetStatusParameters{Status: "processing", ChannelID: "C1", ThreadTS: root}); err != nil {
		t.Fatal(err)
	}
	if err := s.StopAgentSession("C1", root, "U1"); err != nil {
		t.Fatal(err)
	}
	if err := s.RetitleAgentSession("C1", root, "U1", "New title"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, s, "three deliveries", func(*Server) bool { return len(a.requests()) == 3 })
	types := map[string]bool{}
	for _, r := range a.requests() {
		ev, err := slackevents.ParseEvent(r.body, slackevents.OptionNoVerifyToken())
		if err != nil {
			t.Fatalf("parse %s: %v", r.body, err)
		}
		types[ev.InnerEvent.Type] = true
		switch d := ev.InnerEvent.Data.(type) {
		case *slackevents.AgentSessionStoppedEvent:
			if d.ThreadTimestamp != root || d.User != "U1" {
				t.Errorf("stopped %+v", d)
			}
		case *slackevents.AgentSessionTitleChangedEvent:
			if d.ThreadTimestamp != root || d.Title != "New title" || d.PreviousTitle != "" {
				t.Errorf("title changed %+v", d)
			}
		}
	}
	if !types["agent_session_stopped"] || !types["agent_session_title_changed"] {
		t.Errorf("event types %v", types)
	}
	for _, d := range s.Deliveries() {
		if d.Status != http.StatusOK {
			t.Errorf("delivery %+v", d)
		}
	}
}
