package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/internal/config"
	"github.com/agentbot/agentbot/internal/devserver"
)

// bareWorkerArg makes agentbench the bare workflow's worker process (P6's
// baseline): agentbench bare-worker -address host:port -model URL -dir D.
const bareWorkerArg = "bare-worker"

func runBareWorker(args []string) error {
	fs := flag.NewFlagSet(bareWorkerArg, flag.ContinueOnError)
	addr := fs.String("address", "", "Temporal frontend")
	model := fs.String("model", "", "model base URL")
	dir := fs.String("dir", "", "directory commands run in")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := client.Dial(client.Options{HostPort: *addr, Logger: tlog.NewStructuredLogger(discardLogger())})
	if err != nil {
		return err
	}
	defer c.Close()
	w := newBareWorker(c, *model, *dir)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := w.Start(); err != nil {
		return err
	}
	<-ctx.Done()
	w.Stop()
	return nil
}

// process is a worker process of P6.
type process struct {
	cmd  *exec.Cmd
	done chan error
}

func startProcess(ctx context.Context, logPath string, env []string, name string, args ...string) (*process, error) {
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	p := &process{cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait(); log.Close() }()
	return p, nil
}

func (p *process) stop() {
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// rssMB reads a process's resident set size.
func rssMB(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

// measureIdle is P6: sessions that ran one turn each and then sat past
// their idle timeout, on one worker process of their own (cmd/worker, on
// a dev server of its own), at growing counts: the worker's RSS, and the
// sandboxes still up. Baseline: the bare workflow's worker holding as many
// idle bare sessions.
func measureIdle(ctx context.Context, e *benchEnv, r *report) error {
	e.setLatency(0)
	dir := filepath.Join(e.work, "p6")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	bin := filepath.Join(dir, "worker")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/worker").CombinedOutput(); err != nil {
		return fmt.Errorf("building cmd/worker (run agentbench from the repository's root): %w: %s", err, out)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	log, err := os.Create(filepath.Join(dir, "temporal.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	srv, err := devserver.Start(ctx, devserver.Options{Path: os.Getenv("AGENTBOT_TEMPORAL_BIN"), UIPort: -1, Stdout: log, Stderr: log})
	if err != nil {
		return err
	}
	defer srv.Stop()
	env := append(os.Environ(),
		"TEMPORAL_ADDRESS="+srv.Address(),
		"AGENTBOT_STATE_DIR="+filepath.Join(dir, "state"),
		"OPENAI_BASE_URL="+e.model.URL(),
		"OPENAI_API_KEY=agentbench",
		"AGENTBOT_BACKENDS=local",
		"AGENTBOT_HTTP_ADDR=off",
		"AGENTBOT_LOG_LEVEL=warn",
	)
	pprofAddr, err := freeAddr()
	if err != nil {
		return err
	}
	env = append(env, "AGENTBOT_PPROF_ADDR="+pprofAddr)
	worker, err := startProcess(ctx, filepath.Join(dir, "worker.log"), env, bin)
	if err != nil {
		return err
	}
	defer worker.stop()
	bareDir := filepath.Join(dir, "bare")
	os.MkdirAll(bareDir, 0o755)
	bare, err := startProcess(ctx, filepath.Join(dir, "bare.log"), os.Environ(), self, bareWorkerArg,
		"-address", srv.Address(), "-model", e.model.URL(), "-dir", bareDir)
	if err != nil {
		return err
	}
	defer bare.stop()
	c, err := client.Dial(client.Options{HostPort: srv.Address(), Logger: tlog.NewStructuredLogger(e.logger)})
	if err != nil {
		return err
	}
	defer c.Close()
	sessions := agentflow.NewClient(c)

	const idle = 5 * time.Second
	steps := []int{0, e.s.sessions / 4, e.s.sessions / 2, e.s.sessions}
	var prodS, bareS series
	prodS.Name, bareS.Name = "agentbot worker", "bare worker"
	made := 0
	var up int
	var lastProd, lastBare float64
	var createTime time.Duration
	for _, n := range steps {
		t0 := time.Now()
		// Create the sessions up to n, 25 at once, each with one turn.
		todo := n - made
		if todo > 0 {
			sem := make(chan struct{}, 25)
			errs := make(chan error, todo)
			for i := made; i < n; i++ {
				sem <- struct{}{}
				go func() {
					defer func() { <-sem }()
					thread := fmt.Sprintf("term:p6-%d", i)
					_, err := sessions.SendAndWait(ctx, agentflow.AgentInput{ThreadKey: thread, Requester: "U-bench",
						Options: agentflow.AgentOptions{IdleTimeout: idle}},
						agentflow.MessageRequest{ID: fmt.Sprintf("p6-%d", i), Text: "sh: true", Author: "bench", User: "U-bench"})
					if err == nil {
						_, err = bareTurn(ctx, c, fmt.Sprintf("bare-p6-%d", i), "sh: true")
					}
					errs <- err
				}()
			}
			for i := 0; i < todo; i++ {
				if err := <-errs; err != nil {
					return fmt.Errorf("creating idle sessions: %w", err)
				}
			}
			made = n
			if n == e.s.sessions {
				createTime = time.Since(t0)
			}
		}
		// Past the idle timeout, and a moment for the stops.
		time.Sleep(idle + 3*time.Second)
		pr, err := rssMB(worker.cmd.Process.Pid)
		if err != nil {
			return err
		}
		br, err := rssMB(bare.cmd.Process.Pid)
		if err != nil {
			return err
		}
		prodS.X, prodS.Y = append(prodS.X, float64(n)), append(prodS.Y, pr)
		bareS.X, bareS.Y = append(bareS.X, float64(n)), append(bareS.Y, br)
		lastProd, lastBare = pr, br
		if e.s.verbose {
			fmt.Fprintf(os.Stderr, "   P6 %d sessions: worker %.0f MB, bare worker %.0f MB\n", n, pr, br)
		}
	}
	// The worker's heap and goroutines at the end, for pprof.
	for name, path := range map[string]string{"heap.pprof": "/debug/pprof/heap", "goroutines.txt": "/debug/pprof/goroutine?debug=1"} {
		if err := fetchTo(ctx, "http://"+pprofAddr+path, filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("worker profile: %w", err)
		}
	}
	if e.s.verbose {
		fmt.Fprintf(os.Stderr, "   P6 worker profiles: go tool pprof %s; %s\n", filepath.Join(dir, "heap.pprof"), filepath.Join(dir, "goroutines.txt"))
	}
	// Sandboxes still up after the idle timeout.
	for i := 0; i < made; i++ {
		v, err := sessions.State(ctx, fmt.Sprintf("term:p6-%d", i))
		if err != nil {
			return err
		}
		if v.SandboxUp {
			up++
		}
	}
	// What a bounded workflow cache costs: a turn on the oldest session
	// (pushed out of the worker's cache when there are more sessions than
	// AGENTBOT_WORKFLOW_CACHE: it replays its history first) against one
	// on the newest (still cached). Both restart their sandbox.
	resume := func(i int) (time.Duration, error) {
		t0 := time.Now()
		_, err := sessions.SendAndWait(ctx, agentflow.AgentInput{ThreadKey: fmt.Sprintf("term:p6-%d", i), Requester: "U-bench"},
			agentflow.MessageRequest{ID: fmt.Sprintf("p6-resume-%d", i), Text: "sh: true", Author: "bench", User: "U-bench"})
		return time.Since(t0), err
	}
	oldest, err := resume(0)
	if err != nil {
		return fmt.Errorf("resuming an idle session: %w", err)
	}
	newest, err := resume(made - 1)
	if err != nil {
		return fmt.Errorf("resuming an idle session: %w", err)
	}
	n := e.s.sessions
	x := row{ID: "P6", Measure: fmt.Sprintf("%d idle sessions: worker RSS", n), Baseline: "bare worker, as many idle workflows", Unit: "MB",
		Base: sample{lastBare}, Prod: sample{lastProd}, Ratio: sample{lastProd}, Absolute: true, Target: "≤ 150 MB"}
	ok := lastProd <= 150
	x.Met = &ok
	x.Note = fmt.Sprintf("creating the %d sessions (25 at once, one turn each, and as many bare ones) took %s; after the idle timeout %d sandboxes were still up. "+
		"The worker keeps %s sessions' workflow state in memory (AGENTBOT_WORKFLOW_CACHE); a turn on the oldest idle session, which replays its history, took %s, one on the newest %s (both restart the sandbox).",
		n, createTime.Round(time.Second), up, workflowCache(),
		oldest.Round(time.Millisecond), newest.Round(time.Millisecond))
	r.add(x)
	y := row{ID: "P6", Measure: "sandboxes up after the idle timeout", Baseline: "—", Unit: "sandboxes", Ratio: sample{float64(up)}, Absolute: true, Target: "0"}
	ok2 := up == 0
	y.Met = &ok2
	r.add(y)
	target := 150.0
	r.charts = append(r.charts, chart{Title: "P6: idle sessions vs worker RSS", XLabel: "idle sessions", YLabel: "RSS (MB)",
		Series: []series{bareS, prodS}, Target: &target})
	return nil
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// fetchTo writes what url answers to path.
func fetchTo(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// workflowCache is the worker's AGENTBOT_WORKFLOW_CACHE as P6 runs it.
func workflowCache() string {
	if v := os.Getenv("AGENTBOT_WORKFLOW_CACHE"); v != "" {
		return v
	}
	for _, v := range config.Vars {
		if v.Name == "AGENTBOT_WORKFLOW_CACHE" {
			return v.Default + " (the default)"
		}
	}
	return "?"
}
