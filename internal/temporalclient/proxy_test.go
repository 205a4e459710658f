package temporalclient_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// tlsProxy terminates TLS in front of the dev server, which has no TLS of
// its own, and copies bytes both ways to its plain port. With client CAs it
// requires and verifies a client certificate (mTLS).
type tlsProxy struct {
	ln      net.Listener
	backend string

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	clients []string // common names of the client certificates, one per handshake that verified
	closing bool     // set by the cleanup: connections are no longer served
	wg      sync.WaitGroup
}

// startTLSProxy listens on a free port of 127.0.0.1 with the server
// certificate cert; clientCAs nil means no client certificate is asked for.
// The test's cleanup closes it and every connection through it.
func startTLSProxy(t *testing.T, cert tls.Certificate, clientCAs *x509.CertPool, backend string) *tlsProxy {
	t.Helper()
	p := &tlsProxy{backend: backend, conns: map[net.Conn]struct{}{}}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{"h2"},
		MinVersion:   tls.VersionTLS12,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) > 0 {
				p.mu.Lock()
				p.clients = append(p.clients, cs.PeerCertificates[0].Subject.CommonName)
				p.mu.Unlock()
			}
			return nil
		},
	}
	if clientCAs != nil {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		cfg.ClientCAs = clientCAs
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.ln = ln
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		p.closing = true
		p.mu.Unlock()
		p.dropConns()
		p.wg.Wait()
	})
	return p
}

// Addr is the proxy's host:port.
func (p *tlsProxy) Addr() string { return p.ln.Addr().String() }

// Clients returns the common names of the client certificates verified so
// far, oldest first.
func (p *tlsProxy) Clients() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.clients...)
}

// dropConns closes every open connection, so that clients connect (and
// shake hands) again.
func (p *tlsProxy) dropConns() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

// track registers c for dropConns; false means the proxy is closing.
func (p *tlsProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *tlsProxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

func (p *tlsProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c.(*tls.Conn))
	}
}

func (p *tlsProxy) serve(c *tls.Conn) {
	defer p.wg.Done()
	defer c.Close()
	if !p.track(c) {
		return
	}
	defer p.untrack(c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.HandshakeContext(ctx); err != nil {
		return // the client hears the alert
	}
	var d net.Dialer
	b, err := d.DialContext(ctx, "tcp", p.backend)
	if err != nil {
		return
	}
	defer b.Close()
	if !p.track(b) {
		return
	}
	defer p.untrack(b)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(b, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, b); done <- struct{}{} }()
	<-done
	_ = c.Close()
	_ = b.Close()
	<-done
}

// grpcProxy stands in for Temporal Cloud's front door: a gRPC server over
// TLS that checks "authorization: Bearer <key>" on every call, refuses a call
// without the right key (Unauthenticated), and passes the others, frame by
// frame, to the dev server.
type grpcProxy struct {
	addr    string
	wantKey string
	backend *grpc.ClientConn

	mu    sync.Mutex
	calls []call
}

// call is what the proxy saw of one call.
type call struct {
	method        string
	authorization []string
}

// startGRPCProxy serves on a free port of 127.0.0.1 with the server
// certificate cert; the test's cleanup stops it.
func startGRPCProxy(t *testing.T, cert tls.Certificate, backend, wantKey string) *grpcProxy {
	t.Helper()
	conn, err := grpc.NewClient(backend, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	p := &grpcProxy{wantKey: wantKey, backend: conn}
	srv := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})),
		grpc.ForceServerCodec(rawCodec{}),
		grpc.UnknownServiceHandler(p.handle),
	)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	served := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(served) }()
	t.Cleanup(func() {
		srv.Stop()
		<-served
		_ = conn.Close()
	})
	return p
}

// Calls returns the calls seen so far.
func (p *grpcProxy) Calls() []call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]call(nil), p.calls...)
}

func (p *grpcProxy) handle(_ any, ss grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(ss)
	in, _ := metadata.FromIncomingContext(ss.Context())
	p.mu.Lock()
	p.calls = append(p.calls, call{method: method, authorization: in.Get("authorization")})
	p.mu.Unlock()
	if a := in.Get("authorization"); len(a) != 1 || a[0] != "Bearer "+p.wantKey {
		return status.Error(codes.Unauthenticated, "invalid API key")
	}
	// Pass on the caller's own metadata (temporal-namespace, client
	// name and version), not the transport's or the credentials.
	out := metadata.MD{}
	for k, v := range in {
		if strings.HasPrefix(k, ":") || strings.HasPrefix(k, "grpc-") ||
			k == "content-type" || k == "user-agent" || k == "te" || k == "authorization" {
			continue
		}
		out[k] = v
	}
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ss.Context(), out))
	defer cancel()
	cs, err := p.backend.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, method, grpc.ForceCodec(rawCodec{}))
	if err != nil {
		return err
	}
	sent := make(chan error, 1)
	go func() {
		for {
			var msg []byte
			if err := ss.RecvMsg(&msg); err != nil {
				if errors.Is(err, io.EOF) {
					sent <- cs.CloseSend()
				} else {
					sent <- err
				}
				return
			}
			if err := cs.SendMsg(&msg); err != nil {
				sent <- err
				return
			}
		}
	}()
	for first := true; ; first = false {
		var msg []byte
		if err := cs.RecvMsg(&msg); err != nil {
			ss.SetTrailer(cs.Trailer())
			if errors.Is(err, io.EOF) {
				return <-sent
			}
			return err // the dev server's status, as it gave it
		}
		if first {
			if h, err := cs.Header(); err == nil {
				_ = ss.SendHeader(h)
			}
		}
		if err := ss.SendMsg(&msg); err != nil {
			return err
		}
	}
}

// rawCodec passes messages through as bytes, so the proxy needs no
// knowledge of Temporal's services.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }

func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }
