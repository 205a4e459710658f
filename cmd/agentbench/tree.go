package main

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// tree returns the big workspace tree (settings.treeMB), generating it
// once per size under the system's temporary directory (kept between
// runs: generating 200 MB takes a while). About 40% of the bytes are in
// ~20k small files (1–7 KB of text-like content that compresses as source
// code does), the rest in five large files, half random and half text.
func (e *benchEnv) tree() (string, error) {
	if e.treeDir != "" {
		return e.treeDir, nil
	}
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("agentbench-tree-%dmb-v1", e.s.treeMB))
	done := dir + ".complete" // beside the tree: a workspace copies all of it
	if _, err := os.Stat(done); err == nil {
		e.treeDir = dir
		return dir, nil
	}
	os.RemoveAll(dir)
	total := int64(e.s.treeMB) * 1_000_000
	rng := rand.New(rand.NewPCG(1, uint64(e.s.treeMB)))
	words := []string{"func", "return", "err", "nil", "if", "for", "range", "ctx", "context", "string", "int", "package",
		"import", "type", "struct", "the", "session", "workflow", "sandbox", "snapshot", "value", "key", "map", "slice"}
	text := func(w *bufio.Writer, n int64) error {
		for n > 0 {
			s := words[rng.IntN(len(words))]
			if rng.IntN(9) == 0 {
				s += "\n"
			} else {
				s += " "
			}
			if int64(len(s)) > n {
				s = s[:n]
			}
			if _, err := w.WriteString(s); err != nil {
				return err
			}
			n -= int64(len(s))
		}
		return nil
	}
	write := func(path string, size int64, randomPart int64) error {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		w := bufio.NewWriterSize(f, 1<<16)
		buf := make([]byte, 1<<16)
		for left := randomPart; left > 0; {
			n := min(left, int64(len(buf)))
			for i := range buf[:n] {
				buf[i] = byte(rng.Uint32())
			}
			w.Write(buf[:n])
			left -= n
		}
		if err := text(w, size-randomPart); err != nil {
			f.Close()
			return err
		}
		if err := w.Flush(); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	small := total * 4 / 10
	smallFiles := int(small / 4000)
	for i := 0; i < smallFiles; i++ {
		p := filepath.Join(dir, fmt.Sprintf("src/pkg%03d/sub%d/file%05d.go", i/200, i%4, i))
		if err := write(p, 1000+rng.Int64N(6000), 0); err != nil {
			return "", err
		}
	}
	large := (total - small) / 5
	for i := 0; i < 5; i++ {
		if err := write(filepath.Join(dir, fmt.Sprintf("data/blob%d.bin", i)), large, large/2); err != nil {
			return "", err
		}
	}
	if err := os.WriteFile(done, nil, 0o644); err != nil {
		return "", err
	}
	e.treeDir = dir
	return dir, nil
}
