package sandboxes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Fingerprinter is an optional interface of an Instance that computes the
// digest Sandbox.Fingerprint returns natively (a walk of a host directory),
// faster than the shell pipeline Sandbox.Fingerprint otherwise runs through
// Exec.
type Fingerprinter interface {
	// Fingerprint returns a short hex digest of the metadata of every
	// entry of the workspace that Archive would write and Snapshot keep
	// (so not OutputsDir, nor Restore's own directories): its
	// workspace-relative path, type, permission bits, size, modification
	// time to the nanosecond, change time (ctime) where the backend can
	// see it, and a symbolic link's target. It reads no file contents,
	// never follows a link, and visits entries in a fixed order, so that
	// it returns the same digest as long as nothing in the workspace
	// changes. ctx bounds the walk. A backend that cannot do it for this
	// workspace after all returns an error matching ErrUnsupported;
	// Sandbox.Fingerprint then runs its shell pipeline instead.
	Fingerprint(ctx context.Context) (string, error)
}

// Fingerprint returns a short hex digest of the workspace's tree metadata,
// so that a caller can skip a snapshot when nothing changed since the last
// one: for every entry a Snapshot would include, its path, type, permission
// bits, size, modification time in nanoseconds, change time where the
// backend can see it, and a symbolic link's target. It reads no file
// contents, so it costs a walk of the tree, not a read of it. ctx bounds
// the walk.
//
// Equal fingerprints of the same sandbox mean that nothing a snapshot
// would capture changed in between, as far as metadata tells; compare a
// new fingerprint with the one taken just before the last snapshot. The
// blind spot is the one of make and rsync, narrowed by the change time,
// which no user can set: a file rewritten with the same size within one
// tick of the file system's clock (a few milliseconds on Linux, more on
// file systems with coarse times) of its previous change, which only a
// process still running after a command could do. Fingerprints of
// different sandboxes are not comparable. The digest may also change when
// a snapshot would not: entries Snapshot leaves out as unportable (FIFOs,
// links out of the workspace) count, and so does, for the shell pipeline,
// the workspace root itself.
//
// A backend's Instance may compute it natively (see Fingerprinter).
// Otherwise, or when the backend's own declines with an error matching
// ErrUnsupported, Fingerprint runs one shell pipeline in the sandbox: find,
// stat -c (GNU coreutils or busybox), sort and sha256sum (or md5sum or
// cksum), hashed there so that only the digest comes back, within
// DefaultExecTimeout. When the sandbox lacks those tools it returns an
// error matching ErrUnsupported, and the caller snapshots as it would
// without it. A directory that cannot be read gives an error, and so may
// a workspace that changes while it is walked.
func (s *Sandbox) Fingerprint(ctx context.Context) (string, error) {
	if f, ok := s.inst.(Fingerprinter); ok {
		fp, err := f.Fingerprint(ctx)
		if err == nil && fp == "" {
			err = errors.New("the backend returned an empty fingerprint")
		}
		if !errors.Is(err, ErrUnsupported) {
			return fp, s.err("fingerprint", err)
		}
		// The backend declined this workspace (too deep, say): the
		// pipeline may still manage it.
	}
	fp, err := s.shellFingerprint(ctx)
	return fp, s.err("fingerprint", err)
}

// fingerprintUnsupported is the exit code of fingerprintScript when the
// sandbox lacks a tool it needs.
const fingerprintUnsupported = 97

// fingerprintScript lists every entry of the workspace but OutputsDir and
// what is below it, one line each from stat -c: the name (for a link, with
// its target: %N), the raw mode in hex (type, permission and special
// bits), the size, and the modification and change times in the human
// form, the one both GNU and busybox stat print with nanoseconds. The
// lines are sorted and hashed in the sandbox. The C locale and UTC keep
// names, order and times the same from call to call whatever the
// sandbox's environment says; the standard directories come first in PATH
// so that no tool of the workspace stands in for find or sort.
//
// The workspace root is listed too: a pipeline that printed nothing (a
// find that skips its -exec, as busybox does inside parentheses) would
// hash to the same digest whatever the tree, so an empty listing fails.
// Nothing else of the pipeline but the hash tells its status: whatever a
// tool prints on stderr (an unreadable directory, a file gone between
// find and stat) makes the fingerprint fail.
var fingerprintScript = fmt.Sprintf(`PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin${PATH:+:$PATH}
LC_ALL=C TZ=UTC0
export PATH LC_ALL TZ
for c in find stat sort cat; do
	command -v "$c" >/dev/null 2>&1 || { echo "$c is missing" >&2; exit %[1]d; }
done
stat -c %%f / >/dev/null 2>&1 || { echo "stat -c does not work" >&2; exit %[1]d; }
h=
for c in sha256sum md5sum cksum; do
	if command -v "$c" >/dev/null 2>&1; then h=$c; break; fi
done
[ -n "$h" ] || { echo "sha256sum, md5sum and cksum are missing" >&2; exit %[1]d; }
find . -path %[2]s -prune -o -exec stat -c '%%N %%f %%s %%y %%z' {} + | sort | {
	IFS= read -r first || { echo "find listed nothing, not even the workspace root" >&2; exit 1; }
	{ printf '%%s\n' "$first"; cat; } | "$h"
}`, fingerprintUnsupported, shellQuote("./"+OutputsDir))

// shellFingerprint computes the fingerprint with fingerprintScript.
func (s *Sandbox) shellFingerprint(ctx context.Context) (string, error) {
	res, err := s.Exec(ctx, ExecRequest{Command: fingerprintScript})
	if err != nil {
		// Exec wrapped it as an exec error; Fingerprint wraps it again.
		var se *Error
		if errors.As(err, &se) && se.Op == "exec" {
			err = se.Err
		}
		return "", fmt.Errorf("running the fingerprint pipeline: %w", err)
	}
	stderr := strings.TrimSpace(res.Stderr.String())
	switch {
	case res.ExitCode == fingerprintUnsupported:
		return "", fmt.Errorf("%w: no tools for a fingerprint in the sandbox: %s", ErrUnsupported, stderr)
	case res.ExitCode != 0 || stderr != "":
		return "", fmt.Errorf("the fingerprint pipeline failed (exit code %d): %s", res.ExitCode, stderr)
	}
	out := strings.TrimSpace(res.Stdout.String())
	if out == "" || strings.Contains(out, "\n") || res.Stdout.Truncated() {
		return "", fmt.Errorf("the fingerprint pipeline printed %q, not one digest", out)
	}
	// Whatever hasher the sandbox had, the fingerprint looks the same;
	// the tag keeps it apart from a native one.
	sum := sha256.Sum256([]byte("sh\x00" + out))
	return hex.EncodeToString(sum[:16]), nil
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
