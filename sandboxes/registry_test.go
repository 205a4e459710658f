package sandboxes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

// stubBackend is a Backend whose sandboxes are never made: the registry's
// own checks are what is tested here.
type stubBackend struct {
	mu      sync.Mutex
	creates int
	unavail error
}

func (b *stubBackend) Description() string                 { return "stub: makes no sandboxes" }
func (b *stubBackend) Available(ctx context.Context) error { return b.unavail }

func (b *stubBackend) Create(ctx context.Context, spec Spec) (Instance, error) {
	b.mu.Lock()
	b.creates++
	b.mu.Unlock()
	return nil, errors.New("stub cannot create")
}

func (b *stubBackend) Attach(ctx context.Context, st State) (Instance, error) {
	return nil, NotFoundError(st.ID)
}

func TestRegister(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backend Backend
		ok      bool
	}{
		{"local", &stubBackend{}, true},
		{"e2b", &stubBackend{}, true},
		{"my-backend-2", &stubBackend{}, true},
		{strings.Repeat("a", 32), &stubBackend{}, true},
		{"", &stubBackend{}, false},
		{"Docker", &stubBackend{}, false},
		{"2docker", &stubBackend{}, false},
		{"-docker", &stubBackend{}, false},
		{"dock er", &stubBackend{}, false},
		{"dock_er", &stubBackend{}, false},
		{"docker\n", &stubBackend{}, false},
		{strings.Repeat("a", 33), &stubBackend{}, false},
		{"nil", nil, false},
	} {
		t.Run(fmt.Sprintf("%q", tc.name), func(t *testing.T) {
			err := NewRegistry().Register(tc.name, tc.backend)
			if (err == nil) != tc.ok {
				t.Fatalf("Register(%q) = %v, want ok %v", tc.name, err, tc.ok)
			}
		})
	}
	t.Run("duplicate", func(t *testing.T) {
		r := NewRegistry()
		if err := r.Register("local", &stubBackend{}); err != nil {
			t.Fatal(err)
		}
		err := r.Register("local", &stubBackend{})
		if err == nil || !strings.Contains(err.Error(), `"local"`) {
			t.Fatalf("second Register(\"local\") = %v, want an error naming it", err)
		}
	})
}

func TestRegistryNamesAndLookup(t *testing.T) {
	r := NewRegistry()
	if names := r.Names(); len(names) != 0 {
		t.Fatalf("empty registry lists %q", names)
	}
	down := errors.New("no daemon")
	for _, n := range []string{"local", "docker", "e2b", "daytona"} {
		b := &stubBackend{}
		if n == "docker" {
			b.unavail = down
		}
		if err := r.Register(n, b); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"daytona", "docker", "e2b", "local"}
	if got := r.Names(); !slices.Equal(got, want) {
		t.Fatalf("Names() = %q, want %q", got, want)
	}
	if b, err := r.Backend("e2b"); err != nil || b == nil {
		t.Fatalf("Backend(\"e2b\") = %v, %v", b, err)
	}

	_, err := r.Backend("podman")
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Backend of an unknown name: %v, want ErrUnavailable", err)
	}
	for _, s := range append([]string{"podman"}, want...) {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not name %q", err, s)
		}
	}

	av := r.Available(context.Background())
	var names []string
	for _, a := range av {
		names = append(names, a.Name)
		if (a.Name == "docker") != (a.Err != nil) || a.Description == "" {
			t.Errorf("Available: %+v", a)
		}
	}
	if !slices.Equal(names, want) {
		t.Errorf("Available in order %q, want %q", names, want)
	}
}

func TestRegistryConcurrent(t *testing.T) {
	r := NewRegistry()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			if err := r.Register(fmt.Sprintf("b%d", i), &stubBackend{}); err != nil {
				t.Error(err)
			}
			r.Names()
			r.Backend("b0")
		})
	}
	wg.Wait()
	if n := len(r.Names()); n != 20 {
		t.Fatalf("%d names after 20 registrations", n)
	}
}

func TestRegistryCreateAttach(t *testing.T) {
	ctx := context.Background()
	stub := &stubBackend{}
	r := NewRegistry()
	if err := r.Register("stub", stub); err != nil {
		t.Fatal(err)
	}

	for _, root := range []string{"relative/dir", "./x", "~/x"} {
		_, err := r.Create(ctx, "stub", Spec{Root: root})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), root) {
			t.Errorf("Create with Root %q: %v, want ErrInvalid naming it", root, err)
		}
	}
	if stub.creates != 0 {
		t.Fatalf("the backend was asked to create %d sandboxes with a bad root", stub.creates)
	}
	// A valid spec reaches the backend, whose error is wrapped.
	_, err := r.Create(ctx, "stub", Spec{Root: "/abs/dir"})
	var se *Error
	if !errors.As(err, &se) || se.Op != "create" || se.Backend != "stub" || stub.creates != 1 {
		t.Fatalf("Create: %v (creates %d), want an *Error for create on stub", err, stub.creates)
	}
	if _, err := r.Create(ctx, "nope", Spec{}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Create on an unknown backend: %v, want ErrUnavailable", err)
	}

	if _, err := r.Attach(ctx, State{Backend: "stub"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Attach with an empty ID: %v, want ErrInvalid", err)
	}
	if _, err := r.Attach(ctx, State{Backend: "nope", ID: "x"}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Attach on an unknown backend: %v, want ErrUnavailable", err)
	}
	_, err = r.Attach(ctx, State{Backend: "stub", ID: "gone-123"})
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "gone-123") || !strings.Contains(err.Error(), "stub") {
		t.Errorf("Attach of a missing sandbox: %v, want ErrNotFound naming stub and gone-123", err)
	}
}
