package risk

import (
	"path"
	"slices"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// optSpec describes a command's options, enough to tell option values
// from operands.
type optSpec struct {
	short string   // short options that take a value ("-t DIR", "-tDIR")
	long  []string // long options that take a value ("--name V", "--name=V")
	posix bool     // options end at the first operand (wrappers: what follows is a command)
}

// option is one parsed option: "-x" or "--name", with its value if it
// takes one.
type option struct {
	name string
	val  *field
}

type parsedArgs struct {
	opts     []option
	operands []*field
}

// parseArgs splits args (without the command name) into options and
// operands the way getopt_long does. Words only known at run time are
// operands: the conservative reading for paths.
func parseArgs(args []*field, spec optSpec) parsedArgs {
	var p parsedArgs
	for i := 0; i < len(args); i++ {
		a := args[i]
		v := a.val
		if a.dyn || len(v) < 2 || v[0] != '-' {
			if spec.posix {
				// No operand came before: share the rest, which keeps
				// long wrapper chains (sudo sudo sudo ...) linear.
				p.operands = args[i:len(args):len(args)]
				break
			}
			p.operands = append(p.operands, a)
			continue
		}
		if v == "--" {
			p.operands = append(p.operands, args[i+1:]...)
			break
		}
		if strings.HasPrefix(v, "--") {
			name, _, hasVal := strings.Cut(v[2:], "=")
			o := option{name: "--" + name}
			switch {
			case hasVal:
				o.val = a.sub(len(name) + 3)
			case slices.Contains(spec.long, name) && i+1 < len(args):
				i++
				o.val = args[i]
			}
			p.opts = append(p.opts, o)
			continue
		}
		for j := 1; j < len(v); j++ {
			o := option{name: "-" + v[j:j+1]}
			if strings.IndexByte(spec.short, v[j]) >= 0 {
				if j+1 < len(v) {
					o.val = a.sub(j + 1)
				} else if i+1 < len(args) {
					i++
					o.val = args[i]
				}
				p.opts = append(p.opts, o)
				break
			}
			p.opts = append(p.opts, o)
		}
	}
	return p
}

// has reports whether any of the named options was given.
func (p parsedArgs) has(names ...string) bool {
	return slices.ContainsFunc(p.opts, func(o option) bool { return slices.Contains(names, o.name) })
}

// values returns the values of the named options, in order.
func (p parsedArgs) values(names ...string) []*field {
	var out []*field
	for _, o := range p.opts {
		if o.val != nil && slices.Contains(names, o.name) {
			out = append(out, o.val)
		}
	}
	return out
}

// cmdBase is the command name without its directory: /usr/bin/sudo runs
// sudo.
func cmdBase(name string) string {
	if !strings.Contains(name, "/") {
		return name
	}
	return path.Base(name)
}

// unwrapped is the command a wrapper (sudo, env, timeout, xargs ...) runs.
type unwrapped struct {
	args []*field // the wrapped command and its arguments; empty when none
	dir  *field   // the wrapped command runs in this directory (env -C, sudo -D)
	tail bool     // more arguments are added at run time (xargs)
	code *field   // a script string runs instead of a command (su -c, watch)
	user bool     // the wrapped command runs as another user
}

// unwrap reports whether base is a wrapper and what it runs.
func unwrap(base string, args []*field) (unwrapped, bool) {
	var u unwrapped
	rest := args[1:]
	switch base {
	case "sudo":
		p := parseArgs(rest, optSpec{
			short: "CDghpRrtTUu",
			long:  []string{"close-from", "chdir", "group", "host", "prompt", "chroot", "role", "type", "command-timeout", "other-user", "user"},
			posix: true,
		})
		u.user = true
		u.args = skipAssignments(p.operands)
		if p.has("-e", "--edit") {
			u.args = append([]*field{lit("sudoedit")}, u.args...)
		}
		if d := p.values("-D", "--chdir"); len(d) > 0 {
			u.dir = d[len(d)-1]
		}
	case "doas":
		u.user = true
		u.args = parseArgs(rest, optSpec{short: "uCa", posix: true}).operands
	case "pkexec":
		u.user = true
		u.args = parseArgs(rest, optSpec{long: []string{"user"}, posix: true}).operands
	case "run0":
		p := parseArgs(rest, optSpec{
			short: "ugD",
			long:  []string{"user", "group", "chdir", "setenv", "property", "description", "slice", "nice", "unit", "machine", "background"},
			posix: true,
		})
		u.user = true
		u.args = p.operands
		if d := p.values("-D", "--chdir"); len(d) > 0 {
			u.dir = d[len(d)-1]
		}
	case "su":
		p := parseArgs(rest, optSpec{
			short: "cgGsw",
			long:  []string{"command", "session-command", "group", "supp-group", "shell", "whitelist-environment"},
		})
		u.user = true
		if c := p.values("-c", "--command", "--session-command"); len(c) > 0 {
			u.code = c[len(c)-1]
		}
	case "env":
		p := parseArgs(rest, optSpec{short: "uCS", long: []string{"unset", "chdir", "split-string"}, posix: true})
		u.args = skipAssignments(p.operands)
		if d := p.values("-C", "--chdir"); len(d) > 0 {
			u.dir = d[len(d)-1]
		}
		if s := p.values("-S", "--split-string"); len(s) > 0 {
			u.code = joinCode(append([]*field{s[len(s)-1]}, u.args...))
			u.args = nil
		}
	case "command":
		p := parseArgs(rest, optSpec{posix: true})
		if !p.has("-v", "-V") {
			u.args = p.operands
		}
	case "builtin", "nohup":
		u.args = parseArgs(rest, optSpec{posix: true}).operands
	case "exec":
		u.args = parseArgs(rest, optSpec{short: "a", posix: true}).operands
	case "time":
		u.args = parseArgs(rest, optSpec{short: "fo", long: []string{"format", "output"}, posix: true}).operands
	case "timeout":
		ops := parseArgs(rest, optSpec{short: "sk", long: []string{"signal", "kill-after"}, posix: true}).operands
		if len(ops) > 0 {
			u.args = ops[1:] // after the duration
		}
	case "nice":
		u.args = parseArgs(rest, optSpec{short: "n", long: []string{"adjustment"}, posix: true}).operands
	case "ionice":
		p := parseArgs(rest, optSpec{short: "cnpPu", long: []string{"class", "classdata", "pid", "pgid", "uid"}, posix: true})
		if !p.has("-p", "-P", "-u", "--pid", "--pgid", "--uid") {
			u.args = p.operands
		}
	case "stdbuf":
		u.args = parseArgs(rest, optSpec{short: "ioe", long: []string{"input", "output", "error"}, posix: true}).operands
	case "setsid":
		u.args = parseArgs(rest, optSpec{posix: true}).operands
	case "chroot":
		ops := parseArgs(rest, optSpec{long: []string{"userspec", "groups"}, posix: true}).operands
		if len(ops) > 0 {
			u.args = ops[1:] // after the new root
		}
	case "busybox":
		if len(rest) > 0 && !strings.HasPrefix(rest[0].val, "-") {
			u.args = rest
		}
	case "xargs":
		p := parseArgs(rest, optSpec{
			short: "adEILnPs",
			long:  []string{"arg-file", "delimiter", "max-args", "max-procs", "max-chars", "process-slot-var"},
			posix: true,
		})
		u.args = p.operands
		if len(u.args) == 0 {
			u.args = []*field{lit("echo")}
		}
		replace := ""
		for _, o := range p.opts {
			switch {
			case o.name == "-I" && o.val != nil:
				replace = o.val.val
			case o.name == "-i" || o.name == "--replace":
				replace = "{}"
				if o.val != nil {
					replace = o.val.val
				}
			}
		}
		if replace == "" {
			u.tail = true
			break
		}
		// With -I the input replaces the placeholder inside arguments.
		u.args = slices.Clone(u.args)
		for i, a := range u.args {
			if strings.Contains(a.val, replace) {
				u.args[i] = dynField(a.display())
			}
		}
	case "watch":
		p := parseArgs(rest, optSpec{short: "n", long: []string{"interval"}, posix: true})
		if p.has("-x", "--exec") {
			u.args = p.operands
		} else if len(p.operands) > 0 {
			// watch hands its arguments, joined, to sh -c.
			u.code = joinCode(p.operands)
		}
	default:
		return u, false
	}
	return u, true
}

// skipAssignments drops the NAME=value words env and sudo accept before
// the command.
func skipAssignments(args []*field) []*field {
	for len(args) > 0 {
		// The value may be dynamic ("PATH=$PATH"); the name may not.
		name, _, ok := strings.Cut(args[0].val, "=")
		if !ok || !syntax.ValidName(name) {
			break
		}
		args = args[1:]
	}
	return args
}

// joinCode joins words into one script string, as watch and env -S do.
func joinCode(args []*field) *field {
	f := &field{}
	var vals, srcs []string
	for _, a := range args {
		vals = append(vals, a.val)
		srcs = append(srcs, a.source())
		if a.dyn {
			f.dyn = true
			if f.word == nil {
				f.word = a.word
			}
		}
	}
	f.val, f.src = strings.Join(vals, " "), strings.Join(srcs, " ")
	for _, a := range args {
		a.code = true
	}
	return f
}

// invoke classifies a command and, for wrappers, the command it runs.
// tail says more arguments are added at run time (xargs).
func (w *walker) invoke(args []*field, sc *scope, text string, tail bool) {
	for len(args) > 0 && !w.tired() {
		name := args[0]
		if name.dyn {
			if tool := findDownloader(name.word); tool != "" {
				w.report(PipeToShell, "runs what "+tool+" downloads as a command", text)
			} else {
				w.report(DynamicCommand, "the command name "+name.source()+" is only known at run time", text)
			}
			return
		}
		base := cmdBase(name.val)
		for _, p := range w.c.patterns {
			if p.matches(name.val, args[1:]) {
				w.report(p.Name, p.Description, text)
			}
		}
		if strings.Contains(name.val, "/") {
			if d, ok := w.downloaded(name, sc); ok {
				w.report(PipeToShell, "runs "+name.val+", which "+d.tool+" downloaded", text)
			}
		}
		u, ok := unwrap(base, args)
		if !ok {
			w.leaf(base, args, sc, text, tail)
			return
		}
		if u.user {
			w.report(Sudo, "runs as another user via "+base, text)
		}
		if u.code != nil {
			w.shellCode(base, u.code, sc.fork(), text)
			return
		}
		if u.dir != nil {
			sub := sc.fork()
			sub.cwd = w.resolveDir(u.dir, sc)
			sc = sub
		}
		args, tail = u.args, tail || u.tail
	}
}

// downloaderOf returns the downloader a command runs, looking through
// wrappers, or "".
func downloaderOf(args []*field) string {
	for len(args) > 0 && !args[0].dyn {
		base := cmdBase(args[0].val)
		if isDownloader(base) {
			return base
		}
		u, ok := unwrap(base, args)
		if !ok {
			return ""
		}
		args = u.args
	}
	return ""
}

// findDownloader returns a downloader run anywhere inside node (in a
// pipeline stage, a command substitution ...), or "".
func findDownloader(node syntax.Node) string {
	if node == nil {
		return ""
	}
	if wd, ok := node.(*syntax.Word); ok && wd == nil {
		return ""
	}
	tool := ""
	syntax.Walk(node, func(n syntax.Node) bool {
		if tool != "" {
			return false
		}
		if ce, ok := n.(*syntax.CallExpr); ok {
			var args []*field
			for _, wd := range ce.Args {
				args = append(args, fields(wd)...)
			}
			tool = downloaderOf(args)
		}
		return tool == ""
	})
	return tool
}

// leaf classifies a command that is not a wrapper.
func (w *walker) leaf(base string, args []*field, sc *scope, text string, tail bool) {
	if tail {
		args = append(slices.Clone(args), dynField("(arguments read by xargs)"))
	}
	rest := args[1:]
	switch base {
	case "cd", "pushd", "popd":
		w.cd(base, rest, sc)
	case "rm":
		w.rm(rest, sc, text)
	case "find":
		w.find(rest, sc, text)
	case "git", "hub":
		w.git(rest, sc, text)
	case "git-push", "git-send-pack":
		w.report(GitPush, base+" pushes to a remote", text)
	case "sudoedit":
		w.report(Sudo, "edits files as another user via sudoedit", text)
		for _, f := range parseArgs(rest, optSpec{short: "CDghpRrtTUu"}).operands {
			w.write("sudoedit", f, sc, text)
		}
	case "eval":
		w.eval(rest, sc, text)
	case "source", ".":
		if len(rest) > 0 {
			w.scriptFile(base, rest[0], sc, text)
		}
	case "alias":
		for _, a := range rest {
			if _, v, ok := strings.Cut(a.val, "="); ok && !a.dyn {
				a.code = true
				w.script(v, sc.fork(), text)
			}
		}
	case "trap":
		ops := parseArgs(rest, optSpec{posix: true}).operands
		if len(ops) >= 2 && ops[0].val != "-" {
			w.shellCode(base, ops[0], sc.fork(), text)
		}
	default:
		if isDownloader(base) {
			w.downloader(base, rest, sc, text)
		}
		w.fileWrites(base, rest, sc, text)
	}
	w.interpreter(base, args, sc, text)
	w.packages(base, rest, sc, text)
	w.network(base, rest, text)
}

// shellCode runs a script string through a shell: literal strings are
// parsed and walked; strings only known at run time are downloads or
// dynamic commands.
func (w *walker) shellCode(via string, f *field, sc *scope, text string) {
	f.code = true
	if !f.dyn {
		w.script(f.val, sc, text)
		return
	}
	if tool := findDownloader(f.word); tool != "" {
		w.report(PipeToShell, via+" runs a script "+tool+" downloads", text)
		return
	}
	w.report(DynamicCommand, via+" runs a script only known at run time: "+f.source(), text)
}

func (w *walker) eval(args []*field, sc *scope, text string) {
	if len(args) == 0 {
		return
	}
	code := joinCode(args)
	if code.dyn {
		for _, a := range args {
			if tool := findDownloader(a.word); a.dyn && tool != "" {
				code.word = a.word
				break
			}
		}
	}
	// eval runs in the current shell: a cd inside it stays.
	w.shellCode("eval", code, sc, text)
}

// resolveDir is the working directory after changing into f from sc.
func (w *walker) resolveDir(f *field, sc *scope) string {
	t := w.locate(f, sc.cwd)
	switch t.place {
	case placeUnknown:
		return ""
	case placeHome:
		return homeCwd
	}
	if t.all || f.glob {
		return ""
	}
	return t.path
}

// cd follows literal changes of directory, so later relative paths
// resolve where the shell will be.
func (w *walker) cd(base string, args []*field, sc *scope) {
	ops := parseArgs(args, optSpec{}).operands
	switch base {
	case "popd":
		if n := len(sc.stack); n > 0 {
			sc.cwd, sc.stack = sc.stack[n-1], sc.stack[:n-1]
		} else {
			sc.cwd = ""
		}
		return
	case "pushd":
		sc.stack = append(sc.stack, sc.cwd)
	}
	switch {
	case len(ops) == 0 && base == "cd":
		sc.cwd = homeCwd
	case len(ops) == 0 || ops[0].val == "-" || strings.HasPrefix(ops[0].val, "+"):
		sc.cwd = ""
	default:
		sc.cwd = w.resolveDir(ops[0], sc)
	}
}
