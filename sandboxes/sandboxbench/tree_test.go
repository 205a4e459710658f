package sandboxbench

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// treeVersion names the generator's output in the cache: bump it whenever
// a change to the generator changes the tree it makes for a seed.
const treeVersion = 1

// treeSpec says what tree to generate. The same spec always gives the same
// tree: names, contents, permission bits and modification times.
type treeSpec struct {
	Seed uint64
	// Bytes is the total size of the files' contents, exactly. Half goes
	// to many small files (1–8 KiB) in nested directories, half to three
	// large ones.
	Bytes int64
}

func (s treeSpec) key() string {
	return fmt.Sprintf("tree-v%d-seed%d-%dB", treeVersion, s.Seed, s.Bytes)
}

// treeStats is what a tree holds; it is also the cache's manifest.
type treeStats struct {
	Files int   `json:"files"`
	Dirs  int   `json:"dirs"` // not counting the root
	Bytes int64 `json:"bytes"`
}

// benchTree is a generated tree on disk.
type benchTree struct {
	Dir string
	treeStats
}

// cachedTree returns the tree of spec under cacheRoot, generating it when
// it is missing or does not match its manifest (a run killed midway, files
// removed by a temp cleaner). The tree is generated in a temporary directory
// and renamed into place, so a half-written tree is never used; it is not
// safe against another process regenerating the same tree at the same
// time, which only wastes a run.
func cachedTree(cacheRoot string, spec treeSpec) (benchTree, error) {
	if err := os.MkdirAll(cacheRoot, 0o755); err != nil {
		return benchTree{}, err
	}
	dir := filepath.Join(cacheRoot, spec.key())
	manifest := dir + ".json"
	if st, ok := validCache(dir, manifest); ok {
		return benchTree{Dir: dir, treeStats: st}, nil
	}
	os.Remove(manifest)
	if err := os.RemoveAll(dir); err != nil {
		return benchTree{}, fmt.Errorf("removing the stale tree %s: %w", dir, err)
	}
	tmp, err := os.MkdirTemp(cacheRoot, spec.key()+".tmp-")
	if err != nil {
		return benchTree{}, err
	}
	defer os.RemoveAll(tmp) // gone already once renamed
	if err := generateTree(tmp, spec); err != nil {
		return benchTree{}, fmt.Errorf("generating %s: %w", spec.key(), err)
	}
	st, err := statTree(tmp)
	if err != nil {
		return benchTree{}, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return benchTree{}, fmt.Errorf("moving the generated tree into place: %w", err)
	}
	data, err := json.Marshal(st)
	if err != nil {
		return benchTree{}, err
	}
	if err := os.WriteFile(manifest+".tmp", data, 0o644); err != nil {
		return benchTree{}, err
	}
	if err := os.Rename(manifest+".tmp", manifest); err != nil {
		return benchTree{}, err
	}
	return benchTree{Dir: dir, treeStats: st}, nil
}

// validCache reports whether dir holds what its manifest says. Counting
// entries and sizes (stat calls only) catches an incomplete tree without
// reading 200 MB.
func validCache(dir, manifest string) (treeStats, bool) {
	data, err := os.ReadFile(manifest)
	if err != nil {
		return treeStats{}, false
	}
	var want treeStats
	if json.Unmarshal(data, &want) != nil {
		return treeStats{}, false
	}
	got, err := statTree(dir)
	if err != nil || got != want {
		return treeStats{}, false
	}
	return got, true
}

// statTree counts the files, directories and content bytes of the tree at
// dir.
func statTree(dir string) (treeStats, error) {
	var st treeStats
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case p == dir:
		case d.IsDir():
			st.Dirs++
		case d.Type().IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			st.Files++
			st.Bytes += fi.Size()
		default:
			return fmt.Errorf("unexpected entry %s (%s)", p, d.Type())
		}
		return nil
	})
	return st, err
}

// hashTree hashes what a snapshot carries of the tree at dir: names, types,
// permission bits, modification times and contents, in lexical order. The
// root itself is left out.
func hashTree(dir string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %q %o %d %d\n", fi.Mode().Type(), filepath.ToSlash(rel), fi.Mode().Perm(),
			fi.ModTime().Unix(), fi.Size())
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(h, f)
		return err
	})
	return hex.EncodeToString(h.Sum(nil)), err
}

// mtimeBase is the modification time of the generated tree's first file;
// the others follow a second apart, so snapshots of two generations of a
// tree are the same bytes.
var mtimeBase = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// generateTree writes the tree of spec into dir, which exists and is empty.
//
// Small files (half of spec.Bytes), 1–8 KiB each, in directories one to
// three levels below four top-level ones, are of five kinds: source-like
// text from a Zipf-distributed vocabulary (compresses about 3x), shell
// scripts of the same text (mode 0755), JSON records (about 4x), random
// bytes (incompressible) and half-random, half-repetitive data. The large
// files (the other half) are a random blob (40%), a log with repetitive
// lines (35%) and a file alternating random and repeated chunks (25%).
func generateTree(dir string, spec treeSpec) error {
	if spec.Bytes < 0 {
		return fmt.Errorf("negative size %d", spec.Bytes)
	}
	g := newGenerator(spec.Seed)
	w := &treeWriter{root: dir, dirs: map[string]bool{}}
	small := spec.Bytes / 2
	for i := 0; small > 0; i++ {
		size := min(int64(1024+g.rng.IntN(7*1024+1)), small)
		kind := g.kind()
		name := g.dirName() + "/f" + strconv.Itoa(i) + kind.ext
		data := g.smallContent(kind, int(size))
		if err := w.file(name, kind.mode, func(bw *bufio.Writer) error {
			_, err := bw.Write(data)
			return err
		}); err != nil {
			return err
		}
		small -= size
	}
	large := spec.Bytes - spec.Bytes/2
	blob, logs := large*40/100, large*35/100
	mixed := large - blob - logs
	if err := w.file("assets/blob.bin", 0o644, func(bw *bufio.Writer) error {
		return g.randomBytes(bw, blob)
	}); err != nil {
		return err
	}
	if err := w.file("logs/service.log", 0o644, func(bw *bufio.Writer) error {
		return g.lines(bw, logs, g.logLine)
	}); err != nil {
		return err
	}
	if err := w.file("assets/mixed.dat", 0o644, func(bw *bufio.Writer) error {
		return g.mixed(bw, mixed)
	}); err != nil {
		return err
	}
	return w.finishDirs()
}

// treeWriter creates the files and directories of a generated tree with
// fixed permission bits (whatever the umask) and modification times.
type treeWriter struct {
	root  string
	dirs  map[string]bool // slash-separated, relative to root
	order []string        // dirs in creation order
	files int
	bw    *bufio.Writer // reused: a 1 MiB buffer per small file costs more than the file
}

func (w *treeWriter) mkdirs(rel string) error {
	if rel == "." || w.dirs[rel] {
		return nil
	}
	if err := w.mkdirs(filepath.Dir(rel)); err != nil {
		return err
	}
	p := filepath.Join(w.root, rel)
	if err := os.Mkdir(p, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(p, 0o755); err != nil {
		return err
	}
	w.dirs[rel] = true
	w.order = append(w.order, rel)
	return nil
}

func (w *treeWriter) file(name string, mode fs.FileMode, fill func(*bufio.Writer) error) error {
	if err := w.mkdirs(filepath.Dir(name)); err != nil {
		return err
	}
	p := filepath.Join(w.root, name)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if w.bw == nil {
		w.bw = bufio.NewWriterSize(f, 1<<20)
	}
	bw := w.bw
	bw.Reset(f)
	err = fill(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Chmod(mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	t := mtimeBase.Add(time.Duration(w.files) * time.Second)
	w.files++
	return os.Chtimes(p, t, t)
}

// finishDirs gives every directory the same modification time, once
// nothing is added to it any more.
func (w *treeWriter) finishDirs() error {
	for _, d := range w.order {
		if err := os.Chtimes(filepath.Join(w.root, d), mtimeBase, mtimeBase); err != nil {
			return err
		}
	}
	return nil
}

// generator makes the tree's names and contents. Decisions come from one
// PCG stream and random contents from a separate ChaCha8 stream, so the
// output depends on the seed and the order of calls only.
type generator struct {
	rng   *rand.Rand
	noise *rand.ChaCha8
	words []string
	zipf  *rand.Zipf
	buf   []byte
}

func newGenerator(seed uint64) *generator {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:8], seed)
	copy(key[8:], "agentbot sandboxbench tree")
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	g := &generator{rng: rng, noise: rand.NewChaCha8(key)}
	// A vocabulary of made-up identifiers, used with Zipf frequencies,
	// compresses like source code and prose do, unlike random bytes
	// or one repeated word.
	g.words = append(g.words, "func", "return", "if", "err", "nil", "ctx", "for", "range", "var",
		"type", "struct", "string", "int", "the", "a", "of", "to", "in", "is", "and")
	for len(g.words) < 4000 {
		n := 2 + rng.IntN(10)
		w := make([]byte, n)
		for i := range w {
			w[i] = byte('a' + rng.IntN(26))
		}
		g.words = append(g.words, string(w))
	}
	g.zipf = rand.NewZipf(rng, 1.1, 2, uint64(len(g.words)-1))
	return g
}

type fileKind struct {
	ext    string
	mode   fs.FileMode
	weight int
}

var (
	kindText   = fileKind{".go", 0o644, 45}
	kindScript = fileKind{".sh", 0o755, 5}
	kindJSON   = fileKind{".json", 0o644, 20}
	kindRandom = fileKind{".bin", 0o644, 20}
	kindMixed  = fileKind{".dat", 0o644, 10}
	kinds      = []fileKind{kindText, kindScript, kindJSON, kindRandom, kindMixed}
)

func (g *generator) kind() fileKind {
	n := g.rng.IntN(100)
	for _, k := range kinds {
		if n < k.weight {
			return k
		}
		n -= k.weight
	}
	return kindText
}

var topDirs = []string{"src", "docs", "vendor", "testdata"}

// dirName picks a directory one to three levels below a top-level one,
// eight choices per level: up to 2,336 directories.
func (g *generator) dirName() string {
	d := topDirs[g.rng.IntN(len(topDirs))]
	for i := range 1 + g.rng.IntN(3) {
		d += "/" + string(rune('m'+i)) + strconv.Itoa(g.rng.IntN(8))
	}
	return d
}

// smallContent returns size bytes of kind; the slice is reused by the next
// call.
func (g *generator) smallContent(k fileKind, size int) []byte {
	b := g.buf[:0]
	switch k {
	case kindText, kindScript:
		for len(b) < size {
			b = g.textLine(b)
		}
	case kindJSON:
		for len(b) < size {
			b = g.jsonLine(b)
		}
	case kindRandom:
		b = g.random(b, size)
	case kindMixed:
		b = g.random(b, size/2)
		pat := g.random(nil, 16+g.rng.IntN(48))
		for len(b) < size {
			b = append(b, pat...)
		}
	}
	g.buf = b
	return b[:size]
}

func (g *generator) random(b []byte, n int) []byte {
	b = append(b, make([]byte, n)...)
	g.noise.Read(b[len(b)-n:])
	return b
}

func (g *generator) word() string { return g.words[g.zipf.Uint64()] }

func (g *generator) textLine(b []byte) []byte {
	for range g.rng.IntN(4) {
		b = append(b, '\t')
	}
	for i := range 2 + g.rng.IntN(10) {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, g.word()...)
	}
	return append(b, ".;{}(),"[g.rng.IntN(7)], '\n')
}

func (g *generator) jsonLine(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, int64(g.rng.IntN(1_000_000)), 10)
	b = append(b, `,"name":"`...)
	b = append(b, g.word()...)
	b = append(b, `","kind":"`...)
	b = append(b, g.words[g.rng.IntN(20)]...)
	b = append(b, `","value":`...)
	b = strconv.AppendFloat(b, g.rng.Float64()*1000, 'f', 2, 64)
	b = append(b, `,"ok":`...)
	b = strconv.AppendBool(b, g.rng.IntN(4) != 0)
	return append(b, "}\n"...)
}

var levels = []string{"INFO", "INFO", "INFO", "INFO", "DEBUG", "DEBUG", "WARN", "ERROR"}

func (g *generator) logLine(b []byte) []byte {
	b = append(b, "2025-01-01T"...)
	ms := g.rng.IntN(86_400_000)
	b = fmt.Appendf(b, "%02d:%02d:%02d.%03dZ ", ms/3_600_000, ms/60_000%60, ms/1000%60, ms%1000)
	b = append(b, levels[g.rng.IntN(len(levels))]...)
	b = append(b, " sandbox=sb-"...)
	b = strconv.AppendUint(b, uint64(g.rng.IntN(64)), 16)
	b = append(b, " op="...)
	b = append(b, g.words[g.rng.IntN(20)]...)
	b = append(b, " dur="...)
	b = strconv.AppendInt(b, int64(g.rng.IntN(5000)), 10)
	b = append(b, `ms msg="`...)
	for i := range 3 + g.rng.IntN(6) {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, g.word()...)
	}
	return append(b, "\"\n"...)
}

// lines writes exactly n bytes of lines made by line, in 1 MiB chunks.
func (g *generator) lines(w io.Writer, n int64, line func([]byte) []byte) error {
	for n > 0 {
		b := g.buf[:0]
		for len(b) < 1<<20 {
			b = line(b)
		}
		g.buf = b
		k := min(int64(len(b)), n)
		if _, err := w.Write(b[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

func (g *generator) randomBytes(w io.Writer, n int64) error {
	for n > 0 {
		k := min(n, 1<<20)
		g.buf = g.random(g.buf[:0], int(k))
		if _, err := w.Write(g.buf); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// mixed writes n bytes alternating chunks of random bytes and of a random
// 4 KiB block repeated, the chunks 1 MiB (less for small trees, so both
// kinds are there).
func (g *generator) mixed(w io.Writer, n int64) error {
	chunk := max(min(n/8, 1<<20), 4096)
	block := g.random(nil, 4096)
	for i := 0; n > 0; i++ {
		k := min(n, chunk)
		b := g.buf[:0]
		if i%2 == 0 {
			b = g.random(b, int(k))
		} else {
			for int64(len(b)) < k {
				b = append(b, block...)
			}
			b = b[:k]
		}
		g.buf = b
		if _, err := w.Write(b); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// TestBenchTreeDeterministic checks that the benchmarks' tree is a pure
// function of its spec, that its cache returns that same tree and replaces
// a damaged one, and that the tree has the promised size and shape.
func TestBenchTreeDeterministic(t *testing.T) {
	spec := treeSpec{Seed: 1, Bytes: 3_000_000}
	gen := func(t *testing.T, spec treeSpec) (string, treeStats) {
		t.Helper()
		dir := t.TempDir()
		if err := generateTree(dir, spec); err != nil {
			t.Fatalf("generateTree(%+v): %v", spec, err)
		}
		h, err := hashTree(dir)
		if err != nil {
			t.Fatalf("hashTree: %v", err)
		}
		st, err := statTree(dir)
		if err != nil {
			t.Fatalf("statTree: %v", err)
		}
		return h, st
	}
	want, st := gen(t, spec)

	t.Run("same-seed-same-tree", func(t *testing.T) {
		if got, _ := gen(t, spec); got != want {
			t.Errorf("two generations of %+v differ: hash %s, then %s", spec, want, got)
		}
	})
	t.Run("other-seed-other-tree", func(t *testing.T) {
		other := treeSpec{Seed: 2, Bytes: spec.Bytes}
		if got, _ := gen(t, other); got == want {
			t.Errorf("seeds 1 and 2 give the same tree (hash %s)", got)
		}
	})
	t.Run("shape", func(t *testing.T) {
		if st.Bytes != spec.Bytes {
			t.Errorf("tree holds %d bytes of files, want exactly %d", st.Bytes, spec.Bytes)
		}
		// Half the bytes in files of 4.5 KiB on average, plus the
		// three large ones.
		if lo, hi := int(spec.Bytes/2/8192), int(spec.Bytes/2/1024)+3; st.Files < lo || st.Files > hi {
			t.Errorf("tree has %d files, want between %d and %d", st.Files, lo, hi)
		}
		if st.Dirs < 20 {
			t.Errorf("tree has %d directories, want nested ones (at least 20)", st.Dirs)
		}
	})
	t.Run("cache", func(t *testing.T) {
		root := t.TempDir()
		first, err := cachedTree(root, spec)
		if err != nil {
			t.Fatalf("cachedTree: %v", err)
		}
		if first.treeStats != st {
			t.Errorf("cached tree stats %+v, want %+v", first.treeStats, st)
		}
		if h, err := hashTree(first.Dir); err != nil || h != want {
			t.Fatalf("cached tree hash %s (err %v), want %s", h, err, want)
		}
		// A file lost from the cache (a temp cleaner, a killed run)
		// must make the next run regenerate the tree.
		victim := filepath.Join(first.Dir, "logs", "service.log")
		if err := os.Remove(victim); err != nil {
			t.Fatal(err)
		}
		again, err := cachedTree(root, spec)
		if err != nil {
			t.Fatalf("cachedTree after damage: %v", err)
		}
		if again.Dir != first.Dir {
			t.Errorf("cache moved from %s to %s", first.Dir, again.Dir)
		}
		if h, err := hashTree(again.Dir); err != nil || h != want {
			t.Errorf("regenerated tree hash %s (err %v), want %s", h, err, want)
		}
		if _, err := os.Stat(victim); errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s was not regenerated", victim)
		}
		left, err := filepath.Glob(filepath.Join(root, "*.tmp*"))
		if err != nil || len(left) > 0 {
			t.Errorf("temporary files left in the cache: %v (%v)", left, err)
		}
	})
}
