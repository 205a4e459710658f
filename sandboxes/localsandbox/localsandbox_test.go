package localsandbox

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbot/agentbot/sandboxes"
)

// newBackend returns a backend over a fresh temporary BaseDir.
func newBackend(t *testing.T) *Backend {
	t.Helper()
	base := filepath.Join(t.TempDir(), "sandboxes")
	// Runs before TempDir's own cleanup: it can empty read-only
	// directories, which a test running as a normal user may leave.
	t.Cleanup(func() { forceRemoveAll(base) })
	b, err := New(Options{BaseDir: base})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Available(t.Context()); err != nil {
		t.Fatal(err)
	}
	return b
}

func create(t *testing.T, b *Backend, spec sandboxes.Spec) *instance {
	t.Helper()
	inst, err := b.Create(t.Context(), spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return inst.(*instance)
}

// userDir returns a directory for a chosen root, outside the backend's.
func userDir(t *testing.T) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "project")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { forceRemoveAll(d) })
	return d
}

func writeTestFile(t *testing.T, p string, data string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func TestLocalNew(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	for _, tc := range []struct {
		name, xdg, base, want, wantErr string
	}{
		{name: "explicit", base: "/srv/agentbot/sb", want: "/srv/agentbot/sb"},
		{name: "explicit, cleaned", base: "/srv/agentbot/../x/", want: "/srv/x"},
		{name: "XDG_STATE_HOME", xdg: "/xdg/state", want: "/xdg/state/agentbot/sandboxes"},
		{name: "relative XDG_STATE_HOME is ignored", xdg: "rel/state", want: filepath.Join(home, ".local/state/agentbot/sandboxes")},
		{name: "home", want: filepath.Join(home, ".local/state/agentbot/sandboxes")},
		{name: "relative base", base: "sandboxes", wantErr: `base directory "sandboxes" is not an absolute path`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("XDG_STATE_HOME", tc.xdg)
			b, err := New(Options{BaseDir: tc.base})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b.baseDir != tc.want {
				t.Fatalf("base directory %q, want %q", b.baseDir, tc.want)
			}
		})
	}
}

func TestLocalDescription(t *testing.T) {
	d := newBackend(t).Description()
	for _, want := range []string{"NOT isolated", "this OS user", "environment"} {
		if !strings.Contains(d, want) {
			t.Errorf("description %q does not say %q", d, want)
		}
	}
}

func TestLocalAvailable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	writeTestFile(t, file, "x", 0o644)
	b, err := New(Options{BaseDir: filepath.Join(file, "sandboxes")})
	if err != nil {
		t.Fatal(err)
	}
	err = b.Available(t.Context())
	if !errors.Is(err, sandboxes.ErrUnavailable) || !strings.Contains(err.Error(), "cannot create the sandbox directory") {
		t.Fatalf("base directory below a file: got %v, want ErrUnavailable saying it cannot be created", err)
	}
	if _, err := b.Create(t.Context(), sandboxes.Spec{}); !errors.Is(err, sandboxes.ErrUnavailable) {
		t.Fatalf("create below a file: got %v, want ErrUnavailable", err)
	}
}

// makeUnwritable makes dir unwritable even for root when it can (the
// immutable attribute), and says whether it could.
func makeUnwritable(t *testing.T, dir string) bool {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o755) })
		return true
	}
	if err := exec.Command("chattr", "+i", dir).Run(); err != nil {
		return false
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", dir).Run() })
	return true
}

func TestLocalRootValidation(t *testing.T) {
	b := newBackend(t)
	tmp := t.TempDir()
	file := filepath.Join(tmp, "file")
	writeTestFile(t, file, "x", 0o644)
	readOnly := filepath.Join(tmp, "read-only")
	if err := os.Mkdir(readOnly, 0o755); err != nil {
		t.Fatal(err)
	}
	canReadOnly := makeUnwritable(t, readOnly)
	inside := filepath.Join(b.baseDir, "inside")
	if err := os.Mkdir(inside, 0o755); err != nil {
		t.Fatal(err)
	}
	linkInside := filepath.Join(tmp, "link-inside")
	if err := os.Symlink(inside, linkInside); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, root, want string
		skip             bool
	}{
		{name: "relative", root: "project", want: `root "project" is not an absolute path`},
		{name: "missing", root: filepath.Join(tmp, "missing"), want: "does not exist"},
		{name: "a file", root: file, want: "is not a directory"},
		{name: "the file system root", root: "/", want: `root "/" is the file system root`},
		{name: "the file system root, spelled long", root: "/tmp/..", want: "is the file system root"},
		{name: "not writable", root: readOnly, want: "is not writable by this user", skip: !canReadOnly},
		{name: "the base directory", root: b.baseDir, want: "is inside the sandbox directory " + b.baseDir},
		{name: "inside the base directory", root: inside, want: "is inside the sandbox directory"},
		{name: "a link into the base directory", root: linkInside, want: "is inside the sandbox directory"},
		{name: "a parent of the base directory", root: filepath.Dir(b.baseDir), want: "contains the sandbox directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.skip {
				t.Skip("cannot make a directory unwritable for root here (no chattr)")
			}
			_, err := b.Create(t.Context(), sandboxes.Spec{Root: tc.root})
			if !errors.Is(err, sandboxes.ErrInvalid) {
				t.Fatalf("got %v, want an error matching ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
	t.Run("no sandbox is left by a refusal", func(t *testing.T) {
		list, err := b.List(t.Context())
		if err != nil || len(list) != 0 {
			t.Fatalf("List after refusals: %v, %v", list, err)
		}
	})

	t.Run("a usable directory, through a link", func(t *testing.T) {
		dir := userDir(t)
		link := filepath.Join(t.TempDir(), "link")
		if err := os.Symlink(dir, link); err != nil {
			t.Fatal(err)
		}
		inst := create(t, b, sandboxes.Spec{Root: link})
		real, _ := filepath.EvalSymlinks(dir)
		if st := inst.State(); st.Root != real || st.Backend != Name {
			t.Fatalf("State %+v, want Root %q (resolved) and Backend %q", st, real, Name)
		}
	})
	t.Run("an image", func(t *testing.T) {
		_, err := b.Create(t.Context(), sandboxes.Spec{Image: "ubuntu"})
		if !errors.Is(err, sandboxes.ErrInvalid) || !strings.Contains(err.Error(), "no images") {
			t.Fatalf("got %v, want ErrInvalid saying there are no images", err)
		}
	})
}

func TestLocalCreateLayout(t *testing.T) {
	b := newBackend(t)
	inst := create(t, b, sandboxes.Spec{Name: "my session", Env: map[string]string{"A": "1"}, Labels: map[string]string{"k": "v"}})
	st := inst.State()
	if !idRE.MatchString(st.ID) {
		t.Errorf("ID %q is not loc- and 12 hex digits", st.ID)
	}
	if want := filepath.Join(b.baseDir, st.ID, "workspace"); st.Root != want {
		t.Errorf("Root %q, want %q", st.Root, want)
	}
	if st.Backend != Name || st.Env["A"] != "1" {
		t.Errorf("State %+v", st)
	}
	md, err := b.readMetadata(st.ID)
	if err != nil {
		t.Fatal(err)
	}
	if md.UserRoot || md.Name != "my session" || md.Labels["k"] != "v" || md.State.Root != st.Root {
		t.Errorf("metadata %+v", md)
	}
	// State hands out copies.
	st.Env["A"] = "changed"
	if inst.State().Env["A"] != "1" {
		t.Error("changing a State's Env changed the sandbox's")
	}
}

func TestLocalAttach(t *testing.T) {
	b := newBackend(t)
	inst := create(t, b, sandboxes.Spec{Env: map[string]string{"FROM_SPEC": "yes"}})
	for _, tc := range []struct {
		name string
		id   string
	}{
		{"never made", "loc-000000000000"},
		{"not an ID of ours", "../../etc"},
		{"empty", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.Attach(t.Context(), sandboxes.State{Backend: Name, ID: tc.id})
			if !errors.Is(err, sandboxes.ErrNotFound) || !strings.Contains(err.Error(), `"`+tc.id+`"`) {
				t.Fatalf("got %v, want ErrNotFound naming %q", err, tc.id)
			}
		})
	}
	t.Run("from the metadata", func(t *testing.T) {
		// A second backend, as another process would have.
		b2, err := New(Options{BaseDir: b.baseDir})
		if err != nil {
			t.Fatal(err)
		}
		got, err := b2.Attach(t.Context(), sandboxes.State{Backend: Name, ID: inst.State().ID, Root: "/somewhere/else"})
		if err != nil {
			t.Fatal(err)
		}
		if st := got.State(); st.Root != inst.State().Root || st.Env["FROM_SPEC"] != "yes" {
			t.Fatalf("attached State %+v, want the one made by Create %+v", st, inst.State())
		}
	})
}

func TestLocalList(t *testing.T) {
	b := newBackend(t)
	var ids []string
	for range 3 {
		ids = append(ids, create(t, b, sandboxes.Spec{}).State().ID)
	}
	chosen := create(t, b, sandboxes.Spec{Root: userDir(t)})
	ids = append(ids, chosen.State().ID)
	if err := os.Mkdir(filepath.Join(b.baseDir, "not-a-sandbox"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := create(t, b, sandboxes.Spec{}).Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	list, err := b.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, st := range list {
		got = append(got, st.ID)
		if st.ID == chosen.State().ID && st.Meta["user_root"] != "true" {
			t.Errorf("the sandbox with a chosen root is listed without Meta user_root: %+v", st)
		}
	}
	want := append([]string(nil), ids...)
	slices.Sort(want)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("List gave %v, want %v", got, want)
	}

	empty, err := New(Options{BaseDir: filepath.Join(t.TempDir(), "never-made")})
	if err != nil {
		t.Fatal(err)
	}
	if list, err := empty.List(t.Context()); err != nil || len(list) != 0 {
		t.Fatalf("List of a missing base directory: %v, %v; want nothing", list, err)
	}
}

func TestLocalDestroy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chosen bool
	}{
		{"owned workspace is removed", false},
		{"chosen workspace survives", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			b := newBackend(t)
			spec := sandboxes.Spec{}
			if tc.chosen {
				spec.Root = userDir(t)
			}
			inst := create(t, b, spec)
			st := inst.State()
			if err := inst.WriteFile(ctx, "work/file.txt", strings.NewReader("precious"), 0o644); err != nil {
				t.Fatal(err)
			}
			// A read-only directory, as a Go module cache has, must not
			// stop Destroy.
			if code, err := inst.Exec(ctx, sandboxes.ExecRequest{Command: "mkdir -p ro/sub && touch ro/sub/f && chmod 0555 ro/sub ro"}, io.Discard, io.Discard); err != nil || code != 0 {
				t.Fatalf("exec: %d, %v", code, err)
			}
			if err := inst.Destroy(ctx); err != nil {
				t.Fatalf("destroy: %v", err)
			}
			if _, err := os.Lstat(filepath.Join(b.baseDir, st.ID)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the sandbox's directory is left: %v", err)
			}
			data, err := os.ReadFile(filepath.Join(st.Root, "work/file.txt"))
			if tc.chosen {
				if err != nil || string(data) != "precious" {
					t.Errorf("the chosen workspace lost its files: %q, %v", data, err)
				}
			} else if _, err := os.Lstat(st.Root); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the owned workspace is left: %v", err)
			}
			if entries, _ := os.ReadDir(b.baseDir); len(entries) != 0 {
				t.Errorf("the base directory still holds %v", entries)
			}

			err = inst.Destroy(ctx)
			if !errors.Is(err, sandboxes.ErrNotFound) || !strings.Contains(err.Error(), st.ID) {
				t.Errorf("destroying again: got %v, want ErrNotFound naming %s", err, st.ID)
			}
			if _, err := b.Attach(ctx, st); !errors.Is(err, sandboxes.ErrNotFound) {
				t.Errorf("attach after destroy: got %v, want ErrNotFound", err)
			}
			if _, err := inst.Exec(ctx, sandboxes.ExecRequest{Command: "true"}, io.Discard, io.Discard); !errors.Is(err, sandboxes.ErrNotFound) {
				t.Errorf("exec after destroy: got %v, want ErrNotFound", err)
			}
		})
	}
}

func TestLocalAttachChosenRootGone(t *testing.T) {
	b := newBackend(t)
	dir := userDir(t)
	inst := create(t, b, sandboxes.Spec{Root: dir})
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	_, err := b.Attach(t.Context(), inst.State())
	if !errors.Is(err, sandboxes.ErrNotFound) || !strings.Contains(err.Error(), "is gone") {
		t.Fatalf("attach to a sandbox whose chosen root was removed: got %v, want ErrNotFound saying the workspace is gone", err)
	}
	// Destroy still cleans up our part.
	if err := inst.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestLocalFiles(t *testing.T) {
	ctx := t.Context()
	b := newBackend(t)
	inst := create(t, b, sandboxes.Spec{})
	root := inst.State().Root
	passwd, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(root, "sub/inside.txt"), "inside", 0o644)
	for name, target := range map[string]string{
		"etc":        "/etc",
		"passwd":     "/etc/passwd",
		"up":         "../../../../../../../../etc",
		"uppasswd":   "../../../../../../../../etc/passwd",
		"abs-inside": filepath.Join(root, "sub/inside.txt"), // os.Root refuses absolute links
		"in-link":    "sub/inside.txt",
		"dir-link":   "sub",
		"dangling":   "sub/not-yet.txt",
	} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("reading through a link out", func(t *testing.T) {
		for _, p := range []string{"etc/passwd", "passwd", "up/passwd", "uppasswd", "abs-inside"} {
			rc, err := inst.ReadFile(ctx, p)
			if err == nil {
				data, _ := io.ReadAll(rc)
				rc.Close()
				t.Errorf("ReadFile(%q) read %d bytes through a link out of the workspace", p, len(data))
				continue
			}
			if !errors.Is(err, sandboxes.ErrInvalid) || !strings.Contains(err.Error(), "leads outside the workspace") {
				t.Errorf("ReadFile(%q): got %v, want ErrInvalid saying it leads outside", p, err)
			}
		}
	})
	t.Run("writing through a link out", func(t *testing.T) {
		for _, p := range []string{"etc/agentbot-localsandbox-test", "passwd", "up/agentbot-localsandbox-test", "uppasswd"} {
			err := inst.WriteFile(ctx, p, strings.NewReader("escaped"), 0o644)
			if !errors.Is(err, sandboxes.ErrInvalid) || !strings.Contains(err.Error(), "leads outside the workspace") {
				t.Errorf("WriteFile(%q): got %v, want ErrInvalid saying it leads outside", p, err)
			}
		}
		if after, _ := os.ReadFile("/etc/passwd"); !bytes.Equal(after, passwd) {
			t.Fatal("/etc/passwd changed")
		}
		if _, err := os.Lstat("/etc/agentbot-localsandbox-test"); !errors.Is(err, os.ErrNotExist) {
			os.Remove("/etc/agentbot-localsandbox-test")
			t.Fatal("a file was written in /etc")
		}
		if target, err := os.Readlink(filepath.Join(root, "passwd")); err != nil || target != "/etc/passwd" {
			t.Errorf("the link passwd is now %q, %v; a refused write must leave it", target, err)
		}
	})
	t.Run("links inside are followed", func(t *testing.T) {
		for _, p := range []string{"in-link", "dir-link/inside.txt"} {
			rc, err := inst.ReadFile(ctx, p)
			if err != nil {
				t.Fatalf("ReadFile(%q): %v", p, err)
			}
			data, _ := io.ReadAll(rc)
			rc.Close()
			if string(data) != "inside" {
				t.Errorf("ReadFile(%q) = %q", p, data)
			}
		}
		if err := inst.WriteFile(ctx, "in-link", strings.NewReader("changed"), 0o600); err != nil {
			t.Fatal(err)
		}
		if data, _ := os.ReadFile(filepath.Join(root, "sub/inside.txt")); string(data) != "changed" {
			t.Errorf("writing through in-link: the target holds %q", data)
		}
		if fi, err := os.Lstat(filepath.Join(root, "in-link")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("writing through in-link replaced the link")
		}
		if err := inst.WriteFile(ctx, "dangling", strings.NewReader("made"), 0o644); err != nil {
			t.Fatal(err)
		}
		if data, _ := os.ReadFile(filepath.Join(root, "sub/not-yet.txt")); string(data) != "made" {
			t.Errorf("writing through a dangling link inside: the target holds %q", data)
		}
	})
	t.Run("atomic write with mode", func(t *testing.T) {
		if err := inst.WriteFile(ctx, "new/deep/file.sh", strings.NewReader("#!/bin/sh\n"), 0o750); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(filepath.Join(root, "new/deep/file.sh"))
		if err != nil || fi.Mode().Perm() != 0o750 {
			t.Fatalf("mode %v, %v; want 0750", fi.Mode(), err)
		}
		entries, _ := os.ReadDir(filepath.Join(root, "new/deep"))
		if len(entries) != 1 {
			t.Errorf("the directory holds %v: a temporary file is left", entries)
		}
	})
	t.Run("a failed write leaves the old file and no temporary", func(t *testing.T) {
		writeTestFile(t, filepath.Join(root, "keep.txt"), "old", 0o644)
		err := inst.WriteFile(ctx, "keep.txt", io.MultiReader(strings.NewReader("half"), errReader{errors.New("stream broke")}), 0o644)
		if err == nil || !strings.Contains(err.Error(), "stream broke") {
			t.Fatalf("got %v, want the stream's error", err)
		}
		if data, _ := os.ReadFile(filepath.Join(root, "keep.txt")); string(data) != "old" {
			t.Errorf("keep.txt holds %q, want the old contents", data)
		}
		entries, _ := os.ReadDir(root)
		for _, e := range entries {
			if strings.Contains(e.Name(), "agentbot-tmp") {
				t.Errorf("temporary file %s is left", e.Name())
			}
		}
	})
	t.Run("a FIFO is refused without blocking", func(t *testing.T) {
		if err := exec.Command("mkfifo", filepath.Join(root, "fifo")).Run(); err != nil {
			t.Skip("no mkfifo")
		}
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, err := inst.ReadFile(ctx, "fifo"); !errors.Is(err, sandboxes.ErrInvalid) {
			t.Errorf("ReadFile of a FIFO: got %v, want ErrInvalid", err)
		}
	})
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
