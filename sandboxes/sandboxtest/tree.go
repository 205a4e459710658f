package sandboxtest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/agentbot/agentbot/sandboxes"
)

// entry is one line of a workspace listing: what a snapshot carries of a
// path.
type entry struct {
	Name   string      // workspace-relative, no trailing slash
	Type   string      // "file", "dir", "symlink" or "hardlink"
	Mode   fs.FileMode // permission bits; 0777 for symbolic links
	Size   int64       // of a file
	SHA256 string      // of a file's contents, shortened
	Link   string      // target of a link
}

func (e entry) String() string {
	switch e.Type {
	case "file":
		return fmt.Sprintf("file    %04o %s (%d bytes, sha256 %s)", e.Mode, e.Name, e.Size, e.SHA256)
	case "dir":
		return fmt.Sprintf("dir     %04o %s/", e.Mode, e.Name)
	default:
		return fmt.Sprintf("%-7s %04o %s -> %s", e.Type, e.Mode, e.Name, e.Link)
	}
}

// listTree snapshots the workspace of sb and decodes the snapshot into a
// listing sorted by name. It works on every backend because it goes through
// the same Snapshot callers use.
func listTree(t *testing.T, ctx context.Context, sb *sandboxes.Sandbox) ([]entry, sandboxes.SnapshotInfo) {
	t.Helper()
	var buf bytes.Buffer
	info, err := sb.Snapshot(ctx, &buf)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	tree, err := decodeSnapshot(&buf)
	if err != nil {
		t.Fatalf("decoding the snapshot: %v", err)
	}
	return tree, info
}

// decodeSnapshot lists a portable snapshot.
func decodeSnapshot(r io.Reader) ([]entry, error) {
	zr, err := zstd.NewReader(r)
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	var tree []entry
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		e := entry{Name: strings.TrimSuffix(h.Name, "/"), Mode: fs.FileMode(h.Mode) & fs.ModePerm}
		switch h.Typeflag {
		case tar.TypeReg:
			sum := sha256.New()
			n, err := io.Copy(sum, tr)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", h.Name, err)
			}
			e.Type, e.Size, e.SHA256 = "file", n, hex.EncodeToString(sum.Sum(nil)[:8])
		case tar.TypeDir:
			e.Type = "dir"
		case tar.TypeSymlink:
			e.Type, e.Link = "symlink", h.Linkname
		case tar.TypeLink:
			e.Type, e.Link = "hardlink", h.Linkname
		default:
			return nil, fmt.Errorf("%s: tar type %q in a portable snapshot", h.Name, h.Typeflag)
		}
		tree = append(tree, e)
	}
	slices.SortFunc(tree, func(a, b entry) int { return strings.Compare(a.Name, b.Name) })
	return tree, nil
}

// diffTrees returns the entries that differ between want and got, one a
// line, "-" for want's and "+" for got's; "" when the trees are the same.
func diffTrees(want, got []entry) string {
	in := func(tree []entry, e entry) bool { return slices.Contains(tree, e) }
	var b strings.Builder
	for _, e := range want {
		if !in(got, e) {
			fmt.Fprintf(&b, "- %s\n", e)
		}
	}
	for _, e := range got {
		if !in(want, e) {
			fmt.Fprintf(&b, "+ %s\n", e)
		}
	}
	return b.String()
}

func formatTree(tree []entry) string {
	var b strings.Builder
	for _, e := range tree {
		fmt.Fprintf(&b, "  %s\n", e)
	}
	if len(tree) == 0 {
		b.WriteString("  (empty)\n")
	}
	return b.String()
}

// sameTree fails the test when got differs from want, showing the
// difference and both listings.
func sameTree(t *testing.T, what string, want, got []entry) {
	t.Helper()
	if d := diffTrees(want, got); d != "" {
		t.Fatalf("%s: the workspace differs (-want +got):\n%s\nwant:\n%sgot:\n%s", what, d, formatTree(want), formatTree(got))
	}
}

// richFiles are the files of the rich tree: every kind of content and mode a
// snapshot must carry.
var richFiles = []struct {
	name string
	data []byte
	mode fs.FileMode
}{
	{"a/b/c/deep.txt", []byte("deep\n"), 0o644},
	{"data/all-bytes.bin", allBytes(2), 0o644},
	{"data/random.bin", randomBytes(300<<10, 2), 0o644},
	{"bin/run.sh", []byte("#!/bin/sh\necho ran\n"), 0o755},
	{"secret/key.pem", []byte("not really a key\n"), 0o600},
	{"names/with space/ünï cødé 日本.txt", []byte("unicode\n"), 0o644},
	{"empty-file", nil, 0o644},
	{".hidden", []byte("dot file\n"), 0o640},
}

// richLinks are its symbolic links, relative and inside the workspace.
var richLinks = []struct{ name, target string }{
	{"links/to-file", "../data/all-bytes.bin"},
	{"links/to-dir", "../a/b"},
	{"a/b/c/sibling", "deep.txt"},
	{"links/dangling", "../not-there"},
}

// richDirs are directories made by commands, with their modes.
var richDirs = []struct {
	name string
	mode fs.FileMode
}{
	{"empty/nested", 0o755},
	{"private", 0o700},
}

// buildRichTree makes the rich tree in sb's workspace.
func buildRichTree(t *testing.T, ctx context.Context, sb *sandboxes.Sandbox) {
	t.Helper()
	for _, f := range richFiles {
		writeFile(t, ctx, sb, f.name, f.data, f.mode)
	}
	var cmd strings.Builder
	cmd.WriteString("set -e; mkdir -p links\n")
	for _, d := range richDirs {
		fmt.Fprintf(&cmd, "mkdir -p %s && chmod %04o %[1]s\n", shellQuote(d.name), d.mode)
	}
	for _, l := range richLinks {
		fmt.Fprintf(&cmd, "ln -s %s %s\n", shellQuote(l.target), shellQuote(l.name))
	}
	cmd.WriteString("chmod 0755 links empty a a/b a/b/c bin data names 'names/with space' && chmod 0700 secret\n")
	sh(t, ctx, sb, cmd.String())
}

// wantRich returns what the listing of the rich tree must hold, so a
// backend that archives nothing cannot pass a round trip.
func wantRich() []entry {
	var tree []entry
	for _, f := range richFiles {
		tree = append(tree, entry{Name: f.name, Type: "file", Mode: f.mode, Size: int64(len(f.data)), SHA256: shortSum(f.data)})
	}
	for _, l := range richLinks {
		tree = append(tree, entry{Name: l.name, Type: "symlink", Mode: 0o777, Link: l.target})
	}
	for _, d := range richDirs {
		tree = append(tree, entry{Name: d.name, Type: "dir", Mode: d.mode})
	}
	for _, d := range []string{"a", "a/b", "a/b/c", "bin", "data", "empty", "links", "names", "names/with space"} {
		tree = append(tree, entry{Name: d, Type: "dir", Mode: 0o755})
	}
	tree = append(tree, entry{Name: "secret", Type: "dir", Mode: 0o700})
	slices.SortFunc(tree, func(a, b entry) int { return strings.Compare(a.Name, b.Name) })
	return tree
}

// checkRich fails the test unless tree is exactly the rich tree.
func checkRich(t *testing.T, what string, tree []entry) {
	t.Helper()
	sameTree(t, what+": the rich tree as built", wantRich(), tree)
}

// shortSum is how a listing shows a file's contents.
func shortSum(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}
