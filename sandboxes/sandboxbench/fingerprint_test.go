package sandboxbench

import (
	"testing"

	"github.com/agentbot/agentbot/sandboxes"
	"github.com/agentbot/agentbot/sandboxes/dockersandbox"
	"github.com/agentbot/agentbot/sandboxes/localsandbox"
)

// BenchmarkFingerprint measures Sandbox.Fingerprint of the generated
// workspace tree: what a caller pays, after a turn, to learn whether the
// snapshot can be skipped. Sub-benchmarks:
//
//   - local: the local backend's native walk.
//   - local-shell: the same sandbox with its native fingerprint hidden, so
//     the sandboxes package runs its find | stat | sort | sha256sum
//     pipeline through Exec (GNU tools of the host); the baseline of
//     local.
//   - docker: a Docker sandbox of the test image holding the tree (put
//     there by a Restore before timing starts), fingerprinted by the same
//     pipeline inside the container (busybox).
//
// Besides ns/op they report ms/op, and files/s: regular files of the tree
// covered per second (directories come on top).
func BenchmarkFingerprint(b *testing.B) {
	f := newFixture(b)
	var shellNs float64
	b.Run("local-shell", func(b *testing.B) {
		t := f.benchTree(b)
		sb := f.sandbox(b, localsandbox.Name, sandboxes.Spec{Root: t.Dir})
		// Embedding hides the instance's Fingerprint method.
		benchFingerprint(b, sandboxes.New(sb.Backend(), struct{ sandboxes.Instance }{sb.Instance()}), t)
		shellNs = nsPerOp(b)
	})
	b.Run("local", func(b *testing.B) {
		t := f.benchTree(b)
		benchFingerprint(b, f.sandbox(b, localsandbox.Name, sandboxes.Spec{Root: t.Dir}), t)
		reportVs(b, shellNs, "local-shell")
	})
	b.Run("docker", func(b *testing.B) {
		t, snap := f.benchTree(b), f.snapshot(b)
		sb := f.sandbox(b, dockersandbox.Name, sandboxes.Spec{Name: "sandboxbench-fingerprint"})
		restoreFile(b, sb, snap, t)
		benchFingerprint(b, sb, t)
	})
}

// benchFingerprint fingerprints sb's workspace, which holds t, once before
// timing (caches) and then b.N times, failing unless every fingerprint is
// the first: nothing changes the tree meanwhile.
func benchFingerprint(b *testing.B, sb *sandboxes.Sandbox, t benchTree) {
	ctx := b.Context()
	first, err := sb.Fingerprint(ctx)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		fp, err := sb.Fingerprint(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if fp != first {
			b.Fatalf("the fingerprint of an unchanged tree went from %s to %s", first, fp)
		}
	}
	ns := nsPerOp(b)
	b.ReportMetric(ns/1e6, "ms/op")
	if ns > 0 {
		b.ReportMetric(float64(t.Files)/(ns/1e9), "files/s")
	}
}
