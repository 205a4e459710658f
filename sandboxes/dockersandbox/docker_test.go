package dockersandbox_test

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/jsonmessage"
	"github.com/klauspost/compress/zstd"

	"github.com/agentbot/agentbot/sandboxes"
	"github.com/agentbot/agentbot/sandboxes/dockersandbox"
)

// The Docker tests need a running engine and the test image. They fail,
// never skip, without them: a backend that is not tested is not known to
// work.

func testImage() string {
	return cmp.Or(os.Getenv("AGENTBOT_TEST_IMAGE"), "agentbot-sandbox-test:latest")
}

// dockerClient is a client of the engine the tests use, to look at
// containers from outside.
func dockerClient(t testing.TB) *client.Client {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatalf("docker client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// requireDocker fails the test when the engine or the test image is
// missing.
func requireDocker(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli := dockerClient(t)
	if _, err := cli.Ping(ctx); err != nil {
		t.Fatalf("DOCKER ENGINE NOT REACHABLE: these tests need a running Docker daemon (DOCKER_HOST=%q): %v",
			os.Getenv("DOCKER_HOST"), err)
	}
	if _, err := cli.ImageInspect(ctx, testImage()); err != nil {
		t.Fatalf("TEST IMAGE %s MISSING: build it with scripts/build-test-image.sh (needs busybox-static): %v",
			testImage(), err)
	}
}

func newBackend(t testing.TB, opts dockersandbox.Options) *dockersandbox.Backend {
	t.Helper()
	requireDocker(t)
	opts.Image = cmp.Or(opts.Image, testImage())
	b, err := dockersandbox.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.Available(context.Background()); err != nil {
		t.Fatalf("docker backend not available: %v", err)
	}
	return b
}

func registry(t testing.TB, b sandboxes.Backend) *sandboxes.Registry {
	t.Helper()
	r := sandboxes.NewRegistry()
	if err := r.Register(dockersandbox.Name, b); err != nil {
		t.Fatal(err)
	}
	return r
}

// create makes a sandbox that is destroyed when the test ends.
func create(t testing.TB, r *sandboxes.Registry, spec sandboxes.Spec) *sandboxes.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := r.Create(ctx, dockersandbox.Name, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sb.Destroy(ctx); err != nil && !errors.Is(err, sandboxes.ErrNotFound) {
			t.Errorf("cleanup: %v", err)
		}
	})
	return sb
}

func setup(t testing.TB) (*dockersandbox.Backend, *sandboxes.Registry, *sandboxes.Sandbox) {
	t.Helper()
	b := newBackend(t, dockersandbox.Options{})
	r := registry(t, b)
	return b, r, create(t, r, sandboxes.Spec{Name: t.Name()})
}

// sh runs a command that must succeed and returns its stdout.
func sh(t testing.TB, sb *sandboxes.Sandbox, cmd string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := sb.Exec(ctx, sandboxes.ExecRequest{Command: cmd, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("exec %q: %v", cmd, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exec %q: exit code %d, stderr %q", cmd, res.ExitCode, res.Stderr.String())
	}
	return res.Stdout.String()
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func TestDockerHardening(t *testing.T) {
	_, _, sb := setup(t)
	ctx := context.Background()
	ins, err := dockerClient(t).ContainerInspect(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	hc := ins.HostConfig
	if !slices.Contains(hc.CapDrop, "ALL") {
		t.Errorf("CapDrop = %v, want ALL", hc.CapDrop)
	}
	if len(hc.CapAdd) != 0 {
		t.Errorf("CapAdd = %v, want none", hc.CapAdd)
	}
	if !slices.ContainsFunc(hc.SecurityOpt, func(s string) bool { return strings.HasPrefix(s, "no-new-privileges") }) {
		t.Errorf("SecurityOpt = %v, want no-new-privileges", hc.SecurityOpt)
	}
	if hc.Privileged {
		t.Error("container is privileged")
	}
	if hc.PidsLimit == nil || *hc.PidsLimit != dockersandbox.DefaultPidsLimit {
		t.Errorf("PidsLimit = %v, want %d", hc.PidsLimit, dockersandbox.DefaultPidsLimit)
	}
	if hc.Memory != dockersandbox.DefaultMemoryBytes || hc.MemorySwap != dockersandbox.DefaultMemoryBytes {
		t.Errorf("Memory = %d, MemorySwap = %d, want %d", hc.Memory, hc.MemorySwap, dockersandbox.DefaultMemoryBytes)
	}
	if hc.NanoCPUs != dockersandbox.DefaultNanoCPUs {
		t.Errorf("NanoCPUs = %d, want %d", hc.NanoCPUs, dockersandbox.DefaultNanoCPUs)
	}
	if hc.NetworkMode != "none" {
		t.Errorf("NetworkMode = %q, want none", hc.NetworkMode)
	}
	if hc.Init == nil || !*hc.Init {
		t.Error("Init is not set: zombies would not be reaped")
	}
	// Nothing of the host's but the workspace volume: above all no Docker
	// socket, which would be root on the host.
	for _, m := range ins.Mounts {
		if strings.Contains(m.Source, "docker.sock") || strings.Contains(m.Destination, "docker.sock") || m.Type == "bind" {
			t.Errorf("mount %+v: want no bind mount and no Docker socket", m)
		}
	}
	if out := sh(t, sb, "ls /var/run/docker.sock /run/docker.sock 2>/dev/null; true"); strings.TrimSpace(out) != "" {
		t.Errorf("a Docker socket inside the sandbox: %q", out)
	}
	if got := ins.Config.Labels[dockersandbox.LabelSandbox]; got != "true" {
		t.Errorf("label %s = %q", dockersandbox.LabelSandbox, got)
	}

	if got := strings.TrimSpace(sh(t, sb, "id -u")); got != "1000" {
		t.Errorf("id -u = %q, want 1000 (the image's sandbox user)", got)
	}
	// No effective or bounding capabilities, no privilege escalation.
	status := sh(t, sb, "grep -E '^(CapEff|CapBnd|NoNewPrivs):' /proc/self/status")
	for _, want := range []string{"CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1"} {
		if !strings.Contains(status, want) {
			t.Errorf("/proc/self/status lacks %q:\n%s", want, status)
		}
	}
	// Only the loopback interface.
	if got := strings.Fields(sh(t, sb, "ls /sys/class/net")); !slices.Equal(got, []string{"lo"}) {
		t.Errorf("network interfaces = %v, want [lo]", got)
	}
	if st := sb.State(); st.Root != "/workspace" || st.Backend != "docker" || st.Meta[dockersandbox.MetaUser] != "sandbox" {
		t.Errorf("state = %+v", st)
	}
}

func TestDockerUnreachableDaemon(t *testing.T) {
	b, err := dockersandbox.New(dockersandbox.Options{Host: "unix:///nonexistent/agentbot-docker.sock"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	err = b.Available(context.Background())
	if !errors.Is(err, sandboxes.ErrUnavailable) || !strings.Contains(err.Error(), "/nonexistent/agentbot-docker.sock") {
		t.Errorf("Available = %v, want ErrUnavailable naming the socket", err)
	}
}

// alive reports which of the PIDs still exist in the sandbox.
func alive(t testing.TB, sb *sandboxes.Sandbox, pids []string) []string {
	t.Helper()
	var left []string
	for _, p := range pids {
		if strings.TrimSpace(sh(t, sb, "if [ -e /proc/"+p+" ]; then echo yes; fi")) == "yes" {
			left = append(left, p)
		}
	}
	return left
}

func TestDockerExecKillsProcessTree(t *testing.T) {
	_, _, sb := setup(t)
	// Background children, one in a new session, one in a subshell, all
	// printing their PIDs before the wait that the timeout interrupts.
	const cmd = `sleep 300 & echo $!; setsid sleep 301 & echo $!; (sleep 302 & echo $!; wait) & wait`
	for _, tc := range []struct {
		name   string
		cancel bool
	}{{"timeout", false}, {"cancel", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req := sandboxes.ExecRequest{Command: cmd, Timeout: 2 * time.Second}
			if tc.cancel {
				req.Timeout = time.Minute
				time.AfterFunc(2*time.Second, cancel)
			}
			start := time.Now()
			res, err := sb.Exec(ctx, req)
			if tc.cancel {
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("exec = %v, want context.Canceled", err)
				}
			} else if !errors.Is(err, sandboxes.ErrTimeout) || !res.TimedOut {
				t.Fatalf("exec = %v (timed out %v), want ErrTimeout", err, res.TimedOut)
			}
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("exec took %v to return after the deadline", d)
			}
			pids := strings.Fields(res.Stdout.String())
			if len(pids) != 3 {
				t.Fatalf("stdout %q: want three PIDs", res.Stdout.String())
			}
			if left := alive(t, sb, pids); len(left) > 0 {
				t.Errorf("processes %v of %v survived the kill; ps:\n%s", left, pids, sh(t, sb, "ps -o pid,ppid,pgid,sid,args"))
			}
			// The sandbox is usable afterwards.
			if got := sh(t, sb, "echo ok"); got != "ok\n" {
				t.Errorf("echo ok = %q", got)
			}
		})
	}
}

func TestDockerExecDetachedChildren(t *testing.T) {
	_, _, sb := setup(t)
	for _, cmd := range []string{
		"sleep 60 >/dev/null 2>&1 & echo started",
		"sleep 60 & echo started",     // the child holds stdout
		"sleep 60 >&2 & echo started", // and here stderr
	} {
		t.Run(cmd, func(t *testing.T) {
			res, err := sb.Exec(context.Background(), sandboxes.ExecRequest{Command: cmd, Timeout: 30 * time.Second})
			if err != nil {
				t.Fatalf("exec: %v (a detached child kept it waiting)", err)
			}
			if res.ExitCode != 0 || res.Stdout.String() != "started\n" {
				t.Errorf("exit %d, stdout %q", res.ExitCode, res.Stdout.String())
			}
		})
	}
}

func TestDockerExec(t *testing.T) {
	b := newBackend(t, dockersandbox.Options{})
	r := registry(t, b)
	t.Setenv("AGENTBOT_HOST_SECRET", "leaked")
	sb := create(t, r, sandboxes.Spec{Env: map[string]string{"FROM_SPEC": "spec", "BOTH": "spec"}})
	ctx := context.Background()

	t.Run("env", func(t *testing.T) {
		res, err := sb.Exec(ctx, sandboxes.ExecRequest{Command: "env", Env: map[string]string{"FROM_REQ": "a b\nc", "BOTH": "req"}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("env: %v, exit %d", err, res.ExitCode)
		}
		out := res.Stdout.String()
		want := map[string]string{
			"PATH": dockersandbox.DefaultPath, "HOME": "/workspace", "LANG": "C.UTF-8", "TERM": "dumb",
			"FROM_SPEC": "spec", "FROM_REQ": "a b\nc", "BOTH": "req",
			"PWD": "/workspace", "SHLVL": "1", // set by the shell itself
		}
		// The marker that finds the command's processes: "<id>/<nonce>".
		if !regexp.MustCompile(`(?m)^` + sandboxes.MarkerEnv + `=[0-9a-f]{12}/[0-9a-f]+$`).MatchString(out) {
			t.Errorf("env lacks the %s marker:\n%s", sandboxes.MarkerEnv, out)
		}
		want[sandboxes.MarkerEnv] = ""
		for k, v := range want {
			if k == sandboxes.MarkerEnv {
				continue
			}
			if !strings.Contains(out, k+"="+v+"\n") {
				t.Errorf("env lacks %s=%q:\n%s", k, v, out)
			}
		}
		// The value of FROM_REQ has a line break; count names instead.
		var names []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if k, _, ok := strings.Cut(line, "="); ok && k != "" && k != "c" {
				names = append(names, k)
			}
		}
		if len(names) != len(want) {
			t.Errorf("env has %d variables %v, want exactly %d:\n%s", len(names), names, len(want), out)
		}
	})
	t.Run("exit code and streams", func(t *testing.T) {
		res, err := sb.Exec(ctx, sandboxes.ExecRequest{Command: "echo out; echo err >&2; exit 7"})
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode != 7 || res.Stdout.String() != "out\n" || res.Stderr.String() != "err\n" {
			t.Errorf("exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout.String(), res.Stderr.String())
		}
	})
	t.Run("dir", func(t *testing.T) {
		sh(t, sb, "mkdir -p sub/dir")
		res, err := sb.Exec(ctx, sandboxes.ExecRequest{Command: "pwd", Dir: "sub/dir"})
		if err != nil || res.Stdout.String() != "/workspace/sub/dir\n" {
			t.Errorf("pwd = %q, %v", res.Stdout.String(), err)
		}
		_, err = sb.Exec(ctx, sandboxes.ExecRequest{Command: "pwd", Dir: "missing"})
		if !errors.Is(err, sandboxes.ErrInvalid) {
			t.Errorf("exec in a missing dir = %v, want ErrInvalid", err)
		}
	})
	t.Run("large output", func(t *testing.T) {
		res, err := sb.Exec(ctx, sandboxes.ExecRequest{Command: "head -c 3000000 /dev/zero", MaxOutput: 1 << 10})
		if err != nil || res.Stdout.Len() != 3000000 {
			t.Errorf("len = %d, %v", res.Stdout.Len(), err)
		}
	})
}

func TestDockerFiles(t *testing.T) {
	_, _, sb := setup(t)
	ctx := context.Background()
	data := []byte("hello\x00world\n")
	if err := sb.WriteFile(ctx, "a/b/c.txt", data, 0o640); err != nil {
		t.Fatal(err)
	}
	got, err := sb.ReadFile(ctx, "a/b/c.txt", 0)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %q, %v", got, err)
	}
	// Parents and file belong to the exec user, who can change them.
	if got := sh(t, sb, "stat -c '%u:%g %a %n' a a/b a/b/c.txt"); got != "1000:1000 755 a\n1000:1000 755 a/b\n1000:1000 640 a/b/c.txt\n" {
		t.Errorf("owners and modes:\n%s", got)
	}
	sh(t, sb, "echo more >> a/b/c.txt && touch a/b/new && rm a/b/new")
	// Replacing keeps the path; a large file goes through the spool.
	big := bytes.Repeat([]byte("0123456789abcdef"), 600_000)
	if err := sb.WriteFileFrom(ctx, "a/b/c.txt", io.MultiReader(bytes.NewReader(big)), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := sb.ReadFile(ctx, "/workspace/a/b/c.txt", 0); err != nil || !bytes.Equal(got, big) {
		t.Errorf("big file: %d bytes, %v", len(got), err)
	}
	// Symbolic links are followed.
	sh(t, sb, "ln -s a/b/c.txt link")
	if got, err := sb.ReadFile(ctx, "link", 0); err != nil || !bytes.Equal(got, big) {
		t.Errorf("read through link: %d bytes, %v", len(got), err)
	}

	_, err = sb.ReadFile(ctx, "nope/missing.txt", 0)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("read missing = %v, want fs.ErrNotExist", err)
	}
	_, err = sb.ReadFile(ctx, "a", 0)
	if !errors.Is(err, sandboxes.ErrInvalid) || !strings.Contains(err.Error(), "directory") {
		t.Errorf("read directory = %v, want ErrInvalid saying directory", err)
	}
	if err := sb.WriteFile(ctx, "a/b", []byte("x"), 0); !errors.Is(err, sandboxes.ErrInvalid) {
		t.Errorf("write over a directory = %v, want ErrInvalid", err)
	}
	if err := sb.WriteFile(ctx, "a/b/c.txt/d", []byte("x"), 0); !errors.Is(err, sandboxes.ErrInvalid) {
		t.Errorf("write below a file = %v, want ErrInvalid", err)
	}
}

// archiveBytes is the workspace's archive, which holds names, modes,
// owners, times and contents: equal archives mean an untouched workspace.
func archiveBytes(t testing.TB, sb *sandboxes.Sandbox) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := sb.Instance().Archive(context.Background(), &buf); err != nil {
		t.Fatalf("archive: %v", err)
	}
	return buf.Bytes()
}

func tarNames(t testing.TB, data []byte) []string {
	t.Helper()
	var names []string
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
}

// failingReader gives the first n bytes of r, then an error.
type failingReader struct {
	r   io.Reader
	n   int
	err error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, f.err
	}
	p = p[:min(len(p), f.n)]
	n, err := f.r.Read(p)
	f.n -= n
	return n, err
}

// zstdStream compresses a tar into a portable snapshot stream.
func zstdStream(t testing.TB, raw []byte) io.Reader {
	t.Helper()
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	zw.Write(raw)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

func fillWorkspace(t testing.TB, sb *sandboxes.Sandbox) {
	t.Helper()
	sh(t, sb, `mkdir -p src/pkg empty ro && printf 'package main\n' > src/main.go && printf 'x' > src/pkg/x.txt &&
		printf '#!/bin/sh\necho hi\n' > run.sh && chmod 755 run.sh && ln -s src/main.go main-link &&
		ln src/pkg/x.txt hard.txt && printf 'secret' > ro/file && chmod 400 ro/file && chmod 555 ro`)
}

func TestDockerRestore(t *testing.T) {
	_, _, sb := setup(t)
	ctx := context.Background()
	fillWorkspace(t, sb)
	before := archiveBytes(t, sb)
	if names := tarNames(t, before); !slices.Contains(names, "src/main.go") || slices.ContainsFunc(names, func(n string) bool {
		return strings.HasPrefix(n, "workspace")
	}) {
		t.Fatalf("archive names are not workspace-relative: %v", names)
	}

	// A replacement tree, as a tar stream of its own.
	var repl bytes.Buffer
	tw := tar.NewWriter(&repl)
	now := time.Now()
	files := []struct {
		name string
		typ  byte
		body string
		mode int64
	}{
		{"new/", tar.TypeDir, "", 0o755},
		{"new/a.txt", tar.TypeReg, "restored a\n", 0o644},
		{"deep/er/b.txt", tar.TypeReg, strings.Repeat("b", 100_000), 0o600}, // parents not in the stream
		{"new/link", tar.TypeSymlink, "a.txt", 0o777},
		{"tool.sh", tar.TypeReg, "#!/bin/sh\necho tool\n", 0o755},
	}
	for _, f := range files {
		h := &tar.Header{Name: f.name, Typeflag: f.typ, Mode: f.mode, Size: int64(len(f.body)), ModTime: now}
		if f.typ == tar.TypeSymlink {
			h.Linkname, h.Size = f.body, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if f.typ == tar.TypeReg {
			tw.Write([]byte(f.body))
		}
	}
	tw.Close()
	stream := repl.Bytes()

	t.Run("failing stream leaves the workspace", func(t *testing.T) {
		for _, cut := range []int{0, 700, 2048, len(stream) / 2, len(stream) - 1024} {
			err := sb.Instance().Restore(ctx, &failingReader{r: bytes.NewReader(stream), n: cut, err: errors.New("entry refused")})
			if err == nil {
				t.Fatalf("restore of a stream failing at byte %d succeeded", cut)
			}
			if after := archiveBytes(t, sb); !bytes.Equal(before, after) {
				t.Fatalf("workspace changed by a restore that failed at byte %d: %v", cut, tarNames(t, after))
			}
		}
		// An error after the tar trailer fails the restore too.
		err := sb.Instance().Restore(ctx, io.MultiReader(bytes.NewReader(stream), &failingReader{err: errors.New("late")}))
		if err == nil {
			t.Fatal("restore with an error after the trailer succeeded")
		}
		if after := archiveBytes(t, sb); !bytes.Equal(before, after) {
			t.Fatal("workspace changed by a restore that failed after the trailer")
		}
		if got := sh(t, sb, "ls -a /"); strings.Contains(got, "workspace.") {
			t.Errorf("staging left behind in /:\n%s", got)
		}
	})

	t.Run("unsafe snapshot leaves the workspace", func(t *testing.T) {
		// Through the sandboxes package: a portable snapshot whose last
		// entry is refused by the checker while earlier ones already
		// streamed into the container.
		var raw bytes.Buffer
		tw := tar.NewWriter(&raw)
		tw.WriteHeader(&tar.Header{Name: "ok.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: 200_000})
		tw.Write(bytes.Repeat([]byte("o"), 200_000))
		tw.WriteHeader(&tar.Header{Name: "../escape.txt", Typeflag: tar.TypeReg, Mode: 0o644})
		tw.Close()
		_, err := sb.Restore(ctx, zstdStream(t, raw.Bytes()))
		if !errors.Is(err, sandboxes.ErrUnsafeArchive) {
			t.Fatalf("restore = %v, want ErrUnsafeArchive", err)
		}
		if after := archiveBytes(t, sb); !bytes.Equal(before, after) {
			t.Fatal("workspace changed by a refused snapshot")
		}
		if got := sh(t, sb, "ls -a /"); strings.Contains(got, "workspace.") {
			t.Errorf("staging left behind in /:\n%s", got)
		}
	})

	t.Run("success replaces the workspace", func(t *testing.T) {
		if err := sb.Instance().Restore(ctx, bytes.NewReader(stream)); err != nil {
			t.Fatal(err)
		}
		got := sh(t, sb, "find . | sort")
		want := ".\n./deep\n./deep/er\n./deep/er/b.txt\n./new\n./new/a.txt\n./new/link\n./tool.sh\n"
		if got != want {
			t.Errorf("workspace after restore:\n%s\nwant:\n%s", got, want)
		}
		if got := sh(t, sb, "cat new/link && ./tool.sh"); got != "restored a\ntool\n" {
			t.Errorf("link and tool: %q", got)
		}
		// Everything belongs to the user, who can change it; the old
		// tree (with its read-only directory) and staging are gone.
		if got := sh(t, sb, "find . -exec stat -c %u:%g {} + | sort -u"); got != "1000:1000\n" {
			t.Errorf("owners after restore: %q", got)
		}
		sh(t, sb, "echo more >> deep/er/b.txt && rm new/a.txt && mkdir deep/x && touch made-here")
		if got := sh(t, sb, "ls -a /"); strings.Contains(got, "workspace.") {
			t.Errorf("leftovers in /:\n%s", got)
		}
		if got := sh(t, sb, "stat -c '%u %a' /workspace"); got != "1000 755\n" {
			t.Errorf("workspace root: %q", got)
		}
	})

	t.Run("snapshot round trip", func(t *testing.T) {
		fillWorkspace(t, sb)
		var snap bytes.Buffer
		if _, err := sb.Snapshot(ctx, &snap); err != nil {
			t.Fatal(err)
		}
		want := sh(t, sb, "find . -exec stat -c '%n %a %s' {} + | sort")
		sh(t, sb, "chmod 755 ro && rm -rf src ro && echo junk > junk")
		if _, err := sb.Restore(ctx, &snap); err != nil {
			t.Fatal(err)
		}
		if got := sh(t, sb, "find . -exec stat -c '%n %a %s' {} + | sort"); got != want {
			t.Errorf("after round trip:\n%s\nwant:\n%s", got, want)
		}
	})
}

func TestDockerStopAttach(t *testing.T) {
	_, _, sb := setup(t)
	ctx := context.Background()
	if err := sb.WriteFile(ctx, "keep.txt", []byte("kept"), 0); err != nil {
		t.Fatal(err)
	}
	st := sb.State()
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sb.Stop(ctx); err != nil {
		t.Errorf("stopping a stopped sandbox: %v", err)
	}
	if _, err := sb.Exec(ctx, sandboxes.ExecRequest{Command: "true"}); !errors.Is(err, sandboxes.ErrStopped) {
		t.Errorf("exec on a stopped sandbox = %v, want ErrStopped", err)
	}
	// A fresh backend, as after a restart of the worker.
	r2 := registry(t, newBackend(t, dockersandbox.Options{}))
	sb2, err := r2.Attach(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := sb2.ReadFile(ctx, "keep.txt", 0); err != nil || string(got) != "kept" {
		t.Errorf("file after stop and attach: %q, %v", got, err)
	}
	if got := sh(t, sb2, "cat keep.txt; id -u"); got != "kept1000\n" {
		t.Errorf("exec after attach: %q", got)
	}
	// Restore still swaps after a restart.
	var snap bytes.Buffer
	if _, err := sb2.Snapshot(ctx, &snap); err != nil {
		t.Fatal(err)
	}
	if _, err := sb2.Restore(ctx, &snap); err != nil {
		t.Errorf("restore after restart: %v", err)
	}
}

func TestDockerPauseResume(t *testing.T) {
	_, r, sb := setup(t)
	ctx := context.Background()
	cli := dockerClient(t)
	if err := sb.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sb.Pause(ctx); err != nil {
		t.Errorf("pausing a paused sandbox: %v", err)
	}
	if ins, err := cli.ContainerInspect(ctx, sb.ID()); err != nil || !ins.State.Paused {
		t.Fatalf("container not paused: %v", err)
	}
	if _, err := sb.Exec(ctx, sandboxes.ExecRequest{Command: "true"}); !errors.Is(err, sandboxes.ErrStopped) {
		t.Errorf("exec on a paused sandbox = %v, want ErrStopped", err)
	}
	if err := sb.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sb.Resume(ctx); err != nil {
		t.Errorf("resuming a running sandbox: %v", err)
	}
	if got := sh(t, sb, "echo back"); got != "back\n" {
		t.Errorf("after resume: %q", got)
	}
	// Attach thaws a paused sandbox; Stop stops one.
	if err := sb.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	sb2, err := r.Attach(ctx, sb.State())
	if err != nil {
		t.Fatal(err)
	}
	if got := sh(t, sb2, "echo thawed"); got != "thawed\n" {
		t.Errorf("after attach: %q", got)
	}
	if err := sb.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sb.Stop(ctx); err != nil {
		t.Errorf("stopping a paused sandbox: %v", err)
	}
	if ins, err := cli.ContainerInspect(ctx, sb.ID()); err != nil || ins.State.Running {
		t.Errorf("container still running after stop: %v", err)
	}
}

func TestDockerListAndDestroy(t *testing.T) {
	b := newBackend(t, dockersandbox.Options{})
	r := registry(t, b)
	tag := randHex(6)
	sb := create(t, r, sandboxes.Spec{Name: "List me!", Labels: map[string]string{"agentbot.test": tag},
		Env: map[string]string{"K": "v"}})
	ctx := context.Background()
	list, err := b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(list, func(l sandboxes.Listed) bool { return l.ID == sb.ID() })
	if i < 0 {
		t.Fatalf("List does not hold %s", sb.ID())
	}
	if l := list[i]; l.Labels["agentbot.test"] != tag || time.Since(l.Created) > time.Minute {
		t.Errorf("listed labels %v, created %v", l.Labels, l.Created)
	}
	st := list[i].State
	if st.Meta["agentbot.test"] != tag || st.Meta[dockersandbox.LabelName] != "list-me" ||
		st.Env["K"] != "v" || st.Image != testImage() || st.Backend != dockersandbox.Name {
		t.Errorf("listed state = %+v", st)
	}
	// A listed state attaches.
	if _, err := r.Attach(ctx, st); err != nil {
		t.Errorf("attach listed state: %v", err)
	}

	ins, err := dockerClient(t).ContainerInspect(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	var volume string
	for _, m := range ins.Mounts {
		if m.Destination == "/workspace" && m.Type == "volume" {
			volume = m.Name
		}
	}
	if volume == "" {
		t.Fatalf("no workspace volume in %+v", ins.Mounts)
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := dockerClient(t).ContainerInspect(ctx, sb.ID()); !cerrdefs.IsNotFound(err) {
		t.Errorf("container still there after destroy: %v", err)
	}
	if _, err := dockerClient(t).VolumeInspect(ctx, volume); !cerrdefs.IsNotFound(err) {
		t.Errorf("workspace volume %s still there after destroy: %v", volume, err)
	}
	err = sb.Destroy(ctx)
	if !errors.Is(err, sandboxes.ErrNotFound) || !strings.Contains(err.Error(), sb.ID()) {
		t.Errorf("destroy twice = %v, want ErrNotFound naming %s", err, sb.ID())
	}
	if _, err := r.Attach(ctx, st); !errors.Is(err, sandboxes.ErrNotFound) {
		t.Errorf("attach destroyed = %v, want ErrNotFound", err)
	}
	if err := sb.Stop(ctx); !errors.Is(err, sandboxes.ErrNotFound) {
		t.Errorf("stop destroyed = %v, want ErrNotFound", err)
	}
	if _, err := sb.Exec(ctx, sandboxes.ExecRequest{Command: "true"}); !errors.Is(err, sandboxes.ErrNotFound) {
		t.Errorf("exec destroyed = %v, want ErrNotFound", err)
	}
	if _, err := b.Create(ctx, sandboxes.Spec{Labels: map[string]string{dockersandbox.LabelSandbox: "x"}}); !errors.Is(err, sandboxes.ErrInvalid) {
		t.Errorf("reserved label = %v, want ErrInvalid", err)
	}
	if _, err := b.Create(ctx, sandboxes.Spec{Root: "/elsewhere"}); !errors.Is(err, sandboxes.ErrInvalid) {
		t.Errorf("root = %v, want ErrInvalid", err)
	}
}

func TestDockerConcurrentExec(t *testing.T) {
	_, _, sb := setup(t)
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			res, err := sb.Exec(context.Background(), sandboxes.ExecRequest{Command: "echo $N; sleep 1", Env: map[string]string{"N": strconv.Itoa(i)}})
			if err == nil && res.Stdout.String() != strconv.Itoa(i)+"\n" {
				err = errors.New("wrong output " + res.Stdout.String())
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// buildImage builds a small image on top of the test image (no registry
// needed) and removes it when the test ends.
func buildImage(t *testing.T, dockerfile string) string {
	t.Helper()
	requireDocker(t)
	ctx := context.Background()
	cli := dockerClient(t)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(dockerfile))})
	tw.Write([]byte(dockerfile))
	tw.Close()
	tag := "agentbot-sandbox-test-derived:" + randHex(4)
	resp, err := cli.ImageBuild(ctx, &buf, build.ImageBuildOptions{Tags: []string{tag}, Remove: true, ForceRemove: true,
		BuildArgs: map[string]*string{"BASE": ptr(testImage())}})
	if err != nil {
		t.Fatalf("building %s: %v", tag, err)
	}
	err = jsonmessage.DisplayJSONMessagesStream(resp.Body, io.Discard, 0, false, nil)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("building %s: %v", tag, err)
	}
	t.Cleanup(func() {
		if _, err := cli.ImageRemove(context.Background(), tag, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil {
			t.Errorf("removing %s: %v", tag, err)
		}
	})
	return tag
}

func ptr[T any](v T) *T { return &v }

// TestDockerImageWorkspace checks an image that brings files in
// /workspace (root's, in a read-only directory) and an ENV of its own: the
// files become the exec user's, the ENV does not reach commands, and
// Restore can move the image's files aside.
func TestDockerImageWorkspace(t *testing.T) {
	img := buildImage(t, `ARG BASE
FROM $BASE
ENV IMAGE_VAR=from-the-image
RUN mkdir -p /workspace/pre && echo pre > /workspace/pre/file && chown -R 0:0 /workspace/pre && chmod 555 /workspace/pre
`)
	b := newBackend(t, dockersandbox.Options{})
	r := registry(t, b)
	sb := create(t, r, sandboxes.Spec{Image: img})
	ctx := context.Background()
	if got := sh(t, sb, "cat pre/file; stat -c '%u %a' pre pre/file"); got != "pre\n1000 555\n1000 644\n" {
		t.Errorf("image's workspace files: %q", got)
	}
	if got := sh(t, sb, "env"); strings.Contains(got, "IMAGE_VAR") || strings.Contains(got, "HOSTNAME") {
		t.Errorf("the image's or Docker's environment reached the command:\n%s", got)
	}
	if err := sb.Instance().Restore(ctx, bytes.NewReader(tarOf(t, "fresh.txt", "fresh"))); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, sb, "ls -A"); got != "fresh.txt\n" {
		t.Errorf("after restore: %q", got)
	}
}

func tarOf(t testing.TB, name, body string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body)), ModTime: time.Now()})
	tw.Write([]byte(body))
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestDockerUser checks that every user choice can write, restore and own
// its files.
func TestDockerUser(t *testing.T) {
	for _, tc := range []struct{ user, id string }{
		{"", "1000:1000"},
		{"root", "0:0"},
		{"nobody", "65534:65534"},
		{"4321:1000", "4321:1000"},
	} {
		t.Run(cmp.Or(tc.user, "default"), func(t *testing.T) {
			b := newBackend(t, dockersandbox.Options{User: tc.user})
			sb := create(t, registry(t, b), sandboxes.Spec{})
			ctx := context.Background()
			if got := strings.TrimSpace(sh(t, sb, "echo $(id -u):$(id -g)")); got != tc.id {
				t.Errorf("id = %s, want %s", got, tc.id)
			}
			if err := sb.WriteFile(ctx, "d/f.txt", []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			sh(t, sb, "mkdir -p mine/ro && chmod 555 mine/ro && echo y >> d/f.txt")
			var snap bytes.Buffer
			if _, err := sb.Snapshot(ctx, &snap); err != nil {
				t.Fatal(err)
			}
			if _, err := sb.Restore(ctx, &snap); err != nil {
				t.Fatal(err)
			}
			if got := sh(t, sb, "find . -exec stat -c %u:%g {} + | sort -u"); got != tc.id+"\n" {
				t.Errorf("owners = %q, want %s", got, tc.id)
			}
			if got := sh(t, sb, "cat d/f.txt && touch d/new && ls -A /workspace"); got != "xy\nd\nmine\n" {
				t.Errorf("after restore: %q", got)
			}
		})
	}
}
