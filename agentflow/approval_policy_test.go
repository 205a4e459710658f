package agentflow

import (
	"strings"
	"testing"
)

// TestApprovalPolicyKeys: each approval key reads back as it was set, and
// "none" clears it.
func TestApprovalPolicyKeys(t *testing.T) {
	for _, tc := range []struct{ key, value, want string }{
		{PolicyApprovals, "risky", "risky"},
		{PolicyApprovals, "none", "never"},
		{PolicyApprovalChannels, "C2=risky,C1=always", "C1=always,C2=risky"},
		{PolicyApprovalChannels, "none", "none"},
		{PolicyApprovalTimeout, "90s", "1m30s"},
		{PolicyApprovalTimeout, "none", "10m0s"},
		{PolicyApprovalTwoPerson, "on", "on"},
		{PolicyApprovalTwoPerson, "off", "off"},
		{PolicyApprovalRulesOff, "git-push,package-install", "git-push,package-install"},
		{PolicyApprovalPatterns, "tf-apply=terraform:apply*,kdel=kubectl:delete *", "tf-apply=terraform:apply*,kdel=kubectl:delete *"},
	} {
		var p TenantPolicy
		if err := p.Set(tc.key, tc.value); err != nil {
			t.Fatalf("set %s %q: %v", tc.key, tc.value, err)
		}
		if got := p.Get(tc.key); got != tc.want {
			t.Errorf("set %s %q: get %q, want %q", tc.key, tc.value, got, tc.want)
		}
	}
}

// TestApprovalModeStrictest: a session's mode is the strictest of its
// tenant's, its channel's and its own.
func TestApprovalModeStrictest(t *testing.T) {
	for _, tc := range []struct {
		name, tenant, channel, session, thread, want string
	}{
		{"nothing set", "", "", "", "slack:T:C1:1.2", ApprovalNever},
		{"tenant", ApprovalRisky, "", "", "slack:T:C1:1.2", ApprovalRisky},
		{"channel stricter", ApprovalRisky, ApprovalAlways, "", "slack:T:C1:1.2", ApprovalAlways},
		{"other channel", ApprovalRisky, ApprovalAlways, "", "slack:T:C9:1.2", ApprovalRisky},
		{"session stricter", ApprovalNever, "", ApprovalAlways, "discord:G:C1", ApprovalAlways},
		{"session laxer", ApprovalRisky, "", ApprovalNever, "slack:T:C1:1.2", ApprovalRisky},
		{"terminal has no channel", "", ApprovalAlways, "", "term:main", ApprovalNever},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &agent{AgentState: AgentState{ThreadKey: tc.thread, ApprovalMode: tc.session,
				Policy: &TenantPolicy{Approvals: tc.tenant, ChannelApprovals: []ChannelApproval{{Channel: "C1", Mode: tc.channel}}}}}
			if got := w.approvalMode(); got != tc.want {
				t.Fatalf("mode %q, want %q", got, tc.want)
			}
		})
	}
}

// TestApprovalID: an approval's ID is a word the grammar takes, whatever
// the call ID holds.
func TestApprovalID(t *testing.T) {
	for _, tc := range []struct {
		turn   int
		callID string
		want   string
	}{
		{3, "call_abc", "t3-call_abc"},
		{1, "fc/12 x+y", "t1-fc_12_x_y"},
		{2, "é", "t2-__"},
		{9, strings.Repeat("a", 100), "t9-" + strings.Repeat("a", 61)},
	} {
		if got := approvalID(tc.turn, tc.callID); got != tc.want {
			t.Errorf("approvalID(%d, %q) = %q, want %q", tc.turn, tc.callID, got, tc.want)
		}
	}
}
