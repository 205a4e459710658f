package risk

import (
	"path"
	"slices"
	"strings"
)

func (w *walker) rm(args []*field, sc *scope, text string) {
	p := parseArgs(args, optSpec{})
	if p.has("-r", "-R", "--recursive") {
		for _, f := range p.operands {
			w.recursiveDelete("rm -r", f, sc, text)
		}
		return
	}
	for _, f := range p.operands {
		w.write("rm", f, sc, text)
	}
}

// findFilters are find primaries that select some entries rather than
// all of them. Without one, find -delete removes the whole tree.
var findFilters = []string{
	"-name", "-iname", "-path", "-ipath", "-wholename", "-iwholename", "-regex", "-iregex",
	"-type", "-xtype", "-size", "-empty", "-mtime", "-mmin", "-atime", "-amin", "-ctime", "-cmin",
	"-newer", "-anewer", "-cnewer", "-newerXY", "-user", "-group", "-uid", "-gid", "-perm", "-links",
	"-inum", "-samefile", "-nouser", "-nogroup", "-readable", "-writable", "-executable",
	"-lname", "-ilname", "-fstype", "-used", "-context", "-false", "-prune",
}

// find checks find -delete and the commands of -exec and friends, whose
// {} stands for entries below the starting points.
func (w *walker) find(args []*field, sc *scope, text string) {
	i := 0
	for i < len(args) && !args[i].dyn {
		switch v := args[i].val; {
		case v == "-H" || v == "-L" || v == "-P" || strings.HasPrefix(v, "-O"):
			i++
			continue
		case v == "-D" && i+1 < len(args):
			i += 2
			continue
		}
		break
	}
	var starts []*field
	for ; i < len(args); i++ {
		v := args[i].val
		if !args[i].dyn && (strings.HasPrefix(v, "-") || v == "(" || v == "!" || v == ",") {
			break
		}
		starts = append(starts, args[i])
	}
	if len(starts) == 0 {
		starts = []*field{lit(".")}
	}
	expr := args[i:]
	filtered := slices.ContainsFunc(expr, func(f *field) bool {
		return slices.Contains(findFilters, f.val) || strings.HasPrefix(f.val, "-newer")
	})
	// entry is what find hands to -delete and {}: the starting point
	// itself when nothing filters, else something strictly below it.
	entry := func(start *field) *field {
		if !filtered || start.dyn {
			return start
		}
		e := *start
		e.val = strings.TrimSuffix(start.val, "/") + "/{}"
		if e.glob {
			e.pat = strings.TrimSuffix(start.pat, "/") + "/{}"
		}
		e.code = false
		return &e
	}
	for j := 0; j < len(expr); j++ {
		switch expr[j].val {
		case "-delete":
			for _, s := range starts {
				w.recursiveDelete("find -delete", entry(s), sc, text)
			}
		case "-exec", "-execdir", "-ok", "-okdir":
			k := j + 1
			for k < len(expr) && expr[k].val != ";" && expr[k].val != "+" {
				k++
			}
			cmd := expr[j+1 : k]
			j = k
			if len(cmd) == 0 {
				continue
			}
			for _, s := range starts {
				e := entry(s)
				inner := make([]*field, len(cmd))
				for n, a := range cmd {
					inner[n] = a
					if !a.dyn && strings.Contains(a.val, "{}") {
						if e.dyn {
							inner[n] = dynField(a.val)
						} else {
							inner[n] = lit(strings.ReplaceAll(a.val, "{}", e.val))
							inner[n].home = e.home && strings.HasPrefix(a.val, "{}")
						}
					}
				}
				w.invoke(inner, sc, text, false)
			}
		}
	}
}

// writeSpecs are commands that write the files they are given, with the
// options that take values and which operands are written.
var writeSpecs = map[string]struct {
	spec optSpec
	// which: "all" operands, "last" operand (cp style; -t DIR wins), or
	// "skip1" all but the first (chmod MODE FILE...).
	which string
}{
	"tee":      {optSpec{long: []string{"output-error"}}, "all"},
	"touch":    {optSpec{short: "dtr", long: []string{"date", "reference", "time"}}, "all"},
	"mkdir":    {optSpec{short: "m", long: []string{"mode", "context"}}, "all"},
	"rmdir":    {optSpec{}, "all"},
	"unlink":   {optSpec{}, "all"},
	"shred":    {optSpec{short: "ns", long: []string{"iterations", "size", "random-source"}}, "all"},
	"truncate": {optSpec{short: "sr", long: []string{"size", "reference"}}, "all"},
	"mkfifo":   {optSpec{short: "m", long: []string{"mode", "context"}}, "all"},
	"chown":    {optSpec{long: []string{"from", "reference"}}, "skip1"},
	"chgrp":    {optSpec{long: []string{"reference"}}, "skip1"},
	"cp":       {optSpec{short: "St", long: []string{"suffix", "target-directory"}}, "last"},
	"ln":       {optSpec{short: "St", long: []string{"suffix", "target-directory"}}, "last"},
	"install":  {optSpec{short: "gmoSt", long: []string{"group", "mode", "owner", "suffix", "target-directory", "strip-program"}}, "last"},
	"mv":       {optSpec{short: "St", long: []string{"suffix", "target-directory"}}, "all"},
	"rsync": {optSpec{
		short: "eBfTM@",
		long: []string{"exclude", "include", "filter", "exclude-from", "include-from", "files-from", "rsh", "rsync-path",
			"temp-dir", "partial-dir", "backup-dir", "suffix", "chmod", "chown", "usermap", "groupmap", "log-file",
			"password-file", "compare-dest", "copy-dest", "link-dest", "out-format", "bwlimit", "timeout", "port",
			"max-size", "min-size", "max-delete", "block-size", "info", "debug", "iconv", "remote-option"},
	}, "last"},
}

// fileWrites checks commands that write, move or delete the files they
// name.
func (w *walker) fileWrites(base string, args []*field, sc *scope, text string) {
	switch base {
	case "dd":
		for _, a := range args {
			if strings.HasPrefix(a.val, "of=") {
				w.write("dd", a.sub(3), sc, text)
			}
		}
		return
	case "chmod":
		w.chmod(args, sc, text)
		return
	case "sed":
		w.sed(args, sc, text)
		return
	case "perl":
		w.perlInPlace(args, sc, text)
		return
	case "tar":
		w.tar(args, sc, text)
		return
	case "unzip":
		p := parseArgs(args, optSpec{short: "dx"})
		for _, d := range p.values("-d") {
			w.write("unzip -d", d, sc, text)
		}
		return
	case "go":
		if len(args) > 0 && (args[0].val == "build" || args[0].val == "test") {
			for _, o := range parseArgs(args[1:], optSpec{short: "o"}).values("-o") {
				w.write("go "+args[0].val+" -o", o, sc, text)
			}
		}
		return
	}
	ws, ok := writeSpecs[base]
	if !ok {
		return
	}
	p := parseArgs(args, ws.spec)
	targets := p.operands
	dirs := p.values("-t", "--target-directory")
	switch {
	case base == "install" && p.has("-d", "--directory"):
		// install -d creates every operand.
	case ws.which == "skip1":
		if !p.has("--reference") && len(targets) > 0 {
			targets = targets[1:]
		}
	case ws.which == "last" && len(dirs) > 0:
		targets = dirs
	case ws.which == "last" && base == "ln" && len(targets) == 1:
		// ln TARGET makes a link named after it in the current directory.
		targets = []*field{lit(path.Base(targets[0].val))}
	case ws.which == "last" && len(targets) > 1:
		targets = targets[len(targets)-1:]
		if base == "rsync" && strings.Contains(targets[0].val, ":") {
			targets = nil // a remote destination
		}
	case ws.which == "last":
		targets = nil
	case base == "mv" && len(dirs) > 0:
		targets = append(targets, dirs...)
	}
	for _, t := range targets {
		// A destination given with -t or a trailing slash is a
		// directory: the files land inside it.
		last := len(p.operands) > 1 && t == p.operands[len(p.operands)-1] && ws.which != "skip1"
		if slices.Contains(dirs, t) || last && !t.dyn && strings.HasSuffix(t.val, "/") && base != "install" {
			w.writeInto(base, t, sc, text)
			continue
		}
		w.write(base, t, sc, text)
	}
}

// chmod modes may look like options (chmod -x file), so the first word
// that is not a known option is the mode.
func (w *walker) chmod(args []*field, sc *scope, text string) {
	modeSeen := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case !a.dyn && (a.val == "-R" || a.val == "-v" || a.val == "-c" || a.val == "-f" || strings.HasPrefix(a.val, "--")):
			if strings.HasPrefix(a.val, "--reference") {
				modeSeen = true
			}
			if a.val == "--" {
				for _, f := range args[i+1:] {
					if modeSeen {
						w.write("chmod", f, sc, text)
					}
					modeSeen = true
				}
				return
			}
		case !modeSeen:
			modeSeen = true
		default:
			w.write("chmod", a, sc, text)
		}
	}
}

func (w *walker) sed(args []*field, sc *scope, text string) {
	inPlace := false
	script := false
	var files []*field
	for i := 0; i < len(args); i++ {
		a := args[i]
		v := a.val
		switch {
		case a.dyn || len(v) < 2 || v[0] != '-':
			if !script {
				script = true
				continue
			}
			files = append(files, a)
		case v == "--":
			for _, f := range args[i+1:] {
				if !script {
					script = true
					continue
				}
				files = append(files, f)
			}
			i = len(args)
		case strings.HasPrefix(v, "--in-place"):
			inPlace = true
		case v == "--expression" || v == "--file":
			script = true
			i++
		case strings.HasPrefix(v, "--expression=") || strings.HasPrefix(v, "--file="):
			script = true
		case strings.HasPrefix(v, "--"):
		default:
			for j := 1; j < len(v); j++ {
				if v[j] == 'i' {
					inPlace = true
					break // the rest is a backup suffix
				}
				if v[j] == 'e' || v[j] == 'f' || v[j] == 'l' {
					if v[j] != 'l' {
						script = true
					}
					if j+1 == len(v) {
						i++
					}
					break
				}
			}
		}
	}
	if inPlace {
		for _, f := range files {
			w.write("sed -i", f, sc, text)
		}
	}
}

// perlInPlace checks perl -i (perl -pi -e ... FILE...), which rewrites
// the files it is given.
func (w *walker) perlInPlace(args []*field, sc *scope, text string) {
	inPlace, code := false, false
	var files []*field
	for i := 0; i < len(args); i++ {
		v := args[i].val
		if args[i].dyn || len(v) < 2 || v[0] != '-' || v == "--" {
			if v == "--" {
				i++
			}
			rest := args[i:]
			if !code && len(rest) > 0 {
				rest = rest[1:] // the script file
			}
			files = rest
			break
		}
		for j := 1; j < len(v); j++ {
			c := v[j]
			if c == 'i' {
				inPlace = true
				break // the rest is a backup suffix
			}
			if c == 'e' || c == 'E' {
				code = true
				if j+1 == len(v) {
					i++
				}
				break
			}
			if strings.IndexByte("MmIxlDdC0", c) >= 0 {
				break
			}
		}
	}
	if inPlace {
		for _, f := range files {
			w.write("perl -i", f, sc, text)
		}
	}
}

// tar extracting with -C DIR writes there; creating an archive writes the
// -f file.
func (w *walker) tar(args []*field, sc *scope, text string) {
	extract, create := false, false
	var archive, dir *field
	takes := "fCbFgHIKLNTVX"
	for i := 0; i < len(args); i++ {
		a := args[i]
		v := a.val
		if a.dyn {
			continue
		}
		if strings.HasPrefix(v, "--") {
			name, _, hasVal := strings.Cut(v[2:], "=")
			switch name {
			case "extract", "get":
				extract = true
			case "create", "append", "update", "concatenate", "catenate":
				create = true
			case "directory", "file":
				f := a.sub(len(name) + 3)
				if !hasVal {
					if i+1 >= len(args) {
						continue
					}
					i++
					f = args[i]
				}
				if name == "directory" {
					dir = f
				} else {
					archive = f
				}
			}
			continue
		}
		// Short options, bundled; the first word may omit the dash.
		if !strings.HasPrefix(v, "-") && i != 0 {
			continue
		}
		cluster := strings.TrimPrefix(v, "-")
		for j := 0; j < len(cluster); j++ {
			c := cluster[j]
			switch c {
			case 'x':
				extract = true
			case 'c', 'r', 'u', 'A':
				create = true
			}
			if strings.IndexByte(takes, c) < 0 {
				continue
			}
			var f *field
			if strings.HasPrefix(v, "-") && j+1 < len(cluster) {
				f = a.sub(len(v) - len(cluster) + j + 1)
				j = len(cluster)
			} else if i+1 < len(args) {
				i++
				f = args[i]
			}
			switch c {
			case 'C':
				dir = f
			case 'f':
				archive = f
			}
		}
	}
	if extract && dir != nil {
		w.write("tar -x -C", dir, sc, text)
	}
	if create && archive != nil && archive.val != "-" {
		w.write("tar", archive, sc, text)
	}
}

// downloaders fetch from the network; what they fetch is untrusted code
// when it reaches an interpreter.
var downloaders = []string{"curl", "wget", "fetch", "aria2c", "http", "https", "xh", "xhs", "lwp-download", "lwp-request"}

func isDownloader(base string) bool { return slices.Contains(downloaders, base) }

// downloader records the files a downloader writes (so running them later
// is caught) and checks where they go.
func (w *walker) downloader(base string, args []*field, sc *scope, text string) {
	var files []*field
	switch base {
	case "curl":
		p := parseArgs(args, optSpec{
			short: "AbcCdDeEFHKmoPQrTtuUwxXyYz",
			long: []string{"output", "output-dir", "url", "data", "data-raw", "data-binary", "data-urlencode", "header",
				"user-agent", "referer", "cookie", "cookie-jar", "form", "user", "proxy", "request", "max-time",
				"connect-timeout", "retry", "write-out", "config", "cert", "key", "cacert", "range", "upload-file", "json"},
		})
		dir := ""
		if d := p.values("--output-dir"); len(d) > 0 && !d[0].dyn {
			dir = d[0].val
		}
		for _, o := range p.values("-o", "--output") {
			if o.val != "-" {
				files = append(files, inDir(dir, o))
			}
		}
		if p.has("-O", "--remote-name", "--remote-name-all") {
			for _, u := range p.operands {
				if name := urlBase(u); name != "" {
					files = append(files, inDir(dir, lit(name)))
				}
			}
		}
	case "wget":
		p := parseArgs(args, optSpec{
			short: "OPoaieTtwUQlARDIXB",
			long: []string{"output-document", "directory-prefix", "output-file", "append-output", "input-file",
				"execute", "header", "user-agent", "tries", "timeout", "wait", "user", "password", "accept", "reject"},
		})
		dir := ""
		if d := p.values("-P", "--directory-prefix"); len(d) > 0 && !d[0].dyn {
			dir = d[0].val
		}
		if o := p.values("-O", "--output-document"); len(o) > 0 {
			if o[0].val != "-" {
				files = append(files, o[0])
			}
		} else {
			for _, u := range p.operands {
				if name := urlBase(u); name != "" {
					files = append(files, inDir(dir, lit(name)))
				}
			}
		}
		for _, l := range p.values("-o", "--output-file", "-a", "--append-output") {
			w.write(base, l, sc, text)
		}
	case "aria2c":
		p := parseArgs(args, optSpec{short: "odi", long: []string{"out", "dir", "input-file"}})
		dir := ""
		if d := p.values("-d", "--dir"); len(d) > 0 && !d[0].dyn {
			dir = d[0].val
		}
		for _, o := range p.values("-o", "--out") {
			files = append(files, inDir(dir, o))
		}
	case "lwp-download":
		ops := parseArgs(args, optSpec{}).operands
		if len(ops) > 1 {
			files = append(files, ops[1])
		}
	}
	for _, f := range files {
		w.write(base, f, sc, text)
		if t := w.locate(f, sc.cwd); t.place != placeUnknown && !t.all {
			w.downloads = append(w.downloads, download{path: t.path, tool: base})
		}
	}
}

// inDir puts a relative file into dir (curl --output-dir, wget -P).
func inDir(dir string, f *field) *field {
	if dir == "" || f.dyn || strings.HasPrefix(f.val, "/") {
		return f
	}
	return lit(path.Join(dir, f.val))
}

// urlBase is the file name a downloader derives from a URL: the last path
// segment, without query or fragment.
func urlBase(u *field) string {
	if u.dyn {
		return ""
	}
	_, rest, ok := strings.Cut(u.val, "://")
	if !ok {
		return ""
	}
	rest, _, _ = strings.Cut(rest, "?")
	rest, _, _ = strings.Cut(rest, "#")
	_, p, ok := strings.Cut(rest, "/")
	if !ok {
		return ""
	}
	name := path.Base("/" + p)
	if name == "/" || name == "." || name == ".." {
		return ""
	}
	return name
}

// downloaded reports whether f names a file a downloader wrote earlier.
func (w *walker) downloaded(f *field, sc *scope) (download, bool) {
	t := w.locate(f, sc.cwd)
	if t.place == placeUnknown || t.all || f.glob {
		return download{}, false
	}
	for _, d := range w.downloads {
		if d.path == t.path {
			return d, true
		}
	}
	return download{}, false
}
