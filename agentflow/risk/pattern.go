package risk

import (
	"fmt"
	"regexp"
	"strings"

	"mvdan.cc/sh/v3/pattern"
)

// Pattern is a tenant rule: commands whose name matches Command and whose
// arguments match Args are reported under Name.
//
// Command and Args use shell glob syntax: * matches any run of characters
// (slashes included), ? one character, [abc] and [a-z] one of a set, a
// backslash quotes the next character. Both must match the whole string.
//
// Command is matched against the command name with its directory removed
// (so "terraform" matches /usr/local/bin/terraform), or against the name
// as written when Command itself contains a slash. It is matched against
// every command the classifier finds, including commands run through
// wrappers (sudo, env, timeout, xargs, find -exec ...) and inside bash -c
// strings.
//
// Args, when not empty, is matched against the arguments after the
// command name joined by single spaces, quotes removed; arguments only
// known at run time take part as written ("$X"). An empty Args matches
// any arguments, none included.
//
// For example {"name": "terraform-apply", "description": "applies
// infrastructure changes", "command": "terraform", "args": "apply*"}
// reports "terraform apply -auto-approve" but not "terraform plan".
type Pattern struct {
	// Name is reported as Finding.Rule: lowercase letters, digits and
	// dashes, starting with a letter, and not a built-in rule name.
	Name string `json:"name"`
	// Description is the reason shown to the person approving.
	Description string `json:"description"`
	// Command is a glob on the command name; required.
	Command string `json:"command"`
	// Args is an optional glob on the joined arguments.
	Args string `json:"args,omitempty"`
}

type compiledPattern struct {
	Pattern
	command, args *regexp.Regexp
}

// Validate reports what is wrong with p, if anything. Errors wrap
// [ErrInvalidOptions].
func (p Pattern) Validate() error {
	_, err := p.compile()
	return err
}

func (p Pattern) compile() (compiledPattern, error) {
	cp := compiledPattern{Pattern: p}
	if p.Name == "" {
		return cp, fmt.Errorf("name is empty: %w", ErrInvalidOptions)
	}
	if !validName(p.Name) {
		return cp, fmt.Errorf("name %q: use lowercase letters, digits and dashes, starting with a letter: %w", p.Name, ErrInvalidOptions)
	}
	if isBuiltinRule(p.Name) {
		return cp, fmt.Errorf("name %q is a built-in rule: %w", p.Name, ErrInvalidOptions)
	}
	if strings.TrimSpace(p.Description) == "" {
		return cp, fmt.Errorf("pattern %q: description is empty: %w", p.Name, ErrInvalidOptions)
	}
	if p.Command == "" {
		return cp, fmt.Errorf("pattern %q: command is empty: %w", p.Name, ErrInvalidOptions)
	}
	var err error
	if cp.command, err = compileGlob(p.Command); err != nil {
		return cp, fmt.Errorf("pattern %q: command glob %q: %w: %w", p.Name, p.Command, ErrInvalidOptions, err)
	}
	if p.Args != "" {
		if cp.args, err = compileGlob(p.Args); err != nil {
			return cp, fmt.Errorf("pattern %q: args glob %q: %w: %w", p.Name, p.Args, ErrInvalidOptions, err)
		}
	}
	return cp, nil
}

func validName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z':
		case i > 0 && (c >= '0' && c <= '9' || c == '-'):
		default:
			return false
		}
	}
	return s != ""
}

// compileGlob turns a shell glob into an anchored regular expression.
// Without the Filenames mode, * and ? also match slashes, which is what a
// glob over command arguments needs.
func compileGlob(glob string) (*regexp.Regexp, error) {
	expr, err := pattern.Regexp(glob, pattern.EntireString)
	if err != nil {
		return nil, err
	}
	return regexp.Compile(expr)
}

// matches reports whether the pattern matches a command named name (as
// written) with the given arguments.
func (p compiledPattern) matches(name string, args []*field) bool {
	subject := name
	if !strings.Contains(p.Command, "/") {
		subject = cmdBase(name)
	}
	if !p.command.MatchString(subject) {
		return false
	}
	if p.args == nil {
		return true
	}
	vals := make([]string, len(args))
	for i, a := range args {
		vals[i] = a.display()
	}
	return p.args.MatchString(strings.Join(vals, " "))
}
