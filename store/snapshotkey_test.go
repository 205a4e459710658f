package store_test

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/agentbot/agentbot/store"
)

// trickyIDs are session IDs chosen to break a naive escaping: separators,
// dot segments, escape characters, case, Unicode forms, bytes that are not
// UTF-8, IDs that are prefixes of one another, and IDs long enough to need
// several folders.
var trickyIDs = []struct{ name, id string }{
	{"empty", ""},
	{"slash", "/"},
	{"double slash", "//"},
	{"dot", "."},
	{"dot dot", ".."},
	{"dot dot slash", "../.."},
	{"climbing", "agent/../../etc/passwd"},
	{"percent", "%"},
	{"escaped slash", "a%2Fb"},
	{"slash in place of escape", "a/b"},
	{"percent escape of percent", "a%252Fb"},
	{"slack thread", "agent/slack:T1:C2:1712345.6789"},
	{"slack thread, trailing space", "agent/slack:T1:C2:1712345.6789 "},
	{"slack thread, lower case", "agent/slack:t1:c2:1712345.6789"},
	{"discord", "agent/discord:123456789012345678:987654321098765432"},
	{"upper A", "A"},
	{"lower a", "a"},
	{"underscore", "_"},
	{"dash", "-"},
	{"separator look-alike", "x_mfzwizloon"},
	{"chunk marker look-alike", "x-/y"},
	{"NFC e-acute", "caf\u00e9"},
	{"NFD e-acute", "cafe\u0301"},
	{"CJK", "agent/term:日本語"},
	{"emoji", "agent/term:🦫"},
	{"NUL", "a\x00b"},
	{"newline", "a\nb"},
	{"not UTF-8", "a\xffb"},
	{"prefix", "agent/s"},
	{"extends prefix", "agent/s1"},
	{"long", strings.Repeat("agent/term:long-name/", 25)},
	{"long plus one", strings.Repeat("agent/term:long-name/", 25) + "x"},
	{"exactly one folder", strings.Repeat("q", 104)},
	{"just over one folder", strings.Repeat("q", 105)},
	{"580 bytes", strings.Repeat("z", 580)},
}

func TestSnapshotKeyInjective(t *testing.T) {
	byKey := map[string]string{}    // key -> ID
	byFolded := map[string]string{} // lower-cased key -> ID
	for _, tt := range trickyIDs {
		t.Run(tt.name, func(t *testing.T) {
			key := store.SnapshotKey(tt.id, 1)
			if other, dup := byKey[key]; dup {
				t.Fatalf("IDs %q and %q share the key %q", other, tt.id, key)
			}
			byKey[key] = tt.id
			folded := strings.ToLower(key)
			if other, dup := byFolded[folded]; dup {
				t.Fatalf("IDs %q and %q have keys equal but for case: %q", other, tt.id, key)
			}
			byFolded[folded] = tt.id

			if !strings.HasPrefix(key, store.SnapshotPrefix(tt.id)) {
				t.Errorf("key %q does not start with SnapshotPrefix %q", key, store.SnapshotPrefix(tt.id))
			}
			for seg := range strings.SplitSeq(key, "/") {
				if seg == "" || seg == "." || seg == ".." || len(seg) > 255 {
					t.Errorf("key %q has the unsafe path segment %q", key, seg)
				}
				if strings.Trim(seg, "abcdefghijklmnopqrstuvwxyz0123456789_-.") != "" {
					t.Errorf("key %q has characters outside [a-z0-9_.-] in %q", key, seg)
				}
			}
			if len(tt.id) <= 580 && len(key) > 1024 {
				t.Errorf("key of a %d-byte ID is %d bytes, over S3's and GCS's 1,024", len(tt.id), len(key))
			}
			id, gen, err := store.ParseSnapshotKey(key)
			if err != nil || id != tt.id || gen != 1 {
				t.Errorf("ParseSnapshotKey(%q) = %q, %d, %v; want %q, 1", key, id, gen, err, tt.id)
			}
		})
	}
	t.Run("prefixes do not nest", func(t *testing.T) {
		for _, a := range trickyIDs {
			for _, b := range trickyIDs {
				if a.id != b.id && strings.HasPrefix(store.SnapshotKey(b.id, 0), store.SnapshotPrefix(a.id)) {
					t.Errorf("SnapshotPrefix(%q) = %q is a prefix of a key of %q", a.id, store.SnapshotPrefix(a.id), b.id)
				}
			}
		}
	})
	// The keys must work as real paths, not only as strings.
	forEachStore(t, func(t *testing.T, b *store.Blobs, sc storeCase) {
		for _, tt := range trickyIDs {
			put(t, b, store.SnapshotKey(tt.id, 1), []byte(tt.id))
		}
		for _, tt := range trickyIDs {
			got := list(t, b, store.SnapshotPrefix(tt.id))
			if want := []string{store.SnapshotKey(tt.id, 1)}; !slices.Equal(got, want) {
				t.Errorf("List(SnapshotPrefix(%q)) = %q, want %q", tt.id, got, want)
				continue
			}
			if data := get(t, b, got[0]); string(data) != tt.id {
				t.Errorf("snapshot of %q holds %q", tt.id, data)
			}
		}
	})
}

func TestSnapshotKeyFormat(t *testing.T) {
	got := store.SnapshotKey("agent/slack:T1:C2:1712345.6789", 7)
	const want = "snapshots/agent-slack-t1-c2-1712345-6789_mftwk3tuf5zwyyldnm5fimj2imzdumjxgezdgnbvfy3doobz/0000000000000000007.tar.zst"
	if got != want {
		t.Errorf("SnapshotKey = %q, want %q", got, want)
	}
}

func TestSnapshotKeyOrder(t *testing.T) {
	const id = "agent/discord:1:2"
	gens := []int64{0, 1, 2, 9, 10, 11, 99, 100, 1000, 1 << 31, 1 << 40, math.MaxInt64 - 1, math.MaxInt64}
	var keys []string
	for _, g := range gens {
		keys = append(keys, store.SnapshotKey(id, g))
	}
	if !slices.IsSorted(keys) {
		t.Errorf("keys of increasing generations do not sort in order: %q", keys)
	}
	for i, k := range keys {
		if _, g, err := store.ParseSnapshotKey(k); err != nil || g != gens[i] {
			t.Errorf("ParseSnapshotKey(%q) generation = %d, %v; want %d", k, g, err, gens[i])
		}
	}
	forEachStore(t, func(t *testing.T, b *store.Blobs, sc storeCase) {
		for _, i := range []int{7, 2, 12, 0, 5, 9, 1, 11, 3, 10, 4, 8, 6} {
			put(t, b, keys[i], nil)
		}
		if got := list(t, b, store.SnapshotPrefix(id)); !slices.Equal(got, keys) {
			t.Errorf("List = %q, want generations in order %q", got, keys)
		}
	})
}

func TestSnapshotKeyNegativeGeneration(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "negative generation -1") {
			t.Errorf("SnapshotKey with generation -1 recovered %v, want a panic naming it", r)
		}
	}()
	store.SnapshotKey("agent/x", -1)
}

func TestParseSnapshotKeyRejects(t *testing.T) {
	good := store.SnapshotKey("agent/x", 5)
	folder := strings.TrimSuffix(strings.TrimPrefix(store.SnapshotPrefix("agent/x"), "snapshots/"), "/")
	long := store.SnapshotKey(strings.Repeat("q", 300), 5)
	tests := []struct{ name, key string }{
		{"empty", ""},
		{"other folder", strings.Replace(good, "snapshots/", "backups/", 1)},
		{"no session folder", "snapshots/0000000000000000005.tar.zst"},
		{"short generation", strings.Replace(good, "0000000000000000005", "5", 1)},
		{"generation out of range", strings.Replace(good, "0000000000000000005", "9999999999999999999", 1)},
		{"signed generation", strings.Replace(good, "0000000000000000005", "-000000000000000005", 1)},
		{"other extension", strings.Replace(good, ".tar.zst", ".tar.gz", 1)},
		{"upper-case encoding", strings.Replace(good, folder, strings.ToUpper(folder), 1)},
		{"wrong readable part", strings.Replace(good, "agent-x_", "agent-y_", 1)},
		{"no separator", strings.Replace(good, "_", "", 1)},
		{"bad base32", strings.Replace(good, "_", "_1", 1)},
		{"extra folder", strings.Replace(good, folder, folder+"/extra", 1)},
		{"chunk marker dropped", strings.Replace(long, "-/", "/", 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if id, gen, err := store.ParseSnapshotKey(tt.key); err == nil {
				t.Errorf("ParseSnapshotKey(%q) = %q, %d; want an error", tt.key, id, gen)
			}
		})
	}
	if id, gen, err := store.ParseSnapshotKey(long); err != nil || id != strings.Repeat("q", 300) || gen != 5 {
		t.Errorf("ParseSnapshotKey(long key) = %q, %d, %v", id, gen, err)
	}
}
