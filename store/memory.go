package store

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrCacheUnavailable means the thread cache could not answer: Redis is
// down, slow (no reply within RedisOptions.OpTimeout) or refused the
// command, or the cache was closed. Errors of RedisCache and MemoryCache
// that match it (errors.Is) name the operation and the key. The cache is
// never the source of truth, so a caller may carry on without it. An error
// that does not match it is the caller's: an invalid argument, or ctx
// ended.
var ErrCacheUnavailable = errors.New("cache unavailable")

// MemoryMaxEntries is how many thread entries, and separately how many event
// IDs, a MemoryCache holds; beyond it the least recently used go first.
const MemoryMaxEntries = 100_000

// MemoryCache is the thread cache and event de-duplication in process
// memory, for a single bot process with no Redis. It forgets everything at
// exit and is bounded (MemoryMaxEntries). Its methods are safe for
// concurrent use and never fail except on invalid arguments, an ended ctx,
// or after Close.
type MemoryCache struct {
	mu      sync.Mutex
	closed  bool
	threads *lru[ThreadEntry]
	events  *lru[bool]
}

// NewMemoryCache returns an empty MemoryCache.
func NewMemoryCache() *MemoryCache {
	return newMemoryCache(MemoryMaxEntries)
}

func newMemoryCache(max int) *MemoryCache {
	return &MemoryCache{threads: newLRU[ThreadEntry](max), events: newLRU[bool](max)}
}

// FirstSeen reports whether eventID is new: true the first time it is seen
// within ttl of its first sighting, false after (a sighting does not extend
// ttl). ctx is checked only, the call does not block.
func (c *MemoryCache) FirstSeen(ctx context.Context, eventID string, ttl time.Duration) (bool, error) {
	if err := checkEvent(ctx, eventID, ttl); err != nil {
		return false, err
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false, fmt.Errorf("store: first seen %q: %w", eventID, errMemoryClosed)
	}
	if _, ok := c.events.get(eventID, now); ok {
		return false, nil
	}
	c.events.put(eventID, false, now.Add(ttl)) // claimed, not settled
	return true, nil
}

// GetThread returns the cached entry of threadKey; found is false on a miss
// (never cached, expired, or evicted). A negative entry is found with
// Missing set.
func (c *MemoryCache) GetThread(ctx context.Context, threadKey string) (ThreadEntry, bool, error) {
	if err := checkCall(ctx, "get thread", "thread key", threadKey); err != nil {
		return ThreadEntry{}, false, err
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ThreadEntry{}, false, fmt.Errorf("store: get thread %q: %w", threadKey, errMemoryClosed)
	}
	e, ok := c.threads.get(threadKey, now)
	return e, ok, nil
}

// PutThread caches e for threadKey for ttl, replacing any entry. e must
// name a workflow or be negative (Missing), not both.
func (c *MemoryCache) PutThread(ctx context.Context, threadKey string, e ThreadEntry, ttl time.Duration) error {
	if err := checkPut(ctx, threadKey, e, ttl); err != nil {
		return err
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("store: put thread %q: %w", threadKey, errMemoryClosed)
	}
	c.threads.put(threadKey, e, now.Add(ttl))
	return nil
}

// DeleteThread forgets the entry of threadKey; a missing one is no error.
func (c *MemoryCache) DeleteThread(ctx context.Context, threadKey string) error {
	if err := checkCall(ctx, "delete thread", "thread key", threadKey); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("store: delete thread %q: %w", threadKey, errMemoryClosed)
	}
	c.threads.remove(threadKey)
	return nil
}

// Settle keeps eventID seen for ttl from now (see RedisCache.Settle).
func (c *MemoryCache) Settle(ctx context.Context, eventID string, ttl time.Duration) error {
	if err := checkEvent(ctx, eventID, ttl); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("store: settle %q: %w", eventID, errMemoryClosed)
	}
	c.events.put(eventID, true, time.Now().Add(ttl))
	return nil
}

// Settled reports whether eventID was settled (see RedisCache.Settled).
func (c *MemoryCache) Settled(ctx context.Context, eventID string) (bool, error) {
	if err := checkCall(ctx, "settled", "event ID", eventID); err != nil {
		return false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false, fmt.Errorf("store: settled %q: %w", eventID, errMemoryClosed)
	}
	v, ok := c.events.get(eventID, time.Now())
	return ok && v, nil
}

// Release forgets eventID, so that a platform's retry of it is handled.
func (c *MemoryCache) Release(ctx context.Context, eventID string) error {
	if err := checkCall(ctx, "release", "event ID", eventID); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("store: release %q: %w", eventID, errMemoryClosed)
	}
	c.events.remove(eventID)
	return nil
}

// Close drops every entry; later calls fail with ErrCacheUnavailable.
// Closing twice is no error.
func (c *MemoryCache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.threads, c.events = nil, nil
	return nil
}

var errMemoryClosed = fmt.Errorf("%w: closed", ErrCacheUnavailable)

// The argument checks below are shared by RedisCache and MemoryCache so
// both refuse the same calls with the same errors.

// minTTL is the shortest lifetime Redis can keep (PX 1).
const minTTL = time.Millisecond

// checkCall validates what every call has: a key (what names it in the
// error) and a live ctx. op names the method in errors.
func checkCall(ctx context.Context, op, what, key string) error {
	if key == "" {
		return fmt.Errorf("store: %s: empty %s", op, what)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store: %s %q: %w", op, key, err)
	}
	return nil
}

func checkEvent(ctx context.Context, eventID string, ttl time.Duration) error {
	if err := checkCall(ctx, "first seen", "event ID", eventID); err != nil {
		return err
	}
	if ttl < minTTL {
		return fmt.Errorf("store: first seen %q: ttl %v is shorter than %v", eventID, ttl, minTTL)
	}
	return nil
}

func checkPut(ctx context.Context, threadKey string, e ThreadEntry, ttl time.Duration) error {
	if err := checkCall(ctx, "put thread", "thread key", threadKey); err != nil {
		return err
	}
	var problem string
	switch {
	case e.Missing && e.WorkflowID != "":
		problem = "a negative entry (Missing) names a workflow"
	case !e.Missing && e.WorkflowID == "":
		problem = "the entry names no workflow and is not negative (Missing)"
	case ttl < minTTL:
		problem = fmt.Sprintf("ttl %v is shorter than %v", ttl, minTTL)
	default:
		return nil
	}
	return fmt.Errorf("store: put thread %q: %s", threadKey, problem)
}

// lru is a bounded map whose entries expire; when full, the least recently
// used entry makes room. Expired entries are dropped when met. Not safe for
// concurrent use.
type lru[V any] struct {
	max   int
	order *list.List // of *lruItem[V], most recently used first
	items map[string]*list.Element
}

type lruItem[V any] struct {
	key     string
	val     V
	expires time.Time
}

func newLRU[V any](max int) *lru[V] {
	return &lru[V]{max: max, order: list.New(), items: make(map[string]*list.Element)}
}

func (l *lru[V]) get(key string, now time.Time) (V, bool) {
	el, ok := l.items[key]
	if !ok {
		var zero V
		return zero, false
	}
	it := el.Value.(*lruItem[V])
	if !now.Before(it.expires) {
		l.order.Remove(el)
		delete(l.items, key)
		var zero V
		return zero, false
	}
	l.order.MoveToFront(el)
	return it.val, true
}

func (l *lru[V]) put(key string, val V, expires time.Time) {
	if el, ok := l.items[key]; ok {
		it := el.Value.(*lruItem[V])
		it.val, it.expires = val, expires
		l.order.MoveToFront(el)
		return
	}
	for l.order.Len() >= l.max {
		oldest := l.order.Back()
		l.order.Remove(oldest)
		delete(l.items, oldest.Value.(*lruItem[V]).key)
	}
	l.items[key] = l.order.PushFront(&lruItem[V]{key: key, val: val, expires: expires})
}

func (l *lru[V]) remove(key string) {
	if el, ok := l.items[key]; ok {
		l.order.Remove(el)
		delete(l.items, key)
	}
}

func (l *lru[V]) len() int { return len(l.items) }
