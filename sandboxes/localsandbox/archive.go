package localsandbox

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/agentbot/agentbot/sandboxes"
)

// Archive writes the workspace to w as a tar stream of workspace-relative
// paths: directories (empty ones too), regular files with their permission
// bits and symbolic links with their targets as they are. FIFOs and devices
// are written as such, for the caller to drop; sockets are left out, and so
// are Restore's staging directories and sandboxes.OutputsDir. Symbolic
// links are never followed and files are streamed, one at a time. An
// unreadable directory fails the archive.
func (in *instance) Archive(ctx context.Context, w io.Writer) error {
	tw := tar.NewWriter(w)
	buf := make([]byte, copyBufSize)
	err := in.ArchiveEntries(ctx, func(h *tar.Header, body io.Reader) error {
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("writing %q: %w", h.Name, err)
		}
		if body == nil {
			return nil
		}
		if _, err := io.CopyBuffer(tw, body, buf); err != nil {
			return fmt.Errorf("writing %q: %w", h.Name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

var _ sandboxes.EntryArchiver = (*instance)(nil)

// ArchiveEntries hands emit the entries Archive writes, in the same order,
// as sandboxes.EntryArchiver says; Snapshot uses it.
//
// The tree is walked a directory at a time, each directory through an
// os.Root of its own opened under the workspace's, so that every entry is
// reached by its plain name in an open directory rather than by resolving
// its whole path again. A regular file is opened once; its header comes
// from the open file, and its body reads it to the size in the header: a
// file that grows while it is read is cut there, one that shrinks fails
// the walk.
func (in *instance) ArchiveEntries(ctx context.Context, emit func(h *tar.Header, body io.Reader) error) error {
	if err := in.usable(ctx); err != nil {
		return err
	}
	in.t.fsMu.RLock()
	defer in.t.fsMu.RUnlock()
	rt, err := os.OpenRoot(in.st.Root)
	if err != nil {
		return fmt.Errorf("opening the workspace: %w", err)
	}
	defer rt.Close()

	a := &archiver{ctx: ctx, emit: emit}
	return a.dir(rt, ".", "", 0)
}

const (
	// copyBufSize is the buffer file contents are copied through.
	copyBufSize = 256 << 10
	// maxDirHandles is how many directories deep a walk keeps a handle
	// per directory; below that it goes on by relative paths from the
	// handle at that depth, so a deep tree cannot use up descriptors.
	maxDirHandles = 64
)

type archiver struct {
	ctx  context.Context
	emit func(h *tar.Header, body io.Reader) error
	// h and body are what emit is given, reused from entry to entry.
	h    tar.Header
	body fileBody
}

// dir archives the entries of the directory sub of d, in name order;
// prefix is the directory's tar name with a trailing slash ("" for the
// workspace) and depth how deep it is.
func (a *archiver) dir(d *os.Root, sub, prefix string, depth int) error {
	dirName := strings.TrimSuffix(prefix, "/")
	if dirName == "" {
		dirName = "."
	}
	ents, err := readDir(d, sub)
	if err != nil {
		return fmt.Errorf("reading %q: %w", dirName, err)
	}
	slices.SortFunc(ents, func(x, y fs.DirEntry) int { return strings.Compare(x.Name(), y.Name()) })
	for _, e := range ents {
		if err := a.ctx.Err(); err != nil {
			return err
		}
		if prefix == "" && isStaging(e.Name()) {
			continue
		}
		rel := filepath.Join(sub, e.Name())
		name := prefix + e.Name()
		if name == sandboxes.OutputsDir {
			continue // Snapshot would drop it: spare reading it
		}
		// A regular file is opened and its header made from the open
		// file; anything else needs its own Lstat.
		if e.Type().IsRegular() {
			err = a.file(d, rel, name, depth)
		} else {
			err = a.entry(d, rel, name, depth)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// readDir returns the entries of the directory sub of d, with the types
// the directory gives: the caller must not call their Info.
//
// A directory opened in an os.Root lstats every entry as it is read, so
// that Info is safe: for a workspace of small files that is a third of the
// system calls of an archive. The walk needs the types only (a regular
// file is opened and stat'ed, anything else Lstat'ed through d), so it
// reads a duplicate of the directory's descriptor, which os does not know
// to be in a Root.
func readDir(d *os.Root, sub string) ([]fs.DirEntry, error) {
	// O_NONBLOCK spares the fcntl calls os makes around its poller
	// check; it does nothing to a directory.
	f, err := d.OpenFile(sub, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var fd int
	var dupErr error
	if err := sc.Control(func(sysfd uintptr) {
		fd, dupErr = dupCloexec(int(sysfd))
	}); err != nil {
		return nil, err
	}
	if dupErr != nil {
		// Too many open files, say: the slower way still works.
		return f.ReadDir(-1)
	}
	df := os.NewFile(uintptr(fd), f.Name())
	defer df.Close()
	return df.ReadDir(-1)
}

// dupCloexec duplicates fd, close-on-exec, as os does where it has no
// dup3: under ForkLock, so no command started meanwhile inherits it.
func dupCloexec(fd int) (int, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	nfd, err := syscall.Dup(fd)
	if err != nil {
		return -1, err
	}
	syscall.CloseOnExec(nfd)
	return nfd, nil
}

// entry archives rel in d, whatever it is now.
func (a *archiver) entry(d *os.Root, rel, name string, depth int) error {
	fi, err := d.Lstat(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed while we walked
	}
	if err != nil {
		return fmt.Errorf("reading %q: %w", name, err)
	}
	a.h = tar.Header{
		Name:    name,
		Mode:    int64(fi.Mode().Perm()),
		ModTime: fi.ModTime(),
		Format:  tar.FormatPAX,
	}
	h := &a.h
	m := fi.Mode()
	switch {
	case m.IsDir():
		return a.subdir(d, rel, fi, depth)
	case m.IsRegular():
		return a.file(d, rel, name, depth)
	case m&fs.ModeSymlink != 0:
		target, err := d.Readlink(rel)
		if err != nil {
			return fmt.Errorf("reading the link %q: %w", name, err)
		}
		h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, target, 0o777
	case m&fs.ModeNamedPipe != 0:
		h.Typeflag = tar.TypeFifo
	case m&fs.ModeCharDevice != 0:
		h.Typeflag = tar.TypeChar
	case m&fs.ModeDevice != 0:
		h.Typeflag = tar.TypeBlock
	default:
		return nil // a socket: tar has no type for it
	}
	return a.emit(h, nil)
}

// subdir archives the directory rel of d, which Lstat described as fi and
// a.h holds the header of, and everything in it.
func (a *archiver) subdir(d *os.Root, rel string, fi fs.FileInfo, depth int) error {
	h := &a.h
	h.Typeflag = tar.TypeDir
	h.Name += "/"
	name := h.Name // a.h is reused below
	if depth+1 >= maxDirHandles {
		if err := a.emit(h, nil); err != nil {
			return err
		}
		return a.dir(d, rel, name, depth+1)
	}
	sub, err := d.OpenRoot(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed while we walked
	}
	if err != nil {
		return fmt.Errorf("reading %q: %w", strings.TrimSuffix(name, "/"), err)
	}
	defer sub.Close()
	// os.Root follows a symbolic link that stays inside d: make sure
	// this is the directory Lstat saw, not a link put in its place.
	si, err := sub.Stat(".")
	if err != nil {
		return fmt.Errorf("reading %q: %w", strings.TrimSuffix(name, "/"), err)
	}
	if !os.SameFile(fi, si) {
		return nil // replaced while we walked
	}
	if err := a.emit(h, nil); err != nil {
		return err
	}
	return a.dir(sub, ".", name, depth+1)
}

// file archives rel in d, which was a regular file when its directory
// was read. It is opened once; its header comes from the open file.
func (a *archiver) file(d *os.Root, rel, name string, depth int) error {
	f, err := d.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		// Removed, or replaced by something else, since the directory
		// was read?
		fi, lerr := d.Lstat(rel)
		if errors.Is(lerr, fs.ErrNotExist) {
			return nil
		}
		if lerr == nil && !fi.Mode().IsRegular() {
			return a.entry(d, rel, name, depth)
		}
		return fmt.Errorf("reading %q: %w", name, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("reading %q: %w", name, err)
	}
	if !fi.Mode().IsRegular() {
		return nil // replaced while we walked
	}
	a.h = tar.Header{
		Typeflag: tar.TypeReg,
		Name:     name,
		Size:     fi.Size(),
		Mode:     int64(fi.Mode().Perm()),
		ModTime:  fi.ModTime(),
		Format:   tar.FormatPAX,
	}
	a.body = fileBody{ctx: a.ctx, f: f, name: name, left: fi.Size()}
	err = a.emit(&a.h, &a.body)
	a.body = fileBody{}
	return err
}

// fileBody reads the first left bytes of the open file f, the file name,
// and fails once ctx is done or if f ends sooner.
type fileBody struct {
	ctx  context.Context
	f    *os.File
	name string
	left int64
}

func (b *fileBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if err := b.ctx.Err(); err != nil {
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.f.Read(p)
	b.left -= int64(n)
	switch {
	case err == io.EOF && b.left > 0:
		return n, fmt.Errorf("%q shrank while it was archived", b.name)
	case err == io.EOF:
		err = nil
	case err != nil:
		err = fmt.Errorf("reading %q: %w", b.name, err)
	}
	return n, err
}

// rename is os.Root.Rename; tests replace it to make a step of Restore's
// swap fail.
var rename = func(rt *os.Root, from, to string) error { return rt.Rename(from, to) }

// Restore replaces the workspace with the tree of the tar stream r.
//
// The stream is extracted, through os.Root, into a staging directory on
// the workspace's file system: BaseDir/<id>/restore-* for a workspace of
// ours, a hidden .agentbot-restore-* inside a workspace the user chose
// (Archive leaves it out). Only once the whole stream has been read
// without error is it swapped in: our workspace is renamed aside and the
// staging directory renamed in its place; in a user's workspace, whose
// directory must stay, every entry is moved into a hidden .agentbot-old-*
// and the staged entries moved in. A failed step of the swap is undone.
// On any error the staging directory is removed and the workspace is left
// as it was. (Commands running meanwhile in a workspace of ours keep the
// old directory as their working directory.)
//
// Files and directories get the permission bits and modification times of
// the archive (directories without an entry of their own 0755), symbolic
// links are made as given, hard links link to the earlier entry. Entries
// named like Restore's staging directories at the top are dropped.
func (in *instance) Restore(ctx context.Context, r io.Reader) error {
	cr := ctxReader{ctx, r}
	tr := tar.NewReader(cr)
	return in.RestoreEntries(ctx, func() (*tar.Header, io.Reader, error) {
		h, err := tr.Next()
		if err == io.EOF {
			// The stream must end without error, not only the tar
			// trailer.
			if _, err := io.Copy(io.Discard, cr); err != nil {
				return nil, nil, fmt.Errorf("reading the archive: %w", err)
			}
			return nil, nil, io.EOF
		}
		if err != nil {
			return nil, nil, fmt.Errorf("reading the archive: %w", err)
		}
		return h, tr, nil
	})
}

var _ sandboxes.EntryRestorer = (*instance)(nil)

// RestoreEntries does what Restore does with the entries next gives, as
// sandboxes.EntryRestorer says; Restore uses it with the entries of its tar
// stream.
func (in *instance) RestoreEntries(ctx context.Context, next func() (*tar.Header, io.Reader, error)) error {
	if err := in.usable(ctx); err != nil {
		return err
	}
	in.t.restoreMu.Lock()
	defer in.t.restoreMu.Unlock()

	parent, staging := in.dir, "restore-"+randHex(6)
	if in.userRoot {
		parent, staging = in.st.Root, stagingPrefix+randHex(6)
	}
	stagingPath := filepath.Join(parent, staging)
	if err := os.Mkdir(stagingPath, 0o700); err != nil {
		return fmt.Errorf("creating the staging directory: %w", err)
	}
	swapped := false
	defer func() {
		if !swapped {
			forceRemoveAll(stagingPath)
		}
	}()
	if err := extract(ctx, stagingPath, next); err != nil {
		return err
	}

	in.t.fsMu.Lock()
	defer in.t.fsMu.Unlock()
	if err := in.usable(ctx); err != nil {
		return err
	}
	if in.userRoot {
		return swapEntries(in.st.Root, staging)
	}
	if err := swapWorkspace(in.dir, staging); err != nil {
		return err
	}
	swapped = true
	return nil
}

type dirMeta struct {
	mode  fs.FileMode
	mtime time.Time
}

// extract writes the entries next gives below dir, through os.Root so
// that no entry can land outside it, until next returns io.EOF.
func extract(ctx context.Context, dir string, next func() (*tar.Header, io.Reader, error)) error {
	rt, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("opening the staging directory: %w", err)
	}
	defer rt.Close()
	x := &extractor{
		rt:      rt,
		dirs:    make(map[string]dirMeta),
		made:    make(map[string]bool),
		parents: make(map[string]bool),
		open:    make(map[string]*os.Root),
		buf:     make([]byte, copyBufSize),
	}
	defer x.forget()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, body, err := next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		name, err := entryPath(h.Name)
		if err != nil {
			return err
		}
		if name == "." || isStaging(strings.SplitN(name, string(filepath.Separator), 2)[0]) {
			continue
		}
		if h.Typeflag == tar.TypeReg && body == nil {
			return fmt.Errorf("extracting %q: no contents", h.Name)
		}
		x.body = ctxReader{ctx, body}
		err = x.entry(h, name)
		x.body = ctxReader{}
		if err != nil {
			return err
		}
	}
	x.forget()
	return fixDirs(rt, x.dirs)
}

// entryPath cleans an entry name into a relative file path, refusing one
// that is absolute or climbs out (the caller checked already; os.Root
// would refuse it too).
func entryPath(n string) (string, error) {
	if n == "" || strings.IndexByte(n, 0) >= 0 || path.IsAbs(n) {
		return "", fmt.Errorf("%w: bad entry name %q", sandboxes.ErrUnsafeArchive, n)
	}
	c := path.Clean(n)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%w: entry name %q climbs out", sandboxes.ErrUnsafeArchive, n)
	}
	return filepath.FromSlash(c), nil
}

// maxOpenDirs bounds the directory handles an extractor keeps.
const maxOpenDirs = 32

// An extractor writes tar entries into the staging directory rt.
//
// The staging directory starts empty, so an entry usually lands on a
// free name in a directory an earlier entry made: files and links are
// created there right away (O_EXCL, never following a link), through a
// handle of their directory, an os.Root opened under rt, by their plain
// name. Only when that fails (the name is taken, the directory is
// missing) is the entry's place cleared and made the long way, through
// rt; whatever removes something forgets what is known first.
type extractor struct {
	rt   *os.Root
	dirs map[string]dirMeta // the directory entries' modes and times
	// made holds directories that a directory entry made (or found a
	// directory, not a link) and nothing removed since; parents holds
	// the other paths MkdirAll was done for since.
	made, parents map[string]bool
	open          map[string]*os.Root // handles of directories in made or parents
	body          ctxReader           // the contents of the entry at hand
	buf           []byte
}

// forget drops what is known about the staging directory's contents.
func (x *extractor) forget() {
	for _, d := range x.open {
		d.Close()
	}
	clear(x.open)
	clear(x.made)
	clear(x.parents)
}

func (x *extractor) entry(h *tar.Header, name string) error {
	mode := fs.FileMode(h.Mode).Perm()
	switch h.Typeflag {
	case tar.TypeDir:
		if !x.made[name] && !x.mkdir(name, mode) {
			if fi, err := x.rt.Lstat(name); err == nil && !fi.IsDir() {
				x.forget()
				if err := x.rt.RemoveAll(name); err != nil {
					return fmt.Errorf("extracting %q: %w", h.Name, err)
				}
			}
			// Modes come last: a read-only directory must still be filled.
			if err := x.rt.MkdirAll(name, 0o700); err != nil {
				return fmt.Errorf("extracting %q: %w", h.Name, err)
			}
			x.made[name] = true
		}
		x.dirs[name] = dirMeta{mode: mode, mtime: h.ModTime}
		return nil
	case tar.TypeReg, tar.TypeSymlink:
		retry, err := x.create(h, name, mode)
		if retry && (errors.Is(err, fs.ErrExist) || errors.Is(err, fs.ErrNotExist)) {
			// An earlier entry has the name, or the directory is gone.
			x.forget()
			if err = clearFor(x.rt, name); err == nil {
				_, err = x.create(h, name, mode)
			}
		}
		if err != nil {
			return fmt.Errorf("extracting %q: %w", h.Name, err)
		}
		return nil
	case tar.TypeLink:
		target, err := entryPath(h.Linkname)
		if err != nil {
			return err
		}
		x.forget()
		if err := clearFor(x.rt, name); err != nil {
			return fmt.Errorf("extracting %q: %w", h.Name, err)
		}
		if err := x.rt.Link(target, name); err != nil {
			return fmt.Errorf("extracting the hard link %q to %q: %w", h.Name, h.Linkname, err)
		}
		return nil
	default:
		return fmt.Errorf("%w: %q has unsupported tar type %q", sandboxes.ErrUnsafeArchive, h.Name, h.Typeflag)
	}
}

// create makes the file or symbolic link of h at name, which must be
// free. retry reports that it failed before anything was made or any of
// the entry's contents read, so that it can be tried again.
func (x *extractor) create(h *tar.Header, name string, mode fs.FileMode) (retry bool, err error) {
	d, base, err := x.parent(name)
	if err != nil {
		return true, err
	}
	if h.Typeflag == tar.TypeSymlink {
		return true, d.Symlink(h.Linkname, base)
	}
	// O_NONBLOCK does nothing to a regular file but spares os the
	// fcntl calls it makes around its poller check. The file is made
	// with its mode (a new file is written through the descriptor that
	// made it, whatever its mode says).
	f, err := d.OpenFile(base, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NONBLOCK, mode)
	if err != nil {
		return true, err
	}
	// A plain Writer, so that the copy goes through x.buf.
	n, err := io.CopyBuffer(struct{ io.Writer }{f}, &x.body, x.buf)
	if err == nil && n != h.Size {
		err = fmt.Errorf("the archive gave %d bytes of %d", n, h.Size)
	}
	if err == nil {
		err = fixMode(f, mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && !h.ModTime.IsZero() {
		err = d.Chtimes(base, h.ModTime, h.ModTime)
	}
	return false, err
}

// fixMode gives the file f the mode it was made with, where the umask (or
// a default ACL) took bits away. Only then: a chmod dirties the inode,
// which on a journalling file system costs as much as the rest of writing
// a small file, and a stat does not.
func fixMode(f *os.File, mode fs.FileMode) error {
	fi, err := f.Stat()
	if err == nil && fi.Mode().Perm() == mode {
		return nil
	}
	return f.Chmod(mode)
}

// mkdir makes the directory name, at a free name in a directory known to
// exist, and keeps a handle of it for what goes in it. It reports whether
// it did; if not, nothing was made, and the entry takes the long way. The
// directory gets its mode now if that lets us fill it, so that fixDirs
// need not change it.
func (x *extractor) mkdir(name string, mode fs.FileMode) bool {
	dir, base := filepath.Split(name)
	p, err := x.dirHandle(filepath.Clean(dir))
	if err != nil || p.Mkdir(base, mode|0o700) != nil {
		return false
	}
	x.made[name] = true
	if d, err := p.OpenRoot(base); err == nil {
		x.keep(name, d)
	}
	return true
}

// parent returns a handle of the directory name is in, made if need be,
// and name's last element.
func (x *extractor) parent(name string) (*os.Root, string, error) {
	dir, base := filepath.Split(name)
	d, err := x.dirHandle(filepath.Clean(dir))
	return d, base, err
}

// dirHandle returns a handle of the directory dir, made if need be. One
// that a directory entry made is opened in its parent's handle (its last
// element is no link to follow), any other through rt.
func (x *extractor) dirHandle(dir string) (*os.Root, error) {
	if dir == "." {
		return x.rt, nil
	}
	if d := x.open[dir]; d != nil {
		return d, nil
	}
	var d *os.Root
	if x.made[dir] {
		p, err := x.dirHandle(filepath.Dir(dir))
		if err != nil {
			return nil, err
		}
		if d, err = p.OpenRoot(filepath.Base(dir)); err != nil {
			return nil, err
		}
	} else {
		if !x.parents[dir] {
			if err := x.rt.MkdirAll(dir, 0o700); err != nil {
				return nil, err
			}
			x.parents[dir] = true
		}
		var err error
		if d, err = x.rt.OpenRoot(dir); err != nil {
			return nil, err
		}
	}
	x.keep(dir, d)
	return d, nil
}

// keep keeps the handle d of the directory dir, dropping all the others
// when there are too many.
func (x *extractor) keep(dir string, d *os.Root) {
	if len(x.open) >= maxOpenDirs {
		for n, o := range x.open {
			o.Close()
			delete(x.open, n)
		}
	}
	x.open[dir] = d
}

// clearFor makes room for a new non-directory entry at name: its parent
// exists, and whatever an earlier entry put at name is gone.
func clearFor(rt *os.Root, name string) error {
	if d := filepath.Dir(name); d != "." {
		if err := rt.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	fi, err := rt.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return rt.RemoveAll(name)
	}
	return rt.Remove(name)
}

// fixDirs gives every extracted directory its mode and time (0755 and
// no time for one without an entry of its own), each after everything
// below it, so that a directory closed to us is closed last.
func fixDirs(rt *os.Root, dirs map[string]dirMeta) error {
	return fixDir(rt, ".", ".", dirs, 0)
}

// fixDir fixes the directories below sub of d; name is sub's path in the
// staging directory and depth how deep it is.
func fixDir(d *os.Root, sub, name string, dirs map[string]dirMeta, depth int) error {
	ents, err := readDir(d, sub)
	if err != nil {
		return fmt.Errorf("walking the staging directory: %w", err)
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		rel, full := filepath.Join(sub, e.Name()), filepath.Join(name, e.Name())
		var fi fs.FileInfo
		if depth+1 < maxDirHandles {
			c, err := d.OpenRoot(rel)
			if err != nil {
				return fmt.Errorf("walking the staging directory: %w", err)
			}
			err = fixDir(c, ".", full, dirs, depth+1)
			if err == nil {
				fi, err = c.Stat(".")
			}
			c.Close()
			if err != nil {
				return err
			}
		} else if err := fixDir(d, rel, full, dirs, depth+1); err != nil {
			return err
		} else if fi, err = d.Lstat(rel); err != nil {
			return fmt.Errorf("walking the staging directory: %w", err)
		}
		meta, ok := dirs[full]
		if !ok {
			meta.mode = 0o755
		}
		// As for files: a chmod dirties the inode, a stat does not.
		if fi.Mode().Perm() != meta.mode {
			if err := d.Chmod(rel, meta.mode); err != nil {
				return fmt.Errorf("setting the mode of %q: %w", full, err)
			}
		}
		if !meta.mtime.IsZero() {
			if err := d.Chtimes(rel, meta.mtime, meta.mtime); err != nil {
				return fmt.Errorf("setting the time of %q: %w", full, err)
			}
		}
	}
	return nil
}

// swapWorkspace puts the staging directory dir/staging in the place of
// our workspace dir/workspace.
func swapWorkspace(dir, staging string) error {
	rt, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("opening the sandbox directory: %w", err)
	}
	defer rt.Close()
	fi, err := rt.Stat(workspaceDir)
	if err != nil {
		return fmt.Errorf("reading the workspace: %w", err)
	}
	if err := rt.Chmod(staging, fi.Mode().Perm()); err != nil {
		return fmt.Errorf("setting the mode of the restored workspace: %w", err)
	}
	old := "old-" + randHex(6)
	if err := rename(rt, workspaceDir, old); err != nil {
		return fmt.Errorf("moving the workspace aside: %w", err)
	}
	if err := rename(rt, staging, workspaceDir); err != nil {
		if uerr := rename(rt, old, workspaceDir); uerr != nil {
			return fmt.Errorf("moving the restored workspace in: %w; putting the old one back failed too, it is at %s: %w",
				err, filepath.Join(dir, old), uerr)
		}
		return fmt.Errorf("moving the restored workspace in: %w", err)
	}
	// The restore is done; if the old tree cannot be removed, it goes
	// with the sandbox's directory on Destroy.
	forceRemoveAll(filepath.Join(dir, old))
	return nil
}

// swapEntries replaces the entries of a user's workspace root with those
// of root/staging, keeping the root directory itself.
func swapEntries(root, staging string) error {
	rt, err := os.OpenRoot(root)
	if err != nil {
		return fmt.Errorf("opening the workspace: %w", err)
	}
	defer rt.Close()
	old := oldPrefix + randHex(6)
	if err := rt.Mkdir(old, 0o700); err != nil {
		return fmt.Errorf("creating a directory for the old entries: %w", err)
	}
	current, err := readNames(rt, ".")
	if err != nil {
		rt.Remove(old)
		return fmt.Errorf("reading the workspace: %w", err)
	}
	current = slices.DeleteFunc(current, isStaging)
	staged, err := readNames(rt, staging)
	if err != nil {
		rt.Remove(old)
		return fmt.Errorf("reading the staging directory: %w", err)
	}

	var aside, moved []string
	fail := func(err error) error {
		var errs []error
		for _, n := range slices.Backward(moved) {
			if uerr := move(rt, n, filepath.Join(staging, n)); uerr != nil {
				errs = append(errs, uerr)
			}
		}
		for _, n := range slices.Backward(aside) {
			if uerr := move(rt, filepath.Join(old, n), n); uerr != nil {
				errs = append(errs, uerr)
			}
		}
		if len(errs) > 0 {
			return fmt.Errorf("%w; putting the workspace back failed too, old entries may be left in %s: %w",
				err, filepath.Join(root, old), errors.Join(errs...))
		}
		rt.Remove(old)
		return err
	}
	for _, n := range current {
		if err := move(rt, n, filepath.Join(old, n)); err != nil {
			return fail(fmt.Errorf("moving %q aside: %w", n, err))
		}
		aside = append(aside, n)
	}
	for _, n := range staged {
		if err := move(rt, filepath.Join(staging, n), n); err != nil {
			return fail(fmt.Errorf("moving the restored %q in: %w", n, err))
		}
		moved = append(moved, n)
	}
	// The restore is done; what cannot be removed now stays hidden from
	// Archive.
	rt.Remove(staging)
	forceRemoveAll(filepath.Join(root, old))
	return nil
}

func readNames(rt *os.Root, dir string) ([]string, error) {
	f, err := rt.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	slices.Sort(names)
	return names, err
}

// move renames from to to in rt. Moving a directory to another parent
// rewrites its ".." entry, which needs write permission on it, so a
// read-only directory is opened for the move and closed again.
func move(rt *os.Root, from, to string) error {
	fi, err := rt.Lstat(from)
	if err != nil {
		return err
	}
	perm := fi.Mode().Perm()
	if !fi.IsDir() || perm&0o200 != 0 {
		return rename(rt, from, to)
	}
	if err := rt.Chmod(from, perm|0o200); err != nil {
		return err
	}
	if err := rename(rt, from, to); err != nil {
		rt.Chmod(from, perm)
		return err
	}
	// We could grant the bit a moment ago, so we can take it back.
	rt.Chmod(to, perm)
	return nil
}
