package store_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbot/agentbot/store"
)

// TestSessions lists the sessions that have data, from both folders, long
// IDs (whose encoding spans folders) included, and nothing else.
func TestSessions(t *testing.T) {
	forEachStore(t, func(t *testing.T, b *store.Blobs, sc storeCase) {
		ctx := t.Context()
		long := "agent/slack:T1:C2:" + strings.Repeat("1712345.6789/", 40)
		ids := []string{"agent/term:a", "agent/term:b", "agent/term:a/b", long, "ünïcode"}
		put(t, b, store.SessionPrefix(ids[0])+"transcript/1.json", []byte("x"))
		put(t, b, store.SnapshotKey(ids[0], 1), []byte("x"))
		put(t, b, store.SnapshotKey(ids[1], 3), []byte("x"))
		put(t, b, store.SessionPrefix(ids[2])+"answers/1.txt", []byte("x"))
		put(t, b, store.SessionPrefix(long)+"a/b/c.json", []byte("x"))
		put(t, b, store.SessionPrefix(ids[4])+"x", []byte("x"))
		// Not sessions' data.
		put(t, b, "other/x", []byte("x"))
		put(t, b, "sessions/not-an-encoding/x", []byte("x"))
		put(t, b, "sessions/loose-file", []byte("x"))

		got, err := b.Sessions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := slices.Clone(ids)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("Sessions = %q\nwant %q", got, want)
		}
	})
}

// TestNewest reports the newest blob under a prefix, and none for an
// empty one.
func TestNewest(t *testing.T) {
	forEachStore(t, func(t *testing.T, b *store.Blobs, sc storeCase) {
		ctx := t.Context()
		p := store.SessionPrefix("agent/term:newest")
		if _, ok, err := b.Newest(ctx, p); err != nil || ok {
			t.Fatalf("empty prefix: %v, %v", ok, err)
		}
		before := time.Now().Add(-2 * time.Second)
		put(t, b, p+"a", []byte("x"))
		put(t, b, p+"b/c", []byte("x"))
		got, ok, err := b.Newest(ctx, p)
		if err != nil || !ok || got.Before(before) || got.After(time.Now().Add(2*time.Second)) {
			t.Fatalf("Newest = %v, %v, %v; want about now", got, ok, err)
		}
	})
}
