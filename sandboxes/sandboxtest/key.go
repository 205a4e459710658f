package sandboxtest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"testing"

	"github.com/agentbot/agentbot/sandboxes"
)

// testCreateByKey holds Create to Spec.Key: a second Create with the key of
// a sandbox that exists returns that sandbox (running again after a Stop),
// even when both run at once; another key makes another sandbox; and a
// destroyed sandbox's key makes a fresh one.
func (s *suite) testCreateByKey(t *testing.T) {
	ctx := testContext(t)
	create := func(key string) *sandboxes.Sandbox {
		t.Helper()
		spec := specFor(s.h, "bykey")
		spec.Key = key
		sb, err := s.reg.Create(ctx, s.h.Name, spec)
		if err != nil {
			t.Fatalf("creating a %s sandbox with key %q: %v", s.h.Name, key, err)
		}
		t.Cleanup(func() { destroyLater(t, sb) })
		return sb
	}
	key := newKey()
	first := create(key)
	writeFile(t, ctx, first, "mark.txt", []byte("first"), 0o644)

	again := create(key)
	if again.ID() != first.ID() {
		t.Fatalf("a second Create with the same key made sandbox %s; want %s", again.ID(), first.ID())
	}
	if got := sh(t, ctx, again, "cat mark.txt"); got != "first" {
		t.Errorf("the sandbox found by key holds %q in mark.txt, want %q", got, "first")
	}

	other := create(newKey())
	if other.ID() == first.ID() {
		t.Fatalf("another key gave the same sandbox %s", first.ID())
	}
	if code := exitCode(t, ctx, other, "test -e mark.txt"); code == 0 {
		t.Errorf("the sandbox of another key holds the first one's mark.txt")
	}

	// A stopped sandbox is found and runs again.
	if err := first.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	found := create(key)
	if found.ID() != first.ID() {
		t.Fatalf("Create after Stop made sandbox %s; want %s", found.ID(), first.ID())
	}
	if got := sh(t, ctx, found, "cat mark.txt"); got != "first" {
		t.Errorf("after Stop, the sandbox found by key holds %q in mark.txt", got)
	}

	// A destroyed sandbox frees its key: the next Create makes a fresh one.
	if err := found.Destroy(ctx); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	fresh := create(key)
	if code := exitCode(t, ctx, fresh, "test -e mark.txt"); code == 0 {
		t.Errorf("Create with the key of a destroyed sandbox gave back its workspace (%s)", fresh.ID())
	}

	// Two Creates at once, as a retried activity and the attempt it
	// replaced may run: one sandbox.
	key = newKey()
	var wg sync.WaitGroup
	ids := make([]string, 2)
	errs := make([]error, 2)
	for i := range ids {
		wg.Go(func() {
			spec := specFor(s.h, "bykey-concurrent")
			spec.Key = key
			sb, err := s.reg.Create(ctx, s.h.Name, spec)
			errs[i] = err
			if err == nil {
				ids[i] = sb.ID()
				t.Cleanup(func() { destroyLater(t, sb) })
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent Creates with one key: %v", err)
	}
	if ids[0] != ids[1] {
		t.Errorf("concurrent Creates with one key made two sandboxes: %s and %s", ids[0], ids[1])
	}
}

// newKey returns a key no other test uses.
func newKey() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "sandboxtest/" + runID + "/" + hex.EncodeToString(b)
}
