package sandboxes

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
)

// Registry holds the backends a program can use, by name. Build one
// explicitly in main and pass it down; there is no global registry. It is
// safe for concurrent use.
type Registry struct {
	mu       sync.RWMutex
	backends map[string]Backend
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{backends: make(map[string]Backend)}
}

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)

// Register adds a backend under name (lower case letters, digits and
// dashes). It refuses an empty, malformed or duplicate name and a nil
// backend.
func (r *Registry) Register(name string, b Backend) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("sandboxes: register: bad backend name %q", name)
	}
	if b == nil {
		return fmt.Errorf("sandboxes: register %q: nil backend", name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.backends[name]; dup {
		return fmt.Errorf("sandboxes: register: backend %q registered twice", name)
	}
	r.backends[name] = b
	return nil
}

// Names returns the registered backend names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.backends))
	for n := range r.backends {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Backend returns the backend registered under name, or an error matching
// ErrUnavailable that lists the registered names.
func (r *Registry) Backend(name string) (Backend, error) {
	r.mu.RLock()
	b, ok := r.backends[name]
	r.mu.RUnlock()
	if !ok {
		return nil, &Error{Op: "lookup", Backend: name,
			Err: fmt.Errorf("%w: no backend %q (registered: %v)", ErrUnavailable, name, r.Names())}
	}
	return b, nil
}

// Availability is one line of Registry.Available.
type Availability struct {
	Name        string
	Description string
	// Err is nil when the backend can run here, else why it cannot.
	Err error
}

// Available asks every registered backend whether it can run here, in name
// order.
func (r *Registry) Available(ctx context.Context) []Availability {
	var out []Availability
	for _, n := range r.Names() {
		b, _ := r.Backend(n)
		out = append(out, Availability{Name: n, Description: b.Description(), Err: b.Available(ctx)})
	}
	return out
}

// Create makes a new sandbox on the named backend, or, when spec.Key is
// set and a sandbox with that key exists, returns that one, running.
func (r *Registry) Create(ctx context.Context, backend string, spec Spec) (*Sandbox, error) {
	b, err := r.Backend(backend)
	if err != nil {
		return nil, err
	}
	if spec.Root != "" && !isAbs(spec.Root) {
		return nil, &Error{Op: "create", Backend: backend, Err: Invalidf("root %q is not an absolute path", spec.Root)}
	}
	if len(spec.Key) > MaxKeyLen || strings.IndexByte(spec.Key, 0) >= 0 || !utf8.ValidString(spec.Key) {
		return nil, &Error{Op: "create", Backend: backend, Err: Invalidf("key is longer than %d bytes, holds a NUL byte or is not UTF-8", MaxKeyLen)}
	}
	inst, err := b.Create(ctx, spec)
	if err != nil {
		return nil, wrap("create", backend, "", err)
	}
	return New(backend, inst), nil
}

// Attach returns the live sandbox that state describes, starting it if it
// was stopped. A sandbox that no longer exists gives ErrNotFound.
func (r *Registry) Attach(ctx context.Context, state State) (*Sandbox, error) {
	b, err := r.Backend(state.Backend)
	if err != nil {
		return nil, err
	}
	if state.ID == "" {
		return nil, &Error{Op: "attach", Backend: state.Backend, Err: Invalidf("empty sandbox ID")}
	}
	inst, err := b.Attach(ctx, state)
	if err != nil {
		return nil, wrap("attach", state.Backend, state.ID, err)
	}
	return New(state.Backend, inst), nil
}

// List returns the sandboxes of the named backend (see Lister). A backend
// that cannot list gives an error matching ErrUnsupported.
func (r *Registry) List(ctx context.Context, backend string) ([]Listed, error) {
	b, err := r.Backend(backend)
	if err != nil {
		return nil, err
	}
	l, ok := b.(Lister)
	if !ok {
		return nil, &Error{Op: "list", Backend: backend, Err: ErrUnsupported}
	}
	list, err := l.List(ctx)
	if err != nil {
		return nil, wrap("list", backend, "", err)
	}
	for i := range list {
		list[i].Backend = backend
	}
	return list, nil
}

// Destroy deletes the sandbox that state describes without handing it out:
// through the backend's Remover where it has one, else by attaching to it
// and destroying it. A sandbox that no longer exists gives ErrNotFound.
func (r *Registry) Destroy(ctx context.Context, state State) error {
	b, err := r.Backend(state.Backend)
	if err != nil {
		return err
	}
	if state.ID == "" {
		return &Error{Op: "destroy", Backend: state.Backend, Err: Invalidf("empty sandbox ID")}
	}
	if rm, ok := b.(Remover); ok {
		return wrap("destroy", state.Backend, state.ID, rm.Remove(ctx, state))
	}
	inst, err := b.Attach(ctx, state)
	if err != nil {
		return wrap("destroy", state.Backend, state.ID, err)
	}
	return New(state.Backend, inst).Destroy(ctx)
}

func isAbs(p string) bool { return len(p) > 0 && p[0] == '/' }
