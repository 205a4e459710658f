package bot_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/agentflow/llm"
	"github.com/agentbot/agentbot/bot"
	"github.com/agentbot/agentbot/bot/terminal"
	"github.com/agentbot/agentbot/internal/agentworker"
	"github.com/agentbot/agentbot/internal/fakeopenai"
	"github.com/agentbot/agentbot/internal/testenv"
	"github.com/agentbot/agentbot/sandboxes"
	"github.com/agentbot/agentbot/sandboxes/localsandbox"
	"github.com/agentbot/agentbot/store"
)

// The people of these tests: alice starts sessions, bob is allowed to use
// the bot but is no admin, root is an admin.
const (
	alice = "UALICE"
	bob   = "UBOB"
	root  = "UROOT"
)

// ownStack is the back end of the ownership tests, all real: a Temporal
// dev server of the test's own, a worker with the real workflows and
// activities over the local sandbox, a file blob store and the fake model
// (it echoes plain text), and a terminal sender (it opens fork threads).
type ownStack struct {
	tc      client.Client
	cl      *agentflow.Client
	queries *queryLog
	seq     atomic.Int64
}

type stackOptions struct {
	// noReports refuses, for good, every update-with-start of the worker's
	// Temporal client, so an agent's reports and registration to its
	// session manager fail: the manager never hears of the session.
	noReports bool
	// chat, when set, receives what the terminal sender posts.
	chat io.Writer
	// noWorker starts no worker: nothing runs the sessions.
	noWorker bool
	// policy is the configured tenant policy (of the gateway's client and
	// the worker's activities).
	policy *agentflow.TenantPolicy
}

func startOwnStack(t *testing.T, opts stackOptions) *ownStack {
	t.Helper()
	ctx := context.Background()
	srv, err := testenv.StartTemporal(ctx, testenv.TemporalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	s := &ownStack{queries: &queryLog{}}
	tc, err := client.Dial(client.Options{HostPort: srv.FrontendHostPort(), Namespace: "default", Logger: testenv.Logger(),
		Interceptors: []interceptor.ClientInterceptor{s.queries}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	s.tc, s.cl = tc, agentflow.NewClient(tc)

	reg := sandboxes.NewRegistry()
	lb, err := localsandbox.New(localsandbox.Options{BaseDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(localsandbox.Name, lb); err != nil {
		t.Fatal(err)
	}
	blobs, err := store.OpenBlobs(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	model := fakeopenai.New(fakeopenai.Options{Script: fakeopenai.DirectiveScript()})
	t.Cleanup(model.Close)
	llmc, err := llm.New(llm.Config{BaseURL: model.URL()})
	if err != nil {
		t.Fatal(err)
	}
	acts := &agentflow.Activities{Sandboxes: reg, Blobs: blobs, Model: llmc, ModelName: "fake",
		Chat: map[string]agentflow.ChatSender{"term": terminal.NewSender(cmp.Or[io.Writer](opts.chat, io.Discard))}}
	acts.Temporal = tc
	if opts.noReports {
		acts.Temporal = failingReports{tc}
	}
	if opts.policy != nil {
		acts.Policy = *opts.policy
		s.cl.Policy = opts.policy
	}
	if opts.noWorker {
		return s
	}
	w := worker.New(tc, agentflow.TaskQueue, testenv.WorkerOptions())
	agentworker.Register(w, acts)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return s
}

// router is a gateway replica with a thread cache of its own.
func (s *ownStack) router(t *testing.T, cache bot.Cache) *bot.Router {
	return &bot.Router{Sessions: s.cl, Cache: cache,
		Access:   bot.Access{Users: []string{alice, bob}, Admins: []string{root}},
		Backends: []string{"local"}, DefaultBackend: "local",
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))}
}

func (s *ownStack) id(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, s.seq.Add(1))
}

// event makes an event of kind in thread by user.
func (s *ownStack) event(kind bot.Kind, thread, user, text string) bot.Event {
	id := s.id("ev")
	ev := bot.Event{ID: id, Platform: "term", Kind: kind, ThreadKey: thread, Channel: "term",
		User: user, UserName: strings.ToLower(strings.TrimPrefix(user, "U")), Text: text}
	if kind != bot.KindCommand {
		ev.MessageID = id
	}
	return ev
}

// handle routes ev and returns what the router answered.
func handle(t *testing.T, r *bot.Router, ev bot.Event) []bot.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var rec replies
	if err := r.Handle(ctx, ev, &rec); err != nil {
		t.Fatalf("Handle(%s %q by %s): %v", ev.Kind, ev.Text, ev.User, err)
	}
	return rec.list()
}

// say sends a message (mention or plain) and waits for its turn's answer.
func (s *ownStack) say(t *testing.T, r *bot.Router, kind bot.Kind, thread, user, text string) *agentflow.TurnResult {
	t.Helper()
	ev := s.event(kind, thread, user, text)
	if got := handle(t, r, ev); len(got) != 0 {
		t.Fatalf("%s %q by %s: answered %+v", kind, text, user, got)
	}
	// The fake model answers at once; a message the session never got
	// is never answered, and the wait would go on until ctx ends.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := s.cl.Wait(ctx, thread, ev.MessageID)
	if err != nil {
		t.Fatalf("%s %q by %s never reached the session: %v", kind, text, user, err)
	}
	if res.Result == nil || res.Result.Status != agentflow.TurnDone {
		t.Fatalf("%s %q by %s: turn %+v", kind, text, user, res.Result)
	}
	return res.Result
}

func (s *ownStack) state(t *testing.T, thread string) agentflow.SessionView {
	t.Helper()
	v, err := s.cl.State(context.Background(), thread)
	if err != nil {
		t.Fatalf("state of %s: %v", thread, err)
	}
	return v
}

// replies records what the router answers.
type replies struct {
	mu sync.Mutex
	rs []bot.Response
}

func (r *replies) Reply(ctx context.Context, resp bot.Response) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rs = append(r.rs, resp)
	return nil
}

func (r *replies) list() []bot.Response {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]bot.Response(nil), r.rs...)
}

func texts(rs []bot.Response) string {
	var b strings.Builder
	for _, r := range rs {
		b.WriteString(r.Text + "\n")
	}
	return b.String()
}

// queryLog is a client interceptor that records the arguments of every
// query the gateway's Temporal client sends: the transcript query's
// argument (who asks) is not in any workflow history.
type queryLog struct {
	interceptor.ClientInterceptorBase
	mu   sync.Mutex
	seen []queryCall
}

type queryCall struct {
	workflowID, name string
	args             []any
}

func (q *queryLog) InterceptClient(next interceptor.ClientOutboundInterceptor) interceptor.ClientOutboundInterceptor {
	return &queryRecorder{ClientOutboundInterceptorBase: interceptor.ClientOutboundInterceptorBase{Next: next}, log: q}
}

func (q *queryLog) calls(workflowID, name string) []queryCall {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []queryCall
	for _, c := range q.seen {
		if c.workflowID == workflowID && c.name == name {
			out = append(out, c)
		}
	}
	return out
}

type queryRecorder struct {
	interceptor.ClientOutboundInterceptorBase
	log *queryLog
}

func (r *queryRecorder) QueryWorkflow(ctx context.Context, in *interceptor.ClientQueryWorkflowInput) (converter.EncodedValue, error) {
	r.log.mu.Lock()
	r.log.seen = append(r.log.seen, queryCall{workflowID: in.WorkflowID, name: in.QueryType, args: append([]any(nil), in.Args...)})
	r.log.mu.Unlock()
	return r.ClientOutboundInterceptorBase.QueryWorkflow(ctx, in)
}

// controlRequest is what every control update of a session carries: who
// asks. ForkRequest (to the manager) names them Requester.
type controlRequest struct {
	By        string `json:"by"`
	Requester string `json:"requester"`
}

type updateCall struct{ name, by string }

// updates returns the updates a workflow accepted, in order, with who
// asked for each: what the workflow itself received.
func (s *ownStack) updates(t *testing.T, workflowID string) []updateCall {
	t.Helper()
	it := s.tc.GetWorkflowHistory(context.Background(), workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var out []updateCall
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		a := e.GetWorkflowExecutionUpdateAcceptedEventAttributes()
		if a == nil {
			continue
		}
		in := a.GetAcceptedRequest().GetInput()
		var req controlRequest
		if err := converter.GetDefaultDataConverter().FromPayloads(in.GetArgs(), &req); err != nil {
			t.Fatal(err)
		}
		by := req.By
		if by == "" {
			by = req.Requester
		}
		out = append(out, updateCall{name: in.GetName(), by: by})
	}
	return out
}

// startInput returns the input a workflow was started with.
func (s *ownStack) startInput(t *testing.T, workflowID string) agentflow.AgentInput {
	t.Helper()
	it := s.tc.GetWorkflowHistory(context.Background(), workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := e.GetWorkflowExecutionStartedEventAttributes(); a != nil {
			var in agentflow.AgentInput
			if err := converter.GetDefaultDataConverter().FromPayloads(a.GetInput(), &in); err != nil {
				t.Fatal(err)
			}
			return in
		}
	}
	t.Fatalf("no start event for %s", workflowID)
	return agentflow.AgentInput{}
}

const refusal = "Only the person who started this session (or an admin)"

// TestOwnershipHijack: a session belongs to whoever started it. Bob, who
// may use the bot and chats in Alice's thread, cannot take the session
// over by writing there: every control (switch, title, stop, done, fork,
// export, destroy) from him is refused, whichever gateway replica and
// whatever its cache holds; Alice's and an admin's go through, and the
// session receives each of them with who asked.
func TestOwnershipHijack(t *testing.T) {
	s := startOwnStack(t, stackOptions{})
	ctx := context.Background()
	cache := store.NewMemoryCache()
	r := s.router(t, cache)
	const thread = "term:hijack"
	wfID := agentflow.AgentWorkflowID(thread)

	s.say(t, r, bot.KindMention, thread, alice, "hello from alice")
	// Bob chats in the thread, and mentions the bot there: that is
	// allowed, and changes no owner.
	s.say(t, r, bot.KindMessage, thread, bob, "hi")
	s.say(t, r, bot.KindMention, thread, bob, "hey bot")
	if v := s.state(t, thread); v.Requester != alice {
		t.Fatalf("requester %q, want %q", v.Requester, alice)
	}
	in := s.startInput(t, wfID)
	if in.Requester != alice || len(in.Admins) != 1 || in.Admins[0] != root {
		t.Errorf("the session started with requester %q, admins %q; want %q, [%s]", in.Requester, in.Admins, alice, root)
	}

	controls := []string{"switch local", "title bob's now", "stop", "done", "fork", "export", "destroy"}
	refuseBob := func(t *testing.T, r *bot.Router) {
		t.Helper()
		for _, c := range controls {
			got := handle(t, r, s.event(bot.KindCommand, thread, bob, c))
			if len(got) != 1 || !strings.Contains(got[0].Text, refusal) || !got[0].Private {
				t.Errorf("bob's %q: answered %q, want a private refusal", c, texts(got))
			}
		}
	}
	t.Run("bob is refused", func(t *testing.T) { refuseBob(t, r) })
	t.Run("bob is refused by another replica", func(t *testing.T) { refuseBob(t, s.router(t, store.NewMemoryCache())) })
	t.Run("bob is refused whatever the cache says", func(t *testing.T) {
		// An entry written from an event's author (as an older gateway
		// did) must not make bob the owner: ownership is the session's.
		poisoned := store.NewMemoryCache()
		if err := poisoned.PutThread(ctx, thread, store.ThreadEntry{WorkflowID: wfID, Requester: bob}, store.ThreadTTL); err != nil {
			t.Fatal(err)
		}
		refuseBob(t, s.router(t, poisoned))
	})
	t.Run("the session decides", func(t *testing.T) {
		// An admin added to the gateway's configuration after the
		// session started passes the gateway's check, but the session
		// checks the admins it started with, and its refusal reaches
		// the person as a private sentence.
		later := s.router(t, store.NewMemoryCache())
		later.Access.Admins = []string{"UNEWADMIN"}
		for _, c := range []string{"title the new admin's", "export"} {
			got := handle(t, later, s.event(bot.KindCommand, thread, "UNEWADMIN", c))
			if want := "O" + agentflow.ErrNotOwnerText[1:] + "."; len(got) != 1 || got[0].Text != want || !got[0].Private {
				t.Errorf("a later admin's %q: answered %q, want the session's private refusal", c, texts(got))
			}
		}
	})
	if v := s.state(t, thread); v.Title != "hello from alice" || v.Status == agentflow.StatusPaused ||
		v.Status == agentflow.StatusDestroyed || v.Forks != 0 {
		t.Fatalf("bob changed the session: %+v", v)
	}
	if l, err := s.cl.List(ctx, thread); err != nil || len(l) != 1 {
		t.Fatalf("sessions after bob's fork: %+v, %v", l, err)
	}

	// Alice controls her session.
	want := map[string]string{
		"title alice's session": "Renamed to *alice's session*",
		"stop":                  "Nothing was running",
		"switch local":          "local",
		"export":                "hello from alice",
	}
	for _, c := range []string{"title alice's session", "stop", "switch local", "export"} {
		got := handle(t, r, s.event(bot.KindCommand, thread, alice, c))
		if c == "switch local" && len(got) == 0 {
			continue // done at once (already on local): the session says so
		}
		if len(got) != 1 || !strings.Contains(got[0].Text, want[c]) {
			t.Errorf("alice's %q: answered %q, want %q", c, texts(got), want[c])
		}
	}
	// A fork is answered on acceptance; the fork links itself.
	if got := handle(t, r, s.event(bot.KindCommand, thread, alice, "fork")); len(got) > 1 || (len(got) == 1 && !strings.Contains(got[0].Text, "Forking")) {
		t.Errorf("alice's fork: answered %q", texts(got))
	}
	var fork string
	waitUntil(t, "alice's fork", func() bool {
		l, err := s.cl.List(ctx, thread)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range l {
			if e.Parent == thread {
				fork = e.ThreadKey
			}
		}
		return fork != ""
	})
	if v := s.state(t, fork); v.Requester != alice {
		t.Errorf("the fork's requester is %q, want %q", v.Requester, alice)
	}
	// The fork is alice's too: bob cannot end it.
	if got := handle(t, r, s.event(bot.KindCommand, fork, bob, "destroy")); len(got) != 1 || !strings.Contains(got[0].Text, refusal) {
		t.Errorf("bob's destroy of the fork: answered %q", texts(got))
	}
	// done is answered on acceptance (or not at all when done at once);
	// the session posts the outcome.
	if got := handle(t, r, s.event(bot.KindCommand, thread, alice, "done")); len(got) > 1 || (len(got) == 1 && !strings.Contains(got[0].Text, "Pausing")) {
		t.Errorf("alice's done: answered %q", texts(got))
	}
	waitUntil(t, "alice's session to pause", func() bool { return s.state(t, thread).Status == agentflow.StatusPaused })

	// An admin controls any session.
	for c, w := range map[string]string{"title root's": "Renamed to *root's*", "export": "hello from alice"} {
		if got := handle(t, r, s.event(bot.KindCommand, thread, root, c)); len(got) != 1 || !strings.Contains(got[0].Text, w) {
			t.Errorf("root's %q: answered %q, want %q", c, texts(got), w)
		}
	}
	if got := handle(t, r, s.event(bot.KindCommand, thread, root, "destroy")); len(got) != 1 || !strings.Contains(got[0].Text, "Destroying this session") {
		t.Fatalf("root's destroy: answered %q", texts(got))
	}
	// Replies in the thread hear that the session is gone (once its
	// workflow has ended, a moment after the destroy: in that moment the
	// session itself says so in the thread).
	waitUntil(t, "the destroyed session to end", func() bool {
		p, err := s.cl.Describe(context.Background(), thread)
		return err == nil && p == agentflow.PresenceEnded
	})
	if got := handle(t, r, s.event(bot.KindMessage, thread, bob, "hi again")); len(got) != 1 || !strings.Contains(got[0].Text, "destroyed") {
		t.Errorf("a reply after destroy: answered %q", texts(got))
	}

	// What the session received: every control with who asked, none of
	// bob's. (Manager updates carry the asker as ForkRequest.Requester.)
	var got []string
	for _, u := range s.updates(t, wfID) {
		if u.name == agentflow.UpdateMessage || u.name == agentflow.UpdateForkSource {
			continue // messages carry an author; fork_source is the manager's call
		}
		got = append(got, u.name+" by "+u.by)
	}
	wantUpdates := []string{"title by " + alice, "stop by " + alice, "switch by " + alice, "fork by " + alice, "pause by " + alice,
		"title by " + root, "destroy by " + root}
	if strings.Join(got, ", ") != strings.Join(wantUpdates, ", ") {
		t.Errorf("the session received\n  %s\nwant\n  %s", strings.Join(got, ", "), strings.Join(wantUpdates, ", "))
	}
	// Every control request went through the manager, with who asked;
	// bob's were refused there.
	var asked []string
	for _, u := range s.updates(t, agentflow.ManagerWorkflowID(thread)) {
		if u.name == agentflow.ManagerUpdateControl && u.by == alice {
			asked = append(asked, u.by)
		}
	}
	if len(asked) < 5 {
		t.Errorf("the manager got %d control requests of alice's, want at least 5 (title, stop, switch, fork, done)", len(asked))
	}
	// The transcript query says who asks, so the session can refuse
	// others (its one argument).
	var askers []string
	for _, c := range s.queries.calls(wfID, agentflow.QueryTranscript) {
		if len(c.args) != 1 {
			t.Errorf("transcript query with arguments %v, want one (who asks)", c.args)
			continue
		}
		askers = append(askers, fmt.Sprint(c.args[0]))
	}
	if strings.Join(askers, ",") != "UNEWADMIN,"+alice+","+root {
		t.Errorf("transcript asked by %q, want [UNEWADMIN %s %s]", askers, alice, root)
	}
}

// TestOwnershipDeafThread: whether a thread has a session is a fact of
// Temporal, not of the session manager's registry. A session whose
// reports to the manager all failed still takes replies in its thread,
// on any gateway replica; once destroyed, its thread says so; a thread
// with no session stays quiet and gets none.
func TestOwnershipDeafThread(t *testing.T) {
	s := startOwnStack(t, stackOptions{noReports: true})
	ctx := context.Background()
	const thread = "term:deaf"

	s.say(t, s.router(t, store.NewMemoryCache()), bot.KindMention, thread, alice, "hello")
	if _, err := s.cl.Lookup(ctx, thread); !errors.Is(err, agentflow.ErrNoSession) {
		t.Fatalf("the manager knows the session (%v): the test needs one it never heard of", err)
	}

	for name, cache := range map[string]bot.Cache{"empty cache": store.NewMemoryCache(), "no cache": nil} {
		t.Run(name, func(t *testing.T) {
			r := s.router(t, cache)
			res := s.say(t, r, bot.KindMessage, thread, bob, "a reply from "+name)
			if !strings.Contains(res.Answer, "a reply from "+name) {
				t.Errorf("answer %q", res.Answer)
			}
			// A thread with no session: plain chat is people talking.
			if got := handle(t, r, s.event(bot.KindMessage, "term:nobody-"+strings.ReplaceAll(name, " ", "-"), bob, "hi")); len(got) != 0 {
				t.Errorf("chat in a thread without a session: answered %q", texts(got))
			}
			// Commands find the session too.
			if got := handle(t, r, s.event(bot.KindCommand, thread, alice, "status")); len(got) != 1 || !strings.Contains(got[0].Text, "hello") {
				t.Errorf("status: answered %q", texts(got))
			}
		})
	}
	var notFound *serviceerror.NotFound
	if _, err := s.tc.DescribeWorkflow(ctx, agentflow.AgentWorkflowID("term:nobody-empty-cache"), ""); !errors.As(err, &notFound) {
		t.Errorf("chat in a thread without a session started something: %v", err)
	}

	// Destroy, then the thread says the session is gone, on a replica
	// that never saw it.
	if got := handle(t, s.router(t, store.NewMemoryCache()), s.event(bot.KindCommand, thread, alice, "destroy")); len(got) != 1 ||
		!strings.Contains(got[0].Text, "Destroying this session") {
		t.Fatalf("destroy: answered %q", texts(got))
	}
	waitUntil(t, "the destroyed session to end", func() bool {
		p, err := s.cl.Describe(context.Background(), thread)
		return err == nil && p == agentflow.PresenceEnded
	})
	got := handle(t, s.router(t, store.NewMemoryCache()), s.event(bot.KindMessage, thread, bob, "anyone there?"))
	if len(got) != 1 || !strings.Contains(got[0].Text, "destroyed") {
		t.Errorf("a reply after destroy: answered %q", texts(got))
	}
}

// testWriter sends a logger's output to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// failingReports is the worker's Temporal client with every update-with-
// start refused for good: an agent's reports (and registration) to its
// session manager fail, while the manager can still hand requests over.
type failingReports struct{ client.Client }

func (failingReports) UpdateWithStartWorkflow(context.Context, client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	return nil, temporal.NewNonRetryableApplicationError("reports to the session manager are switched off in this test", "Permanent", nil)
}
