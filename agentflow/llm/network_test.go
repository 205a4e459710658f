package llm_test

import (
	"context"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbot/agentbot/agentflow/llm"
	"github.com/agentbot/agentbot/internal/fakeopenai"
)

// Go reads the proxy variables and the CA configuration once per process
// (http.ProxyFromEnvironment and the system cert pool cache them), so the
// tests below set them for a child process, the test binary re-run with
// only TestNetworkChild, which makes one Complete call configured by the
// LLM_CHILD_* variables.

func TestNetworkChild(t *testing.T) {
	base := os.Getenv("LLM_CHILD_BASE_URL")
	if base == "" {
		t.Skip("run by TestProxyFromEnvironment and TestSSLCertFile")
	}
	c, err := llm.New(llm.Config{
		BaseURL: base,
		APIKey:  os.Getenv("LLM_CHILD_KEY"),
		API:     llm.API(os.Getenv("LLM_CHILD_API")),
		Timeout: 20 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Complete(context.Background(), userRequest("ping"))
	if os.Getenv("LLM_CHILD_WANT_ERROR") != "" {
		if err == nil {
			t.Fatal("Complete succeeded, want an error")
		}
		t.Logf("error as expected: %v", err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != "echo: ping" {
		t.Fatalf("answer = %q", resp.Message.Content)
	}
}

// runChild runs TestNetworkChild with env added to an environment cleaned of
// proxy and CA settings, and fails t unless the child passed.
func runChild(t *testing.T, env ...string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestNetworkChild$", "-test.count=1", "-test.v")
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(name) {
		case "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "REQUEST_METHOD", "SSL_CERT_FILE", "SSL_CERT_DIR":
			continue // REQUEST_METHOD would make Go ignore HTTP_PROXY (CGI)
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestNetworkChild") {
		t.Fatalf("child failed: %v\n%s", err, out)
	}
}

func TestProxyFromEnvironment(t *testing.T) {
	srv := fakeopenai.New(fakeopenai.Options{APIKey: testKey})
	defer srv.Close()
	target, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	// Go never proxies requests to localhost or loopback addresses, so the
	// client is given a made-up name; only the proxy knows where it is.
	alias := "fakeopenai.test:" + target.Port()
	base := "http://" + alias + "/v1"

	var proxied atomic.Int32
	direct := &http.Transport{} // no proxy of its own
	defer direct.CloseIdleConnections()
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A forward proxy receives the absolute URL.
		if r.URL.Host != alias {
			http.Error(w, "unexpected target "+r.URL.String(), http.StatusBadGateway)
			return
		}
		proxied.Add(1)
		out := r.Clone(r.Context())
		out.RequestURI = ""
		out.URL.Host = target.Host
		resp, err := direct.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	defer proxy.Close()

	for _, api := range apis {
		t.Run(string(api), func(t *testing.T) {
			before := proxied.Load()
			runChild(t,
				"HTTP_PROXY="+proxy.URL, "http_proxy="+proxy.URL, "NO_PROXY=", "no_proxy=",
				"LLM_CHILD_BASE_URL="+base, "LLM_CHILD_KEY="+testKey, "LLM_CHILD_API="+string(api))
			if n := proxied.Load() - before; n != 1 {
				t.Errorf("proxy forwarded %d requests, want 1", n)
			}
		})
	}
	t.Run("NO_PROXY", func(t *testing.T) {
		before := proxied.Load()
		// Bypassing the proxy, the client must resolve the made-up name
		// itself, and fails.
		runChild(t,
			"HTTP_PROXY="+proxy.URL, "http_proxy="+proxy.URL, "NO_PROXY=fakeopenai.test", "no_proxy=fakeopenai.test",
			"LLM_CHILD_BASE_URL="+base, "LLM_CHILD_KEY="+testKey, "LLM_CHILD_WANT_ERROR=1")
		if n := proxied.Load() - before; n != 0 {
			t.Errorf("proxy forwarded %d requests despite NO_PROXY", n)
		}
	})
}

func TestSSLCertFile(t *testing.T) {
	srv := fakeopenai.New(fakeopenai.Options{TLS: true, APIKey: testKey})
	defer srv.Close()
	dir := t.TempDir()
	certFile := filepath.Join(dir, "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(certFile, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	emptyDir := filepath.Join(dir, "certs")
	if err := os.Mkdir(emptyDir, 0o700); err != nil {
		t.Fatal(err)
	}
	runChild(t, "SSL_CERT_FILE="+certFile, "SSL_CERT_DIR="+emptyDir,
		"LLM_CHILD_BASE_URL="+srv.URL(), "LLM_CHILD_KEY="+testKey)
}

func TestUntrustedCertificate(t *testing.T) {
	srv := fakeopenai.New(fakeopenai.Options{TLS: true, APIKey: testKey})
	defer srv.Close()

	c := newClient(t, srv, llm.APIChat, nil)
	_, err := c.Complete(context.Background(), userRequest("ping"))
	if !llm.IsPermanent(err) || !strings.Contains(err.Error(), "SSL_CERT_FILE") {
		t.Errorf("err = %v, want a permanent certificate error that mentions SSL_CERT_FILE", err)
	}
	if len(srv.Requests()) != 0 {
		t.Error("the request reached the server")
	}

	// A client that trusts the certificate explicitly works.
	c = newClient(t, srv, llm.APIChat, func(cfg *llm.Config) { cfg.HTTPClient = srv.Client() })
	resp, err := c.Complete(context.Background(), userRequest("ping"))
	if err != nil || resp.Message.Content != "echo: ping" {
		t.Errorf("with the server's client: %q, %v", resp.Message.Content, err)
	}
}
