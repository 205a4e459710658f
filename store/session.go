package store

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"gocloud.dev/blob"
)

// sessionsFolder is where SessionPrefix puts every session's data.
const sessionsFolder = "sessions/"

// SessionPrefix returns the key prefix, ending in "/", under which all the
// data of one session is kept: its transcript versions, large texts and
// tool arguments (agentflow chooses the names below it). Like
// SnapshotPrefix, it encodes sessionID injectively, and the prefix of one
// session is never a prefix of another's keys, so
// DeletePrefix(ctx, SessionPrefix(id)) removes that session's data and
// nothing else.
func SessionPrefix(sessionID string) string {
	return sessionsFolder + encodeSessionID(sessionID) + "/"
}

// Sessions returns the IDs of the sessions that have blobs under their
// SessionPrefix or SnapshotPrefix, sorted and without repeats. It lists
// folders, not blobs, so its cost grows with the number of sessions, not
// with their data. Folders whose names are not an encoding of a session ID
// (nothing agentbot wrote) are left out.
func (b *Blobs) Sessions(ctx context.Context) ([]string, error) {
	seen := map[string]bool{}
	for _, folder := range []string{sessionsFolder, snapshotsFolder} {
		if err := b.sessionFolders(ctx, folder, folder, seen); err != nil {
			return nil, fmt.Errorf("store: listing sessions: %w", err)
		}
	}
	ids := make([]string, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

// sessionFolders adds to seen the sessions whose encoded folder lies below
// prefix, inside folder. A long encoding is cut into folders of segmentMax
// bytes plus "-" (see encodeSessionID): those are walked into.
func (b *Blobs) sessionFolders(ctx context.Context, folder, prefix string, seen map[string]bool) error {
	it := b.bucket.List(&blob.ListOptions{Prefix: prefix, Delimiter: "/"})
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return translate(err)
		}
		if !obj.IsDir {
			continue
		}
		name := strings.TrimSuffix(strings.TrimPrefix(obj.Key, prefix), "/")
		if len(name) == segmentMax+1 && strings.HasSuffix(name, "-") {
			if err := b.sessionFolders(ctx, folder, obj.Key, seen); err != nil {
				return err
			}
			continue
		}
		if id, ok := decodeSessionID(strings.TrimSuffix(strings.TrimPrefix(obj.Key, folder), "/")); ok {
			seen[id] = true
		}
	}
}

// Newest returns the modification time of the newest blob whose key starts
// with prefix, and false when there is none. Writes not yet committed are
// not counted.
func (b *Blobs) Newest(ctx context.Context, prefix string) (time.Time, bool, error) {
	it := b.bucket.List(&blob.ListOptions{Prefix: prefix})
	var newest time.Time
	found := false
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			return newest, found, nil
		}
		if err != nil {
			return time.Time{}, false, fmt.Errorf("store: newest under %q: %w", prefix, translate(err))
		}
		if obj.IsDir || isTempName(obj.Key) {
			continue
		}
		if !found || obj.ModTime.After(newest) {
			newest, found = obj.ModTime, true
		}
	}
}
