package sandboxes

import (
	"errors"
	"strings"
	"testing"
)

// TestRegistryKeyListDestroy covers the registry's side of keyed creates,
// listing and destroying: what it refuses before a backend is called, and
// the answers for a backend without Lister or Remover.
func TestRegistryKeyListDestroy(t *testing.T) {
	b := &stubBackend{}
	r := NewRegistry()
	if err := r.Register("stub", b); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, key := range []string{strings.Repeat("k", MaxKeyLen+1), "a\x00b", "\xff"} {
		if _, err := r.Create(ctx, "stub", Spec{Key: key}); !errors.Is(err, ErrInvalid) {
			t.Errorf("Create with key %.20q: %v, want ErrInvalid", key, err)
		}
	}
	if b.creates != 0 {
		t.Errorf("the backend was called %d times for refused keys", b.creates)
	}
	if _, err := r.List(ctx, "stub"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("List of a backend without Lister: %v, want ErrUnsupported", err)
	}
	// Without Remover, Destroy attaches first: the stub's sandbox is gone.
	if err := r.Destroy(ctx, State{Backend: "stub", ID: "x1"}); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "x1") {
		t.Errorf("Destroy of a missing sandbox: %v, want ErrNotFound naming x1", err)
	}
	if err := r.Destroy(ctx, State{Backend: "stub"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Destroy without an ID: %v, want ErrInvalid", err)
	}
	// The hash is fixed: sandboxes made by one version must be found by
	// the next.
	if got, want := KeyHash("a"), "ca978112ca1bbdcafac231b39a23dc4da786eff8"; got != want {
		t.Errorf("KeyHash(%q) = %q, want %q", "a", got, want)
	}
	if KeyHash("a") == KeyHash("b") {
		t.Errorf("KeyHash gives %q for two keys", KeyHash("a"))
	}
}
