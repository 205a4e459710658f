package reliability_test

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	dockerclient "github.com/docker/docker/client"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/agentbot/agentbot/agentflow"
	slackbot "github.com/agentbot/agentbot/bot/slack"
	"github.com/agentbot/agentbot/internal/fakeslack"
	"github.com/agentbot/agentbot/internal/testenv"
)

// controlWait bounds how long a fork or switch may take to be told in its
// thread: a switch to Docker makes a container and restores the
// workspace into it, on a loaded machine.
const controlWait = 3 * time.Minute

// A concurrent request of item 7: who gives it, and what they type in the
// session's thread.
type controlAsk struct {
	by, text string
	fork     bool
	backend  string // of a switch
}

// TestForkSwitchAtOnce: alice's session has written a file; then, at the
// same moment, alice and root (an admin) each give a control in its
// thread — a fork and a switch, two forks, two switches to different
// backends, or a switch and a fork — typed as people do in a thread
// ("@bot fork", "!agent switch docker"), while the session is idle or
// while a turn of it runs. Both are told a true outcome
// (the fork's thread and backend, the switch's backends; never "something
// went wrong" and never silence), and the outcomes fit one order of the
// two requests. The registry — the sessions' memos (list), the tenant
// manager's entries and `/agent list` — names exactly the sessions that
// exist, with the backends the outcomes said; every one of them has the
// file as written and answers a later message in its own thread; a
// session on Docker has its one container, and none keeps the container
// of a backend it left.
func TestForkSwitchAtOnce(t *testing.T) {
	cctx, cancel := contextWithTimeout(time.Minute)
	defer cancel()
	if err := testenv.CheckDocker(cctx); err != nil {
		t.Fatalf("this scenario switches sessions to Docker (run scripts/setup.sh --test): %v", err)
	}
	s := startStack(t, withEnv("AGENTBOT_BACKENDS=local,docker", "AGENTBOT_DOCKER_IMAGE="+testenv.TestImage(),
		"AGENTBOT_DOCKER_DISK_GB=0"))
	nsID := namespaceID(t, s)
	docker, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { docker.Close() })
	// Registered after the stack's own cleanups, so it runs first: the
	// worker is stopped before its containers are removed, or it could
	// make another one.
	t.Cleanup(func() {
		s.mu.Lock()
		w := s.worker
		s.mu.Unlock()
		if w != nil {
			s.killWorker(t)
		}
		removeNamespaceContainers(t, nsID)
	})

	repeat(t, "7. fork and switch of one session at the same moment (fork+switch, two forks, two switches, switch+fork; idle or mid-turn): "+
		"both told a true outcome in one consistent order; list, manager and memos name exactly the sessions with their backends; "+
		"every copy has the file and answers", func(t *testing.T, i int) {
		ch := fmt.Sprintf("C7RUN%d", i)
		content := fmt.Sprintf("s7run%dnotes", i)
		var asks []controlAsk
		kind := (i - 1) % 4
		// Every other run the requests come while a turn runs (so they
		// wait for it); each kind of pair gets both over eight runs.
		busy := (kind%2 == 1) != ((i-1)/4%2 == 1)
		switch kind {
		case 0:
			asks = []controlAsk{{by: alice, text: "<@UBOT> fork", fork: true}, {by: root, text: "!agent switch docker", backend: "docker"}}
		case 1:
			asks = []controlAsk{{by: alice, text: "<@UBOT> fork", fork: true}, {by: root, text: "!agent fork", fork: true}}
		case 2:
			asks = []controlAsk{{by: alice, text: "<@UBOT> switch docker", backend: "docker"}, {by: root, text: "!agent switch local", backend: "local"}}
		default:
			asks = []controlAsk{{by: alice, text: "!agent switch docker", backend: "docker"}, {by: root, text: "<@UBOT> fork", fork: true}}
		}

		// Alice's session, with a file in its workspace.
		rootTS := s.slack.PostUserMessage(ch, alice, "<@UBOT> write: notes.txt <<< "+content, "")
		waitText(t, s, ch, rootTS, func(m fakeslack.Message) bool { return isDone(m) && strings.Contains(m.Text, "[write_file]") },
			"the answer to the write", answerWait)
		origKey := slackbot.ThreadKey(s.slack.Options().TeamID, ch, rootTS)

		busyTok := fmt.Sprintf("s7run%dbusyz", i)
		if busy {
			s.slack.PostUserMessage(ch, alice, "sh: sleep 3; echo "+busyTok, rootTS)
			bctx, bcancel := contextWithTimeout(answerWait)
			defer bcancel()
			if err := s.slack.WaitFor(bctx, func(*fakeslack.Server) bool { return s.turns("echo "+busyTok) > 0 }); err != nil {
				t.Fatalf("the turn that keeps the session busy did not start within %v", answerWait)
			}
		}

		// Both at once.
		before := len(s.slack.Thread(ch, rootTS))
		start := make(chan struct{})
		done := make(chan struct{}, len(asks))
		for _, a := range asks {
			go func() {
				defer func() { done <- struct{}{} }()
				<-start
				s.slack.PostUserMessage(ch, a.by, a.text, rootTS)
			}()
		}
		close(start)
		for range asks {
			<-done
		}

		// Both outcomes, in the thread.
		forks, switches := 0, 0
		for _, a := range asks {
			if a.fork {
				forks++
			} else {
				switches++
			}
		}
		var outcomes []outcome
		wctx, wcancel := contextWithTimeout(controlWait)
		defer wcancel()
		bad := ""
		err := s.slack.WaitFor(wctx, func(fs *fakeslack.Server) bool {
			outcomes = outcomes[:0]
			for _, m := range fs.Thread(ch, rootTS)[before:] {
				if m.BotID == "" {
					continue
				}
				if isFailure(m.Text) {
					bad = m.Text
					return true
				}
				if o, ok := parseOutcome(m.Text); ok {
					outcomes = append(outcomes, o)
				}
			}
			for _, e := range fs.Ephemerals(ch) {
				if isFailure(e.Text) {
					bad = fmt.Sprintf("(to %s) %s", e.Recipient, e.Text)
					return true
				}
			}
			f, sw := 0, 0
			for _, o := range outcomes {
				if o.kind == outcomeFork {
					f++
				} else {
					sw++
				}
			}
			return f >= forks && sw >= switches
		})
		if bad != "" {
			t.Fatalf("a requester was told %q:\n%s", bad, dumpChannelThread(s, ch, rootTS))
		}
		if err != nil {
			t.Fatalf("within %v, not both requests were told their outcome (%d forks and %d switches asked; told %+v):\n%s",
				controlWait, forks, switches, outcomes, dumpChannelThread(s, ch, rootTS))
		}
		f, sw := 0, 0
		for _, o := range outcomes {
			if o.kind == outcomeFork {
				f++
			} else {
				sw++
			}
		}
		if f != forks || sw != switches {
			t.Fatalf("told %d fork and %d switch outcomes for %d forks and %d switches:\n%s", f, sw, forks, switches, dumpChannelThread(s, ch, rootTS))
		}

		t.Logf("told: %s", describeOutcomes(outcomes))
		if busy {
			if s.slack.WaitFor(wctx, func(*fakeslack.Server) bool { return countText(s, ch, rootTS, busyTok) > 0 }) != nil {
				t.Fatalf("the turn that was running when the requests came was not answered:\n%s", dumpChannelThread(s, ch, rootTS))
			}
		}
		// Each switch is told the backend it asked for.
		var asked, told []string
		for _, a := range asks {
			if !a.fork {
				asked = append(asked, a.backend)
			}
		}
		for _, o := range outcomes {
			if o.kind != outcomeFork {
				told = append(told, o.backend)
			}
		}
		slices.Sort(asked)
		slices.Sort(told)
		if !slices.Equal(asked, told) {
			t.Fatalf("switches to %v were told they are on %v:\n%s", asked, told, dumpChannelThread(s, ch, rootTS))
		}
		// The outcomes fit one order of the requests.
		final, ok := consistentOrder("local", outcomes)
		if !ok {
			t.Fatalf("the outcomes %+v fit no order of the requests (starting on local):\n%s", outcomes, dumpChannelThread(s, ch, rootTS))
		}
		want := map[string]string{origKey: final} // thread key -> backend
		var forkTS []string
		for _, o := range outcomes {
			if o.kind != outcomeFork {
				continue
			}
			if o.forkCh != ch {
				t.Fatalf("the fork was linked to a thread in channel %s, not %s", o.forkCh, ch)
			}
			key := slackbot.ThreadKey(s.slack.Options().TeamID, ch, o.forkTS)
			if _, dup := want[key]; dup {
				t.Fatalf("two forks were linked to the same thread %s:\n%s", key, dumpChannelThread(s, ch, rootTS))
			}
			want[key] = o.backend
			forkTS = append(forkTS, o.forkTS)
			// The fork's own thread says where it came from, on the same backend.
			waitText(t, s, ch, o.forkTS, func(m fakeslack.Message) bool {
				return m.BotID != "" && strings.HasPrefix(m.Text, "Forked from ") && strings.Contains(m.Text, " onto "+o.backend+",")
			}, "the fork's note that it was forked onto "+o.backend, answerWait)
		}

		// The registry: the sessions' memos, the tenant's manager, each
		// session's own state, and what /agent list shows.
		checkRegistry(t, s, ch, origKey, want)
		checkList(t, s, ch, want)

		// Every copy has the file as written and answers in its own thread.
		threads := append([]string{rootTS}, forkTS...)
		for j, ts := range threads {
			s.slack.PostUserMessage(ch, alice, fmt.Sprintf("sh: echo s7run%dcat%dz; cat notes.txt", i, j), ts)
		}
		for j, ts := range threads {
			tok := fmt.Sprintf("s7run%dcat%dz", i, j)
			waitText(t, s, ch, ts, func(m fakeslack.Message) bool {
				return isDone(m) && strings.Contains(m.Text, tok)
			}, "the answer to cat in thread "+ts, controlWait)
			for _, m := range s.slack.Thread(ch, ts) {
				if isDone(m) && strings.Contains(m.Text, tok) && !strings.Contains(m.Text+"\n", tok+"\n"+content+"\n") {
					t.Errorf("in thread %s the file reads otherwise than %q: %q", ts, content, m.Text)
				}
			}
			for k, other := range threads {
				if k != j && countText(s, ch, other, tok) > 0 {
					t.Errorf("the answer to thread %s's message (%s) also went to thread %s", ts, tok, other)
				}
			}
		}

		// Each session on Docker has its one container, and no session
		// keeps one it switched away from.
		sctx, scancel := contextWithTimeout(answerWait)
		defer scancel()
		for k, b := range want {
			v, err := agentflow.NewClient(s.temporalClient()).State(sctx, k)
			if err != nil {
				t.Fatalf("the state of %s: %v", k, err)
			}
			ids := sessionContainers(t, docker, v.WorkflowID)
			switch {
			case b == "docker" && (len(ids) != 1 || v.SandboxID == "" || !strings.HasPrefix(ids[0], v.SandboxID)):
				t.Errorf("session %s on docker (sandbox %q) has the containers %v, want just its own", k, v.SandboxID, ids)
			case b != "docker" && len(ids) != 0:
				t.Errorf("session %s on %s still has the containers %v", k, b, ids)
			}
		}
	})
}

// sessionContainers lists the IDs of the containers, running or not, of
// the session with workflow ID id.
func sessionContainers(t *testing.T, cli *dockerclient.Client, id string) []string {
	t.Helper()
	ctx, cancel := contextWithTimeout(time.Minute)
	defer cancel()
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", agentflow.LabelSession+"="+id))})
	if err != nil {
		t.Fatalf("listing the containers of %s: %v", id, err)
	}
	var ids []string
	for _, c := range cs {
		ids = append(ids, c.ID)
	}
	return ids
}

// outcomeKind is what a control request's outcome message says happened.
type outcomeKind int

const (
	outcomeFork    outcomeKind = iota // "Forked into <link> (…) on B."
	outcomeSwitch                     // "Switched A → B; …"
	outcomeAlready                    // "Already on B; nothing to do."
)

// outcome is one control outcome told in the session's thread.
type outcome struct {
	kind           outcomeKind
	from, backend  string
	forkCh, forkTS string
}

var (
	forkedRe   = regexp.MustCompile(`^Forked into <https?://[^|>]*/archives/([A-Za-z0-9]+)/p(\d{7,})[^|>]*\|thread> .* on ([a-z0-9]+)\.$`)
	switchedRe = regexp.MustCompile(`^Switched ([a-z0-9]+) → ([a-z0-9]+); \d+ files came along\.$`)
	alreadyRe  = regexp.MustCompile(`^Already on ([a-z0-9]+); nothing to do\.$`)
)

// parseOutcome reads a fork's or a switch's outcome; ok is false for
// anything else (acknowledgements, answers).
func parseOutcome(text string) (outcome, bool) {
	text = strings.TrimSpace(text)
	if m := forkedRe.FindStringSubmatch(text); m != nil {
		p := m[2]
		return outcome{kind: outcomeFork, forkCh: m[1], forkTS: p[:len(p)-6] + "." + p[len(p)-6:], backend: m[3]}, true
	}
	if m := switchedRe.FindStringSubmatch(text); m != nil {
		return outcome{kind: outcomeSwitch, from: m[1], backend: m[2]}, true
	}
	if m := alreadyRe.FindStringSubmatch(text); m != nil {
		return outcome{kind: outcomeAlready, backend: m[1]}, true
	}
	return outcome{}, false
}

// describeOutcomes renders outcomes for the log.
func describeOutcomes(outs []outcome) string {
	var parts []string
	for _, o := range outs {
		switch o.kind {
		case outcomeFork:
			parts = append(parts, "forked on "+o.backend)
		case outcomeSwitch:
			parts = append(parts, "switched "+o.from+" → "+o.backend)
		case outcomeAlready:
			parts = append(parts, "already on "+o.backend)
		}
	}
	return strings.Join(parts, ", ")
}

// isFailure says a message tells a person that their request failed or
// was lost, which no request of item 7 may be told.
func isFailure(text string) bool {
	for _, s := range []string{"Sorry", "something went wrong", "Fork failed", "Could not", "could not", "did not answer", "no session"} {
		if strings.Contains(text, s) {
			return true
		}
	}
	return false
}

// consistentOrder looks for an order of the outcomes that a session on
// start could have gone through, one request at a time: a fork is on the
// backend of the moment, a switch from it, "already" on it. It returns the
// backend that order ends on.
func consistentOrder(start string, outs []outcome) (string, bool) {
	if len(outs) == 0 {
		return start, true
	}
	for i, o := range outs {
		next := start
		switch o.kind {
		case outcomeFork, outcomeAlready:
			if o.backend != start {
				continue
			}
		case outcomeSwitch:
			if o.from != start {
				continue
			}
			next = o.backend
		}
		rest := slices.Concat(outs[:i], outs[i+1:])
		if end, ok := consistentOrder(next, rest); ok {
			return end, true
		}
	}
	return "", false
}

// checkRegistry waits until the sessions of channel ch in the tenant's
// list (the sessions' memos, through Temporal's visibility) and in the
// tenant manager's registry are exactly want (thread key -> backend), the
// forks with parent orig, and checks each session's own state.
func checkRegistry(t *testing.T, s *stack, ch, orig string, want map[string]string) {
	t.Helper()
	prefix := slackbot.ThreadKey(s.slack.Options().TeamID, ch, "")
	sessions := agentflow.NewClient(s.temporalClient())
	diff := func(what string, got []agentflow.SessionEntry) string {
		var problems []string
		seen := map[string]bool{}
		for _, e := range got {
			if !strings.HasPrefix(e.ThreadKey, prefix) {
				continue
			}
			seen[e.ThreadKey] = true
			b, ok := want[e.ThreadKey]
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("%s lists %s (%s, %s), which is no session of this run", what, e.ThreadKey, e.Backend, e.Status))
			case e.Backend != b:
				problems = append(problems, fmt.Sprintf("%s has %s on %s, not %s", what, e.ThreadKey, e.Backend, b))
			case e.Status == agentflow.StatusDestroyed:
				problems = append(problems, fmt.Sprintf("%s has %s destroyed", what, e.ThreadKey))
			case e.ThreadKey != orig && e.Parent != orig:
				problems = append(problems, fmt.Sprintf("%s has fork %s with parent %q, not %s", what, e.ThreadKey, e.Parent, orig))
			}
		}
		for k := range want {
			if !seen[k] {
				problems = append(problems, fmt.Sprintf("%s lacks %s", what, k))
			}
		}
		slices.Sort(problems)
		return strings.Join(problems, "; ")
	}
	var problem string
	ctx, cancel := contextWithTimeout(answerWait)
	defer cancel()
	for {
		problem = ""
		l, err := sessions.List(ctx, orig)
		if err != nil {
			problem = "list: " + err.Error()
		} else {
			problem = diff("the list", l)
		}
		if problem == "" {
			var reg []agentflow.SessionEntry
			q, err := s.temporalClient().QueryWorkflow(ctx, agentflow.ManagerWorkflowID(orig), "", agentflow.ManagerQueryList)
			if err == nil {
				err = q.Get(&reg)
			}
			if err != nil {
				problem = "the manager's registry: " + err.Error()
			} else {
				problem = diff("the manager's registry", reg)
			}
		}
		if problem == "" {
			for k, b := range want {
				v, err := sessions.State(ctx, k)
				if err != nil {
					problem = fmt.Sprintf("the state of %s: %v", k, err)
				} else if v.Backend != b {
					problem = fmt.Sprintf("the session %s says it is on %s, not %s", k, v.Backend, b)
				}
			}
		}
		if problem == "" {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the registry does not settle on %v within %v: %s", want, answerWait, problem)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// checkList has alice run `/agent list` in ch and checks that it shows
// exactly the sessions of want, each on its backend.
func checkList(t *testing.T, s *stack, ch string, want map[string]string) {
	t.Helper()
	before := len(s.slack.Responses())
	s.slack.SlashCommand(ch, alice, "list")
	var text string
	ctx, cancel := contextWithTimeout(answerWait)
	defer cancel()
	err := s.slack.WaitFor(ctx, func(fs *fakeslack.Server) bool {
		for _, r := range fs.Responses()[before:] {
			if r.Channel == ch && r.User == alice {
				text = r.Text
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatalf("/agent list was not answered within %v", answerWait)
	}
	if !strings.HasPrefix(text, "Sessions in this channel") {
		t.Fatalf("/agent list answered %q", text)
	}
	lines := strings.Split(text, "\n")[1:]
	if len(lines) != len(want) {
		t.Fatalf("/agent list shows %d sessions, want %d (%v):\n%s", len(lines), len(want), want, text)
	}
	for k, b := range want {
		_, _, ts, err := slackbot.ParseThreadKey(k)
		if err != nil {
			t.Fatal(err)
		}
		link := "/archives/" + ch + "/p" + strings.Replace(ts, ".", "", 1)
		found := false
		for _, l := range lines {
			if strings.Contains(l, link) {
				found = true
				if !strings.Contains(l, " on `"+b+"`") {
					t.Errorf("/agent list shows %s otherwise than on %s: %q", k, b, l)
				}
			}
		}
		if !found {
			t.Errorf("/agent list does not show %s:\n%s", k, text)
		}
	}
}

// TestRapidMessagesDuringTurn: two threads each run a turn of a few
// seconds; meanwhile five messages go into each, one right after the
// other and alternating between the threads. Every message is answered
// once, in its own thread (none in the other, none lost), and each
// thread's five are batched: the model is asked fewer than five turns for
// them.
func TestRapidMessagesDuringTurn(t *testing.T) {
	s := startStack(t)
	repeat(t, "9b. 5 rapid messages into each of two threads during a running turn: each answered once, in its own thread, batched into fewer turns", func(t *testing.T, i int) {
		const rapid = 5
		threads := []string{"A", "B"}
		roots := map[string]string{}
		firsts := map[string]string{}
		for _, th := range threads {
			firsts[th] = fmt.Sprintf("s9brun%d%sfirstz", i, th)
			roots[th] = s.slack.PostUserMessage(channel, alice, "<@UBOT> sh: sleep 4; echo "+firsts[th], "")
		}
		// The rapid ones go in while both turns run: the model was asked
		// for them, and they are not answered yet.
		ctx, cancel := contextWithTimeout(answerWait)
		defer cancel()
		if err := s.slack.WaitFor(ctx, func(*fakeslack.Server) bool {
			return s.turns("echo "+firsts["A"]) > 0 && s.turns("echo "+firsts["B"]) > 0
		}); err != nil {
			t.Fatalf("the first turns did not start within %v", answerWait)
		}
		tokens := map[string][]string{}
		for n := 1; n <= rapid; n++ {
			for _, th := range threads {
				tok := fmt.Sprintf("s9brun%d%s%dz", i, th, n)
				tokens[th] = append(tokens[th], tok)
				s.slack.PostUserMessage(channel, alice, "sh: echo "+tok, roots[th])
			}
		}
		for _, th := range threads {
			if s.answers(roots[th], firsts[th]) > 0 {
				t.Fatalf("thread %s's first turn ended before its rapid messages were sent; sleep longer", th)
			}
		}
		all := func() bool {
			for _, th := range threads {
				for _, tok := range append([]string{firsts[th]}, tokens[th]...) {
					if s.answers(roots[th], tok) == 0 {
						return false
					}
				}
			}
			return true
		}
		ctx, cancel = contextWithTimeout(2 * answerWait)
		defer cancel()
		_ = s.slack.WaitFor(ctx, func(*fakeslack.Server) bool { return all() })
		for _, th := range threads {
			for _, tok := range append([]string{firsts[th]}, tokens[th]...) {
				if n := s.answers(roots[th], tok); n != 1 {
					t.Errorf("%s in thread %s answered %d times, want once:\n%s", tok, th, n, s.dumpThread(roots[th]))
				}
				if n := s.turns("echo " + tok); n != 1 {
					t.Errorf("%s was given to the model as a new message %d times, want once", tok, n)
				}
				for _, other := range threads {
					if other != th && countText(s, channel, roots[other], tok) > 0 {
						t.Errorf("%s, sent in thread %s, shows in thread %s:\n%s", tok, th, other, s.dumpThread(roots[other]))
					}
				}
				for _, m := range s.slack.Messages(channel) {
					if m.ThreadTS == "" && m.BotID != "" && strings.Contains(m.Text, tok) {
						t.Errorf("%s was answered outside its thread, in the channel: %q", tok, m.Text)
					}
				}
			}
			if n := s.turnsOfAny(tokens[th]); n >= rapid {
				t.Errorf("thread %s's %d rapid messages took %d turns: not batched", th, rapid, n)
			} else {
				t.Logf("thread %s's %d rapid messages took %d turns", th, rapid, n)
			}
		}
	})
}

// isDone says m is an agent's final answer (see isAnswer).
func isDone(m fakeslack.Message) bool {
	return m.BotID != "" && strings.HasPrefix(strings.TrimSpace(m.Text), "done.")
}

// countText counts the bot's messages in a thread of ch that contain text.
func countText(s *stack, ch, rootTS, text string) int {
	n := 0
	for _, m := range s.slack.Thread(ch, rootTS) {
		if m.BotID != "" && strings.Contains(m.Text, text) {
			n++
		}
	}
	return n
}

// waitText waits up to d for a message in a thread of ch that ok accepts.
func waitText(t *testing.T, s *stack, ch, rootTS string, ok func(fakeslack.Message) bool, what string, d time.Duration) {
	t.Helper()
	ctx, cancel := contextWithTimeout(d)
	defer cancel()
	err := s.slack.WaitFor(ctx, func(fs *fakeslack.Server) bool {
		return slices.ContainsFunc(fs.Thread(ch, rootTS), ok)
	})
	if err != nil {
		t.Fatalf("no %s within %v:\n%s", what, d, dumpChannelThread(s, ch, rootTS))
	}
}

// dumpChannelThread renders a thread of ch, and the ephemerals of ch.
func dumpChannelThread(s *stack, ch, rootTS string) string {
	var b strings.Builder
	for _, m := range s.slack.Thread(ch, rootTS) {
		fmt.Fprintf(&b, "  %s %s: %q\n", m.TS, m.User, m.Text)
	}
	for _, m := range s.slack.Ephemerals(ch) {
		fmt.Fprintf(&b, "  (ephemeral to %s in %s) %q\n", m.Recipient, m.ThreadTS, m.Text)
	}
	return b.String()
}

// namespaceID is the ID of the stack's Temporal namespace, which every
// sandbox its worker makes carries (agentflow.LabelNamespace); a dev
// server's namespace ID is its own.
func namespaceID(t *testing.T, s *stack) string {
	t.Helper()
	ctx, cancel := contextWithTimeout(time.Minute)
	defer cancel()
	resp, err := s.temporalClient().WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: "default"})
	if err != nil {
		t.Fatalf("describing the namespace: %v", err)
	}
	id := resp.GetNamespaceInfo().GetId()
	if id == "" {
		t.Fatal("the namespace has no ID")
	}
	return id
}

// removeNamespaceContainers removes the sandbox containers (and their
// workspace volumes) of the namespace nsID, and fails the test if any is
// left.
func removeNamespaceContainers(t *testing.T, nsID string) {
	testenv.RemoveContainers(t, agentflow.LabelNamespace, nsID)
}
