package discordbot

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
)

// commandJSON is an application command or option as Discord's API
// describes it.
type commandJSON struct {
	Type        int    `json:"type"`
	Name        string `json:"name"`
	Description string `json:"description"`
	Required    bool   `json:"required"`
	Choices     []struct {
		Name  string `json:"name"`
		Value any    `json:"value"`
	} `json:"choices"`
	Options   []commandJSON `json:"options"`
	MinValue  *float64      `json:"min_value"`
	MaxLength *int          `json:"max_length"`
}

// Option types, as Discord's API numbers them.
const (
	optSubCommand = 1
	optString     = 3
	optInteger    = 4
	optBoolean    = 5
)

// optionName is Discord's rule for names of chat input commands and their
// options (lowercase where the script has case).
var optionName = regexp.MustCompile(`^[-_\p{Ll}\p{Lo}\p{N}]{1,32}$`)

// checkLimits fails t unless the chat input command in raw stays within
// Discord's limits on names, descriptions, options and choices, and
// returns it.
func checkLimits(t *testing.T, raw []byte) commandJSON {
	t.Helper()
	var cmd commandJSON
	if err := json.Unmarshal(raw, &cmd); err != nil {
		t.Fatal(err)
	}
	// Discord counts the names, descriptions and values of the command,
	// its options and their choices against one limit.
	total := 0
	var check func(path string, c commandJSON, depth int)
	check = func(path string, c commandJSON, depth int) {
		if !optionName.MatchString(c.Name) {
			t.Errorf("%s: name %q is not 1-32 lowercase letters, digits, - or _", path, c.Name)
		}
		if n := utf8.RuneCountInString(c.Description); n < 1 || n > 100 {
			t.Errorf("%s: description has %d characters, want 1-100", path, n)
		}
		total += utf8.RuneCountInString(c.Name) + utf8.RuneCountInString(c.Description)
		if len(c.Options) > 25 {
			t.Errorf("%s: %d options, at most 25", path, len(c.Options))
		}
		var names []string
		optional := false
		for _, o := range c.Options {
			p := path + " " + o.Name
			if slices.Contains(names, o.Name) {
				t.Errorf("%s: name given twice", p)
			}
			names = append(names, o.Name)
			if o.Required && optional {
				t.Errorf("%s: a required option after an optional one", p)
			}
			optional = optional || !o.Required
			switch {
			case o.Type == optSubCommand && depth == 0:
				if len(o.Choices) > 0 || o.Required {
					t.Errorf("%s: a subcommand with choices or required", p)
				}
			case o.Type == optString || o.Type == optInteger || o.Type == optBoolean:
				if len(o.Options) > 0 {
					t.Errorf("%s: a value option with options", p)
				}
			default:
				t.Errorf("%s: unexpected option type %d", p, o.Type)
			}
			if o.MaxLength != nil && (o.Type != optString || *o.MaxLength < 1 || *o.MaxLength > 6000) {
				t.Errorf("%s: max_length %d, want 1-6000 on a string option", p, *o.MaxLength)
			}
			if len(o.Choices) > 25 {
				t.Errorf("%s: %d choices, at most 25", p, len(o.Choices))
			}
			for _, ch := range o.Choices {
				if n := utf8.RuneCountInString(ch.Name); n < 1 || n > 100 {
					t.Errorf("%s: choice name %q has %d characters, want 1-100", p, ch.Name, n)
				}
				total += utf8.RuneCountInString(ch.Name)
				switch v := ch.Value.(type) {
				case string:
					if o.Type != optString || utf8.RuneCountInString(v) > 100 {
						t.Errorf("%s: choice value %q", p, v)
					}
					total += utf8.RuneCountInString(v)
				default:
					t.Errorf("%s: choice value %v of type %T", p, v, v)
				}
			}
			check(p, o, depth+1)
		}
	}
	check("/"+cmd.Name, cmd, 0)
	if total > 4000 {
		t.Errorf("/%s has %d characters of names, descriptions and values, at most 4000", cmd.Name, total)
	}
	return cmd
}

// subOptions returns the options of subcommand name of cmd.
func subOptions(t *testing.T, cmd commandJSON, name string) []commandJSON {
	t.Helper()
	for _, o := range cmd.Options {
		if o.Name == name {
			return o.Options
		}
	}
	t.Fatalf("no subcommand %q", name)
	return nil
}

func TestCommandsLimits(t *testing.T) {
	var many []string
	for i := range 30 {
		many = append(many, fmt.Sprintf("backend-%02d", i))
	}
	tests := []struct {
		name     string
		backends []string
	}{
		{"no backends", nil},
		{"the product's backends", []string{"local", "docker", "e2b", "daytona"}},
		{"more backends than choices", many},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmds := Commands(tt.backends)
			if len(cmds) != 1 {
				t.Fatalf("%d commands, want 1", len(cmds))
			}
			raw, err := json.Marshal(cmds[0])
			if err != nil {
				t.Fatal(err)
			}
			cmd := checkLimits(t, raw)
			if n := len(subOptions(t, cmd, "switch")[0].Choices); n != min(len(tt.backends), 25) {
				t.Errorf("%d backend choices, want %d", n, min(len(tt.backends), 25))
			}
		})
	}
}

// TestCommandsOptions checks that every verb's subcommand offers the
// options commandText reads, of the right type, with the grammar's
// choices and bounds.
func TestCommandsOptions(t *testing.T) {
	raw, err := json.Marshal(Commands(testBackends)[0])
	if err != nil {
		t.Fatal(err)
	}
	var cmd commandJSON
	if err := json.Unmarshal(raw, &cmd); err != nil {
		t.Fatal(err)
	}
	type want struct {
		name      string
		typ       int
		required  bool
		choices   []any
		minValue  float64 // 0: none
		maxLength int     // 0: none
	}
	str := func(name string, maxLength int, choices ...any) want {
		return want{name: name, typ: optString, choices: choices, maxLength: maxLength}
	}
	page := want{name: "page", typ: optInteger, minValue: 1}
	tests := []struct {
		verb bot.Verb
		opts []want
	}{
		{bot.VerbModel, []want{str("name", bot.MaxModelLen)}},
		{bot.VerbPolicy, []want{str("action", 0, bot.PolicySet, bot.PolicyReset), str("key", bot.MaxPolicyKeyLen),
			str("value", bot.MaxPolicyValueRunes)}},
		{bot.VerbAudit, []want{page}},
		{bot.VerbList, []want{str("scope", 0, bot.ScopeMine, bot.ScopeAll), page}},
		{bot.VerbTitle, []want{{name: "name", typ: optString, required: true, maxLength: bot.MaxTitleRunes}}},
		{bot.VerbStop, nil},
		{bot.VerbApprove, []want{str("id", bot.MaxApprovalIDLen), {name: "all", typ: optBoolean}}},
		{bot.VerbDeny, []want{str("id", bot.MaxApprovalIDLen)}},
		{bot.VerbApprovals, []want{str("mode", 0, agentflow.ApprovalNever, agentflow.ApprovalRisky, agentflow.ApprovalAlways)}},
	}
	for _, tt := range tests {
		t.Run(string(tt.verb), func(t *testing.T) {
			opts := subOptions(t, cmd, string(tt.verb))
			if len(opts) != len(tt.opts) {
				t.Fatalf("%d options, want %d: %+v", len(opts), len(tt.opts), opts)
			}
			for i, w := range tt.opts {
				o := opts[i]
				var choices []any
				for _, ch := range o.Choices {
					if ch.Name != ch.Value {
						t.Errorf("%s: choice %q has value %v", w.name, ch.Name, ch.Value)
					}
					choices = append(choices, ch.Value)
				}
				minValue, maxLength := 0.0, 0
				if o.MinValue != nil {
					minValue = *o.MinValue
				}
				if o.MaxLength != nil {
					maxLength = *o.MaxLength
				}
				if o.Name != w.name || o.Type != w.typ || o.Required != w.required || !slices.Equal(choices, w.choices) ||
					minValue != w.minValue || maxLength != w.maxLength {
					t.Errorf("option %d: %+v; want %+v", i, o, w)
				}
			}
		})
	}
}
