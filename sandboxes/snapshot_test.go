package sandboxes

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// tarOf writes headers into a tar, each regular file with Size bytes of
// content made from its name. Names are written as given.
func tarOf(t testing.TB, hs ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hs {
		if h.Format == tar.FormatUnknown {
			h.Format = tar.FormatPAX
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("writing header %q: %v", h.Name, err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(contentOf(h.Name, h.Size)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func contentOf(name string, size int64) []byte {
	return bytes.Repeat([]byte(name+"|"), int(size)/(len(name)+1)+1)[:size]
}

func reg(name string, size int64, mode int64) *tar.Header {
	return &tar.Header{Name: name, Typeflag: tar.TypeReg, Size: size, Mode: mode}
}
func dirH(name string, mode int64) *tar.Header {
	return &tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: mode}
}
func symH(name, target string) *tar.Header {
	return &tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}
}
func hardH(name, target string) *tar.Header {
	return &tar.Header{Name: name, Typeflag: tar.TypeLink, Linkname: target, Mode: 0o644}
}
func specialH(name string, typ byte) *tar.Header {
	return &tar.Header{Name: name, Typeflag: typ, Mode: 0o644, Devmajor: 1, Devminor: 3}
}

// readTar lists a tar's headers and file contents, stopping quietly at the
// first error (an archive cut short by a refusal).
func readTar(data []byte) (hs []*tar.Header, bodies map[string][]byte) {
	bodies = make(map[string][]byte)
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err != nil {
			return hs, bodies
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return hs, bodies
		}
		hs = append(hs, h)
		if h.Typeflag == tar.TypeReg {
			bodies[h.Name] = b
		}
	}
}

func runCheck(t testing.TB, data []byte) (SnapshotInfo, []*tar.Header, map[string][]byte, error) {
	t.Helper()
	var out bytes.Buffer
	info, err := checkArchive(tar.NewReader(bytes.NewReader(data)), tar.NewWriter(&out))
	hs, bodies := readTar(out.Bytes())
	return info, hs, bodies, err
}

func TestCheckArchiveSafe(t *testing.T) {
	owned := reg("./src/main.go", 10, 0o644)
	owned.Uid, owned.Gid, owned.Uname, owned.Gname = 1000, 1000, "bob", "bob"
	in := tarOf(t,
		dirH("./", 0o755),
		dirH("./src/", 0o40755),
		owned,
		reg("src/run.sh", 25, 0o4755), // setuid is dropped
		symH("src/link", "main.go"),
		symH("top-link", "src"),
		symH("src/up", "../top-link"),
		hardH("hl", "./src/main.go"),
		dirH("empty", 0o700),
		reg("empty-file", 0, 0o600),
	)
	info, hs, bodies, err := runCheck(t, in)
	if err != nil {
		t.Fatalf("checkArchive: %v", err)
	}
	want := []string{
		"dir src/ 0755", "file src/main.go 0644", "file src/run.sh 0755", "symlink src/link 0777 -> main.go",
		"symlink top-link 0777 -> src", "symlink src/up 0777 -> ../top-link", "hardlink hl 0644 -> src/main.go",
		"dir empty/ 0700", "file empty-file 0600",
	}
	var got []string
	for _, h := range hs {
		got = append(got, describe(h))
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s keeps its owner: %d/%d %q/%q", h.Name, h.Uid, h.Gid, h.Uname, h.Gname)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("checked archive:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for out, in := range map[string]*tar.Header{"src/main.go": owned, "src/run.sh": nil, "empty-file": nil} {
		src, size := out, int64(len(bodies[out]))
		if in != nil {
			src, size = in.Name, in.Size
		}
		if !bytes.Equal(bodies[out], contentOf(src, size)) || (out == "src/run.sh" && size != 25) {
			t.Errorf("%s: content %q changed", out, bodies[out])
		}
	}
	wantInfo := SnapshotInfo{Files: 4, Dirs: 2, Symlinks: 3, Bytes: 35}
	if info.Files != wantInfo.Files || info.Dirs != wantInfo.Dirs || info.Symlinks != wantInfo.Symlinks ||
		info.Bytes != wantInfo.Bytes || info.SkippedCount != 0 {
		t.Errorf("info %+v, want %+v", info, wantInfo)
	}
}

func describe(h *tar.Header) string {
	var s string
	switch h.Typeflag {
	case tar.TypeReg:
		s = "file " + h.Name
	case tar.TypeDir:
		s = "dir " + h.Name
	case tar.TypeSymlink:
		s = "symlink " + h.Name
	case tar.TypeLink:
		s = "hardlink " + h.Name
	default:
		s = "type " + string(h.Typeflag) + " " + h.Name
	}
	s += " " + modeString(h.Mode)
	if h.Linkname != "" {
		s += " -> " + h.Linkname
	}
	return s
}

// modeString shows a mode, marked with "!" when it has more than
// permission bits.
func modeString(m int64) string {
	s := fmt.Sprintf("%04o", m&0o777)
	if m&^0o777 != 0 {
		s += "!"
	}
	return s
}

func TestCheckArchiveUnsafe(t *testing.T) {
	safe := []*tar.Header{dirH("ok/", 0o755), reg("ok/file", 4, 0o644)}
	for _, tc := range []struct {
		name string
		hs   []*tar.Header
	}{
		{"absolute", []*tar.Header{reg("/etc/passwd", 4, 0o644)}},
		{"absolute dir", []*tar.Header{dirH("/tmp/", 0o755)}},
		{"dot-dot", []*tar.Header{reg("../x", 4, 0o644)}},
		{"dot-dot dir", []*tar.Header{dirH("../", 0o755)}},
		{"nested dot-dot", []*tar.Header{reg("a/../../x", 4, 0o644)}},
		{"dot-dot that stays inside", []*tar.Header{reg("ok/../x", 4, 0o644)}},
		{"backslash", []*tar.Header{reg(`..\x`, 4, 0o644)}},
		{"symlink absolute", []*tar.Header{symH("etc", "/etc")}},
		{"symlink empty target", []*tar.Header{symH("empty", "")}},
		{"symlink out", []*tar.Header{symH("up", "..")}},
		{"symlink far out", []*tar.Header{symH("up", "../../x")}},
		{"nested symlink out", []*tar.Header{symH("ok/up", "../../x")}},
		{"symlink out and back", []*tar.Header{symH("ok/up", "../../ws/ok")}},
		{"symlink dot-dot name", []*tar.Header{symH("../l", "x")}},
		{"below a symlink", []*tar.Header{symH("link", "."), reg("link/evil", 4, 0o644)}},
		{"deep below a symlink", []*tar.Header{symH("ok/l", "."), reg("ok/l/a/b", 4, 0o644)}},
		{"dir below a symlink", []*tar.Header{symH("l", "ok"), dirH("l/d/", 0o755)}},
		{"symlink below a symlink", []*tar.Header{symH("l", "ok"), symH("l/m", "file")}},
		{"hard link out", []*tar.Header{hardH("hl", "../x")}},
		{"hard link absolute", []*tar.Header{hardH("hl", "/etc/passwd")}},
		{"hard link to a missing file", []*tar.Header{hardH("hl", "nothere")}},
		{"hard link to a later file", []*tar.Header{hardH("hl", "later"), reg("later", 1, 0o644)}},
		{"hard link to a directory", []*tar.Header{hardH("hl", "ok")}},
		{"hard link to a symlink", []*tar.Header{symH("s", "ok/file"), hardH("hl", "s")}},
		{"hard link to a replaced file", []*tar.Header{reg("f", 1, 0o644), symH("f", "ok"), hardH("hl", "f")}},
		{"char device", []*tar.Header{specialH("null", tar.TypeChar)}},
		{"block device", []*tar.Header{specialH("sda", tar.TypeBlock)}},
		{"fifo", []*tar.Header{specialH("fifo", tar.TypeFifo)}},
		{"contiguous file", []*tar.Header{specialH("cont", tar.TypeCont)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, hs, _, err := runCheck(t, tarOf(t, append(slices.Clone(safe), tc.hs...)...))
			if !errors.Is(err, ErrUnsafeArchive) {
				t.Fatalf("checkArchive: %v, want ErrUnsafeArchive", err)
			}
			// Nothing after the refused entry was passed on.
			for _, h := range hs {
				if !strings.HasPrefix(h.Name, "ok/") && !slices.ContainsFunc(tc.hs, func(in *tar.Header) bool { return in.Name == h.Name }) {
					t.Errorf("passed on %q", h.Name)
				}
			}
		})
	}
}

func TestCheckArchiveCorrupt(t *testing.T) {
	good := tarOf(t, reg("a", 2000, 0o644), reg("b", 10, 0o644))
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"not a tar", bytes.Repeat([]byte("garbage!"), 200)},
		{"cut inside a file", good[:1200]},
		{"cut inside a header", good[:2600]},
		{"bad checksum", func() []byte {
			b := slices.Clone(good)
			b[0] ^= 0xff // the name of the first header
			return b
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, _, err := runCheck(t, tc.data); !errors.Is(err, ErrUnsafeArchive) {
				t.Fatalf("checkArchive: %v, want ErrUnsafeArchive", err)
			}
		})
	}
}

func TestEntryName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{ // want "" means refused
		{"a", "a"},
		{"./a/b/", "a/b"},
		{"a//b", "a/b"},
		{"./", "."},
		{".", "."},
		{"a/./b", "a/b"},
		{"..a/b..", "..a/b.."},
		{"", ""},
		{"/a", ""},
		{"..", ""},
		{"a/..", ""},
		{"a/../b", ""},
		{`a\b`, ""},
		{"a\x00b", ""},
	} {
		got, err := entryName(tc.in)
		if tc.want == "" {
			if !errors.Is(err, ErrUnsafeArchive) {
				t.Errorf("entryName(%q) = %q, %v; want ErrUnsafeArchive", tc.in, got, err)
			}
		} else if err != nil || got != tc.want {
			t.Errorf("entryName(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestCheckSymlink(t *testing.T) {
	for _, tc := range []struct {
		name, target string
		ok           bool
	}{
		{"l", "x", true},
		{"l", ".", true},
		{"l", "./x/./y/", true},
		{"l", "a//b", true},
		{"a/l", "..", true},
		{"a/l", "../b", true},
		{"a/b/l", "../../x", true},
		{"a/b/l", "../..", true},
		{"a/l", "./../.", true},
		{"l", "..", false},
		{"l", "../x", false},
		{"l", "./..", false},
		{"l", "x/../..", false},
		{"l", "x/../../y", false},
		{"a/l", "../..", false},
		{"a/l", "../a/../..", false},
		{"a/b/l", "../../../x", false},
		{"a/b/l", "../c/../../../d", false},
		{"l", "/etc", false},
		{"a/l", "/", false},
		{"l", "", false},
		{"l", "x\x00", false},
	} {
		err := checkSymlink(tc.name, tc.target)
		if tc.ok && err != nil {
			t.Errorf("checkSymlink(%q, %q) = %v, want ok", tc.name, tc.target, err)
		}
		if !tc.ok && !errors.Is(err, ErrUnsafeArchive) {
			t.Errorf("checkSymlink(%q, %q) = %v, want ErrUnsafeArchive", tc.name, tc.target, err)
		}
	}
}

func TestNormalize(t *testing.T) {
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
	owned := reg("./a/f.txt", 12, 0o100644)
	owned.Uid, owned.Gid, owned.Uname, owned.Gname, owned.ModTime = 1000, 1000, "bob", "staff", mtime
	in := tarOf(t,
		dirH("./", 0o755),
		dirH("./a/", 0o40755),
		owned,
		reg("./a/setuid", 3, 0o4755),
		symH("./a/ok-link", "f.txt"),
		symH("./a/root-link", ".."),
		symH("./out-link", "../x"),
		symH("./abs-link", "/etc/passwd"),
		specialH("./fifo", tar.TypeFifo),
		specialH("./a/null", tar.TypeChar),
		specialH("./sda", tar.TypeBlock),
		hardH("./a/hl", "./a/f.txt"),
		hardH("./stray-hl", "./elsewhere"),
	)
	var out bytes.Buffer
	info, err := normalize(tar.NewReader(bytes.NewReader(in)), tar.NewWriter(&out))
	if err != nil {
		t.Fatalf("normalize: %v", err)
	}
	hs, bodies := readTar(out.Bytes())
	var got []string
	for _, h := range hs {
		got = append(got, describe(h))
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s keeps its owner: %d/%d %q/%q", h.Name, h.Uid, h.Gid, h.Uname, h.Gname)
		}
		if h.ModTime.Nanosecond() != 0 {
			t.Errorf("%s: mtime %v keeps sub-second precision", h.Name, h.ModTime)
		}
	}
	want := []string{
		"dir a/ 0755", "file a/f.txt 0644", "file a/setuid 0755", "symlink a/ok-link 0777 -> f.txt",
		"symlink a/root-link 0777 -> ..", "hardlink a/hl 0644 -> a/f.txt",
	}
	if !slices.Equal(got, want) {
		t.Errorf("normalized:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !bytes.Equal(bodies["a/f.txt"], contentOf("./a/f.txt", 12)) {
		t.Errorf("a/f.txt: content %q", bodies["a/f.txt"])
	}
	if info.Files != 3 || info.Dirs != 1 || info.Symlinks != 2 || info.Bytes != 15 {
		t.Errorf("info %+v, want 3 files (one a hard link), 1 dir, 2 links, 15 bytes", info)
	}
	if info.SkippedCount != 6 || len(info.Skipped) != 6 {
		t.Fatalf("skipped %d: %q; want 6", info.SkippedCount, info.Skipped)
	}
	for _, name := range []string{"out-link", "abs-link", "fifo", "a/null", "sda", "stray-hl"} {
		if !slices.ContainsFunc(info.Skipped, func(s string) bool { return strings.HasPrefix(s, name+": ") }) {
			t.Errorf("Skipped %q does not report %s", info.Skipped, name)
		}
	}
	// What normalize writes, checkArchive accepts unchanged.
	cinfo, chs, _, err := runCheck(t, out.Bytes())
	if err != nil || len(chs) != len(hs) || cinfo.Files != info.Files || cinfo.Bytes != info.Bytes {
		t.Errorf("checkArchive of normalize's output: %+v, %d entries, %v", cinfo, len(chs), err)
	}
}

func TestNormalizeSkipCap(t *testing.T) {
	var hs []*tar.Header
	for i := range maxSkipped + 5 {
		hs = append(hs, specialH("fifo"+string(rune('a'+i)), tar.TypeFifo))
	}
	info, err := normalize(tar.NewReader(bytes.NewReader(tarOf(t, hs...))), tar.NewWriter(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	if info.SkippedCount != maxSkipped+5 || len(info.Skipped) != maxSkipped {
		t.Errorf("SkippedCount %d, %d listed; want %d and %d", info.SkippedCount, len(info.Skipped), maxSkipped+5, maxSkipped)
	}
}

func TestNormalizeRefusesEscapingNames(t *testing.T) {
	for _, name := range []string{"../x", "/etc/passwd", "a/../../x"} {
		_, err := normalize(tar.NewReader(bytes.NewReader(tarOf(t, reg(name, 1, 0o644)))), tar.NewWriter(io.Discard))
		if !errors.Is(err, ErrUnsafeArchive) {
			t.Errorf("normalize of a backend archive holding %q: %v, want ErrUnsafeArchive", name, err)
		}
	}
}

// FuzzCheckArchive feeds arbitrary bytes to checkArchive as a tar: it must
// not panic, and whatever it passes on must be clean, relative, of a
// carried type, with links that stay inside and nothing below a link.
func FuzzCheckArchive(f *testing.F) {
	f.Add([]byte{})
	f.Add(tarOf(f, dirH("./a/", 0o755), reg("a/f", 20, 0o644), symH("a/l", "f"), hardH("h", "a/f")))
	f.Add(tarOf(f, symH("l", "."), reg("l/x", 3, 0o644)))
	f.Add(tarOf(f, reg("../x", 3, 0o644)))
	f.Add(tarOf(f, symH("a/l", "../../x"), hardH("h", "/etc/passwd")))
	f.Add(tarOf(f, specialH("dev", tar.TypeChar)))
	f.Fuzz(func(t *testing.T, data []byte) {
		info, hs, _, err := runCheck(t, data)
		links := map[string]bool{}
		files := map[string]bool{}
		var nfiles, ndirs, nlinks int
		for _, h := range hs {
			name := strings.TrimSuffix(h.Name, "/")
			if name == "" || name == "." || path.IsAbs(name) || path.Clean(name) != name || name == ".." ||
				strings.HasPrefix(name, "../") || strings.ContainsAny(name, "\\\x00") {
				t.Fatalf("passed on entry name %q", h.Name)
			}
			for p := name; p != "."; p = path.Dir(p) {
				if p != name && links[p] {
					t.Fatalf("passed on %q below the link %q", name, p)
				}
			}
			switch h.Typeflag {
			case tar.TypeReg:
				nfiles++
			case tar.TypeDir:
				ndirs++
			case tar.TypeSymlink:
				if err := checkSymlink(name, h.Linkname); err != nil {
					t.Fatalf("passed on %v", err)
				}
				nlinks++
			case tar.TypeLink:
				if !files[h.Linkname] {
					t.Fatalf("passed on hard link %q to %q, not an earlier file", name, h.Linkname)
				}
				nfiles++
			default:
				t.Fatalf("passed on %q of type %q", name, h.Typeflag)
			}
			if h.Mode&^0o777 != 0 {
				t.Fatalf("passed on %q with mode %o", name, h.Mode)
			}
			delete(links, name)
			delete(files, name)
			switch h.Typeflag {
			case tar.TypeSymlink:
				links[name] = true
			case tar.TypeReg:
				files[name] = true
			}
		}
		if err == nil && (info.Files != nfiles || info.Dirs != ndirs || info.Symlinks != nlinks) {
			t.Fatalf("info %+v, but passed on %d files, %d dirs, %d links", info, nfiles, ndirs, nlinks)
		}
	})
}

// TestFrameWriter checks that what a frameWriter writes reads back as the
// bytes written, with the options earlier releases restored with (one
// stream of zstd frames) and with the zstd command, for inputs around the
// size of a chunk.
func TestFrameWriter(t *testing.T) {
	noise := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{0, 1, snapshotChunk - 1, snapshotChunk, snapshotChunk + 1, 7 * snapshotChunk / 2} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			// Half text, half random bytes: some compresses.
			data := make([]byte, size)
			for i := range data {
				if i%8192 < 4096 {
					data[i] = "snapshot "[i%9]
				} else {
					data[i] = byte(noise.Uint32())
				}
			}
			var buf bytes.Buffer
			fw, err := newFrameWriter(&buf)
			if err != nil {
				t.Fatal(err)
			}
			for p := data; len(p) > 0; {
				n := min(len(p), 100_000)
				if _, err := fw.Write(p[:n]); err != nil {
					t.Fatal(err)
				}
				p = p[n:]
			}
			if err := fw.Close(); err != nil {
				t.Fatal(err)
			}
			if buf.Len() == 0 {
				t.Fatal("wrote nothing: a zstd stream has a frame at least")
			}
			zr, err := zstd.NewReader(bytes.NewReader(buf.Bytes()), zstd.WithDecoderConcurrency(1),
				zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxWindow(128<<20))
			if err != nil {
				t.Fatal(err)
			}
			defer zr.Close()
			got, err := io.ReadAll(zr)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read back %d bytes (%v), want the %d written", len(got), err, len(data))
			}
			if _, err := exec.LookPath("zstd"); err != nil {
				return
			}
			cmd := exec.Command("zstd", "-d", "-c")
			cmd.Stdin = bytes.NewReader(buf.Bytes())
			out, err := cmd.Output()
			if err != nil || !bytes.Equal(out, data) {
				t.Errorf("zstd -d gave %d bytes (%v), want the %d written", len(out), err, len(data))
			}
		})
	}
}
