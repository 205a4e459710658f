package redact

import (
	"encoding/json"
	"testing"
)

func TestString(t *testing.T) {
	r := New("sk-live-0123456789", "short", "", `pa"ss<word>\x`, "sk-live-0123456789-extended")
	tests := []struct {
		name, in, want string
	}{
		{"plain", "key=sk-live-0123456789!", "key=[redacted]!"},
		{"twice", "sk-live-0123456789 sk-live-0123456789", "[redacted] [redacted]"},
		{"longer secret containing another is replaced whole", "x sk-live-0123456789-extended y", "x [redacted] y"},
		{"too short to be a secret", "a short note", "a short note"},
		{"raw form with quotes", `p=pa"ss<word>\x`, "p=[redacted]"},
		{"JSON-escaped form", `{"p":"pa\"ss\u003cword\u003e\\x"}`, `{"p":"[redacted]"}`},
		{"JSON-escaped form without HTML escaping", `{"p":"pa\"ss<word>\\x"}`, `{"p":"[redacted]"}`},
		{"nothing to hide", "hello", "hello"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := r.String(tt.in); got != tt.want {
				t.Fatalf("String(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// TestPieces: text cut short before it was redacted can end in the start
// of a secret or begin with its end; such pieces of MinPiece bytes or more
// are replaced, shorter ones and pieces from the middle are not.
func TestPieces(t *testing.T) {
	const key = "sk-proj-0123456789abcdefXYZ" // 27 bytes
	r := New(key, "xoxb-short-1")             // 12 bytes: no pieces of its own
	tests := []struct {
		name, in, want string
	}{
		{"head kept, cut in the key", "out: " + key[:20] + "\n[... 99 bytes cut ...]", "out: [redacted]\n[... 99 bytes cut ...]"},
		{"cut marked with an ellipsis", "refused for " + key[:MinPiece] + "…", "refused for [redacted]…"},
		{"tail kept, starting in the key", "[... cut ...]" + key[5:] + " done", "[... cut ...][redacted] done"},
		{"whole and cut", key + " " + key[:15], "[redacted] [redacted]"},
		{"repeated without a separator, cut", key + key + key[:14], "[redacted][redacted][redacted]"},
		{"a piece too short", "key " + key[:MinPiece-1] + "…", "key " + key[:MinPiece-1] + "…"},
		{"a piece from the middle", "x " + key[3:20] + " y", "x " + key[3:20] + " y"},
		{"a secret of MinPiece bytes: whole only", "t=xoxb-short-1 t=xoxb-short", "t=[redacted] t=xoxb-short"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := r.String(tt.in); got != tt.want {
				t.Fatalf("String(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if r.Contains(tt.in) != (tt.in != tt.want) {
				t.Fatalf("Contains(%q) = %v, but String changes it: %v", tt.in, r.Contains(tt.in), tt.in != tt.want)
			}
		})
	}
}

func TestEmpty(t *testing.T) {
	for name, r := range map[string]*Redactor{"nil": nil, "no values": New(), "only short values": New("abc", "")} {
		t.Run(name, func(t *testing.T) {
			if !r.Empty() || r.Contains("abc") || r.String("abc") != "abc" {
				t.Fatal("an empty Redactor changed something")
			}
			v := struct{ S string }{"abc"}
			r.Walk(&v)
			if v.S != "abc" {
				t.Fatal("an empty Redactor changed a value")
			}
		})
	}
}

type inner struct {
	Text  string
	Bytes []byte
}

type outer struct {
	Title   string
	List    []inner
	Array   [2]string
	Ptr     *inner
	Any     any
	Map     map[string]string
	MapPtr  map[string]*inner
	Nested  map[string][]string
	private string
}

const secret = "tok-abcdefgh1234"

func TestWalk(t *testing.T) {
	r := New(secret)
	v := outer{
		Title:   "title " + secret,
		List:    []inner{{Text: secret}, {Bytes: []byte("b " + secret)}},
		Array:   [2]string{"ok", secret},
		Ptr:     &inner{Text: "<" + secret + ">"},
		Any:     "any " + secret,
		Map:     map[string]string{"k": secret, "clean": "fine"},
		MapPtr:  map[string]*inner{"p": {Text: secret}},
		Nested:  map[string][]string{"n": {secret}},
		private: secret,
	}
	r.Walk(&v)
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if r.Contains(string(data)) {
		t.Fatalf("a secret survived Walk: %s", data)
	}
	if v.Title != "title [redacted]" || v.Ptr.Text != "<[redacted]>" || v.Any != "any [redacted]" ||
		string(v.List[1].Bytes) != "b [redacted]" || v.Map["clean"] != "fine" {
		t.Fatalf("unexpected result: %+v", v)
	}
	if v.private != secret {
		t.Fatal("Walk changed an unexported field")
	}

	// Not a pointer: nothing can change, nothing panics.
	s := outer{Title: secret}
	r.Walk(s)
	r.Walk(nil)
	var nilPtr *outer
	r.Walk(nilPtr)
}

// TestWalkLeavesCleanMapsAlone checks that a map without secrets is only
// read: a sandbox's state shares its maps with other goroutines.
func TestWalkLeavesCleanMapsAlone(t *testing.T) {
	r := New(secret)
	shared := map[string]string{"a": "b"}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 1000 {
			_ = shared["a"]
		}
	}()
	for range 1000 {
		v := struct{ M map[string]string }{shared}
		r.Walk(&v)
	}
	<-done
}

func TestWalkCycle(t *testing.T) {
	type node struct {
		S    string
		Next *node
	}
	n := &node{S: secret}
	n.Next = n
	New(secret).Walk(n)
	if n.S != Placeholder {
		t.Fatalf("S = %q", n.S)
	}
}
