// Package devserver starts and stops a local Temporal development server by
// running the real `temporal` CLI (`temporal server start-dev`). It backs the
// product's embedded default mode: with no TEMPORAL_ADDRESS configured, the bot
// starts one of these with its state in a SQLite file, so sessions survive a
// restart of the bot.
//
// The server is a child process in its own process group. It lives until
// [Server.Stop] is called or the context given to [Start] is done, whichever
// comes first. If the parent process dies without stopping it (SIGKILL, a
// crash), the server is left running; it is not tied to the parent's life.
package devserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
)

// Defaults applied by [Start] to zero-valued [Options] fields.
const (
	DefaultHost      = "127.0.0.1"
	DefaultNamespace = "default"
	DefaultLogLevel  = "error"
)

// DBFileName is the name of the SQLite file kept in [Options.StateDir].
const DBFileName = "temporal.db"

// BinaryName is the file name of the Temporal CLI looked for by [FindBinary].
const BinaryName = "temporal"

const (
	// stopGrace is how long Stop waits after SIGTERM before SIGKILL.
	stopGrace = 10 * time.Second
	// defaultStartTimeout bounds the wait for readiness when ctx has no deadline.
	defaultStartTimeout = 60 * time.Second
	// outputTailSize is how much of the server's recent output is kept for errors.
	outputTailSize = 64 << 10
	// autoPortAttempts is how often Start retries with new ports when it picked
	// them itself and another process took one between picking and binding.
	autoPortAttempts = 3
)

// Sentinel errors returned (wrapped) by [Start]; check them with errors.Is.
var (
	// ErrBinaryNotFound means the temporal CLI was not found. The message tells
	// the user to run scripts/setup.sh.
	ErrBinaryNotFound = errors.New("temporal CLI not found; run scripts/setup.sh to install it into .bin, or put 'temporal' on PATH")
	// ErrPortInUse means the server could not bind one of its ports.
	ErrPortInUse = errors.New("port already in use")
	// ErrExited means the server process exited before it answered.
	ErrExited = errors.New("exited before it was ready")
)

// Options configures [Start]. The zero value is valid: a server on a free
// port of 127.0.0.1 with an in-memory store, a UI on port+1000, namespace
// "default", log level "error" and output discarded.
type Options struct {
	// Path is the temporal CLI binary. Empty means: look for "temporal" on
	// PATH, then for .bin/temporal in the directory of the running executable,
	// the working directory, or any of their parents (the repository's .bin,
	// where scripts/setup.sh installs it). See [FindBinary].
	Path string
	// StateDir holds the SQLite database <StateDir>/temporal.db, so workflows
	// survive a restart. It is created (0700) if missing. Empty means an
	// in-memory store that is lost when the server stops.
	StateDir string
	// Host is the IP address the server binds to (default 127.0.0.1).
	Host string
	// Port is the frontend gRPC port; 0 picks a free one.
	Port int
	// UIPort is the Web UI port: 0 means Port+1000, -1 means no UI (headless).
	UIPort int
	// Namespace is created at start if missing (default "default", which
	// always exists) and is the one the readiness check describes.
	Namespace string
	// LogLevel is the server's log level: debug, info, warn, error or never
	// (default "error").
	LogLevel string
	// Stdout and Stderr receive the server's output; nil discards it. The last
	// 64 KiB of both is kept regardless and included in start errors.
	Stdout, Stderr io.Writer
}

// Server is a running Temporal dev server started by [Start]. Its methods are
// safe for concurrent use.
type Server struct {
	cmd    *exec.Cmd
	addr   string
	uiAddr string
	tail   *tailBuffer

	exited  chan struct{} // closed once the process has been waited for
	waitErr error         // the process's exit error; read after exited is closed

	stopOnce sync.Once
	stopping chan struct{} // closed when Stop begins
	stopErr  error
}

// Start runs `temporal server start-dev` and waits until the server answers a
// health check and knows opts.Namespace.
//
// ctx bounds both the wait for readiness and the server's life: when ctx is
// done, before or after Start returns, the server is stopped as by
// [Server.Stop]. Pass a context that lives as long as the server should; if it
// has no deadline, the wait for readiness is bounded by 60 s. To bound only
// the start, cancel a separate timer and call Stop yourself.
//
// Errors wrap [ErrBinaryNotFound] when there is no CLI, [ErrPortInUse] when a
// port is taken, and [ErrExited] when the process died early; a *StartError
// carries the server's last output.
func Start(ctx context.Context, opts Options) (*Server, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	bin, err := FindBinary(opts.Path)
	if err != nil {
		return nil, err
	}
	dbFile := ""
	if opts.StateDir != "" {
		if err := os.MkdirAll(opts.StateDir, 0o700); err != nil {
			return nil, fmt.Errorf("devserver: create state dir: %w", err)
		}
		dbFile = filepath.Join(opts.StateDir, DBFileName)
	}
	if _, ok := ctx.Deadline(); !ok {
		// Only the readiness wait gets the default bound; the server's life
		// still follows the caller's ctx (watched in start).
		readyCtx, cancel := context.WithTimeout(ctx, defaultStartTimeout)
		defer cancel()
		return startRetrying(ctx, readyCtx, bin, dbFile, opts)
	}
	return startRetrying(ctx, ctx, bin, dbFile, opts)
}

func startRetrying(lifeCtx, readyCtx context.Context, bin, dbFile string, opts Options) (*Server, error) {
	attempts := 1
	if opts.Port == 0 {
		attempts = autoPortAttempts
	}
	var err error
	for range attempts {
		port, uiPort := opts.Port, opts.UIPort
		if port == 0 {
			port, err = freePort(opts.Host, uiPort == 0)
			if err != nil {
				return nil, err
			}
		}
		if uiPort == 0 {
			uiPort = port + 1000
		}
		var s *Server
		s, err = start(lifeCtx, readyCtx, bin, dbFile, opts, port, uiPort)
		if err == nil || !errors.Is(err, ErrPortInUse) {
			return s, err
		}
	}
	return nil, err
}

func (o Options) withDefaults() (Options, error) {
	if o.Host == "" {
		o.Host = DefaultHost
	}
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.LogLevel == "" {
		o.LogLevel = DefaultLogLevel
	}
	switch o.LogLevel {
	case "debug", "info", "warn", "error", "never":
	default:
		return o, fmt.Errorf("devserver: log level %q: want debug, info, warn, error or never", o.LogLevel)
	}
	if o.Port < 0 || o.Port > 65535 {
		return o, fmt.Errorf("devserver: port %d out of range 0-65535", o.Port)
	}
	if o.UIPort < -1 || o.UIPort > 65535 {
		return o, fmt.Errorf("devserver: UI port %d: want 1-65535, 0 (port+1000) or -1 (headless)", o.UIPort)
	}
	if o.UIPort == 0 && o.Port+1000 > 65535 {
		return o, fmt.Errorf("devserver: port %d leaves no room for a UI on port+1000; set UIPort", o.Port)
	}
	return o, nil
}

// args returns the CLI arguments for `temporal server start-dev`.
func args(opts Options, dbFile string, port, uiPort int) []string {
	a := []string{
		"server", "start-dev",
		"--ip", opts.Host,
		"--port", strconv.Itoa(port),
	}
	if uiPort < 0 {
		a = append(a, "--headless")
	} else {
		a = append(a, "--ui-port", strconv.Itoa(uiPort))
	}
	if dbFile != "" {
		a = append(a, "--db-filename", dbFile)
	}
	return append(a,
		"--namespace", opts.Namespace,
		"--log-level", opts.LogLevel,
		// The server otherwise calls home to check for a newer version; that
		// is noise (and a hang behind a proxy) for an embedded server.
		"--dynamic-config-value", "frontend.enableServerVersionCheck=false",
	)
}

func start(lifeCtx, readyCtx context.Context, bin, dbFile string, opts Options, port, uiPort int) (*Server, error) {
	tail := newTailBuffer(outputTailSize)
	cmd := exec.Command(bin, args(opts, dbFile, port, uiPort)...)
	cmd.Stdout = teeTo(opts.Stdout, tail)
	cmd.Stderr = teeTo(opts.Stderr, tail)
	// If a grandchild keeps the output pipes open after the server exits, do
	// not let Wait hang on them.
	cmd.WaitDelay = 5 * time.Second
	setProcessGroup(cmd)

	s := &Server{
		cmd:      cmd,
		addr:     net.JoinHostPort(dialHost(opts.Host), strconv.Itoa(port)),
		tail:     tail,
		exited:   make(chan struct{}),
		stopping: make(chan struct{}),
	}
	if uiPort > 0 {
		s.uiAddr = "http://" + net.JoinHostPort(dialHost(opts.Host), strconv.Itoa(uiPort))
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("devserver: run %s: %w", bin, err)
	}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.exited)
	}()
	go func() {
		select {
		case <-lifeCtx.Done():
			_ = s.Stop()
		case <-s.stopping:
		case <-s.exited:
		}
	}()

	if err := s.waitReady(readyCtx, opts.Namespace); err != nil {
		_ = s.Stop()
		return nil, err
	}
	return s, nil
}

// waitReady polls the server until it answers or the process exits.
func (s *Server) waitReady(ctx context.Context, namespace string) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		if lastErr = probe(ctx, s.addr, namespace); lastErr == nil {
			return nil
		}
		select {
		case <-s.exited:
			if ctx.Err() != nil {
				// The Start context ended and its watcher stopped the server.
				return &StartError{Addr: s.addr, Output: s.tail.String(),
					Err: fmt.Errorf("not ready: %w", ctx.Err())}
			}
			err := ErrExited
			if s.waitErr != nil {
				err = fmt.Errorf("%w: %w", ErrExited, s.waitErr)
			}
			out := s.tail.String()
			if strings.Contains(out, "address already in use") {
				err = fmt.Errorf("%w: %w", ErrPortInUse, err)
			}
			return &StartError{Addr: s.addr, Output: out, Err: err}
		case <-ctx.Done():
			return &StartError{
				Addr:   s.addr,
				Output: s.tail.String(),
				Err:    fmt.Errorf("not ready (last check: %v): %w", lastErr, ctx.Err()),
			}
		case <-tick.C:
		}
	}
}

// probe dials the server, runs the gRPC health check and describes namespace.
func probe(ctx context.Context, addr, namespace string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, client.Options{
		HostPort:  addr,
		Namespace: namespace,
		Logger:    sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
	})
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		return err
	}
	_, err = c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace})
	return err
}

// Address returns the frontend gRPC address to dial, e.g. "127.0.0.1:7233".
// When the server binds an unspecified address (0.0.0.0, ::) this names the
// loopback address instead.
func (s *Server) Address() string { return s.addr }

// UIAddress returns the Web UI's URL, e.g. "http://127.0.0.1:8233", or ""
// when the server runs headless.
func (s *Server) UIAddress() string { return s.uiAddr }

// Done returns a channel closed when the server process has exited, whether
// through Stop, the Start context, or on its own.
func (s *Server) Done() <-chan struct{} { return s.exited }

// Stop stops the server: SIGTERM to its process group, then SIGKILL if it has
// not exited within 10 s. It returns once the process has exited. It is
// idempotent; later calls return the first call's result. The error is nil
// when the server stopped because it was asked to, and describes the exit
// (with the server's last output) when it had already died on its own.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		close(s.stopping)
		select {
		case <-s.exited:
			// It died before anyone asked it to.
			cause := errors.New("exited on its own")
			if s.waitErr != nil {
				cause = fmt.Errorf("exited on its own: %w", s.waitErr)
			}
			s.stopErr = &StartError{Addr: s.addr, Output: s.tail.String(), Err: cause}
			killGroup(s.cmd)
			return
		default:
		}
		terminateGroup(s.cmd)
		t := time.NewTimer(stopGrace)
		defer t.Stop()
		select {
		case <-s.exited:
		case <-t.C:
			killGroup(s.cmd)
			<-s.exited
		}
		// Reap anything the server left behind in its group.
		killGroup(s.cmd)
	})
	return s.stopErr
}

// StartError describes a server that failed to start or died; it carries the
// server's last output (up to 64 KiB) for the log.
type StartError struct {
	// Addr is the frontend address the server was meant to answer on.
	Addr string
	// Output is the tail of the server's stdout and stderr.
	Output string
	// Err is the cause; it wraps the package's sentinel errors.
	Err error
}

// Error returns the cause followed by the server's last output.
func (e *StartError) Error() string {
	msg := "devserver: temporal dev server on " + e.Addr + ": " + e.Err.Error()
	if out := strings.TrimSpace(e.Output); out != "" {
		msg += "\nlast server output:\n" + out
	}
	return msg
}

// Unwrap returns the cause.
func (e *StartError) Unwrap() error { return e.Err }

// FindBinary resolves the temporal CLI. A non-empty path is used as given (a
// bare name is looked up on PATH). An empty path looks for "temporal" on PATH,
// then for .bin/temporal in the directory of the running executable, the
// working directory, and each of their parents, nearest first, so a binary
// installed by scripts/setup.sh into <repo>/.bin is found from anywhere in
// the repository. The error wraps [ErrBinaryNotFound].
func FindBinary(path string) (string, error) {
	name := BinaryName
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	if path != "" {
		p, err := exec.LookPath(path)
		if err != nil {
			return "", fmt.Errorf("devserver: %s: %w", path, ErrBinaryNotFound)
		}
		return p, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	var starts []string
	if exe, err := os.Executable(); err == nil {
		if exe, err := filepath.EvalSymlinks(exe); err == nil {
			starts = append(starts, filepath.Dir(exe))
		}
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, dir := range starts {
		for {
			p := filepath.Join(dir, ".bin", name)
			if isExecutable(p) {
				return p, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", fmt.Errorf("devserver: looked on PATH and in .bin above the executable and working directory: %w", ErrBinaryNotFound)
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	if err != nil || fi.IsDir() {
		return false
	}
	return runtime.GOOS == "windows" || fi.Mode().Perm()&0o111 != 0
}

// dialHost turns an unspecified bind address into one a client can dial.
func dialHost(host string) string {
	ip := net.ParseIP(host)
	switch {
	case ip == nil || !ip.IsUnspecified():
		return host
	case ip.To4() != nil:
		return "127.0.0.1"
	default:
		return "::1"
	}
}

// freePort asks the kernel for a free port on host. With withUI it also
// checks that port+1000 is free for the UI.
func freePort(host string, withUI bool) (int, error) {
	var lastErr error
	for range 20 {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return 0, fmt.Errorf("devserver: find a free port on %s: %w", host, err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !withUI {
			l.Close()
			return port, nil
		}
		if port+1000 > 65535 {
			l.Close()
			lastErr = fmt.Errorf("port %d leaves no room for a UI on port+1000", port)
			continue
		}
		ui, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port+1000)))
		l.Close()
		if err != nil {
			lastErr = err
			continue
		}
		ui.Close()
		return port, nil
	}
	return 0, fmt.Errorf("devserver: find a free port pair on %s: %w", host, lastErr)
}

func teeTo(w io.Writer, tail *tailBuffer) io.Writer {
	if w == nil {
		return tail
	}
	return io.MultiWriter(tail, w)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func newTailBuffer(max int) *tailBuffer { return &tailBuffer{max: max} }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) >= t.max {
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return n, nil
	}
	if over := len(t.buf) + len(p) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
