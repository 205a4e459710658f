package slackbot

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
)

// The App Home (issue 19, item 3): each person's Home tab shows the
// sessions they own in the workspace as a fork tree — title, backend,
// state, when it was started and last active — with a link to each
// session's thread and buttons Stop (while a turn runs), Pause and
// Destroy (behind a confirmation).
//
// Who publishes it:
//   - the Inbound, when someone opens the tab (app_home_opened) and after
//     they click one of its buttons; a click goes to the Router as the
//     command of the same name in the session's thread, as the person who
//     clicked, so it meets the same checks as the thread's own buttons. Its
//     answer cannot go into a thread: the home is published again, with a
//     refusal or a failure (the Router's private answers) on top, marked
//     ⚠️;
//   - the Sender, after it delivered a message that says a session's state
//     changed (a turn started or ended, a title, a notice such as a switch,
//     a fork or a pause, a lifecycle change), for the session's owner if
//     they opened their home in this process (or for every owner, with
//     HomeConfig.EveryOwner), in the background and at most once per
//     HomeConfig.Every per person.
//
// Both read the sessions through a Home, which remembers who opened their
// home. The Inbound and the Sender share one when they run in one process
// (cmd/bot's embedded default); a worker in a process of its own never
// hears of an opened home and so publishes none: there the home is as
// fresh as its last opening or click.
//
// Everyone sees only the sessions they started, admins included (an
// admin's home says so and points at `/agent list --all`): the home is a
// person's own place, and a workspace's sessions could not fit in it.

// DefaultHomeEvery is the least time between two publications of one
// person's home by the Sender.
const DefaultHomeEvery = 3 * time.Second

// Action IDs of the App Home's buttons. Stop and Pause are ActionStop and
// ActionDone, as on the status message; every button's value is the
// session's thread key.
const (
	// ActionDestroy destroys the session, after Slack's confirmation.
	ActionDestroy = "agent_destroy"
	// ActionOpen is the link to the session's thread; its clicks are
	// ignored.
	ActionOpen = "agent_open"
)

// Bounds of the App Home.
const (
	// maxHomeSessions is the most sessions a home shows (two blocks
	// each, within Slack's 100 blocks of a view).
	maxHomeSessions  = 40
	maxHomeViewers   = 10000 // people remembered as having opened their home
	maxHomeThreads   = 1000  // changed threads waiting for the Sender's keeper
	maxHomeOwners    = 10000 // thread → owner remembered by the keeper
	maxHomeNote      = 500   // characters of the answer shown on top
	maxHomeTitle     = 150
	homeCallTimeout  = 30 * time.Second // reading the sessions and publishing one home
	homeStateWorkers = 8                // sessions asked for their state at once
	homeLockStripes  = 64
)

// homeRefusals are the errors of views.publish that say the app may not
// publish a home at all (the Home tab is off, a scope is missing): after
// one, the Sender stops publishing the team's homes until a publication
// (on opening the tab) works again.
var homeRefusals = []string{
	"not_enabled", "missing_scope", "not_allowed_token_type", "no_permission", "method_deprecated",
	"feature_not_enabled", "unknown_method", "access_denied", "invalid_auth", "account_inactive",
	"token_revoked", "ekm_access_denied",
}

// HomeSource is where the App Home reads sessions; *agentflow.Client
// satisfies it.
type HomeSource interface {
	// List returns the sessions of the tenant threadKey belongs to.
	List(ctx context.Context, threadKey string) ([]agentflow.SessionEntry, error)
	// State returns a session's state now.
	State(ctx context.Context, threadKey string) (agentflow.SessionView, error)
}

// HomeConfig configures a Home. Only Sessions is required.
type HomeConfig struct {
	// Sessions reads the sessions a home shows.
	Sessions HomeSource
	// Admins are the bot's admins (bot.Access.Admins): their home says
	// they may control every session.
	Admins []string
	// Every is the least time between two publications of one person's
	// home by the Sender (default DefaultHomeEvery).
	Every time.Duration
	// Logger receives the Home's logs; nil means slog.Default.
	Logger *slog.Logger
	// EveryOwner has the Sender publish the home of every owner whose
	// session changed, not only of those who opened theirs in this
	// process: for a worker in a process of its own, which never hears who
	// opened their home. Slack keeps what was published, so the tab is
	// current when they open it.
	EveryOwner bool
}

// Home builds and publishes people's App Home tabs and remembers who
// opened theirs. Give the same Home to the Inbound (InboundConfig.Home)
// and, in the same process, to the Sender (SenderConfig.Home). Safe for
// concurrent use.
type Home struct {
	src    HomeSource
	admins []string
	every  time.Duration
	log    *slog.Logger
	all    bool // HomeConfig.EveryOwner

	viewers *bot.Recent[struct{}] // team+"/"+user of the people who opened their home
	teams   *bot.Recent[struct{}] // teams where someone did
	// locks serialise the building and publishing of one person's home,
	// so that an older view is never published over a newer one.
	locks [homeLockStripes]sync.Mutex

	mu      sync.Mutex
	refused map[string]string // team → the error that refused views.publish
}

// NewHome returns a Home on cfg. It makes no call.
func NewHome(cfg HomeConfig) (*Home, error) {
	if cfg.Sessions == nil {
		return nil, errors.New("slack home: Sessions is nil")
	}
	if cfg.Every == 0 {
		cfg.Every = DefaultHomeEvery
	}
	if cfg.Every < 0 {
		return nil, fmt.Errorf("slack home: Every must not be negative, not %s", cfg.Every)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Home{src: cfg.Sessions, admins: slices.Clone(cfg.Admins), every: cfg.Every, log: log, all: cfg.EveryOwner,
		viewers: bot.NewRecent[struct{}](maxHomeViewers), teams: bot.NewRecent[struct{}](maxHomeViewers),
		refused: map[string]string{}}, nil
}

func viewerKey(team, user string) string { return team + "/" + user }

// opened remembers that user opened their home in team.
func (h *Home) opened(team, user string) {
	h.viewers.Put(viewerKey(team, user), struct{}{})
	h.teams.Put(team, struct{}{})
}

// hasOpened says whether user opened their home in team, as far as this
// process remembers.
func (h *Home) hasOpened(team, user string) bool {
	if h.all {
		return true
	}
	_, ok := h.viewers.Get(viewerKey(team, user))
	return ok
}

// anyOpened says whether anyone opened their home in team: when nobody
// did, a change needs no lookup of its session's owner.
func (h *Home) anyOpened(team string) bool {
	if h.all {
		return true
	}
	_, ok := h.teams.Get(team)
	return ok
}

func (h *Home) isRefused(team string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.refused[team]
	return ok
}

func (h *Home) lock(team, user string) *sync.Mutex {
	f := fnv.New32a()
	f.Write([]byte(viewerKey(team, user)))
	return &h.locks[f.Sum32()%homeLockStripes]
}

// homePublisher is what a Home needs of the Web API (views.publish);
// *slack.Client satisfies it.
type homePublisher interface {
	PublishViewContext(ctx context.Context, req slack.PublishViewContextRequest) (*slack.ViewResponse, error)
}

// homeNote is what is said on top of a home: the answer to a click.
type homeNote struct {
	text string // mrkdwn, escaped and with links rendered (Links.Render)
	warn bool   // a refusal or a failure
}

// publish reads user's sessions in team and publishes their home with
// note on top (none when empty). fresh are threads known to have changed
// just now: one that the tenant's list does not show yet (it lags the
// sessions) is asked for its state and shown if it is user's. A refusal
// of views.publish is remembered (see homeRefusals) and cleared by the
// next publication that works.
func (h *Home) publish(ctx context.Context, api homePublisher, links *Links, team, user string, note homeNote, fresh []string) error {
	mu := h.lock(team, user)
	mu.Lock()
	defer mu.Unlock()
	rows, hidden, err := h.sessions(ctx, team, user, fresh)
	if err != nil {
		return fmt.Errorf("reading the sessions of %s: %w", user, err)
	}
	for i := range rows {
		if url, err := links.Permalink(ctx, rows[i].entry.ThreadKey); err == nil {
			rows[i].link = url
		}
	}
	view := homeView(rows, hidden, slices.Contains(h.admins, user), note)
	_, err = api.PublishViewContext(ctx, slack.PublishViewContextRequest{UserID: user, View: view})
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err == nil:
		delete(h.refused, team)
	case isSlackError(err, homeRefusals...):
		if _, was := h.refused[team]; !was {
			h.log.Info("slack refused views.publish; homes of this team are not kept up to date", "team", team, "error", err)
		}
		h.refused[team] = err.Error()
	}
	if err != nil {
		return fmt.Errorf("slack views.publish: %w", err)
	}
	return nil
}

// homeRow is one session of a home, drawn after prefix (tree glyphs).
type homeRow struct {
	prefix   string
	entry    agentflow.SessionEntry
	activity string // what holds a busy session
	link     string // the thread's permalink; "" when it could not be had
}

// sessions returns user's sessions in team as the rows of a fork tree,
// with their state now, and how many were left out (past
// maxHomeSessions, the least recently active first).
func (h *Home) sessions(ctx context.Context, team, user string, fresh []string) ([]homeRow, int, error) {
	all, err := h.src.List(ctx, Platform+":"+team+":")
	if err != nil {
		return nil, 0, err
	}
	var mine []agentflow.SessionEntry
	listed := map[string]bool{}
	for _, e := range all {
		listed[e.ThreadKey] = true
		if e.Requester == user && user != "" {
			mine = append(mine, e)
		}
	}
	for _, k := range fresh {
		if t, _, _, err := ParseThreadKey(k); err != nil || t != team || listed[k] {
			continue
		}
		listed[k] = true
		if v, err := h.src.State(ctx, k); err == nil && v.Requester == user {
			mine = append(mine, agentflow.SessionEntry{ThreadKey: v.ThreadKey, WorkflowID: v.WorkflowID, Title: v.Title,
				Backend: v.Backend, Parent: v.Parent, Requester: v.Requester, Created: v.Created, Status: v.Status, Model: v.Model})
		}
	}
	// The most recently active live sessions, at most maxHomeSessions.
	var live []int
	for i, e := range mine {
		if e.Status != agentflow.StatusDestroyed {
			live = append(live, i)
		}
	}
	slices.SortStableFunc(live, func(a, b int) int { return activeAt(mine[b]).Compare(activeAt(mine[a])) })
	hidden := max(len(live)-maxHomeSessions, 0)
	live = live[:len(live)-hidden]
	activity := h.refresh(ctx, mine, live)
	// A live session that turned out destroyed goes; a destroyed one
	// stays where a live fork of it needs it in the tree.
	byThread := map[string]int{}
	for i, e := range mine {
		byThread[e.ThreadKey] = i
	}
	keep := map[int]bool{}
	for _, i := range live {
		if mine[i].Status != agentflow.StatusDestroyed {
			keep[i] = true
		}
	}
	for _, i := range live {
		if !keep[i] {
			continue
		}
		for p, n := mine[i].Parent, 0; p != "" && n < len(mine) && len(keep) < maxHomeSessions; n++ {
			j, ok := byThread[p]
			if !ok || keep[j] {
				break
			}
			keep[j] = true
			p = mine[j].Parent
		}
	}
	shown := make([]agentflow.SessionEntry, 0, len(keep))
	acts := make([]string, 0, len(keep))
	for i, e := range mine {
		if keep[i] {
			shown = append(shown, e)
			acts = append(acts, activity[i])
		}
	}
	rows := make([]homeRow, 0, len(shown))
	for _, r := range bot.TreeRows(shown) {
		rows = append(rows, homeRow{prefix: r.Prefix, entry: shown[r.Index], activity: acts[r.Index]})
	}
	return rows, hidden, nil
}

// refresh asks the sessions mine[i], i in which, for their state (a few at
// once) and writes it into mine: the list's entries say whether a session
// lives, not whether a turn runs. It returns what holds each busy one.
func (h *Home) refresh(ctx context.Context, mine []agentflow.SessionEntry, which []int) map[int]string {
	activity := map[int]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, homeStateWorkers)
	for _, i := range which {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			v, err := h.src.State(ctx, mine[i].ThreadKey)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, agentflow.ErrDestroyed):
				mine[i].Status = agentflow.StatusDestroyed
			case err != nil:
				h.log.Debug("a session's state could not be read for a home; shown as listed", "thread", mine[i].ThreadKey, "error", err)
			default:
				e := &mine[i]
				e.Status, e.Title, e.Backend = v.Status, cmp.Or(v.Title, e.Title), cmp.Or(v.Backend, e.Backend)
				activity[i] = v.Activity
			}
		}()
	}
	wg.Wait()
	return activity
}

// activeAt is when a session was last active, as the list knows.
func activeAt(e agentflow.SessionEntry) time.Time {
	if e.Updated.IsZero() {
		return e.Created
	}
	return e.Updated
}

// homeView renders a home: a header, what the person may do, the note,
// then each session as a section (glyphs, title, state, backend, dates)
// and its buttons.
func homeView(rows []homeRow, hidden int, admin bool, note homeNote) slack.HomeTabViewRequest {
	blocks := []slack.Block{
		slack.NewHeaderBlock(plain("Your agent sessions"), slack.HeaderBlockOptionBlockID("home_header")),
	}
	about := "Sessions you started in this workspace, forks under the session they came from. " +
		"Mention me in a channel with a task to start one."
	if admin {
		about += " As an admin you may control every session: `/agent list --all` lists them."
	}
	blocks = append(blocks, slack.NewContextBlock("home_about", slack.NewTextBlockObject(slack.MarkdownType, about, false, false)))
	if text := strings.TrimSpace(note.text); text != "" {
		if note.warn {
			text = "⚠️ " + text
		}
		blocks = append(blocks, slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, text, false, false), nil, nil,
			slack.SectionBlockOptionBlockID("home_note")))
	}
	blocks = append(blocks, slack.NewDividerBlock())
	if len(rows) == 0 {
		blocks = append(blocks, slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, "You have no sessions yet.", false, false), nil, nil,
			slack.SectionBlockOptionBlockID("home_empty")))
	}
	for i, r := range rows {
		blocks = append(blocks, slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, homeRowText(r), false, false), nil, nil,
			slack.SectionBlockOptionBlockID(fmt.Sprintf("home_session_%d", i))))
		if els := homeButtons(r); len(els) > 0 {
			blocks = append(blocks, slack.NewActionBlock(fmt.Sprintf("home_actions_%d", i), els...))
		}
	}
	if hidden > 0 {
		blocks = append(blocks, slack.NewContextBlock("home_more", slack.NewTextBlockObject(slack.MarkdownType,
			fmt.Sprintf("%d less recently active session%s not shown: `/agent list --mine` lists them all.", hidden, plural(hidden)), false, false)))
	}
	return slack.HomeTabViewRequest{Type: slack.VTHomeTab, Blocks: slack.Blocks{BlockSet: blocks}}
}

// homeRowText is a session's line in the tree and, under it, its state.
func homeRowText(r homeRow) string {
	e := r.entry
	title := strings.NewReplacer("*", "", "`", "'").Replace(oneLine(e.Title, maxHomeTitle))
	if strings.TrimSpace(title) == "" {
		title = "(untitled)"
	}
	cont := strings.NewReplacer("├─ ", "│  ", "└─ ", "   ").Replace(r.prefix)
	return fmt.Sprintf("%s*%s*\n%s%s · `%s` · started %s · active %s", r.prefix, Escape(title), cont, homeState(e.Status, r.activity),
		strings.ReplaceAll(Escape(oneLine(e.Backend, 40)), "`", "'"), slackDate(e.Created), slackDate(activeAt(e)))
}

// homeState names a session's state for people.
func homeState(s agentflow.SessionStatus, activity string) string {
	switch s {
	case agentflow.StatusRunning:
		return "🟢 running"
	case agentflow.StatusIdle:
		return "⚪ idle"
	case agentflow.StatusPaused:
		return "⏸️ paused"
	case agentflow.StatusBusy:
		if activity != "" {
			return "⏳ busy (" + Escape(oneLine(activity, 20)) + ")"
		}
		return "⏳ busy"
	case agentflow.StatusDestroyed:
		return "✖️ destroyed"
	}
	return Escape(oneLine(string(s), 20))
}

// slackDate is t as Slack shows a date in each reader's time zone, with
// its UTC text where a client cannot.
func slackDate(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return fmt.Sprintf("<!date^%d^{date_short_pretty} {time}|%s>", t.Unix(), t.UTC().Format("2006-01-02 15:04 UTC"))
}

// homeButtons are a session's buttons: the link to its thread, Stop while
// a turn runs, Pause unless it is paused, Destroy (confirmed) unless it is
// destroyed.
func homeButtons(r homeRow) []slack.BlockElement {
	e := r.entry
	var els []slack.BlockElement
	if r.link != "" {
		els = append(els, slack.NewButtonBlockElement(ActionOpen, e.ThreadKey, plain("Open thread")).WithURL(r.link))
	}
	if e.Status == agentflow.StatusDestroyed {
		return els
	}
	if e.Status == agentflow.StatusRunning {
		els = append(els, slack.NewButtonBlockElement(ActionStop, e.ThreadKey, plain("Stop")))
	}
	if e.Status != agentflow.StatusPaused {
		els = append(els, slack.NewButtonBlockElement(ActionDone, e.ThreadKey, plain("Pause")))
	}
	confirm := slack.NewConfirmationBlockObject(plain("Destroy this session?"),
		slack.NewTextBlockObject(slack.MarkdownType, "Its sandbox and its data are deleted, and its thread takes no more messages. This cannot be undone.", false, false),
		plain("Destroy"), plain("Cancel")).WithStyle(slack.StyleDanger)
	return append(els, slack.NewButtonBlockElement(ActionDestroy, e.ThreadKey, plain("Destroy")).WithStyle(slack.StyleDanger).WithConfirm(confirm))
}

// homeVerb is the command a button of the home stands for; "" for none
// (the thread link).
func homeVerb(actionID string) bot.Verb {
	switch actionID {
	case ActionStop:
		return bot.VerbStop
	case ActionDone:
		return bot.VerbDone
	case ActionDestroy:
		return bot.VerbDestroy
	}
	return ""
}

// homeChanged refreshes the App Home of the session's owner after m.
func (s *Sender) homeChanged(ctx context.Context, m agentflow.Outbound) {
	if s.home != nil {
		s.home.changed(m)
	}
}
