package store

import (
	"encoding/base32"
	"fmt"
	"strconv"
	"strings"
)

// The snapshot key layout:
//
//	snapshots/<readable>_<base32 of the session ID>/<generation, 19 digits>.tar.zst
//
// e.g. for "agent/slack:T1:C2:1712345.6789", generation 7:
//
//	snapshots/agent-slack-t1-c2-1712345-6789_mftwk3tuf5zwyyldnm5fimj2imzdumjxgezdgnbvfy3doobz/0000000000000000007.tar.zst
//
// The base32 part (lowercase, unpadded) carries the ID exactly, so the
// mapping is injective and reversible, and it uses only [a-z2-7], so it
// stays unique on case-insensitive filesystems and needs no escaping in any
// store. The readable part (the ID lowercased, runs of other characters
// turned into "-", at most readableMax bytes) is for people browsing the
// bucket; it never contains "_", so the first "_" ends it. An encoded ID
// longer than segmentMax bytes is cut into folders of segmentMax bytes, each
// but the last followed by "-", which keeps every path segment under the
// 255-byte name limit of filesystems and keeps the prefixes of two sessions
// from nesting (the last folder never ends in "-"). Generations are zero
// padded to the width of the largest int64, so keys sort by generation.
const (
	snapshotsFolder = "snapshots/"
	snapshotExt     = ".tar.zst"
	generationWidth = 19
	readableMax     = 32
	segmentMax      = 200
)

var sessionEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// SnapshotPrefix returns the key prefix, ending in "/", under which every
// snapshot of sessionID is stored. sessionID may be any string. The prefix
// of one session is never a prefix of another's keys, so
// DeletePrefix(ctx, SnapshotPrefix(id)) removes that session's snapshots
// and nothing else, and List of it returns them oldest generation first.
func SnapshotPrefix(sessionID string) string {
	return snapshotsFolder + encodeSessionID(sessionID) + "/"
}

// SnapshotKey returns the key of generation generation of sessionID's
// workspace snapshot (a zstd-compressed tar). Distinct (sessionID,
// generation) pairs give distinct keys, even compared case-insensitively;
// keys of one session sort bytewise in generation order; ParseSnapshotKey
// reverses it. Keys stay within S3's and GCS's 1,024-byte limit for session
// IDs up to about 580 bytes. generation must not be negative: SnapshotKey
// panics if it is, as that is a bug in the caller.
func SnapshotKey(sessionID string, generation int64) string {
	if generation < 0 {
		panic(fmt.Sprintf("store: SnapshotKey: negative generation %d", generation))
	}
	return SnapshotPrefix(sessionID) + fmt.Sprintf("%0*d", generationWidth, generation) + snapshotExt
}

// ParseSnapshotKey returns the session ID and generation that SnapshotKey
// made key from. It fails for any key SnapshotKey does not return.
func ParseSnapshotKey(key string) (sessionID string, generation int64, err error) {
	bad := func(why string) (string, int64, error) {
		return "", 0, fmt.Errorf("store: %q is not a snapshot key: %s", key, why)
	}
	rest, ok := strings.CutPrefix(key, snapshotsFolder)
	if !ok {
		return bad("it does not start with " + snapshotsFolder)
	}
	i := strings.LastIndexByte(rest, '/')
	if i < 0 {
		return bad("no session folder")
	}
	enc, name := rest[:i], rest[i+1:]
	digits, ok := strings.CutSuffix(name, snapshotExt)
	if !ok || len(digits) != generationWidth || strings.Trim(digits, "0123456789") != "" {
		return bad("the name is not a " + strconv.Itoa(generationWidth) + "-digit generation plus " + snapshotExt)
	}
	generation, err = strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return bad("generation out of range")
	}
	sessionID, ok = decodeSessionID(enc)
	if !ok {
		return bad("malformed session folder")
	}
	return sessionID, generation, nil
}

// encodeSessionID returns the folder path (without slashes at either end)
// that stands for id; see the layout above.
func encodeSessionID(id string) string {
	s := readable(id) + "_" + sessionEncoding.EncodeToString([]byte(id))
	var b strings.Builder
	for len(s) > segmentMax {
		b.WriteString(s[:segmentMax])
		b.WriteString("-/")
		s = s[segmentMax:]
	}
	b.WriteString(s)
	return b.String()
}

// decodeSessionID reverses encodeSessionID. It accepts only the exact
// encoding of the ID it decodes to, so every key has one reading.
func decodeSessionID(enc string) (string, bool) {
	joined := strings.ReplaceAll(enc, "-/", "")
	_, b32, ok := strings.Cut(joined, "_")
	if !ok {
		return "", false
	}
	raw, err := sessionEncoding.DecodeString(b32)
	if err != nil {
		return "", false
	}
	id := string(raw)
	if encodeSessionID(id) != enc {
		return "", false
	}
	return id, true
}

// readable gives a lossy, human-readable form of id for the key: ASCII
// letters (lowercased) and digits, runs of anything else as one "-", no
// "-" at either end, at most readableMax bytes.
func readable(id string) string {
	b := make([]byte, 0, readableMax)
	gap := false
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		default:
			gap = true
			continue
		}
		need := 1
		if gap && len(b) > 0 {
			need = 2
		}
		if len(b)+need > readableMax {
			break
		}
		if need == 2 {
			b = append(b, '-')
		}
		b = append(b, c)
		gap = false
	}
	return string(b)
}
