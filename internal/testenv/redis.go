package testenv

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"
)

// redisStartTimeout bounds how long a redis-server may take to answer PING.
const redisStartTimeout = 30 * time.Second

// RedisServer is a real redis-server on a loopback port, with no
// persistence: its data is gone when it stops. Start it with StartRedis (in
// a test) or StartRedisServer (in TestMain). Its methods are safe for
// concurrent use.
type RedisServer struct {
	bin  string
	port int

	mu   sync.Mutex
	cmd  *exec.Cmd
	dir  string        // the running server's working directory
	done chan struct{} // closed when cmd has exited
}

// StartRedis starts a redis-server for t and stops it when t ends. ctx
// bounds the start only. A missing redis-server binary fails t (never
// skips it) naming scripts/setup.sh --test.
func StartRedis(ctx context.Context, t testing.TB) *RedisServer {
	t.Helper()
	s, err := startRedis(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// StartRedisServer starts a redis-server for TestMain; the caller must call
// Stop. A missing redis-server binary is an error naming
// scripts/setup.sh --test.
func StartRedisServer() (*RedisServer, error) {
	return startRedis(context.Background())
}

func startRedis(ctx context.Context) (*RedisServer, error) {
	bin, err := findRedisServer()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, redisStartTimeout)
	defer cancel()
	// A free port is found by binding :0 and closing it; another process may
	// take it before redis-server binds, so try a few.
	var last error
	for range 5 {
		port, err := freePort()
		if err != nil {
			return nil, fmt.Errorf("starting redis-server: %w", err)
		}
		s := &RedisServer{bin: bin, port: port}
		if last = s.start(ctx); last == nil {
			return s, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, last
}

// findRedisServer returns the redis-server binary: $AGENTBOT_REDIS_SERVER,
// else redis-server on $PATH.
func findRedisServer() (string, error) {
	name := "redis-server"
	if v := os.Getenv("AGENTBOT_REDIS_SERVER"); v != "" {
		name = v
	}
	bin, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("the tests need redis-server (run scripts/setup.sh --test, or apt-get install redis-server): %w", err)
	}
	return bin, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// URL is the server's address as a go-redis URL (database 0).
func (s *RedisServer) URL() string {
	return "redis://" + s.Addr() + "/0"
}

// Addr is the server's host:port.
func (s *RedisServer) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Stop kills the server (as a crash would: clients see their connections
// reset) and waits for it to exit. Stopping a stopped server does nothing.
func (s *RedisServer) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
}

func (s *RedisServer) stopLocked() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	_ = os.RemoveAll(s.dir)
	s.cmd, s.dir, s.done = nil, "", nil
}

// Restart stops the server, if running, and starts a new, empty one on the
// same port, for tests of a cache going down and coming back.
func (s *RedisServer) Restart(ctx context.Context) error {
	s.mu.Lock()
	s.stopLocked()
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, redisStartTimeout)
	defer cancel()
	// The port can linger briefly after the kill; start retries until ctx
	// ends.
	for {
		err := s.start(ctx)
		if err == nil || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// start runs redis-server on s.port and waits until it answers PING.
func (s *RedisServer) start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return fmt.Errorf("redis-server on port %d is already running", s.port)
	}
	// No persistence is configured, so redis-server writes nothing; its own
	// directory still keeps a stray SAVE away from the package under test.
	dir, err := os.MkdirTemp("", "agentbot-redis-")
	if err != nil {
		return fmt.Errorf("starting redis-server: %w", err)
	}
	out := &Buffer{}
	cmd := exec.Command(s.bin,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--daemonize", "no",
		"--logfile", "",
	)
	cmd.Stdout = out
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return fmt.Errorf("starting %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	for {
		err := pingRedis(ctx, s.Addr())
		if err == nil {
			s.cmd, s.dir, s.done = cmd, dir, done
			return nil
		}
		select {
		case <-done:
			_ = os.RemoveAll(dir)
			return fmt.Errorf("redis-server on port %d exited: %s", s.port, bytes.TrimSpace(out.Bytes()))
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			<-done
			_ = os.RemoveAll(dir)
			return fmt.Errorf("redis-server on port %d did not answer PING (%w); its output: %s", s.port, err, bytes.TrimSpace(out.Bytes()))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// pingRedis sends one inline PING and expects +PONG.
func pingRedis(ctx context.Context, addr string) error {
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return errors.New("unexpected reply to PING: " + strconv.Quote(line))
	}
	return nil
}

// Buffer is a bytes.Buffer safe for concurrent use: a process (or a
// worker) writes while a test reads.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// Bytes returns a copy of what was written.
func (b *Buffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// String returns what was written.
func (b *Buffer) String() string { return string(b.Bytes()) }
