package bot

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentbot/agentbot/agentflow"
)

// managerWait bounds how long new waits for the session manager (at most a
// third of the handler's time) before it starts the session itself: with no worker running, nothing answers for
// the manager, and the session (durable once started) is admitted by it
// when a worker is back.
const managerWait = 3 * time.Second

// control sends one control request of ev to the tenant's session manager,
// named after the event (a platform's retry is the same request).
func (r *Router) control(ctx context.Context, ev Event, thread string, cr agentflow.ControlRequest) (agentflow.ControlResult, error) {
	if r.Sessions.Policy == nil && cr.Config == nil {
		// No configured policy: the tenant's admins are the gateway's.
		cr.Config = &agentflow.TenantPolicy{Admins: slices.Clone(r.Access.Admins)}
	}
	cr.RequestID = requestID(ev, cr.Verb)
	cr.Thread = thread
	cr.By = ev.User
	return r.Sessions.Control(ctx, cr)
}

// newCommand starts a session through the tenant's manager, which checks
// the tenant's caps and backends first.
func (r *Router) newCommand(ctx context.Context, ev Event, thread string, cmd Command) (*Response, error) {
	target := cmp.Or(thread, ev.NewThreadKey)
	if target == "" {
		return nil, errors.New("no thread to start a session in")
	}
	in := r.newSession(ev, target, cmd.Backend)
	// The root is checked where it is used, as switch's is: the backend
	// refuses one it cannot use when it makes the session's sandbox. The
	// gateway may not even run on the host the root names.
	in.Root = cmd.Root
	if cmd.Title != "" {
		in.Title = cmd.Title
	}
	wait := managerWait
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(d)/3)
	}
	cctx, cancel := context.WithTimeout(ctx, wait)
	_, err := r.control(cctx, ev, target, agentflow.ControlRequest{Verb: agentflow.ControlNew, Backend: cmd.Backend, Start: &in})
	timedOut := cctx.Err() != nil && ctx.Err() == nil
	cancel()
	var v agentflow.SessionView
	switch {
	case err == nil:
		v, err = r.Sessions.Start(ctx, in)
	case timedOut:
		// No worker answers for the manager: start the session here; it
		// registers, and is admitted or refused, when a worker runs.
		r.log().Info("the session manager did not answer; starting the session directly", "thread", target)
		v, err = r.Sessions.StartWaiting(ctx, in)
	default:
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	r.remember(ctx, target, entryOf(v))
	text := fmt.Sprintf("Session *%s* on `%s`. Tell me what to do.", v.Title, v.Backend)
	if v.Waiting {
		text += " (Queued: the agent is not running right now; it answers when it is back.)"
	}
	return &Response{Text: text, Session: &v, WebUI: r.webUI(v.WorkflowID)}, nil
}

// listCommand lists sessions as a fork tree: those of this channel, mine,
// or (admins) all of the workspace.
func (r *Router) listCommand(ctx context.Context, ev Event, thread string, cmd Command) (*Response, error) {
	key := cmp.Or(thread, ev.NewThreadKey)
	if key == "" {
		return nil, errors.New("no thread to list the sessions of")
	}
	if cmd.Scope == ScopeAll && !r.Access.Admin(ev.User) {
		return &Response{Text: "Only an admin can list every session of the workspace; `list --mine` lists yours.", Private: true}, nil
	}
	l, err := r.Sessions.List(ctx, key)
	if err != nil {
		return nil, err
	}
	heading, more := "Sessions in this channel", "list"
	keep := func(e agentflow.SessionEntry) bool { return sameChannel(e.ThreadKey, key) }
	switch cmd.Scope {
	case ScopeMine:
		heading, more = "Your sessions", "list --mine"
		keep = func(e agentflow.SessionEntry) bool { return e.Requester == ev.User }
	case ScopeAll:
		heading, more = "All sessions of this workspace", "list --all"
		keep = func(agentflow.SessionEntry) bool { return true }
	}
	var out []agentflow.SessionEntry
	for _, e := range l {
		if keep(e) {
			out = append(out, e)
		}
	}
	return &Response{Text: TreeText(out, TreeOptions{Now: time.Now().UTC(), Page: cmd.Page, Heading: heading, More: more}), Private: true}, nil
}

// sameChannel says whether two thread keys are in the same channel. Slack's
// keys name the channel ("slack:T:C:ts"); other platforms' do not (a
// Discord thread is a channel of its own), so their channel is the
// workspace.
func sameChannel(a, b string) bool {
	channel := func(k string) string {
		parts := strings.SplitN(k, ":", 4)
		if parts[0] == "slack" && len(parts) == 4 {
			return strings.Join(parts[:3], ":")
		}
		p, t := agentflow.Tenant(k)
		return p + ":" + t
	}
	return channel(a) == channel(b)
}

// modelText says which model the session uses and which it may use.
func (r *Router) modelText(ctx context.Context, thread string, v agentflow.SessionView) string {
	model := v.Model
	if model == "" {
		model = cmp.Or(r.Model, "the default") + " (the default)"
	}
	text := "Model: `" + model + "`."
	if p, err := r.Sessions.TenantPolicy(ctx, thread); err == nil {
		if len(p.Models) > 0 {
			text += " Allowed here: " + strings.Join(p.Models, ", ") + " (and the default)."
		} else {
			text += " Only the default model is allowed here."
		}
	}
	return text
}

// auditText renders a page of the audit log.
func auditText(p agentflow.AuditPage) string {
	if len(p.Entries) == 0 {
		return "The audit log is empty."
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Audit log, newest first (page %d of %d):\n", p.Page, p.Pages)
	for _, e := range p.Entries {
		fmt.Fprintf(&b, "• #%d %s <@%s> `%s`", e.Seq, e.At.UTC().Format("2006-01-02 15:04:05Z"), e.By, e.Verb)
		if e.Detail != "" {
			fmt.Fprintf(&b, " %s", e.Detail)
		}
		if e.Thread != "" {
			fmt.Fprintf(&b, " in %s", agentflow.LinkThread(e.Thread))
		}
		fmt.Fprintf(&b, " — %s", e.Outcome)
		if e.Reason != "" {
			fmt.Fprintf(&b, ": %s", e.Reason)
		}
		b.WriteByte('\n')
	}
	if p.Page < p.Pages {
		fmt.Fprintf(&b, "`audit --page %d` for older entries.\n", p.Page+1)
	}
	if n := len(p.Archived); n > 0 {
		fmt.Fprintf(&b, "Older entries are archived in the blob store (%d chunks, the newest `%s`).\n", n, p.Archived[n-1])
	}
	return strings.TrimRight(b.String(), "\n")
}

// approvalVerb says whether v answers or sets the session's approvals
// (approve, deny, approvals): like the controls (see Controls), for the
// session's requester and admins only, which the session enforces.
func approvalVerb(v Verb) bool {
	return v == VerbApprove || v == VerbDeny || v == VerbApprovals
}

// approveCommand answers the command waiting for approval (approve,
// deny) through the tenant's session manager, which records who answered
// in its audit log and hands the answer to the session; the session
// refuses anyone but its owner and admins, and an answer to nothing that
// waits. Its refusal is told privately (see failure); the decision is
// said in the thread, where the session also edits its approval message.
func (r *Router) approveCommand(ctx context.Context, ev Event, thread string, cmd Command) (*Response, error) {
	decision := agentflow.DecisionApprove
	if cmd.Verb == VerbDeny {
		decision = agentflow.DecisionDeny
	}
	// What waits, for the answer only (once answered it waits no more):
	// the session alone says what the answer applies to.
	waiting := r.waitingApproval(ctx, thread, cmd.ApprovalID)
	if _, err := r.control(ctx, ev, thread, agentflow.ControlRequest{Verb: agentflow.ControlApprove,
		Decision: decision, All: cmd.All, ApprovalID: cmd.ApprovalID}); err != nil {
		return nil, err
	}
	return &Response{Text: decidedText(decision, cmd.All, waiting)}, nil
}

// waitingApproval is the approval that waits in thread's session (the one
// named id, when id is not empty), or nil when none does or the session
// does not say in time.
func (r *Router) waitingApproval(ctx context.Context, thread, id string) *agentflow.ApprovalView {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v, err := r.Sessions.State(qctx, thread)
	if err != nil || v.Approval == nil || v.Approval.State != agentflow.ApprovalWaiting || (id != "" && v.Approval.ID != id) {
		return nil
	}
	return v.Approval
}

// decidedText says what an approve or deny did; w is what waited, when
// known.
func decidedText(decision string, all bool, w *agentflow.ApprovalView) string {
	if decision == agentflow.DecisionDeny {
		if w == nil {
			return "Denied."
		}
		return fmt.Sprintf("Denied: %s.", codeText(w.Command))
	}
	if w == nil {
		if all {
			return "Approved, with the rest of this turn's commands."
		}
		return "Approved."
	}
	if w.Need > 1 && len(w.Approvers)+1 < w.Need {
		return fmt.Sprintf("Approved %s (%d of %d approvals): it waits for another person's.", codeText(w.Command), len(w.Approvers)+1, w.Need)
	}
	if all {
		return fmt.Sprintf("Approved: %s, with the rest of this turn's commands.", codeText(w.Command))
	}
	return fmt.Sprintf("Approved: %s.", codeText(w.Command))
}

// approvalsText is the answer of approvals without a mode: the session's
// mode, and the command waiting for approval, if any.
func approvalsText(v agentflow.SessionView) string {
	mode := cmp.Or(v.Approvals, agentflow.ApprovalNever)
	what := map[string]string{
		agentflow.ApprovalNever:  "no command waits for approval",
		agentflow.ApprovalRisky:  "the shell commands the risk rules flag wait for approval",
		agentflow.ApprovalAlways: "every shell command waits for approval",
	}[mode]
	text := fmt.Sprintf("Approvals in this session: `%s`", mode)
	if what != "" {
		text += " — " + what
	}
	text += "."
	switch mode {
	case agentflow.ApprovalNever:
		text += " `approvals risky` or `approvals always` makes this session ask."
	case agentflow.ApprovalRisky:
		text += " `approvals always` makes this session ask before every command."
	}
	if a := v.Approval; a != nil && a.State == agentflow.ApprovalWaiting {
		text += "\nWaiting for approval: " + codeText(a.Command)
		var why []string
		for _, f := range a.Findings {
			why = append(why, f.Reason)
		}
		if len(why) > 0 {
			text += " (" + strings.Join(why, "; ") + ")"
		}
		if !a.Expires.IsZero() {
			text += fmt.Sprintf(", until %s", a.Expires.UTC().Format("15:04 UTC"))
		}
		text += fmt.Sprintf(". Say `approve %s` or `deny %s`.", a.ID, a.ID)
	}
	return text
}

// codeText shows a shell command in a sentence: one line, at most 80
// characters, as inline code (its backticks, which would end the code,
// turned into quotes).
func codeText(command string) string {
	s := strings.ReplaceAll(strings.Join(strings.Fields(command), " "), "`", "'")
	if r := []rune(s); len(r) > 80 {
		s = string(r[:79]) + "…"
	}
	if s == "" {
		return "the command"
	}
	return "`" + s + "`"
}

// usageText is one person's use of the daily budget, for status.
func usageText(u agentflow.UsageView) string {
	if u.Budget <= 0 {
		return ""
	}
	return fmt.Sprintf("\nyour tokens today: %d of %d", u.Tokens, u.Budget)
}
