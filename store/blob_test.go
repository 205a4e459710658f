package store_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/agentbot/agentbot/store"
)

// storeCase is one kind of store the tests run against; dir is the root
// directory of a file:// store, "" otherwise.
type storeCase struct {
	name string
	url  string
	dir  string
}

// storeCases returns the stores every behaviour is checked on. The file
// store's directory does not exist yet: OpenBlobs must create it.
func storeCases(t *testing.T) []storeCase {
	dir := filepath.Join(t.TempDir(), "blobs", "nested")
	return []storeCase{
		{name: "mem", url: "mem://"},
		{name: "file", url: "file://" + filepath.ToSlash(dir), dir: dir},
	}
}

// forEachStore runs f as a subtest against a fresh store of each kind.
func forEachStore(t *testing.T, f func(t *testing.T, b *store.Blobs, sc storeCase)) {
	t.Helper()
	for _, sc := range storeCases(t) {
		t.Run(sc.name, func(t *testing.T) {
			b, err := store.OpenBlobs(t.Context(), sc.url)
			if err != nil {
				t.Fatalf("OpenBlobs(%q): %v", sc.url, err)
			}
			t.Cleanup(func() {
				if err := b.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			f(t, b, sc)
		})
	}
}

func put(t *testing.T, b *store.Blobs, key string, data []byte) {
	t.Helper()
	w, err := b.NewWriter(t.Context(), key, "text/plain")
	if err != nil {
		t.Fatalf("NewWriter(%q): %v", key, err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatalf("Write(%q): %v", key, err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close(%q): %v", key, err)
	}
}

func get(t *testing.T, b *store.Blobs, key string) []byte {
	t.Helper()
	r, err := b.NewReader(t.Context(), key)
	if err != nil {
		t.Fatalf("NewReader(%q): %v", key, err)
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("reading %q: %v", key, err)
	}
	return data
}

func list(t *testing.T, b *store.Blobs, prefix string) []string {
	t.Helper()
	keys, err := b.List(t.Context(), prefix)
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	return keys
}

// regularFiles lists the files under dir, relative and sorted, so a test can see what
// a file:// store really left on disk.
func regularFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walking %s: %v", dir, err)
	}
	slices.Sort(files) // in key order, as List returns keys
	return files
}

func TestOpenBlobs(t *testing.T) {
	tmp := t.TempDir()
	tests := []struct {
		name    string
		url     string
		makes   string   // directory that must exist after opening
		wantErr []string // substrings of the error; nil means success
	}{
		{name: "mem", url: "mem://"},
		{name: "file URL creates the directory", url: "file://" + filepath.ToSlash(filepath.Join(tmp, "a", "b")), makes: filepath.Join(tmp, "a", "b")},
		{name: "file URL with localhost", url: "file://localhost" + filepath.ToSlash(filepath.Join(tmp, "lh")), makes: filepath.Join(tmp, "lh")},
		{name: "plain absolute path", url: filepath.Join(tmp, "plain dir"), makes: filepath.Join(tmp, "plain dir")},
		{name: "unknown scheme", url: "ftp://example.com/blobs", wantErr: []string{
			`unsupported URL scheme "ftp"`, "file", "mem", "s3 needs", "gocloud.dev/blob/s3blob", "gs needs", "gocloud.dev/blob/gcsblob"}},
		{name: "s3 not registered", url: "s3://bucket", wantErr: []string{`unsupported URL scheme "s3"`, "gocloud.dev/blob/s3blob"}},
		{name: "empty", url: "", wantErr: []string{"empty URL", "file:///abs/dir"}},
		{name: "relative path", url: "var/blobs", wantErr: []string{"not an absolute path"}},
		{name: "file URL with a host", url: "file://blobs/x", wantErr: []string{"three slashes"}},
		{name: "relative file URL", url: "file://./blobs", wantErr: []string{"three slashes"}},
		{name: "unknown file parameter", url: "file://" + filepath.ToSlash(tmp) + "?colour=blue", wantErr: []string{`"colour"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := store.OpenBlobs(t.Context(), tt.url)
			if tt.wantErr != nil {
				if err == nil {
					b.Close()
					t.Fatalf("OpenBlobs(%q) succeeded, want an error", tt.url)
				}
				for _, s := range tt.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("OpenBlobs(%q) error %q does not contain %q", tt.url, err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("OpenBlobs(%q): %v", tt.url, err)
			}
			defer b.Close()
			if tt.makes != "" {
				if fi, err := os.Stat(tt.makes); err != nil || !fi.IsDir() {
					t.Errorf("directory %s not created: %v", tt.makes, err)
				}
			}
			put(t, b, "k", []byte("v"))
			if got := get(t, b, "k"); string(got) != "v" {
				t.Errorf("read back %q, want %q", got, "v")
			}
		})
	}
}

// pattern is a reader of n deterministic bytes that never holds more than
// one 64 KiB block: each block is the same noise with its block number in
// the first 8 bytes, so a lost, repeated or reordered block changes the
// hash.
type pattern struct {
	n, off int64
	block  []byte
	cur    int64 // block number now in block[:8]
	probe  *memProbe
}

const patternBlock = 64 << 10

func newPattern(n int64, probe *memProbe) *pattern {
	block := make([]byte, patternBlock)
	x := uint64(0x9e3779b97f4a7c15)
	for i := range block {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		block[i] = byte(x)
	}
	binary.BigEndian.PutUint64(block, 0)
	return &pattern{n: n, block: block, probe: probe}
}

func (p *pattern) Read(b []byte) (int, error) {
	if p.off >= p.n {
		return 0, io.EOF
	}
	if blk := p.off / patternBlock; blk != p.cur {
		binary.BigEndian.PutUint64(p.block, uint64(blk))
		p.cur = blk
	}
	i := p.off % patternBlock
	end := min(int64(patternBlock), i+(p.n-p.off))
	k := copy(b, p.block[i:end])
	p.off += int64(k)
	if p.probe != nil && p.off%(1<<20) < int64(k) {
		p.probe.sample()
	}
	return k, nil
}

// memProbe records the peak heap in use above a baseline, sampled while a
// stream runs, to show that streaming does not hold the blob.
type memProbe struct {
	base, peak uint64
}

func newMemProbe() *memProbe {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return &memProbe{base: m.HeapAlloc, peak: m.HeapAlloc}
}

func (p *memProbe) sample() {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	p.peak = max(p.peak, m.HeapAlloc)
}

func (p *memProbe) growth() uint64 { return p.peak - p.base }

// hashSink hashes what is written to it, sampling the heap every MiB.
type hashSink struct {
	h     hash.Hash
	n     int64
	probe *memProbe
}

func (s *hashSink) Write(b []byte) (int, error) {
	s.h.Write(b)
	s.n += int64(len(b))
	if s.probe != nil && s.n%(1<<20) < int64(len(b)) {
		s.probe.sample()
	}
	return len(b), nil
}

func TestRoundTrip(t *testing.T) {
	sizes := []struct {
		name string
		size int64
	}{
		{name: "empty", size: 0},
		{name: "one byte", size: 1},
		{name: "50MB streamed", size: 50 << 20},
	}
	forEachStore(t, func(t *testing.T, b *store.Blobs, sc storeCase) {
		for _, tt := range sizes {
			t.Run(tt.name, func(t *testing.T) {
				if tt.size > 1<<20 && testing.Short() {
					t.Skip("large blob skipped in -short mode")
				}
				// A mem:// store holds blobs in memory by design, so the
				// memory bound only means something for a file:// store.
				checkMemory := tt.size > 1<<20 && sc.dir != ""
				var probe *memProbe
				if checkMemory {
					probe = newMemProbe()
				}
				key := "round-trip/" + tt.name
				w, err := b.NewWriter(t.Context(), key, "application/octet-stream")
				if err != nil {
					t.Fatalf("NewWriter: %v", err)
				}
				wantHash := sha256.New()
				n, err := io.Copy(w, io.TeeReader(newPattern(tt.size, probe), wantHash))
				if err != nil {
					t.Fatalf("writing: %v", err)
				}
				if err := w.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
				if n != tt.size {
					t.Fatalf("wrote %d bytes, want %d", n, tt.size)
				}

				if size, err := b.Size(t.Context(), key); err != nil || size != tt.size {
					t.Errorf("Size = %d, %v; want %d", size, err, tt.size)
				}
				r, err := b.NewReader(t.Context(), key)
				if err != nil {
					t.Fatalf("NewReader: %v", err)
				}
				sink := &hashSink{h: sha256.New(), probe: probe}
				_, err = io.Copy(sink, r)
				if cerr := r.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					t.Fatalf("reading: %v", err)
				}
				if sink.n != tt.size || !bytes.Equal(sink.h.Sum(nil), wantHash.Sum(nil)) {
					t.Errorf("read back %d bytes with sha256 %x; want %d bytes with %x", sink.n, sink.h.Sum(nil), tt.size, wantHash.Sum(nil))
				}
				if checkMemory {
					const limit = 10 << 20
					t.Logf("heap growth while streaming %d bytes: %d", tt.size, probe.growth())
					if g := probe.growth(); g > limit {
						t.Errorf("heap grew by %d bytes while streaming %d; want under %d: the blob is being held in memory", g, tt.size, limit)
					}
				}
			})
		}
	})
}

func TestAbortLeavesNothing(t *testing.T) {
	boom := errors.New("boom")
	chunk := bytes.Repeat([]byte("x"), 64<<10)

	forEachStore(t, func(t *testing.T, b *store.Blobs, sc storeCase) {
		assertClean := func(t *testing.T, wantKeys []string) {
			t.Helper()
			if got := list(t, b, ""); !slices.Equal(got, wantKeys) {
				t.Errorf("List = %q, want %q", got, wantKeys)
			}
			if sc.dir == "" {
				return
			}
			// These keys need no escaping, so each is its file's path.
			if got := regularFiles(t, sc.dir); !slices.Equal(got, wantKeys) {
				t.Errorf("files on disk = %q, want %q (a temporary file was left behind)", got, wantKeys)
			}
		}

		t.Run("abort", func(t *testing.T) {
			w, err := b.NewWriter(t.Context(), "abort/new", "")
			if err != nil {
				t.Fatal(err)
			}
			for range 16 {
				if _, err := w.Write(chunk); err != nil {
					t.Fatal(err)
				}
			}
			w.Abort(boom)
			if _, err := w.Write(chunk); !errors.Is(err, boom) {
				t.Errorf("Write after Abort = %v, want an error matching the cause", err)
			}
			if err := w.Close(); !errors.Is(err, boom) || !strings.Contains(err.Error(), `"abort/new"`) {
				t.Errorf("Close after Abort = %v, want an error naming the key and matching the cause", err)
			}
			if ok, err := b.Exists(t.Context(), "abort/new"); ok || err != nil {
				t.Errorf("Exists = %v, %v after an aborted write; want false, nil", ok, err)
			}
			assertClean(t, nil)
		})

		t.Run("canceled context", func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			w, err := b.NewWriter(ctx, "abort/canceled", "")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write(chunk); err != nil {
				t.Fatal(err)
			}
			cancel()
			if err := w.Close(); !errors.Is(err, context.Canceled) {
				t.Errorf("Close after cancel = %v, want context.Canceled", err)
			}
			assertClean(t, nil)
		})

		t.Run("abort keeps the previous version", func(t *testing.T) {
			put(t, b, "abort/old", []byte("old"))
			w, err := b.NewWriter(t.Context(), "abort/old", "")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write([]byte("new and longer")); err != nil {
				t.Fatal(err)
			}
			w.Abort(nil)
			if err := w.Close(); !errors.Is(err, context.Canceled) {
				t.Errorf("Close after Abort(nil) = %v, want context.Canceled", err)
			}
			if got := get(t, b, "abort/old"); string(got) != "old" {
				t.Errorf("after the aborted overwrite the key holds %q, want %q", got, "old")
			}
			assertClean(t, []string{"abort/old"})
			if err := b.Delete(t.Context(), "abort/old"); err != nil {
				t.Fatal(err)
			}
		})

		t.Run("abort from another goroutine", func(t *testing.T) {
			w, err := b.NewWriter(t.Context(), "abort/concurrent", "")
			if err != nil {
				t.Fatal(err)
			}
			started := make(chan struct{})
			done := make(chan error)
			go func() {
				for i := 0; ; i++ {
					if _, err := w.Write(chunk); err != nil {
						done <- err
						return
					}
					if i == 0 {
						close(started)
					}
				}
			}()
			<-started
			w.Abort(boom)
			if err := <-done; !errors.Is(err, boom) {
				t.Errorf("the writing goroutine got %v, want the abort cause", err)
			}
			if err := w.Close(); !errors.Is(err, boom) {
				t.Errorf("Close = %v, want the abort cause", err)
			}
			assertClean(t, nil)
		})

		t.Run("abort after close does nothing", func(t *testing.T) {
			w, err := b.NewWriter(t.Context(), "abort/closed", "")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write([]byte("kept")); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			w.Abort(boom)
			if err := w.Close(); err != nil {
				t.Errorf("second Close = %v, want the first result (nil)", err)
			}
			if _, err := w.Write([]byte("more")); err == nil {
				t.Error("Write after Close succeeded")
			}
			if got := get(t, b, "abort/closed"); string(got) != "kept" {
				t.Errorf("key holds %q, want %q", got, "kept")
			}
			if err := b.Delete(t.Context(), "abort/closed"); err != nil {
				t.Fatal(err)
			}
		})
	})
}

func TestReadersSeeWholeVersions(t *testing.T) {
	v1 := bytes.Repeat([]byte("1"), 1<<20)
	v2 := bytes.Repeat([]byte("2"), 2<<20)
	forEachStore(t, func(t *testing.T, b *store.Blobs, sc storeCase) {
		const key = "versions/blob"
		put(t, b, key, v1)

		w, err := b.NewWriter(t.Context(), key, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(v2[:len(v2)/2]); err != nil {
			t.Fatal(err)
		}
		// Mid-write: a new reader gets the old version whole, the size is
		// the old one, and the write in progress is not listed.
		if got := get(t, b, key); !bytes.Equal(got, v1) {
			t.Errorf("reader during the write got %d bytes, want the old %d", len(got), len(v1))
		}
		if size, err := b.Size(t.Context(), key); err != nil || size != int64(len(v1)) {
			t.Errorf("Size during the write = %d, %v; want %d", size, err, len(v1))
		}
		if got := list(t, b, "versions/"); !slices.Equal(got, []string{key}) {
			t.Errorf("List during the write = %q, want only %q", got, key)
		}
		// A reader opened before the commit keeps reading the old version
		// after it.
		early, err := b.NewReader(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		defer early.Close()
		if _, err := w.Write(v2[len(v2)/2:]); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if got, err := io.ReadAll(early); err != nil || !bytes.Equal(got, v1) {
			t.Errorf("reader opened before the commit got %d bytes (%v), want the old %d", len(got), err, len(v1))
		}
		if got := get(t, b, key); !bytes.Equal(got, v2) {
			t.Errorf("reader after the commit got %d bytes, want the new %d", len(got), len(v2))
		}
	})
}

func TestCopy(t *testing.T) {
	forEachStore(t, func(t *testing.T, b *store.Blobs, sc storeCase) {
		src := store.SnapshotKey("agent/parent", 3)
		dst := store.SnapshotKey("agent/fork", 0)
		put(t, b, src, []byte("before fork"))
		if err := b.Copy(t.Context(), dst, src); err != nil {
			t.Fatalf("Copy: %v", err)
		}
		put(t, b, src, []byte("parent moved on"))
		if got := get(t, b, dst); string(got) != "before fork" {
			t.Errorf("copy holds %q after the source changed, want %q", got, "before fork")
		}
		put(t, b, dst, []byte("fork moved on"))
		if got := get(t, b, src); string(got) != "parent moved on" {
			t.Errorf("source holds %q after the copy changed, want %q", got, "parent moved on")
		}
	})
}

func TestDeletePrefix(t *testing.T) {
	forEachStore(t, func(t *testing.T, b *store.Blobs, sc storeCase) {
		// "agent/s" is a prefix of "agent/s1" as strings; their snapshot
		// prefixes must not be.
		gone := []string{store.SnapshotKey("agent/s", 1), store.SnapshotKey("agent/s", 2)}
		kept := []string{store.SnapshotKey("agent/s1", 1), store.SnapshotKey("agent/S", 1), "snapshots.txt", "other/x"}
		for _, k := range append(slices.Clone(gone), kept...) {
			put(t, b, k, []byte(k))
		}
		prefix := store.SnapshotPrefix("agent/s")
		var leftover string
		if sc.dir != "" {
			// What a crash during a write leaves in a file:// store.
			leftover = filepath.Join(sc.dir, filepath.FromSlash(store.SnapshotKey("agent/s", 3))+".18c0ffee.tmp")
			if err := os.WriteFile(leftover, []byte("half"), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := list(t, b, prefix); !slices.Equal(got, gone) {
				t.Errorf("List(%q) = %q, want %q without the temporary file", prefix, got, gone)
			}
		}

		if err := b.DeletePrefix(t.Context(), ""); err == nil || !strings.Contains(err.Error(), "empty prefix") {
			t.Errorf("DeletePrefix(\"\") = %v, want a refusal", err)
		}
		if err := b.DeletePrefix(t.Context(), prefix); err != nil {
			t.Fatalf("DeletePrefix: %v", err)
		}
		want := slices.Sorted(slices.Values(kept))
		if got := list(t, b, ""); !slices.Equal(got, want) {
			t.Errorf("after DeletePrefix, List = %q, want %q", got, want)
		}
		if err := b.DeletePrefix(t.Context(), prefix); err != nil {
			t.Errorf("DeletePrefix again = %v, want nil (nothing to delete is not an error)", err)
		}
		if sc.dir != "" {
			folder := filepath.Join(sc.dir, filepath.FromSlash(strings.TrimSuffix(prefix, "/")))
			if _, err := os.Stat(folder); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("session folder %s still there after DeletePrefix (err %v)", folder, err)
			}
			if got := regularFiles(t, sc.dir); !slices.Equal(got, want) {
				t.Errorf("files on disk = %q, want %q", got, want)
			}
		}
	})
}

func TestNotFound(t *testing.T) {
	const key = "no/such/blob"
	forEachStore(t, func(t *testing.T, b *store.Blobs, sc storeCase) {
		ops := []struct {
			name string
			op   func(ctx context.Context) error
		}{
			{"NewReader", func(ctx context.Context) error { _, err := b.NewReader(ctx, key); return err }},
			{"Size", func(ctx context.Context) error { _, err := b.Size(ctx, key); return err }},
			{"Delete", func(ctx context.Context) error { return b.Delete(ctx, key) }},
			{"Copy", func(ctx context.Context) error { return b.Copy(ctx, "copy/dst", key) }},
		}
		for _, tt := range ops {
			t.Run(tt.name, func(t *testing.T) {
				err := tt.op(t.Context())
				if !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("%s of a missing key = %v, want ErrNotFound", tt.name, err)
				}
				if !strings.Contains(err.Error(), `"`+key+`"`) {
					t.Errorf("error %q does not name the key", err)
				}
			})
		}
		t.Run("Exists", func(t *testing.T) {
			if ok, err := b.Exists(t.Context(), key); ok || err != nil {
				t.Errorf("Exists = %v, %v; want false, nil", ok, err)
			}
		})
		if ok, _ := b.Exists(t.Context(), "copy/dst"); ok {
			t.Error("a failed Copy created its destination")
		}
	})
}

func TestBadKeys(t *testing.T) {
	keys := []struct{ name, key string }{
		{"empty", ""},
		{"invalid UTF-8", "a\xffb"},
		{"attribute file name", "x/y.attrs"},
		{"temporary file name", "x/y.tar.zst.18c0ffee.tmp"},
	}
	forEachStore(t, func(t *testing.T, b *store.Blobs, sc storeCase) {
		for _, tt := range keys {
			t.Run(tt.name, func(t *testing.T) {
				if w, err := b.NewWriter(t.Context(), tt.key, ""); err == nil {
					w.Abort(nil)
					t.Errorf("NewWriter(%q) succeeded", tt.key)
				}
				if _, err := b.NewReader(t.Context(), tt.key); err == nil || errors.Is(err, store.ErrNotFound) {
					t.Errorf("NewReader(%q) = %v, want a bad-key error", tt.key, err)
				}
			})
		}
	})
}
