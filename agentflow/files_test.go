package agentflow_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentbot/agentbot/agentflow"
)

func TestSanitizeFileName(t *testing.T) {
	tests := []struct{ in, want string }{
		{"report.pdf", "report.pdf"},
		{"../../etc/passwd", "passwd"},
		{`C:\Users\me\notes.txt`, "notes.txt"},
		{".bashrc", "bashrc"},
		{"...", "file"},
		{"", "file"},
		{"a\x00b\nc.txt", "a_b_c.txt"},
		{"it's $HOME `x`.sh", "it_s _HOME _x_.sh"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := agentflow.SanitizeFileName(tt.in); got != tt.want {
				t.Fatalf("SanitizeFileName(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
	long := agentflow.SanitizeFileName(strings.Repeat("é", 80) + ".txt")
	if len(long) > 100 || !strings.HasSuffix(long, ".txt") || !utf8.ValidString(long) {
		t.Fatalf("long name: %q (%d bytes)", long, len(long))
	}
}
