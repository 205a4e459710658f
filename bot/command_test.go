package bot_test

import (
	"errors"
	"path"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/agentbot/agentbot/bot"
)

var testBackends = []string{"local", "docker", "e2b", "daytona"}

func TestParse(t *testing.T) {
	long := strings.Repeat("é", bot.MaxTitleRunes)
	tests := []struct {
		name string
		text string
		want bot.Command
	}{
		{"empty is help", "", bot.Command{Verb: bot.VerbHelp}},
		{"blank is help", " \t\n ", bot.Command{Verb: bot.VerbHelp}},

		{"new bare", "new", bot.Command{Verb: bot.VerbNew}},
		{"new backend", "new docker", bot.Command{Verb: bot.VerbNew, Backend: "docker"}},
		{"new backend and title", "new docker fix the build", bot.Command{Verb: bot.VerbNew, Backend: "docker", Title: "fix the build"}},
		{"new title only", "new fix the build", bot.Command{Verb: bot.VerbNew, Title: "fix the build"}},
		{"new backend any case", "NEW Docker x", bot.Command{Verb: bot.VerbNew, Backend: "docker", Title: "x"}},
		{"new quoted backend name is title", `new "docker" compose`, bot.Command{Verb: bot.VerbNew, Title: "docker compose"}},
		{"new only first word is backend", "new local docker", bot.Command{Verb: bot.VerbNew, Backend: "local", Title: "docker"}},
		{"new apostrophe needs no quoting", "new fix the user's bug", bot.Command{Verb: bot.VerbNew, Title: "fix the user's bug"}},
		{"new title whitespace collapsed", "new  a \t b\n", bot.Command{Verb: bot.VerbNew, Title: "a b"}},
		{"new quoted title", `new e2b "a  b" 'c d'`, bot.Command{Verb: bot.VerbNew, Backend: "e2b", Title: "a b c d"}},
		{"new title control chars stripped", "new a\x00b\x07c \u202Eevil", bot.Command{Verb: bot.VerbNew, Title: "abc evil"}},
		{"new title at the limit", "new " + long, bot.Command{Verb: bot.VerbNew, Title: long}},
		{"new smart quotes", "new \u201Cdocker thing\u201D", bot.Command{Verb: bot.VerbNew, Title: "docker thing"}},
		{"new unclosed quote is literal", `new "oops it`, bot.Command{Verb: bot.VerbNew, Title: `"oops it`}},
		{"new escaped quote", `new "say \"hi\" \\o/"`, bot.Command{Verb: bot.VerbNew, Title: `say "hi" \o/`}},
		{"new root", "new local --root /srv/proj fix it", bot.Command{Verb: bot.VerbNew, Backend: "local", Root: "/srv/proj", Title: "fix it"}},
		{"new root without backend", "new --root /srv/proj", bot.Command{Verb: bot.VerbNew, Root: "/srv/proj"}},
		{"new root before a backend name is title", "new --root /srv/proj docker", bot.Command{Verb: bot.VerbNew, Root: "/srv/proj", Title: "docker"}},
		{"new root equals", "new local --root=/srv/proj x", bot.Command{Verb: bot.VerbNew, Backend: "local", Root: "/srv/proj", Title: "x"}},
		{"new root cleaned", "new local --root /a/../b/ x", bot.Command{Verb: bot.VerbNew, Backend: "local", Root: "/b", Title: "x"}},
		{"new quoted root", `new local --root "/srv/my project" t`, bot.Command{Verb: bot.VerbNew, Backend: "local", Root: "/srv/my project", Title: "t"}},
		{"new em dash root", "new \u2014root /srv/x t", bot.Command{Verb: bot.VerbNew, Root: "/srv/x", Title: "t"}},
		// As switch: the backend, not the grammar, says which roots it
		// can use (docker takes only its own /workspace).
		{"new root with a non-local backend", "new docker --root /workspace t", bot.Command{Verb: bot.VerbNew, Backend: "docker", Root: "/workspace", Title: "t"}},
		{"new double dash ends options", "new local -- --root /x", bot.Command{Verb: bot.VerbNew, Backend: "local", Title: "--root /x"}},
		{"new quoted dash title", `new docker "--x" y`, bot.Command{Verb: bot.VerbNew, Backend: "docker", Title: "--x y"}},
		{"new option only at start", "new local a --root /x", bot.Command{Verb: bot.VerbNew, Backend: "local", Title: "a --root /x"}},

		{"switch", "switch docker", bot.Command{Verb: bot.VerbSwitch, Backend: "docker"}},
		{"switch with root", "switch local /home/me/proj", bot.Command{Verb: bot.VerbSwitch, Backend: "local", Root: "/home/me/proj"}},
		{"switch root cleaned", "switch local /home/me/../proj/", bot.Command{Verb: bot.VerbSwitch, Backend: "local", Root: "/home/proj"}},
		{"switch quoted root", `switch local "/srv/my project"`, bot.Command{Verb: bot.VerbSwitch, Backend: "local", Root: "/srv/my project"}},
		{"switch backend any case", "Switch DOCKER", bot.Command{Verb: bot.VerbSwitch, Backend: "docker"}},

		{"fork bare", "fork", bot.Command{Verb: bot.VerbFork}},
		{"fork title", "fork try another way", bot.Command{Verb: bot.VerbFork, Title: "try another way"}},
		{"fork backend", "fork --backend docker", bot.Command{Verb: bot.VerbFork, Backend: "docker"}},
		{"fork backend equals", "fork --backend=e2b try", bot.Command{Verb: bot.VerbFork, Backend: "e2b", Title: "try"}},
		{"fork em dash option", "fork \u2014backend docker x", bot.Command{Verb: bot.VerbFork, Backend: "docker", Title: "x"}},
		{"fork double dash ends options", "fork -- --backend", bot.Command{Verb: bot.VerbFork, Title: "--backend"}},
		{"fork quoted dash title", `fork "--x" y`, bot.Command{Verb: bot.VerbFork, Title: "--x y"}},
		{"fork option only at start", "fork a --backend docker", bot.Command{Verb: bot.VerbFork, Title: "a --backend docker"}},
		{"fork root", "fork --root /srv/x try it", bot.Command{Verb: bot.VerbFork, Root: "/srv/x", Title: "try it"}},
		{"fork backend then root", "fork --backend local --root /srv/x t", bot.Command{Verb: bot.VerbFork, Backend: "local", Root: "/srv/x", Title: "t"}},
		{"fork root then backend, equals", "fork --root=/srv/x --backend=local t", bot.Command{Verb: bot.VerbFork, Backend: "local", Root: "/srv/x", Title: "t"}},
		{"fork root cleaned", "fork --root /a/../b", bot.Command{Verb: bot.VerbFork, Root: "/b"}},
		{"fork quoted root", `fork --root '/srv/a b' --backend local`, bot.Command{Verb: bot.VerbFork, Backend: "local", Root: "/srv/a b"}},
		{"fork en dash root", "fork \u2013root /srv/x", bot.Command{Verb: bot.VerbFork, Root: "/srv/x"}},
		{"fork root with a non-local backend", "fork --backend e2b --root /srv/x", bot.Command{Verb: bot.VerbFork, Backend: "e2b", Root: "/srv/x"}},
		{"fork double dash after root", "fork --root /x -- --backend", bot.Command{Verb: bot.VerbFork, Root: "/x", Title: "--backend"}},

		{"title", "title Fix auth bug", bot.Command{Verb: bot.VerbTitle, Title: "Fix auth bug"}},
		{"title backend word", "title docker", bot.Command{Verb: bot.VerbTitle, Title: "docker"}},

		{"stop", "stop", bot.Command{Verb: bot.VerbStop}},
		{"done", "done", bot.Command{Verb: bot.VerbDone}},
		{"destroy", "destroy", bot.Command{Verb: bot.VerbDestroy}},
		{"status", "  status  ", bot.Command{Verb: bot.VerbStatus}},
		{"list", "list", bot.Command{Verb: bot.VerbList}},
		{"backends", "backends", bot.Command{Verb: bot.VerbBackends}},
		{"export", "export", bot.Command{Verb: bot.VerbExport}},
		{"help", "help", bot.Command{Verb: bot.VerbHelp}},
		{"help verb", "help Switch", bot.Command{Verb: bot.VerbHelp, Topic: bot.VerbSwitch}},
		{"help new verb", "help policy", bot.Command{Verb: bot.VerbHelp, Topic: bot.VerbPolicy}},

		{"model show", "model", bot.Command{Verb: bot.VerbModel}},
		{"model set", "model claude-sonnet-4", bot.Command{Verb: bot.VerbModel, Model: "claude-sonnet-4"}},
		{"model keeps case", "MODEL GPT-4o", bot.Command{Verb: bot.VerbModel, Model: "GPT-4o"}},
		{"model with every allowed character", "model openai/gpt-4.1_mini:2025-04", bot.Command{Verb: bot.VerbModel, Model: "openai/gpt-4.1_mini:2025-04"}},
		{"model quoted", `model "llama3.1:8b"`, bot.Command{Verb: bot.VerbModel, Model: "llama3.1:8b"}},
		{"model name at the limit", "model " + strings.Repeat("m", bot.MaxModelLen), bot.Command{Verb: bot.VerbModel, Model: strings.Repeat("m", bot.MaxModelLen)}},

		{"policy show", "policy", bot.Command{Verb: bot.VerbPolicy}},
		{"policy set", "policy set max-sessions 10", bot.Command{Verb: bot.VerbPolicy, PolicyAction: bot.PolicySet, PolicyKey: "max-sessions", PolicyValue: "10"}},
		{"policy set value of words", "policy set backends  docker,\te2b local", bot.Command{Verb: bot.VerbPolicy, PolicyAction: bot.PolicySet, PolicyKey: "backends", PolicyValue: "docker, e2b local"}},
		{"policy set value whitespace collapsed", "policy set models a \t b\n", bot.Command{Verb: bot.VerbPolicy, PolicyAction: bot.PolicySet, PolicyKey: "models", PolicyValue: "a b"}},
		{"policy set quoted value", `policy set models "x  y" 'z'`, bot.Command{Verb: bot.VerbPolicy, PolicyAction: bot.PolicySet, PolicyKey: "models", PolicyValue: "x y z"}},
		{"policy set value that looks like a verb or option", "policy set default-backend --all help", bot.Command{Verb: bot.VerbPolicy, PolicyAction: bot.PolicySet, PolicyKey: "default-backend", PolicyValue: "--all help"}},
		{"policy set value control chars stripped", "policy set k a\x00b \u202Ec", bot.Command{Verb: bot.VerbPolicy, PolicyAction: bot.PolicySet, PolicyKey: "k", PolicyValue: "ab c"}},
		{"policy set value with quotes", `policy set k "say \"hi\""`, bot.Command{Verb: bot.VerbPolicy, PolicyAction: bot.PolicySet, PolicyKey: "k", PolicyValue: `say "hi"`}},
		{"policy action and key any case", "Policy SET Max-Sessions 3", bot.Command{Verb: bot.VerbPolicy, PolicyAction: bot.PolicySet, PolicyKey: "max-sessions", PolicyValue: "3"}},
		{"policy unknown key is for the manager", "policy set no-such-key 1", bot.Command{Verb: bot.VerbPolicy, PolicyAction: bot.PolicySet, PolicyKey: "no-such-key", PolicyValue: "1"}},
		{"policy reset all", "policy reset", bot.Command{Verb: bot.VerbPolicy, PolicyAction: bot.PolicyReset}},
		{"policy reset key", "policy reset models", bot.Command{Verb: bot.VerbPolicy, PolicyAction: bot.PolicyReset, PolicyKey: "models"}},

		{"audit", "audit", bot.Command{Verb: bot.VerbAudit}},
		{"audit page", "audit --page 2", bot.Command{Verb: bot.VerbAudit, Page: 2}},
		{"audit page equals", "audit --page=12", bot.Command{Verb: bot.VerbAudit, Page: 12}},
		{"audit page leading zero", "audit --page 007", bot.Command{Verb: bot.VerbAudit, Page: 7}},
		{"audit em dash page", "audit \u2014page 3", bot.Command{Verb: bot.VerbAudit, Page: 3}},

		{"list mine", "list --mine", bot.Command{Verb: bot.VerbList, Scope: bot.ScopeMine}},
		{"list all", "list --all", bot.Command{Verb: bot.VerbList, Scope: bot.ScopeAll}},
		{"list page", "list --page 3", bot.Command{Verb: bot.VerbList, Page: 3}},
		{"list scope and page", "list --mine --page 2", bot.Command{Verb: bot.VerbList, Scope: bot.ScopeMine, Page: 2}},
		{"list page before scope", "list --page=4 --all", bot.Command{Verb: bot.VerbList, Scope: bot.ScopeAll, Page: 4}},
		{"list en dash", "list \u2013all", bot.Command{Verb: bot.VerbList, Scope: bot.ScopeAll}},

		{"approve", "approve", bot.Command{Verb: bot.VerbApprove}},
		{"approve id", "approve t3-call_abc", bot.Command{Verb: bot.VerbApprove, ApprovalID: "t3-call_abc"}},
		{"approve id keeps case", "APPROVE t3-Call_ABC", bot.Command{Verb: bot.VerbApprove, ApprovalID: "t3-Call_ABC"}},
		{"approve all", "approve --all", bot.Command{Verb: bot.VerbApprove, All: true}},
		{"approve id and all", "approve t3-call_1 --all", bot.Command{Verb: bot.VerbApprove, ApprovalID: "t3-call_1", All: true}},
		{"approve all before id", "approve --all t3-call_1", bot.Command{Verb: bot.VerbApprove, ApprovalID: "t3-call_1", All: true}},
		{"approve em dash all", "approve \u2014all", bot.Command{Verb: bot.VerbApprove, All: true}},
		{"approve quoted id", `approve "t1-x"`, bot.Command{Verb: bot.VerbApprove, ApprovalID: "t1-x"}},
		{"approve id with every allowed character", "approve a.b:c_d-9", bot.Command{Verb: bot.VerbApprove, ApprovalID: "a.b:c_d-9"}},
		{"approve id at the limit", "approve " + strings.Repeat("i", bot.MaxApprovalIDLen),
			bot.Command{Verb: bot.VerbApprove, ApprovalID: strings.Repeat("i", bot.MaxApprovalIDLen)}},
		{"deny", "deny", bot.Command{Verb: bot.VerbDeny}},
		{"deny id", "deny t12-toolu_01", bot.Command{Verb: bot.VerbDeny, ApprovalID: "t12-toolu_01"}},

		{"approvals show", "approvals", bot.Command{Verb: bot.VerbApprovals}},
		{"approvals never", "approvals never", bot.Command{Verb: bot.VerbApprovals, Mode: "never"}},
		{"approvals risky", "approvals risky", bot.Command{Verb: bot.VerbApprovals, Mode: "risky"}},
		{"approvals always any case", "Approvals ALWAYS", bot.Command{Verb: bot.VerbApprovals, Mode: "always"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := bot.Parse(tt.text, testBackends)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.text, err)
			}
			if got != tt.want {
				t.Errorf("Parse(%q) = %+v, want %+v", tt.text, got, tt.want)
			}
			again, err := bot.Parse(got.String(), testBackends)
			if err != nil || again != got {
				t.Errorf("round trip via %q = %+v, %v; want %+v", got.String(), again, err, got)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name     string
		text     string
		backends []string
		verb     bot.Verb
		want     []string // substrings of the message
		dontWant []string
	}{
		{"unknown verb with suggestion", "swich docker", nil, "",
			[]string{"unknown command 'swich'; did you mean 'switch'? Try 'help'."}, nil},
		{"transposed verb", "sotp", nil, "", []string{"did you mean 'stop'?"}, nil},
		{"verb prefix", "dest", nil, "", []string{"did you mean 'destroy'?"}, nil},
		{"unknown verb far from all", "xyzzy", nil, "",
			[]string{"unknown command 'xyzzy'. Try 'help'."}, []string{"did you mean"}},
		{"unknown verb echo clipped", "a\x00" + strings.Repeat("z", 100), nil, "",
			[]string{"unknown command 'a" + strings.Repeat("z", 30) + "…'"}, []string{"\x00"}},

		{"switch without backend", "switch", nil, bot.VerbSwitch,
			[]string{"switch needs a backend", "usage: switch <backend> [root]"}, nil},
		{"switch unknown backend close", "switch dokcer", nil, bot.VerbSwitch,
			[]string{"unknown backend 'dokcer'; available: local, docker, e2b, daytona", "did you mean 'docker'?"}, nil},
		{"switch unknown backend far", "switch kubernetes", nil, bot.VerbSwitch,
			[]string{"unknown backend 'kubernetes'; available: local, docker, e2b, daytona"}, []string{"did you mean"}},
		{"switch with no backends at all", "switch local", []string{}, bot.VerbSwitch,
			[]string{"no backends are available"}, nil},
		{"switch relative root", "switch local src/app", nil, bot.VerbSwitch,
			[]string{"absolute path", "'src/app'", "usage: switch"}, nil},
		{"switch root with control char", "switch local \"/a\x01b\"", nil, bot.VerbSwitch,
			[]string{"control characters"}, nil},
		{"switch too many args", "switch local /a extra", nil, bot.VerbSwitch,
			[]string{"too many arguments ('extra')", "usage: switch"}, nil},

		{"fork unknown backend", "fork --backend dokcer", nil, bot.VerbFork,
			[]string{"unknown backend 'dokcer'", "did you mean 'docker'?"}, nil},
		{"fork backend missing value", "fork --backend", nil, bot.VerbFork,
			[]string{"--backend needs a backend name", "usage: fork [--backend b] [--root /abs/path] [title...]"}, nil},
		{"fork unknown option", "fork --backnd docker", nil, bot.VerbFork,
			[]string{"unknown option '--backnd'", "usage: fork"}, nil},
		{"fork backend twice", "fork --backend local --backend docker", nil, bot.VerbFork,
			[]string{"--backend is given twice"}, nil},
		{"fork backend twice around a root", "fork --backend=local --root /x --backend docker", nil, bot.VerbFork,
			[]string{"--backend is given twice"}, nil},
		{"fork root twice", "fork --root /a --backend local --root /a", nil, bot.VerbFork,
			[]string{"--root is given twice", "usage: fork"}, nil},
		{"fork root missing value", "fork --backend local --root", nil, bot.VerbFork,
			[]string{"--root needs an absolute path", "usage: fork"}, nil},
		{"fork root takes the next word", "fork --root --backend docker", nil, bot.VerbFork,
			[]string{"absolute path", "not '--backend'"}, nil},
		{"fork relative root", "fork --root src/app t", nil, bot.VerbFork,
			[]string{"absolute path", "'src/app'", "usage: fork"}, nil},
		{"fork root with control char", "fork --root \"/a\x01b\"", nil, bot.VerbFork,
			[]string{"control characters"}, nil},

		{"new relative root", "new local --root src/app t", nil, bot.VerbNew,
			[]string{"absolute path", "'src/app'", "usage: new [backend] [--root /abs/path] [title...]"}, nil},
		{"new empty root", "new --root= t", nil, bot.VerbNew,
			[]string{"absolute path", "not ''"}, nil},
		{"new root with control char", "new --root=/a\x01b", nil, bot.VerbNew,
			[]string{"control characters"}, nil},
		{"new root twice", "new local --root /a --root=/b", nil, bot.VerbNew,
			[]string{"--root is given twice"}, nil},
		{"new root missing value", "new docker --root", nil, bot.VerbNew,
			[]string{"--root needs an absolute path", "usage: new"}, nil},
		{"new unknown option", "new local --rot /x", nil, bot.VerbNew,
			[]string{"unknown option '--rot'", "quote it", "usage: new"}, nil},
		{"new has no backend option", "new --backend docker", nil, bot.VerbNew,
			[]string{"unknown option '--backend'"}, nil},

		{"title without name", "title", nil, bot.VerbTitle,
			[]string{"title needs a name", "usage: title <name...>"}, nil},
		{"title of only control chars", "title \"\x01\x02\"", nil, bot.VerbTitle,
			[]string{"title needs a name"}, nil},
		{"title too long", "title " + strings.Repeat("x", bot.MaxTitleRunes+1), nil, bot.VerbTitle,
			[]string{"too long (101 characters; at most 100)"}, nil},
		{"new title too long", "new docker " + strings.Repeat("é", bot.MaxTitleRunes+1), nil, bot.VerbNew,
			[]string{"too long"}, nil},

		{"stop with args", "stop the server", nil, bot.VerbStop, []string{"stop takes no arguments", "usage: stop"}, nil},
		{"done with args", "done now", nil, bot.VerbDone, []string{"done takes no arguments"}, nil},
		{"destroy with args", "destroy everything", nil, bot.VerbDestroy, []string{"destroy takes no arguments"}, nil},
		{"status with args", "status x", nil, bot.VerbStatus, []string{"status takes no arguments"}, nil},
		{"list with a word", "list all", nil, bot.VerbList, []string{"list takes only options, not 'all'"}, nil},
		{"backends with args", "backends x", nil, bot.VerbBackends, []string{"backends takes no arguments"}, nil},
		{"export with args", "export json", nil, bot.VerbExport, []string{"export takes no arguments"}, nil},
		{"help unknown topic", "help swtich", nil, bot.VerbHelp,
			[]string{"there is no command 'swtich'; did you mean 'switch'? Try 'help'"}, nil},
		{"help two topics", "help new fork", nil, bot.VerbHelp, []string{"at most one verb"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			backends := tt.backends
			if backends == nil {
				backends = testBackends
			}
			cmd, err := bot.Parse(tt.text, backends)
			var pe *bot.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("Parse(%q) = %+v, %v; want a *ParseError", tt.text, cmd, err)
			}
			if pe.Verb != tt.verb {
				t.Errorf("ParseError.Verb = %q, want %q", pe.Verb, tt.verb)
			}
			if cmd != (bot.Command{}) {
				t.Errorf("Parse returned %+v with its error, want the zero Command", cmd)
			}
			for _, w := range tt.want {
				if !strings.Contains(pe.Message, w) {
					t.Errorf("message %q lacks %q", pe.Message, w)
				}
			}
			for _, w := range tt.dontWant {
				if strings.Contains(pe.Message, w) {
					t.Errorf("message %q has %q", pe.Message, w)
				}
			}
			if err.Error() != pe.Message {
				t.Errorf("Error() = %q, want the message", err.Error())
			}
		})
	}
}

// TestParseErrorMessages pins the whole message of the errors of model,
// policy, list, audit, approve, deny and approvals: what the user reads,
// usage line included.
func TestParseErrorMessages(t *testing.T) {
	usage := func(v bot.Verb) string { return "; usage: " + bot.Usage(v) }
	model, policy, list, audit := usage(bot.VerbModel), usage(bot.VerbPolicy), usage(bot.VerbList), usage(bot.VerbAudit)
	approve, deny, approvals := usage(bot.VerbApprove), usage(bot.VerbDeny), usage(bot.VerbApprovals)
	tests := []struct {
		name string
		text string
		verb bot.Verb
		want string
	}{
		{"model two words", "model gpt 4", bot.VerbModel,
			"a model name is one word, without spaces" + model},
		{"model quoted with a space", `model "gpt 4"`, bot.VerbModel,
			"'gpt 4' is not a model name: use letters, digits and . - _ : / only, starting with a letter or digit" + model},
		{"model bad character", "model gpt*4", bot.VerbModel,
			"'gpt*4' is not a model name: use letters, digits and . - _ : / only, starting with a letter or digit" + model},
		{"model non-ASCII letter", "model gpt-а", bot.VerbModel,
			"'gpt-а' is not a model name: use letters, digits and . - _ : / only, starting with a letter or digit" + model},
		{"model option-like", "model --list", bot.VerbModel,
			"'--list' is not a model name: use letters, digits and . - _ : / only, starting with a letter or digit" + model},
		{"model empty quotes", `model ""`, bot.VerbModel,
			"'' is not a model name: use letters, digits and . - _ : / only, starting with a letter or digit" + model},
		{"model too long", "model " + strings.Repeat("m", bot.MaxModelLen+1), bot.VerbModel,
			"the model name is too long (101 characters; at most 100)"},
		{"model echo clipped", "model " + strings.Repeat("*", 40), bot.VerbModel,
			"'" + strings.Repeat("*", 31) + "…' is not a model name: use letters, digits and . - _ : / only, starting with a letter or digit" + model},

		{"policy unknown action close", "policy sett k v", bot.VerbPolicy,
			"policy takes 'set' or 'reset', not 'sett'; did you mean 'set'?"},
		{"policy unknown action close to reset", "policy rest", bot.VerbPolicy,
			"policy takes 'set' or 'reset', not 'rest'; did you mean 'reset'?"},
		{"policy unknown action far", "policy show", bot.VerbPolicy,
			"policy takes 'set' or 'reset', not 'show'" + policy},
		{"policy set without key", "policy set", bot.VerbPolicy,
			"policy set needs a key and a value" + policy},
		{"policy set without value", "policy set max-sessions", bot.VerbPolicy,
			"policy set needs a value for 'max-sessions' (to go back to the configured value, use policy reset max-sessions)" + policy},
		{"policy set empty value", "policy set models \"\" \"\x01\"", bot.VerbPolicy,
			"policy set needs a value for 'models' (to go back to the configured value, use policy reset models)" + policy},
		{"policy set bad key", "policy set max_sessions 3", bot.VerbPolicy,
			"'max_sessions' is not a policy key: use letters, digits and - only, starting with a letter or digit" + policy},
		{"policy set option-like key", "policy set --force 3", bot.VerbPolicy,
			"'--force' is not a policy key: use letters, digits and - only, starting with a letter or digit" + policy},
		{"policy key too long", "policy reset " + strings.Repeat("k", bot.MaxPolicyKeyLen+1), bot.VerbPolicy,
			"the policy key is too long (65 characters; at most 64)"},
		{"policy value too long", "policy set k " + strings.Repeat("v", bot.MaxPolicyValueRunes+1), bot.VerbPolicy,
			"the policy value is too long (501 characters; at most 500)"},
		{"policy reset two keys", "policy reset models backends", bot.VerbPolicy,
			"policy reset takes at most one key" + policy},
		{"policy reset bad key", "policy reset Max.Sessions", bot.VerbPolicy,
			"'Max.Sessions' is not a policy key: use letters, digits and - only, starting with a letter or digit" + policy},

		{"audit page without number", "audit --page", bot.VerbAudit,
			"--page needs a number" + audit},
		{"audit page zero", "audit --page 0", bot.VerbAudit,
			"--page needs a number of 1 or more, not '0'" + audit},
		{"audit page negative", "audit --page -2", bot.VerbAudit,
			"--page needs a number of 1 or more, not '-2'" + audit},
		{"audit page signed", "audit --page=+2", bot.VerbAudit,
			"--page needs a number of 1 or more, not '+2'" + audit},
		{"audit page not a number", "audit --page two", bot.VerbAudit,
			"--page needs a number of 1 or more, not 'two'" + audit},
		{"audit page empty after equals", "audit --page=", bot.VerbAudit,
			"--page needs a number of 1 or more, not ''" + audit},
		{"audit page overflows", "audit --page 99999999999999999999", bot.VerbAudit,
			"--page needs a number of 1 or more, not '99999999999999999999'" + audit},
		{"audit page twice", "audit --page 1 --page 2", bot.VerbAudit,
			"--page is given twice" + audit},
		{"audit bare number", "audit 2", bot.VerbAudit,
			"audit takes only options, not '2'; did you mean '--page 2'?"},
		{"audit has no scope", "audit --all", bot.VerbAudit,
			"unknown option '--all'" + audit},
		{"audit option typo", "audit --pgae 2", bot.VerbAudit,
			"unknown option '--pgae'; did you mean '--page'?"},
		{"audit word", "audit everything", bot.VerbAudit,
			"audit takes only options, not 'everything'" + audit},

		{"list mine and all", "list --mine --all", bot.VerbList,
			"--mine and --all do not go together: give one of them" + list},
		{"list all and mine", "list --all --page 2 --mine", bot.VerbList,
			"--mine and --all do not go together: give one of them" + list},
		{"list mine twice", "list --mine --mine", bot.VerbList,
			"--mine is given twice" + list},
		{"list scope with value", "list --all=yes", bot.VerbList,
			"--all takes no value" + list},
		{"list word for option", "list mine", bot.VerbList,
			"list takes only options, not 'mine'; did you mean '--mine'?"},
		{"list option typo", "list --al", bot.VerbList,
			"unknown option '--al'; did you mean '--all'?"},
		{"list option typo with value", "list --paeg=2", bot.VerbList,
			"unknown option '--paeg'; did you mean '--page'?"},
		{"list unknown option", "list --everything", bot.VerbList,
			"unknown option '--everything'" + list},
		{"list page zero", "list --mine --page 0", bot.VerbList,
			"--page needs a number of 1 or more, not '0'" + list},
		{"list page twice", "list --page=1 --page=1", bot.VerbList,
			"--page is given twice" + list},
		{"list prose", "list the files please", bot.VerbList,
			"list takes only options, not 'the'" + list},

		{"approve two ids", "approve t1-a t1-b", bot.VerbApprove,
			"approve takes at most one approval ID" + approve},
		{"approve bad character", "approve t1/x", bot.VerbApprove,
			"'t1/x' is not an approval ID: use letters, digits and _ . : - only, starting with a letter or digit" + approve},
		{"approve id starting with punctuation", "approve _t1", bot.VerbApprove,
			"'_t1' is not an approval ID: use letters, digits and _ . : - only, starting with a letter or digit" + approve},
		{"approve non-ASCII id", "approve t1-а", bot.VerbApprove,
			"'t1-а' is not an approval ID: use letters, digits and _ . : - only, starting with a letter or digit" + approve},
		{"approve quoted option", `approve "--all"`, bot.VerbApprove,
			"'--all' is not an approval ID: use letters, digits and _ . : - only, starting with a letter or digit" + approve},
		{"approve empty quotes", `approve ""`, bot.VerbApprove,
			"'' is not an approval ID: use letters, digits and _ . : - only, starting with a letter or digit" + approve},
		{"approve id too long", "approve " + strings.Repeat("i", bot.MaxApprovalIDLen+1), bot.VerbApprove,
			"the approval ID is too long (101 characters; at most 100)"},
		{"approve all twice", "approve --all t1-x --all", bot.VerbApprove,
			"--all is given twice" + approve},
		{"approve all with value", "approve --all=yes", bot.VerbApprove,
			"--all takes no value" + approve},
		{"approve option typo", "approve --al", bot.VerbApprove,
			"unknown option '--al'; did you mean '--all'?"},
		{"approve unknown option", "approve --everything", bot.VerbApprove,
			"unknown option '--everything'" + approve},
		{"deny two ids", "deny t1-a t1-b", bot.VerbDeny,
			"deny takes at most one approval ID" + deny},
		{"deny all", "deny --all", bot.VerbDeny,
			"deny answers one command: it takes no --all" + deny},
		{"deny unknown option", "deny --force", bot.VerbDeny,
			"unknown option '--force'" + deny},
		{"deny words", "deny rm -rf", bot.VerbDeny,
			"deny takes at most one approval ID" + deny},

		{"approvals two modes", "approvals risky always", bot.VerbApprovals,
			"approvals takes one mode: never, risky or always" + approvals},
		{"approvals mode typo", "approvals riksy", bot.VerbApprovals,
			"'riksy' is not an approval mode (never, risky or always); did you mean 'risky'?"},
		{"approvals unknown mode", "approvals sometimes", bot.VerbApprovals,
			"'sometimes' is not an approval mode (never, risky or always)" + approvals},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd, err := bot.Parse(tt.text, testBackends)
			var pe *bot.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("Parse(%q) = %+v, %v; want a *ParseError", tt.text, cmd, err)
			}
			if cmd != (bot.Command{}) {
				t.Errorf("Parse returned %+v with its error, want the zero Command", cmd)
			}
			if pe.Verb != tt.verb {
				t.Errorf("ParseError.Verb = %q, want %q", pe.Verb, tt.verb)
			}
			if pe.Message != tt.want {
				t.Errorf("message\n got %q\nwant %q", pe.Message, tt.want)
			}
		})
	}
}

// TestRootErrorsAsSwitch: a root given to new or fork is refused for
// what switch refuses one for, in the same words; only the usage line
// differs.
func TestRootErrorsAsSwitch(t *testing.T) {
	for _, bad := range []string{"src/app", "\"/a\x01b\"", `""`, "./workspace", "~/proj"} {
		t.Run(bad, func(t *testing.T) {
			problem := func(v bot.Verb, text string) string {
				t.Helper()
				_, err := bot.Parse(text, testBackends)
				var pe *bot.ParseError
				if !errors.As(err, &pe) || pe.Verb != v {
					t.Fatalf("Parse(%q) = %v; want a *ParseError of %s", text, err, v)
				}
				p, ok := strings.CutSuffix(pe.Message, "; usage: "+bot.Usage(v))
				if !ok {
					t.Fatalf("Parse(%q): message %q does not end with the usage of %s", text, pe.Message, v)
				}
				return p
			}
			want := problem(bot.VerbSwitch, "switch local "+bad)
			for _, c := range []struct {
				v    bot.Verb
				text string
			}{
				{bot.VerbNew, "new local --root " + bad + " title"},
				{bot.VerbNew, "new --root " + bad},
				{bot.VerbFork, "fork --root " + bad + " --backend local"},
				{bot.VerbFork, "fork --backend docker --root " + bad},
			} {
				if got := problem(c.v, c.text); got != want {
					t.Errorf("Parse(%q) says %q; switch says %q", c.text, got, want)
				}
			}
		})
	}
}

// TestCommandString pins the canonical form of the new verbs' commands,
// including ones no user typed (Discord builds commands from options).
func TestCommandString(t *testing.T) {
	tests := []struct {
		cmd  bot.Command
		want string
	}{
		{bot.Command{Verb: bot.VerbModel}, "model"},
		{bot.Command{Verb: bot.VerbModel, Model: "gpt-4o"}, "model gpt-4o"},
		{bot.Command{Verb: bot.VerbPolicy}, "policy"},
		{bot.Command{Verb: bot.VerbPolicy, PolicyAction: bot.PolicySet, PolicyKey: "models", PolicyValue: `a "b" c'd`},
			`policy set models a "\"b\"" c'd`},
		{bot.Command{Verb: bot.VerbPolicy, PolicyAction: bot.PolicySet, PolicyKey: "k", PolicyValue: "--x 'y"},
			`policy set k --x "'y"`},
		{bot.Command{Verb: bot.VerbPolicy, PolicyAction: bot.PolicyReset}, "policy reset"},
		{bot.Command{Verb: bot.VerbPolicy, PolicyAction: bot.PolicyReset, PolicyKey: "models"}, "policy reset models"},
		{bot.Command{Verb: bot.VerbAudit}, "audit"},
		{bot.Command{Verb: bot.VerbAudit, Page: 3}, "audit --page 3"},
		{bot.Command{Verb: bot.VerbList}, "list"},
		{bot.Command{Verb: bot.VerbList, Scope: bot.ScopeMine}, "list --mine"},
		{bot.Command{Verb: bot.VerbList, Scope: bot.ScopeAll, Page: 2}, "list --all --page 2"},
		{bot.Command{Verb: bot.VerbNew, Root: "/srv/a b"}, `new --root "/srv/a b"`},
		{bot.Command{Verb: bot.VerbNew, Root: "/x", Title: "docker y"}, "new --root /x docker y"},
		{bot.Command{Verb: bot.VerbNew, Backend: "local", Root: "/x", Title: "--y z"}, `new local --root /x "--y" z`},
		{bot.Command{Verb: bot.VerbNew, Backend: "docker", Title: "--x"}, `new docker "--x"`},
		{bot.Command{Verb: bot.VerbFork, Backend: "local", Root: "/x", Title: "t"}, "fork --backend local --root /x t"},
		{bot.Command{Verb: bot.VerbFork, Root: "/x", Title: "--t"}, `fork --root /x "--t"`},
		{bot.Command{Verb: bot.VerbApprove}, "approve"},
		{bot.Command{Verb: bot.VerbApprove, All: true}, "approve --all"},
		{bot.Command{Verb: bot.VerbApprove, ApprovalID: "t3-call_1", All: true}, "approve t3-call_1 --all"},
		{bot.Command{Verb: bot.VerbDeny, ApprovalID: "t3-call_1"}, "deny t3-call_1"},
		{bot.Command{Verb: bot.VerbApprovals}, "approvals"},
		{bot.Command{Verb: bot.VerbApprovals, Mode: "risky"}, "approvals risky"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.cmd.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
			again, err := bot.Parse(tt.cmd.String(), testBackends)
			if err != nil || again != tt.cmd {
				t.Errorf("Parse(%q) = %+v, %v; want %+v", tt.cmd.String(), again, err, tt.cmd)
			}
		})
	}
}

func TestUsageAndHelp(t *testing.T) {
	help := bot.Help()
	lines := strings.Split(help, "\n")
	if len(lines) != len(bot.Verbs()) {
		t.Fatalf("Help has %d lines, want one per verb (%d):\n%s", len(lines), len(bot.Verbs()), help)
	}
	for i, v := range bot.Verbs() {
		t.Run(string(v), func(t *testing.T) {
			u := bot.Usage(v)
			if !strings.HasPrefix(u, string(v)) || !strings.Contains(u, " - ") {
				t.Errorf("Usage(%s) = %q, want \"%s ... - description\"", v, u, v)
			}
			if lines[i] != u {
				t.Errorf("Help line %d = %q, want %q", i, lines[i], u)
			}
			if !v.Valid() {
				t.Errorf("%s.Valid() = false", v)
			}
		})
	}
	if u := bot.Usage("nope"); u != "" {
		t.Errorf("Usage(unknown) = %q, want empty", u)
	}
	wantOrder := []bot.Verb{bot.VerbNew, bot.VerbSwitch, bot.VerbFork, bot.VerbTitle, bot.VerbModel,
		bot.VerbStop, bot.VerbApprove, bot.VerbDeny, bot.VerbApprovals, bot.VerbDone, bot.VerbDestroy, bot.VerbReset, bot.VerbStatus, bot.VerbList,
		bot.VerbBackends, bot.VerbExport, bot.VerbPolicy, bot.VerbAudit, bot.VerbHelp}
	if got := bot.Verbs(); !slices.Equal(got, wantOrder) {
		t.Errorf("Verbs() = %v, want %v", got, wantOrder)
	}
	for _, want := range []string{"new [backend] [--root /abs/path] [title...]", "switch <backend> [root]",
		"fork [--backend b] [--root /abs/path] [title...]", "title <name...>", "help [verb]", "model [name]",
		"policy [set <key> <value...> | reset [key]]", "audit [--page N]", "list [--mine | --all] [--page N]",
		"approve [id] [--all]", "deny [id]", "approvals [never|risky|always]"} {
		if !strings.Contains(help, want) {
			t.Errorf("Help lacks %q", want)
		}
	}
}

func TestTrigger(t *testing.T) {
	const me = "<@U123>"
	tests := []struct {
		name     string
		text     string
		mention  string
		wantRest string
		wantOK   bool
	}{
		{"bang trigger", "!agent switch docker", me, "switch docker", true},
		{"bang trigger any case, leading space", "  !Agent  status ", me, "status", true},
		{"bang trigger alone", "!agent", me, "", true},
		{"bang trigger with typo still a command", "!agent swich docker", me, "swich docker", true},
		{"bang trigger needs word boundary", "!agents status", me, "", false},
		{"bang trigger without mention configured", "!agent list", "", "list", true},
		{"mention then verb", "<@U123> switch docker", me, "switch docker", true},
		{"mention no space", "<@U123>status", me, "status", true},
		{"mention with colon", "<@U123>: stop", me, "stop", true},
		{"mention verb any case", "<@U123> Status", me, "Status", true},
		{"discord nickname mention", "<@!U123> list", me, "list", true},
		{"slack labelled mention", "<@U123|agentbot> done", me, "done", true},
		{"mention new alone", "<@U123> new", me, "new", true},
		{"mention new on a backend", "<@U123> new docker", me, "new docker", true},
		{"mention new with a quoted title", `<@U123> new docker "fix the flaky test"`, me, `new docker "fix the flaky test"`, true},
		{"mention title quoted", `<@U123> title "Auth rewrite"`, me, `title "Auth rewrite"`, true},
		{"mention fork alone", "<@U123> fork", me, "fork", true},
		{"mention fork with option", "<@U123> fork --backend docker", me, "fork --backend docker", true},
		{"mention fork with option and quoted title", `<@U123> fork --backend local "try local"`, me, `fork --backend local "try local"`, true},
		{"mention switch with root", "<@U123> switch local /srv/x", me, "switch local /srv/x", true},
		{"mention new with a root", "<@U123> new local --root /srv/x", me, "new local --root /srv/x", true},
		{"mention new with a root and a quoted title", `<@U123> new --root=/srv/x "fix it"`, me, `new --root=/srv/x "fix it"`, true},
		{"mention fork with a root", "<@U123> fork --root /srv/x --backend local", me, "fork --root /srv/x --backend local", true},
		{"mention switch typo is a command", "<@U123> switch dokcer", me, "switch dokcer", true},
		{"mention switch alone is a command", "<@U123> switch", me, "switch", true},
		{"mention help verb", "<@U123> help fork", me, "help fork", true},
		{"plain text mention style", "@bot status", "@bot", "status", true},
		{"mention model alone", "<@U123> model", me, "model", true},
		{"mention model name", "<@U123> model gpt-4o", me, "model gpt-4o", true},
		{"mention policy alone", "<@U123> policy", me, "policy", true},
		{"mention policy set", "<@U123> policy set max-sessions 5", me, "policy set max-sessions 5", true},
		{"mention policy reset", "<@U123> policy reset", me, "policy reset", true},
		{"mention list scope", "<@U123> list --mine", me, "list --mine", true},
		{"mention list page", "<@U123> list --all --page 2", me, "list --all --page 2", true},
		{"mention audit page", "<@U123> audit --page 3", me, "audit --page 3", true},
		{"bang list with a typo still a command", "!agent list mine", me, "list mine", true},
		{"mention approve alone", "<@U123> approve", me, "approve", true},
		{"mention approve all", "<@U123> approve --all", me, "approve --all", true},
		{"mention approve id", "<@U123> approve t3-call_1 --all", me, "approve t3-call_1 --all", true},
		{"mention deny alone", "<@U123> deny", me, "deny", true},
		{"mention deny id", "<@U123>: deny t3-call_1", me, "deny t3-call_1", true},
		{"mention approvals", "<@U123> approvals", me, "approvals", true},
		{"mention approvals mode", "<@U123> approvals Always", me, "approvals Always", true},
		{"bang approve a word", "!agent approve it", me, "approve it", true},

		{"mention then chat", "<@U123> please fix the build", me, "", false},
		// Prose that starts with a verb that takes free text goes to the
		// agent: only the bare verb, a backend, options or quoted text
		// make it a command after a mention.
		{"new in prose is chat", "<@U123> new tests for the parser please, then run them", me, "", false},
		{"new with two words is chat", "<@U123> new tests", me, "", false},
		{"new with an option in prose is chat", "<@U123> new tests --root /srv/x", me, "", false},
		{"new with options then prose is chat", "<@U123> new --verbose output please", me, "", false},
		{"title in prose is chat", "<@U123> title case all the headings in README.md", me, "", false},
		{"fork in prose is chat", "<@U123> fork the repo and open a PR", me, "", false},
		{"mention then chat starting with verb", "<@U123> stop the server on port 80", me, "", false},
		{"model in prose is chat", "<@U123> model the data as a graph", me, "", false},
		{"model with a non-name is chat", "<@U123> model this?", me, "", false},
		{"policy in prose is chat", "<@U123> policy documents need a review", me, "", false},
		{"list in prose is chat", "<@U123> list all the files in src", me, "", false},
		{"list with a word is chat", "<@U123> list mine", me, "", false},
		{"audit in prose is chat", "<@U123> audit the dependencies", me, "", false},
		{"approve in prose is chat", "<@U123> approve the PR once CI passes", me, "", false},
		{"approve a word is chat", "<@U123> approve it", me, "", false},
		{"deny a word is chat", "<@U123> deny access", me, "", false},
		{"approve a word and --all is chat", "<@U123> approve everything --all", me, "", false},
		{"approvals in prose is chat", "<@U123> approvals are slow here", me, "", false},
		{"approvals with a non-mode is chat", "<@U123> approvals please", me, "", false},
		{"destroy in a sentence is chat", "<@U123> destroy the old branch", me, "", false},
		{"help in a sentence is chat", "<@U123> help me fix the build", me, "", false},
		{"switch in a sentence is chat", "<@U123> switch to the other approach", me, "", false},
		{"bare mention is chat", "<@U123>", me, "", false},
		{"quoted verb is chat", `<@U123> "stop"`, me, "", false},
		{"other user's mention", "<@U999> status", me, "", false},
		{"mention not at start", "hey <@U123> status", me, "", false},
		{"plain chat", "status", me, "", false},
		{"longer name is not the mention", "@botty status", "@bot", "", false},
		{"no mention configured", "<@U123> status", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rest, ok := bot.Trigger(tt.text, tt.mention)
			if rest != tt.wantRest || ok != tt.wantOK {
				t.Errorf("Trigger(%q, %q) = %q, %v; want %q, %v", tt.text, tt.mention, rest, ok, tt.wantRest, tt.wantOK)
			}
		})
	}
}

// FuzzParse checks that Parse never panics, that whatever it accepts is a
// valid command, that errors are *ParseError, and that String round-trips.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"", "new", "new docker fix it", `new "docker" x`, "switch local /a/../b",
		"switch dokcer", "fork --backend=e2b t", "fork \u2014backend docker", "fork -- --x",
		"title \x00a\tb", `title "a \"b\" \\c"`, "stop", "done", "destroy", "status", "list",
		"backends", "export", "help switch", "swich", "\u201Cnew\u201D", `new "unterminated`,
		"new \xff\xfe", "switch LOCAL '/x y'", "title ' '",
		"model", "model gpt-4o", "model a/b:c_d.e", "model --x", "model \"\"", "policy", "policy set k v w",
		"policy set K '\"v\"'", "policy reset", "policy reset k", "policy sett", "policy set k \x00",
		"audit --page 2", "audit \u2014page=3", "audit 2", "list --mine", "list --all --page 9",
		"list --mine --all", "list --page 0", "list mine",
		"new local --root /a/../b t", "new --root=/x docker", "new -- --root", "new --root rel",
		"fork --root /x --backend local t", "fork --root=/x --root=/y", "fork --root", `new "--root" /x`,
		"approve", "approve t3-call_1", "approve --all t1-x", "approve \u2014all", "approve --all --all", "approve a b",
		"approve t1/x", `approve "--all"`, "deny", "deny t1-x", "deny --all", "approvals", "approvals RISKY",
		"approvals riksy", "approvals never always",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		cmd, err := bot.Parse(text, testBackends)
		if err != nil {
			var pe *bot.ParseError
			if !errors.As(err, &pe) || pe.Message == "" {
				t.Fatalf("Parse(%q) error %v (%T) is not a *ParseError with a message", text, err, err)
			}
			return
		}
		if !cmd.Verb.Valid() {
			t.Fatalf("Parse(%q): verb %q is not known", text, cmd.Verb)
		}
		if cmd.Verb == bot.VerbSwitch && cmd.Backend == "" {
			t.Fatalf("Parse(%q): switch without a backend", text)
		}
		if cmd.Backend != "" && !slices.Contains(testBackends, cmd.Backend) {
			t.Fatalf("Parse(%q): backend %q not in the list", text, cmd.Backend)
		}
		if cmd.Root != "" && (!path.IsAbs(cmd.Root) || path.Clean(cmd.Root) != cmd.Root ||
			(cmd.Verb != bot.VerbSwitch && cmd.Verb != bot.VerbNew && cmd.Verb != bot.VerbFork)) {
			t.Fatalf("Parse(%q): root %q is not absolute and clean, or not for switch, new or fork", text, cmd.Root)
		}
		if strings.ContainsFunc(cmd.Title, unicode.IsControl) || strings.ContainsFunc(cmd.Root, unicode.IsControl) {
			t.Fatalf("Parse(%q): control character in %+v", text, cmd)
		}
		if n := utf8.RuneCountInString(cmd.Title); n > bot.MaxTitleRunes {
			t.Fatalf("Parse(%q): title of %d runes", text, n)
		}
		if cmd.Verb == bot.VerbTitle && cmd.Title == "" {
			t.Fatalf("Parse(%q): title verb with an empty title", text)
		}
		if cmd.Topic != "" && !cmd.Topic.Valid() {
			t.Fatalf("Parse(%q): help topic %q is not a verb", text, cmd.Topic)
		}
		checkNewFields(t, text, cmd)
		again, err := bot.Parse(cmd.String(), testBackends)
		if err != nil || again != cmd {
			t.Fatalf("Parse(%q) = %+v; its String %q parses to %+v, %v", text, cmd, cmd.String(), again, err)
		}
	})
}

// FuzzTrigger checks that whatever Trigger accepts after a mention is
// command-shaped enough to start with a verb, and that it never panics.
func FuzzTrigger(f *testing.F) {
	for _, s := range []string{"<@U1> stop", "!agent", "<@U1|x> help new", "<@!U1>: list", "<@U1", "!agent\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		rest, ok := bot.Trigger(text, "<@U1>")
		if !ok {
			if rest != "" {
				t.Fatalf("Trigger(%q) = %q, false; rest must be empty for chat", text, rest)
			}
			return
		}
		if strings.TrimSpace(rest) != rest {
			t.Fatalf("Trigger(%q) rest %q is not trimmed", text, rest)
		}
	})
}

// checkNewFields checks the fields of model, policy, list, audit, approve,
// deny and approvals against the contract on bot.Command.
func checkNewFields(t *testing.T, text string, cmd bot.Command) {
	t.Helper()
	word := func(w string, extra string, lower bool) bool {
		if w == "" || strings.IndexFunc(w[:1], isAlnum) != 0 {
			return false
		}
		return !strings.ContainsFunc(w, func(r rune) bool {
			return !(isAlnum(r) || strings.ContainsRune(extra, r)) || (lower && 'A' <= r && r <= 'Z')
		})
	}
	if cmd.Model != "" && (cmd.Verb != bot.VerbModel || len(cmd.Model) > bot.MaxModelLen || !word(cmd.Model, ".-_:/", false)) {
		t.Fatalf("Parse(%q): bad model %q in %+v", text, cmd.Model, cmd)
	}
	switch cmd.PolicyAction {
	case "":
		if cmd.PolicyKey != "" || cmd.PolicyValue != "" {
			t.Fatalf("Parse(%q): policy key or value without an action: %+v", text, cmd)
		}
	case bot.PolicySet, bot.PolicyReset:
		if cmd.Verb != bot.VerbPolicy {
			t.Fatalf("Parse(%q): policy action on %s", text, cmd.Verb)
		}
		set := cmd.PolicyAction == bot.PolicySet
		if (set && cmd.PolicyKey == "") || (cmd.PolicyKey != "" && (len(cmd.PolicyKey) > bot.MaxPolicyKeyLen || !word(cmd.PolicyKey, "-", true))) {
			t.Fatalf("Parse(%q): bad policy key %q", text, cmd.PolicyKey)
		}
		if set != (cmd.PolicyValue != "") {
			t.Fatalf("Parse(%q): policy value %q with action %q", text, cmd.PolicyValue, cmd.PolicyAction)
		}
	default:
		t.Fatalf("Parse(%q): unknown policy action %q", text, cmd.PolicyAction)
	}
	if strings.ContainsFunc(cmd.PolicyValue, unicode.IsControl) || strings.Contains(cmd.PolicyValue, "  ") ||
		strings.TrimSpace(cmd.PolicyValue) != cmd.PolicyValue || utf8.RuneCountInString(cmd.PolicyValue) > bot.MaxPolicyValueRunes {
		t.Fatalf("Parse(%q): policy value %q is not sanitised", text, cmd.PolicyValue)
	}
	if cmd.Scope != "" && (cmd.Verb != bot.VerbList || (cmd.Scope != bot.ScopeMine && cmd.Scope != bot.ScopeAll)) {
		t.Fatalf("Parse(%q): scope %q on %s", text, cmd.Scope, cmd.Verb)
	}
	if cmd.Page < 0 || (cmd.Page != 0 && cmd.Verb != bot.VerbList && cmd.Verb != bot.VerbAudit) {
		t.Fatalf("Parse(%q): page %d on %s", text, cmd.Page, cmd.Verb)
	}
	if cmd.ApprovalID != "" && ((cmd.Verb != bot.VerbApprove && cmd.Verb != bot.VerbDeny) ||
		len(cmd.ApprovalID) > bot.MaxApprovalIDLen || !word(cmd.ApprovalID, "_.:-", false)) {
		t.Fatalf("Parse(%q): bad approval ID %q in %+v", text, cmd.ApprovalID, cmd)
	}
	if cmd.All && cmd.Verb != bot.VerbApprove {
		t.Fatalf("Parse(%q): --all on %s", text, cmd.Verb)
	}
	if cmd.Mode != "" && (cmd.Verb != bot.VerbApprovals || !slices.Contains([]string{"never", "risky", "always"}, cmd.Mode)) {
		t.Fatalf("Parse(%q): mode %q on %s", text, cmd.Mode, cmd.Verb)
	}
}

func isAlnum(r rune) bool {
	return ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9')
}

// TestValidApprovalID: the IDs buttons may carry are exactly those Parse
// reads back as the approval ID.
func TestValidApprovalID(t *testing.T) {
	for _, id := range []string{"t3-call_1", "a", "9.x:y-z", strings.Repeat("i", bot.MaxApprovalIDLen),
		"--all", "-x", "_x", "t3 call", "t3\ncall", "é", strings.Repeat("i", bot.MaxApprovalIDLen+1), `"q"`} {
		cmd, err := bot.Parse("approve "+id, nil)
		parsed := err == nil && cmd.ApprovalID == id
		if got := bot.ValidApprovalID(id); got != parsed {
			t.Errorf("ValidApprovalID(%q) = %v, but Parse reads it back: %v (%+v, %v)", id, got, parsed, cmd, err)
		}
	}
	if bot.ValidApprovalID("") {
		t.Error(`ValidApprovalID("") is true: a button must name its approval`)
	}
}
