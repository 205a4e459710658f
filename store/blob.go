package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // registers file://
	_ "gocloud.dev/blob/memblob"  // registers mem://
	"gocloud.dev/gcerrors"
)

// ErrNotFound means the blob does not exist: it was never written, its write
// was aborted, or it was deleted. Errors of Blobs that match it (errors.Is)
// name the key.
var ErrNotFound = errors.New("blob not found")

// defaultContentType is what NewWriter stores when given no content type; it
// also spares gocloud from buffering the first 512 bytes to sniff one.
const defaultContentType = "application/octet-stream"

// Blobs is a blob store: keys naming byte streams in one bucket. Open it with
// OpenBlobs and Close it when done. Its methods are safe for concurrent use.
//
// Keys are non-empty UTF-8 strings using "/" as the folder separator. Keys
// ending in ".attrs" or in "." plus lowercase hex plus ".tmp" are reserved on
// every store (a file:// store keeps attribute files and writes in progress
// under such names) and are refused.
type Blobs struct {
	bucket *blob.Bucket
	// dir is the bucket's root directory for a file:// store, "" otherwise.
	dir string
}

// OpenBlobs opens the blob store at rawURL: file:///abs/dir (or a plain
// absolute path), mem://, or a scheme the program registered such as s3://
// and gs:// (see the package doc). A file:// directory is created if
// missing. ctx bounds the opening only; the store lives until Close.
func OpenBlobs(ctx context.Context, rawURL string) (*Blobs, error) {
	u, dir, err := parseBlobURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("store: open blobs: %w", err)
	}
	mux := blob.DefaultURLMux()
	if !mux.ValidBucketScheme(u.Scheme) {
		return nil, fmt.Errorf("store: open blobs: unsupported URL scheme %q (%s)", u.Scheme, schemesHint(mux.BucketSchemes()))
	}
	bucket, err := mux.OpenBucketURL(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("store: open blobs %s: %w", u.Redacted(), err)
	}
	return &Blobs{bucket: bucket, dir: dir}, nil
}

// parseBlobURL turns rawURL into the URL to open and, for file:// stores,
// the absolute root directory.
func parseBlobURL(rawURL string) (*url.URL, string, error) {
	const want = "want file:///abs/dir, mem://, s3://bucket or gs://bucket"
	if rawURL == "" {
		return nil, "", fmt.Errorf("empty URL (%s)", want)
	}
	var u *url.URL
	if !strings.Contains(rawURL, "://") && filepath.IsAbs(rawURL) {
		p := filepath.ToSlash(rawURL)
		if !strings.HasPrefix(p, "/") { // a Windows drive path: file:///C:/x
			p = "/" + p
		}
		u = &url.URL{Scheme: "file", Path: p}
	} else {
		var err error
		if u, err = url.Parse(rawURL); err != nil {
			return nil, "", err
		}
		if u.Scheme == "" {
			return nil, "", fmt.Errorf("%q has no URL scheme and is not an absolute path (%s)", rawURL, want)
		}
	}
	if u.Scheme != "file" {
		return u, "", nil
	}
	// fileblob ignores any host but ".", so file://blobs/x would quietly
	// open /x: refuse it.
	if u.Opaque != "" || (u.Host != "" && u.Host != "localhost") {
		return nil, "", fmt.Errorf("file URL %q names a host or a relative path; write file:///abs/dir (three slashes)", rawURL)
	}
	p := u.Path
	if os.PathSeparator != '/' {
		p = strings.TrimPrefix(p, "/")
	}
	p = filepath.FromSlash(p)
	if !filepath.IsAbs(p) {
		return nil, "", fmt.Errorf("file URL %q needs an absolute path; write file:///abs/dir", rawURL)
	}
	q := u.Query()
	for k, v := range map[string]string{"create_dir": "true", "no_tmp_dir": "true", "metadata": "skip"} {
		if !q.Has(k) {
			q.Set(k, v)
		}
	}
	u.RawQuery = q.Encode()
	return u, filepath.Clean(p), nil
}

// schemesHint says which schemes are registered, and how to get the cloud
// ones when they are not.
func schemesHint(registered []string) string {
	hint := "supported: " + strings.Join(registered, ", ")
	for _, s := range []struct{ scheme, pkg string }{{"s3", "s3blob"}, {"gs", "gcsblob"}} {
		if !slices.Contains(registered, s.scheme) {
			hint += fmt.Sprintf("; %s needs the program to import gocloud.dev/blob/%s", s.scheme, s.pkg)
		}
	}
	return hint
}

// Close releases the store. Writers and readers still open may fail.
func (b *Blobs) Close() error {
	if err := b.bucket.Close(); err != nil {
		return fmt.Errorf("store: close blobs: %w", err)
	}
	return nil
}

// NewWriter starts writing the blob key, replacing any blob already there.
// Nothing is visible under key until Close returns nil; until then readers
// see the previous version, if any. Canceling ctx, or calling Abort, before
// Close abandons the write and keeps the previous version. contentType is
// stored with the blob where the store keeps one ("" means
// application/octet-stream). The caller must Close or Abort the writer.
func (b *Blobs) NewWriter(ctx context.Context, key, contentType string) (*BlobWriter, error) {
	if err := checkKey(key); err != nil {
		return nil, fmt.Errorf("store: write %q: %w", key, err)
	}
	if contentType == "" {
		contentType = defaultContentType
	}
	// gocloud aborts a write whose context is canceled before Close; this
	// context is how Abort reaches the driver.
	wctx, cancel := context.WithCancelCause(ctx)
	w, err := b.bucket.NewWriter(wctx, key, &blob.WriterOptions{ContentType: contentType})
	if err != nil {
		cancel(nil)
		return nil, wrapErr("write", key, err)
	}
	return &BlobWriter{key: key, w: w, cancel: cancel}, nil
}

// BlobWriter streams one blob into the store (see Blobs.NewWriter). Write
// and Close are for one goroutine; Abort may be called from any goroutine at
// any time, also after Close.
type BlobWriter struct {
	key    string
	cancel context.CancelCauseFunc

	mu     sync.Mutex
	w      *blob.Writer
	done   bool  // Close or Abort has settled the write
	result error // what Close returns once done
}

var errWriterDone = errors.New("writer already closed")

// Write appends p to the blob. It fails once the writer is closed or
// aborted.
func (w *BlobWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		if w.result != nil {
			return 0, w.result
		}
		return 0, fmt.Errorf("store: write %q: %w", w.key, errWriterDone)
	}
	n, err := w.w.Write(p)
	return n, wrapErr("write", w.key, err)
}

// Close commits the blob: it is stored under the key, in full, only if Close
// returns nil. After Abort, or if the writer's context was canceled, Close
// commits nothing and returns an error. Calling Close again returns the
// same result.
func (w *BlobWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return w.result
	}
	w.done = true
	err := w.w.Close()
	w.cancel(nil) // the write is settled; release the context
	w.result = wrapErr("write", w.key, err)
	return w.result
}

// Abort abandons the write: nothing is stored under the key and the previous
// version, if any, stays. cause (nil means context.Canceled) is what Write
// and Close report afterwards. Abort after a successful Close does nothing,
// so `defer w.Abort(nil)` before `return w.Close()` is a safe pattern.
func (w *BlobWriter) Abort(cause error) {
	if cause == nil {
		cause = context.Canceled
	}
	// Cancel before taking the lock: it unblocks a Write in flight on a
	// network store, and makes the driver discard the data on Close.
	w.cancel(cause)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return
	}
	w.done = true
	_ = w.w.Close() // fails with the canceled context; that is the abort
	w.result = fmt.Errorf("store: write %q aborted: %w", w.key, cause)
}

// NewReader opens the blob key for reading from its start. The reader sees
// the version current when it was opened, in full, even if a new version is
// committed meanwhile. ctx governs the whole read, not only the opening. A
// missing key gives an error matching ErrNotFound. The caller must Close the
// reader.
func (b *Blobs) NewReader(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := checkKey(key); err != nil {
		return nil, fmt.Errorf("store: read %q: %w", key, err)
	}
	r, err := b.bucket.NewReader(ctx, key, nil)
	if err != nil {
		return nil, wrapErr("read", key, err)
	}
	return &blobReader{r: r, key: key}, nil
}

// blobReader names the key in read errors.
type blobReader struct {
	r   *blob.Reader
	key string
}

func (r *blobReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		err = wrapErr("read", r.key, err)
	}
	return n, err
}

func (r *blobReader) Close() error { return wrapErr("close", r.key, r.r.Close()) }

// Copy makes dstKey a copy of srcKey, replacing any blob at dstKey. The copy
// is independent: later writes to either key do not change the other. It is
// done inside the store where the driver can (S3, GCS copy server-side; a
// file:// store copies through a temporary file and renames, so a reader of
// dstKey never sees half a copy). A missing srcKey gives an error matching
// ErrNotFound.
func (b *Blobs) Copy(ctx context.Context, dstKey, srcKey string) error {
	for _, k := range []string{srcKey, dstKey} {
		if err := checkKey(k); err != nil {
			return fmt.Errorf("store: copy %q to %q: key %q: %w", srcKey, dstKey, k, err)
		}
	}
	if err := b.bucket.Copy(ctx, dstKey, srcKey, nil); err != nil {
		return fmt.Errorf("store: copy %q to %q: %w", srcKey, dstKey, translate(err))
	}
	return nil
}

// Delete removes the blob key. A missing key gives an error matching
// ErrNotFound.
func (b *Blobs) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return fmt.Errorf("store: delete %q: %w", key, err)
	}
	return wrapErr("delete", key, b.bucket.Delete(ctx, key))
}

// DeletePrefix removes every blob whose key starts with prefix, and on a
// file:// store the leftovers of interrupted writes under it. Blobs that
// vanish meanwhile are not an error, so it can be retried. An empty prefix is
// refused: it would empty the store. Pass a prefix that ends in "/" (such as
// SnapshotPrefix) so that "a/b" does not also take "a/bc/...". Blobs written
// under prefix while it runs may survive.
func (b *Blobs) DeletePrefix(ctx context.Context, prefix string) error {
	if prefix == "" {
		return errors.New("store: delete prefix: empty prefix refused (it would delete every blob)")
	}
	keys, err := b.list(ctx, prefix, true)
	if err != nil {
		return fmt.Errorf("store: delete prefix %q: %w", prefix, err)
	}
	for _, k := range keys {
		if err := b.bucket.Delete(ctx, k); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			return fmt.Errorf("store: delete prefix %q: key %q: %w", prefix, k, err)
		}
	}
	b.pruneDirs(prefix)
	return nil
}

// pruneDirs removes the directories a file:// store leaves behind under
// prefix once their blobs are gone (fileblob deletes files, never
// directories), so destroyed sessions do not leave one directory each.
// It is best effort: os.Remove refuses a directory that is not empty, which
// also spares one that a concurrent write has just created.
func (b *Blobs) pruneDirs(prefix string) {
	folder, ok := strings.CutSuffix(prefix, "/")
	if b.dir == "" || !ok || !plainPath(folder) {
		return
	}
	root := filepath.Join(b.dir, filepath.FromSlash(folder))
	var dirs []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	// WalkDir visits a directory before its contents: remove in reverse.
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = os.Remove(dirs[i])
	}
}

// plainPath reports whether key maps to the same relative path on disk in
// a file:// store: only characters fileblob never escapes, and no empty,
// "." or ".." segment.
func plainPath(key string) bool {
	for _, c := range key {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.ContainsRune("._-/", c)) {
			return false
		}
	}
	for seg := range strings.SplitSeq(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// Exists reports whether the blob key exists. A missing key is (false, nil).
func (b *Blobs) Exists(ctx context.Context, key string) (bool, error) {
	if err := checkKey(key); err != nil {
		return false, fmt.Errorf("store: exists %q: %w", key, err)
	}
	ok, err := b.bucket.Exists(ctx, key)
	return ok, wrapErr("exists", key, err)
}

// Size returns the size in bytes of the blob key. A missing key gives an
// error matching ErrNotFound.
func (b *Blobs) Size(ctx context.Context, key string) (int64, error) {
	if err := checkKey(key); err != nil {
		return 0, fmt.Errorf("store: size %q: %w", key, err)
	}
	attrs, err := b.bucket.Attributes(ctx, key)
	if err != nil {
		return 0, wrapErr("size", key, err)
	}
	return attrs.Size, nil
}

// List returns the keys that start with prefix ("" lists every key), sorted
// bytewise. Writes not yet committed are not listed.
func (b *Blobs) List(ctx context.Context, prefix string) ([]string, error) {
	keys, err := b.list(ctx, prefix, false)
	if err != nil {
		return nil, fmt.Errorf("store: list %q: %w", prefix, err)
	}
	return keys, nil
}

// list lists keys under prefix, sorted; withTemp includes the temporary
// files of writes in progress (or interrupted) on a file:// store.
func (b *Blobs) list(ctx context.Context, prefix string, withTemp bool) ([]string, error) {
	it := b.bucket.List(&blob.ListOptions{Prefix: prefix})
	var keys []string
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, translate(err)
		}
		if obj.IsDir || (!withTemp && isTempName(obj.Key)) {
			continue
		}
		keys = append(keys, obj.Key)
	}
	slices.Sort(keys)
	return keys, nil
}

// checkKey refuses keys no store can hold, and the names reserved by
// file:// stores, on every store, so code tested on mem:// works on file://.
func checkKey(key string) error {
	switch {
	case key == "":
		return errors.New("empty key")
	case !utf8.ValidString(key):
		return errors.New("key is not valid UTF-8")
	case strings.HasSuffix(key, ".attrs"), isTempName(key):
		return errors.New("key name is reserved (it ends like a file store's attribute or temporary file)")
	}
	return nil
}

// isTempName reports whether key has the shape of fileblob's temporary
// files: the final key plus "." plus hex digits plus ".tmp".
func isTempName(key string) bool {
	rest, ok := strings.CutSuffix(key, ".tmp")
	if !ok {
		return false
	}
	i := strings.LastIndexByte(rest, '.')
	if i < 0 || i == len(rest)-1 {
		return false
	}
	for _, c := range rest[i+1:] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// translate maps gocloud's not-found code to ErrNotFound; the driver's
// message adds nothing to it but a path.
func translate(err error) error {
	if gcerrors.Code(err) == gcerrors.NotFound {
		return ErrNotFound
	}
	return err
}

// wrapErr names the operation and key in err, with not-found translated.
func wrapErr(op, key string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("store: %s %q: %w", op, key, translate(err))
}
