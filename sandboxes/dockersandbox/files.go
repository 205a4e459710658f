package dockersandbox

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/agentbot/agentbot/sandboxes"
)

// Everything here goes through the copy API (CopyFromContainer,
// CopyToContainer, ContainerStatPath): the image needs no tar. The daemon
// extracts what we send with its own privileges and keeps the owners of the
// tar headers, so entries carry the exec user's uid and gid.
//
// The daemon holds the container's lock while it extracts or while an
// archive it sends is being read: commands cannot start in the meantime.

// ReadFile opens the regular file at rel for reading, following a final
// symbolic link within the container. The reader holds the container's
// lock in the daemon until it is closed: read it and close it before
// running commands. A missing file gives an error matching fs.ErrNotExist;
// a directory or special file one matching sandboxes.ErrInvalid.
func (s *sandbox) ReadFile(ctx context.Context, rel string) (io.ReadCloser, error) {
	src, st, err := s.resolve(ctx, rel)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil, &fs.PathError{Op: "read", Path: rel, Err: fs.ErrNotExist}
	}
	if err != nil {
		return nil, err
	}
	if st.Mode.IsDir() {
		return nil, sandboxes.Invalidf("%s is a directory, not a file", rel)
	}
	if !st.Mode.IsRegular() {
		return nil, sandboxes.Invalidf("%s is not a regular file (mode %s)", rel, st.Mode)
	}
	rc, _, err := s.cli.CopyFromContainer(ctx, s.id, src)
	if cerrdefs.IsNotFound(err) {
		return nil, &fs.PathError{Op: "read", Path: rel, Err: fs.ErrNotExist}
	}
	if err != nil {
		return nil, s.opErr(ctx, err)
	}
	tr := tar.NewReader(rc)
	h, err := tr.Next()
	if err == nil && h.Typeflag != tar.TypeReg {
		err = fmt.Errorf("tar entry of type %q", h.Typeflag)
	}
	if err != nil {
		rc.Close()
		return nil, fmt.Errorf("reading %s: %w", rel, err)
	}
	return &fileReader{Reader: tr, body: rc}, nil
}

type fileReader struct {
	io.Reader
	body io.Closer
}

func (f *fileReader) Close() error { return f.body.Close() }

// WriteFile creates or replaces the file at rel, owned by the exec user,
// with the bytes of r and the permission bits of mode, creating missing
// parent directories (mode 0755, owned by the exec user). A final symbolic
// link to an existing file is followed. r is spooled (in memory, or a
// temporary file when large) first because a tar header needs the size.
func (s *sandbox) WriteFile(ctx context.Context, rel string, r io.Reader, mode fs.FileMode) error {
	target, st, err := s.resolve(ctx, rel)
	switch {
	case err == nil && st.Mode.IsDir():
		return sandboxes.Invalidf("%s is a directory", rel)
	case err == nil:
	case errors.Is(err, syscall.ENOTDIR):
		return sandboxes.Invalidf("%s: a parent is not a directory", rel)
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	// Find the deepest existing ancestor; the others are created. The
	// path has no links any more.
	var missing []string
	dir := path.Dir(target)
	for {
		st, err := s.lstat(ctx, dir)
		if err == nil {
			if !st.Mode.IsDir() {
				return sandboxes.Invalidf("%s: %s is not a directory", rel, strings.TrimPrefix(dir, Root+"/"))
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if !inside(dir) || dir == Root {
			return fmt.Errorf("the workspace %s is missing", Root)
		}
		missing = append(missing, path.Base(dir))
		dir = path.Dir(dir)
	}
	full := target

	size, body, cleanup, err := spool(r)
	if err != nil {
		return fmt.Errorf("reading the contents of %s: %w", rel, err)
	}
	defer cleanup()

	pr, pw := io.Pipe()
	written := make(chan struct{})
	go func() {
		defer close(written)
		tw := tar.NewWriter(pw)
		now := time.Now()
		name := ""
		var err error
		for i := len(missing) - 1; i >= 0 && err == nil; i-- {
			name = path.Join(name, missing[i])
			err = tw.WriteHeader(s.dirHeader(name+"/", 0o755, now))
		}
		if err == nil {
			err = tw.WriteHeader(&tar.Header{
				Name: path.Join(name, path.Base(full)), Typeflag: tar.TypeReg, Size: size,
				Mode: int64(mode.Perm()), Uid: s.user.uid, Gid: s.user.gid, ModTime: now, Format: tar.FormatPAX,
			})
		}
		if err == nil {
			_, err = io.Copy(tw, body)
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	err = s.cli.CopyToContainer(ctx, s.id, dir, pr, container.CopyToContainerOptions{})
	pr.CloseWithError(errAborted)
	<-written // r and the spool are not touched after return
	if err != nil {
		return s.opErr(ctx, fmt.Errorf("copying %s into the container: %w", rel, err))
	}
	return nil
}

// dirHeader is a directory entry owned by the exec user.
func (s *sandbox) dirHeader(name string, mode fs.FileMode, t time.Time) *tar.Header {
	return &tar.Header{
		Name: name, Typeflag: tar.TypeDir, Mode: int64(mode.Perm()),
		Uid: s.user.uid, Gid: s.user.gid, ModTime: t, Format: tar.FormatPAX,
	}
}

// spoolMemory is how much of a file WriteFile keeps in memory.
const spoolMemory = 4 << 20

// spool returns the size and contents of r, buffered so the size is known.
func spool(r io.Reader) (int64, io.Reader, func(), error) {
	nop := func() {}
	switch v := r.(type) {
	case *bytes.Reader:
		return int64(v.Len()), v, nop, nil
	case *strings.Reader:
		return int64(v.Len()), v, nop, nil
	case *bytes.Buffer:
		return int64(v.Len()), v, nop, nil
	}
	var buf bytes.Buffer
	n, err := io.CopyN(&buf, r, spoolMemory+1)
	if err == io.EOF {
		return n, &buf, nop, nil
	}
	if err != nil {
		return 0, nil, nop, err
	}
	f, err := os.CreateTemp("", "agentbot-docker-write-*")
	if err != nil {
		return 0, nil, nop, err
	}
	cleanup := func() { f.Close(); os.Remove(f.Name()) }
	n, err = io.Copy(f, io.MultiReader(&buf, r))
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		cleanup()
		return 0, nil, nop, err
	}
	return n, f, cleanup, nil
}

// Archive writes the workspace to w as a tar stream with names relative to
// the workspace root (the root itself is left out). The daemon holds the
// container's lock while it streams: commands wait until w has taken it
// all.
func (s *sandbox) Archive(ctx context.Context, w io.Writer) error {
	tw := tar.NewWriter(w)
	buf := make([]byte, copyBufSize)
	err := s.ArchiveEntries(ctx, func(h *tar.Header, body io.Reader) error {
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if body == nil {
			return nil
		}
		if _, err := io.CopyBuffer(tw, body, buf); err != nil {
			return fmt.Errorf("copying %s: %w", h.Name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

var _ sandboxes.EntryArchiver = (*sandbox)(nil)

// ArchiveEntries hands emit the entries Archive writes, in the same order,
// as sandboxes.EntryArchiver says; Snapshot uses it. They come from one
// archive of the daemon's, read once.
func (s *sandbox) ArchiveEntries(ctx context.Context, emit func(h *tar.Header, body io.Reader) error) error {
	rc, _, err := s.cli.CopyFromContainer(ctx, s.id, Root)
	if cerrdefs.IsNotFound(err) {
		if err := s.opErr(ctx, err); errors.Is(err, sandboxes.ErrNotFound) {
			return err
		}
		return fmt.Errorf("the workspace %s is missing", Root)
	}
	if err != nil {
		return s.opErr(ctx, err)
	}
	defer rc.Close()
	// Headers are read 512 bytes at a time: buffered, each is not a
	// read of the response body.
	tr := tar.NewReader(bufio.NewReaderSize(rc, copyBufSize))
	base := path.Base(Root)
	var out tar.Header // reused: emit keeps nothing
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("reading the workspace archive: %w", err)
		}
		name := strings.TrimPrefix(h.Name, "./")
		if name == base || name == base+"/" {
			continue
		}
		rel, ok := strings.CutPrefix(name, base+"/")
		if !ok {
			return fmt.Errorf("unexpected entry %q in the workspace archive", h.Name)
		}
		if top, _, _ := strings.Cut(rel, "/"); strings.HasPrefix(top, stagingPrefix) || strings.HasPrefix(top, oldPrefix) {
			continue // a Restore at work
		}
		out = tar.Header{
			Name: rel, Typeflag: h.Typeflag, Linkname: h.Linkname, Size: h.Size, Mode: h.Mode,
			Uid: h.Uid, Gid: h.Gid, Uname: h.Uname, Gname: h.Gname, ModTime: h.ModTime, Format: tar.FormatPAX,
		}
		if h.Typeflag == tar.TypeLink {
			out.Linkname = strings.TrimPrefix(strings.TrimPrefix(h.Linkname, "./"), base+"/")
		}
		var body io.Reader
		if h.Typeflag == tar.TypeReg {
			body = tr
		}
		if err := emit(&out, body); err != nil {
			return err
		}
	}
	return nil
}

// copyBufSize is the buffer archives are read and copied through.
const copyBufSize = 256 << 10

// errAborted closes the pipe to the daemon when the copy ended first.
var errAborted = errors.New("copy into the container ended")

// Names of Restore's own directories in the workspace; Archive leaves them
// out and the swap does not move them.
const (
	stagingPrefix = ".agentbot-restore-"
	oldPrefix     = ".agentbot-old-"
)

// swapScript swaps the tree of the staging directory $1 in for the
// workspace's, which goes to $2 (both directly in the workspace, so every
// move is a rename within one filesystem), then deletes it. It runs as the
// exec user, who owns the workspace and everything in it. The workspace
// root is the volume's mount point and cannot itself be renamed, so the
// swap moves its entries: out into $2, then in from $1. A directory that
// changes parent needs write permission on itself (its ".." changes), so a
// read-only one gets u+w for its move. On a failed move everything moves
// back and it exits 1; exit 3 means the swap is done but the old tree is
// left.
const swapScript = `ws=` + Root + `
s=$1
o=$2
[ -d "$s" ] || { echo "staging directory $s is missing" >&2; exit 1; }
mkdir "$o" || exit 1
mv1() {
	d="$2/${1##*/}"
	if [ -d "$1" ] && [ ! -L "$1" ] && [ ! -w "$1" ]; then
		chmod u+w "$1" || return 1
		if mv -f -T "$1" "$d"; then chmod u-w "$d"; return 0; fi
		chmod u-w "$1"
		return 1
	fi
	mv -f -T "$1" "$d"
}
moveall() {
	for e in "$1"/* "$1"/.[!.]* "$1"/..?*; do
		[ -e "$e" ] || [ -L "$e" ] || continue
		if [ "$1" = "$ws" ]; then
			case ${e##*/} in ` + stagingPrefix + `*|` + oldPrefix + `*) continue ;; esac
		fi
		mv1 "$e" "$2" || return 1
	done
}
if ! moveall "$ws" "$o"; then
	moveall "$o" "$ws"
	rmdir "$o"
	exit 1
fi
if ! moveall "$s" "$ws"; then
	moveall "$ws" "$s"
	moveall "$o" "$ws"
	rmdir "$o"
	exit 1
fi
rmdir "$s"
find "$o" -type d -exec chmod u+rwx {} + 2>/dev/null
rm -rf "$o" || exit 3`

// Restore replaces the workspace with the tree of the tar stream r.
//
// It extracts r through the copy API, every entry owned by the exec user,
// into a staging directory in the workspace volume (hidden, and left out
// of Archive). Only when all of r was read without error and the daemon
// took all of it, an exec swaps the staging tree in (see swapScript). On
// any error before the swap, the staging directory is removed and the
// workspace was never touched; a swap that fails midway moves everything
// back.
//
// The swap is quick (one rename per top-level entry) but not atomic:
// commands running during it may see part of the old or the new tree.
func (s *sandbox) Restore(ctx context.Context, r io.Reader) error {
	tr := tar.NewReader(r)
	return s.RestoreEntries(ctx, func() (*tar.Header, io.Reader, error) {
		h, err := tr.Next()
		if err == io.EOF {
			// An error after the last entry fails the restore too.
			if _, err := io.Copy(io.Discard, r); err != nil {
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

var _ sandboxes.EntryRestorer = (*sandbox)(nil)

// RestoreEntries does what Restore does with the entries next gives, as
// sandboxes.EntryRestorer says; Restore uses it with the entries of its tar
// stream.
func (s *sandbox) RestoreEntries(ctx context.Context, next func() (*tar.Header, io.Reader, error)) error {
	tag := randHex(6)
	staging := path.Join(Root, stagingPrefix+tag)
	old := path.Join(Root, oldPrefix+tag)

	pr, pw := io.Pipe()
	produced := make(chan error, 1)
	go func() {
		// Buffered, so that the pipe hands the client large chunks
		// rather than every header and padding on its own.
		bw := bufio.NewWriterSize(pw, copyBufSize)
		err := s.stage(bw, next, path.Base(staging))
		if err == nil {
			err = bw.Flush()
		}
		pw.CloseWithError(err)
		produced <- err
	}()
	copyErr := s.cli.CopyToContainer(ctx, s.id, Root, pr, container.CopyToContainerOptions{})
	pr.CloseWithError(errAborted)
	prodErr := <-produced
	if prodErr != nil || copyErr != nil {
		s.cleanup(ctx, staging)
		if prodErr != nil && !errors.Is(prodErr, errAborted) {
			return prodErr
		}
		if copyErr == nil {
			copyErr = prodErr
		}
		return s.opErr(ctx, fmt.Errorf("copying the archive into the container: %w", copyErr))
	}
	_, stderr, code, err := s.run(ctx, s.user, swapScript, staging, old)
	switch {
	case err == nil && code == 0:
		return nil
	case err == nil && code == 3:
		// The workspace is restored; the old tree could not all be
		// deleted by the user. That is garbage, not a failed restore.
		s.cleanup(ctx, old)
		return nil
	case err == nil:
		err = fmt.Errorf("exit code %d: %s", code, strings.TrimSpace(stderr))
	}
	s.cleanup(ctx, staging)
	return s.opErr(ctx, fmt.Errorf("swapping the restored tree into the workspace: %w", err))
}

// stage writes the entries next gives to w as a tar stream, every entry
// moved below base and owned by the exec user, after a root entry for base
// itself (mode 0700: only the user sees the tree while it is copied). It
// adds entries for parent directories the stream does not hold (the daemon
// would create them owned by root). It goes on until next returns io.EOF;
// next's errors are returned as they are, and errors writing w match
// errAborted.
func (s *sandbox) stage(w io.Writer, next func() (*tar.Header, io.Reader, error), base string) error {
	tw := tar.NewWriter(w)
	now := time.Now()
	if err := tw.WriteHeader(s.dirHeader(base+"/", 0o700, now)); err != nil {
		return err
	}
	dirs := make(map[string]bool)
	buf := make([]byte, copyBufSize)
	var out tar.Header // reused: tw keeps nothing of it
	for {
		h, body, err := next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		name := path.Clean(h.Name)
		if name == "." {
			continue
		}
		if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("%w: entry %q leaves the workspace", sandboxes.ErrUnsafeArchive, h.Name)
		}
		for i := 0; i < len(name); i++ {
			if name[i] == '/' && !dirs[name[:i]] {
				dirs[name[:i]] = true
				if err := tw.WriteHeader(s.dirHeader(base+"/"+name[:i]+"/", 0o755, now)); err != nil {
					return err
				}
			}
		}
		out = tar.Header{
			Name: base + "/" + name, Mode: h.Mode & 0o777, ModTime: h.ModTime,
			Uid: s.user.uid, Gid: s.user.gid, Format: tar.FormatPAX,
		}
		switch h.Typeflag {
		case tar.TypeReg:
			out.Typeflag, out.Size = tar.TypeReg, h.Size
		case tar.TypeDir:
			out.Typeflag = tar.TypeDir
			out.Name += "/"
			dirs[name] = true
		case tar.TypeSymlink:
			out.Typeflag, out.Linkname = tar.TypeSymlink, h.Linkname
		case tar.TypeLink:
			out.Typeflag, out.Linkname = tar.TypeLink, base+"/"+path.Clean(h.Linkname)
		default:
			return fmt.Errorf("%w: entry %q has unsupported type %q", sandboxes.ErrUnsafeArchive, h.Name, h.Typeflag)
		}
		if err := tw.WriteHeader(&out); err != nil {
			return err
		}
		if out.Typeflag != tar.TypeReg {
			continue
		}
		if body == nil {
			return fmt.Errorf("reading %s from the archive: no contents", name)
		}
		// Through buf: neither end has a ReadFrom or WriteTo to spare
		// the copy, and io.Copy would allocate a buffer per file.
		if _, err := io.CopyBuffer(tw, body, buf); err != nil {
			if errors.Is(err, errAborted) {
				return err
			}
			return fmt.Errorf("reading %s from the archive: %w", name, err)
		}
	}
	return tw.Close()
}

// cleanup removes a staging or old tree of Restore, on its own time: ctx
// may be done. Failures are not reported; they leave a hidden directory
// that Archive ignores.
func (s *sandbox) cleanup(ctx context.Context, p string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	_ = s.removeTree(ctx, p)
}

// removeTree removes the tree p in the workspace, whatever the permissions
// and owners inside it. The daemon, which keeps its capabilities, replaces
// the tree by an empty file owned by the exec user (the copy API removes
// what a file of the archive overwrites); the user then unlinks the file.
// The daemon serialises copies with the container's lock, so a copy that
// failed midway has stopped writing into p by then.
func (s *sandbox) removeTree(ctx context.Context, p string) error {
	t, err := headerTar(&tar.Header{Name: path.Base(p), Typeflag: tar.TypeReg, Mode: 0o600,
		Uid: s.user.uid, Gid: s.user.gid, ModTime: time.Now()})
	if err != nil {
		return err
	}
	if err := s.cli.CopyToContainer(ctx, s.id, path.Dir(p), t, container.CopyToContainerOptions{AllowOverwriteDirWithFile: true}); err != nil {
		return err
	}
	return s.runOK(ctx, s.user, `rm -f "$1"`, p)
}

// prepareWorkspace runs on a created, not yet started container, whose
// workspace volume Docker has filled from the image's /workspace. It gives
// the workspace and everything in it to the exec user: Restore's swap runs
// as that user and must be able to move every entry. The copy API does it,
// since nobody in the container can chown: the tree is copied out and back
// with the user as owner of every entry.
func prepareWorkspace(ctx context.Context, cli *client.Client, id string, u execUser) error {
	rc, _, err := cli.CopyFromContainer(ctx, id, Root)
	if err != nil {
		return err
	}
	defer rc.Close()
	f, err := os.CreateTemp("", "agentbot-docker-workspace-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	tr := tar.NewReader(rc)
	tw := tar.NewWriter(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("reading the image's %s: %w", Root, err)
		}
		h.Uid, h.Gid, h.Uname, h.Gname = u.uid, u.gid, "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	return cli.CopyToContainer(ctx, id, path.Dir(Root), f, container.CopyToContainerOptions{AllowOverwriteDirWithFile: true})
}
