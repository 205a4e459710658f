package localsandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbot/agentbot/sandboxes"
)

// tree describes every entry below root (not root itself): type, mode,
// contents or link target, and modification time, keyed by relative path.
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := make(map[string]string)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		desc := fmt.Sprintf("%v", fi.Mode())
		switch {
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			desc += " " + hex.EncodeToString(sum[:8])
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[rel] = desc + " -> " + target // link times are not kept
			return nil
		}
		out[rel] = desc + " " + fi.ModTime().UTC().Format(time.RFC3339Nano)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameTree(t *testing.T, what string, want, got map[string]string) {
	t.Helper()
	var diff []string
	for k, v := range want {
		if got[k] != v {
			diff = append(diff, fmt.Sprintf("- %s: %s", k, v))
		}
	}
	for k, v := range got {
		if want[k] != v {
			diff = append(diff, fmt.Sprintf("+ %s: %s", k, v))
		}
	}
	if len(diff) > 0 {
		slices.Sort(diff)
		t.Fatalf("%s: the workspace differs (-want +got):\n%s", what, strings.Join(diff, "\n"))
	}
}

// fillWorkspace puts files, modes, a link and an empty directory in root.
func fillWorkspace(t *testing.T, root string) {
	t.Helper()
	writeTestFile(t, filepath.Join(root, "keep.txt"), "keep me", 0o644)
	writeTestFile(t, filepath.Join(root, "bin/tool.sh"), "#!/bin/sh\n", 0o755)
	writeTestFile(t, filepath.Join(root, "secret/key"), "k", 0o600)
	if err := os.Chmod(filepath.Join(root, "secret"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "empty"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("keep.txt", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	// A read-only directory: moving it aside needs care.
	writeTestFile(t, filepath.Join(root, "ro/file"), "ro", 0o444)
	if err := os.Chmod(filepath.Join(root, "ro"), 0o555); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, p := range []string{"keep.txt", "bin/tool.sh", "secret/key", "ro/file", "empty", "bin", "secret"} {
		if err := os.Chtimes(filepath.Join(root, p), old, old); err != nil {
			t.Fatal(err)
		}
	}
}

type tarEntry struct {
	name  string
	typ   byte
	mode  int64
	body  string
	link  string
	mtime time.Time
}

func makeTar(t testing.TB, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, ModTime: e.mtime, Format: tar.FormatPAX}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

var (
	t1 = time.Date(2021, 5, 6, 7, 8, 9, 0, time.UTC)
	t2 = time.Date(2022, 6, 7, 8, 9, 10, 500, time.UTC)
)

// newArchive is what the restore tests restore.
func newArchive(t *testing.T) []byte {
	return makeTar(t,
		tarEntry{name: "d/", typ: tar.TypeDir, mode: 0o750, mtime: t1},
		tarEntry{name: "d/f.txt", typ: tar.TypeReg, mode: 0o640, body: "f", mtime: t2},
		tarEntry{name: "keep.txt", typ: tar.TypeReg, mode: 0o600, body: "replaced", mtime: t1},
		tarEntry{name: "ro/", typ: tar.TypeDir, mode: 0o555, mtime: t1},
		tarEntry{name: "ro/inner.txt", typ: tar.TypeReg, mode: 0o444, body: "inner", mtime: t1},
		tarEntry{name: "link", typ: tar.TypeSymlink, mode: 0o777, link: "d/f.txt"},
		tarEntry{name: "hard", typ: tar.TypeLink, link: "d/f.txt"},
		tarEntry{name: "empty-dir/", typ: tar.TypeDir, mode: 0o700, mtime: t2},
		tarEntry{name: "./implicit/parent/f", typ: tar.TypeReg, mode: 0o644, body: "no dir entries", mtime: t1},
		tarEntry{name: "big.bin", typ: tar.TypeReg, mode: 0o644, body: strings.Repeat("0123456789", 100_000), mtime: t1},
	)
}

// sandboxKinds are the two kinds of workspace: ours, and one the user
// chose.
var sandboxKinds = []struct {
	name   string
	chosen bool
}{
	{"owned root", false},
	{"chosen root", true},
}

func createKind(t *testing.T, b *Backend, chosen bool) *instance {
	t.Helper()
	spec := sandboxes.Spec{}
	if chosen {
		spec.Root = userDir(t)
	}
	return create(t, b, spec)
}

// checkNoStaging fails the test when Restore left a staging directory.
func checkNoStaging(t *testing.T, inst *instance) {
	t.Helper()
	entries, err := os.ReadDir(inst.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != metaFile && e.Name() != workspaceDir {
			t.Errorf("the sandbox directory holds %s", e.Name())
		}
	}
	entries, err = os.ReadDir(inst.State().Root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".agentbot") {
			t.Errorf("the workspace holds %s", e.Name())
		}
	}
}

func TestLocalRestoreReplaces(t *testing.T) {
	for _, kind := range sandboxKinds {
		t.Run(kind.name, func(t *testing.T) {
			b := newBackend(t)
			inst := createKind(t, b, kind.chosen)
			root := inst.State().Root
			fillWorkspace(t, root)
			rootInfo, _ := os.Stat(root)

			if err := inst.Restore(t.Context(), bytes.NewReader(newArchive(t))); err != nil {
				t.Fatalf("restore: %v", err)
			}
			got := tree(t, root)
			want := map[string]string{
				"d":                 "drwxr-x--- " + t1.Format(time.RFC3339Nano),
				"d/f.txt":           "-rw-r----- " + sum("f") + " " + t2.Format(time.RFC3339Nano),
				"keep.txt":          "-rw------- " + sum("replaced") + " " + t1.Format(time.RFC3339Nano),
				"ro":                "dr-xr-xr-x " + t1.Format(time.RFC3339Nano),
				"ro/inner.txt":      "-r--r--r-- " + sum("inner") + " " + t1.Format(time.RFC3339Nano),
				"link":              "Lrwxrwxrwx -> d/f.txt",
				"hard":              "-rw-r----- " + sum("f") + " " + t2.Format(time.RFC3339Nano),
				"empty-dir":         "drwx------ " + t2.Format(time.RFC3339Nano),
				"implicit/parent/f": "-rw-r--r-- " + sum("no dir entries") + " " + t1.Format(time.RFC3339Nano),
				"big.bin":           "-rw-r--r-- " + sum(strings.Repeat("0123456789", 100_000)) + " " + t1.Format(time.RFC3339Nano),
				"implicit":          got["implicit"],
				"implicit/parent":   got["implicit/parent"],
			}
			sameTree(t, "after restore", want, got)
			for _, d := range []string{"implicit", "implicit/parent"} {
				if !strings.HasPrefix(got[d], "drwxr-xr-x ") {
					t.Errorf("%s, with no entry of its own, is %s; want drwxr-xr-x", d, got[d])
				}
			}
			a, _ := os.Stat(filepath.Join(root, "d/f.txt"))
			h, _ := os.Stat(filepath.Join(root, "hard"))
			if !os.SameFile(a, h) {
				t.Error("hard is not a hard link to d/f.txt")
			}
			checkNoStaging(t, inst)
			if kind.chosen {
				if now, _ := os.Stat(root); !os.SameFile(rootInfo, now) || now.Mode() != rootInfo.Mode() {
					t.Error("the chosen root directory itself was replaced or changed")
				}
			}
			// And the sandbox works on the new tree.
			code, out, _, err := run(t, t.Context(), inst, sandboxes.ExecRequest{Command: "cat link hard d/f.txt"})
			if err != nil || code != 0 || out != "fff" {
				t.Errorf("cat after restore: %q, %d, %v", out, code, err)
			}
		})
	}
}

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:8])
}

func TestLocalRestoreFailsMidway(t *testing.T) {
	arch := newArchive(t)
	broken := errBroken
	for _, kind := range sandboxKinds {
		for _, tc := range []struct {
			name   string
			reader func() io.Reader
			want   error
		}{
			{"inside the first file", func() io.Reader { return failAfter(arch, 1500) }, broken},
			{"inside the big file", func() io.Reader { return failAfter(arch, len(arch)/2) }, broken},
			{"after the tar trailer", func() io.Reader { return failAfter(arch, len(arch)) }, broken},
			{"cut short", func() io.Reader { return bytes.NewReader(arch[:len(arch)/2]) }, io.ErrUnexpectedEOF},
			{"refused entry", func() io.Reader {
				return bytes.NewReader(makeTar(t,
					tarEntry{name: "fine.txt", typ: tar.TypeReg, mode: 0o644, body: "fine"},
					tarEntry{name: "dev", typ: tar.TypeChar}))
			}, sandboxes.ErrUnsafeArchive},
		} {
			t.Run(kind.name+"/"+tc.name, func(t *testing.T) {
				b := newBackend(t)
				inst := createKind(t, b, kind.chosen)
				root := inst.State().Root
				fillWorkspace(t, root)
				before := tree(t, root)

				err := inst.Restore(t.Context(), tc.reader())
				if !errors.Is(err, tc.want) {
					t.Fatalf("restore: got %v, want %v", err, tc.want)
				}
				sameTree(t, "after a failed restore", before, tree(t, root))
				checkNoStaging(t, inst)
			})
		}
		t.Run(kind.name+"/cancelled", func(t *testing.T) {
			b := newBackend(t)
			inst := createKind(t, b, kind.chosen)
			root := inst.State().Root
			fillWorkspace(t, root)
			before := tree(t, root)
			ctx, cancel := context.WithCancel(t.Context())
			r := &cancelAfter{r: bytes.NewReader(arch), n: len(arch) / 2, cancel: cancel}
			if err := inst.Restore(ctx, r); !errors.Is(err, context.Canceled) {
				t.Fatalf("restore: got %v, want context.Canceled", err)
			}
			sameTree(t, "after a cancelled restore", before, tree(t, root))
			checkNoStaging(t, inst)
		})
	}
}

// failAfter returns a reader of data[:n] that then fails.
func failAfter(data []byte, n int) io.Reader {
	return io.MultiReader(bytes.NewReader(data[:n]), errReader{errBroken})
}

var errBroken = errors.New("the stream broke")

// cancelAfter cancels once n bytes were read.
type cancelAfter struct {
	r      io.Reader
	n      int
	cancel context.CancelFunc
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if c.n -= n; c.n <= 0 {
		c.cancel()
	}
	return n, err
}

func TestLocalRestoreSwapFails(t *testing.T) {
	arch := newArchive(t)
	for _, kind := range sandboxKinds {
		// Count the renames of a successful swap, then fail each in turn.
		calls := countRenames(t, kind.chosen, arch)
		if calls < 2 {
			t.Fatalf("%s: a swap made %d renames", kind.name, calls)
		}
		for n := 1; n <= calls; n++ {
			t.Run(fmt.Sprintf("%s/rename %d of %d", kind.name, n, calls), func(t *testing.T) {
				b := newBackend(t)
				inst := createKind(t, b, kind.chosen)
				root := inst.State().Root
				fillWorkspace(t, root)
				before := tree(t, root)

				injected := errors.New("injected rename failure")
				i := 0
				orig := rename
				rename = func(rt *os.Root, from, to string) error {
					if i++; i == n {
						return injected
					}
					return orig(rt, from, to)
				}
				defer func() { rename = orig }()

				if err := inst.Restore(t.Context(), bytes.NewReader(arch)); !errors.Is(err, injected) {
					t.Fatalf("restore: got %v, want the injected failure", err)
				}
				rename = orig
				sameTree(t, "after a failed swap", before, tree(t, root))
				checkNoStaging(t, inst)
			})
		}
	}
}

// countRenames restores arch into a fresh workspace of the kind and returns
// how many renames the swap made.
func countRenames(t *testing.T, chosen bool, arch []byte) int {
	t.Helper()
	b := newBackend(t)
	inst := createKind(t, b, chosen)
	fillWorkspace(t, inst.State().Root)
	n := 0
	orig := rename
	rename = func(rt *os.Root, from, to string) error { n++; return orig(rt, from, to) }
	defer func() { rename = orig }()
	if err := inst.Restore(t.Context(), bytes.NewReader(arch)); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestLocalArchive(t *testing.T) {
	b := newBackend(t)
	inst := createKind(t, b, true)
	root := inst.State().Root
	fillWorkspace(t, root)
	if err := os.Symlink("/etc/passwd", filepath.Join(root, "abs-link")); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("mkfifo", filepath.Join(root, "fifo")).Run(); err != nil {
		t.Fatal(err)
	}
	// Restore's staging directories at the top are left out; a name like
	// theirs deeper down is the user's.
	for _, d := range []string{".agentbot-restore-1234", ".agentbot-old-5678", "sub/.agentbot-old-kept"} {
		writeTestFile(t, filepath.Join(root, d, "x"), "x", 0o644)
	}

	var buf bytes.Buffer
	if err := inst.Archive(t.Context(), &buf); err != nil {
		t.Fatal(err)
	}
	got := make(map[string]string)
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		got[h.Name] = fmt.Sprintf("%c %04o %s%s", h.Typeflag, h.Mode, body, h.Linkname)
		if h.Uname != "" || h.Gname != "" {
			t.Errorf("%s carries its owner (%s:%s)", h.Name, h.Uname, h.Gname)
		}
	}
	want := map[string]string{
		"keep.txt":                 "0 0644 keep me",
		"bin/":                     "5 0755 ",
		"bin/tool.sh":              "0 0755 #!/bin/sh\n",
		"secret/":                  "5 0700 ",
		"secret/key":               "0 0600 k",
		"empty/":                   "5 0700 ",
		"link":                     "2 0777 keep.txt",
		"abs-link":                 "2 0777 /etc/passwd",
		"ro/":                      "5 0555 ",
		"ro/file":                  "0 0444 ro",
		"fifo":                     "6 0644 ",
		"sub/":                     "5 0755 ",
		"sub/.agentbot-old-kept/":  "5 0755 ",
		"sub/.agentbot-old-kept/x": "0 0644 x",
	}
	fi, _ := os.Lstat(filepath.Join(root, "fifo"))
	want["fifo"] = fmt.Sprintf("6 %04o ", fi.Mode().Perm())
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("archive:\n got %v\nwant %v", got, want)
	}
}

// TestLocalArchiveRestoreRoundTrip carries a workspace of ours into a
// chosen one and back, through Archive and Restore alone.
func TestLocalArchiveRestoreRoundTrip(t *testing.T) {
	ctx := t.Context()
	b := newBackend(t)
	src := createKind(t, b, false)
	fillWorkspace(t, src.State().Root)
	want := tree(t, src.State().Root)

	hop := func(from, to *instance) {
		t.Helper()
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(from.Archive(ctx, pw)) }()
		if err := to.Restore(ctx, pr); err != nil {
			t.Fatal(err)
		}
	}
	chosen := createKind(t, b, true)
	hop(src, chosen)
	sameTree(t, "in the chosen root", want, tree(t, chosen.State().Root))
	back := createKind(t, b, false)
	hop(chosen, back)
	sameTree(t, "back in a root of ours", want, tree(t, back.State().Root))
}

// TestLocalRestoreLaterEntriesWin restores a stream in which names come
// back: each later entry replaces what an earlier one put there, and a
// file below a link to a directory lands in that directory, as before
// Restore took its shortcuts for fresh names in known directories.
func TestLocalRestoreLaterEntriesWin(t *testing.T) {
	arch := makeTar(t,
		tarEntry{name: "a", typ: tar.TypeReg, mode: 0o644, body: "one", mtime: t1},
		tarEntry{name: "a", typ: tar.TypeReg, mode: 0o600, body: "two", mtime: t2},
		tarEntry{name: "b", typ: tar.TypeReg, mode: 0o644, body: "file", mtime: t1},
		tarEntry{name: "b/", typ: tar.TypeDir, mode: 0o750, mtime: t1},
		tarEntry{name: "b/x", typ: tar.TypeReg, mode: 0o644, body: "bx", mtime: t1},
		tarEntry{name: "c/", typ: tar.TypeDir, mode: 0o755, mtime: t1},
		tarEntry{name: "c/y", typ: tar.TypeReg, mode: 0o644, body: "cy", mtime: t1},
		tarEntry{name: "c", typ: tar.TypeReg, mode: 0o644, body: "c-file", mtime: t2},
		tarEntry{name: "d/", typ: tar.TypeDir, mode: 0o755, mtime: t1},
		tarEntry{name: "s", typ: tar.TypeSymlink, mode: 0o777, link: "d"},
		tarEntry{name: "s/f", typ: tar.TypeReg, mode: 0o644, body: "through", mtime: t1},
		tarEntry{name: "s/", typ: tar.TypeDir, mode: 0o700, mtime: t2},
		tarEntry{name: "s/g", typ: tar.TypeReg, mode: 0o644, body: "g", mtime: t1},
		tarEntry{name: "e/f", typ: tar.TypeReg, mode: 0o644, body: "ef", mtime: t1},
		tarEntry{name: "e", typ: tar.TypeSymlink, mode: 0o777, link: "d"},
		tarEntry{name: "e/h", typ: tar.TypeReg, mode: 0o644, body: "h", mtime: t1},
		tarEntry{name: "l", typ: tar.TypeSymlink, mode: 0o777, link: "a"},
		tarEntry{name: "l", typ: tar.TypeSymlink, mode: 0o777, link: "c"},
		tarEntry{name: "d/", typ: tar.TypeDir, mode: 0o750, mtime: t2},
	)
	for _, kind := range sandboxKinds {
		t.Run(kind.name, func(t *testing.T) {
			inst := createKind(t, newBackend(t), kind.chosen)
			root := inst.State().Root
			if err := inst.Restore(t.Context(), bytes.NewReader(arch)); err != nil {
				t.Fatalf("restore: %v", err)
			}
			f := func(mode, body string, mt time.Time) string {
				return mode + " " + sum(body) + " " + mt.Format(time.RFC3339Nano)
			}
			want := map[string]string{
				"a":   f("-rw-------", "two", t2),
				"b":   "drwxr-x--- " + t1.Format(time.RFC3339Nano),
				"b/x": f("-rw-r--r--", "bx", t1),
				"c":   f("-rw-r--r--", "c-file", t2),
				"d":   "drwxr-x--- " + t2.Format(time.RFC3339Nano),
				"d/f": f("-rw-r--r--", "through", t1),
				"d/h": f("-rw-r--r--", "h", t1),
				"s":   "drwx------ " + t2.Format(time.RFC3339Nano),
				"s/g": f("-rw-r--r--", "g", t1),
				"e":   "Lrwxrwxrwx -> d",
				"l":   "Lrwxrwxrwx -> c",
			}
			sameTree(t, "after restore", want, tree(t, root))
			checkNoStaging(t, inst)
		})
	}
}

// TestLocalArchiveRestoreDeep carries a tree deeper than the walks keep a
// directory handle per level.
func TestLocalArchiveRestoreDeep(t *testing.T) {
	ctx := t.Context()
	b := newBackend(t)
	src := createKind(t, b, false)
	root := src.State().Root
	p := root
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	var dirs []string
	for i := range maxDirHandles + 10 {
		p = filepath.Join(p, fmt.Sprintf("d%d", i))
		writeTestFile(t, filepath.Join(p, "f"), fmt.Sprint(i), 0o640)
		if err := os.Symlink("f", filepath.Join(p, "l")); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, p)
	}
	for _, d := range slices.Backward(dirs) {
		if err := os.Chtimes(filepath.Join(d, "f"), old, old); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(d, old, old); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dirs[len(dirs)-1], 0o500); err != nil {
		t.Fatal(err)
	}
	want := tree(t, root)

	var buf bytes.Buffer
	if err := src.Archive(ctx, &buf); err != nil {
		t.Fatal(err)
	}
	dst := createKind(t, b, true)
	if err := dst.Restore(ctx, &buf); err != nil {
		t.Fatal(err)
	}
	sameTree(t, "after the round trip", want, tree(t, dst.State().Root))
}

// TestLocalArchiveEntries checks that ArchiveEntries, which Snapshot uses,
// hands out what Archive writes, entry for entry.
func TestLocalArchiveEntries(t *testing.T) {
	b := newBackend(t)
	inst := createKind(t, b, false)
	root := inst.State().Root
	fillWorkspace(t, root)
	if err := exec.Command("mkfifo", filepath.Join(root, "fifo")).Run(); err != nil {
		t.Fatal(err)
	}
	describe := func(h *tar.Header, body []byte) string {
		return fmt.Sprintf("%s %c %04o %d %s %q %s", h.Name, h.Typeflag, h.Mode, h.Size,
			h.ModTime.UTC().Format(time.RFC3339Nano), body, h.Linkname)
	}
	var fromEntries []string
	err := inst.ArchiveEntries(t.Context(), func(h *tar.Header, body io.Reader) error {
		var data []byte
		if body != nil {
			var err error
			if data, err = io.ReadAll(body); err != nil {
				return err
			}
		}
		fromEntries = append(fromEntries, describe(h, data))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := inst.Archive(t.Context(), &buf); err != nil {
		t.Fatal(err)
	}
	var fromArchive []string
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		fromArchive = append(fromArchive, describe(h, data))
	}
	if !slices.Equal(fromEntries, fromArchive) {
		t.Errorf("ArchiveEntries:\n%s\nArchive:\n%s", strings.Join(fromEntries, "\n"), strings.Join(fromArchive, "\n"))
	}

	// An error of emit's ends the walk and comes back.
	stop := errors.New("enough")
	calls := 0
	err = inst.ArchiveEntries(t.Context(), func(*tar.Header, io.Reader) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Errorf("emit failing: ArchiveEntries returned %v after %d calls, want its error after 1", err, calls)
	}
}

// TestFileBody checks that a file is read to the size in its header: cut
// there when it grew, an error when it shrank.
func TestFileBody(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	writeTestFile(t, p, "0123456789", 0o644)
	for _, tc := range []struct {
		left    int64
		want    string
		wantErr bool
	}{
		{10, "0123456789", false},
		{4, "0123", false}, // grew since it was stat'ed
		{0, "", false},
		{12, "0123456789", true}, // shrank
	} {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		b := &fileBody{ctx: t.Context(), f: f, name: "f", left: tc.left}
		got, err := io.ReadAll(b)
		f.Close()
		if string(got) != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("left %d: read %q, %v; want %q, error %v", tc.left, got, err, tc.want, tc.wantErr)
		}
		if tc.wantErr && (err == nil || !strings.Contains(err.Error(), "shrank")) {
			t.Errorf("left %d: error %v does not say the file shrank", tc.left, err)
		}
	}
}

// TestReadDir checks that readDir gives every entry with its type and
// leaves no descriptor open.
func TestReadDir(t *testing.T) {
	dir := t.TempDir()
	writeTestFile(t, filepath.Join(dir, "file"), "x", 0o644)
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("file", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("mkfifo", filepath.Join(dir, "fifo")).Run(); err != nil {
		t.Fatal(err)
	}
	rt, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			return -1
		}
		return len(ents)
	}
	before := fds()
	for range 50 {
		ents, err := readDir(rt, ".")
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]fs.FileMode{}
		for _, e := range ents {
			got[e.Name()] = e.Type()
		}
		want := map[string]fs.FileMode{"file": 0, "sub": fs.ModeDir, "link": fs.ModeSymlink, "fifo": fs.ModeNamedPipe}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("readDir: %v, want %v", got, want)
		}
	}
	// A leak would leave 50 more; anything else in the process may open
	// or close a few meanwhile.
	if after := fds(); after > before+10 {
		t.Errorf("%d descriptors open before 50 readDirs, %d after", before, after)
	}
}
