package sandboxes

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
)

// SnapshotInfo describes a snapshot that was written or restored.
type SnapshotInfo struct {
	Files    int   `json:"files"`
	Dirs     int   `json:"dirs"`
	Symlinks int   `json:"symlinks"`
	Bytes    int64 `json:"bytes"` // file contents, uncompressed
	// Skipped names entries left out of a snapshot because they cannot be
	// carried portably (devices, sockets, links that point outside the
	// workspace), at most maxSkipped of them; SkippedCount counts all.
	Skipped      []string `json:"skipped,omitempty"`
	SkippedCount int      `json:"skipped_count,omitempty"`
}

const maxSkipped = 20

func (i *SnapshotInfo) skip(name, why string) {
	i.SkippedCount++
	if len(i.Skipped) < maxSkipped {
		i.Skipped = append(i.Skipped, name+": "+why)
	}
}

// SnapshotContentType is the media type of a portable snapshot.
const SnapshotContentType = "application/vnd.agentbot.snapshot.v1+tar+zstd"

// Snapshot writes the sandbox's workspace to w as a portable snapshot: a
// zstd-compressed tar of workspace-relative paths with their permission
// bits, directories (empty ones too) and symbolic links that stay inside the
// workspace. Owners are dropped. Devices, sockets, FIFOs and links pointing
// outside are left out and listed in the returned info; OutputsDir is left
// out without a word. The snapshot is streamed: memory does not grow with
// the workspace's size.
func (s *Sandbox) Snapshot(ctx context.Context, w io.Writer) (SnapshotInfo, error) {
	info, err := s.snapshot(ctx, w)
	return info, s.err("snapshot", err)
}

func (s *Sandbox) snapshot(ctx context.Context, w io.Writer) (SnapshotInfo, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	archErr := make(chan error, 1)
	go func() {
		err := s.inst.Archive(ctx, pw)
		pw.CloseWithError(err)
		archErr <- err
	}()

	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(2))
	if err != nil {
		pr.CloseWithError(err)
		<-archErr
		return SnapshotInfo{}, err
	}
	info, err := normalize(tar.NewReader(pr), tar.NewWriter(zw))
	if err != nil {
		// Unblock the archiver if it is still writing, then prefer its
		// error: it says why the stream broke.
		pr.CloseWithError(err)
		cancel()
		if aerr := <-archErr; aerr != nil && !errors.Is(aerr, io.ErrClosedPipe) {
			err = aerr
		}
		zw.Close()
		return info, err
	}
	// Drain what the archiver may write after the tar trailer.
	io.Copy(io.Discard, pr)
	if err := <-archErr; err != nil {
		zw.Close()
		return info, err
	}
	return info, zw.Close()
}

// normalize copies an archive from a backend into the portable form.
func normalize(tr *tar.Reader, tw *tar.Writer) (SnapshotInfo, error) {
	var info SnapshotInfo
	files := make(map[string]bool) // regular files written so far, for hard links
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return info, fmt.Errorf("reading workspace archive: %w", err)
		}
		if strings.Contains(h.Name, `\`) {
			info.skip(h.Name, "name holds a backslash, which is not portable")
			continue
		}
		name, err := entryName(h.Name)
		if err != nil {
			return info, err
		}
		if name == "." || inOutputs(name) {
			continue
		}
		out := &tar.Header{
			Name:    name,
			Mode:    h.Mode & 0o777,
			ModTime: h.ModTime.Truncate(time.Second),
			Format:  tar.FormatPAX,
		}
		switch h.Typeflag {
		//lint:ignore SA1019 archives written by old tools still use TypeRegA
		case tar.TypeReg, tar.TypeRegA:
			out.Typeflag = tar.TypeReg
			out.Size = h.Size
			info.Files++
			info.Bytes += h.Size
			files[name] = true
		case tar.TypeDir:
			out.Typeflag = tar.TypeDir
			out.Name += "/"
			info.Dirs++
		case tar.TypeSymlink:
			if err := checkSymlink(name, h.Linkname); err != nil {
				info.skip(name, "symbolic link points outside the workspace")
				continue
			}
			out.Typeflag = tar.TypeSymlink
			out.Linkname = h.Linkname
			out.Mode = 0o777
			info.Symlinks++
		case tar.TypeLink:
			target, err := entryName(h.Linkname)
			if err != nil || !files[target] {
				info.skip(name, "hard link to a file outside the archive")
				continue
			}
			out.Typeflag = tar.TypeLink
			out.Linkname = target
			info.Files++
		default:
			info.skip(name, fmt.Sprintf("not a file, directory or link (tar type %q)", h.Typeflag))
			continue
		}
		if err := tw.WriteHeader(out); err != nil {
			return info, err
		}
		if out.Typeflag == tar.TypeReg {
			if _, err := io.Copy(tw, tr); err != nil {
				return info, fmt.Errorf("copying %s: %w", name, err)
			}
		}
	}
	return info, tw.Close()
}

// Restore replaces the sandbox's workspace with the tree of the portable
// snapshot read from r. Every entry is checked before anything is touched in
// the workspace: an absolute path, "..", a symbolic link or hard link that
// leads outside the workspace, an entry below a symbolic link, or a special
// file makes Restore fail with ErrUnsafeArchive, and a corrupt stream fails
// too; in every failure the workspace is left as it was.
func (s *Sandbox) Restore(ctx context.Context, r io.Reader) (SnapshotInfo, error) {
	info, err := s.restore(ctx, r)
	return info, s.err("restore", err)
}

func (s *Sandbox) restore(ctx context.Context, r io.Reader) (SnapshotInfo, error) {
	zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(128<<20))
	if err != nil {
		return SnapshotInfo{}, err
	}
	defer zr.Close()

	// An empty stream reads as a tar with no entries, which would wipe
	// the workspace: a snapshot, even of an empty workspace, is never
	// empty (it holds the tar trailer).
	br := bufio.NewReader(zr)
	if _, err := br.Peek(1); err != nil {
		if err == io.EOF {
			err = errors.New("the snapshot is empty")
		}
		return SnapshotInfo{}, fmt.Errorf("%w: %v", ErrUnsafeArchive, err)
	}
	pr, pw := io.Pipe()
	var info SnapshotInfo
	checkErr := make(chan error, 1)
	go func() {
		var err error
		info, err = checkArchive(tar.NewReader(br), tar.NewWriter(pw))
		pw.CloseWithError(err)
		checkErr <- err
	}()
	rerr := s.inst.Restore(ctx, pr)
	if rerr == nil {
		// A backend may stop after its last entry, before the tar
		// trailer: let the checker finish.
		io.Copy(io.Discard, pr)
	}
	pr.CloseWithError(errRestoreEnded)
	cerr := <-checkErr
	if cerr != nil && !errors.Is(cerr, errRestoreEnded) {
		// The checker's reason (an unsafe entry, a corrupt stream) is
		// the one to tell, whatever the backend made of the broken pipe.
		return info, cerr
	}
	return info, rerr
}

// errRestoreEnded is what the checker's writes fail with once the backend
// has stopped reading: the backend's own result is the one to report.
var errRestoreEnded = errors.New("the backend stopped reading the archive")

// checkArchive copies a snapshot, entry by entry, refusing the first unsafe
// one.
func checkArchive(tr *tar.Reader, tw *tar.Writer) (SnapshotInfo, error) {
	var info SnapshotInfo
	files := make(map[string]bool)
	links := make(map[string]bool)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return info, fmt.Errorf("%w: %v", ErrUnsafeArchive, err)
		}
		name, err := entryName(h.Name)
		if err != nil {
			return info, err
		}
		if name == "." {
			continue
		}
		if p := underLink(name, links); p != "" {
			return info, fmt.Errorf("%w: %q lies below the symbolic link %q", ErrUnsafeArchive, h.Name, p)
		}
		out := &tar.Header{Name: name, Mode: h.Mode & 0o777, ModTime: h.ModTime, Format: tar.FormatPAX}
		switch h.Typeflag {
		//lint:ignore SA1019 archives written by old tools still use TypeRegA
		case tar.TypeReg, tar.TypeRegA:
			out.Typeflag, out.Size = tar.TypeReg, h.Size
			info.Files++
			info.Bytes += h.Size
			files[name] = true
		case tar.TypeDir:
			out.Typeflag = tar.TypeDir
			out.Name += "/"
			info.Dirs++
		case tar.TypeSymlink:
			if err := checkSymlink(name, h.Linkname); err != nil {
				return info, err
			}
			out.Typeflag, out.Linkname, out.Mode = tar.TypeSymlink, h.Linkname, 0o777
			links[name] = true
			info.Symlinks++
		case tar.TypeLink:
			target, err := entryName(h.Linkname)
			if err != nil {
				return info, err
			}
			if !files[target] {
				return info, fmt.Errorf("%w: hard link %q to %q, which is not an earlier file of the archive",
					ErrUnsafeArchive, h.Name, h.Linkname)
			}
			out.Typeflag, out.Linkname = tar.TypeLink, target
			info.Files++
		default:
			return info, fmt.Errorf("%w: %q has unsupported tar type %q", ErrUnsafeArchive, h.Name, h.Typeflag)
		}
		delete(files, name)
		if out.Typeflag == tar.TypeReg {
			files[name] = true
		}
		if out.Typeflag != tar.TypeSymlink {
			delete(links, name)
		}
		if err := tw.WriteHeader(out); err != nil {
			return info, err
		}
		if out.Typeflag == tar.TypeReg {
			if _, err := io.Copy(tw, tr); err != nil {
				if errors.Is(err, errRestoreEnded) {
					return info, err
				}
				return info, fmt.Errorf("%w: %s: %v", ErrUnsafeArchive, name, err)
			}
		}
	}
	return info, tw.Close()
}

// inOutputs reports whether the clean workspace-relative name is OutputsDir
// or below it.
func inOutputs(name string) bool {
	rest, ok := strings.CutPrefix(name, OutputsDir)
	return ok && (rest == "" || rest[0] == '/')
}

// entryName cleans an archive entry name ("./a/b/", "a/b") to "a/b",
// refusing absolute names and names that climb out.
func entryName(n string) (string, error) {
	if n == "" || strings.IndexByte(n, 0) >= 0 || strings.HasPrefix(n, "/") || strings.Contains(n, "\\") {
		return "", fmt.Errorf("%w: bad entry name %q", ErrUnsafeArchive, n)
	}
	for _, part := range strings.Split(n, "/") {
		if part == ".." {
			return "", fmt.Errorf("%w: entry name %q climbs out of the workspace", ErrUnsafeArchive, n)
		}
	}
	return path.Clean(n), nil
}

// checkSymlink refuses a link whose target, resolved from the link's
// directory, leaves the workspace. Absolute targets are refused: they mean
// different things in different sandboxes.
func checkSymlink(name, target string) error {
	if target == "" || path.IsAbs(target) || strings.IndexByte(target, 0) >= 0 {
		return fmt.Errorf("%w: symbolic link %q -> %q is absolute or empty", ErrUnsafeArchive, name, target)
	}
	depth := strings.Count(path.Dir(name), "/") + 1
	if path.Dir(name) == "." {
		depth = 0
	}
	named := false
	for _, part := range strings.Split(target, "/") {
		switch part {
		case "..":
			// After a name, ".." cannot be resolved lexically: the
			// name may be a link (a/l1 -> .., then l2 -> a/l1/..).
			if named {
				return fmt.Errorf("%w: symbolic link %q -> %q climbs with .. after a name", ErrUnsafeArchive, name, target)
			}
			depth--
			if depth < 0 {
				return fmt.Errorf("%w: symbolic link %q -> %q points outside the workspace", ErrUnsafeArchive, name, target)
			}
		case ".", "":
		default:
			named = true
			depth++
		}
	}
	return nil
}

// underLink returns the first proper prefix of name that is a symbolic link
// of the archive, or "".
func underLink(name string, links map[string]bool) string {
	if len(links) == 0 {
		return ""
	}
	for i := 0; i < len(name); i++ {
		if name[i] == '/' && links[name[:i]] {
			return name[:i]
		}
	}
	return ""
}
