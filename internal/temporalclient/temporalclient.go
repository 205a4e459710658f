// Package temporalclient turns agentbot's configuration into a connected
// Temporal client: the frontend's address and namespace, TLS (a private CA,
// a client certificate for mTLS that is re-read when it changes on disk, an
// overridden server name) and a Temporal Cloud API key. cmd/bot and
// cmd/worker dial through it, so both connect the same way.
//
// Certificate verification is never turned off. The API key is a secret: it
// is sent only over TLS, as the gRPC metadata "authorization: Bearer <key>",
// and never appears in a log line or an error of this package.
package temporalclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentbot/agentbot/internal/config"
	"github.com/agentbot/agentbot/internal/payloadcodec"
)

// Names of the environment variables, for errors and hints that tell an
// operator what to set.
const (
	envTLS        = "TEMPORAL_TLS"
	envCA         = "TEMPORAL_TLS_SERVER_CA_CERT_PATH"
	envClientCert = "TEMPORAL_TLS_CLIENT_CERT_PATH"
	envClientKey  = "TEMPORAL_TLS_CLIENT_KEY_PATH"
	envServerName = "TEMPORAL_TLS_SERVER_NAME"
	envAPIKey     = "TEMPORAL_API_KEY"
	envAddress    = "TEMPORAL_ADDRESS"
)

// redacted replaces the API key should it ever turn up in an error's text.
const redacted = "[redacted]"

// Options builds the client options of a connection to the Temporal frontend
// at hostPort (cfg.TemporalAddress, or the embedded dev server's address,
// which never uses TLS): HostPort, Namespace, Logger, and from cfg the TLS
// configuration and the API key credentials.
//
// With cfg.TemporalTLS the connection uses TLS 1.2 or later and verifies the
// server's certificate against cfg.TemporalCA (read once, here), or the
// system's roots when that is empty, for the name cfg.TemporalServerName or
// else the host of hostPort. A client certificate (cfg.TemporalClientCert and
// cfg.TemporalClientKey) is read here, so that a missing or broken file fails
// the start, and read again at each TLS handshake: when cert-manager or a
// Kubernetes secret rotates the files, the next connection presents the new
// pair. A pair that cannot be read at a handshake (a rotation half done)
// leaves the last good pair in use, with a warning on logger.
//
// Errors name the file and what is wrong with it, and never hold the API key.
// logger may be nil (the SDK then logs to stderr; this package logs nothing).
func Options(cfg config.Config, hostPort string, logger log.Logger) (client.Options, error) {
	if hostPort == "" {
		return client.Options{}, errors.New("temporalclient: no Temporal frontend address")
	}
	opts := client.Options{HostPort: hostPort, Namespace: cfg.TemporalNamespace, Logger: logger}
	if cfg.PayloadKeys != "" {
		codec, err := payloadcodec.Parse(cfg.PayloadKeys)
		if err != nil {
			return client.Options{}, fmt.Errorf("temporalclient: %w", err)
		}
		opts.DataConverter, opts.FailureConverter = codec.DataConverter(), codec.FailureConverter()
	}
	if !cfg.TemporalTLS {
		// Without TLS the SDK would switch TLS on by itself for an API
		// key; a configuration that asked for none is an error instead.
		var set []string
		for _, s := range []struct{ name, value string }{
			{envCA, cfg.TemporalCA}, {envClientCert, cfg.TemporalClientCert},
			{envClientKey, cfg.TemporalClientKey}, {envServerName, cfg.TemporalServerName},
			{envAPIKey, cfg.TemporalAPIKey},
		} {
			if s.value != "" {
				set = append(set, s.name)
			}
		}
		if len(set) > 0 {
			return client.Options{}, fmt.Errorf("temporalclient: %s=false but %s set: turn TLS on or unset them",
				envTLS, strings.Join(set, ", "))
		}
		return opts, nil
	}
	tlsConfig, err := newTLSConfig(cfg, logger)
	if err != nil {
		return client.Options{}, err
	}
	opts.ConnectionOptions.TLS = tlsConfig
	if cfg.TemporalAPIKey != "" {
		opts.Credentials = client.NewAPIKeyStaticCredentials(cfg.TemporalAPIKey)
	}
	return opts, nil
}

// Dial builds the options of cfg (see [Options]) and connects: it returns
// once the frontend at hostPort has answered, or the error of the attempt.
// ctx bounds the attempt only; the client lives until its Close.
//
// A failed attempt's error names the address and whether TLS was on, and,
// when the cause is recognisable (a server without TLS, a certificate from an
// unknown CA or for another name, a client certificate missing or refused,
// credentials refused), says which setting to change.
//
// Each of with is applied to the options before the dial: how cmd/* adds
// what is not connection configuration (the metrics handler, the tracing
// interceptor).
func Dial(ctx context.Context, cfg config.Config, hostPort string, logger log.Logger, with ...func(*client.Options)) (client.Client, error) {
	opts, err := Options(cfg, hostPort, logger)
	if err != nil {
		return nil, err
	}
	for _, f := range with {
		f(&opts)
	}
	c, err := client.DialContext(ctx, opts)
	if err == nil {
		return c, nil
	}
	mode := "without TLS"
	if cfg.TemporalTLS {
		mode = "over TLS"
	}
	msg := fmt.Sprintf("temporalclient: connecting to Temporal at %s %s (namespace %s)", hostPort, mode, cfg.TemporalNamespace)
	diagnosis := err.Error()
	var probeErr error
	if opts.ConnectionOptions.TLS != nil && ctx.Err() == nil {
		if probeErr = probeTLS(ctx, hostPort, opts.ConnectionOptions.TLS); probeErr != nil {
			diagnosis += "\n" + probeErr.Error()
		}
	}
	if h := hint(cfg, err, diagnosis); h != "" {
		msg += ": " + h
	}
	if probeErr != nil && !strings.Contains(err.Error(), probeErr.Error()) {
		msg += fmt.Sprintf(" (a TLS handshake alone: %v)", probeErr)
	}
	if cfg.TemporalAPIKey != "" && strings.Contains(msg+err.Error(), cfg.TemporalAPIKey) {
		// The SDK never puts the key in an error, but should one
		// ever do, the chain is dropped rather than passed on.
		return nil, errors.New(strings.ReplaceAll(msg+": "+err.Error(), cfg.TemporalAPIKey, redacted))
	}
	return nil, fmt.Errorf("%s: %w", msg, err)
}

// probeTLS shakes hands with the server at hostPort alone, to tell why a
// dial failed: gRPC writes its preface as soon as its side of the handshake
// is done, and with TLS 1.3 a server refuses a client certificate only
// after that, so gRPC often sees a broken pipe where the server had sent the
// reason in an alert. The probe writes nothing and reads the alert, if any.
// It returns nil when the server kept the connection (it accepted the
// handshake) or could not be reached at all.
func probeTLS(ctx context.Context, hostPort string, tc *tls.Config) error {
	cfg := tc.Clone()
	cfg.NextProtos = []string{"h2"}
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(hostPort)
		if err != nil {
			return nil
		}
		cfg.ServerName = host
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", hostPort)
	if err != nil {
		return nil // no TLS to tell of: the dial's own error says it
	}
	conn := tls.Client(raw, cfg)
	defer conn.Close()
	if err := conn.HandshakeContext(ctx); err != nil {
		return err
	}
	_ = conn.SetReadDeadline(time.Now().Add(probeRead))
	_, err = conn.Read(make([]byte, 1))
	var ne net.Error
	switch {
	case err == nil, errors.As(err, &ne) && ne.Timeout():
		return nil
	case errors.Is(err, io.EOF):
		return errors.New("the server closed the connection right after the TLS handshake")
	}
	return err
}

// Bounds of probeTLS: the whole probe, and the wait for an alert after the
// handshake (a server that refuses sends it at once).
const (
	probeTimeout = 5 * time.Second
	probeRead    = time.Second
)

// hint says what to change for a failed dial, or "" when the cause is not
// recognised. gRPC turns the TLS errors into text inside a status, so they
// are recognised by their words, in diagnosis: the dial's error and the
// probe's.
func hint(cfg config.Config, err error, diagnosis string) string {
	s := diagnosis
	has := func(subs ...string) bool {
		for _, sub := range subs {
			if strings.Contains(s, sub) {
				return true
			}
		}
		return false
	}
	var denied *serviceerror.PermissionDenied
	code := status.Code(err)
	switch {
	case has("first record does not look like a TLS handshake"):
		return fmt.Sprintf("the server does not speak TLS: set %s=false, or check %s", envTLS, envAddress)
	case has("certificate signed by unknown authority"):
		if cfg.TemporalCA == "" {
			return fmt.Sprintf("the server's certificate is not signed by a CA of the system's roots: set %s to the PEM file of the CA that signs it", envCA)
		}
		return fmt.Sprintf("the server's certificate is not signed by the CA in %s (%s): set %s to the PEM file of the CA that signs it", cfg.TemporalCA, envCA, envCA)
	case has("certificate is valid for", "certificate is not valid for any names", "doesn't contain any IP SANs"):
		return fmt.Sprintf("the server's certificate does not hold the name connected to: set %s to a name it holds, or check %s", envServerName, envAddress)
	case has("certificate has expired or is not yet valid"):
		return "the server's certificate has expired or is not yet valid (or this machine's clock is wrong)"
	case has("tls: certificate required", "tls: bad certificate", "tls: unknown certificate authority",
		"tls: certificate expired", "tls: unsupported certificate", "tls: certificate revoked", "tls: access denied",
		"closed the connection right after the TLS handshake"):
		if cfg.TemporalClientCert == "" {
			return fmt.Sprintf("the server asks for a client certificate (mTLS): set %s and %s", envClientCert, envClientKey)
		}
		return fmt.Sprintf("the server refused the client certificate in %s (%s): is it signed by a CA the server trusts, and still valid?", cfg.TemporalClientCert, envClientCert)
	case errors.As(err, &denied), code == codes.Unauthenticated, code == codes.PermissionDenied:
		if cfg.TemporalAPIKey != "" {
			return fmt.Sprintf("the server refused the credentials: check %s and its access to the namespace", envAPIKey)
		}
		return fmt.Sprintf("the server refused the connection's credentials: set %s, or a client certificate (%s, %s)", envAPIKey, envClientCert, envClientKey)
	case !cfg.TemporalTLS && has("server preface", "frame too large", "EOF", "connection reset by peer"):
		return fmt.Sprintf("the server closed a connection without TLS; if it expects TLS, set %s=true", envTLS)
	case has("connection refused"):
		return fmt.Sprintf("nothing listens there: is the server up, and %s right?", envAddress)
	}
	return ""
}

// newTLSConfig builds the TLS configuration of cfg; see [Options].
func newTLSConfig(cfg config.Config, logger log.Logger) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.TemporalServerName}
	if cfg.TemporalCA != "" {
		pool, err := readCAs(cfg.TemporalCA)
		if err != nil {
			return nil, err
		}
		tc.RootCAs = pool
	}
	switch {
	case cfg.TemporalClientCert != "" && cfg.TemporalClientKey != "":
		l := &certLoader{certPath: cfg.TemporalClientCert, keyPath: cfg.TemporalClientKey, logger: logger}
		if _, err := l.load(); err != nil {
			return nil, err
		}
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return l.load() }
	case cfg.TemporalClientCert != "" || cfg.TemporalClientKey != "":
		return nil, fmt.Errorf("temporalclient: %s and %s go together: set both or neither", envClientCert, envClientKey)
	}
	return tc, nil
}

// readCAs reads the PEM file of the server's CAs.
func readCAs(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("temporalclient: reading the server CA (%s): %w", envCA, err)
	}
	certs, err := parseCerts(data)
	if err != nil {
		return nil, fmt.Errorf("temporalclient: server CA %s (%s): %w", path, envCA, err)
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, nil
}

// parseCerts parses every CERTIFICATE block of a PEM file; it fails for a
// file with none, or with one that does not parse.
func parseCerts(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	sawPEM := false
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		sawPEM = true
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d does not parse: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	switch {
	case !sawPEM:
		return nil, errors.New("not a PEM file (no -----BEGIN line)")
	case len(certs) == 0:
		return nil, errors.New("no CERTIFICATE block in the PEM file")
	}
	return certs, nil
}

// certLoader reads the client certificate's pair of files and keeps the last
// good pair. It compares the files' bytes rather than their modification
// times, which a copy or a Kubernetes secret update may keep.
type certLoader struct {
	certPath, keyPath string
	logger            log.Logger

	mu              sync.Mutex
	certPEM, keyPEM []byte // the files as last read
	cert            *tls.Certificate
	lastErr         string // the last reload failure warned of
}

// load returns the pair on disk now, or the last good pair (with a warning)
// when the files cannot make one and there is a last good pair.
func (l *certLoader) load() (*tls.Certificate, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	certPEM, keyPEM, cert, err := l.read()
	if err == nil && cert == nil {
		return l.cert, nil // unchanged
	}
	if err != nil {
		if l.cert == nil {
			return nil, err
		}
		if msg := err.Error(); msg != l.lastErr && l.logger != nil {
			l.lastErr = msg
			l.logger.Warn("Temporal client certificate: keeping the last good pair", "error", msg)
		}
		return l.cert, nil
	}
	l.certPEM, l.keyPEM, l.cert, l.lastErr = certPEM, keyPEM, cert, ""
	if l.logger != nil {
		l.logger.Info("Temporal client certificate loaded", "file", l.certPath,
			"subject", cert.Leaf.Subject.String(), "not_after", cert.Leaf.NotAfter)
	}
	return cert, nil
}

// read reads both files; it returns a nil certificate and no error when they
// are the ones last loaded.
func (l *certLoader) read() (certPEM, keyPEM []byte, cert *tls.Certificate, err error) {
	certPEM, err = os.ReadFile(l.certPath)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("temporalclient: reading the client certificate (%s): %w", envClientCert, err)
	}
	keyPEM, err = os.ReadFile(l.keyPath)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("temporalclient: reading the client key (%s): %w", envClientKey, err)
	}
	if l.cert != nil && bytes.Equal(certPEM, l.certPEM) && bytes.Equal(keyPEM, l.keyPEM) {
		return nil, nil, nil, nil
	}
	if _, err := parseCerts(certPEM); err != nil {
		return nil, nil, nil, fmt.Errorf("temporalclient: client certificate %s (%s): %w", l.certPath, envClientCert, err)
	}
	if err := checkKeyPEM(keyPEM); err != nil {
		return nil, nil, nil, fmt.Errorf("temporalclient: client key %s (%s): %w", l.keyPath, envClientKey, err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("temporalclient: client key %s does not go with certificate %s: %w", l.keyPath, l.certPath, err)
	}
	return certPEM, keyPEM, &pair, nil
}

// checkKeyPEM checks that a key file holds a PEM private key block, so that
// its error says so; tls.X509KeyPair checks the rest. The key's bytes never
// enter an error.
func checkKeyPEM(data []byte) error {
	sawPEM := false
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		sawPEM = true
		if b.Type == "PRIVATE KEY" || strings.HasSuffix(b.Type, " PRIVATE KEY") {
			return nil
		}
	}
	if !sawPEM {
		return errors.New("not a PEM file (no -----BEGIN line)")
	}
	return errors.New("no PRIVATE KEY block in the PEM file")
}

// DataConverter is the data converter Dial gives the client: with
// AGENTBOT_PAYLOAD_KEYS the encrypting one, else nil (Temporal's default),
// for what is decoded outside the SDK's calls (memos read from a list).
func DataConverter(cfg config.Config) converter.DataConverter {
	if cfg.PayloadKeys == "" {
		return nil
	}
	codec, err := payloadcodec.Parse(cfg.PayloadKeys)
	if err != nil {
		return nil // Options refuses it first
	}
	return codec.DataConverter()
}
