package sandboxbench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbot/agentbot/internal/testenv"
	"github.com/agentbot/agentbot/sandboxes"
	"github.com/agentbot/agentbot/sandboxes/dockersandbox"
	"github.com/agentbot/agentbot/sandboxes/localsandbox"
)

// Settings of the benchmarks; see the package documentation.
const (
	// sizeEnv overrides the size of the workspace tree, in MB (10^6
	// bytes of file contents).
	sizeEnv = "AGENTBOT_BENCH_MB"
	// benchSeed seeds the workspace tree.
	benchSeed = 1
	// benchLabel marks the containers the benchmarks create, for
	// finding those an interrupted run left behind.
	benchLabel = "agentbot-sandboxbench"
	// cacheName is the directory under os.TempDir() that keeps the
	// generated trees between runs.
	cacheName = "agentbot-sandboxbench"
)

// treeBytes is the size of the workspace tree: AGENTBOT_BENCH_MB, else 20
// MB with -short, else 200 MB.
func treeBytes(b *testing.B) int64 {
	if s := os.Getenv(sizeEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("%s=%q: want a positive whole number of MB", sizeEnv, s)
		}
		return int64(n) * MB
	}
	if testing.Short() {
		return 20 * MB
	}
	return 200 * MB
}

// BenchmarkExec measures running `true` through Sandbox.Exec, next to
// running it with the tools underneath: os/exec of sh -c, and the docker
// exec CLI against a container of the same image. Each sub-benchmark runs
// the command once before it starts timing (connections, caches).
func BenchmarkExec(b *testing.B) {
	f := newFixture(b)
	var shNs, cliNs float64
	b.Run("sh-c-true", func(b *testing.B) {
		ctx := b.Context()
		run := func() {
			if out, err := exec.CommandContext(ctx, "/bin/sh", "-c", "true").CombinedOutput(); err != nil {
				b.Fatalf("sh -c true: %v: %s", err, out)
			}
		}
		run()
		for b.Loop() {
			run()
		}
		shNs = nsPerOp(b)
	})
	b.Run("local", func(b *testing.B) {
		benchExec(b, f.sandbox(b, localsandbox.Name, sandboxes.Spec{Name: "sandboxbench-exec"}))
		reportVs(b, shNs, "sh-c-true")
	})
	b.Run("docker-exec-cli", func(b *testing.B) {
		ctx := b.Context()
		id := f.cliContainer(b)
		run := func() {
			if out, err := exec.CommandContext(ctx, "docker", "exec", id, "sh", "-c", "true").CombinedOutput(); err != nil {
				b.Fatalf("docker exec %s sh -c true: %v: %s", id, err, out)
			}
		}
		run()
		for b.Loop() {
			run()
		}
		cliNs = nsPerOp(b)
	})
	b.Run("docker", func(b *testing.B) {
		benchExec(b, f.sandbox(b, dockersandbox.Name, sandboxes.Spec{Name: "sandboxbench-exec"}))
		reportVs(b, cliNs, "docker-exec-cli")
	})
}

func benchExec(b *testing.B, sb *sandboxes.Sandbox) {
	ctx := b.Context()
	run := func() {
		res, err := sb.Exec(ctx, sandboxes.ExecRequest{Command: "true"})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("exec true: exit code %d, %v (stderr %q)", res.ExitCode, err, res.Stderr.String())
		}
	}
	run()
	for b.Loop() {
		run()
	}
}

// BenchmarkSnapshot measures Sandbox.Snapshot of the generated workspace
// tree, next to tar piped into zstd -1 on the same tree. Snapshots are
// counted and dropped, never kept.
func BenchmarkSnapshot(b *testing.B) {
	f := newFixture(b)
	var baseNs float64
	var baseSize int64
	b.Run("tar-zstd-1", func(b *testing.B) {
		requireTools(b, "tar", "zstd")
		ctx, t := b.Context(), f.benchTree(b)
		b.SetBytes(t.Bytes)
		var out countWriter
		var rss uint64
		var cpu time.Duration
		for b.Loop() {
			out = countWriter{}
			// Into a pipe, not -f /dev/null: GNU tar does not even
			// read the files when it writes to /dev/null.
			st, err := runPipeline(&out,
				exec.CommandContext(ctx, "tar", "-C", t.Dir, "-cf", "-", "."),
				exec.CommandContext(ctx, "zstd", "-1", "-T0", "-c"))
			if err != nil {
				b.Fatal(err)
			}
			rss = max(rss, st.peakRSS)
			cpu += st.cpu
		}
		baseNs, baseSize = nsPerOp(b), out.n
		b.ReportMetric(float64(t.Bytes)/float64(out.n), "ratio")
		reportChildRSS(b, rss)
		reportCPU(b, cpu, "cpu-s/op")
	})
	b.Run("local", func(b *testing.B) {
		t := f.benchTree(b)
		size := benchSnapshot(b, f.sandbox(b, localsandbox.Name, sandboxes.Spec{Root: t.Dir}), t, nil)
		reportVs(b, baseNs, "tar-zstd-1")
		reportSizeVs(b, size, baseSize, "tar-zstd-1")
	})
	b.Run("docker", func(b *testing.B) {
		t, snap := f.benchTree(b), f.snapshot(b)
		sb := f.sandbox(b, dockersandbox.Name, sandboxes.Spec{Name: "sandboxbench-snapshot"})
		restoreFile(b, sb, snap, t)
		size := benchSnapshot(b, sb, t, daemonCPU())
		reportVs(b, baseNs, "tar-zstd-1")
		reportSizeVs(b, size, baseSize, "tar-zstd-1")
	})
}

// benchSnapshot measures snapshots of sb, the tree t, and returns the size
// of the last one. daemon, if not nil, is the CPU clock of the Docker
// daemon, whose share is reported apart.
func benchSnapshot(b *testing.B, sb *sandboxes.Sandbox, t benchTree, daemon func() time.Duration) int64 {
	ctx := b.Context()
	b.SetBytes(t.Bytes)
	var out countWriter
	var cpu, dcpu time.Duration
	mem := startMemProbe()
	defer mem.finish()
	for b.Loop() {
		out = countWriter{}
		c0, d0 := selfCPU(), clockOf(daemon)
		info, err := sb.Snapshot(ctx, &out)
		cpu, dcpu = cpu+selfCPU()-c0, dcpu+clockOf(daemon)-d0
		if err != nil {
			b.Fatal(err)
		}
		checkInfo(b, "snapshot", info, t)
	}
	mem.report(b)
	b.ReportMetric(float64(t.Bytes)/float64(out.n), "ratio")
	reportCPU(b, cpu, "cpu-s/op")
	reportCPU(b, dcpu, "daemon-cpu-s/op")
	return out.n
}

// clockOf reads clock, or gives 0 for none.
func clockOf(clock func() time.Duration) time.Duration {
	if clock == nil {
		return 0
	}
	return clock()
}

// reportSizeVs reports the size of our snapshot over the baseline's as
// "x-size-<baseline>": 1.05 means 5% larger.
func reportSizeVs(b *testing.B, size, baseSize int64, baseline string) {
	if size > 0 && baseSize > 0 {
		b.ReportMetric(float64(size)/float64(baseSize), "x-size-"+baseline)
	}
}

// BenchmarkRestore measures Sandbox.Restore of a snapshot of the generated
// tree (made once, by the local backend, into a file) into a fresh sandbox,
// next to zstd -d piped into tar -x into a fresh directory. Making the
// sandbox or directory, checking what landed and deleting it are not timed.
func BenchmarkRestore(b *testing.B) {
	f := newFixture(b)
	var baseNs float64
	b.Run("zstd-tar", func(b *testing.B) {
		requireTools(b, "tar", "zstd")
		ctx, t, snap := b.Context(), f.benchTree(b), f.snapshot(b)
		b.SetBytes(t.Bytes)
		var rss uint64
		var cpu time.Duration
		settle()
		for b.Loop() {
			b.StopTimer()
			dir, err := os.MkdirTemp(f.dir, "zstd-tar-")
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			st, err := runPipeline(nil,
				exec.CommandContext(ctx, "zstd", "-d", "-c", snap.path),
				exec.CommandContext(ctx, "tar", "-C", dir, "-xf", "-"))
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			rss = max(rss, st.peakRSS)
			cpu += st.cpu
			checkTree(b, dir, t)
			if err := os.RemoveAll(dir); err != nil {
				b.Fatal(err)
			}
			settle()
			b.StartTimer()
		}
		baseNs = nsPerOp(b)
		b.ReportMetric(float64(t.Bytes)/float64(snap.size), "ratio")
		reportChildRSS(b, rss)
		reportCPU(b, cpu, "cpu-s/op")
	})
	b.Run("local", func(b *testing.B) {
		benchRestore(b, f, localsandbox.Name, nil)
		reportVs(b, baseNs, "zstd-tar")
	})
	b.Run("docker", func(b *testing.B) {
		benchRestore(b, f, dockersandbox.Name, daemonCPU())
		reportVs(b, baseNs, "zstd-tar")
	})
}

// benchRestore measures restores of the tree's snapshot into fresh
// sandboxes of backend; daemon is as for benchSnapshot.
func benchRestore(b *testing.B, f *fixture, backend string, daemon func() time.Duration) {
	t, snap := f.benchTree(b), f.snapshot(b)
	b.SetBytes(t.Bytes)
	var cpu, dcpu time.Duration
	settle()
	mem := startMemProbe()
	defer mem.finish()
	for b.Loop() {
		b.StopTimer()
		sb := f.sandbox(b, backend, sandboxes.Spec{Name: "sandboxbench-restore"})
		b.StartTimer()
		c0, d0 := selfCPU(), clockOf(daemon)
		restoreFile(b, sb, snap, t)
		cpu, dcpu = cpu+selfCPU()-c0, dcpu+clockOf(daemon)-d0
		b.StopTimer()
		if backend == localsandbox.Name {
			checkTree(b, sb.State().Root, t)
		} else {
			checkDockerTree(b, sb, t)
		}
		destroy(b, sb)
		settle()
		b.StartTimer()
	}
	mem.report(b)
	b.ReportMetric(float64(t.Bytes)/float64(snap.size), "ratio")
	reportCPU(b, cpu, "cpu-s/op")
	reportCPU(b, dcpu, "daemon-cpu-s/op")
}

// settle writes out what the file systems hold dirty (syscall.Sync), off
// the clock: deleting a restored tree leaves the file system work to do
// (freeing, and discarding where it is mounted so), which would otherwise
// land on the next restore, ours or a baseline's, and make restores of many
// files vary by a factor of two from run to run.
func settle() { syscall.Sync() }

// restoreFile restores the snapshot file into sb, streaming it from disk.
func restoreFile(b *testing.B, sb *sandboxes.Sandbox, snap snapshotFile, t benchTree) {
	r, err := os.Open(snap.path)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	info, err := sb.Restore(b.Context(), r)
	if err != nil {
		b.Fatal(err)
	}
	checkInfo(b, "restore", info, t)
}

// checkInfo fails the benchmark unless a snapshot or restore carried the
// whole tree: a benchmark of an operation that silently did less would
// report a fine speed.
func checkInfo(b *testing.B, op string, info sandboxes.SnapshotInfo, t benchTree) {
	if info.Files != t.Files || info.Dirs != t.Dirs || info.Bytes != t.Bytes || info.SkippedCount != 0 {
		b.Fatalf("%s carried %d files, %d directories, %d bytes (skipped %v); the tree has %d, %d, %d",
			op, info.Files, info.Dirs, info.Bytes, info.Skipped, t.Files, t.Dirs, t.Bytes)
	}
}

// checkTree fails the benchmark unless dir holds as much as the tree.
func checkTree(b *testing.B, dir string, t benchTree) {
	st, err := statTree(dir)
	if err != nil {
		b.Fatal(err)
	}
	if st != t.treeStats {
		b.Fatalf("%s holds %+v after the restore; the tree is %+v", dir, st, t.treeStats)
	}
}

// checkDockerTree counts the files and directories in a Docker sandbox's
// workspace.
func checkDockerTree(b *testing.B, sb *sandboxes.Sandbox, t benchTree) {
	res, err := sb.Exec(b.Context(), sandboxes.ExecRequest{
		Command: `echo $(find . -type f | wc -l) $(find . -type d | wc -l)`,
	})
	if err != nil || res.ExitCode != 0 {
		b.Fatalf("counting the restored files: exit code %d, %v: %s", res.ExitCode, err, res.Stderr.String())
	}
	// find lists the workspace itself among the directories.
	if got, want := strings.TrimSpace(res.Stdout.String()), fmt.Sprint(t.Files, t.Dirs+1); got != want {
		b.Fatalf("the workspace holds %q files and directories after the restore; want %q", got, want)
	}
}

// fixture holds what the sub-benchmarks of one top-level benchmark share:
// the backends, the workspace tree, a snapshot of it. The tree and the
// snapshot are made on first use, so a -bench pattern that picks one
// sub-benchmark makes only what that one needs. Sub-benchmarks run one at a
// time, so there is no locking.
type fixture struct {
	dir      string // the top-level benchmark's temporary directory
	reg      *sandboxes.Registry
	dockerOK bool
	tree     *benchTree
	snap     *snapshotFile
}

// snapshotFile is a portable snapshot of the tree, on disk.
type snapshotFile struct {
	path string
	size int64
}

func newFixture(b *testing.B) *fixture {
	f := &fixture{dir: b.TempDir(), reg: sandboxes.NewRegistry()}
	local, err := localsandbox.New(localsandbox.Options{BaseDir: filepath.Join(f.dir, "local")})
	if err != nil {
		b.Fatal(err)
	}
	docker, err := dockersandbox.New(dockersandbox.Options{Image: testenv.TestImage()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { docker.Close() })
	if err := errors.Join(f.reg.Register(localsandbox.Name, local), f.reg.Register(dockersandbox.Name, docker)); err != nil {
		b.Fatal(err)
	}
	return f
}

// requireDocker fails the benchmark, loudly, without the Docker engine or
// the test image.
func (f *fixture) requireDocker(b *testing.B) {
	if f.dockerOK {
		return
	}
	if err := testenv.CheckDocker(b.Context()); err != nil {
		b.Fatalf("DOCKER BENCHMARKS NEED THE ENGINE AND THE TEST IMAGE (scripts/setup.sh --test builds it): %v", err)
	}
	f.dockerOK = true
}

func requireTools(b *testing.B, names ...string) {
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			b.Fatalf("%s is needed for the baseline (scripts/setup.sh --test installs it): %v", n, err)
		}
	}
}

// sandbox creates a sandbox, destroyed when b ends if it is still there.
// Docker sandboxes are made from the test image and carry benchLabel.
func (f *fixture) sandbox(b *testing.B, backend string, spec sandboxes.Spec) *sandboxes.Sandbox {
	if backend == dockersandbox.Name {
		f.requireDocker(b)
		spec.Image = testenv.TestImage()
		spec.Labels = map[string]string{benchLabel: "true"}
	}
	sb, err := f.reg.Create(b.Context(), backend, spec)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { destroy(b, sb) })
	return sb
}

// destroy destroys sb, if it is still there, on its own time: the
// benchmark's context may be done.
func destroy(b *testing.B, sb *sandboxes.Sandbox) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := sb.Destroy(ctx); err != nil && !errors.Is(err, sandboxes.ErrNotFound) {
		b.Error(err)
	}
}

// cliContainer starts a container of the test image for the docker exec
// CLI, removed when b ends. It runs the same idle loop under docker-init as
// a sandbox's container, without the sandbox's hardening and limits.
func (f *fixture) cliContainer(b *testing.B) string {
	f.requireDocker(b)
	requireTools(b, "docker")
	out, err := exec.CommandContext(b.Context(), "docker", "run", "--detach", "--init", "--network", "none",
		"--label", benchLabel+"=true", testenv.TestImage(),
		"/bin/sh", "-c", `trap "exit 0" TERM; while :; do sleep 3600 & wait; done`).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		b.Fatalf("docker run: %v", err)
	}
	id := strings.TrimSpace(string(out))
	b.Cleanup(func() {
		if out, err := exec.Command("docker", "rm", "--force", id).CombinedOutput(); err != nil {
			b.Errorf("docker rm --force %s: %v: %s", id, err, out)
		}
	})
	return id
}

// benchTree returns the generated workspace tree, from the cache under
// os.TempDir() when an earlier run made it. It reads the whole tree once,
// so whichever sub-benchmark comes first does not pay for a cold page
// cache.
func (f *fixture) benchTree(b *testing.B) benchTree {
	if f.tree == nil {
		t, err := cachedTree(filepath.Join(os.TempDir(), cacheName), treeSpec{Seed: benchSeed, Bytes: treeBytes(b)})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := hashTree(t.Dir); err != nil {
			b.Fatal(err)
		}
		f.tree = &t
	}
	return *f.tree
}

// snapshot returns a snapshot of the tree, made by the local backend on
// first use.
func (f *fixture) snapshot(b *testing.B) snapshotFile {
	if f.snap != nil {
		return *f.snap
	}
	t := f.benchTree(b)
	sb := f.sandbox(b, localsandbox.Name, sandboxes.Spec{Root: t.Dir})
	p := filepath.Join(f.dir, "workspace.tar.zst")
	w, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	info, err := sb.Snapshot(b.Context(), w)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		b.Fatal(err)
	}
	checkInfo(b, "snapshot", info, t)
	fi, err := os.Stat(p)
	if err != nil {
		b.Fatal(err)
	}
	destroy(b, sb)
	f.snap = &snapshotFile{path: p, size: fi.Size()}
	return *f.snap
}
