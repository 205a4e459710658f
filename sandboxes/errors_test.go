package sandboxes

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestErrorFormat(t *testing.T) {
	for _, tc := range []struct {
		err  *Error
		want string
	}{
		{&Error{Op: "exec", Backend: "docker", ID: "abc", Err: ErrTimeout}, "sandbox exec docker/abc: timed out"},
		{&Error{Op: "create", Backend: "e2b", Err: ErrUnavailable}, "sandbox create e2b: backend unavailable"},
		{&Error{Op: "lookup", Err: ErrInvalid}, "sandbox lookup: invalid argument"},
		{&Error{Op: "read", Backend: "local", ID: "x", Err: Invalidf("path %q is absolute", "/etc")},
			`sandbox read local/x: invalid argument: path "/etc" is absolute`},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
}

func TestErrorMatching(t *testing.T) {
	cause := fmt.Errorf("container gone: %w", NotFoundError("c-42"))
	err := wrap("destroy", "docker", "c-42", cause)
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("%v does not match ErrNotFound", err)
	}
	var se *Error
	if !errors.As(err, &se) || se.Op != "destroy" || se.ID != "c-42" {
		t.Errorf("errors.As: %+v", se)
	}
	if got := err.Error(); got != `sandbox destroy docker/c-42: container gone: sandbox not found: "c-42"` {
		t.Errorf("Error() = %q", got)
	}

	if wrap("exec", "local", "x", nil) != nil {
		t.Error("wrap(nil) is not nil")
	}
	// Wrapping again for the same operation and sandbox adds nothing.
	if again := wrap("destroy", "docker", "c-42", err); again != err {
		t.Errorf("wrapped twice: %v", again)
	}
	// For another operation it does.
	if other := wrap("restore", "docker", "c-42", err); other == err || !errors.Is(other, ErrNotFound) {
		t.Errorf("wrap for another op: %v", other)
	}

	if !errors.Is(wrap("exec", "local", "x", context.Canceled), context.Canceled) {
		t.Error("a context error does not match through wrap")
	}
	if !errors.Is(ErrUnsupported, errors.ErrUnsupported) {
		t.Error("ErrUnsupported is not errors.ErrUnsupported")
	}
	inv := Invalidf("bad %s %d", "thing", 3)
	if !errors.Is(inv, ErrInvalid) || inv.Error() != "invalid argument: bad thing 3" {
		t.Errorf("Invalidf: %v", inv)
	}
	sentinels := []error{ErrNotFound, ErrUnsupported, ErrTimeout, ErrInvalid, ErrUnavailable, ErrUnsafeArchive, ErrStopped}
	for i, a := range sentinels {
		for j, b := range sentinels {
			if (i == j) != errors.Is(a, b) {
				t.Errorf("errors.Is(%v, %v) = %v", a, b, i != j)
			}
		}
	}
}
