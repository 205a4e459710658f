package localsandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"maps"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/agentbot/agentbot/sandboxes"
)

// FuzzRestore restores arbitrary tar streams, compressed as snapshots are,
// into a real local workspace through sandboxes.Sandbox.Restore (the
// checker, then the backend): whatever the archive (tar-slip, symlink and
// hard-link escapes, huge headers, truncated streams), nothing appears
// outside the workspace, and a refused or failed restore leaves the
// workspace exactly as it was: never half-restored. Seeds are here and in
// testdata/fuzz; make fuzz runs it longer.
func FuzzRestore(f *testing.F) {
	add := func(entries ...tarEntry) { f.Add(makeTar(f, entries...), false) }
	add(tarEntry{name: "a.txt", typ: tar.TypeReg, mode: 0o644, body: "a"})
	add(tarEntry{name: "../escape.txt", typ: tar.TypeReg, mode: 0o644, body: "x"})
	add(tarEntry{name: "l", typ: tar.TypeSymlink, link: ".."}, tarEntry{name: "l/escape.txt", typ: tar.TypeReg, mode: 0o644, body: "x"})
	add(tarEntry{name: "l", typ: tar.TypeSymlink, link: "/tmp"})
	add(tarEntry{name: "h", typ: tar.TypeLink, link: "../outside.txt"})
	add(tarEntry{name: "d/", typ: tar.TypeDir, mode: 0o755}, tarEntry{name: "d/f", typ: tar.TypeReg, mode: 0o4755, body: "setuid"})
	add(tarEntry{name: strings.Repeat("n", 5000), typ: tar.TypeReg, mode: 0o644, body: "long"})
	add(tarEntry{name: "dev", typ: tar.TypeChar})
	add(tarEntry{name: "a", typ: tar.TypeReg, mode: 0o644, body: "1"}, tarEntry{name: "a/b", typ: tar.TypeReg, mode: 0o644, body: "2"})
	whole := makeTar(f, tarEntry{name: "x/y.txt", typ: tar.TypeReg, mode: 0o644, body: strings.Repeat("y", 3000)})
	f.Add(whole[:700], false) // truncated inside a body
	f.Add(whole, true)        // sent raw: not zstd
	f.Add([]byte{}, false)

	outer := f.TempDir()
	f.Cleanup(func() { forceRemoveAll(outer) })
	b, err := New(Options{BaseDir: filepath.Join(outer, "sandboxes")})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte, raw bool) {
		ctx := context.Background()
		inst, err := b.Create(ctx, sandboxes.Spec{})
		if err != nil {
			t.Fatal(err)
		}
		defer inst.Destroy(ctx)
		sb := sandboxes.New(Name, inst)
		root := inst.State().Root
		if err := os.WriteFile(filepath.Join(root, "before.txt"), []byte("kept"), 0o644); err != nil {
			t.Fatal(err)
		}
		before := tree(t, root)
		outside := outsideOf(t, outer, root)

		stream := data
		if !raw {
			var buf bytes.Buffer
			zw, _ := zstd.NewWriter(&buf)
			zw.Write(data)
			zw.Close()
			stream = buf.Bytes()
		}
		// A restore always returns: one that hangs fails with every
		// goroutine's stack (the fuzzing engine's own hang report has
		// none).
		var rerr error
		returned := make(chan struct{})
		go func() {
			defer close(returned)
			_, rerr = sb.Restore(ctx, bytes.NewReader(stream))
		}()
		select {
		case <-returned:
		case <-time.After(restoreHang):
			var stacks bytes.Buffer
			pprof.Lookup("goroutine").WriteTo(&stacks, 2)
			t.Fatalf("Restore did not return within %s:\n%s", restoreHang, stacks.String())
		}

		// Outside the workspace nothing was made, changed or removed.
		if after := outsideOf(t, outer, root); !maps.Equal(after, outside) {
			t.Fatalf("restore (err %v) changed what is outside the workspace:\nbefore %v\nafter  %v", rerr, outside, after)
		}
		if rerr != nil {
			sameTree(t, "after a failed restore", before, tree(t, root))
			return
		}
		// A restore that succeeded holds no link leaving the workspace.
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.Type()&os.ModeSymlink == 0 {
				return nil
			}
			target, _ := os.Readlink(p)
			abs := target
			if !filepath.IsAbs(abs) {
				abs = filepath.Join(filepath.Dir(p), target)
			}
			if rel, err := filepath.Rel(root, abs); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
				t.Fatalf("restored %s -> %s leaves the workspace", p, target)
			}
			return nil
		})
	})
}

// restoreHang is how long FuzzRestore waits for a restore of its small
// inputs: they take milliseconds.
const restoreHang = 10 * time.Second

// outsideOf describes what is below outer but not in the workspace root:
// each entry's type and mode, a file's contents, a link's target
// (directory times change as Restore stages and swaps: left out).
func outsideOf(t *testing.T, outer, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(outer, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return filepath.SkipDir
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		desc := fi.Mode().String()
		switch {
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += " " + string(data)
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			desc += " -> " + target
		}
		out[p] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
