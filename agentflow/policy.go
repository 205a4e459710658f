package agentflow

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentbot/agentbot/agentflow/risk"
)

// TenantPolicy is what a tenant allows: held by its session manager, which
// enforces it for control requests, and copied into each session, which
// enforces it for turns. Zero values mean "no limit" (and, for lists,
// "anything configured").
type TenantPolicy struct {
	// Admins may control every session of the tenant and change the
	// policy. They come from configuration only.
	Admins []string `json:"admins,omitempty"`
	// Backends are the sandbox backends sessions may use; empty: every
	// backend that runs here.
	Backends []string `json:"backends,omitempty"`
	// DefaultBackend starts sessions that name none; empty: the gateway's.
	DefaultBackend string `json:"default_backend,omitempty"`
	// MaxSessions bounds the live (not destroyed) sessions of the tenant,
	// MaxSessionsPerUser those one person owns.
	MaxSessions        int `json:"max_sessions,omitempty"`
	MaxSessionsPerUser int `json:"max_sessions_per_user,omitempty"`
	// MaxRunningTurns bounds the turns running at once in the tenant;
	// further turns wait, in order.
	MaxRunningTurns int `json:"max_running_turns,omitempty"`
	// SessionTokens is the token budget of one session (input and output
	// tokens of every turn); UserTokensPerDay that of one person per UTC
	// day, across sessions.
	SessionTokens    int64 `json:"session_tokens,omitempty"`
	UserTokensPerDay int64 `json:"user_tokens_per_day,omitempty"`
	// Models are the models a session may be set to; empty: only the
	// worker's default model.
	Models []string `json:"models,omitempty"`
	// Approvals is the tenant's approval mode (ApprovalNever, "": never;
	// ApprovalRisky; ApprovalAlways); ChannelApprovals those of channels
	// (sorted by channel; see ChannelMode), which can only be stricter.
	Approvals        string            `json:"approvals,omitempty"`
	ChannelApprovals []ChannelApproval `json:"channel_approvals,omitempty"`
	// ApprovalTimeout is how long a command waits for an answer (0:
	// DefaultApprovalTimeout).
	ApprovalTimeout time.Duration `json:"approval_timeout,omitempty"`
	// TwoPerson asks, in mode always, for two different approvers.
	TwoPerson bool `json:"two_person,omitempty"`
	// ApprovalPatterns are the tenant's own rules for mode risky;
	// ApprovalRulesOff the built-in rules (or patterns) it switched off.
	ApprovalPatterns []risk.Pattern `json:"approval_patterns,omitempty"`
	ApprovalRulesOff []string       `json:"approval_rules_off,omitempty"`
}

// ChannelApproval is a channel's approval mode.
type ChannelApproval struct {
	Channel string `json:"channel"`
	Mode    string `json:"mode"`
}

// ChannelMode is channel's approval mode ("" when the policy names none).
func (p TenantPolicy) ChannelMode(channel string) string {
	for _, c := range p.ChannelApprovals {
		if c.Channel == channel {
			return c.Mode
		}
	}
	return ""
}

// Policy keys, as the policy verbs name them.
const (
	PolicyBackends           = "backends"
	PolicyDefaultBackend     = "default-backend"
	PolicyMaxSessions        = "max-sessions"
	PolicyMaxSessionsPerUser = "max-sessions-per-user"
	PolicyMaxRunningTurns    = "max-running-turns"
	PolicySessionTokens      = "session-tokens"
	PolicyUserTokensPerDay   = "user-tokens-per-day"
	PolicyModels             = "models"
	// The approval keys: the tenant's mode (never, risky, always), the
	// channels' ("C1=always,C2=risky"), the wait ("10m"), the two-person
	// rule in mode always (on, off), the built-in rules switched off
	// ("git-push,package-install") and the tenant's own rules
	// ("name=command-glob:args-glob,...").
	PolicyApprovals         = "approvals"
	PolicyApprovalChannels  = "approvals-channels"
	PolicyApprovalTimeout   = "approval-timeout"
	PolicyApprovalTwoPerson = "approval-two-person"
	PolicyApprovalRulesOff  = "approval-rules-off"
	PolicyApprovalPatterns  = "approval-patterns"
)

// PolicyKeys are the keys admins may set, in the order Show lists them.
var PolicyKeys = []string{
	PolicyBackends, PolicyDefaultBackend, PolicyMaxSessions, PolicyMaxSessionsPerUser,
	PolicyMaxRunningTurns, PolicySessionTokens, PolicyUserTokensPerDay, PolicyModels,
	PolicyApprovals, PolicyApprovalChannels, PolicyApprovalTimeout, PolicyApprovalTwoPerson,
	PolicyApprovalRulesOff, PolicyApprovalPatterns,
}

// Set changes one key from its text form: a number (0 or "none": no
// limit), a name, or a comma-separated list ("none": empty). It checks
// the value, not whether the result makes sense as a whole (Check does).
func (p *TenantPolicy) Set(key, value string) error {
	value = strings.TrimSpace(value)
	num := func(dst *int) error {
		n, err := parseLimit(key, value)
		if err != nil {
			return err
		}
		if n > 1<<30 {
			return fmt.Errorf("%s: %d is too large", key, n)
		}
		*dst = int(n)
		return nil
	}
	switch key {
	case PolicyBackends:
		l, err := parseNames(key, value)
		p.Backends = l
		return err
	case PolicyModels:
		l, err := parseNames(key, value)
		p.Models = l
		return err
	case PolicyDefaultBackend:
		if value == "none" {
			value = ""
		}
		if value != "" && !validName(value) {
			return fmt.Errorf("%s: %q is not a backend name", key, value)
		}
		p.DefaultBackend = value
		return nil
	case PolicyMaxSessions:
		return num(&p.MaxSessions)
	case PolicyMaxSessionsPerUser:
		return num(&p.MaxSessionsPerUser)
	case PolicyMaxRunningTurns:
		return num(&p.MaxRunningTurns)
	case PolicySessionTokens:
		n, err := parseLimit(key, value)
		p.SessionTokens = n
		return err
	case PolicyUserTokensPerDay:
		n, err := parseLimit(key, value)
		p.UserTokensPerDay = n
		return err
	case PolicyApprovals:
		if value == "none" || value == "" {
			value = ApprovalNever
		}
		if !ValidApprovalMode(value) {
			return fmt.Errorf("%s: %q is not a mode: never, risky or always", key, value)
		}
		p.Approvals = value
		return nil
	case PolicyApprovalChannels:
		var l []ChannelApproval
		if value != "none" && value != "" {
			for _, item := range strings.Split(value, ",") {
				ch, mode, ok := strings.Cut(strings.TrimSpace(item), "=")
				if !ok || !validName(ch) || !ValidApprovalMode(mode) {
					return fmt.Errorf("%s: %q is not channel=mode (mode: never, risky or always)", key, item)
				}
				l = slices.DeleteFunc(l, func(c ChannelApproval) bool { return c.Channel == ch })
				l = append(l, ChannelApproval{Channel: ch, Mode: mode})
			}
		}
		slices.SortFunc(l, func(a, b ChannelApproval) int { return strings.Compare(a.Channel, b.Channel) })
		p.ChannelApprovals = l
		return nil
	case PolicyApprovalTimeout:
		if value == "none" || value == "" {
			p.ApprovalTimeout = 0
			return nil
		}
		d, err := time.ParseDuration(value)
		if err != nil || d < 10*time.Second || d > 24*time.Hour {
			return fmt.Errorf("%s: %q is not a duration between 10s and 24h (10m, 1h)", key, value)
		}
		p.ApprovalTimeout = d
		return nil
	case PolicyApprovalTwoPerson:
		switch value {
		case "on", "true", "yes":
			p.TwoPerson = true
		case "off", "false", "no", "none", "":
			p.TwoPerson = false
		default:
			return fmt.Errorf("%s: %q is not on or off", key, value)
		}
		return nil
	case PolicyApprovalRulesOff:
		l, err := parseNames(key, value)
		if err == nil {
			for _, n := range l {
				if n == risk.Unparsable {
					return fmt.Errorf("%s: %s cannot be switched off", key, n)
				}
			}
		}
		p.ApprovalRulesOff = l
		return err
	case PolicyApprovalPatterns:
		var ps []risk.Pattern
		if value != "none" && value != "" {
			for _, item := range strings.Split(value, ",") {
				name, globs, ok := strings.Cut(strings.TrimSpace(item), "=")
				command, args, _ := strings.Cut(globs, ":")
				pat := risk.Pattern{Name: name, Description: "the tenant's rule " + name, Command: command, Args: args}
				if !ok {
					return fmt.Errorf("%s: %q is not name=command-glob[:args-glob]", key, item)
				}
				if err := pat.Validate(); err != nil {
					return fmt.Errorf("%s: %q: %w", key, item, err)
				}
				ps = append(ps, pat)
			}
		}
		p.ApprovalPatterns = ps
		return nil
	}
	return fmt.Errorf("unknown policy key %q; the keys are %s", key, strings.Join(PolicyKeys, ", "))
}

// Get returns one key's value in the form Set takes.
func (p TenantPolicy) Get(key string) string {
	limit := func(n int64) string {
		if n == 0 {
			return "none"
		}
		return strconv.FormatInt(n, 10)
	}
	list := func(l []string) string {
		if len(l) == 0 {
			return "none"
		}
		return strings.Join(l, ",")
	}
	switch key {
	case PolicyBackends:
		return list(p.Backends)
	case PolicyModels:
		return list(p.Models)
	case PolicyDefaultBackend:
		if p.DefaultBackend == "" {
			return "none"
		}
		return p.DefaultBackend
	case PolicyMaxSessions:
		return limit(int64(p.MaxSessions))
	case PolicyMaxSessionsPerUser:
		return limit(int64(p.MaxSessionsPerUser))
	case PolicyMaxRunningTurns:
		return limit(int64(p.MaxRunningTurns))
	case PolicySessionTokens:
		return limit(p.SessionTokens)
	case PolicyUserTokensPerDay:
		return limit(p.UserTokensPerDay)
	case PolicyApprovals:
		if p.Approvals == "" {
			return ApprovalNever
		}
		return p.Approvals
	case PolicyApprovalChannels:
		var items []string
		for _, c := range p.ChannelApprovals {
			items = append(items, c.Channel+"="+c.Mode)
		}
		return list(items)
	case PolicyApprovalTimeout:
		if p.ApprovalTimeout == 0 {
			return DefaultApprovalTimeout.String()
		}
		return p.ApprovalTimeout.String()
	case PolicyApprovalTwoPerson:
		if p.TwoPerson {
			return "on"
		}
		return "off"
	case PolicyApprovalRulesOff:
		return list(p.ApprovalRulesOff)
	case PolicyApprovalPatterns:
		var items []string
		for _, pat := range p.ApprovalPatterns {
			item := pat.Name + "=" + pat.Command
			if pat.Args != "" {
				item += ":" + pat.Args
			}
			items = append(items, item)
		}
		return list(items)
	}
	return ""
}

// Check says whether the policy holds together: the default backend is an
// allowed one.
func (p TenantPolicy) Check() error {
	if p.DefaultBackend != "" && len(p.Backends) > 0 && !slices.Contains(p.Backends, p.DefaultBackend) {
		return fmt.Errorf("the default backend %q is not among the allowed ones (%s)", p.DefaultBackend, strings.Join(p.Backends, ", "))
	}
	return nil
}

// BackendAllowed says whether sessions may use backend.
func (p TenantPolicy) BackendAllowed(backend string) bool {
	return len(p.Backends) == 0 || slices.Contains(p.Backends, backend)
}

// ModelAllowed says whether a session may be set to model ("" is the
// worker's default, always allowed).
func (p TenantPolicy) ModelAllowed(model string) bool {
	return model == "" || slices.Contains(p.Models, model)
}

// IsAdmin says whether user is one of the tenant's admins.
func (p TenantPolicy) IsAdmin(user string) bool {
	return user != "" && slices.Contains(p.Admins, user)
}

// needsTickets says whether turns must be admitted by the manager: a limit
// spans sessions (running turns, a person's daily tokens).
func (p *TenantPolicy) needsTickets() bool {
	return p != nil && (p.MaxRunningTurns > 0 || p.UserTokensPerDay > 0)
}

// Text is the policy for people, one key per line.
func (p TenantPolicy) Text() string {
	var b strings.Builder
	for _, k := range PolicyKeys {
		fmt.Fprintf(&b, "• `%s`: %s\n", k, p.Get(k))
	}
	admins := "none"
	if len(p.Admins) > 0 {
		admins = strings.Join(p.Admins, ", ")
	}
	fmt.Fprintf(&b, "• admins (from configuration): %s", admins)
	return b.String()
}

func parseLimit(key, value string) (int64, error) {
	if value == "none" || value == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(strings.ReplaceAll(value, "_", ""), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s: %q is not a number (0 or none for no limit)", key, value)
	}
	return n, nil
}

func parseNames(key, value string) ([]string, error) {
	if value == "none" || value == "" {
		return nil, nil
	}
	var out []string
	for _, f := range strings.FieldsFunc(value, func(r rune) bool { return r == ',' || r == ' ' }) {
		if !validName(f) {
			return nil, fmt.Errorf("%s: %q is not a name", key, f)
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	if len(out) > 32 {
		return nil, errors.New(key + ": at most 32 names")
	}
	return out, nil
}

func validName(s string) bool {
	if s == "" || len(s) > 100 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(".-_:/", r)) {
			return false
		}
	}
	return true
}

// applyOverrides is configured with the keys admins set applied; a value
// that no longer parses is skipped.
func applyOverrides(configured TenantPolicy, overrides []PolicyOverride) TenantPolicy {
	p := configured
	p.Admins = slices.Clone(configured.Admins)
	p.Backends = slices.Clone(configured.Backends)
	p.Models = slices.Clone(configured.Models)
	p.ChannelApprovals = slices.Clone(configured.ChannelApprovals)
	p.ApprovalPatterns = slices.Clone(configured.ApprovalPatterns)
	p.ApprovalRulesOff = slices.Clone(configured.ApprovalRulesOff)
	for _, o := range overrides {
		_ = p.Set(o.Key, o.Value)
	}
	return p
}

// PolicyOverride is one key an admin set.
type PolicyOverride struct {
	Key   string `json:"key"`
	Value string `json:"value"`
	By    string `json:"by,omitempty"`
}

// equal says whether two policies are the same.
func (p TenantPolicy) equal(o TenantPolicy) bool {
	return slices.Equal(p.Admins, o.Admins) && slices.Equal(p.Backends, o.Backends) && slices.Equal(p.Models, o.Models) &&
		p.DefaultBackend == o.DefaultBackend && p.MaxSessions == o.MaxSessions && p.MaxSessionsPerUser == o.MaxSessionsPerUser &&
		p.MaxRunningTurns == o.MaxRunningTurns && p.SessionTokens == o.SessionTokens && p.UserTokensPerDay == o.UserTokensPerDay &&
		p.Approvals == o.Approvals && slices.Equal(p.ChannelApprovals, o.ChannelApprovals) && p.ApprovalTimeout == o.ApprovalTimeout &&
		p.TwoPerson == o.TwoPerson && slices.Equal(p.ApprovalPatterns, o.ApprovalPatterns) && slices.Equal(p.ApprovalRulesOff, o.ApprovalRulesOff)
}
