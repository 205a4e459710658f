package risk

import (
	"slices"

	"mvdan.cc/sh/v3/syntax"
)

// walker visits every command of a script in the order the shell would
// start them and collects findings. One walker classifies one script.
type walker struct {
	c         *Classifier
	out       []Finding
	seen      map[Finding]bool // only looked up, never ranged over
	downloads []download       // files written by downloaders so far
	depth     int              // nesting of scripts inside scripts
	steps     int              // statements and commands visited, bounded by maxSteps
}

// maxSteps bounds the work for one script. Wrappers, find -exec and
// nested scripts multiply: find a b -exec find a b -exec ... grows
// exponentially. Past the bound the script is reported as Unparsable, so
// hostile input can neither hang the classifier nor pass as safe.
const maxSteps = 20000

// tired counts one step and reports whether the walk must stop.
func (w *walker) tired() bool {
	w.steps++
	if w.steps == maxSteps+1 {
		w.report(Unparsable, "the script is too complex to classify", "")
	}
	return w.steps > maxSteps
}

// download is a file a downloader wrote, so running it later is running
// downloaded code.
type download struct {
	path string // cleaned absolute path, or "~/..." in a home directory
	tool string
}

// scope is what a command inherits from where it appears.
type scope struct {
	cwd   string   // absolute working directory; homeCwd; "" when unknown
	stack []string // pushd's directory stack
	// stdin names the downloader whose output reaches the command's
	// standard input (through a pipe or a redirection); "" when none.
	stdin string
	// here is the here-document or here-string on the standard input.
	here *field
	// pipe is the pipeline the command is a stage of, as printed.
	pipe string
}

// fork copies the scope for a child shell: changes of directory inside
// do not leak out.
func (s *scope) fork() *scope {
	c := *s
	c.stack = slices.Clone(s.stack)
	return &c
}

func (w *walker) report(rule, reason, text string) {
	if slices.Contains(w.c.disabled, rule) {
		return
	}
	f := Finding{Rule: rule, Reason: shorten(reason), Command: text}
	if w.seen[f] {
		return
	}
	w.seen[f] = true
	w.out = append(w.out, f)
}

func (w *walker) stmts(list []*syntax.Stmt, sc *scope) {
	for _, s := range list {
		w.stmt(s, sc)
	}
}

func (w *walker) stmt(s *syntax.Stmt, sc *scope) {
	if s == nil || w.tired() {
		return
	}
	text := printNode(s)
	// Redirections take effect before the command runs: substitutions in
	// them run first, and standard input may come from a download.
	oldStdin, oldHere := sc.stdin, sc.here
	// A downloader's output goes to its redirections: >(...) reads it,
	// a file receives it.
	tool := ""
	if ce, ok := s.Cmd.(*syntax.CallExpr); ok {
		var args []*field
		for _, wd := range ce.Args {
			args = append(args, fields(wd)...)
		}
		tool = downloaderOf(args)
	}
	out := sc.stdin
	if tool != "" {
		out = tool
	}
	for _, r := range s.Redirs {
		w.substs(r.Word, sc, out)
		w.substs(r.Hdoc, sc, "")
		switch r.Op {
		case syntax.RdrIn, syntax.RdrInOut:
			if tool := w.downloadedBy(r.Word, sc); tool != "" {
				sc.stdin = tool
			}
			sc.here = nil
		case syntax.Hdoc, syntax.DashHdoc:
			sc.here = heredoc(r)
			if tool := findDownloader(r.Hdoc); tool != "" {
				sc.stdin = tool
			}
		case syntax.WordHdoc:
			if fs := fields(r.Word); len(fs) == 1 {
				sc.here = fs[0]
			} else {
				sc.here = dynField(printNode(r.Word))
			}
			if tool := findDownloader(r.Word); tool != "" {
				sc.stdin = tool
			}
		}
	}
	if s.Background {
		// cmd & runs in a child shell: a cd there does not stay.
		bg := sc.fork()
		w.command(s.Cmd, s, bg, text)
	} else {
		w.command(s.Cmd, s, sc, text)
	}
	sc.stdin, sc.here = oldStdin, oldHere
	for _, r := range s.Redirs {
		w.redirect(r, sc, text)
		if tool != "" && isFileWrite(r) && (r.N == nil || r.N.Value == "1") {
			for _, f := range fields(r.Word) {
				if t := w.locate(f, sc.cwd); t.place != placeUnknown && !t.all {
					w.downloads = append(w.downloads, download{path: t.path, tool: tool})
				}
			}
		}
	}
}

// isFileWrite reports a redirection that writes standard output (or
// another descriptor) to a file.
func isFileWrite(r *syntax.Redirect) bool {
	switch r.Op {
	case syntax.RdrOut, syntax.AppOut, syntax.RdrClob, syntax.AppClob,
		syntax.RdrAll, syntax.RdrAllClob, syntax.AppAll, syntax.AppAllClob:
		return r.Word != nil
	}
	return false
}

func (w *walker) command(cmd syntax.Command, s *syntax.Stmt, sc *scope, text string) {
	switch c := cmd.(type) {
	case nil:
	case *syntax.CallExpr:
		w.call(c, sc, text)
	case *syntax.BinaryCmd:
		if c.Op == syntax.Pipe || c.Op == syntax.PipeAll {
			w.pipeline(c, s, sc)
			return
		}
		w.stmt(c.X, sc)
		w.stmt(c.Y, sc)
	case *syntax.Subshell:
		w.stmts(c.Stmts, sc.fork())
	case *syntax.Block:
		w.stmts(c.Stmts, sc)
	case *syntax.IfClause:
		for ic := c; ic != nil; ic = ic.Else {
			w.stmts(ic.Cond, sc)
			w.stmts(ic.Then, sc)
		}
	case *syntax.WhileClause:
		w.stmts(c.Cond, sc)
		w.stmts(c.Do, sc)
	case *syntax.ForClause:
		w.substs(c.Loop, sc, "")
		if wi, ok := c.Loop.(*syntax.WordIter); ok {
			w.credentialWords(wi.Items, text)
		}
		w.stmts(c.Do, sc)
	case *syntax.CaseClause:
		w.substs(c.Word, sc, "")
		for _, item := range c.Items {
			for _, p := range item.Patterns {
				w.substs(p, sc, "")
			}
			w.stmts(item.Stmts, sc)
		}
	case *syntax.FuncDecl:
		// The body runs when the function is called, in the calling
		// shell; walking it here, in place, is the conservative reading.
		w.stmt(c.Body, sc)
	case *syntax.TimeClause:
		w.stmt(c.Stmt, sc)
	case *syntax.CoprocClause:
		w.stmt(c.Stmt, sc.fork())
	case *syntax.TestDecl:
		w.stmt(c.Body, sc)
	case *syntax.DeclClause:
		for _, a := range c.Args {
			w.substs(a, sc, "")
			if a.Value != nil {
				w.credentialWords([]*syntax.Word{a.Value}, text)
			}
		}
	case *syntax.TestClause:
		w.substs(c, sc, "")
		var words []*syntax.Word
		syntax.Walk(c.X, func(n syntax.Node) bool {
			if wd, ok := n.(*syntax.Word); ok {
				words = append(words, wd)
				return false
			}
			return true
		})
		w.credentialWords(words, text)
	default: // arithmetic and let: only substitutions can run commands
		w.substs(c, sc, "")
	}
}

// pipeline walks the stages of a | b | c. Each stage runs in a child
// shell; every stage after the first reads the output of the ones before.
func (w *walker) pipeline(c *syntax.BinaryCmd, s *syntax.Stmt, sc *scope) {
	var stages []*syntax.Stmt
	var flatten func(st *syntax.Stmt)
	flatten = func(st *syntax.Stmt) {
		if b, ok := st.Cmd.(*syntax.BinaryCmd); ok && (b.Op == syntax.Pipe || b.Op == syntax.PipeAll) && len(st.Redirs) == 0 {
			flatten(b.X)
			flatten(b.Y)
			return
		}
		stages = append(stages, st)
	}
	flatten(c.X)
	flatten(c.Y)
	text := printNode(s)
	upstream := sc.stdin
	for i, st := range stages {
		sub := sc.fork()
		sub.pipe = text
		if i > 0 {
			sub.stdin, sub.here = upstream, nil
		}
		w.stmt(st, sub)
		if upstream == "" {
			upstream = findDownloader(st)
		}
	}
}

// call classifies a simple command.
func (w *walker) call(ce *syntax.CallExpr, sc *scope, text string) {
	for _, a := range ce.Assigns {
		w.substs(a, sc, "")
	}
	var args []*field
	for _, word := range ce.Args {
		args = append(args, fields(word)...)
	}
	// Output process substitutions >(...) read what the command writes:
	// a download, or whatever it passes on from its own input.
	out := sc.stdin
	if tool := downloaderOf(args); tool != "" {
		out = tool
	}
	for _, word := range ce.Args {
		w.substs(word, sc, out)
	}
	if len(args) > 0 {
		w.invoke(args, sc, text, false)
	}
	for _, a := range ce.Assigns {
		if a.Value != nil {
			w.credentialWords([]*syntax.Word{a.Value}, text)
		}
	}
	for _, f := range args {
		if !f.code {
			w.credentialField(f, text)
		}
	}
}

// substs walks the command and process substitutions inside node, each in
// a child shell. out is the downloader whose output reaches >(...)
// substitutions, if any.
func (w *walker) substs(node syntax.Node, sc *scope, out string) {
	if node == nil {
		return
	}
	if wd, ok := node.(*syntax.Word); ok && wd == nil {
		return
	}
	syntax.Walk(node, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.CmdSubst:
			w.stmts(n.Stmts, sc.fork())
			return false
		case *syntax.ProcSubst:
			sub := sc.fork()
			sub.pipe, sub.here = "", nil
			if n.Op == syntax.CmdOut {
				sub.stdin = out
			}
			w.stmts(n.Stmts, sub)
			return false
		}
		return true
	})
}

// redirect checks where a redirection writes and what it names.
func (w *walker) redirect(r *syntax.Redirect, sc *scope, text string) {
	if r.Word == nil {
		return
	}
	if r.Op != syntax.Hdoc && r.Op != syntax.DashHdoc {
		w.credentialWords([]*syntax.Word{r.Word}, text)
	}
	switch {
	case isFileWrite(r) || r.Op == syntax.RdrInOut:
	case r.Op == syntax.DplOut:
		// >&2 and >&- duplicate or close descriptors; >&file is &>file.
		if v := r.Word.Lit(); v == "-" || isDigits(v) || (len(v) > 1 && isDigits(v[:len(v)-1]) && v[len(v)-1] == '-') {
			return
		}
	default:
		return
	}
	if len(r.Word.Parts) == 1 {
		if _, ok := r.Word.Parts[0].(*syntax.ProcSubst); ok {
			return // writes to a process, checked as a command
		}
	}
	for _, f := range fields(r.Word) {
		w.write("redirection "+r.Op.String(), f, sc, text)
	}
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// write reports a write to f unless it lands in the workspace, a scratch
// directory or a sink.
func (w *walker) write(op string, f *field, sc *scope, text string) {
	t := w.locate(f, sc.cwd)
	switch t.place {
	case placeRoot, placeInside, placeScratch, placeSink:
		return
	}
	w.report(OutsideWrite, op+" writes "+w.describe(t), text)
}

// writeInto reports a write of some entry inside directory f (cp a dir/,
// cp -t dir) unless that lands in the workspace or a scratch directory.
func (w *walker) writeInto(op string, f *field, sc *scope, text string) {
	t := w.locate(f, sc.cwd)
	if t.place != placeUnknown && t.place != placeHome && !t.all {
		switch w.childPlace(t.path) {
		case placeInside, placeScratch:
			return
		}
		w.report(OutsideWrite, op+" writes into "+w.describe(t), text)
		return
	}
	w.write(op, f, sc, text)
}

// recursiveDelete reports a recursive delete of f unless it lands strictly
// inside the workspace or a scratch directory.
func (w *walker) recursiveDelete(op string, f *field, sc *scope, text string) {
	t := w.locate(f, sc.cwd)
	switch t.place {
	case placeInside, placeScratch:
		return
	}
	w.report(RecursiveDelete, op+" of "+w.describe(t), text)
}

// downloadedBy returns the downloader whose output a redirection from
// word reads: a process substitution running one, or a file one wrote.
func (w *walker) downloadedBy(word *syntax.Word, sc *scope) string {
	if tool := findDownloader(word); tool != "" {
		return tool
	}
	if fs := fields(word); len(fs) == 1 {
		if d, ok := w.downloaded(fs[0], sc); ok {
			return d.tool
		}
	}
	return ""
}
