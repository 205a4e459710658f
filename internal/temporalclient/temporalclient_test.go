package temporalclient_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentbot/agentbot/internal/config"
	"github.com/agentbot/agentbot/internal/devserver"
	"github.com/agentbot/agentbot/internal/temporalclient"
	"github.com/agentbot/agentbot/internal/testenv"
)

// namespace is registered on the dev server; it is not "default", so that a
// call in the wrong namespace fails.
const namespace = "agentbot-tls-test"

// frontend is the dev server's plain (no TLS) host:port.
var frontend string

// markerID is the ID of a workflow started in namespace only.
const markerID = "agentbot-tls-test-marker"

// The API keys of the tests: the one the Cloud stand-in accepts, and a
// wrong one.
const (
	apiKey   = "tmprl-test-key-0123456789abcdef"
	wrongKey = "tmprl-wrong-key-fedcba9876543210"
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	bin, err := devserver.FindBinary(os.Getenv("AGENTBOT_TEMPORAL_BIN"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "these tests need the temporal CLI (set AGENTBOT_TEMPORAL_BIN or run scripts/setup.sh --test):", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out syncBuffer
	srv, err := testsuite.StartDevServer(ctx, testsuite.DevServerOptions{
		ExistingPath:  bin,
		LogLevel:      "error",
		Stdout:        &out,
		Stderr:        &out,
		ClientOptions: &client.Options{Namespace: namespace, Logger: testenv.Logger()},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the Temporal dev server (%s): %v\n%s", bin, err, out.String())
		return 1
	}
	defer func() { _ = srv.Stop() }()
	frontend = srv.FrontendHostPort()
	// A workflow only the test namespace has: a client finds it only if
	// it calls in that namespace. No worker runs it; it stays open.
	if _, err := srv.Client().ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: markerID, TaskQueue: "agentbot-tls-test-none"}, "Marker"); err != nil {
		fmt.Fprintln(os.Stderr, "starting the marker workflow:", err)
		return 1
	}
	return m.Run()
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// captureLogger returns an SDK logger that records everything, debug
// included, and the record.
func captureLogger() (tlog.Logger, *syncBuffer) {
	var buf syncBuffer
	return tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))), &buf
}

// pki is the certificates and files of one test.
type pki struct {
	ca, otherCA         *testCA
	server              pair
	caFile, otherCAFile string
	certFile, keyFile   string // a client certificate of ca
	otherCert, otherKey string // a client certificate of otherCA
}

func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	p := pki{ca: newCA(t, "agentbot test CA"), otherCA: newCA(t, "some other CA")}
	p.server = p.ca.issue(t, "frontend", true)
	mine := p.ca.issue(t, "agentbot-client", false)
	other := p.otherCA.issue(t, "stranger", false)
	p.caFile = writeFile(t, dir, "ca.pem", p.ca.pem)
	p.otherCAFile = writeFile(t, dir, "other-ca.pem", p.otherCA.pem)
	p.certFile = writeFile(t, dir, "client.pem", mine.certPEM)
	p.keyFile = writeFile(t, dir, "client-key.pem", mine.keyPEM)
	p.otherCert = writeFile(t, dir, "stranger.pem", other.certPEM)
	p.otherKey = writeFile(t, dir, "stranger-key.pem", other.keyPEM)
	return p
}

// useClient checks that c works in the test namespace: the health check,
// a call the client fills the namespace into (the dev server also has a
// "default" namespace, without the marker workflow), and a namespace lookup.
func useClient(t *testing.T, ctx context.Context, c client.Client) {
	t.Helper()
	if _, err := c.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		t.Fatalf("CheckHealth: %v", err)
	}
	if _, err := c.DescribeWorkflow(ctx, markerID, ""); err != nil {
		t.Fatalf("DescribeWorkflow of the marker in the client's namespace: %v", err)
	}
	resp, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace})
	if err != nil {
		t.Fatalf("DescribeNamespace: %v", err)
	}
	if got := resp.GetNamespaceInfo().GetName(); got != namespace {
		t.Fatalf("DescribeNamespace: name %q, want %q", got, namespace)
	}
}

// TestDial connects through TLS-terminating proxies in front of a real dev
// server, in every way the configuration allows and in the ways it goes
// wrong, and checks what a working client can do and what a failure says.
func TestDial(t *testing.T) {
	p := newPKI(t)
	mtls := startTLSProxy(t, p.server.tls, p.ca.pool(), frontend)
	serverTLS := startTLSProxy(t, p.server.tls, nil, frontend)
	cloud := startGRPCProxy(t, p.server.tls, frontend, apiKey)

	tests := []struct {
		name    string
		addr    string
		cfg     config.Config // TemporalNamespace is filled in
		wantErr []string      // substrings of the error; none: Dial must succeed
		check   func(t *testing.T, calls []call)
	}{
		{
			name: "mTLS with CA and client certificate",
			addr: mtls.Addr(),
			cfg:  config.Config{TemporalTLS: true, TemporalCA: p.caFile, TemporalClientCert: p.certFile, TemporalClientKey: p.keyFile},
			check: func(t *testing.T, _ []call) {
				if got := mtls.Clients(); !slices.Contains(got, "agentbot-client") {
					t.Fatalf("the proxy verified client certificates %q, want agentbot-client among them", got)
				}
			},
		},
		{
			name: "server-only TLS with CA",
			addr: serverTLS.Addr(),
			cfg:  config.Config{TemporalTLS: true, TemporalCA: p.caFile},
		},
		{
			name: "server name override held by the certificate",
			addr: serverTLS.Addr(),
			cfg:  config.Config{TemporalTLS: true, TemporalCA: p.caFile, TemporalServerName: "frontend.agentbot.test"},
		},
		{
			name:    "server name override not held by the certificate",
			addr:    serverTLS.Addr(),
			cfg:     config.Config{TemporalTLS: true, TemporalCA: p.caFile, TemporalServerName: "elsewhere.agentbot.test"},
			wantErr: []string{"does not hold the name", "TEMPORAL_TLS_SERVER_NAME"},
		},
		{
			name:    "mTLS server but no client certificate",
			addr:    mtls.Addr(),
			cfg:     config.Config{TemporalTLS: true, TemporalCA: p.caFile},
			wantErr: []string{"asks for a client certificate", "TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CLIENT_KEY_PATH"},
		},
		{
			name:    "mTLS server refuses a client certificate of another CA",
			addr:    mtls.Addr(),
			cfg:     config.Config{TemporalTLS: true, TemporalCA: p.caFile, TemporalClientCert: p.otherCert, TemporalClientKey: p.otherKey},
			wantErr: []string{"refused the client certificate", p.otherCert},
		},
		{
			name:    "wrong CA",
			addr:    serverTLS.Addr(),
			cfg:     config.Config{TemporalTLS: true, TemporalCA: p.otherCAFile},
			wantErr: []string{"not signed by the CA in " + p.otherCAFile, "set TEMPORAL_TLS_SERVER_CA_CERT_PATH"},
		},
		{
			name:    "private CA but system roots",
			addr:    serverTLS.Addr(),
			cfg:     config.Config{TemporalTLS: true},
			wantErr: []string{"system's roots", "set TEMPORAL_TLS_SERVER_CA_CERT_PATH"},
		},
		{
			name:    "TLS on against the plain dev server",
			addr:    frontend,
			cfg:     config.Config{TemporalTLS: true, TemporalCA: p.caFile},
			wantErr: []string{"does not speak TLS", "TEMPORAL_TLS=false"},
		},
		{
			name:    "TLS off against a TLS server",
			addr:    serverTLS.Addr(),
			cfg:     config.Config{},
			wantErr: []string{"without TLS", "set TEMPORAL_TLS=true"},
		},
		{
			name: "API key over TLS",
			addr: cloud.addr,
			cfg:  config.Config{TemporalTLS: true, TemporalCA: p.caFile, TemporalAPIKey: apiKey},
			check: func(t *testing.T, calls []call) {
				var methods []string
				for _, c := range calls {
					methods = append(methods, c.method)
					if len(c.authorization) != 1 || c.authorization[0] != "Bearer "+apiKey {
						t.Errorf("%s: authorization %q, want the bearer token of the API key", c.method, c.authorization)
					}
				}
				for _, m := range []string{
					"/temporal.api.workflowservice.v1.WorkflowService/GetSystemInfo",
					"/grpc.health.v1.Health/Check",
					"/temporal.api.workflowservice.v1.WorkflowService/DescribeWorkflowExecution",
				} {
					if !slices.Contains(methods, m) {
						t.Errorf("the proxy saw %q, not %s", methods, m)
					}
				}
			},
		},
		{
			name:    "wrong API key",
			addr:    cloud.addr,
			cfg:     config.Config{TemporalTLS: true, TemporalCA: p.caFile, TemporalAPIKey: wrongKey},
			wantErr: []string{"refused the credentials", "TEMPORAL_API_KEY"},
		},
		{
			name:    "API key to a server of an unknown CA",
			addr:    cloud.addr,
			cfg:     config.Config{TemporalTLS: true, TemporalCA: p.otherCAFile, TemporalAPIKey: apiKey},
			wantErr: []string{"not signed by the CA in", "set TEMPORAL_TLS_SERVER_CA_CERT_PATH"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			logger, logs := captureLogger()
			tt.cfg.TemporalNamespace = namespace
			before := len(cloud.Calls())
			c, err := temporalclient.Dial(ctx, tt.cfg, tt.addr, logger)
			if c != nil {
				t.Cleanup(c.Close)
			}
			defer func() {
				for _, key := range []string{apiKey, wrongKey} {
					if err != nil && strings.Contains(err.Error(), key) {
						t.Errorf("the error holds an API key: %v", err)
					}
					if strings.Contains(logs.String(), key) {
						t.Errorf("the log holds an API key:\n%s", logs)
					}
				}
			}()
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatal("Dial succeeded, want an error")
				}
				t.Logf("error: %v", err)
				mode := "over TLS"
				if !tt.cfg.TemporalTLS {
					mode = "without TLS"
				}
				for _, w := range append([]string{tt.addr + " " + mode}, tt.wantErr...) {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error lacks %q:\n%v", w, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Dial: %v", err)
			}
			useClient(t, ctx, c)
			if tt.check != nil {
				tt.check(t, cloud.Calls()[before:])
			}
		})
	}
}

// TestOptions checks the options built from a configuration, and that a
// broken file is refused at the start, naming the file and what is wrong.
func TestOptions(t *testing.T) {
	p := newPKI(t)
	dir := t.TempDir()
	notPEM := writeFile(t, dir, "not.pem", []byte("hello, not a certificate\n"))
	mine := p.ca.issue(t, "agentbot-client", false)
	other := p.ca.issue(t, "another-client", false)
	keyOnly := writeFile(t, dir, "key-only.pem", mine.keyPEM)
	certAsKey := writeFile(t, dir, "cert-as-key.pem", mine.certPEM)
	mismatchedKey := writeFile(t, dir, "other-key.pem", other.keyPEM)
	missing := dir + "/missing.pem"
	// A line of the key's body, which no error may show.
	keyLine := strings.Split(string(mine.keyPEM), "\n")[1]

	tests := []struct {
		name    string
		cfg     config.Config
		wantErr []string
		check   func(t *testing.T, o client.Options)
	}{
		{name: "no TLS", cfg: config.Config{}, check: func(t *testing.T, o client.Options) {
			if o.ConnectionOptions.TLS != nil || o.Credentials != nil {
				t.Fatalf("TLS %v, credentials %v; want neither", o.ConnectionOptions.TLS, o.Credentials)
			}
		}},
		{name: "TLS with the system's roots", cfg: config.Config{TemporalTLS: true}, check: func(t *testing.T, o client.Options) {
			tc := o.ConnectionOptions.TLS
			if tc == nil || tc.RootCAs != nil || tc.MinVersion != tls.VersionTLS12 || tc.InsecureSkipVerify ||
				tc.ServerName != "" || tc.GetClientCertificate != nil || o.Credentials != nil {
				t.Fatalf("TLS config %+v, credentials %v", tc, o.Credentials)
			}
		}},
		{name: "TLS with CA, client certificate, server name and API key",
			cfg: config.Config{TemporalTLS: true, TemporalCA: p.caFile, TemporalClientCert: p.certFile, TemporalClientKey: p.keyFile,
				TemporalServerName: "frontend.agentbot.test", TemporalAPIKey: apiKey},
			check: func(t *testing.T, o client.Options) {
				tc := o.ConnectionOptions.TLS
				if tc == nil || tc.RootCAs == nil || tc.InsecureSkipVerify || tc.ServerName != "frontend.agentbot.test" ||
					tc.GetClientCertificate == nil || o.Credentials == nil {
					t.Fatalf("TLS config %+v, credentials %v", tc, o.Credentials)
				}
				cert, err := tc.GetClientCertificate(&tls.CertificateRequestInfo{})
				if err != nil || cert.Leaf == nil || cert.Leaf.Subject.CommonName != "agentbot-client" {
					t.Fatalf("GetClientCertificate: %v, %v", cert, err)
				}
			}},
		{name: "empty address", cfg: config.Config{}, wantErr: []string{"no Temporal frontend address"}},
		{name: "TLS off with TLS settings", cfg: config.Config{TemporalCA: p.caFile, TemporalServerName: "x"},
			wantErr: []string{"TEMPORAL_TLS=false", "TEMPORAL_TLS_SERVER_CA_CERT_PATH", "TEMPORAL_TLS_SERVER_NAME"}},
		{name: "API key without TLS", cfg: config.Config{TemporalAPIKey: apiKey},
			wantErr: []string{"TEMPORAL_TLS=false", "TEMPORAL_API_KEY"}},
		{name: "missing CA file", cfg: config.Config{TemporalTLS: true, TemporalCA: missing},
			wantErr: []string{"TEMPORAL_TLS_SERVER_CA_CERT_PATH", missing, "no such file"}},
		{name: "CA not PEM", cfg: config.Config{TemporalTLS: true, TemporalCA: notPEM},
			wantErr: []string{"TEMPORAL_TLS_SERVER_CA_CERT_PATH", notPEM, "not a PEM file"}},
		{name: "CA file without a certificate", cfg: config.Config{TemporalTLS: true, TemporalCA: keyOnly},
			wantErr: []string{keyOnly, "no CERTIFICATE block"}},
		{name: "client certificate without key", cfg: config.Config{TemporalTLS: true, TemporalClientCert: p.certFile},
			wantErr: []string{"set both or neither"}},
		{name: "missing client certificate", cfg: config.Config{TemporalTLS: true, TemporalClientCert: missing, TemporalClientKey: p.keyFile},
			wantErr: []string{"TEMPORAL_TLS_CLIENT_CERT_PATH", missing, "no such file"}},
		{name: "missing client key", cfg: config.Config{TemporalTLS: true, TemporalClientCert: p.certFile, TemporalClientKey: missing},
			wantErr: []string{"TEMPORAL_TLS_CLIENT_KEY_PATH", missing, "no such file"}},
		{name: "client certificate not PEM", cfg: config.Config{TemporalTLS: true, TemporalClientCert: notPEM, TemporalClientKey: p.keyFile},
			wantErr: []string{"TEMPORAL_TLS_CLIENT_CERT_PATH", notPEM, "not a PEM file"}},
		{name: "client key not PEM", cfg: config.Config{TemporalTLS: true, TemporalClientCert: p.certFile, TemporalClientKey: notPEM},
			wantErr: []string{"TEMPORAL_TLS_CLIENT_KEY_PATH", notPEM, "not a PEM file"}},
		{name: "client key file holds a certificate", cfg: config.Config{TemporalTLS: true, TemporalClientCert: p.certFile, TemporalClientKey: certAsKey},
			wantErr: []string{certAsKey, "no PRIVATE KEY block"}},
		{name: "client key does not match the certificate", cfg: config.Config{TemporalTLS: true, TemporalClientCert: p.certFile, TemporalClientKey: mismatchedKey},
			wantErr: []string{mismatchedKey, p.certFile, "does not go with"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.TemporalNamespace = namespace
			addr := "127.0.0.1:7233"
			if tt.name == "empty address" {
				addr = ""
			}
			logger, logs := captureLogger()
			o, err := temporalclient.Options(tt.cfg, addr, logger)
			if strings.Contains(logs.String(), apiKey) {
				t.Errorf("the log holds the API key:\n%s", logs)
			}
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatal("no error")
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error lacks %q: %v", w, err)
					}
				}
				for _, secret := range []string{apiKey, keyLine, "PRIVATE KEY-----"} {
					if strings.Contains(err.Error(), secret) {
						t.Errorf("error holds a secret (%q): %v", secret, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.HostPort != addr || o.Namespace != namespace || o.Logger != logger {
				t.Fatalf("HostPort %q, Namespace %q, Logger %v", o.HostPort, o.Namespace, o.Logger)
			}
			tt.check(t, o)
		})
	}
}

// TestClientCertificateRotation: the client certificate's files are read
// again at each handshake, so a pair rotated on disk (cert-manager) is
// presented on the next connection without a restart, and a pair caught
// half-written keeps the last good one in use.
func TestClientCertificateRotation(t *testing.T) {
	p := newPKI(t)
	proxy := startTLSProxy(t, p.server.tls, p.ca.pool(), frontend)
	dir := t.TempDir()
	first := p.ca.issue(t, "client-1", false)
	certFile := writeFile(t, dir, "tls.crt", first.certPEM)
	keyFile := writeFile(t, dir, "tls.key", first.keyPEM)

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	logger, logs := captureLogger()
	cfg := config.Config{TemporalNamespace: namespace, TemporalTLS: true, TemporalCA: p.caFile,
		TemporalClientCert: certFile, TemporalClientKey: keyFile}
	c, err := temporalclient.Dial(ctx, cfg, proxy.Addr(), logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	useClient(t, ctx, c)

	// reconnect drops the connection and waits for a call through a new
	// one; it returns the client certificate of that handshake.
	reconnect := func(t *testing.T) string {
		t.Helper()
		n := len(proxy.Clients())
		proxy.dropConns()
		deadline := time.After(30 * time.Second)
		for {
			_, err := c.CheckHealth(ctx, &client.CheckHealthRequest{})
			if got := proxy.Clients(); err == nil && len(got) > n {
				return got[len(got)-1]
			}
			select {
			case <-deadline:
				t.Fatalf("no new handshake after the connection was dropped (last error %v, client certificates %q)", err, proxy.Clients())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}

	second := p.ca.issue(t, "client-2", false)
	third := p.ca.issue(t, "client-3", false)
	steps := []struct {
		name      string
		cert, key []byte // new contents; nil leaves the file as it is
		want      string // the client certificate of the next handshake
		wantLog   string
	}{
		{name: "unchanged files", want: "client-1"},
		{name: "rotated pair", cert: second.certPEM, key: second.keyPEM, want: "client-2"},
		// The certificate is new, the key still the old one.
		{name: "half-written pair keeps the last good one", cert: third.certPEM, want: "client-2", wantLog: "keeping the last good pair"},
		{name: "completed pair", key: third.keyPEM, want: "client-3"},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if st.cert != nil {
				writeFile(t, dir, "tls.crt", st.cert)
			}
			if st.key != nil {
				writeFile(t, dir, "tls.key", st.key)
			}
			if got := reconnect(t); got != st.want {
				t.Fatalf("the handshake presented %q, want %q", got, st.want)
			}
			if st.wantLog != "" && !strings.Contains(logs.String(), st.wantLog) {
				t.Fatalf("the log lacks %q:\n%s", st.wantLog, logs)
			}
		})
	}
}
