package risk

import (
	"strings"
)

// git finds the subcommand after git's global options and reports push.
func (w *walker) git(args []*field, sc *scope, text string) {
	var aliases []string // "name=value" from -c alias.name=value
	i := 0
	for i < len(args) && !args[i].dyn && strings.HasPrefix(args[i].val, "-") {
		switch v := args[i].val; v {
		case "-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env", "--super-prefix":
			if v == "-c" && i+1 < len(args) {
				if k, val, ok := strings.Cut(args[i+1].val, "="); ok && strings.HasPrefix(strings.ToLower(k), "alias.") {
					aliases = append(aliases, strings.ToLower(k[len("alias."):])+"="+val)
				}
			}
			i += 2
		default:
			i++
		}
	}
	if i >= len(args) {
		return
	}
	sub := args[i]
	rest := args[i+1:]
	if sub.dyn {
		w.report(GitPush, "the git subcommand "+sub.source()+" is only known at run time and may be push", text)
		return
	}
	name := sub.val
	for _, a := range aliases {
		alias, val, _ := strings.Cut(a, "=")
		if alias != strings.ToLower(name) {
			continue
		}
		if strings.HasPrefix(val, "!") {
			// A shell alias: git runs it with sh -c.
			w.script(val[1:], sc.fork(), text)
			return
		}
		words := strings.Fields(val)
		if len(words) == 0 {
			return
		}
		name = words[0]
		break
	}
	switch name {
	case "push":
		p := parseArgs(rest, optSpec{short: "o", long: []string{"repo", "receive-pack", "exec", "push-option", "signed", "force-with-lease"}})
		if p.has("-n", "--dry-run") {
			return
		}
		w.report(GitPush, "git push pushes to a remote", text)
	case "send-pack":
		w.report(GitPush, "git send-pack pushes to a remote", text)
	case "subtree":
		if len(rest) > 0 && rest[0].val == "push" {
			w.report(GitPush, "git subtree push pushes to a remote", text)
		}
	case "clone":
		ops := parseArgs(rest, optSpec{
			short: "obcju",
			long:  []string{"origin", "branch", "config", "jobs", "upload-pack", "template", "reference", "depth", "shallow-since", "shallow-exclude", "separate-git-dir", "filter", "server-option", "bundle-uri"},
		}).operands
		if len(ops) == 2 {
			w.write("git clone", ops[1], sc, text)
		}
	}
}

// interpSpec says how an interpreter other than a shell takes its
// program: from an option value, a module, a file, or standard input.
type interpSpec struct {
	code     string   // short options whose value is program text
	codeLong []string // long options whose value is program text
	values   string   // other short options that take a value
	long     []string // other long options that take a value
	module   byte     // python's -m: run a module, the rest are its arguments
}

var interpreters = []struct {
	name string
	spec interpSpec
}{
	{"python", interpSpec{code: "c", values: "WX", long: []string{"check-hash-based-pycs"}, module: 'm'}},
	{"perl", interpSpec{code: "eE", values: "MmIixlDdC0"}},
	{"ruby", interpSpec{code: "e", values: "rICEFTWxKl0"}},
	{"node", interpSpec{code: "ep", codeLong: []string{"eval", "print"}, values: "rC", long: []string{"require", "input-type", "loader", "import", "conditions"}}},
	{"php", interpSpec{code: "rBRE", values: "fdcz"}},
	{"lua", interpSpec{code: "e", values: "l"}},
}

// shells are the interpreters whose script strings are Bash enough to be
// parsed and walked.
var shells = []string{"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "yash", "rbash", "fish"}

// interpreterSpec finds the interpreter of a versioned name (python3.12,
// perl5.36, nodejs).
func interpreterSpec(base string) (interpSpec, bool) {
	if base == "nodejs" {
		base = "node"
	}
	for _, in := range interpreters {
		if rest, ok := strings.CutPrefix(base, in.name); ok && strings.Trim(rest, "0123456789.") == "" {
			return in.spec, true
		}
	}
	return interpSpec{}, false
}

// program is where an interpreter's program comes from.
type program struct {
	code   []*field // program text given as arguments
	file   *field   // a script file
	stdin  bool     // read from standard input
	module []*field // python -m module and its arguments
}

func shellProgram(args []*field) program {
	var pr program
	hasC, hasS := false, false
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		v := a.val
		if a.dyn || len(v) < 2 || (v[0] != '-' && v[0] != '+') {
			break
		}
		if v == "--" || v == "-" {
			i++
			break
		}
		if strings.HasPrefix(v, "--") {
			if v == "--rcfile" || v == "--init-file" {
				i++
			}
			continue
		}
		for _, c := range v[1:] {
			switch c {
			case 'c':
				hasC = true
			case 's':
				hasS = true
			case 'o', 'O':
				i++
			}
		}
	}
	switch {
	case hasC && i < len(args):
		pr.code = args[i : i+1]
	case hasC:
	case hasS || i >= len(args):
		pr.stdin = true
	default:
		pr.file = args[i]
	}
	return pr
}

func otherProgram(spec interpSpec, args []*field) program {
	var pr program
	for i := 0; i < len(args); i++ {
		a := args[i]
		v := a.val
		if a.dyn || len(v) < 2 || v[0] != '-' {
			if v == "-" {
				pr.stdin = len(pr.code) == 0
				return pr
			}
			if len(pr.code) == 0 {
				pr.file = a
			}
			return pr
		}
		if v == "--" {
			if len(pr.code) == 0 && i+1 < len(args) {
				pr.file = args[i+1]
			}
			return pr
		}
		if strings.HasPrefix(v, "--") {
			name, _, hasVal := strings.Cut(v[2:], "=")
			isCode := contains(spec.codeLong, name)
			takes := isCode || contains(spec.long, name)
			var val *field
			if hasVal {
				val = a.sub(len(name) + 3)
			} else if takes && i+1 < len(args) {
				i++
				val = args[i]
			}
			if isCode && val != nil {
				pr.code = append(pr.code, val)
			}
			continue
		}
		for j := 1; j < len(v); j++ {
			c := v[j]
			isCode := strings.IndexByte(spec.code, c) >= 0
			if !isCode && c != spec.module && strings.IndexByte(spec.values, c) < 0 {
				continue
			}
			var val *field
			if j+1 < len(v) {
				val = a.sub(j + 1)
			} else if i+1 < len(args) {
				i++
				val = args[i]
			}
			switch {
			case val == nil:
			case isCode:
				pr.code = append(pr.code, val)
				if spec.module != 0 { // python: -c ends the options
					return pr
				}
			case c == spec.module:
				pr.module = append([]*field{val}, args[i+1:]...)
				return pr
			}
			break
		}
	}
	pr.stdin = len(pr.code) == 0
	return pr
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// interpreter checks where an interpreter's program comes from: a
// download, a string only known at run time, a downloaded file. Shell
// script strings are parsed and walked like the script itself.
func (w *walker) interpreter(base string, args []*field, sc *scope, text string) {
	shell := contains(shells, base)
	var pr program
	if spec, ok := interpreterSpec(base); ok {
		pr = otherProgram(spec, args[1:])
	} else if shell {
		pr = shellProgram(args[1:])
	} else {
		return
	}
	switch {
	case len(pr.module) > 0:
		// python -m pip install ...: the module runs as its command.
		if mod := pr.module[0]; !mod.dyn && (mod.val == "pip" || mod.val == "pip3") {
			w.packages("pip", pr.module[1:], sc, text)
		}
	case len(pr.code) > 0:
		for _, c := range pr.code {
			if shell {
				w.shellCode(base, c, sc.fork(), text)
				continue
			}
			// Other languages are not analysed (their text is still
			// scanned for credential paths); only a program that comes
			// from a download is reported.
			if tool := findDownloader(c.word); c.dyn && tool != "" {
				w.report(PipeToShell, base+" runs a program "+tool+" downloads", text)
			}
		}
	case pr.file != nil:
		w.scriptFile(base, pr.file, sc, text)
	case pr.stdin:
		w.stdinProgram(base, shell, sc, text)
	}
}

// scriptFile checks a script an interpreter (or source) reads from a file.
func (w *walker) scriptFile(via string, f *field, sc *scope, text string) {
	if f.dyn {
		if tool := findDownloader(f.word); tool != "" {
			w.report(PipeToShell, via+" runs a script "+tool+" downloads", text)
		}
		return
	}
	if f.val == "/dev/stdin" || f.val == "-" {
		w.stdinProgram(via, contains(shells, via) || via == "source" || via == ".", sc, text)
		return
	}
	if d, ok := w.downloaded(f, sc); ok {
		w.report(PipeToShell, via+" runs "+f.val+", which "+d.tool+" downloaded", text)
	}
}

// stdinProgram checks a program read from standard input: a pipe or
// redirection from a download, or a here-document.
func (w *walker) stdinProgram(via string, shell bool, sc *scope, text string) {
	if sc.stdin != "" {
		if sc.pipe != "" {
			text = sc.pipe
		}
		w.report(PipeToShell, "the output of "+sc.stdin+" is run by "+via, text)
		return
	}
	if sc.here == nil || !shell {
		return
	}
	w.shellCode(via, sc.here, sc.fork(), text)
}
