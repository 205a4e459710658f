package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// cache is what the bot core uses of a thread cache; both implementations
// run the same tests through it.
type cache interface {
	FirstSeen(ctx context.Context, eventID string, ttl time.Duration) (bool, error)
	GetThread(ctx context.Context, threadKey string) (ThreadEntry, bool, error)
	PutThread(ctx context.Context, threadKey string, e ThreadEntry, ttl time.Duration) error
	DeleteThread(ctx context.Context, threadKey string) error
	Close() error
}

var (
	_ cache = (*MemoryCache)(nil)
	_ cache = (*RedisCache)(nil)
)

// expiryBound is how long an entry with a 1s TTL may take to disappear in
// these tests: generous, so a slow machine does not fail them.
const expiryBound = 10 * time.Second

// testCache runs the behaviour every cache shares. newCache returns a
// fresh, empty cache for one subtest and closes it when the subtest ends.
func testCache(t *testing.T, newCache func(t *testing.T) cache) {
	ctx := context.Background()
	entry := ThreadEntry{WorkflowID: "agent/slack:T1:C1:1700000000.000100", Title: "fix the build", Backend: "docker", Requester: "U123"}

	t.Run("FirstSeen", func(t *testing.T) {
		c := newCache(t)
		for i, want := range []bool{true, false, false} {
			got, err := c.FirstSeen(ctx, "slack:Ev1", time.Hour)
			if err != nil || got != want {
				t.Fatalf("call %d: FirstSeen = %v, %v; want %v, nil", i+1, got, err, want)
			}
		}
	})

	t.Run("FirstSeenIndependentIDs", func(t *testing.T) {
		c := newCache(t)
		for _, id := range []string{"slack:Ev1", "slack:Ev2", "discord:Ev1", "slack:ev1"} {
			if got, err := c.FirstSeen(ctx, id, time.Hour); err != nil || !got {
				t.Errorf("FirstSeen(%q) = %v, %v; want true, nil", id, got, err)
			}
		}
		if got, err := c.FirstSeen(ctx, "slack:Ev2", time.Hour); err != nil || got {
			t.Errorf("FirstSeen(slack:Ev2) again = %v, %v; want false, nil", got, err)
		}
	})

	t.Run("FirstSeenExpires", func(t *testing.T) {
		t.Parallel() // it waits out a ttl
		c := newCache(t)
		start := time.Now()
		if got, err := c.FirstSeen(ctx, "slack:Ev1", time.Second); err != nil || !got {
			t.Fatalf("FirstSeen = %v, %v; want true, nil", got, err)
		}
		// Every call but the last sees the ID within its ttl (or just
		// past it, and then it is new again).
		for {
			got, err := c.FirstSeen(ctx, "slack:Ev1", time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if got {
				if d := time.Since(start); d < time.Second {
					t.Fatalf("the event ID was forgotten after %v, before its ttl of 1s", d)
				}
				break
			}
			if time.Since(start) > expiryBound {
				t.Fatalf("the event ID is still remembered after %v; its ttl was 1s", expiryBound)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	t.Run("FirstSeenConcurrent", func(t *testing.T) {
		c := newCache(t)
		const n = 50
		var (
			wg     sync.WaitGroup
			mu     sync.Mutex
			firsts int
			errs   []error
		)
		start := make(chan struct{})
		for range n {
			wg.Go(func() {
				<-start
				got, err := c.FirstSeen(ctx, "slack:EvRace", time.Hour)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				}
				if got {
					firsts++
				}
			})
		}
		close(start)
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("%d calls failed, the first: %v", len(errs), errs[0])
		}
		if firsts != 1 {
			t.Fatalf("%d of %d concurrent calls saw the event first; want exactly 1", firsts, n)
		}
	})

	t.Run("ThreadRoundTrip", func(t *testing.T) {
		c := newCache(t)
		tests := []struct {
			name string
			key  string
			put  ThreadEntry
		}{
			{"session", "slack:T1:C1:1700000000.000100", entry},
			{"sessionNoOptionalFields", "discord:G1:C9", ThreadEntry{WorkflowID: "agent/discord:G1:C9"}},
			{"negative", "term:alice", ThreadEntry{Missing: true}},
			{"oddKey", "term:a b:ü/\"x\"", ThreadEntry{WorkflowID: "agent/term:a b:ü/\"x\"", Title: "quotes \" and\nnewlines"}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				if err := c.PutThread(ctx, tt.key, tt.put, time.Hour); err != nil {
					t.Fatal(err)
				}
				got, found, err := c.GetThread(ctx, tt.key)
				if err != nil || !found || got != tt.put {
					t.Fatalf("GetThread = %+v, %v, %v; want %+v, true, nil", got, found, err, tt.put)
				}
			})
		}
	})

	t.Run("ThreadMiss", func(t *testing.T) {
		c := newCache(t)
		got, found, err := c.GetThread(ctx, "slack:T1:C1:never")
		if err != nil || found || got != (ThreadEntry{}) {
			t.Fatalf("GetThread of an unknown thread = %+v, %v, %v; want zero, false, nil", got, found, err)
		}
	})

	t.Run("ThreadReplace", func(t *testing.T) {
		c := newCache(t)
		const key = "slack:T1:C1:1"
		if err := c.PutThread(ctx, key, ThreadEntry{Missing: true}, MissingTTL); err != nil {
			t.Fatal(err)
		}
		if err := c.PutThread(ctx, key, entry, ThreadTTL); err != nil {
			t.Fatal(err)
		}
		got, found, err := c.GetThread(ctx, key)
		if err != nil || !found || got != entry {
			t.Fatalf("GetThread after replacing a negative entry = %+v, %v, %v; want %+v, true, nil", got, found, err, entry)
		}
	})

	t.Run("ThreadDelete", func(t *testing.T) {
		c := newCache(t)
		const key, other = "slack:T1:C1:1", "slack:T1:C1:2"
		for _, k := range []string{key, other} {
			if err := c.PutThread(ctx, k, entry, time.Hour); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.DeleteThread(ctx, key); err != nil {
			t.Fatal(err)
		}
		if _, found, err := c.GetThread(ctx, key); err != nil || found {
			t.Fatalf("GetThread after DeleteThread: found %v, %v; want false, nil", found, err)
		}
		if _, found, err := c.GetThread(ctx, other); err != nil || !found {
			t.Fatalf("GetThread of another thread after DeleteThread: found %v, %v; want true, nil", found, err)
		}
		if err := c.DeleteThread(ctx, key); err != nil {
			t.Fatalf("DeleteThread of a missing entry: %v", err)
		}
	})

	t.Run("ThreadExpires", func(t *testing.T) {
		tests := []struct {
			name string
			put  ThreadEntry
		}{
			{"session", entry},
			{"negative", ThreadEntry{Missing: true}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel() // it waits out a ttl
				c := newCache(t)
				const key = "slack:T1:C1:1"
				start := time.Now()
				if err := c.PutThread(ctx, key, tt.put, time.Second); err != nil {
					t.Fatal(err)
				}
				for {
					got, found, err := c.GetThread(ctx, key)
					if err != nil {
						t.Fatal(err)
					}
					if !found {
						if d := time.Since(start); d < time.Second {
							t.Fatalf("the entry was gone after %v, before its ttl of 1s", d)
						}
						break
					}
					if got != tt.put {
						t.Fatalf("GetThread = %+v; want %+v", got, tt.put)
					}
					if time.Since(start) > expiryBound {
						t.Fatalf("the entry is still there after %v; its ttl was 1s", expiryBound)
					}
					time.Sleep(50 * time.Millisecond)
				}
			})
		}
	})

	t.Run("InvalidArguments", func(t *testing.T) {
		c := newCache(t)
		tests := []struct {
			name string
			call func() error
		}{
			{"FirstSeenEmptyID", func() error { _, err := c.FirstSeen(ctx, "", time.Hour); return err }},
			{"FirstSeenZeroTTL", func() error { _, err := c.FirstSeen(ctx, "slack:Ev1", 0); return err }},
			{"FirstSeenNegativeTTL", func() error { _, err := c.FirstSeen(ctx, "slack:Ev1", -time.Second); return err }},
			{"GetThreadEmptyKey", func() error { _, _, err := c.GetThread(ctx, ""); return err }},
			{"PutThreadEmptyKey", func() error { return c.PutThread(ctx, "", entry, time.Hour) }},
			{"PutThreadZeroTTL", func() error { return c.PutThread(ctx, "k", entry, 0) }},
			{"PutThreadSubMillisecondTTL", func() error { return c.PutThread(ctx, "k", entry, time.Microsecond) }},
			{"PutThreadEmptyEntry", func() error { return c.PutThread(ctx, "k", ThreadEntry{Title: "t"}, time.Hour) }},
			{"PutThreadNegativeWithWorkflow", func() error {
				return c.PutThread(ctx, "k", ThreadEntry{WorkflowID: "agent/k", Missing: true}, time.Hour)
			}},
			{"DeleteThreadEmptyKey", func() error { return c.DeleteThread(ctx, "") }},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				err := tt.call()
				if err == nil {
					t.Fatal("no error")
				}
				if errors.Is(err, ErrCacheUnavailable) {
					t.Fatalf("error %q matches ErrCacheUnavailable; an invalid argument is the caller's", err)
				}
			})
		}
		// Nothing was stored by the refused puts.
		if _, found, err := c.GetThread(ctx, "k"); err != nil || found {
			t.Fatalf("GetThread after refused puts: found %v, %v; want false, nil", found, err)
		}
	})

	t.Run("CanceledContext", func(t *testing.T) {
		c := newCache(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		errs := map[string]error{}
		_, errs["FirstSeen"] = c.FirstSeen(cctx, "slack:Ev1", time.Hour)
		_, _, errs["GetThread"] = c.GetThread(cctx, "k")
		errs["PutThread"] = c.PutThread(cctx, "k", entry, time.Hour)
		errs["DeleteThread"] = c.DeleteThread(cctx, "k")
		for name, err := range errs {
			if !errors.Is(err, context.Canceled) || errors.Is(err, ErrCacheUnavailable) {
				t.Errorf("%s with a canceled ctx: %v; want context.Canceled, not ErrCacheUnavailable", name, err)
			}
		}
		// The canceled FirstSeen did not record the ID.
		if got, err := c.FirstSeen(ctx, "slack:Ev1", time.Hour); err != nil || !got {
			t.Errorf("FirstSeen after a canceled one = %v, %v; want true, nil", got, err)
		}
	})

	t.Run("Closed", func(t *testing.T) {
		c := newCache(t)
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		errs := map[string]error{}
		_, errs["FirstSeen"] = c.FirstSeen(ctx, "slack:Ev1", time.Hour)
		_, _, errs["GetThread"] = c.GetThread(ctx, "k")
		errs["PutThread"] = c.PutThread(ctx, "k", entry, time.Hour)
		errs["DeleteThread"] = c.DeleteThread(ctx, "k")
		for name, err := range errs {
			if !errors.Is(err, ErrCacheUnavailable) {
				t.Errorf("%s after Close: %v; want ErrCacheUnavailable", name, err)
			}
		}
	})
}

func TestMemoryCache(t *testing.T) {
	testCache(t, func(t *testing.T) cache {
		c := NewMemoryCache()
		t.Cleanup(func() { c.Close() })
		return c
	})
}

func TestMemoryCacheBounded(t *testing.T) {
	ctx := context.Background()
	e := func(k string) ThreadEntry { return ThreadEntry{WorkflowID: "agent/" + k} }

	t.Run("ThreadsLeastRecentlyUsedGoFirst", func(t *testing.T) {
		c := newMemoryCache(3)
		for _, k := range []string{"a", "b", "c"} {
			if err := c.PutThread(ctx, k, e(k), time.Hour); err != nil {
				t.Fatal(err)
			}
		}
		if _, found, _ := c.GetThread(ctx, "a"); !found { // a is now the most recently used
			t.Fatal("a is missing")
		}
		if err := c.PutThread(ctx, "d", e("d"), time.Hour); err != nil {
			t.Fatal(err)
		}
		for k, want := range map[string]bool{"a": true, "b": false, "c": true, "d": true} {
			if _, found, _ := c.GetThread(ctx, k); found != want {
				t.Errorf("thread %s found = %v; want %v", k, found, want)
			}
		}
	})

	t.Run("EventsBounded", func(t *testing.T) {
		c := newMemoryCache(10)
		for i := range 1000 {
			if got, _ := c.FirstSeen(ctx, fmt.Sprint("ev", i), time.Hour); !got {
				t.Fatalf("ev%d not new", i)
			}
		}
		if n := c.events.len(); n != 10 {
			t.Fatalf("%d event IDs held; want the bound, 10", n)
		}
		if got, _ := c.FirstSeen(ctx, "ev999", time.Hour); got {
			t.Error("the most recent event ID was forgotten")
		}
		if got, _ := c.FirstSeen(ctx, "ev0", time.Hour); !got {
			t.Error("the oldest event ID is still remembered beyond the bound")
		}
	})

	t.Run("ThreadsDoNotEvictEvents", func(t *testing.T) {
		c := newMemoryCache(2)
		if got, _ := c.FirstSeen(ctx, "ev", time.Hour); !got {
			t.Fatal("ev not new")
		}
		for _, k := range []string{"a", "b", "c"} {
			if err := c.PutThread(ctx, k, e(k), time.Hour); err != nil {
				t.Fatal(err)
			}
		}
		if got, _ := c.FirstSeen(ctx, "ev", time.Hour); got {
			t.Error("thread entries evicted an event ID")
		}
	})
}
