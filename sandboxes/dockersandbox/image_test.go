package dockersandbox_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbot/agentbot/sandboxes"
	"github.com/agentbot/agentbot/sandboxes/dockersandbox"
)

// recordingEngine is the real Docker engine seen through a reverse proxy
// that records every API request ("GET /v1.41/images/..."): a backend given
// its Host talks to the engine as usual, and the test sees what it asked.
func recordingEngine(t *testing.T) (host string, requests func() []string) {
	t.Helper()
	requireDocker(t)
	daemon := dockerClient(t).DaemonHost()
	u, err := url.Parse(daemon)
	if err != nil {
		t.Fatalf("docker daemon address %q: %v", daemon, err)
	}
	network, addr := u.Scheme, u.Host
	switch {
	case u.Scheme == "unix":
		addr = u.Path
	case u.Scheme == "tcp" && os.Getenv("DOCKER_TLS_VERIFY") == "":
	default:
		t.Fatalf("recordingEngine cannot proxy the daemon at %s (only unix sockets and plain tcp)", daemon)
	}
	var (
		mu   sync.Mutex
		seen []string
	)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", "docker"
			mu.Lock()
			seen = append(seen, pr.In.Method+" "+pr.In.URL.Path)
			mu.Unlock()
		},
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}},
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	return "tcp://" + srv.Listener.Addr().String(), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// asked returns the requests whose path contains part.
func asked(requests []string, part string) []string {
	var out []string
	for _, r := range requests {
		if strings.Contains(r, part) {
			out = append(out, r)
		}
	}
	return out
}

// TestDockerMissingOwnImage: with one of agentbot's own images missing,
// Available says so at once (ErrUnavailable, naming the image and the
// command that builds it), and neither Available nor Create asks any
// registry for it: no registry has it, and a pull would only fail after a
// while with a less useful error. The engine's API requests are recorded:
// a pull is POST /images/create, a registry lookup GET /distribution/.
func TestDockerMissingOwnImage(t *testing.T) {
	for _, tc := range []struct {
		name  string
		image string
		hints []string
	}{
		{"full", "agentbot-sandbox:missing-" + randHex(4), []string{
			"scripts/build-sandbox-image.sh agentbot-sandbox:missing-",
			"docker build -t agentbot-sandbox:missing-",
			" sandboxes/dockersandbox",
		}},
		{"test", "agentbot-sandbox-test:missing-" + randHex(4), []string{
			"scripts/build-test-image.sh",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host, requests := recordingEngine(t)
			b, err := dockersandbox.New(dockersandbox.Options{Host: host, Image: tc.image})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			check := func(what string, err error) {
				t.Helper()
				if err == nil {
					t.Errorf("%s with the missing image %s succeeded", what, tc.image)
					return
				}
				if !errors.Is(err, sandboxes.ErrUnavailable) {
					t.Errorf("%s: error does not match ErrUnavailable: %v", what, err)
				}
				for _, want := range append([]string{tc.image, "not pulled"}, tc.hints...) {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("%s: error does not say %q: %v", what, want, err)
					}
				}
			}
			check("Available", b.Available(ctx))
			inst, err := b.Create(ctx, sandboxes.Spec{})
			if err == nil {
				inst.Destroy(ctx)
			}
			check("Create", err)
			if len(asked(requests(), "/images/")) == 0 {
				t.Fatalf("the engine was never asked about the image; requests: %q", requests())
			}
			for _, part := range []string{"/images/create", "/distribution/"} {
				if got := asked(requests(), part); len(got) > 0 {
					t.Errorf("the backend asked a registry for %s, which no registry has: %q", tc.image, got)
				}
			}
		})
	}
}

// TestDockerAvailableRegistryImage: an image of a registry that is not on
// the engine makes Available ask the registry for it (the distribution
// API, no download), and report it unavailable when the registry does not
// serve it. A present image needs no registry at all. The .invalid domain
// never resolves, so the registry's answer is the same with or without a
// network.
func TestDockerAvailableRegistryImage(t *testing.T) {
	for _, tc := range []struct {
		name, image string
		ok          bool
		registry    bool
	}{
		{"missing", "registry.invalid/agentbot/none:" + randHex(4), false, true},
		{"present", testImage(), true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host, requests := recordingEngine(t)
			b, err := dockersandbox.New(dockersandbox.Options{Host: host, Image: tc.image})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err = b.Available(ctx)
			switch {
			case tc.ok && err != nil:
				t.Errorf("Available = %v, want nil", err)
			case !tc.ok && (!errors.Is(err, sandboxes.ErrUnavailable) || !strings.Contains(err.Error(), tc.image)):
				t.Errorf("Available = %v, want ErrUnavailable naming %s", err, tc.image)
			}
			if got := asked(requests(), "/distribution/"); (len(got) > 0) != tc.registry {
				t.Errorf("registry lookups %q, want some: %v", got, tc.registry)
			}
			if got := asked(requests(), "/images/create"); len(got) > 0 {
				t.Errorf("Available pulled: %q", got)
			}
		})
	}
}

func TestOwnImage(t *testing.T) {
	for _, tc := range []struct {
		image string
		own   bool
	}{
		{"agentbot-sandbox", true},
		{"agentbot-sandbox:latest", true},
		{"agentbot-sandbox:dev", true},
		{"agentbot-sandbox@sha256:" + strings.Repeat("ab", 32), true},
		{"agentbot-sandbox-test:latest", true},
		{"docker.io/library/agentbot-sandbox:latest", true},
		{"library/agentbot-sandbox", true},
		{"ghcr.io/org/agentbot-sandbox:1", false},
		{"localhost:5000/agentbot-sandbox:latest", false},
		{"org/agentbot-sandbox", false},
		{"agentbot-sandboxes:latest", false},
		{"debian:bookworm", false},
	} {
		t.Run(tc.image, func(t *testing.T) {
			if got := dockersandbox.OwnImage(tc.image); got != tc.own {
				t.Errorf("OwnImage(%q) = %v, want %v", tc.image, got, tc.own)
			}
		})
	}
}

// TestDockerFullImage runs the tools of the default image, as built by
// scripts/build-sandbox-image.sh, as the sandbox user in /workspace.
func TestDockerFullImage(t *testing.T) {
	requireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := dockerClient(t).ImageInspect(ctx, dockersandbox.DefaultImage)
	if err != nil {
		t.Fatalf("FULL IMAGE %s MISSING: build it with scripts/build-sandbox-image.sh (scripts/setup.sh --test runs it): %v",
			dockersandbox.DefaultImage, err)
	}
	if info.Config == nil || info.Config.Labels["agentbot.recipe"] == "" {
		t.Fatalf("%s has no label agentbot.recipe: it was not built by scripts/build-sandbox-image.sh "+
			"(and its containers would escape the leak check of scripts/test.sh); run the script", dockersandbox.DefaultImage)
	}
	b := newBackend(t, dockersandbox.Options{Image: dockersandbox.DefaultImage})
	sb := create(t, registry(t, b), sandboxes.Spec{Name: t.Name()})

	ins, err := dockerClient(t).ContainerInspect(context.Background(), sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	if ins.Config.Labels["agentbot.recipe"] == "" {
		t.Error("the container lacks the image's label agentbot.recipe: scripts/test.sh would not see it leak")
	}
	for _, tc := range []struct{ name, cmd, want string }{
		{"uid", "id -u", "1000\n"},
		{"user", "id -un; id -gn", "sandbox\nsandbox\n"},
		{"dir", "pwd; stat -c %u /workspace", "/workspace\n1000\n"},
		{"bash", "bash --version | head -1", "GNU bash"},
		{"git", "git --version", "git version "},
		{"python3", "python3 --version", "Python 3."},
		{"pip", "python3 -m pip --version", "pip "},
		{"venv", "python3 -m venv --without-pip /tmp/venv && /tmp/venv/bin/python -c 'import sys; print(sys.prefix)'", "/tmp/venv\n"},
		{"rg", "rg --version | head -1", "ripgrep "},
		{"jq", "echo '{\"a\":1}' | jq .a", "1\n"},
		{"gcc", "gcc --version | head -1", "gcc"},
		{"cc", "printf 'int main(void){return 7;}' >t.c && cc -o t t.c && (./t; echo $?) && rm t t.c", "7\n"},
		{"make", "make --version | head -1", "GNU Make"},
		{"curl", "curl --version | head -1", "curl "},
		{"tls", "test -s /etc/ssl/certs/ca-certificates.crt && echo ok", "ok\n"},
		{"less", "less --version | head -1", "less "},
		{"unzip", "unzip -v | head -1", "UnZip"},
		{"ps", "ps -o user= -p $$", "sandbox\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sh(t, sb, tc.cmd); !strings.Contains(got, tc.want) {
				t.Errorf("%s: got %q, want %q in it", tc.cmd, got, tc.want)
			}
		})
	}
}

// TestPackageListsInSync: scripts/build-sandbox-image.sh and the
// Dockerfile build the same image, so they install the same packages.
func TestPackageListsInSync(t *testing.T) {
	script := readFile(t, "../../scripts/build-sandbox-image.sh")
	_, rest, ok := strings.Cut(script, "\npackages=(\n")
	list, _, ok2 := strings.Cut(rest, "\n)")
	if !ok || !ok2 {
		t.Fatal("no packages=( ... ) list in scripts/build-sandbox-image.sh")
	}
	fromScript := strings.Fields(list)

	dockerfile := readFile(t, "Dockerfile")
	_, rest, ok = strings.Cut(dockerfile, "--no-install-recommends \\\n")
	if !ok {
		t.Fatal("no apt-get install --no-install-recommends in the Dockerfile")
	}
	var fromDockerfile []string
	for _, line := range strings.Split(rest, "\n") {
		line = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(line), "\\"))
		if strings.HasPrefix(line, "&&") {
			break
		}
		fromDockerfile = append(fromDockerfile, line)
	}
	slices.Sort(fromScript)
	slices.Sort(fromDockerfile)
	if len(fromScript) < 10 || !slices.Equal(fromScript, fromDockerfile) {
		t.Errorf("the package lists differ:\n  scripts/build-sandbox-image.sh: %v\n  Dockerfile:                     %v", fromScript, fromDockerfile)
	}
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
