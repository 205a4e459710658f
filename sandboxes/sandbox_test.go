package sandboxes

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"testing"
)

func TestCleanPath(t *testing.T) {
	for _, tc := range []struct {
		in, want string // want "" means refused
	}{
		{"a", "a"},
		{"a/b/c.txt", "a/b/c.txt"},
		{"./a/", "a"},
		{"a//b/./c/", "a/b/c"},
		{"a/b/../c", "a/c"},
		{"a/..", "."},
		{".", "."},
		{"./", "."},
		{"..a", "..a"},
		{"a/..b", "a/..b"},
		{"...", "..."},
		{`a\b`, `a\b`},
		{"ünï cødé/日本 .txt", "ünï cødé/日本 .txt"},
		{"", ""},
		{"..", ""},
		{"../", ""},
		{"../a", ""},
		{"a/../..", ""},
		{"a/../../b", ""},
		{"./../a", ""},
		{"/", ""},
		{"/etc/passwd", ""},
		{"a\x00b", ""},
	} {
		got, err := CleanPath(tc.in)
		if tc.want == "" {
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("CleanPath(%q) = %q, %v; want ErrInvalid", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("CleanPath(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// rootInstance is an Instance that only has a State: enough for Sandbox's
// own path handling.
type rootInstance struct{ root string }

func (r rootInstance) State() State { return State{ID: "r1", Root: r.root} }
func (rootInstance) Exec(context.Context, ExecRequest, io.Writer, io.Writer) (int, error) {
	return 0, ErrUnsupported
}
func (rootInstance) ReadFile(context.Context, string) (io.ReadCloser, error) {
	return nil, ErrUnsupported
}
func (rootInstance) WriteFile(context.Context, string, io.Reader, fs.FileMode) error {
	return ErrUnsupported
}
func (rootInstance) Archive(context.Context, io.Writer) error { return ErrUnsupported }
func (rootInstance) Restore(context.Context, io.Reader) error { return ErrUnsupported }
func (rootInstance) Stop(context.Context) error               { return ErrUnsupported }
func (rootInstance) Destroy(context.Context) error            { return ErrUnsupported }

func TestSandboxRel(t *testing.T) {
	for _, tc := range []struct {
		root, in, want string // want "" means refused
	}{
		{"/workspace", "a.txt", "a.txt"},
		{"/workspace", "/workspace/a.txt", "a.txt"},
		{"/workspace", "/workspace/", "."},
		{"/workspace", "/workspace", "."},
		{"/workspace/", "/workspace/a/../b", "b"},
		{"/workspace", "/workspace/../etc/passwd", ""},
		{"/workspace", "/workspaces/x", ""},
		{"/workspace", "/etc/passwd", ""},
		{"/workspace", "../x", ""},
		{"/", "/etc/passwd", "etc/passwd"},
		{"/", "/", "."},
	} {
		sb := New("test", rootInstance{tc.root})
		got, err := sb.rel(tc.in)
		if tc.want == "" {
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("root %s: rel(%q) = %q, %v; want ErrInvalid", tc.root, tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("root %s: rel(%q) = %q, %v; want %q", tc.root, tc.in, got, err, tc.want)
		}
	}
}
