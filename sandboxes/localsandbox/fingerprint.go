//go:build linux

package localsandbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentbot/agentbot/sandboxes"
)

var _ sandboxes.Fingerprinter = (*instance)(nil)

// maxFingerprintDepth is how many directories deep Fingerprint walks: it
// holds a descriptor per level. A deeper tree gives ErrUnsupported, and
// Sandbox.Fingerprint runs its shell pipeline instead.
const maxFingerprintDepth = 256

// maxFingerprintWalkers bounds how many goroutines walk one workspace at a
// time. The walk is made of short system calls on cached metadata: past a
// few goroutines, they only queue for processors and contend in the kernel.
const maxFingerprintWalkers = 8

// Fingerprint implements sandboxes.Fingerprinter with a walk of the
// workspace that reads directories and stats entries but opens no file.
// It covers what Archive writes: every entry but sandboxes.OutputsDir and
// Restore's staging directories, sockets included. For each it hashes
// its name, st_mode (type, permission and special bits), the size,
// st_mtim and st_ctim to the nanosecond, and a link's target; a
// directory's digest covers its entries, in name order, then the digests
// of its subdirectories in the same order, and the fingerprint is the
// workspace's. The digest depends on the tree only, not on how the walk
// was split between goroutines.
//
// The cost is system calls, so it makes few and spreads them over twice
// GOMAXPROCS goroutines (at most maxFingerprintWalkers; twice, so that
// the processors stay busy while a goroutine waits for those it started),
// one directory each: a goroutine that meets a subdirectory while another
// may start hands it over, and walks it itself otherwise. A directory is
// opened relative to its parent's descriptor (O_NOFOLLOW, so a link is
// never walked into) and described by a stat of the opened descriptor, so
// that what is hashed is what is walked; every other entry is stat'ed by
// its name relative to its directory's descriptor (statx), straight from
// the buffer getdents filled. So: five system calls per directory, one
// per entry (two per link), and no allocation per entry. An entry removed
// between the reading of its directory and its stat is left out (its
// directory's times have changed by then, so the next fingerprint
// differs). A directory that cannot be read, or that was replaced by
// something else while it was walked, fails the fingerprint; so does a
// kernel without statx (before Linux 4.11), with ErrUnsupported.
//
// It is built on Linux only, where it is tested; elsewhere
// Sandbox.Fingerprint falls back to its shell pipeline, which needs stat -c
// and so gives ErrUnsupported on macOS.
func (in *instance) Fingerprint(ctx context.Context) (string, error) {
	if err := in.usable(ctx); err != nil {
		return "", err
	}
	in.t.fsMu.RLock()
	defer in.t.fsMu.RUnlock()
	sum, err := fingerprintTree(ctx, in.st.Root, min(2*runtime.GOMAXPROCS(0), maxFingerprintWalkers))
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(sum[:16]), nil
}

// fingerprintTree returns the digest of the workspace root, walked by up
// to walkers goroutines.
func fingerprintTree(ctx context.Context, root string, walkers int) (sum [sha256.Size]byte, err error) {
	var fd int
	err = retryEINTR(func() (err error) {
		fd, err = unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return sum, fmt.Errorf("opening the workspace: %w", err)
	}
	defer unix.Close(fd)
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	t := &treeWalk{ctx: wctx, cancel: cancel, tokens: make(chan struct{}, max(walkers, 1))}
	t.tokens <- struct{}{} // this goroutine's
	w := t.walker(nil)
	sum, err = w.dir(fd, 0)
	if err != nil {
		if ctx.Err() != nil {
			return sum, ctx.Err()
		}
		// The first failure, which may be another goroutine's: this
		// one may only have seen the walk cancelled.
		if cause := context.Cause(wctx); cause != nil {
			return sum, cause
		}
	}
	return sum, err
}

// treeWalk is what the goroutines of one fingerprint share.
type treeWalk struct {
	// ctx is the caller's, cancelled too with the first failure, so that
	// every goroutine stops.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// tokens holds one element per goroutine walking: a goroutine starts
	// another only when it can add one without waiting, and leaves its
	// own while it waits for those it started.
	tokens chan struct{}
	mu     sync.Mutex
	free   []*walker // idle walkers, whose buffers the next one reuses
}

// walker walks directories on one goroutine, depth first. Its buffers
// are reused from entry to entry and directory to directory.
type walker struct {
	t      *treeWalk
	levels []*level     // one per directory being walked, outermost first
	path   []byte       // workspace-relative path of the entry at hand
	st     unix.Statx_t // the entry's metadata
	link   []byte       // a link's target
}

// level is the state of one directory being walked.
type level struct {
	ents []byte   // raw entries, as getdents returns them
	idx  []dirent // the entries of interest in ents
	recs []byte   // records of the entries
	sums []byte   // digests of the subdirectories, in name order
	kids []kid    // subdirectories walked by other goroutines
	wg   sync.WaitGroup
}

// dirent locates the NUL-terminated name of an entry in level.ents.
type dirent struct {
	off uint32
	n   uint16 // without the NUL
	typ uint8  // d_type: DT_DIR, DT_UNKNOWN...
}

// kid is a subdirectory another goroutine walks: at is where its digest
// goes in level.sums.
type kid struct {
	at  int
	res *kidResult
}

// kidResult is what the goroutine walking a kid found.
type kidResult struct {
	sum [sha256.Size]byte
	err error
}

// walker returns an idle walker whose path is path.
func (t *treeWalk) walker(path []byte) *walker {
	t.mu.Lock()
	var w *walker
	if n := len(t.free); n > 0 {
		w, t.free = t.free[n-1], t.free[:n-1]
	}
	t.mu.Unlock()
	if w == nil {
		w = &walker{t: t, link: make([]byte, 1024)}
	}
	w.path = append(w.path[:0], path...)
	return w
}

func (t *treeWalk) release(w *walker) {
	t.mu.Lock()
	t.free = append(t.free, w)
	t.mu.Unlock()
}

// dir returns the digest of the open directory fd and everything below
// it; w.path is its workspace-relative path ("" for the workspace) and
// depth how deep it is. The caller keeps fd.
func (w *walker) dir(fd, depth int) (sum [sha256.Size]byte, err error) {
	lv := w.push()
	defer w.pop()
	defer func() {
		if err != nil {
			w.t.cancel(err) // let the other goroutines stop
			w.wait(lv)      // none outlives the walk
		}
	}()
	if err := w.read(lv, fd); err != nil {
		return sum, fmt.Errorf("reading %q: %w", w.name(), err)
	}
	ents := lv.ents
	slices.SortFunc(lv.idx, func(a, b dirent) int {
		return bytes.Compare(ents[a.off:a.off+uint32(a.n)], ents[b.off:b.off+uint32(b.n)])
	})
	base := len(w.path)
	defer func() { w.path = w.path[:base] }()
	for _, e := range lv.idx {
		if err := w.t.ctx.Err(); err != nil {
			return sum, err
		}
		name := ents[e.off : e.off+uint32(e.n)]
		if depth == 0 && isStaging(string(name)) {
			continue
		}
		w.path = w.path[:base]
		if base > 0 {
			w.path = append(w.path, '/')
		}
		w.path = append(w.path, name...)
		if string(w.path) == sandboxes.OutputsDir {
			continue
		}
		if err := w.entry(lv, fd, &ents[e.off], e.typ, depth); err != nil {
			return sum, err
		}
	}
	w.wait(lv)
	for _, k := range lv.kids {
		if k.res.err != nil {
			return sum, k.res.err
		}
		copy(lv.sums[k.at:], k.res.sum[:])
	}
	lv.recs = append(lv.recs, lv.sums...)
	return sha256.Sum256(lv.recs), nil
}

// entry hashes the entry of the open directory fd whose NUL-terminated
// name starts at name and whose d_type is typ, and what is below it.
func (w *walker) entry(lv *level, fd int, name *byte, typ uint8, depth int) error {
	if typ == unix.DT_DIR {
		// Opening it first saves a stat: the fstat of what was opened
		// says what it is.
		sub, err := w.openDir(fd, name, depth+1)
		switch {
		case errors.Is(err, unix.ENOENT):
			return nil // removed since its directory was read
		case errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP):
			// Replaced by something else since: stat that.
		case err != nil:
			return err
		default:
			if err := statx(sub, &emptyPath[0], unix.AT_EMPTY_PATH, &w.st); err != nil {
				unix.Close(sub)
				return fmt.Errorf("reading %q: %w", w.path, err)
			}
			return w.subdir(lv, sub, depth+1)
		}
	}
	err := statx(fd, name, unix.AT_SYMLINK_NOFOLLOW, &w.st)
	if errors.Is(err, unix.ENOENT) {
		return nil // removed since its directory was read
	}
	if err != nil {
		return fmt.Errorf("reading %q: %w", w.path, err)
	}
	switch w.st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		target, err := w.readlink(fd, name)
		if err != nil {
			return fmt.Errorf("reading the link %q: %w", w.path, err)
		}
		w.record(lv, target)
	case unix.S_IFDIR:
		dev, ino := statxDev(&w.st), w.st.Ino
		sub, err := w.openDir(fd, name, depth+1)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			return fmt.Errorf("%q changed while the workspace was walked: %w", w.path, err)
		}
		if err != nil {
			return err
		}
		// The directory opened must be the one stat'ed, not another
		// renamed into its place since.
		if err := statx(sub, &emptyPath[0], unix.AT_EMPTY_PATH, &w.st); err != nil {
			unix.Close(sub)
			return fmt.Errorf("reading %q: %w", w.path, err)
		}
		if statxDev(&w.st) != dev || w.st.Ino != ino {
			unix.Close(sub)
			return fmt.Errorf("%q changed while the workspace was walked", w.path)
		}
		return w.subdir(lv, sub, depth+1)
	default:
		w.record(lv, nil)
	}
	return nil
}

// openDir opens the directory name of the open directory fd, which is
// depth directories deep.
func (w *walker) openDir(fd int, name *byte, depth int) (int, error) {
	if depth >= maxFingerprintDepth {
		return -1, fmt.Errorf("%q is %d directories deep: %w", w.path, depth, sandboxes.ErrUnsupported)
	}
	var sub int
	err := retryEINTR(func() error {
		r, _, errno := unix.Syscall6(unix.SYS_OPENAT, uintptr(fd), uintptr(unsafe.Pointer(name)),
			unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0, 0, 0)
		sub = int(r)
		return errnoErr(errno)
	})
	if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTDIR) && !errors.Is(err, unix.ELOOP) {
		err = fmt.Errorf("reading %q: %w", w.path, err)
	}
	return sub, err
}

// subdir records the directory at hand, which w.st describes and which is
// open as sub, and hashes what is in it, on another goroutine if one may
// start. It closes sub.
func (w *walker) subdir(lv *level, sub, depth int) error {
	w.record(lv, nil)
	at := len(lv.sums)
	lv.sums = append(lv.sums, make([]byte, sha256.Size)...)
	select {
	case w.t.tokens <- struct{}{}:
		res := &kidResult{}
		lv.kids = append(lv.kids, kid{at: at, res: res})
		lv.wg.Add(1)
		t, kw := w.t, w.t.walker(w.path)
		go func() {
			defer lv.wg.Done()
			defer func() { <-t.tokens }()
			res.sum, res.err = kw.dir(sub, depth)
			unix.Close(sub)
			t.release(kw)
		}()
		return nil
	default:
		sum, err := w.dir(sub, depth)
		unix.Close(sub)
		copy(lv.sums[at:], sum[:])
		return err
	}
}

// wait waits for the goroutines walking subdirectories of lv, leaving
// this goroutine's token meanwhile so that another may start.
func (w *walker) wait(lv *level) {
	if len(lv.kids) == 0 {
		return
	}
	<-w.t.tokens
	lv.wg.Wait()
	w.t.tokens <- struct{}{}
}

// push returns the state for one more directory, its buffers emptied.
func (w *walker) push() *level {
	n := len(w.levels)
	if n < cap(w.levels) {
		w.levels = w.levels[:n+1] // a level left from an earlier directory
	} else {
		w.levels = append(w.levels, nil)
	}
	lv := w.levels[n]
	if lv == nil {
		lv = &level{ents: make([]byte, 0, 16<<10)}
		w.levels[n] = lv
	}
	lv.ents, lv.idx, lv.recs, lv.sums, lv.kids = lv.ents[:0], lv.idx[:0], lv.recs[:0], lv.sums[:0], lv.kids[:0]
	return lv
}

func (w *walker) pop() {
	lv := w.levels[len(w.levels)-1]
	clear(lv.kids) // let their results go
	w.levels = w.levels[:len(w.levels)-1]
}

// read reads the entries of the open directory fd into lv, but "." and
// "..".
func (w *walker) read(lv *level, fd int) error {
	const minRead = 4 << 10 // room for several entries of the longest name
	for {
		if cap(lv.ents)-len(lv.ents) < minRead {
			lv.ents = slices.Grow(lv.ents, cap(lv.ents)+minRead)
		}
		var n int
		err := retryEINTR(func() (err error) {
			n, err = unix.Getdents(fd, lv.ents[len(lv.ents):cap(lv.ents)])
			return err
		})
		if err != nil {
			return err
		}
		if n <= 0 {
			return nil
		}
		start := len(lv.ents)
		lv.ents = lv.ents[:start+n]
		// struct linux_dirent64: d_ino, d_off, d_reclen, d_type, d_name.
		for off := start; off < len(lv.ents); {
			rec := lv.ents[off:]
			reclen := int(binary.NativeEndian.Uint16(rec[16:18]))
			if reclen < 20 || reclen > len(rec) {
				return fmt.Errorf("getdents returned a malformed entry")
			}
			name := rec[19:reclen]
			i := bytes.IndexByte(name, 0)
			if i < 0 {
				return fmt.Errorf("getdents returned a name with no NUL")
			}
			name = name[:i]
			ino := binary.NativeEndian.Uint64(rec[0:8])
			if ino != 0 && string(name) != "." && string(name) != ".." {
				lv.idx = append(lv.idx, dirent{off: uint32(off + 19), n: uint16(len(name)), typ: rec[18]})
			}
			off += reclen
		}
	}
}

// readlink returns the target of the link name in the open directory fd,
// in a buffer reused by the next call.
func (w *walker) readlink(fd int, name *byte) ([]byte, error) {
	for {
		var n int
		err := retryEINTR(func() error {
			r, _, errno := unix.Syscall6(unix.SYS_READLINKAT, uintptr(fd), uintptr(unsafe.Pointer(name)),
				uintptr(unsafe.Pointer(&w.link[0])), uintptr(len(w.link)), 0, 0)
			n = int(r)
			return errnoErr(errno)
		})
		if err != nil {
			return nil, err
		}
		if n < len(w.link) {
			return w.link[:n], nil
		}
		w.link = make([]byte, 2*len(w.link)) // may have been cut short
	}
}

// record adds the entry at hand to lv's records: its name (the last
// element of w.path), NUL, fixed-size fields of w.st, and for a link its
// target and NUL. Names hold no NUL, the mode says whether a target
// follows, and the modes say how many subdirectory digests follow the
// records, so distinct trees give distinct streams.
func (w *walker) record(lv *level, target []byte) {
	st := &w.st
	mode := uint32(st.Mode)
	r := lv.recs
	r = append(r, w.path[bytes.LastIndexByte(w.path, '/')+1:]...)
	r = append(r, 0)
	r = binary.LittleEndian.AppendUint32(r, mode)
	r = binary.LittleEndian.AppendUint64(r, st.Size)
	r = binary.LittleEndian.AppendUint64(r, uint64(st.Mtime.Sec))
	r = binary.LittleEndian.AppendUint64(r, uint64(st.Mtime.Nsec))
	r = binary.LittleEndian.AppendUint64(r, uint64(st.Ctime.Sec))
	r = binary.LittleEndian.AppendUint64(r, uint64(st.Ctime.Nsec))
	if mode&unix.S_IFMT == unix.S_IFLNK {
		r = append(r, target...)
		r = append(r, 0)
	}
	lv.recs = r
}

// name is the path of the directory at hand, for errors.
func (w *walker) name() string {
	if len(w.path) == 0 {
		return "."
	}
	return string(w.path)
}

// emptyPath is the NUL-terminated empty name statx takes with
// AT_EMPTY_PATH.
var emptyPath = [1]byte{0}

// statxMask is what a record needs of statx, and what subdir compares.
const statxMask = unix.STATX_TYPE | unix.STATX_MODE | unix.STATX_SIZE | unix.STATX_MTIME | unix.STATX_CTIME | unix.STATX_INO

// statx fills st with the metadata of the entry name (NUL-terminated) of
// the open directory dirfd. It calls the system call itself, where
// unix.Statx would copy the name; that would be the walk's only
// allocation per entry.
func statx(dirfd int, name *byte, flags int, st *unix.Statx_t) error {
	err := retryEINTR(func() error {
		_, _, errno := unix.Syscall6(unix.SYS_STATX, uintptr(dirfd), uintptr(unsafe.Pointer(name)),
			uintptr(flags), statxMask, uintptr(unsafe.Pointer(st)), 0)
		return errnoErr(errno)
	})
	if errors.Is(err, unix.ENOSYS) {
		return fmt.Errorf("the kernel has no statx: %w", sandboxes.ErrUnsupported)
	}
	return err
}

// statxDev returns the device st is on.
func statxDev(st *unix.Statx_t) uint64 {
	return uint64(st.Dev_major)<<32 | uint64(st.Dev_minor)
}

// errnoErr returns nil for 0 and errno otherwise.
func errnoErr(errno unix.Errno) error {
	if errno == 0 {
		return nil
	}
	return errno
}

// retryEINTR calls f until it does not fail with EINTR, which file
// systems such as FUSE and NFS may return when a signal arrives.
func retryEINTR(f func() error) error {
	for {
		if err := f(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
