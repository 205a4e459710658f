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
	"time"

	"github.com/agentbot/agentbot/sandboxes"
)

// Archive writes the workspace to w as a tar stream of workspace-relative
// paths: directories (empty ones too), regular files with their permission
// bits and symbolic links with their targets as they are. FIFOs and devices
// are written as such, for the caller to drop; sockets are left out, and so
// are Restore's staging directories. Symbolic links are never followed and
// files are streamed, one at a time. An unreadable directory fails the
// archive.
func (in *instance) Archive(ctx context.Context, w io.Writer) error {
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

	tw := tar.NewWriter(w)
	err = fs.WalkDir(rt.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("reading %q: %w", p, err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		if !strings.Contains(p, "/") && isStaging(p) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		return archiveEntry(ctx, tw, rt, p)
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

func archiveEntry(ctx context.Context, tw *tar.Writer, rt *os.Root, p string) error {
	name := filepath.FromSlash(p)
	fi, err := rt.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed while we walked
	}
	if err != nil {
		return fmt.Errorf("reading %q: %w", p, err)
	}
	h := &tar.Header{
		Name:    p,
		Mode:    int64(fi.Mode().Perm()),
		ModTime: fi.ModTime(),
		Format:  tar.FormatPAX,
	}
	m := fi.Mode()
	switch {
	case m.IsDir():
		h.Typeflag = tar.TypeDir
		h.Name += "/"
	case m.IsRegular():
		return archiveFile(ctx, tw, rt, p, h)
	case m&fs.ModeSymlink != 0:
		target, err := rt.Readlink(name)
		if err != nil {
			return fmt.Errorf("reading the link %q: %w", p, err)
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
	if err := tw.WriteHeader(h); err != nil {
		return fmt.Errorf("writing %q: %w", p, err)
	}
	return nil
}

func archiveFile(ctx context.Context, tw *tar.Writer, rt *os.Root, p string, h *tar.Header) error {
	f, err := openRegular(rt, filepath.FromSlash(p), os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, sandboxes.ErrInvalid) {
		return nil // removed or replaced while we walked
	}
	if err != nil {
		return fmt.Errorf("reading %q: %w", p, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("reading %q: %w", p, err)
	}
	h.Typeflag = tar.TypeReg
	h.Size = fi.Size()
	h.Mode = int64(fi.Mode().Perm())
	h.ModTime = fi.ModTime()
	if err := tw.WriteHeader(h); err != nil {
		return fmt.Errorf("writing %q: %w", p, err)
	}
	// A file that grows while it is read is cut at the size in its
	// header; one that shrinks cannot be written any more.
	n, err := io.Copy(tw, io.LimitReader(ctxReader{ctx, f}, h.Size))
	if err != nil {
		return fmt.Errorf("writing %q: %w", p, err)
	}
	if n < h.Size {
		return fmt.Errorf("%q shrank while it was archived", p)
	}
	return nil
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
	if err := extract(ctx, stagingPath, r); err != nil {
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

// extract writes the tar stream r below dir, through os.Root so that no
// entry can land outside it, and reads r to its end.
func extract(ctx context.Context, dir string, r io.Reader) error {
	rt, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("opening the staging directory: %w", err)
	}
	defer rt.Close()
	cr := ctxReader{ctx, r}
	tr := tar.NewReader(cr)
	dirs := make(map[string]dirMeta)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("reading the archive: %w", err)
		}
		name, err := entryPath(h.Name)
		if err != nil {
			return err
		}
		if name == "." || isStaging(strings.SplitN(name, string(filepath.Separator), 2)[0]) {
			continue
		}
		if err := extractEntry(rt, tr, h, name, dirs); err != nil {
			return err
		}
	}
	// The stream must end without error, not only the tar trailer.
	if _, err := io.Copy(io.Discard, cr); err != nil {
		return fmt.Errorf("reading the archive: %w", err)
	}
	return fixDirs(rt, dirs)
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

func extractEntry(rt *os.Root, tr *tar.Reader, h *tar.Header, name string, dirs map[string]dirMeta) error {
	mode := fs.FileMode(h.Mode).Perm()
	if h.Typeflag == tar.TypeDir {
		if fi, err := rt.Lstat(name); err == nil && !fi.IsDir() {
			if err := rt.RemoveAll(name); err != nil {
				return fmt.Errorf("extracting %q: %w", h.Name, err)
			}
		}
		// Modes come last: a read-only directory must still be filled.
		if err := rt.MkdirAll(name, 0o700); err != nil {
			return fmt.Errorf("extracting %q: %w", h.Name, err)
		}
		dirs[name] = dirMeta{mode: mode, mtime: h.ModTime}
		return nil
	}
	if err := clearFor(rt, name); err != nil {
		return fmt.Errorf("extracting %q: %w", h.Name, err)
	}
	switch h.Typeflag {
	case tar.TypeReg:
		f, err := rt.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("extracting %q: %w", h.Name, err)
		}
		_, err = io.Copy(f, tr)
		if err == nil {
			err = f.Chmod(mode)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil && !h.ModTime.IsZero() {
			err = rt.Chtimes(name, h.ModTime, h.ModTime)
		}
		if err != nil {
			return fmt.Errorf("extracting %q: %w", h.Name, err)
		}
	case tar.TypeSymlink:
		if err := rt.Symlink(h.Linkname, name); err != nil {
			return fmt.Errorf("extracting %q: %w", h.Name, err)
		}
	case tar.TypeLink:
		target, err := entryPath(h.Linkname)
		if err != nil {
			return err
		}
		if err := rt.Link(target, name); err != nil {
			return fmt.Errorf("extracting the hard link %q to %q: %w", h.Name, h.Linkname, err)
		}
	default:
		return fmt.Errorf("%w: %q has unsupported tar type %q", sandboxes.ErrUnsafeArchive, h.Name, h.Typeflag)
	}
	return nil
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

// fixDirs gives every extracted directory its mode and time, deepest first
// so that a directory closed to us is closed last.
func fixDirs(rt *os.Root, dirs map[string]dirMeta) error {
	var all []string
	err := fs.WalkDir(rt.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != "." {
			all = append(all, filepath.FromSlash(p))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("walking the staging directory: %w", err)
	}
	for _, name := range slices.Backward(all) {
		meta, ok := dirs[name]
		if !ok {
			meta.mode = 0o755
		}
		if err := rt.Chmod(name, meta.mode); err != nil {
			return fmt.Errorf("setting the mode of %q: %w", name, err)
		}
		if !meta.mtime.IsZero() {
			if err := rt.Chtimes(name, meta.mtime, meta.mtime); err != nil {
				return fmt.Errorf("setting the time of %q: %w", name, err)
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
