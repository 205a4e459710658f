package bot

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/agentbot/agentbot/agentflow"
)

// Verb names a chat command. The zero value is not a verb.
type Verb string

// The verbs of the chat command grammar, in the order Help lists them.
const (
	VerbNew       Verb = "new"       // new [backend] [--root /abs/path] [title...]
	VerbSwitch    Verb = "switch"    // switch <backend> [root]
	VerbFork      Verb = "fork"      // fork [--backend b] [--root /abs/path] [title...]
	VerbTitle     Verb = "title"     // title <name...>
	VerbModel     Verb = "model"     // model [name]
	VerbStop      Verb = "stop"      // stop: cancel the running turn
	VerbApprove   Verb = "approve"   // approve [id] [--all]
	VerbDeny      Verb = "deny"      // deny [id]
	VerbApprovals Verb = "approvals" // approvals [never|risky|always]
	VerbDone      Verb = "done"      // done: pause the session, keep it
	VerbDestroy   Verb = "destroy"   // destroy: end the session for good
	VerbReset     Verb = "reset"     // reset: a fresh conversation, same workspace
	VerbStatus    Verb = "status"    // status
	VerbList      Verb = "list"      // list [--mine | --all] [--page N]
	VerbBackends  Verb = "backends"  // backends
	VerbExport    Verb = "export"    // export
	VerbPolicy    Verb = "policy"    // policy [set <key> <value...> | reset [key]]
	VerbAudit     Verb = "audit"     // audit [--page N]
	VerbHelp      Verb = "help"      // help [verb]
)

// MaxTitleRunes is the longest session title Parse accepts, in runes.
const MaxTitleRunes = 100

// MaxModelLen is the longest model name Parse accepts. Model names are
// ASCII, so this counts bytes and runes alike.
const MaxModelLen = 100

// MaxPolicyKeyLen and MaxPolicyValueRunes bound what "policy set" accepts.
// They only keep input sane; which keys exist and which values they take is
// the session manager's to say.
const (
	MaxPolicyKeyLen     = 64
	MaxPolicyValueRunes = 500
)

// The actions of the policy verb (Command.PolicyAction); the empty action
// shows the policy.
const (
	PolicySet   = "set"
	PolicyReset = "reset"
)

// MaxApprovalIDLen is the longest approval ID Parse accepts. Approval IDs
// are ASCII, so this counts bytes and runes alike.
const MaxApprovalIDLen = 100

// approvalModes are the modes "approvals" sets (Command.Mode), from the
// least to the most asking (agentflow.ApprovalNever, ApprovalRisky,
// ApprovalAlways).
var approvalModes = []string{agentflow.ApprovalNever, agentflow.ApprovalRisky, agentflow.ApprovalAlways}

// The scopes of the list verb (Command.Scope); the empty scope is the
// channel the command was given in.
const (
	ScopeMine = "mine"
	ScopeAll  = "all"
)

// AgentTrigger is the inline prefix that marks a message as a command, for
// places where slash commands do not work (Slack threads).
const AgentTrigger = "!agent"

var verbs = []Verb{
	VerbNew, VerbSwitch, VerbFork, VerbTitle, VerbModel, VerbStop, VerbApprove, VerbDeny, VerbApprovals,
	VerbDone, VerbDestroy, VerbReset, VerbStatus, VerbList, VerbBackends, VerbExport, VerbPolicy, VerbAudit, VerbHelp,
}

var synopses = map[Verb]string{
	VerbNew:       "new [backend] [--root /abs/path] [title...]",
	VerbSwitch:    "switch <backend> [root]",
	VerbFork:      "fork [--backend b] [--root /abs/path] [title...]",
	VerbTitle:     "title <name...>",
	VerbModel:     "model [name]",
	VerbStop:      "stop",
	VerbApprove:   "approve [id] [--all]",
	VerbDeny:      "deny [id]",
	VerbApprovals: "approvals [never|risky|always]",
	VerbDone:      "done",
	VerbDestroy:   "destroy",
	VerbReset:     "reset",
	VerbStatus:    "status",
	VerbList:      "list [--mine | --all] [--page N]",
	VerbBackends:  "backends",
	VerbExport:    "export",
	VerbPolicy:    "policy [set <key> <value...> | reset [key]]",
	VerbAudit:     "audit [--page N]",
	VerbHelp:      "help [verb]",
}

var descriptions = map[Verb]string{
	VerbNew:       "start a new session, optionally on a given sandbox backend, in a given workspace root (an absolute directory, for the local backend) and with a title",
	VerbSwitch:    "move this session to another sandbox backend, workspace files included (root: an absolute directory, for the local backend)",
	VerbFork:      "copy this session (conversation and workspace) into a new thread, optionally on another backend or into a given workspace root (an absolute directory, for the local backend)",
	VerbTitle:     "rename this session",
	VerbModel:     "show this session's model, or set it (to one the policy allows)",
	VerbStop:      "cancel the turn that is running",
	VerbApprove:   "approve the command waiting for approval; --all: and the rest of this turn's",
	VerbDeny:      "deny the command waiting for approval",
	VerbApprovals: "show which shell commands wait for approval in this session, or set its mode (never, risky: those the risk rules flag, always); it can only be stricter than the workspace's and the channel's",
	VerbDone:      "pause this session and keep it for later",
	VerbDestroy:   "end this session and delete its sandbox",
	VerbReset:     "start a fresh conversation on the same workspace (the old one is kept for export)",
	VerbStatus:    "show this session's title, backend and what it is doing",
	VerbList:      "list the sessions in this channel as a tree of forks (--mine: the ones you started; --all: every channel's, for admins)",
	VerbBackends:  "list the sandbox backends available",
	VerbExport:    "export this session's transcript",
	VerbPolicy:    "show the policy (limits, backends, models); admins can set a key, or reset one or all to the configured value",
	VerbAudit:     "show the log of control commands and who gave them, newest first (admins only)",
	VerbHelp:      "show this help, or how to use one verb",
}

// Verbs returns every verb, in the order Help lists them. The slice is a copy.
func Verbs() []Verb { return append([]Verb(nil), verbs...) }

// Valid reports whether v is one of the grammar's verbs.
func (v Verb) Valid() bool {
	_, ok := synopses[v]
	return ok
}

// Usage returns the one-line usage of v: its synopsis and what it does, e.g.
// "switch <backend> [root] - move this session ...". It returns "" for an
// unknown verb.
func Usage(v Verb) string {
	s, ok := synopses[v]
	if !ok {
		return ""
	}
	return s + " - " + descriptions[v]
}

// Help returns the full help text: one Usage line per verb, newline-separated,
// in the order of Verbs. It is plain text; platforms add their own markup.
func Help() string {
	lines := make([]string, len(verbs))
	for i, v := range verbs {
		lines[i] = Usage(v)
	}
	return strings.Join(lines, "\n")
}

// Command is a parsed chat command. Which fields are set depends on Verb:
//
//   - new: Backend (optional, one of the known backends), Root (optional,
//     absolute and clean), Title (optional)
//   - switch: Backend (required), Root (optional, absolute and clean)
//   - fork: Backend (optional), Root (optional, absolute and clean), Title
//     (optional)
//   - title: Title (required, non-empty)
//   - model: Model (optional: empty shows the model, a name sets it)
//   - policy: PolicyAction ("", PolicySet or PolicyReset); for set,
//     PolicyKey and PolicyValue (both required); for reset, PolicyKey
//     (optional: empty resets every key)
//   - list: Scope ("", ScopeMine or ScopeAll), Page (optional)
//   - audit: Page (optional)
//   - approve: ApprovalID (optional: empty answers the command that
//     waits), All (optional)
//   - deny: ApprovalID (optional)
//   - approvals: Mode (optional: empty shows the mode, one of never,
//     risky or always sets it)
//   - help: Topic (optional, the verb asked about)
//   - every other verb: nothing
//
// Backend is always spelled as in the list given to Parse. Title and
// PolicyValue hold no control characters and no runs of whitespace; Title
// is at most MaxTitleRunes runes, PolicyValue MaxPolicyValueRunes. Model is
// one word of ASCII letters, digits and . - _ : / that starts with a letter
// or digit, at most MaxModelLen long. PolicyKey is one word of lowercase
// ASCII letters, digits and '-' that starts with a letter or digit, at most
// MaxPolicyKeyLen long; Parse checks only that shape, not that the key
// exists. Page is 0 when not given, at least 1 otherwise. ApprovalID is
// one word of ASCII letters, digits and _ . : - that starts with a letter
// or digit, at most MaxApprovalIDLen long; Mode is in lower case.
//
// Root is the workspace root asked for; Parse accepts it with any backend,
// as the backend alone knows whether it can work there (the local backend
// takes a host directory, others refuse it when the sandbox is made).
type Command struct {
	Verb    Verb
	Backend string
	Root    string
	Title   string
	// Topic is the verb that "help <verb>" asks about; empty otherwise.
	Topic Verb
	// Model is the model that "model <name>" sets; empty otherwise.
	Model string
	// PolicyAction, PolicyKey and PolicyValue are what "policy" does:
	// show (""), set a key to a value, or reset a key (all keys when
	// PolicyKey is empty).
	PolicyAction string
	PolicyKey    string
	PolicyValue  string
	// Scope is whose sessions "list" shows: this channel's (""), the
	// asker's (ScopeMine) or every one (ScopeAll).
	Scope string
	// Page is the page of "list" or "audit" asked for, from 1; 0 when no
	// page was given (the first).
	Page int
	// ApprovalID names the approval that "approve" or "deny" answers;
	// empty: the command waiting. All (approve --all) approves the rest
	// of the turn's commands too.
	ApprovalID string
	All        bool
	// Mode is the approval mode that "approvals <mode>" sets; empty
	// otherwise.
	Mode string
}

// String returns the command in the grammar's canonical form, quoting where
// needed, such that Parse(c.String(), backends) gives back c.
func (c Command) String() string {
	parts := []string{string(c.Verb)}
	switch c.Verb {
	case VerbNew:
		if c.Backend != "" {
			parts = append(parts, quoteWord(c.Backend))
		}
		parts = append(parts, rootWords(c.Root)...)
		// Without a backend or root before it, the first title word is
		// quoted so it is never taken for a backend (String does not know
		// the list of backends); one that starts with "--" is quoted so it
		// is never taken for an option.
		parts = append(parts, titleWords(c.Title, (c.Backend == "" && c.Root == "") || isOption(c.Title))...)
	case VerbSwitch:
		parts = append(parts, quoteWord(c.Backend))
		if c.Root != "" {
			parts = append(parts, quoteWord(c.Root))
		}
	case VerbFork:
		if c.Backend != "" {
			parts = append(parts, "--backend", quoteWord(c.Backend))
		}
		parts = append(parts, rootWords(c.Root)...)
		parts = append(parts, titleWords(c.Title, isOption(c.Title))...)
	case VerbTitle:
		parts = append(parts, titleWords(c.Title, false)...)
	case VerbModel:
		if c.Model != "" {
			parts = append(parts, quoteWord(c.Model))
		}
	case VerbPolicy:
		if c.PolicyAction != "" {
			parts = append(parts, c.PolicyAction)
		}
		if c.PolicyKey != "" {
			parts = append(parts, quoteWord(c.PolicyKey))
		}
		if c.PolicyAction == PolicySet {
			parts = append(parts, titleWords(c.PolicyValue, false)...)
		}
	case VerbApprove, VerbDeny:
		if c.ApprovalID != "" {
			parts = append(parts, quoteWord(c.ApprovalID))
		}
		if c.All {
			parts = append(parts, "--all")
		}
	case VerbApprovals:
		if c.Mode != "" {
			parts = append(parts, c.Mode)
		}
	case VerbList, VerbAudit:
		if c.Scope != "" {
			parts = append(parts, "--"+c.Scope)
		}
		if c.Page != 0 {
			parts = append(parts, "--page", strconv.Itoa(c.Page))
		}
	case VerbHelp:
		if c.Topic != "" {
			parts = append(parts, string(c.Topic))
		}
	}
	return strings.Join(parts, " ")
}

// rootWords is the --root option of new and fork, or nothing for no root.
func rootWords(root string) []string {
	if root == "" {
		return nil
	}
	return []string{"--root", quoteWord(root)}
}

// titleWords splits a sanitised title into words, quoting those that need it;
// quoteFirst says whether the first word must be quoted to keep its meaning.
func titleWords(title string, quoteFirst bool) []string {
	if title == "" {
		return nil
	}
	words := strings.Split(title, " ")
	for i, w := range words {
		if i == 0 && quoteFirst {
			words[i] = forceQuote(w)
		} else {
			words[i] = quoteWord(w)
		}
	}
	return words
}

// quoteWord returns w as one token: unchanged when it tokenises as itself,
// double-quoted otherwise.
func quoteWord(w string) string {
	if w != "" && !strings.ContainsFunc(w, unicode.IsSpace) {
		if _, ok := closingQuote(w); !ok {
			return w
		}
	}
	return forceQuote(w)
}

func forceQuote(w string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(w) + `"`
}

// ParseError is a command that could not be parsed. Its message is a short
// sentence meant for the user who typed the command; it echoes (clipped)
// words of the user's input, so platforms must escape it like any user text.
type ParseError struct {
	// Verb is the verb being parsed, or "" when the verb itself was not
	// understood.
	Verb Verb
	// Message is the user-facing explanation, including the usage line or a
	// suggestion where there is one.
	Message string
}

// Error returns the user-facing message.
func (e *ParseError) Error() string { return e.Message }

func parseErr(v Verb, format string, args ...any) *ParseError {
	return &ParseError{Verb: v, Message: fmt.Sprintf(format, args...)}
}

func usageErr(v Verb, problem string) *ParseError {
	return parseErr(v, "%s; usage: %s", problem, Usage(v))
}

// Parse parses the text of a command: what follows the trigger (the slash
// command's text, or what Trigger returns). backends lists the sandbox backends
// that exist, in the order error messages should name them.
//
// Text is split into words like a shell would, without expansions: runs of
// white space separate words; a word that starts with a quote (" or ', or
// the typographic “ ” and ‘ ’ that chat clients substitute) runs to the
// matching closing quote, white space included, and a backslash inside ASCII
// double quotes escapes " or \. A quote that opens in the middle of a word, or
// that is never closed, is an ordinary character, so "user's bug" needs no
// quoting. A quoted word is never a backend in "new" nor an option in "new"
// or "fork".
//
// Verbs and backend names are matched without regard to case. Empty text is
// "help". For "new", the first word is the backend only if it names one of
// backends; otherwise it starts the title. Titles are the remaining words
// joined by single spaces, with control characters removed; longer than
// MaxTitleRunes is an error. The options of new (--root) and fork
// (--backend, --root) come before the title in any order, each at most
// once, with the value as the next word or after '='; "--" ends them, and a
// title that starts with "--" is written after it or quoted. A root (of
// switch, new or fork) must be an absolute path; it is cleaned.
// Em and en dashes that chat clients substitute for "--" are read as "--".
// A model name keeps its case; policy actions and keys do not (keys come
// back in lower case), and a policy value is the remaining words joined
// like a title. The options of list and audit come in any order, each at
// most once, with "--page N" or "--page=N". An approval ID (approve,
// deny) keeps its case, and approve's --all may come before or after it;
// an approval mode is matched without regard to case.
//
// Every error is a *ParseError whose message tells the user what to type.
func Parse(text string, backends []string) (Command, error) {
	toks := tokenize(strings.ToValidUTF8(text, "\uFFFD"))
	if len(toks) == 0 {
		return Command{Verb: VerbHelp}, nil
	}
	word := toks[0].text
	v := Verb(strings.ToLower(word))
	if !v.Valid() {
		if s := suggest(word, verbNames()); s != "" {
			return Command{}, parseErr("", "unknown command '%s'; did you mean '%s'? Try 'help'.", clip(word), s)
		}
		return Command{}, parseErr("", "unknown command '%s'. Try 'help'.", clip(word))
	}
	return parseArgs(v, toks[1:], backends)
}

// parseArgs parses the arguments of verb v as documented on Parse.
func parseArgs(v Verb, args []token, backends []string) (Command, error) {
	cmd := Command{Verb: v}
	switch v {
	case VerbNew:
		if len(args) > 0 && !args[0].quoted {
			if b, ok := findBackend(args[0].text, backends); ok {
				cmd.Backend = b
				args = args[1:]
			}
		}
		args, err := options(&cmd, args, backends)
		if err != nil {
			return Command{}, err
		}
		t, err := title(v, args)
		if err != nil {
			return Command{}, err
		}
		cmd.Title = t
	case VerbSwitch:
		if len(args) == 0 {
			return Command{}, usageErr(v, "switch needs a backend")
		}
		if len(args) > 2 {
			return Command{}, usageErr(v, fmt.Sprintf("too many arguments ('%s')", clip(args[2].text)))
		}
		b, err := backend(v, args[0].text, backends)
		if err != nil {
			return Command{}, err
		}
		cmd.Backend = b
		if len(args) == 2 {
			if cmd.Root, err = workspaceRoot(v, args[1].text); err != nil {
				return Command{}, err
			}
		}
	case VerbFork:
		args, err := options(&cmd, args, backends)
		if err != nil {
			return Command{}, err
		}
		t, err := title(v, args)
		if err != nil {
			return Command{}, err
		}
		cmd.Title = t
	case VerbTitle:
		t, err := title(v, args)
		if err != nil {
			return Command{}, err
		}
		if t == "" {
			return Command{}, usageErr(v, "title needs a name")
		}
		cmd.Title = t
	case VerbHelp:
		if len(args) > 1 {
			return Command{}, usageErr(v, "help takes at most one verb")
		}
		if len(args) == 1 {
			topic := Verb(strings.ToLower(args[0].text))
			if !topic.Valid() {
				if s := suggest(args[0].text, verbNames()); s != "" {
					return Command{}, parseErr(v, "there is no command '%s'; did you mean '%s'? Try 'help' for the list.", clip(args[0].text), s)
				}
				return Command{}, parseErr(v, "there is no command '%s'. Try 'help' for the list.", clip(args[0].text))
			}
			cmd.Topic = topic
		}
	case VerbModel:
		if len(args) > 1 {
			return Command{}, usageErr(v, "a model name is one word, without spaces")
		}
		if len(args) == 1 {
			m, err := modelName(args[0].text)
			if err != nil {
				return Command{}, err
			}
			cmd.Model = m
		}
	case VerbPolicy:
		if err := policyArgs(&cmd, args); err != nil {
			return Command{}, err
		}
	case VerbList, VerbAudit:
		if err := pageOptions(&cmd, args); err != nil {
			return Command{}, err
		}
	case VerbApprove, VerbDeny:
		if err := approveArgs(&cmd, args); err != nil {
			return Command{}, err
		}
	case VerbApprovals:
		if len(args) > 1 {
			return Command{}, usageErr(v, "approvals takes one mode: never, risky or always")
		}
		if len(args) == 1 {
			m, err := approvalMode(args[0].text)
			if err != nil {
				return Command{}, err
			}
			cmd.Mode = m
		}
	default: // verbs without arguments
		if len(args) > 0 {
			return Command{}, usageErr(v, fmt.Sprintf("%s takes no arguments", v))
		}
	}
	return cmd, nil
}

// modelName checks the name given to "model".
func modelName(name string) (string, error) {
	const v = VerbModel
	if n := utf8.RuneCountInString(name); n > MaxModelLen {
		return "", parseErr(v, "the model name is too long (%d characters; at most %d)", n, MaxModelLen)
	}
	if !wordOf(name, isModelRune) {
		return "", usageErr(v, fmt.Sprintf("'%s' is not a model name: use letters, digits and . - _ : / only, starting with a letter or digit", clip(name)))
	}
	return name, nil
}

// approveArgs parses "approve [id] [--all]" and "deny [id]" into cmd: the
// ID and --all in any order, each at most once.
func approveArgs(cmd *Command, args []token) error {
	v := cmd.Verb
	for _, a := range args {
		word := a.text
		if w := normaliseDashes(word); !a.quoted && isOption(w) {
			name, _, hasVal := strings.Cut(w, "=")
			switch {
			case v == VerbApprove && name == "--all":
				if hasVal {
					return usageErr(v, "--all takes no value")
				}
				if cmd.All {
					return usageErr(v, "--all is given twice")
				}
				cmd.All = true
				continue
			case v == VerbApprove:
				problem := fmt.Sprintf("unknown option '%s'", clip(name))
				if s := suggest(name, []string{"--all"}); s != "" {
					return parseErr(v, "%s; did you mean '%s'?", problem, s)
				}
				return usageErr(v, problem)
			case name == "--all":
				return usageErr(v, "deny answers one command: it takes no --all")
			}
			return usageErr(v, fmt.Sprintf("unknown option '%s'", clip(name)))
		}
		if cmd.ApprovalID != "" {
			return usageErr(v, fmt.Sprintf("%s takes at most one approval ID", v))
		}
		if n := utf8.RuneCountInString(word); n > MaxApprovalIDLen {
			return parseErr(v, "the approval ID is too long (%d characters; at most %d)", n, MaxApprovalIDLen)
		}
		if !wordOf(word, isApprovalIDRune) {
			return usageErr(v, fmt.Sprintf("'%s' is not an approval ID: use letters, digits and _ . : - only, starting with a letter or digit", clip(word)))
		}
		cmd.ApprovalID = word
	}
	return nil
}

// ValidApprovalID says id is an approval ID as Parse reads one: 1 to
// MaxApprovalIDLen ASCII letters, digits and "_.:-", starting with a
// letter or digit — so no white space, quote or option. Buttons that stand
// for an approval command carry only such IDs.
func ValidApprovalID(id string) bool {
	return len(id) <= MaxApprovalIDLen && wordOf(id, isApprovalIDRune)
}

func isApprovalIDRune(r rune) bool {
	return isASCIIAlnum(r) || strings.ContainsRune("_.:-", r)
}

// approvalMode checks the mode given to "approvals"; any case is
// accepted, and the mode is returned in lower case.
func approvalMode(word string) (string, error) {
	const v = VerbApprovals
	m := strings.ToLower(word)
	if slices.Contains(approvalModes, m) {
		return m, nil
	}
	problem := fmt.Sprintf("'%s' is not an approval mode (never, risky or always)", clip(word))
	if s := suggest(word, approvalModes); s != "" {
		return "", parseErr(v, "%s; did you mean '%s'?", problem, s)
	}
	return "", usageErr(v, problem)
}

func isModelRune(r rune) bool {
	return isASCIIAlnum(r) || strings.ContainsRune(".-_:/", r)
}

func isPolicyKeyRune(r rune) bool { return isASCIIAlnum(r) || r == '-' }

func isASCIIAlnum(r rune) bool {
	return ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9')
}

// wordOf reports whether w is non-empty, starts with an ASCII letter or
// digit (so it never reads as an option), and has only runes that ok
// accepts.
func wordOf(w string, ok func(rune) bool) bool {
	r, _ := utf8.DecodeRuneInString(w)
	if w == "" || !isASCIIAlnum(r) {
		return false
	}
	for _, r := range w {
		if !ok(r) {
			return false
		}
	}
	return true
}

// policyArgs parses "policy [set <key> <value...> | reset [key]]" into cmd.
func policyArgs(cmd *Command, args []token) error {
	const v = VerbPolicy
	if len(args) == 0 {
		return nil
	}
	word := args[0].text
	action := strings.ToLower(word)
	args = args[1:]
	switch action {
	case PolicySet:
		if len(args) == 0 {
			return usageErr(v, "policy set needs a key and a value")
		}
		key, err := policyKey(args[0].text)
		if err != nil {
			return err
		}
		val, err := policyValue(args[1:])
		if err != nil {
			return err
		}
		if val == "" {
			return usageErr(v, fmt.Sprintf("policy set needs a value for '%s' (to go back to the configured value, use policy reset %s)", key, key))
		}
		cmd.PolicyKey, cmd.PolicyValue = key, val
	case PolicyReset:
		if len(args) > 1 {
			return usageErr(v, "policy reset takes at most one key")
		}
		if len(args) == 1 {
			key, err := policyKey(args[0].text)
			if err != nil {
				return err
			}
			cmd.PolicyKey = key
		}
	default:
		problem := fmt.Sprintf("policy takes 'set' or 'reset', not '%s'", clip(word))
		if s := suggest(action, []string{PolicySet, PolicyReset}); s != "" {
			return parseErr(v, "%s; did you mean '%s'?", problem, s)
		}
		return usageErr(v, problem)
	}
	cmd.PolicyAction = action
	return nil
}

// policyKey checks the shape of a policy key; any case is accepted, and
// the key is returned in lower case.
func policyKey(key string) (string, error) {
	const v = VerbPolicy
	if n := utf8.RuneCountInString(key); n > MaxPolicyKeyLen {
		return "", parseErr(v, "the policy key is too long (%d characters; at most %d)", n, MaxPolicyKeyLen)
	}
	if !wordOf(key, isPolicyKeyRune) {
		return "", usageErr(v, fmt.Sprintf("'%s' is not a policy key: use letters, digits and - only, starting with a letter or digit", clip(key)))
	}
	return strings.ToLower(key), nil
}

// policyValue joins the words of a policy value and sanitises them like a
// title.
func policyValue(args []token) (string, error) {
	words := make([]string, len(args))
	for i, a := range args {
		words[i] = a.text
	}
	val := sanitizeTitle(strings.Join(words, " "))
	if n := utf8.RuneCountInString(val); n > MaxPolicyValueRunes {
		return "", parseErr(VerbPolicy, "the policy value is too long (%d characters; at most %d)", n, MaxPolicyValueRunes)
	}
	return val, nil
}

// pageOptions parses the options of list ("--mine", "--all", "--page N")
// and of audit ("--page N") into cmd. Options may come in any order and
// take their value as the next word or after '='.
func pageOptions(cmd *Command, args []token) error {
	v := cmd.Verb
	for len(args) > 0 {
		word := args[0].text
		args = args[1:]
		name, val, hasVal := strings.Cut(normaliseDashes(word), "=")
		switch {
		case name == "--page":
			if cmd.Page != 0 {
				return usageErr(v, "--page is given twice")
			}
			if !hasVal {
				if len(args) == 0 {
					return usageErr(v, "--page needs a number")
				}
				val, args = args[0].text, args[1:]
			}
			n, ok := pageNumber(val)
			if !ok {
				return usageErr(v, fmt.Sprintf("--page needs a number of 1 or more, not '%s'", clip(val)))
			}
			cmd.Page = n
		case v == VerbList && (name == "--"+ScopeMine || name == "--"+ScopeAll):
			if hasVal {
				return usageErr(v, fmt.Sprintf("%s takes no value", name))
			}
			scope := strings.TrimPrefix(name, "--")
			switch cmd.Scope {
			case "":
				cmd.Scope = scope
			case scope:
				return usageErr(v, fmt.Sprintf("%s is given twice", name))
			default:
				return usageErr(v, "--mine and --all do not go together: give one of them")
			}
		default:
			return optionErr(v, word)
		}
	}
	return nil
}

// pageNumber reads a page number: decimal ASCII digits, at least 1.
func pageNumber(s string) (int, bool) {
	if s == "" || strings.ContainsFunc(s, func(r rune) bool { return r < '0' || r > '9' }) {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= 1
}

// optionErr explains a word that is not an option of list or audit,
// suggesting the option it looks like.
func optionErr(v Verb, word string) error {
	opts := []string{"--page"}
	if v == VerbList {
		opts = []string{"--" + ScopeMine, "--" + ScopeAll, "--page"}
	}
	var problem, s string
	if w := normaliseDashes(word); isOption(w) {
		name, _, _ := strings.Cut(w, "=")
		problem = fmt.Sprintf("unknown option '%s'", clip(name))
		s = suggest(name, opts)
	} else {
		problem = fmt.Sprintf("%s takes only options, not '%s'", v, clip(word))
		if _, ok := pageNumber(word); ok {
			s = "--page " + word
		} else {
			s = suggest("--"+word, opts)
		}
	}
	if s != "" {
		return parseErr(v, "%s; did you mean '%s'?", problem, s)
	}
	return usageErr(v, problem)
}

func verbNames() []string {
	names := make([]string, len(verbs))
	for i, v := range verbs {
		names[i] = string(v)
	}
	return names
}

// options consumes the leading options of new (--root) and of fork
// (--backend, --root) into cmd and returns the words after them.
func options(cmd *Command, args []token, backends []string) ([]token, error) {
	v := cmd.Verb
	for len(args) > 0 && !args[0].quoted && isOption(args[0].text) {
		opt := normaliseDashes(args[0].text)
		args = args[1:]
		if opt == "--" {
			return args, nil
		}
		name, val, hasVal := strings.Cut(opt, "=")
		var needs string
		switch {
		case name == "--backend" && v == VerbFork:
			needs = "a backend name"
		case name == "--root":
			needs = "an absolute path"
		default:
			return nil, usageErr(v, fmt.Sprintf("unknown option '%s' (to start a title with '--', quote it)", clip(opt)))
		}
		if !hasVal {
			if len(args) == 0 {
				return nil, usageErr(v, fmt.Sprintf("%s needs %s", name, needs))
			}
			val, args = args[0].text, args[1:]
		}
		// A root or backend is never empty once given, so a set field
		// means the option came before.
		var err error
		switch name {
		case "--backend":
			if cmd.Backend != "" {
				return nil, usageErr(v, "--backend is given twice")
			}
			cmd.Backend, err = backend(v, val, backends)
		case "--root":
			if cmd.Root != "" {
				return nil, usageErr(v, "--root is given twice")
			}
			cmd.Root, err = workspaceRoot(v, val)
		}
		if err != nil {
			return nil, err
		}
	}
	return args, nil
}

// workspaceRoot checks a workspace root given to v and returns it cleaned.
// Whether the directory exists, and whether the backend may use it, is for
// the backend to say when it makes the sandbox.
func workspaceRoot(v Verb, root string) (string, error) {
	if strings.ContainsFunc(root, unicode.IsControl) {
		return "", usageErr(v, "the root must not contain control characters")
	}
	if !path.IsAbs(root) {
		return "", usageErr(v, fmt.Sprintf("the root must be an absolute path, like /home/me/project, not '%s'", clip(root)))
	}
	return path.Clean(root), nil
}

// isOption reports whether an unquoted word is read as an option of new or
// fork.
func isOption(w string) bool { return strings.HasPrefix(normaliseDashes(w), "--") }

// normaliseDashes turns a leading em or en dash, which chat clients put in
// place of "--", back into "--".
func normaliseDashes(w string) string {
	for _, d := range []string{"\u2014", "\u2013"} {
		if rest, ok := strings.CutPrefix(w, d); ok {
			return "--" + rest
		}
	}
	return w
}

// backend resolves a backend name given by the user, or explains why not.
func backend(v Verb, name string, backends []string) (string, error) {
	if b, ok := findBackend(name, backends); ok {
		return b, nil
	}
	if len(backends) == 0 {
		return "", parseErr(v, "unknown backend '%s'; no backends are available", clip(name))
	}
	msg := fmt.Sprintf("unknown backend '%s'; available: %s", clip(name), strings.Join(backends, ", "))
	if s := suggest(name, backends); s != "" {
		msg += fmt.Sprintf("; did you mean '%s'?", s)
	}
	return "", parseErr(v, "%s", msg)
}

func findBackend(name string, backends []string) (string, bool) {
	if name == "" {
		return "", false
	}
	for _, b := range backends {
		if strings.EqualFold(b, name) {
			return b, true
		}
	}
	return "", false
}

// title joins words into a sanitised title and checks its length.
func title(v Verb, args []token) (string, error) {
	words := make([]string, len(args))
	for i, a := range args {
		words[i] = a.text
	}
	t := sanitizeTitle(strings.Join(words, " "))
	if n := utf8.RuneCountInString(t); n > MaxTitleRunes {
		return "", parseErr(v, "the title is too long (%d characters; at most %d)", n, MaxTitleRunes)
	}
	return t, nil
}

// sanitizeTitle turns white-space controls (tab, newline) into spaces, drops
// other control characters and the bidirectional overrides that can make a
// title display differently from what it says, and collapses white space.
func sanitizeTitle(s string) string {
	s = strings.Map(func(r rune) rune {
		switch {
		case unicode.IsSpace(r):
			return ' '
		case unicode.IsControl(r), isBidiControl(r):
			return -1
		}
		return r
	}, s)
	return strings.Join(strings.Fields(s), " ")
}

func isBidiControl(r rune) bool {
	return (r >= '\u202A' && r <= '\u202E') || (r >= '\u2066' && r <= '\u2069') ||
		r == '\u200E' || r == '\u200F' || r == '\u061C'
}

// clip makes user input safe to echo in a message: no control characters and
// at most 32 runes.
func clip(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || isBidiControl(r) {
			return -1
		}
		return r
	}, s)
	if utf8.RuneCountInString(s) > 32 {
		return string([]rune(s)[:31]) + "…"
	}
	return s
}

// suggest returns the candidate word most likely meant: one at an edit
// distance of 1, else the only candidate that word (2+ runes) is a prefix of,
// else one at distance 2; never one at a distance of word's length or more.
// It returns "" when nothing is close.
func suggest(word string, candidates []string) string {
	w := []rune(strings.ToLower(word))
	if len(w) == 0 || len(w) > 64 {
		return ""
	}
	best, bestD := "", 3
	for _, c := range candidates {
		if d := editDistance(w, []rune(strings.ToLower(c))); d < bestD && d < len(w) {
			best, bestD = c, d
		}
	}
	if bestD <= 1 {
		return best
	}
	var prefixed []string
	for _, c := range candidates {
		if len(w) >= 2 && strings.HasPrefix(strings.ToLower(c), string(w)) {
			prefixed = append(prefixed, c)
		}
	}
	if len(prefixed) == 1 {
		return prefixed[0]
	}
	return best
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and transpositions of neighbours each cost one.
func editDistance(a, b []rune) int {
	// d[i][j] is the distance between a[:i] and b[:j]; three rows suffice.
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// token is one word of a command; quoted says it was written in quotes.
type token struct {
	text   string
	quoted bool
}

// closingQuote returns the quote that closes one opening s, if s starts
// with a quote.
func closingQuote(s string) (rune, bool) {
	r, _ := utf8.DecodeRuneInString(s)
	switch r {
	case '"', '\'', '\u201D':
		return r, true
	case '\u201C':
		return '\u201D', true
	case '\u2018':
		return '\u2019', true
	}
	return 0, false
}

// tokenize splits s into words as documented on Parse.
func tokenize(s string) []token {
	var toks []token
	for {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
		if s == "" {
			return toks
		}
		var t token
		if text, rest, ok := quoted(s); ok {
			t = token{text: text, quoted: true}
			s = rest
		}
		// The word runs on (after a closing quote, too) to the next space.
		end := strings.IndexFunc(s, unicode.IsSpace)
		if end < 0 {
			end = len(s)
		}
		t.text += s[:end]
		s = s[end:]
		toks = append(toks, t)
	}
}

// quoted reads a quoted section at the start of s. ok is false when s does
// not start with a quote or the quote is never closed.
func quoted(s string) (text, rest string, ok bool) {
	closer, isQuote := closingQuote(s)
	if !isQuote {
		return "", "", false
	}
	opener, size := utf8.DecodeRuneInString(s)
	var b strings.Builder
	for i := size; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if opener == '"' && r == '\\' && i+n < len(s) && (s[i+n] == '"' || s[i+n] == '\\') {
			b.WriteByte(s[i+n])
			i += n + 1
			continue
		}
		if r == closer {
			return b.String(), s[i+n:], true
		}
		b.WriteRune(r)
		i += n
	}
	return "", "", false
}

// Trigger recognises an inline command in a chat message and returns the
// command text to give to Parse. The rule:
//
//   - A message whose first word is "!agent" (any case) is always a command;
//     rest is what follows (possibly empty, which Parse reads as help), so a
//     mistyped verb still gets a helpful error.
//   - A message that starts with botMention (the platform's mention token of
//     the bot, e.g. "<@U123>" on Slack; "<@!U123>" and "<@U123|name>" are
//     accepted for "<@U123>"), optionally followed by ':' or ',', is a command
//     only when its next word is a verb (any case) used in the verb's shape:
//     new takes a backend, options and a quoted title, fork options and a
//     quoted title, title a quoted name; switch takes one or two words, the
//     second a path starting with '/'; help takes nothing or a verb; model,
//     policy, list, audit and approvals take what Parse accepts of them (a
//     model name; set or reset and a key; their options; a mode); approve
//     and deny take what Parse accepts, an ID only when it has a digit or
//     one of _ . : - in it; every other verb must stand alone. So "@bot
//     stop" stops the turn, "@bot list --mine" lists and "@bot approve"
//     approves, while "@bot stop the server on port 80", "@bot list all
//     the files", "@bot deny access" and "@bot please fix the build" are
//     chat for the agent.
//
// Leading white space is ignored; a mention or trigger later in the message
// does not count. An empty botMention recognises only "!agent". ok is false
// for chat; rest is then "".
func Trigger(text string, botMention string) (rest string, ok bool) {
	s := strings.TrimLeftFunc(text, unicode.IsSpace)
	if len(s) >= len(AgentTrigger) && strings.EqualFold(s[:len(AgentTrigger)], AgentTrigger) {
		after := s[len(AgentTrigger):]
		r, _ := utf8.DecodeRuneInString(after)
		if after == "" || unicode.IsSpace(r) {
			return strings.TrimSpace(after), true
		}
	}
	after, found := cutMention(s, botMention)
	if !found {
		return "", false
	}
	after = strings.TrimLeft(after, ":,")
	after = strings.TrimSpace(after)
	if !commandShaped(tokenize(after)) {
		return "", false
	}
	return after, true
}

// cutMention removes a leading mention of the bot from s.
func cutMention(s, mention string) (string, bool) {
	if mention == "" {
		return "", false
	}
	forms := []string{mention}
	if id, ok := strings.CutPrefix(mention, "<@"); ok && strings.HasSuffix(id, ">") {
		id = strings.TrimSuffix(id, ">")
		forms = append(forms, "<@!"+id+">")
		if rest, ok := strings.CutPrefix(s, "<@"+id+"|"); ok {
			if i := strings.IndexByte(rest, '>'); i >= 0 {
				return rest[i+1:], true
			}
		}
	}
	for _, f := range forms {
		rest, ok := strings.CutPrefix(s, f)
		if !ok {
			continue
		}
		if strings.HasSuffix(f, ">") || rest == "" || strings.ContainsRune(":,", rune(rest[0])) {
			return rest, true
		}
		if r, _ := utf8.DecodeRuneInString(rest); unicode.IsSpace(r) {
			return rest, true
		}
	}
	return "", false
}

// backendNames are the sandbox backends the product has, for telling
// "new docker" (a command) from "new tests for the parser" (prose) after a
// mention.
var backendNames = []string{"local", "docker", "e2b", "daytona"}

// commandShaped reports whether words after a mention read as a command
// rather than as chat that happens to start with a verb.
func commandShaped(toks []token) bool {
	if len(toks) == 0 || toks[0].quoted {
		return false
	}
	v := Verb(strings.ToLower(toks[0].text))
	args := toks[1:]
	switch v {
	case VerbNew, VerbFork, VerbTitle:
		// These take free text, so after a mention they read as prose
		// ("new tests for the parser please") unless what follows is
		// only a backend name (new), options (new --root /dir, fork
		// --backend b) and a quoted title. The explicit forms (!agent,
		// /agent) take any text.
		for i, a := range args {
			switch {
			case a.quoted:
				return i == len(args)-1
			case v == VerbNew && i == 0 && slices.Contains(backendNames, strings.ToLower(a.text)):
			case v != VerbTitle && strings.HasPrefix(a.text, "--"):
			case v != VerbTitle && i > 0 && strings.HasPrefix(args[i-1].text, "--"):
			default:
				return false
			}
		}
		return true
	case VerbSwitch:
		return len(args) <= 1 || (len(args) == 2 && strings.HasPrefix(args[1].text, "/"))
	case VerbHelp:
		return len(args) == 0 || (len(args) == 1 && Verb(strings.ToLower(args[0].text)).Valid())
	case VerbModel, VerbPolicy, VerbList, VerbAudit, VerbApprovals:
		// Their arguments are narrow enough (one name; set or reset
		// and a key; options; a mode) that what parses is meant as a
		// command.
		_, err := parseArgs(v, args, nil)
		return err == nil
	case VerbApprove, VerbDeny:
		// An ID is any word, so "approve it" or "deny access" read as
		// prose: after a mention, only an ID that looks like one (a
		// digit or _ . : - in it, as in "t3-call_1") makes a command.
		for _, a := range args {
			if !isOption(a.text) && !strings.ContainsFunc(a.text, func(r rune) bool {
				return ('0' <= r && r <= '9') || strings.ContainsRune("_.:-", r)
			}) {
				return false
			}
		}
		_, err := parseArgs(v, args, nil)
		return err == nil
	}
	return v.Valid() && len(args) == 0
}
