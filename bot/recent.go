package bot

import "sync"

// Recent is a map of at most max entries that forgets the oldest first:
// what a platform sender remembers of the messages it posted, so that a
// retry in the same process edits instead of searching the platform. Safe
// for concurrent use.
type Recent[V any] struct {
	mu    sync.Mutex
	max   int
	m     map[string]V
	order []string // keys, oldest first; a deleted key's entry goes when it comes up
}

// NewRecent returns an empty Recent holding at most max entries.
func NewRecent[V any](max int) *Recent[V] {
	return &Recent[V]{max: max, m: make(map[string]V)}
}

// Get returns the value of key.
func (r *Recent[V]) Get(key string) (V, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.m[key]
	return v, ok
}

// Put sets the value of key, forgetting the oldest entries past max.
func (r *Recent[V]) Put(key string, v V) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.m[key]; !ok {
		r.order = append(r.order, key)
	}
	r.m[key] = v
	for len(r.m) > r.max && len(r.order) > 0 {
		delete(r.m, r.order[0])
		r.order = r.order[1:]
	}
}

// Delete forgets key.
func (r *Recent[V]) Delete(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, key)
}
