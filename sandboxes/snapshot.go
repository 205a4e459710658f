package sandboxes

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"runtime"
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

// EntryArchiver is an optional interface of an Instance that can hand
// Snapshot the workspace's entries one at a time rather than as a tar
// stream. Snapshot then writes the portable form in one pass; from Archive
// every entry is encoded as tar, piped, and parsed again first. Without it,
// Snapshot uses Archive.
type EntryArchiver interface {
	// ArchiveEntries calls emit with every entry Archive would write, in
	// the same order: h is the header Archive would write and, for a
	// regular file, body gives its h.Size bytes of contents (nil for any
	// other entry). emit keeps neither once it returns, so both may be
	// reused. A body that cannot give h.Size bytes returns an error from
	// Read. An error from emit ends the walk and is returned, wrapped or
	// not; so is an error reading the workspace.
	ArchiveEntries(ctx context.Context, emit func(h *tar.Header, body io.Reader) error) error
}

// Compression of snapshots. The window is zstd -1's, and the fastest level
// of klauspost/compress compresses workspaces a little better than zstd -1
// does. Like zstd -T0, the stream is cut into chunks compressed in
// parallel, each a zstd frame of its own: readers of zstd (zstd -d, and
// Restore of every release) read concatenated frames as one stream.
const (
	snapshotWindow = 512 << 10
	// snapshotChunk is the input of one frame: large enough that the
	// matches a frame cannot reach in the one before cost little.
	snapshotChunk = 1 << 20
	// maxSnapshotJobs caps the chunks one snapshot compresses at once,
	// and so its memory (two buffers of about snapshotChunk per chunk).
	maxSnapshotJobs = 4
)

// A frameWriter compresses what is written to it into w as zstd frames,
// one per snapshotChunk bytes of input, up to n of them at once in
// goroutines of their own, written in order. Its memory is n+1 chunks and
// their compressed forms, whatever the length of the stream.
type frameWriter struct {
	w     io.Writer
	enc   *zstd.Encoder // for EncodeAll, which is safe for concurrent use
	n     int
	fill  *frameJob   // the chunk being filled
	queue []*frameJob // chunks being compressed, oldest first
	free  []*frameJob
	wrote bool  // a frame was started
	err   error // the first error writing to w
}

type frameJob struct {
	in, out []byte
	done    chan struct{}
}

func newFrameWriter(w io.Writer) (*frameWriter, error) {
	n := min(runtime.GOMAXPROCS(0), maxSnapshotJobs)
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithWindowSize(snapshotWindow), zstd.WithEncoderConcurrency(n))
	if err != nil {
		return nil, err
	}
	return &frameWriter{w: w, enc: enc, n: n}, nil
}

func (fw *frameWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		if fw.err != nil {
			return written, fw.err
		}
		if fw.fill == nil {
			fw.fill = fw.job()
		}
		j := fw.fill
		k := min(len(p), snapshotChunk-len(j.in))
		j.in = append(j.in, p[:k]...)
		p, written = p[k:], written+k
		if len(j.in) == snapshotChunk {
			fw.start()
		}
	}
	return written, fw.err
}

// job returns an empty chunk, reused if one is free.
func (fw *frameWriter) job() *frameJob {
	if k := len(fw.free); k > 0 {
		j := fw.free[k-1]
		fw.free = fw.free[:k-1]
		j.in, j.out = j.in[:0], j.out[:0]
		return j
	}
	// Incompressible input is stored, with 3 bytes per block of 128 KiB
	// and a frame header: out never grows.
	return &frameJob{in: make([]byte, 0, snapshotChunk), out: make([]byte, 0, snapshotChunk+snapshotChunk>>8+64)}
}

// start compresses the chunk being filled, once one of n chunks at work
// is done and written, if need be.
func (fw *frameWriter) start() {
	if len(fw.queue) == fw.n {
		fw.writeOldest()
	}
	j := fw.fill
	fw.fill = nil
	fw.wrote = true
	j.done = make(chan struct{})
	go func() {
		j.out = fw.enc.EncodeAll(j.in, j.out)
		close(j.done)
	}()
	fw.queue = append(fw.queue, j)
}

// writeOldest waits for the oldest chunk at work and writes its frame,
// unless writing failed before.
func (fw *frameWriter) writeOldest() {
	j := fw.queue[0]
	fw.queue = fw.queue[1:]
	<-j.done
	if fw.err == nil {
		_, fw.err = fw.w.Write(j.out)
	}
	fw.free = append(fw.free, j)
}

// Close compresses and writes what is left (a frame, at least) and waits
// for every chunk at work.
func (fw *frameWriter) Close() error {
	if fw.fill != nil && len(fw.fill.in) > 0 || !fw.wrote {
		if fw.fill == nil {
			fw.fill = fw.job()
		}
		fw.start()
	}
	for len(fw.queue) > 0 {
		fw.writeOldest()
	}
	return fw.err
}

// abort waits for the chunks at work and writes nothing more.
func (fw *frameWriter) abort() {
	if fw.err == nil {
		fw.err = errors.New("the snapshot was abandoned")
	}
	for len(fw.queue) > 0 {
		fw.writeOldest()
	}
}

func (s *Sandbox) snapshot(ctx context.Context, w io.Writer) (SnapshotInfo, error) {
	zw, err := newFrameWriter(w)
	if err != nil {
		return SnapshotInfo{}, err
	}
	norm := newNormalizer(tar.NewWriter(zw))
	if ea, ok := s.inst.(EntryArchiver); ok {
		err = ea.ArchiveEntries(ctx, norm.add)
	} else {
		err = s.archiveStream(ctx, norm)
	}
	if err == nil {
		err = norm.tw.Close()
	}
	if err != nil {
		zw.abort()
		return norm.info, err
	}
	return norm.info, zw.Close()
}

// archiveStream feeds the tar stream of the backend's Archive to n.
func (s *Sandbox) archiveStream(ctx context.Context, n *normalizer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	archErr := make(chan error, 1)
	go func() {
		// Buffered, so that the pipe hands over large chunks rather
		// than every header and padding on its own.
		bw := bufio.NewWriterSize(pw, streamBufSize)
		err := s.inst.Archive(ctx, bw)
		if err == nil {
			err = bw.Flush()
		}
		pw.CloseWithError(err)
		archErr <- err
	}()
	tr := tar.NewReader(bufio.NewReaderSize(pr, streamBufSize))
	err := n.readAll(tr)
	if err != nil {
		// Unblock the archiver if it is still writing, then prefer its
		// error: it says why the stream broke.
		pr.CloseWithError(err)
		cancel()
		if aerr := <-archErr; aerr != nil && !errors.Is(aerr, io.ErrClosedPipe) {
			err = aerr
		}
		return err
	}
	// Drain what the archiver may write after the tar trailer.
	io.Copy(io.Discard, pr)
	return <-archErr
}

// streamBufSize is the buffer of tar streams between goroutines.
const streamBufSize = 256 << 10

// normalize copies an archive from a backend into the portable form.
func normalize(tr *tar.Reader, tw *tar.Writer) (SnapshotInfo, error) {
	n := newNormalizer(tw)
	err := n.readAll(tr)
	if err == nil {
		err = tw.Close()
	}
	return n.info, err
}

// A normalizer writes a backend's entries to tw in the portable form,
// counting them in info.
type normalizer struct {
	tw    *tar.Writer
	info  SnapshotInfo
	files map[string]bool // regular files written so far, for hard links
	body  io.LimitedReader
	buf   []byte
}

func newNormalizer(tw *tar.Writer) *normalizer {
	return &normalizer{tw: tw, files: make(map[string]bool), buf: make([]byte, copyBufSize)}
}

// copyBufSize is the buffer file contents are copied through.
const copyBufSize = 128 << 10

// readAll adds every entry of tr.
func (n *normalizer) readAll(tr *tar.Reader) error {
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading workspace archive: %w", err)
		}
		if err := n.add(h, tr); err != nil {
			return err
		}
	}
}

// add writes the entry h, with the contents body of a regular file, or
// skips it.
func (n *normalizer) add(h *tar.Header, body io.Reader) error {
	info := &n.info
	if strings.Contains(h.Name, `\`) {
		info.skip(h.Name, "name holds a backslash, which is not portable")
		return nil
	}
	name, err := entryName(h.Name)
	if err != nil {
		return err
	}
	if name == "." || inOutputs(name) {
		return nil
	}
	out := tar.Header{
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
		n.files[name] = true
	case tar.TypeDir:
		out.Typeflag = tar.TypeDir
		out.Name += "/"
		info.Dirs++
	case tar.TypeSymlink:
		if err := checkSymlink(name, h.Linkname); err != nil {
			info.skip(name, "symbolic link points outside the workspace")
			return nil
		}
		out.Typeflag = tar.TypeSymlink
		out.Linkname = h.Linkname
		out.Mode = 0o777
		info.Symlinks++
	case tar.TypeLink:
		target, err := entryName(h.Linkname)
		if err != nil || !n.files[target] {
			info.skip(name, "hard link to a file outside the archive")
			return nil
		}
		out.Typeflag = tar.TypeLink
		out.Linkname = target
		info.Files++
	default:
		info.skip(name, fmt.Sprintf("not a file, directory or link (tar type %q)", h.Typeflag))
		return nil
	}
	if err := n.tw.WriteHeader(&out); err != nil {
		return err
	}
	if out.Typeflag != tar.TypeReg || out.Size == 0 {
		return nil
	}
	if body == nil {
		return fmt.Errorf("copying %s: no contents", name)
	}
	// Through n.buf: neither end has a ReadFrom or WriteTo to spare
	// the copy, and io.Copy would allocate a buffer per file.
	n.body = io.LimitedReader{R: body, N: out.Size}
	c, err := io.CopyBuffer(n.tw, &n.body, n.buf)
	n.body.R = nil
	if err == nil && c < out.Size {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return fmt.Errorf("copying %s: %w", name, err)
	}
	return nil
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

// EntryRestorer is an optional interface of an Instance that can take a
// snapshot's entries one at a time rather than as a tar stream: Restore then
// hands it each entry as it is checked. For Instance.Restore the checked
// entries are written as tar again, piped, and parsed by the backend.
// Without it, Restore uses Instance.Restore.
type EntryRestorer interface {
	// RestoreEntries does what Restore does, with the entries next gives
	// in order until it returns io.EOF: h is a checked entry and, for a
	// regular file, body gives its h.Size bytes of contents (nil for any
	// other entry); both are good until the next call of next, which may
	// come from any goroutine, one call at a time, until RestoreEntries
	// returns. Any other error from next, or from reading a body, must fail
	// the restore and leave the workspace as it was; RestoreEntries returns
	// it, wrapped or not.
	RestoreEntries(ctx context.Context, next func() (h *tar.Header, body io.Reader, err error)) error
}

// maxRestoreDecoders caps the blocks of a snapshot decoded at once, ahead
// of the backend that writes the files.
const maxRestoreDecoders = 4

func (s *Sandbox) restore(ctx context.Context, r io.Reader) (SnapshotInfo, error) {
	// More than one decoder decodes in goroutines of its own, ahead of
	// the backend, which mostly waits for system calls.
	zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(min(max(runtime.GOMAXPROCS(0), 2), maxRestoreDecoders)),
		zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxWindow(128<<20))
	if err != nil {
		return SnapshotInfo{}, err
	}
	defer zr.Close()

	// An empty stream reads as a tar with no entries, which would wipe
	// the workspace: a snapshot, even of an empty workspace, is never
	// empty (it holds the tar trailer).
	br := bufio.NewReaderSize(zr, streamBufSize)
	if _, err := br.Peek(1); err != nil {
		if err == io.EOF {
			err = errors.New("the snapshot is empty")
		}
		return SnapshotInfo{}, fmt.Errorf("%w: %v", ErrUnsafeArchive, err)
	}
	c := newChecker(tar.NewReader(br))
	if er, ok := s.inst.(EntryRestorer); ok {
		rerr := er.RestoreEntries(ctx, c.next)
		if rerr == nil {
			// A backend that stopped early still gets no unsafe
			// entry past the checker unreported.
			for {
				if _, _, err := c.next(); err != nil {
					break
				}
			}
		}
		if c.err != nil {
			// The checker's reason (an unsafe entry, a corrupt
			// stream) is the one to tell, whatever the backend made
			// of it.
			return c.info, c.err
		}
		return c.info, rerr
	}

	pr, pw := io.Pipe()
	checkErr := make(chan error, 1)
	go func() {
		// Buffered, so that the pipe hands over large chunks rather
		// than every header and padding on its own.
		bw := bufio.NewWriterSize(pw, streamBufSize)
		err := c.writeAll(tar.NewWriter(bw))
		if err == nil {
			err = bw.Flush()
		}
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
		return c.info, cerr
	}
	return c.info, rerr
}

// errRestoreEnded is what the checker's writes fail with once the backend
// has stopped reading the archive: the backend's own result is the one to
// report.
var errRestoreEnded = errors.New("the backend stopped reading the archive")

// checkArchive copies a snapshot, entry by entry, refusing the first unsafe
// one.
func checkArchive(tr *tar.Reader, tw *tar.Writer) (SnapshotInfo, error) {
	c := newChecker(tr)
	err := c.writeAll(tw)
	return c.info, err
}

// A checker reads a snapshot entry by entry, refusing the first unsafe
// one, and counts what it passes on in info.
type checker struct {
	tr    *tar.Reader
	info  SnapshotInfo
	files map[string]bool // regular files so far, for hard links
	links map[string]bool // symbolic links so far
	out   tar.Header      // the entry next returned
	body  checkedBody
	err   error // the first error next returned, or a body's
	done  bool  // next returned io.EOF
}

func newChecker(tr *tar.Reader) *checker {
	c := &checker{tr: tr, files: make(map[string]bool), links: make(map[string]bool)}
	c.body.c = c
	return c
}

// next returns the next safe entry and, for a regular file, its contents,
// io.EOF after the last one, or the error that refuses the snapshot. After
// an error or io.EOF it returns the same again.
func (c *checker) next() (*tar.Header, io.Reader, error) {
	if c.err != nil {
		return nil, nil, c.err
	}
	if c.done {
		return nil, nil, io.EOF
	}
	h, err := c.advance()
	switch {
	case err == io.EOF:
		c.done = true
		return nil, nil, io.EOF
	case err != nil:
		c.err = err
		return nil, nil, err
	case h.Typeflag == tar.TypeReg:
		c.body.name = h.Name
		return h, &c.body, nil
	}
	return h, nil, nil
}

// advance reads up to the next entry and checks it.
func (c *checker) advance() (*tar.Header, error) {
	for {
		h, err := c.tr.Next()
		if err == io.EOF {
			return nil, io.EOF
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnsafeArchive, err)
		}
		name, err := entryName(h.Name)
		if err != nil {
			return nil, err
		}
		if name == "." {
			continue
		}
		if p := underLink(name, c.links); p != "" {
			return nil, fmt.Errorf("%w: %q lies below the symbolic link %q", ErrUnsafeArchive, h.Name, p)
		}
		out := tar.Header{Name: name, Mode: h.Mode & 0o777, ModTime: h.ModTime, Format: tar.FormatPAX}
		switch h.Typeflag {
		//lint:ignore SA1019 archives written by old tools still use TypeRegA
		case tar.TypeReg, tar.TypeRegA:
			out.Typeflag, out.Size = tar.TypeReg, h.Size
			c.info.Files++
			c.info.Bytes += h.Size
		case tar.TypeDir:
			out.Typeflag = tar.TypeDir
			out.Name += "/"
			c.info.Dirs++
		case tar.TypeSymlink:
			if err := checkSymlink(name, h.Linkname); err != nil {
				return nil, err
			}
			out.Typeflag, out.Linkname, out.Mode = tar.TypeSymlink, h.Linkname, 0o777
			c.info.Symlinks++
		case tar.TypeLink:
			target, err := entryName(h.Linkname)
			if err != nil {
				return nil, err
			}
			if !c.files[target] {
				return nil, fmt.Errorf("%w: hard link %q to %q, which is not an earlier file of the archive",
					ErrUnsafeArchive, h.Name, h.Linkname)
			}
			out.Typeflag, out.Linkname = tar.TypeLink, target
			c.info.Files++
		default:
			return nil, fmt.Errorf("%w: %q has unsupported tar type %q", ErrUnsafeArchive, h.Name, h.Typeflag)
		}
		delete(c.files, name)
		if out.Typeflag == tar.TypeReg {
			c.files[name] = true
		}
		if out.Typeflag == tar.TypeSymlink {
			c.links[name] = true
		} else {
			delete(c.links, name)
		}
		c.out = out
		return &c.out, nil
	}
}

// writeAll writes every entry next gives to tw, and the tar trailer.
func (c *checker) writeAll(tw *tar.Writer) error {
	buf := make([]byte, copyBufSize)
	for {
		h, body, err := c.next()
		if err == io.EOF {
			return tw.Close()
		}
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if body == nil {
			continue
		}
		// Through buf: neither end has a ReadFrom or WriteTo to spare
		// the copy, and io.Copy would allocate a buffer per file.
		if _, err := io.CopyBuffer(tw, body, buf); err != nil {
			return err
		}
	}
}

// checkedBody reads the contents of the checker's current entry. A read
// error means a corrupt snapshot: it is the checker's error too.
type checkedBody struct {
	c    *checker
	name string
}

func (b *checkedBody) Read(p []byte) (int, error) {
	n, err := b.c.tr.Read(p)
	if err != nil && err != io.EOF {
		err = fmt.Errorf("%w: %s: %v", ErrUnsafeArchive, b.name, err)
		if b.c.err == nil {
			b.c.err = err
		}
	}
	return n, err
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
