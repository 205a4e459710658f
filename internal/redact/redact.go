// Package redact replaces known secret values (API keys, chat tokens) in
// text that leaves a process: a chat message, an activity result bound for
// Temporal's history, a reply of the bot. It only knows the values it is
// given; a secret it was not told about passes untouched.
package redact

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
)

// MinLen is the shortest secret value a Redactor replaces. Shorter values
// (an empty or placeholder setting, "test") would turn up in ordinary text
// and mangle it, while hiding next to nothing.
const MinLen = 8

// Placeholder is what a secret is replaced with.
const Placeholder = "[redacted]"

// MinPiece is the shortest piece of a secret, at its start or at its end,
// that a Redactor replaces on its own. Text cut short before it was
// redacted (a command's output of which only the head and tail are kept, a
// server's error message truncated to a few hundred characters) can end in
// the start of a secret or begin with its end, which no match of the whole
// value finds. Shorter pieces are left alone: they hide little (OpenAI's
// own messages show a key's first and last few characters), and ordinary
// text would match them.
const MinPiece = 12

// Redactor replaces known secret values. A nil or empty Redactor changes
// nothing. It is safe for concurrent use.
type Redactor struct {
	// needles are what Contains looks for: the first and last MinPiece
	// bytes of every form of every secret (a whole form holds both), or
	// the whole form when it is shorter.
	needles  []string
	replacer *strings.Replacer
	longest  int // bytes of the longest string replaced
}

// New returns a Redactor of the given secret values; values shorter than
// MinLen are ignored. Each value is also looked for in its JSON-escaped
// forms (as it appears inside a JSON string, with or without HTML
// escaping), because tool-call arguments and tool outputs are often JSON.
// Besides whole forms, it replaces their pieces of MinPiece bytes or more
// at their start or end (see MinPiece).
func New(secrets ...string) *Redactor {
	var forms []string
	for _, s := range secrets {
		if len(s) < MinLen {
			continue
		}
		forms = append(forms, s, jsonForm(s, true), jsonForm(s, false))
	}
	if len(forms) == 0 {
		return &Redactor{}
	}
	var needles, olds []string
	for _, f := range slices.Compact(slices.Sorted(slices.Values(forms))) {
		olds = append(olds, f)
		if len(f) <= MinPiece {
			needles = append(needles, f)
			continue
		}
		needles = append(needles, f[:MinPiece], f[len(f)-MinPiece:])
		for n := MinPiece; n < len(f); n++ {
			olds = append(olds, f[:n], f[len(f)-n:])
		}
	}
	// Longest first, so that a secret containing another, or a whole
	// secret rather than a piece of it, is replaced whole
	// (strings.Replacer prefers the old strings given first).
	slices.SortFunc(olds, func(a, b string) int {
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	})
	olds = slices.Compact(olds)
	pairs := make([]string, 0, 2*len(olds))
	for _, o := range olds {
		pairs = append(pairs, o, Placeholder)
	}
	return &Redactor{needles: slices.Compact(slices.Sorted(slices.Values(needles))), replacer: strings.NewReplacer(pairs...),
		longest: len(olds[0])}
}

// jsonForm returns s as it appears between the quotes of a JSON string.
func jsonForm(s string, escapeHTML bool) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(escapeHTML)
	_ = enc.Encode(s) // a string always encodes
	out := strings.TrimSuffix(b.String(), "\n")
	return out[1 : len(out)-1]
}

// Empty reports whether r knows no secret.
func (r *Redactor) Empty() bool { return r == nil || len(r.needles) == 0 }

// Longest returns the length in bytes of the longest text String replaces
// (0 for an empty Redactor). Text that grows at its end, such as a
// streamed answer, changes under String only in its last Longest bytes
// and, where a replacement is made there, the Placeholder: a prefix that
// leaves out that many bytes is final.
func (r *Redactor) Longest() int {
	if r == nil {
		return 0
	}
	return r.longest
}

// Contains reports whether s holds a known secret, or a piece of one that
// String replaces.
func (r *Redactor) Contains(s string) bool {
	if r.Empty() {
		return false
	}
	for _, n := range r.needles {
		if strings.Contains(s, n) {
			return true
		}
	}
	return false
}

// String returns s with every known secret, and every piece of one that
// MinPiece describes, replaced by Placeholder.
func (r *Redactor) String(s string) string {
	if !r.Contains(s) {
		return s
	}
	return r.replacer.Replace(s)
}

// maxDepth bounds Walk, in case a value points back into itself.
const maxDepth = 64

// Walk replaces known secrets in every string reachable from ptr, in place:
// through exported struct fields, pointers, interfaces, slices, arrays and
// map values (and []byte read as text). ptr must be a pointer, or nothing
// is changed; unexported fields are left alone (no encoder sees them
// either). Walking every field, rather than a list of them, keeps a field
// added later from leaking.
func (r *Redactor) Walk(ptr any) {
	if r.Empty() || ptr == nil {
		return
	}
	v := reflect.ValueOf(ptr)
	if v.Kind() != reflect.Pointer {
		return
	}
	r.walk(v, 0)
}

// walk redacts v in place and reports whether it changed anything. Nothing
// is written where nothing changed, so a map shared with another goroutine
// (a sandbox's state) is only ever read.
func (r *Redactor) walk(v reflect.Value, depth int) bool {
	if depth > maxDepth {
		return false
	}
	switch v.Kind() {
	case reflect.String:
		if v.CanSet() && r.Contains(v.String()) {
			v.SetString(r.String(v.String()))
			return true
		}
	case reflect.Pointer:
		if !v.IsNil() {
			return r.walk(v.Elem(), depth+1)
		}
	case reflect.Interface:
		if v.IsNil() || !v.CanSet() {
			return false
		}
		// What an interface holds cannot be changed in place: redact a
		// copy and put it back.
		c := reflect.New(v.Elem().Type()).Elem()
		c.Set(v.Elem())
		if r.walk(c, depth+1) {
			v.Set(c)
			return true
		}
	case reflect.Struct:
		changed := false
		t := v.Type()
		for i := range t.NumField() {
			if t.Field(i).IsExported() && r.walk(v.Field(i), depth+1) {
				changed = true
			}
		}
		return changed
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			if b := v.Bytes(); v.CanSet() && r.Contains(string(b)) {
				v.SetBytes([]byte(r.String(string(b))))
				return true
			}
			return false
		}
		changed := false
		for i := range v.Len() {
			if r.walk(v.Index(i), depth+1) {
				changed = true
			}
		}
		return changed
	case reflect.Array:
		changed := false
		for i := range v.Len() {
			if r.walk(v.Index(i), depth+1) {
				changed = true
			}
		}
		return changed
	case reflect.Map:
		if v.IsNil() {
			return false
		}
		changed := false
		for iter := v.MapRange(); iter.Next(); {
			c := reflect.New(v.Type().Elem()).Elem()
			c.Set(iter.Value())
			if r.walk(c, depth+1) {
				// Setting an existing key while ranging is allowed and
				// visits no new entry.
				v.SetMapIndex(iter.Key(), c)
				changed = true
			}
		}
		return changed
	}
	return false
}
