package tui

import "testing"

// TestInert: what a command printed or the model wrote reaches the screen
// without its escape sequences and control characters (a cursor move, a
// window title, a bell, an 8-bit CSI), its text and line breaks kept.
func TestInert(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"plain", "go test ./...\nok", "go test ./...\nok"},
		{"colour", "\x1b[31mFAIL\x1b[0m pkg", "FAIL pkg"},
		{"cursor home and clear", "a\x1b[H\x1b[2Jb", "ab"},
		{"window title (OSC)", "x\x1b]0;pwned\x07y", "xy"},
		{"bell and backspace", "ding\x07\x08!", "ding!"},
		{"carriage return overwrite", "secret\rpublic", "secretpublic"},
		{"8-bit CSI", "a\u009b31mb", "a31mb"},
		{"tab kept", "a\tb", "a\tb"},
		{"unicode kept", "héllo — 世界 ✓", "héllo — 世界 ✓"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := inert(tc.in); got != tc.want {
				t.Fatalf("inert(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
