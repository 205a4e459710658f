package sandboxes

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// streamInstance is an Instance whose Archive and Restore are functions:
// the plumbing of Sandbox.Snapshot and Sandbox.Restore around a backend is
// what is tested here; real backends run the sandboxtest suite.
type streamInstance struct {
	rootInstance
	archive func(w io.Writer) error
	restore func(r io.Reader) error
}

func (s streamInstance) Archive(ctx context.Context, w io.Writer) error { return s.archive(w) }
func (s streamInstance) Restore(ctx context.Context, r io.Reader) error { return s.restore(r) }

func zstdOf(t *testing.T, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	zw.Write(data)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// extractAll is a backend's Restore that reads the whole tar and returns
// its entry names.
func extractAll(names *[]string) func(io.Reader) error {
	return func(r io.Reader) error {
		tr := tar.NewReader(r)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			if _, err := io.Copy(io.Discard, tr); err != nil {
				return err
			}
			*names = append(*names, h.Name)
		}
	}
}

func TestRestorePlumbing(t *testing.T) {
	ctx := context.Background()
	arch := zstdOf(t, tarOf(t, dirH("./d/", 0o755), reg("d/f", 100000, 0o644), symH("l", "d/f")))
	var names []string
	sb := New("stream", streamInstance{restore: extractAll(&names)})
	info, err := sb.Restore(ctx, bytes.NewReader(arch))
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if got := strings.Join(names, " "); got != "d/ d/f l" {
		t.Errorf("the backend got %q", got)
	}
	if info.Files != 1 || info.Dirs != 1 || info.Symlinks != 1 || info.Bytes != 100000 {
		t.Errorf("info %+v", info)
	}

	// An unsafe entry: the checker's reason is the error, whatever the
	// backend made of its broken stream.
	names = nil
	_, err = sb.Restore(ctx, bytes.NewReader(zstdOf(t, tarOf(t, reg("ok", 10, 0o644), reg("../evil", 10, 0o644)))))
	if !errors.Is(err, ErrUnsafeArchive) || !strings.Contains(err.Error(), "../evil") || !strings.Contains(err.Error(), "stream/r1") {
		t.Errorf("restore of an unsafe archive: %v, want ErrUnsafeArchive naming the entry and the sandbox", err)
	}
	if len(names) > 1 {
		t.Errorf("the backend got %q, past the unsafe entry", names)
	}

	// A backend error comes through when the archive was fine.
	boom := errors.New("workspace is busy")
	sb = New("stream", streamInstance{restore: func(r io.Reader) error { io.Copy(io.Discard, r); return boom }})
	if _, err := sb.Restore(ctx, bytes.NewReader(arch)); !errors.Is(err, boom) {
		t.Errorf("backend error: got %v", err)
	}
}

func TestSnapshotPlumbing(t *testing.T) {
	ctx := context.Background()
	sb := New("stream", streamInstance{archive: func(w io.Writer) error {
		tw := tar.NewWriter(w)
		for _, h := range []*tar.Header{dirH("./", 0o755), dirH("./a/", 0o755), reg("./a/f", 5000, 0o644), specialH("./p", tar.TypeFifo)} {
			tw.WriteHeader(h)
			if h.Typeflag == tar.TypeReg {
				tw.Write(contentOf(h.Name, h.Size))
			}
		}
		return tw.Close()
	}})
	var buf bytes.Buffer
	info, err := sb.Snapshot(ctx, &buf)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if info.Files != 1 || info.Dirs != 1 || info.SkippedCount != 1 {
		t.Errorf("info %+v", info)
	}
	zr, err := zstd.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("the snapshot is not zstd: %v", err)
	}
	hs, bodies := readTar(raw)
	if len(hs) != 2 || hs[0].Name != "a/" || hs[1].Name != "a/f" || !bytes.Equal(bodies["a/f"], contentOf("./a/f", 5000)) {
		t.Errorf("snapshot holds %d entries: %v", len(hs), hs)
	}

	// An archiver's error is the snapshot's error.
	boom := errors.New("container vanished")
	sb = New("stream", streamInstance{archive: func(w io.Writer) error {
		w.Write(tarOf(t, reg("a", 10, 0o644))[:700])
		return boom
	}})
	if _, err := sb.Snapshot(ctx, io.Discard); !errors.Is(err, boom) {
		t.Errorf("snapshot with a failing archiver: %v, want its error", err)
	}
}

// Chained links each pass the lexical check, but a/l1 -> .. makes l2 point
// at the workspace's parent. A later entry named l2 (a file) then writes
// through it on a backend that opens without O_NOFOLLOW.
func TestCheckArchiveChainedSymlinks(t *testing.T) {
	_, _, _, err := runCheck(t, tarOf(t, dirH("a/", 0o755), symH("a/l1", ".."), symH("l2", "a/l1/../x"), reg("l2", 4, 0o644)))
	if !errors.Is(err, ErrUnsafeArchive) {
		t.Errorf("chained links: %v, want ErrUnsafeArchive", err)
	}
	// Only a target whose ".." all come first can be checked without
	// knowing which of its components are links.
	for _, tc := range []struct{ name, target string }{
		{"l2", "a/l1/../x"},
		{"l", "x/../y"},
		{"a/b/l", "../c/../../d"},
	} {
		if err := checkSymlink(tc.name, tc.target); !errors.Is(err, ErrUnsafeArchive) {
			t.Errorf("checkSymlink(%q, %q) = %v, want ErrUnsafeArchive", tc.name, tc.target, err)
		}
	}
}

func TestRestoreBackendErrorNotMasked(t *testing.T) {
	arch := zstdOf(t, tarOf(t, reg("f1", 1<<20, 0o644), reg("f2", 1<<20, 0o644)))
	disk := errors.New("no space left on device")
	sb := New("stream", streamInstance{restore: func(r io.Reader) error {
		tar.NewReader(r).Next()
		return disk
	}})
	_, err := sb.Restore(context.Background(), bytes.NewReader(arch))
	if !errors.Is(err, disk) || errors.Is(err, ErrUnsafeArchive) {
		t.Fatalf("got %v, want the backend's error and not ErrUnsafeArchive", err)
	}
}

func TestRestoreBackendDoneBeforeTrailer(t *testing.T) {
	arch := zstdOf(t, tarOf(t, reg("f1", 100<<10, 0o644)))
	sb := New("stream", streamInstance{restore: func(r io.Reader) error {
		tr := tar.NewReader(r)
		if _, err := tr.Next(); err != nil {
			return err
		}
		_, err := io.Copy(io.Discard, tr)
		return err // done: the only entry is extracted
	}})
	if _, err := sb.Restore(context.Background(), bytes.NewReader(arch)); err != nil {
		t.Fatalf("got %v, want success", err)
	}
}

func TestRestoreEmptyStream(t *testing.T) {
	var names []string
	called := false
	sb := New("stream", streamInstance{restore: func(r io.Reader) error { called = true; return extractAll(&names)(r) }})
	_, err := sb.Restore(context.Background(), bytes.NewReader(nil))
	if err == nil {
		t.Fatalf("restoring an empty stream succeeded (the backend was called: %v): the workspace would be wiped", called)
	}
}

func TestSnapshotSkipsBackslashNames(t *testing.T) {
	sb := New("stream", streamInstance{archive: func(w io.Writer) error {
		_, err := w.Write(tarOf(t, reg("ok.txt", 3, 0o644), reg(`C:\Users\x.txt`, 3, 0o644)))
		return err
	}})
	info, err := sb.Snapshot(context.Background(), io.Discard)
	if err != nil || info.Files != 1 || info.SkippedCount != 1 {
		t.Fatalf("got %+v, %v; want ok.txt kept and the other skipped", info, err)
	}
}

// entryInstance is an Instance with the optional entry interfaces, whose
// tar-stream methods fail: Snapshot and Restore must use the others.
type entryInstance struct {
	rootInstance
	entries func(emit func(*tar.Header, io.Reader) error) error
	restore func(next func() (*tar.Header, io.Reader, error)) error
}

func (entryInstance) Archive(context.Context, io.Writer) error {
	return errors.New("Archive called, not ArchiveEntries")
}
func (entryInstance) Restore(context.Context, io.Reader) error {
	return errors.New("Restore called, not RestoreEntries")
}
func (e entryInstance) ArchiveEntries(_ context.Context, emit func(*tar.Header, io.Reader) error) error {
	return e.entries(emit)
}
func (e entryInstance) RestoreEntries(_ context.Context, next func() (*tar.Header, io.Reader, error)) error {
	return e.restore(next)
}

// emitAll is an ArchiveEntries that emits hs, each regular file with the
// contents tarOf gives it.
func emitAll(hs ...*tar.Header) func(emit func(*tar.Header, io.Reader) error) error {
	return func(emit func(*tar.Header, io.Reader) error) error {
		for _, h := range hs {
			var body io.Reader
			if h.Typeflag == tar.TypeReg {
				body = bytes.NewReader(contentOf(h.Name, h.Size))
			}
			if err := emit(h, body); err != nil {
				return err
			}
		}
		return nil
	}
}

// takeAll is a RestoreEntries that reads every entry and its contents,
// listing the names.
func takeAll(names *[]string) func(next func() (*tar.Header, io.Reader, error)) error {
	return func(next func() (*tar.Header, io.Reader, error)) error {
		for {
			h, body, err := next()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			if body != nil {
				if _, err := io.Copy(io.Discard, body); err != nil {
					return err
				}
			}
			*names = append(*names, h.Name)
		}
	}
}

func TestSnapshotEntries(t *testing.T) {
	ctx := context.Background()
	sb := New("entries", entryInstance{entries: emitAll(dirH("./", 0o755), dirH("a/", 0o40755),
		reg("a/f", 300000, 0o100644), symH("a/l", "f"), symH("out", "../x"), specialH("p", tar.TypeFifo))})
	var buf bytes.Buffer
	info, err := sb.Snapshot(ctx, &buf)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if info.Files != 1 || info.Dirs != 1 || info.Symlinks != 1 || info.Bytes != 300000 || info.SkippedCount != 2 {
		t.Errorf("info %+v, want 1 file of 300000 bytes, 1 directory, 1 link, 2 skipped", info)
	}
	// Restored through RestoreEntries, it gives back what was emitted,
	// portable.
	var got []*tar.Header
	bodies := map[string][]byte{}
	rsb := New("entries", entryInstance{restore: func(next func() (*tar.Header, io.Reader, error)) error {
		for {
			h, body, err := next()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			hc := *h
			got = append(got, &hc)
			if body != nil {
				if bodies[h.Name], err = io.ReadAll(body); err != nil {
					return err
				}
			}
		}
	}})
	rinfo, err := rsb.Restore(ctx, &buf)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	var desc []string
	for _, h := range got {
		desc = append(desc, describe(h))
	}
	if want := []string{"dir a/ 0755", "file a/f 0644", "symlink a/l 0777 -> f"}; !slices.Equal(desc, want) {
		t.Errorf("restored entries %q, want %q", desc, want)
	}
	if !bytes.Equal(bodies["a/f"], contentOf("a/f", 300000)) {
		t.Errorf("a/f came back as %d bytes, not its contents", len(bodies["a/f"]))
	}
	if rinfo.Files != info.Files || rinfo.Dirs != info.Dirs || rinfo.Symlinks != info.Symlinks || rinfo.Bytes != info.Bytes {
		t.Errorf("restore info %+v, snapshot info %+v", rinfo, info)
	}
}

func TestSnapshotEntriesErrors(t *testing.T) {
	ctx := context.Background()
	t.Run("a backend's error", func(t *testing.T) {
		boom := errors.New("container vanished")
		sb := New("entries", entryInstance{entries: func(emit func(*tar.Header, io.Reader) error) error {
			if err := emitAll(reg("a", 10, 0o644))(emit); err != nil {
				return err
			}
			return boom
		}})
		if _, err := sb.Snapshot(ctx, io.Discard); !errors.Is(err, boom) {
			t.Errorf("got %v, want the backend's error", err)
		}
	})
	t.Run("a body cut short", func(t *testing.T) {
		sb := New("entries", entryInstance{entries: func(emit func(*tar.Header, io.Reader) error) error {
			return emit(reg("a", 10, 0o644), strings.NewReader("short"))
		}})
		if _, err := sb.Snapshot(ctx, io.Discard); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("got %v, want io.ErrUnexpectedEOF", err)
		}
	})
	t.Run("a name that climbs out", func(t *testing.T) {
		sb := New("entries", entryInstance{entries: emitAll(reg("../x", 1, 0o644))})
		if _, err := sb.Snapshot(ctx, io.Discard); !errors.Is(err, ErrUnsafeArchive) {
			t.Errorf("got %v, want ErrUnsafeArchive", err)
		}
	})
	t.Run("the writer's error", func(t *testing.T) {
		full := errors.New("no space left")
		sb := New("entries", entryInstance{entries: emitAll(reg("big", 3*snapshotChunk, 0o644))})
		if _, err := sb.Snapshot(ctx, &failingWriter{n: 1, err: full}); !errors.Is(err, full) {
			t.Errorf("got %v, want the writer's error", err)
		}
	})
}

func TestRestoreEntriesRefuses(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		arch []byte
		want string // in the error
	}{
		{"unsafe entry", zstdOf(t, tarOf(t, reg("ok", 10, 0o644), reg("../evil", 10, 0o644))), "../evil"},
		{"corrupt body", zstdOf(t, tarOf(t, reg("ok", 10, 0o644), reg("big", 1<<20, 0o644))[:600<<10]), "big"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var names []string
			sb := New("entries", entryInstance{restore: takeAll(&names)})
			_, err := sb.Restore(ctx, bytes.NewReader(tc.arch))
			if !errors.Is(err, ErrUnsafeArchive) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrUnsafeArchive naming %q", err, tc.want)
			}
			if len(names) > 1 {
				t.Errorf("the backend took %q, past the refused entry", names)
			}
		})
	}
	t.Run("the checker's reason wins", func(t *testing.T) {
		// A backend that makes its own error of the refusal.
		sb := New("entries", entryInstance{restore: func(next func() (*tar.Header, io.Reader, error)) error {
			for {
				if _, _, err := next(); err != nil {
					return errors.New("extraction failed")
				}
			}
		}})
		_, err := sb.Restore(ctx, bytes.NewReader(zstdOf(t, tarOf(t, reg("../evil", 10, 0o644)))))
		if !errors.Is(err, ErrUnsafeArchive) {
			t.Errorf("got %v, want ErrUnsafeArchive", err)
		}
	})
	t.Run("a backend that stops early", func(t *testing.T) {
		sb := New("entries", entryInstance{restore: func(next func() (*tar.Header, io.Reader, error)) error {
			_, _, err := next()
			return err
		}})
		_, err := sb.Restore(ctx, bytes.NewReader(zstdOf(t, tarOf(t, reg("ok", 10, 0o644), reg("../evil", 10, 0o644)))))
		if !errors.Is(err, ErrUnsafeArchive) {
			t.Errorf("got %v, want the unsafe entry after the backend stopped refused", err)
		}
	})
	t.Run("a backend's error", func(t *testing.T) {
		disk := errors.New("no space left on device")
		sb := New("entries", entryInstance{restore: func(next func() (*tar.Header, io.Reader, error)) error {
			next()
			return disk
		}})
		_, err := sb.Restore(ctx, bytes.NewReader(zstdOf(t, tarOf(t, reg("f1", 1<<20, 0o644), reg("f2", 1<<20, 0o644)))))
		if !errors.Is(err, disk) || errors.Is(err, ErrUnsafeArchive) {
			t.Errorf("got %v, want the backend's error and not ErrUnsafeArchive", err)
		}
	})
}

// failingWriter fails every write after its first n.
type failingWriter struct {
	n   int
	err error
}

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.n <= 0 {
		return 0, w.err
	}
	w.n--
	return len(p), nil
}
