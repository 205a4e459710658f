package risk

import (
	"path"
	"strings"
)

// place says where a path is relative to the workspace.
type place int

const (
	placeUnknown place = iota // depends on values only known at run time
	placeHome                 // in a home directory (~)
	placeRoot                 // the workspace root itself
	placeInside               // strictly inside the workspace
	placeScratch              // strictly inside /tmp, /var/tmp or /dev/shm
	placeSink                 // /dev/null, the standard streams, the terminal
	placeOutside              // anywhere else, ancestors of the workspace included
)

// scratchDirs may be written and recursively deleted below (not
// themselves): they hold nothing of the sandbox's but temporary files.
var scratchDirs = []string{"/tmp", "/var/tmp", "/dev/shm"}

// sinks are write targets that store nothing.
var sinks = []string{"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/zero"}

// target is a path argument located relative to the workspace.
type target struct {
	place place
	path  string // cleaned absolute path; the word as written when unknown
	all   bool   // the word is a glob matching everything in path ("dir/*")
	why   string // for placeUnknown: what is not known
}

// homeCwd marks a working directory somewhere in a home directory.
const homeCwd = "~"

// locate resolves a path word against the working directory cwd ("" when
// unknown, homeCwd in a home directory).
func (w *walker) locate(f *field, cwd string) target {
	if f.dyn {
		return target{place: placeUnknown, path: f.source(), why: "a path only known at run time"}
	}
	if f.home {
		return target{place: placeHome, path: f.val}
	}
	val := f.val
	glob := ""
	if f.glob {
		// Split at the first component holding an unquoted glob
		// character: what comes before is a real directory, the glob
		// selects some (or all) of its entries.
		comps := strings.Split(f.pat, "/")
		for i, c := range comps {
			if hasGlobMeta(c) {
				val = unescapeGlob(strings.Join(comps[:i], "/"))
				if i == 0 {
					val = "."
				} else if val == "" {
					val = "/"
				}
				glob = strings.Join(comps[i:], "/")
				break
			}
		}
	}
	var p string
	switch {
	case strings.HasPrefix(val, "/"):
		p = path.Clean(val)
	case cwd == homeCwd:
		return target{place: placeHome, path: "~/" + f.val}
	case cwd == "":
		return target{place: placeUnknown, path: f.val, why: "a path relative to a directory only known at run time"}
	default:
		p = path.Join(cwd, val)
	}
	if glob == "" {
		return target{place: w.placeOf(p), path: p}
	}
	if matchesAll(glob) {
		return target{place: w.placeOf(p), path: p, all: true}
	}
	// Some entries of p: a strict descendant. Inside an ancestor of the
	// workspace the glob may well match the workspace itself.
	return target{place: w.childPlace(p), path: path.Join(p, glob)}
}

// childPlace places an unknown entry strictly below directory p. Below an
// ancestor of the workspace the entry may well be the workspace itself.
func (w *walker) childPlace(p string) place {
	switch pl := w.placeOf(p); {
	case pl == placeRoot || pl == placeInside:
		return placeInside
	case pl == placeOutside && w.isAncestor(p):
		return placeOutside
	}
	return w.placeOf(path.Join(p, "x"))
}

// placeOf places a cleaned absolute path.
func (w *walker) placeOf(p string) place {
	ws := w.c.workspace
	switch {
	case p == ws:
		return placeRoot
	case under(p, ws):
		return placeInside
	}
	for _, s := range sinks {
		if p == s {
			return placeSink
		}
	}
	if under(p, "/dev/fd") || under(p, "/proc/self/fd") {
		return placeSink
	}
	for _, d := range scratchDirs {
		if under(p, d) {
			return placeScratch
		}
	}
	return placeOutside
}

// isAncestor reports whether p contains the workspace.
func (w *walker) isAncestor(p string) bool {
	return under(w.c.workspace, p)
}

// under reports whether p is strictly below dir (both cleaned, absolute).
func under(p, dir string) bool {
	if dir == "/" {
		return p != "/" && strings.HasPrefix(p, "/")
	}
	return strings.HasPrefix(p, dir+"/")
}

// hasGlobMeta reports an unescaped *, ? or [ (or an extended glob) in a
// pattern component.
func hasGlobMeta(pat string) bool {
	for i := 0; i < len(pat); i++ {
		switch pat[i] {
		case '\\':
			i++
		case '*', '?', '[', '(':
			return true
		}
	}
	return false
}

func unescapeGlob(pat string) string {
	if !strings.Contains(pat, `\`) {
		return pat
	}
	var b strings.Builder
	for i := 0; i < len(pat); i++ {
		if pat[i] == '\\' && i+1 < len(pat) {
			i++
		}
		b.WriteByte(pat[i])
	}
	return b.String()
}

// matchesAll reports a glob that selects every entry of its directory
// (or every hidden one, or every one but the shortest names): "*", "**",
// ".*", ".??*", possibly with a trailing slash.
func matchesAll(glob string) bool {
	glob = strings.TrimSuffix(glob, "/")
	glob = strings.TrimPrefix(glob, ".")
	return strings.Contains(glob, "*") && strings.Trim(glob, "*?") == ""
}

// describe says where t is, for a reason: "/etc (outside the
// workspace)".
func (w *walker) describe(t target) string {
	what := t.path
	if t.all {
		what = "everything in " + t.path
	}
	switch {
	case t.place == placeUnknown:
		return t.path + ", " + t.why
	case t.place == placeHome:
		return what + " (a home directory)"
	case t.place == placeRoot:
		return strings.Replace(what, t.path, "the workspace root "+t.path, 1)
	case t.path == "/":
		return what + " (the whole filesystem)"
	case w.isAncestor(t.path):
		return what + " (which contains the workspace)"
	}
	return what + " (outside the workspace)"
}
