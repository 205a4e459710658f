package risk

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// Names of the built-in rules, as they appear in [Finding.Rule] and in
// [Options.Disabled]. The package documentation describes each one.
const (
	// RecursiveDelete is a recursive delete (rm -r, find -delete, find
	// -exec rm -r) of the workspace root, of something outside the
	// workspace, or of a target only known at run time.
	RecursiveDelete = "recursive-delete"
	// GitPush is git push, however git is spelled or wrapped.
	GitPush = "git-push"
	// PipeToShell is code downloaded from the network and run: curl|sh,
	// sh -c "$(curl ...)", bash <(curl ...), running a file a downloader
	// wrote earlier in the script.
	PipeToShell = "pipe-to-shell"
	// PackageInstall is an install or upgrade through a system or
	// language package manager.
	PackageInstall = "package-install"
	// Network is a change to the sandbox's network configuration
	// (interfaces, routes, firewall) or a tunnel out of it.
	Network = "network"
	// Sudo is running as another user: sudo, su, doas, pkexec, run0.
	Sudo = "sudo"
	// OutsideWrite is a write (redirection or file-changing command) to a
	// path outside the workspace and the scratch directories.
	OutsideWrite = "outside-write"
	// Credentials is any word naming a credential file (ssh keys, cloud
	// and registry credentials, .env files, /etc/shadow ...).
	Credentials = "credentials"
	// DynamicCommand is a command name, or a script handed to a shell or
	// eval, that is only known at run time.
	DynamicCommand = "dynamic-command"
	// Unparsable is a script (or a script string inside it) that does not
	// parse as Bash; it is never treated as safe.
	Unparsable = "unparsable"
)

// RuleInfo names a rule and says in one sentence what it catches, for
// listings shown to people.
type RuleInfo struct {
	Name        string `json:"name"`
	Description string `json:"description"`
}

var builtinRules = []RuleInfo{
	{RecursiveDelete, "recursive delete of the workspace root, of a path outside the workspace, or of a path only known at run time"},
	{GitPush, "git push to a remote"},
	{PipeToShell, "runs code downloaded from the network (curl | sh, sh -c \"$(curl ...)\", bash <(curl ...))"},
	{PackageInstall, "installs or upgrades packages (apt, yum, apk, pip, npm, go install, cargo, gem, brew ...)"},
	{Network, "changes the network configuration (interfaces, routes, firewall) or opens a tunnel"},
	{Sudo, "runs a command as another user (sudo, su, doas, pkexec, run0)"},
	{OutsideWrite, "writes, moves or deletes a path outside the workspace (besides /tmp, /var/tmp, /dev/shm and /dev/null)"},
	{Credentials, "reads or writes a credential file (ssh keys, .netrc, cloud and registry credentials, .env ...)"},
	{DynamicCommand, "the command name or a script string is only known at run time"},
	{Unparsable, "the script does not parse as Bash"},
}

// Rules returns the built-in rules in a fixed order. The slice is a copy
// the caller may keep.
func Rules() []RuleInfo {
	return slices.Clone(builtinRules)
}

func isBuiltinRule(name string) bool {
	return slices.ContainsFunc(builtinRules, func(r RuleInfo) bool { return r.Name == name })
}

// Options configure a [Classifier]. The zero value is not valid: Workspace
// is required. Options are plain data so a tenant can write them in its
// configuration (JSON keys in the tags).
type Options struct {
	// Workspace is the absolute path of the workspace root inside the
	// sandbox, such as "/workspace". The script starts there: relative
	// paths resolve against it, or against the directory of an earlier cd
	// with a literal argument.
	Workspace string `json:"workspace"`
	// Extra are tenant patterns, reported under their own names in
	// addition to the built-in rules.
	Extra []Pattern `json:"extra,omitempty"`
	// Disabled switches off built-in rules (and extra patterns) by name.
	// Unparsable cannot be disabled: a script nobody can read is never
	// safe.
	Disabled []string `json:"disabled,omitempty"`
}

// ErrInvalidOptions is wrapped by every error [New], [Classify] and
// [Pattern.Validate] return, so callers can tell bad configuration from
// other failures with errors.Is.
var ErrInvalidOptions = errors.New("invalid risk options")

// Finding is one reason a script needs a person's approval.
type Finding struct {
	// Rule is a built-in rule name or the Name of an extra pattern.
	Rule string `json:"rule"`
	// Reason says, in words for a person, what the command does, such as
	// "rm -r of / (the whole filesystem)".
	Reason string `json:"reason"`
	// Command is the offending command as the shell printer renders it
	// (one line, shortened when very long); empty when the whole script
	// is meant, as for Unparsable.
	Command string `json:"command,omitempty"`
}

// Verdict is the result of classifying one script: its findings in the
// order the commands appear in the script, without duplicates.
type Verdict struct {
	Findings []Finding `json:"findings,omitempty"`
}

// Risky reports whether the script needs a person's approval.
func (v Verdict) Risky() bool { return len(v.Findings) > 0 }

// Classifier classifies scripts under one validated [Options]. It holds no
// mutable state: one Classifier may be used from many goroutines, and the
// same script always gives the same Verdict.
type Classifier struct {
	workspace string
	patterns  []compiledPattern
	disabled  []string
}

// New validates o and returns a Classifier for it. Errors wrap
// [ErrInvalidOptions] and name the offending field.
func New(o Options) (*Classifier, error) {
	ws := o.Workspace
	if ws == "" {
		return nil, fmt.Errorf("risk: workspace is empty: %w", ErrInvalidOptions)
	}
	if !strings.HasPrefix(ws, "/") {
		return nil, fmt.Errorf("risk: workspace %q is not an absolute path: %w", ws, ErrInvalidOptions)
	}
	c := &Classifier{workspace: path.Clean(ws)}
	for i, p := range o.Extra {
		cp, err := p.compile()
		if err != nil {
			return nil, fmt.Errorf("risk: extra pattern %d: %w", i, err)
		}
		for _, prev := range c.patterns {
			if prev.Name == p.Name {
				return nil, fmt.Errorf("risk: extra pattern %d: name %q is used twice: %w", i, p.Name, ErrInvalidOptions)
			}
		}
		c.patterns = append(c.patterns, cp)
	}
	for _, name := range o.Disabled {
		switch {
		case name == Unparsable:
			return nil, fmt.Errorf("risk: rule %q cannot be disabled: %w", name, ErrInvalidOptions)
		case isBuiltinRule(name):
		case slices.ContainsFunc(c.patterns, func(p compiledPattern) bool { return p.Name == name }):
		default:
			return nil, fmt.Errorf("risk: disabled rule %q is neither a built-in rule nor an extra pattern: %w", name, ErrInvalidOptions)
		}
		c.disabled = append(c.disabled, name)
	}
	return c, nil
}

// Classify parses script as Bash and reports every command in it that
// needs approval. It does no I/O and reads no environment: the verdict
// depends on script and the Classifier's options only.
func (c *Classifier) Classify(script string) Verdict {
	w := &walker{c: c, seen: map[Finding]bool{}}
	w.script(script, &scope{cwd: c.workspace}, "")
	return Verdict{Findings: w.out}
}

// Classify is New followed by [Classifier.Classify], for callers that
// classify one script per configuration.
func Classify(script string, o Options) (Verdict, error) {
	c, err := New(o)
	if err != nil {
		return Verdict{}, err
	}
	return c.Classify(script), nil
}

// maxDepth bounds the nesting of scripts inside scripts (bash -c inside
// eval inside ...): deeper nesting is reported as Unparsable rather than
// followed, so hostile input cannot make classification arbitrarily slow.
const maxDepth = 8

// script parses src and walks it; text is the command that carried src as
// a string, empty for the top-level script.
func (w *walker) script(src string, sc *scope, text string) {
	if w.depth >= maxDepth {
		w.report(Unparsable, fmt.Sprintf("scripts nested more than %d levels deep", maxDepth), text)
		return
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(src), "")
	if err != nil {
		reason := "the script does not parse: " + err.Error()
		if text != "" {
			reason = "the script string does not parse: " + err.Error()
		}
		w.report(Unparsable, reason, text)
		return
	}
	w.depth++
	w.stmts(f.Stmts, sc)
	w.depth--
}
