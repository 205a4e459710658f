package config

import (
	"slices"
	"testing"
)

// TestOTLPHeadersAreSecrets: an OTLP header's value (a tracing backend's
// token) is a secret: kept out of the process environment and redacted
// like the others.
func TestOTLPHeadersAreSecrets(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		if !slices.Contains(SecretVars, k) {
			t.Errorf("%s is not among SecretVars", k)
		}
	}
	c, err := Load([]string{"HOME=/tmp/x",
		"OTEL_EXPORTER_OTLP_HEADERS=x-honeycomb-team=hc-token-0123456789, other=plain%20value%2C42",
		"OTEL_EXPORTER_OTLP_TRACES_HEADERS=authorization=Bearer%20trace-token-abcdef"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"hc-token-0123456789", "plain value,42", "Bearer trace-token-abcdef"} {
		if !slices.Contains(c.Secrets, want) {
			t.Errorf("Secrets %q lack %q", c.Secrets, want)
		}
	}
}
