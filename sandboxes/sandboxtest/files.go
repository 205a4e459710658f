package sandboxtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"path"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbot/agentbot/sandboxes"
)

// allBytes returns every byte value, n times over.
func allBytes(n int) []byte {
	b := make([]byte, 0, 256*n)
	for range n {
		for i := range 256 {
			b = append(b, byte(i))
		}
	}
	return b
}

// randomBytes returns n reproducible, incompressible bytes.
func randomBytes(n int, seed byte) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{seed}).Read(b)
	return b
}

func (s *suite) testFilesRoundTrip(t *testing.T) {
	ctx := testContext(t)
	sb := s.newSandbox(t)
	for _, tc := range []struct {
		name string
		path string
		data []byte
	}{
		{"all byte values", "bytes.bin", allBytes(4)},
		{"3 MiB random", "big/random.bin", randomBytes(3<<20, 1)},
		{"empty", "empty.txt", nil},
		{"nested parents", "p/q/r/s.txt", []byte("deep\n")},
		{"no trailing newline", "no-newline.txt", []byte("line")},
		{"unicode name", "名前 with space.txt", []byte("ünïcødé\n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writeFile(t, ctx, sb, tc.path, tc.data, 0o644)
			if got := readFile(t, ctx, sb, tc.path); !bytes.Equal(got, tc.data) {
				t.Fatalf("read back %d bytes that differ from the %d written", len(got), len(tc.data))
			}
			rc, err := sb.OpenFile(ctx, tc.path)
			if err != nil {
				t.Fatalf("OpenFile: %v", err)
			}
			streamed, err := io.ReadAll(rc)
			rc.Close()
			if err != nil || !bytes.Equal(streamed, tc.data) {
				t.Fatalf("OpenFile: read %d bytes, %v; want the %d written", len(streamed), err, len(tc.data))
			}
			// The command side sees the same bytes.
			got := strings.TrimSpace(sh(t, ctx, sb, "wc -c < "+shellQuote(tc.path)))
			if want := strconv.Itoa(len(tc.data)); got != want {
				t.Fatalf("wc -c in the sandbox says %s bytes, want %s", got, want)
			}
		})
	}
	t.Run("written by a command", func(t *testing.T) {
		sh(t, ctx, sb, `mkdir -p from-exec && printf 'a\000b\377' > from-exec/out.bin`)
		if got, want := readFile(t, ctx, sb, "from-exec/out.bin"), []byte("a\x00b\xff"); !bytes.Equal(got, want) {
			t.Fatalf("read %q, want %q", got, want)
		}
	})
	t.Run("replace", func(t *testing.T) {
		writeFile(t, ctx, sb, "replace.txt", []byte("a long first version\n"), 0o755)
		writeFile(t, ctx, sb, "replace.txt", []byte("short\n"), 0o644)
		if got := string(readFile(t, ctx, sb, "replace.txt")); got != "short\n" {
			t.Fatalf("after replacing, read %q, want %q", got, "short\n")
		}
		if got := lsMode(t, ctx, sb, "replace.txt"); got != "-rw-r--r--" {
			t.Fatalf("after replacing with mode 0644, ls says %s", got)
		}
	})
	t.Run("absolute path inside the root", func(t *testing.T) {
		root := sb.State().Root
		writeFile(t, ctx, sb, path.Join(root, "abs.txt"), []byte("abs"), 0o644)
		if got := string(readFile(t, ctx, sb, "abs.txt")); got != "abs" {
			t.Fatalf("read %q", got)
		}
	})
}

func (s *suite) testFileModes(t *testing.T) {
	ctx := testContext(t)
	sb := s.newSandbox(t)
	for _, tc := range []struct {
		mode fs.FileMode
		ls   string
	}{
		{0o755, "-rwxr-xr-x"},
		{0o700, "-rwx------"},
		{0o644, "-rw-r--r--"},
		{0o600, "-rw-------"},
		{0o640, "-rw-r-----"},
		{0, "-rw-r--r--"}, // the default
	} {
		t.Run(fmt.Sprintf("%04o", tc.mode), func(t *testing.T) {
			name := "modes/" + tc.ls + ".sh"
			writeFile(t, ctx, sb, name, []byte("#!/bin/sh\necho ran\n"), tc.mode)
			if got := lsMode(t, ctx, sb, name); got != tc.ls {
				t.Fatalf("written with mode %v, ls -l says %s, want %s", tc.mode, got, tc.ls)
			}
			executable := tc.mode&0o100 != 0
			if code := exitCode(t, ctx, sb, "test -x "+shellQuote(name)); (code == 0) != executable {
				t.Fatalf("test -x exits %d for mode %v", code, tc.mode)
			}
			if executable {
				if got := sh(t, ctx, sb, "./"+shellQuote(name)); got != "ran\n" {
					t.Fatalf("running the script printed %q", got)
				}
			}
		})
	}
}

// lsMode returns the mode column of ls -ld for name.
func lsMode(t *testing.T, ctx context.Context, sb *sandboxes.Sandbox, name string) string {
	t.Helper()
	out := sh(t, ctx, sb, "ls -ld "+shellQuote(name))
	if len(out) < 10 {
		t.Fatalf("ls -ld %s printed %q", name, out)
	}
	return out[:10]
}

func (s *suite) testFilePaths(t *testing.T) {
	ctx := testContext(t)
	sb := s.newSandbox(t)
	writeFile(t, ctx, sb, "dir/file.txt", []byte("x"), 0o644)
	bad := []string{"", "..", "../x", "a/../../x", "dir/../../x", "x\x00y"}
	if sb.State().Root != "/" {
		bad = append(bad, "/etc/passwd", "/")
	}
	for _, p := range bad {
		if _, err := sb.ReadFile(ctx, p, 0); !errors.Is(err, sandboxes.ErrInvalid) {
			t.Errorf("ReadFile(%q): got %v, want ErrInvalid", p, err)
		}
		if err := sb.WriteFile(ctx, p, []byte("evil"), 0o644); !errors.Is(err, sandboxes.ErrInvalid) {
			t.Errorf("WriteFile(%q): got %v, want ErrInvalid", p, err)
		}
	}
	if err := sb.WriteFile(ctx, ".", []byte("x"), 0o644); !errors.Is(err, sandboxes.ErrInvalid) {
		t.Errorf("WriteFile(\".\"): got %v, want ErrInvalid", err)
	}
	if code := exitCode(t, ctx, sb, "test -e ../x || test -e x"); code == 0 {
		t.Errorf("a refused write created a file")
	}
	for _, p := range []string{"missing.txt", "dir/missing.txt", "missing-dir/file.txt"} {
		if data, err := sb.ReadFile(ctx, p, 0); err == nil {
			t.Errorf("ReadFile(%q) of a missing file returned %q and no error", p, data)
		} else if !strings.Contains(err.Error(), sb.ID()) {
			t.Errorf("ReadFile(%q): error %q does not name the sandbox", p, err)
		}
	}
	if _, err := sb.ReadFile(ctx, "dir", 0); err == nil {
		t.Errorf("ReadFile of a directory did not fail")
	}
	if err := sb.WriteFile(ctx, "dir", []byte("x"), 0o644); err == nil {
		t.Errorf("WriteFile over a directory did not fail")
	}
	if err := sb.WriteFile(ctx, "dir/file.txt/below", []byte("x"), 0o644); err == nil {
		t.Errorf("WriteFile below a regular file did not fail")
	}
}

// testSymlinkEscape checks that ReadFile and WriteFile resolve symbolic
// links inside the workspace and refuse to follow one out of it.
func (s *suite) testSymlinkEscape(t *testing.T) {
	ctx := testContext(t)
	sb := s.newSandbox(t)
	outside := "sandboxtest-escape-" + runID + "-" + sb.ID()
	writeFile(t, ctx, sb, "sub/inside.txt", []byte("inside"), 0o644)
	sh(t, ctx, sb, "ln -s / rootlink && ln -s .. uplink && ln -s sub sublink && ln -s sub/inside.txt filelink && "+
		"ln -s /tmp/"+outside+"-file outfile")

	// Links that stay inside work.
	if got := string(readFile(t, ctx, sb, "sublink/inside.txt")); got != "inside" {
		t.Errorf("read through sublink -> sub: %q", got)
	}
	if got := string(readFile(t, ctx, sb, "filelink")); got != "inside" {
		t.Errorf("read through filelink -> sub/inside.txt: %q", got)
	}
	writeFile(t, ctx, sb, "sublink/new.txt", []byte("new"), 0o644)
	if got := string(readFile(t, ctx, sb, "sub/new.txt")); got != "new" {
		t.Errorf("write through sublink -> sub landed elsewhere: sub/new.txt holds %q", got)
	}

	// Links that lead out are not followed.
	for _, p := range []string{"rootlink/etc/passwd", "uplink/" + outside, "outfile"} {
		if data, err := sb.ReadFile(ctx, p, 0); err == nil {
			t.Errorf("ReadFile(%q) followed a link out of the workspace and read %d bytes", p, len(data))
		}
	}
	for _, p := range []string{"rootlink/tmp/" + outside, "uplink/" + outside} {
		if err := sb.WriteFile(ctx, p, []byte("escaped"), 0o644); err == nil {
			t.Errorf("WriteFile(%q) followed a link out of the workspace", p)
		}
	}
	// Writing to a link that points out may replace the link or fail, but
	// must not write through it.
	_ = sb.WriteFile(ctx, "outfile", []byte("escaped"), 0o644)
	for _, p := range []string{"/tmp/" + outside, "../" + outside, "/tmp/" + outside + "-file"} {
		if exitCode(t, ctx, sb, "test -e "+shellQuote(p)) == 0 {
			t.Errorf("%s was created outside the workspace", p)
		}
	}
}
