package agentflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/agentbot/agentbot/agentflow/risk"
)

// approvalRank orders the modes from the least to the most asking.
func approvalRank(mode string) int {
	switch mode {
	case ApprovalRisky:
		return 1
	case ApprovalAlways:
		return 2
	}
	return 0
}

// ValidApprovalMode says whether mode is one of the approval modes.
func ValidApprovalMode(mode string) bool {
	return mode == ApprovalNever || mode == ApprovalRisky || mode == ApprovalAlways
}

// stricter returns the more asking of two modes.
func stricter(a, b string) string {
	if approvalRank(b) > approvalRank(a) {
		return b
	}
	if a == "" {
		return ApprovalNever
	}
	return a
}

// threadChannel is the channel of a thread key ("slack:T1:C2:123.4" →
// "C2", "discord:G1:C2:T3" → "C2"); "" for the terminal.
func threadChannel(threadKey string) string {
	parts := strings.SplitN(threadKey, ":", 4)
	if len(parts) < 3 || parts[0] == "term" {
		return ""
	}
	return parts[2]
}

// approvalMode is the session's mode: the strictest of its tenant's, its
// channel's and its own.
func (w *agent) approvalMode() string {
	mode := stricter(ApprovalNever, w.ApprovalMode)
	if p := w.Policy; p != nil {
		mode = stricter(mode, p.Approvals)
		if ch := threadChannel(w.ThreadKey); ch != "" {
			mode = stricter(mode, p.ChannelMode(ch))
		}
	}
	return mode
}

// ClassifyInput asks whether a shell call needs approval.
type ClassifyInput struct {
	Call      ToolCall `json:"call"`
	Workspace string   `json:"workspace"`
	Mode      string   `json:"mode"`
	// Patterns and RulesOff are the tenant's (TenantPolicy).
	Patterns []risk.Pattern `json:"patterns,omitempty"`
	RulesOff []string       `json:"rules_off,omitempty"`
}

// ClassifyResult is the command as people see it (secrets redacted) and
// why it needs approval.
type ClassifyResult struct {
	Command  string         `json:"command"`
	Findings []risk.Finding `json:"findings,omitempty"`
}

const classifyActivity = "ClassifyCommand"

// maxApprovalCommand bounds the command an approval shows.
const maxApprovalCommand = 2000

// ClassifyCommand reads a shell call's command (from the blob store when
// its arguments were large) and classifies it with the tenant's rules. A
// command that cannot be read is a finding: the person decides.
func (a *Activities) ClassifyCommand(ctx context.Context, in ClassifyInput) (res ClassifyResult, err error) {
	defer a.redactOut(&res, &err)
	args := in.Call.Arguments
	if in.Call.ArgsRef != "" {
		data, err := a.getBlob(ctx, in.Call.ArgsRef)
		if err != nil {
			return res, err
		}
		args = string(data)
	}
	var p struct {
		Command string `json:"command"`
	}
	if err := json.Unmarshal([]byte(args), &p); err != nil || strings.TrimSpace(p.Command) == "" {
		res.Command = cut(args, maxApprovalCommand)
		res.Findings = []risk.Finding{{Rule: risk.Unparsable, Reason: "the call's arguments hold no command"}}
		return res, nil
	}
	res.Command = cut(p.Command, maxApprovalCommand)
	if in.Mode != ApprovalRisky {
		return res, nil
	}
	ws := in.Workspace
	if ws == "" || !strings.HasPrefix(ws, "/") {
		ws = "/workspace"
	}
	c, err := risk.New(risk.Options{Workspace: ws, Extra: in.Patterns, Disabled: in.RulesOff})
	if err != nil {
		// The tenant's rules are broken: ask about everything rather
		// than nothing.
		res.Findings = []risk.Finding{{Rule: "policy", Reason: "the approval rules are invalid (" + err.Error() + "), so every command is asked about"}}
		return res, nil
	}
	res.Findings = c.Classify(p.Command).Findings
	return res, nil
}

// gate decides whether shell call c may run: at once when the mode does
// not ask about it, else after a person approves it. It returns what the
// model is told instead of the output when the command must not run
// ("" when it may), and a note for the output of an approved one.
func (w *agent) gate(ctx, turnCtx workflow.Context, turn int, c ToolCall, st *ToolStatus) (refusal, note string) {
	mode := w.approvalMode()
	if mode == ApprovalNever || workflow.GetVersion(ctx, changeApprovals, workflow.DefaultVersion, 1) < 1 {
		return "", ""
	}
	var cls ClassifyResult
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		ScheduleToCloseTimeout: time.Minute, StartToCloseTimeout: 20 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 5, NonRetryableErrorTypes: nonRetryable},
	})
	in := ClassifyInput{Call: c, Workspace: w.workspaceRoot(), Mode: mode}
	if p := w.Policy; p != nil {
		in.Patterns, in.RulesOff = p.ApprovalPatterns, p.ApprovalRulesOff
	}
	if err := workflow.ExecuteLocalActivity(lctx, classifyActivity, in).Get(ctx, &cls); err != nil {
		if turnCtx.Err() != nil {
			return "", ""
		}
		cls.Command = c.Summary
		cls.Findings = []risk.Finding{{Rule: "classifier", Reason: "the command could not be classified: " + userError(err)}}
	}
	if mode == ApprovalRisky && len(cls.Findings) == 0 {
		return "", ""
	}
	if w.approvedAll == turn {
		return "", fmt.Sprintf("(approved with the rest of turn %d by %s)", turn, w.approvedAllBy)
	}
	timeout := DefaultApprovalTimeout
	need := 1
	if p := w.Policy; p != nil {
		if p.ApprovalTimeout > 0 {
			timeout = p.ApprovalTimeout
		}
		if p.TwoPerson && mode == ApprovalAlways {
			need = 2
		}
	}
	now := workflow.Now(ctx)
	w.approval = &ApprovalView{ID: approvalID(turn, c.ID), Turn: turn, Command: cls.Command,
		Findings: cls.Findings, Mode: mode, Need: need, Expires: now.Add(timeout), State: ApprovalWaiting}
	defer func() { w.approval = nil }()
	st.State = "approval"
	w.progress(ctx, turn, TurnRunning, false)
	w.deliverApproval(ctx)
	w.logger.Info("command waits for approval", "turn", turn, "approval", w.approval.ID, "rules", findingRules(cls.Findings))

	decided, err := workflow.AwaitWithTimeout(turnCtx, timeout, func() bool { return w.approval.State != ApprovalWaiting })
	v := w.approval
	switch {
	case turnCtx.Err() != nil || (err != nil && !decided):
		v.State, v.DecidedAt = ApprovalCancelled, workflow.Now(ctx)
	case !decided:
		v.State, v.DecidedAt = ApprovalExpired, workflow.Now(ctx)
	}
	w.deliverApproval(ctx)
	w.logger.Info("approval decided", "turn", turn, "approval", v.ID, "state", v.State)
	switch v.State {
	case ApprovalApproved:
		if v.All {
			w.approvedAll, w.approvedAllBy = turn, v.DecidedBy
		}
		return "", fmt.Sprintf("(approved by %s at %s)", strings.Join(v.Approvers, " and "), v.DecidedAt.UTC().Format("15:04:05 UTC"))
	case ApprovalDenied:
		return fmt.Sprintf("not run: %s denied this command at %s (it needed approval: %s). Do not run it, or anything to the same effect, another way; ask the user how to go on.",
			v.DecidedBy, v.DecidedAt.UTC().Format("15:04:05 UTC"), reasons(v)), ""
	case ApprovalExpired:
		return fmt.Sprintf("not run: no one approved this command within %s (it needed approval: %s). Do not run it another way; ask the user whether to run it.",
			timeout, reasons(v)), ""
	}
	return "not run: the user stopped the turn", ""
}

// approvalID names the approval of call callID in turn: a word people can
// type and buttons can carry (letters, digits, _ . : -, at most 64
// bytes), whatever the model endpoint's call IDs hold.
func approvalID(turn int, callID string) string {
	id := []byte(fmt.Sprintf("t%d-%s", turn, callID))
	for i, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-') {
			id[i] = '_'
		}
	}
	if len(id) > 64 {
		id = id[:64]
	}
	return string(id)
}

func findingRules(fs []risk.Finding) []string {
	var out []string
	for _, f := range fs {
		if !slices.Contains(out, f.Rule) {
			out = append(out, f.Rule)
		}
	}
	return out
}

func reasons(v *ApprovalView) string {
	if len(v.Findings) == 0 {
		return "every command does in this session"
	}
	var parts []string
	for _, f := range v.Findings {
		parts = append(parts, f.Rule+": "+f.Reason)
	}
	return strings.Join(parts, "; ")
}

// workspaceRoot is where commands start in the sandbox.
func (w *agent) workspaceRoot() string {
	if w.Sandbox != nil && strings.HasPrefix(w.Sandbox.Root, "/") {
		return w.Sandbox.Root
	}
	return "/workspace"
}

// deliverApproval posts the approval message, or edits it (same key).
func (w *agent) deliverApproval(ctx workflow.Context) {
	v := *w.approval
	v.Approvers = slices.Clone(v.Approvers)
	w.deliver(ctx, Outbound{Kind: OutboundApproval, Turn: v.Turn, Key: w.workflowID + "/approval/" + v.ID,
		Approval: &v, Text: Text{Inline: approvalText(v)}})
}

// approvalText is an approval as plain chat text, for senders that draw
// no buttons.
func approvalText(v ApprovalView) string {
	var b strings.Builder
	switch v.State {
	case ApprovalWaiting:
		b.WriteString(fmt.Sprintf("Approval needed to run:\n```\n%s\n```\n", v.Command))
		if len(v.Findings) > 0 {
			b.WriteString("Why:\n")
			for _, f := range v.Findings {
				b.WriteString(fmt.Sprintf("• %s: %s\n", f.Rule, f.Reason))
			}
		} else {
			b.WriteString("This session asks before every command.\n")
		}
		who := "the session's owner or an admin"
		if v.Need > 1 {
			who = fmt.Sprintf("%d different people (the owner or admins)", v.Need)
			if len(v.Approvers) > 0 {
				who += ", approved so far by " + strings.Join(v.Approvers, ", ")
			}
		}
		b.WriteString(fmt.Sprintf("Answer `approve`, `approve --all` (the rest of this turn too) or `deny`: %s, before %s.",
			who, v.Expires.UTC().Format("15:04 UTC")))
	case ApprovalApproved:
		b.WriteString(fmt.Sprintf("Approved by %s at %s:\n```\n%s\n```", strings.Join(v.Approvers, " and "), v.DecidedAt.UTC().Format("15:04:05 UTC"), v.Command))
		if v.All {
			b.WriteString("\n(and the rest of this turn's commands)")
		}
	case ApprovalDenied:
		b.WriteString(fmt.Sprintf("Denied by %s at %s; not run:\n```\n%s\n```", v.DecidedBy, v.DecidedAt.UTC().Format("15:04:05 UTC"), v.Command))
	case ApprovalExpired:
		b.WriteString(fmt.Sprintf("No one answered in time; not run:\n```\n%s\n```", v.Command))
	case ApprovalCancelled:
		b.WriteString(fmt.Sprintf("Stopped before anyone answered; not run:\n```\n%s\n```", v.Command))
	}
	return b.String()
}

// validateApprove refuses an answer from someone who may not give it, or
// to nothing.
func (w *agent) validateApprove(ctx workflow.Context, r ApproveRequest) error {
	if err := w.controlBy(r.By); err != nil {
		return err
	}
	if r.Decision != DecisionApprove && r.Decision != DecisionDeny {
		return fmt.Errorf("unknown decision %q", r.Decision)
	}
	v := w.approval
	if v == nil || v.State != ApprovalWaiting || (r.ID != "" && r.ID != v.ID) {
		return errors.New(ErrNoApprovalText)
	}
	if r.Decision == DecisionApprove && slices.Contains(v.Approvers, r.By) {
		return errors.New("you approved this already: a second, different person must approve it too")
	}
	return nil
}

// ErrNoApprovalText is what an answer gets when nothing (or something
// else) waits for approval.
const ErrNoApprovalText = "nothing waits for approval here (it was decided, it expired, or the turn ended)"

func (w *agent) onApprove(ctx workflow.Context, r ApproveRequest) (ApprovalView, error) {
	v := w.approval
	if v == nil || v.State != ApprovalWaiting {
		return ApprovalView{}, errors.New(ErrNoApprovalText)
	}
	now := workflow.Now(ctx)
	switch r.Decision {
	case DecisionDeny:
		v.State, v.DecidedBy, v.DecidedAt = ApprovalDenied, r.By, now
	default:
		v.Approvers = append(v.Approvers, r.By)
		v.All = v.All || r.All
		if len(v.Approvers) >= v.Need {
			v.State, v.DecidedBy, v.DecidedAt = ApprovalApproved, r.By, now
		} else {
			w.deliverApproval(ctx) // show who approved so far
		}
	}
	out := *v
	out.Approvers = slices.Clone(v.Approvers)
	return out, nil
}

func (w *agent) validateApprovals(ctx workflow.Context, r ApprovalsRequest) error {
	if err := w.controlBy(r.By); err != nil {
		return err
	}
	if !ValidApprovalMode(r.Mode) {
		return fmt.Errorf("unknown approval mode %q: never, risky or always", r.Mode)
	}
	return nil
}

func (w *agent) onApprovals(ctx workflow.Context, r ApprovalsRequest) (SessionView, error) {
	w.ApprovalMode = r.Mode
	if r.Notify {
		msg := fmt.Sprintf("Approvals for this session: %s.", w.approvalMode())
		if eff := w.approvalMode(); eff != r.Mode && r.Mode != "" {
			msg = fmt.Sprintf("Approvals for this session: %s (asked: %s; the workspace's or channel's policy is stricter).", eff, r.Mode)
		}
		w.notifyOutcome(ctx, nil, msg)
	}
	return w.view(), nil
}
