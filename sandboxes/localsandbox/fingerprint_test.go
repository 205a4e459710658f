//go:build linux

package localsandbox

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbot/agentbot/sandboxes"
)

// walkerCounts are the numbers of goroutines the tests walk trees with:
// one walks the whole tree depth first, more split it.
var walkerCounts = []int{1, 2, 3, 8}

// writeFingerprintTree fills dir with a tree of every kind of entry the
// walk meets: nested directories wide enough to be split between
// goroutines, files, links (relative, absolute, dangling, to a directory),
// a FIFO, an empty directory, and what the fingerprint leaves out.
func writeFingerprintTree(t *testing.T, dir string) {
	t.Helper()
	write := func(name, content string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 6 {
		for j := range 4 {
			for k := range 3 {
				write(fmt.Sprintf("src/m%d/p%d/f%d.go", i, j, k), strings.Repeat("x", i*100+j*10+k))
			}
		}
	}
	write("README.md", "hello")
	write(".agentbot/config", "kept")
	write(sandboxes.OutputsDir+"/out.txt", "left out")
	write(stagingPrefix+"abc/file", "left out")
	for _, l := range []struct{ name, target string }{
		{"link-rel", "README.md"},
		{"link-abs", "/etc/passwd"},
		{"link-dangling", "missing/nowhere"},
		{"src/link-dir", "m0"},
	} {
		if err := os.Symlink(l.target, filepath.Join(dir, l.name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mkfifo(filepath.Join(dir, "src/m1/fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o700); err != nil {
		t.Fatal(err)
	}
}

// openFDs counts the descriptors the test process holds.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func TestFingerprintTreeSameWithAnyWalkers(t *testing.T) {
	dir := t.TempDir()
	writeFingerprintTree(t, dir)
	fds := openFDs(t)
	want, err := fingerprintTree(t.Context(), dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, walkers := range walkerCounts {
		t.Run(fmt.Sprint(walkers, " walkers"), func(t *testing.T) {
			for range 20 {
				got, err := fingerprintTree(t.Context(), dir, walkers)
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Fatalf("digest %x, want %x as with one walker", got, want)
				}
			}
		})
	}
	if n := openFDs(t); n != fds {
		t.Errorf("%d descriptors open after the walks, %d before", n, fds)
	}
}

func TestFingerprintTreeChanges(t *testing.T) {
	dir := t.TempDir()
	writeFingerprintTree(t, dir)
	path := func(name string) string { return filepath.Join(dir, name) }
	prev, err := fingerprintTree(t.Context(), dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Each step changes the tree left by the one before.
	for _, step := range []struct {
		name    string
		do      func() error
		changes bool
	}{
		{"file deep in a subtree", func() error { return os.WriteFile(path("src/m5/p3/f2.go"), []byte("longer now"), 0o644) }, true},
		{"directory chmod", func() error { return os.Chmod(path("src/m2/p1"), 0o700) }, true},
		{"file moved to a sibling directory", func() error { return os.Rename(path("src/m3/p0/f0.go"), path("src/m3/p1/f0.go")) }, true},
		{"empty directory removed", func() error { return os.Remove(path("empty")) }, true},
		{"file written under outputs", func() error { return os.WriteFile(path(sandboxes.OutputsDir+"/new.txt"), nil, 0o644) }, false},
		{"file written in a staging directory", func() error { return os.WriteFile(path(stagingPrefix+"abc/new"), nil, 0o644) }, false},
		{"staging name below the root", func() error { return os.Mkdir(path("src/"+stagingPrefix+"x"), 0o755) }, true},
		{"link retargeted", func() error {
			if err := os.Remove(path("link-rel")); err != nil {
				return err
			}
			return os.Symlink("READ_E.md", path("link-rel"))
		}, true},
	} {
		t.Run(step.name, func(t *testing.T) {
			if err := step.do(); err != nil {
				t.Fatal(err)
			}
			var got [sha256.Size]byte
			for i, walkers := range walkerCounts {
				d, err := fingerprintTree(t.Context(), dir, walkers)
				if err != nil {
					t.Fatal(err)
				}
				if i > 0 && d != got {
					t.Fatalf("%d walkers: digest %x, %d walkers: %x", walkerCounts[0], got, walkers, d)
				}
				got = d
			}
			switch {
			case step.changes && got == prev:
				t.Errorf("the digest did not change: %x", got)
			case !step.changes && got != prev:
				t.Errorf("the digest changed from %x to %x", prev, got)
			}
			prev = got
		})
	}
}

func TestFingerprintTreeTooDeep(t *testing.T) {
	dir := t.TempDir()
	writeFingerprintTree(t, dir)
	// Siblings before and after it, so that other goroutines walk them
	// while the deep one fails, or walk the deep one themselves.
	deep := filepath.Join(dir, "src", "m2", strings.Repeat("d/", maxFingerprintDepth))
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	fds := openFDs(t)
	for _, walkers := range walkerCounts {
		t.Run(fmt.Sprint(walkers, " walkers"), func(t *testing.T) {
			_, err := fingerprintTree(t.Context(), dir, walkers)
			if !errors.Is(err, sandboxes.ErrUnsupported) || !strings.Contains(err.Error(), "src/m2/d/d/") {
				t.Fatalf("got %v, want ErrUnsupported naming the too deep directory", err)
			}
		})
	}
	if n := openFDs(t); n != fds {
		t.Errorf("%d descriptors open after the failed walks, %d before", n, fds)
	}
}

func TestFingerprintTreeCancelled(t *testing.T) {
	dir := t.TempDir()
	writeFingerprintTree(t, dir)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for _, walkers := range walkerCounts {
		if _, err := fingerprintTree(ctx, dir, walkers); !errors.Is(err, context.Canceled) {
			t.Errorf("%d walkers: got %v, want context.Canceled", walkers, err)
		}
	}
}

func BenchmarkFingerprintTree(b *testing.B) {
	dir := b.TempDir()
	for i := range 40 {
		for j := range 10 {
			sub := filepath.Join(dir, fmt.Sprintf("m%d/p%d", i, j))
			if err := os.MkdirAll(sub, 0o755); err != nil {
				b.Fatal(err)
			}
			for k := range 10 {
				if err := os.WriteFile(filepath.Join(sub, fmt.Sprint(k)), nil, 0o644); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	want, err := fingerprintTree(b.Context(), dir, 1)
	if err != nil {
		b.Fatal(err)
	}
	for _, walkers := range walkerCounts {
		b.Run(fmt.Sprint(walkers, "-walkers"), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				got, err := fingerprintTree(b.Context(), dir, walkers)
				if err != nil {
					b.Fatal(err)
				}
				if got != want {
					b.Fatalf("digest %x, want %x", got, want)
				}
			}
		})
	}
}
