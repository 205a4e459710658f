package sandboxtest

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/agentbot/agentbot/sandboxes"
)

// snapshot writes sb's workspace to a buffer.
func snapshot(t *testing.T, ctx context.Context, sb *sandboxes.Sandbox) ([]byte, sandboxes.SnapshotInfo) {
	t.Helper()
	var buf bytes.Buffer
	info, err := sb.Snapshot(ctx, &buf)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return buf.Bytes(), info
}

func restore(t *testing.T, ctx context.Context, sb *sandboxes.Sandbox, snap []byte) sandboxes.SnapshotInfo {
	t.Helper()
	info, err := sb.Restore(ctx, bytes.NewReader(snap))
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	return info
}

func sameCounts(t *testing.T, what string, want, got sandboxes.SnapshotInfo) {
	t.Helper()
	if want.Files != got.Files || want.Dirs != got.Dirs || want.Symlinks != got.Symlinks || want.Bytes != got.Bytes {
		t.Errorf("%s: counts %+v, want %+v", what, got, want)
	}
}

func (s *suite) testSnapshotRestore(t *testing.T) {
	ctx := testContext(t)
	sb := s.newSandbox(t)
	buildRichTree(t, ctx, sb)
	before, _ := listTree(t, ctx, sb)
	checkRich(t, "before the snapshot", before)

	snap, info := snapshot(t, ctx, sb)
	if info.Files != len(richFiles) || info.Symlinks != len(richLinks) || info.SkippedCount != 0 {
		t.Errorf("snapshot info %+v: want %d files, %d links, nothing skipped", info, len(richFiles), len(richLinks))
	}

	// Change every kind of thing, then go back.
	sh(t, ctx, sb, `set -e
rm -rf a/b/c empty private
echo changed > bin/run.sh && chmod 0644 bin/run.sh
chmod 0644 secret/key.pem
rm links/to-dir && echo 'now a file' > links/to-dir
rm data/all-bytes.bin && mkdir data/all-bytes.bin
echo new > added.txt && mkdir -p newdir/sub && ln -s added.txt newlink`)
	writeFile(t, ctx, sb, "data/random.bin", []byte("shorter"), 0o600)
	if changed, _ := listTree(t, ctx, sb); diffTrees(before, changed) == "" {
		t.Fatal("the changes did not change the listing")
	}

	rinfo := restore(t, ctx, sb, snap)
	sameCounts(t, "restore info", info, rinfo)
	after, _ := listTree(t, ctx, sb)
	sameTree(t, "after restore", before, after)
	if code := exitCode(t, ctx, sb, "test -e added.txt || test -e newdir || test -L newlink"); code == 0 {
		t.Error("a file added after the snapshot survived the restore")
	}
	// The restored tree works as a tree, not only as a listing.
	if got := sh(t, ctx, sb, "./bin/run.sh"); got != "ran\n" {
		t.Errorf("after restore, bin/run.sh printed %q", got)
	}
	if got := sh(t, ctx, sb, "cat links/to-dir/c/sibling; wc -c < links/to-file | tr -d ' '"); got != "deep\n512\n" {
		t.Errorf("after restore, reading through the links printed %q, want %q", got, "deep\n512\n")
	}
	if got := readFile(t, ctx, sb, "links/to-dir/c/deep.txt"); string(got) != "deep\n" {
		t.Errorf("ReadFile through a restored link: %q", got)
	}

	// Restoring into a fresh sandbox gives the same tree.
	fresh := s.newSandbox(t)
	writeFile(t, ctx, fresh, "pre-existing.txt", []byte("replaced by the restore"), 0o644)
	restore(t, ctx, fresh, snap)
	got, _ := listTree(t, ctx, fresh)
	sameTree(t, "restored into another sandbox", before, got)
}

// testSnapshotSkips checks that what a snapshot cannot carry is left out and
// reported, and that a FIFO does not hang the archiver.
func (s *suite) testSnapshotSkips(t *testing.T) {
	ctx := testContext(t)
	sb := s.newSandbox(t)
	writeFile(t, ctx, sb, "kept.txt", []byte("kept"), 0o644)
	sh(t, ctx, sb, "mkfifo fifo && ln -s /etc/passwd abs-link && ln -s ../outside up-link && mkdir d && ln -s ../../x d/up2")
	// An archiver that opens the FIFO blocks for ever, whatever its
	// context says: give up on it rather than hang the suite.
	var buf bytes.Buffer
	var info sandboxes.SnapshotInfo
	done := make(chan error, 1)
	go func() {
		var err error
		info, err = sb.Snapshot(ctx, &buf)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("snapshot of a workspace with a FIFO and outward links: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("snapshot of a workspace with a FIFO did not return within a minute: does Archive open the FIFO?")
	}
	tree, err := decodeSnapshot(&buf)
	if err != nil {
		t.Fatal(err)
	}
	want := []entry{
		{Name: "d", Type: "dir", Mode: 0o755},
		{Name: "kept.txt", Type: "file", Mode: 0o644, Size: 4, SHA256: shortSum([]byte("kept"))},
	}
	// Directory modes depend on the umask; compare names and types.
	for i := range tree {
		if tree[i].Type == "dir" {
			tree[i].Mode = 0o755
		}
	}
	sameTree(t, "snapshot with unportable entries", want, tree)
	if info.SkippedCount != 4 {
		t.Errorf("SkippedCount %d, want 4 (fifo, abs-link, up-link, d/up2); Skipped %q", info.SkippedCount, info.Skipped)
	}
}

// testSnapshotReadOnlyDir round-trips a directory its owner cannot write to,
// as a Go module cache has: extracting it must set the mode after filling
// it, and Destroy must still remove it.
func (s *suite) testSnapshotReadOnlyDir(t *testing.T) {
	ctx := testContext(t)
	sb := s.newSandbox(t)
	writeFile(t, ctx, sb, "ro/inner/file.txt", []byte("read only"), 0o444)
	sh(t, ctx, sb, "chmod 0555 ro/inner ro")
	before, _ := listTree(t, ctx, sb)
	snap, _ := snapshot(t, ctx, sb)

	fresh := s.newSandbox(t)
	restore(t, ctx, fresh, snap)
	after, _ := listTree(t, ctx, fresh)
	sameTree(t, "read-only directories restored", before, after)
	// Restoring over it replaces it.
	restore(t, ctx, fresh, snap)
	for _, sb := range []*sandboxes.Sandbox{sb, fresh} {
		if err := sb.Destroy(ctx); err != nil {
			t.Errorf("destroying a sandbox with a read-only directory: %v", err)
		} else if s.h.Exists(ctx, t, sb.State()) {
			t.Errorf("sandbox %s is left after Destroy", sb.ID())
		}
	}
}

// tarEntry is one entry of a crafted archive.
type tarEntry struct {
	name string
	typ  byte
	link string
	body string
}

func file(name, body string) tarEntry  { return tarEntry{name: name, typ: tar.TypeReg, body: body} }
func dir(name string) tarEntry         { return tarEntry{name: name, typ: tar.TypeDir} }
func symlink(name, to string) tarEntry { return tarEntry{name: name, typ: tar.TypeSymlink, link: to} }
func hardlink(name, to string) tarEntry {
	return tarEntry{name: name, typ: tar.TypeLink, link: to}
}

// craft returns a zstd-compressed tar of entries, written as they are: the
// tar writer does not clean names.
func craft(t *testing.T, entries ...tarEntry) []byte {
	t.Helper()
	var tarBuf bytes.Buffer
	tw := tar.NewWriter(&tarBuf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: 0o644, Size: int64(len(e.body)),
			ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX}
		switch e.typ {
		case tar.TypeDir:
			h.Mode = 0o755
		case tar.TypeChar, tar.TypeBlock:
			h.Devmajor, h.Devminor = 1, 3
		}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("crafting %q: %v", e.name, err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return compress(t, tarBuf.Bytes())
}

func compress(t *testing.T, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// unsafeArchives are archives Restore must refuse whole. Each starts with
// safe entries, so a backend that extracts in place before the bad entry
// arrives is caught by the listing. outside names paths (relative to the
// workspace root, or absolute) that must not exist afterwards.
func unsafeArchives(evil string) []struct {
	name    string
	entries []tarEntry
	outside []string
} {
	return []struct {
		name    string
		entries []tarEntry
		outside []string
	}{
		{"absolute path", []tarEntry{file("/tmp/"+evil, "evil")}, []string{"/tmp/" + evil}},
		{"dot-dot", []tarEntry{file("../"+evil, "evil")}, []string{"../" + evil}},
		{"nested dot-dot", []tarEntry{dir("a/"), file("a/../../"+evil, "evil")}, []string{"../" + evil}},
		{"dot-dot directory", []tarEntry{dir("../" + evil + "/")}, []string{"../" + evil}},
		{"symlink to an absolute path", []tarEntry{symlink("etc", "/etc"), file("etc/"+evil, "evil")}, []string{"/etc/" + evil}},
		{"symlink climbing out", []tarEntry{symlink("up", "../../"+evil)}, nil},
		{"nested symlink climbing out", []tarEntry{dir("a/"), symlink("a/up", "../../"+evil)}, nil},
		{"file below a symlink", []tarEntry{symlink("link", "."), file("link/"+evil, "evil")}, nil},
		{"file below a symlink to a directory", []tarEntry{dir("d/"), symlink("dl", "d"), file("dl/"+evil, "evil")}, nil},
		{"hard link climbing out", []tarEntry{hardlink("hl", "../"+evil)}, nil},
		{"hard link to an absolute path", []tarEntry{hardlink("hl", "/etc/passwd")}, nil},
		{"hard link to a file not in the archive", []tarEntry{hardlink("hl", "keep.txt")}, nil},
		{"character device", []tarEntry{{name: "null", typ: tar.TypeChar}}, nil},
		{"block device", []tarEntry{{name: "sda", typ: tar.TypeBlock}}, nil},
		{"fifo", []tarEntry{{name: "fifo", typ: tar.TypeFifo}}, nil},
	}
}

func (s *suite) testRestoreUnsafe(t *testing.T) {
	ctx := testContext(t)
	sb := s.newSandbox(t)
	writeFile(t, ctx, sb, "keep.txt", []byte("keep me"), 0o644)
	writeFile(t, ctx, sb, "dir/kept.txt", []byte("me too"), 0o644)
	before, _ := listTree(t, ctx, sb)
	evil := "sandboxtest-evil-" + runID + "-" + sb.ID()

	// The safe prefix alone restores: the refusals below are for the
	// bad entry, not the good ones.
	safe := []tarEntry{dir("safe-dir/"), file("safe-dir/safe.txt", "safe"), file("safe-top.txt", "safe")}
	t.Run("safe prefix alone", func(t *testing.T) {
		other := s.newSandbox(t)
		restore(t, ctx, other, craft(t, safe...))
		tree, _ := listTree(t, ctx, other)
		if len(tree) != 3 {
			t.Fatalf("the safe archive restored as\n%s", formatTree(tree))
		}
	})
	for _, tc := range unsafeArchives(evil) {
		t.Run(tc.name, func(t *testing.T) {
			arch := craft(t, append(append([]tarEntry(nil), safe...), tc.entries...)...)
			_, err := sb.Restore(ctx, bytes.NewReader(arch))
			if !errors.Is(err, sandboxes.ErrUnsafeArchive) {
				t.Errorf("restore: got %v, want an error matching ErrUnsafeArchive", err)
			}
			after, _ := listTree(t, ctx, sb)
			sameTree(t, "after a refused restore", before, after)
			for _, p := range tc.outside {
				if exitCode(t, ctx, sb, "test -e "+shellQuote(p)) == 0 {
					t.Errorf("the refused archive created %s outside the workspace", p)
				}
			}
		})
	}

	// Each link below passes a lexical check, but a/l1 -> .. makes l2
	// point out of the workspace; the file entry l2 then replaces the
	// link, or writes through it. The package may refuse the archive;
	// whatever it lets through, the backend must not write outside.
	t.Run("chained symlinks", func(t *testing.T) {
		arch := craft(t, append(append([]tarEntry(nil), safe...),
			dir("a/"), symlink("a/l1", ".."), symlink("l2", "a/l1/../"+evil), file("l2", "evil"))...)
		if _, err := sb.Restore(ctx, bytes.NewReader(arch)); err != nil {
			after, _ := listTree(t, ctx, sb)
			sameTree(t, "after a failed restore", before, after)
		} else {
			// Accepted: the restore replaced the workspace; l2 must
			// be a plain file in it.
			if got := sh(t, ctx, sb, "ls -l l2 | cut -c1"); got != "-\n" {
				t.Errorf("l2 is %q after the restore, want a regular file", got)
			}
		}
		if exitCode(t, ctx, sb, "test -e "+shellQuote("../"+evil)) == 0 {
			t.Errorf("restoring chained symbolic links wrote ../%s outside the workspace", evil)
		}
	})
}

func (s *suite) testRestoreCorrupt(t *testing.T) {
	ctx := testContext(t)
	sb := s.newSandbox(t)
	writeFile(t, ctx, sb, "keep.txt", []byte("keep me"), 0o644)
	before, _ := listTree(t, ctx, sb)

	// A good snapshot whose first entry arrives whole before the cut.
	big := randomBytes(2<<20, 3)
	good := craft(t, file("first.txt", "first"), file("big.bin", string(big)))

	var truncTar bytes.Buffer
	tw := tar.NewWriter(&truncTar)
	tw.WriteHeader(&tar.Header{Name: "first.txt", Mode: 0o644, Size: 5, Typeflag: tar.TypeReg})
	tw.Write([]byte("first"))
	tw.WriteHeader(&tar.Header{Name: "big.bin", Mode: 0o644, Size: 1 << 20, Typeflag: tar.TypeReg})
	tw.Write(big[:1000]) // and no more: the tar ends inside big.bin

	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"not zstd", []byte("this is not a snapshot, it is not even zstd")},
		{"zstd stream cut short", good[:len(good)*2/3]},
		{"zstd of something that is not a tar", compress(t, randomBytes(10<<10, 4))},
		{"tar cut inside a file", compress(t, truncTar.Bytes())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := sb.Restore(ctx, bytes.NewReader(tc.data)); err == nil {
				t.Error("restore of a corrupt snapshot did not fail")
			}
			after, _ := listTree(t, ctx, sb)
			sameTree(t, "after a failed restore", before, after)
		})
	}
}
