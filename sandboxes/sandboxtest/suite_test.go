package sandboxtest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"strings"
	"testing"

	"github.com/agentbot/agentbot/sandboxes"
)

// drainInstance is an Instance whose Restore reads its stream to the end
// and does nothing else: enough to see what the sandboxes package itself
// refuses, whatever a backend would do.
type drainInstance struct{}

func (drainInstance) State() sandboxes.State { return sandboxes.State{ID: "drain", Root: "/w"} }
func (drainInstance) Exec(context.Context, sandboxes.ExecRequest, io.Writer, io.Writer) (int, error) {
	return 0, errors.ErrUnsupported
}
func (drainInstance) ReadFile(context.Context, string) (io.ReadCloser, error) {
	return nil, errors.ErrUnsupported
}
func (drainInstance) WriteFile(context.Context, string, io.Reader, fs.FileMode) error {
	return errors.ErrUnsupported
}
func (drainInstance) Archive(context.Context, io.Writer) error { return errors.ErrUnsupported }
func (drainInstance) Restore(_ context.Context, r io.Reader) error {
	_, err := io.Copy(io.Discard, r)
	return err
}
func (drainInstance) Stop(context.Context) error    { return nil }
func (drainInstance) Destroy(context.Context) error { return nil }

// TestUnsafeArchivesAreRefusedByThePackage keeps the suite's table honest:
// every archive a backend is expected to see refused is refused by the
// sandboxes package itself, so a failure of a backend's suite is the
// backend's.
func TestUnsafeArchivesAreRefusedByThePackage(t *testing.T) {
	sb := sandboxes.New("drain", drainInstance{})
	for _, tc := range unsafeArchives("evil") {
		arch := craft(t, append([]tarEntry{file("safe.txt", "safe")}, tc.entries...)...)
		if _, err := sb.Restore(t.Context(), bytes.NewReader(arch)); !errors.Is(err, sandboxes.ErrUnsafeArchive) {
			t.Errorf("%s: restore %v, want ErrUnsafeArchive", tc.name, err)
		}
	}
	if _, err := sb.Restore(t.Context(), bytes.NewReader(craft(t, file("safe.txt", "safe"), dir("d/"), symlink("d/l", "../safe.txt")))); err != nil {
		t.Errorf("a safe archive: %v", err)
	}
}

func TestDecodeAndDiffTrees(t *testing.T) {
	arch := craft(t, file("b.txt", "bee"), dir("a/"), symlink("a/l", "../b.txt"), hardlink("c", "b.txt"))
	tree, err := decodeSnapshot(bytes.NewReader(arch))
	if err != nil {
		t.Fatal(err)
	}
	want := []entry{
		{Name: "a", Type: "dir", Mode: 0o755},
		{Name: "a/l", Type: "symlink", Mode: 0o644, Link: "../b.txt"},
		{Name: "b.txt", Type: "file", Mode: 0o644, Size: 3, SHA256: shortSum([]byte("bee"))},
		{Name: "c", Type: "hardlink", Mode: 0o644, Link: "b.txt"},
	}
	if d := diffTrees(want, tree); d != "" {
		t.Fatalf("decoded tree differs:\n%s", d)
	}

	changed := append([]entry(nil), tree...)
	changed[2].Mode = 0o600
	changed = append(changed[:1], changed[2:]...) // a/l gone
	d := diffTrees(tree, changed)
	for _, line := range []string{
		"- symlink 0644 a/l -> ../b.txt",
		"- file    0644 b.txt (3 bytes",
		"+ file    0600 b.txt (3 bytes",
	} {
		if !strings.Contains(d, line) {
			t.Errorf("diff lacks %q:\n%s", line, d)
		}
	}
	if _, err := decodeSnapshot(strings.NewReader("not zstd")); err == nil {
		t.Error("decoding garbage did not fail")
	}
}
