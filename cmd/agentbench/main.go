// Command agentbench measures what agentbot adds to the work it does, next
// to a baseline doing the same work in the same run: a bare Temporal
// workflow with the same activities on the same dev server, or the plain
// tools underneath (tar, zstd, the docker CLI). It starts what it needs —
// a Temporal dev server, Redis, the OpenAI-compatible fake with a set
// latency, the local and Docker sandboxes — runs baseline and product
// interleaved (A B A B …), prints one table with the median, min and max
// of each measure, and writes it, with a PNG of the scaling runs, to
// docs/benchmarks.md and docs/benchmarks.png.
//
//	go run ./cmd/agentbench            # the full run (make bench)
//	go run ./cmd/agentbench -quick     # small sizes, two runs (make bench-quick, CI)
//	go run ./cmd/agentbench -only P1,P9 -runs 9
//
// Absolute times on a shared machine are noise; every verdict is a ratio
// to a baseline measured in the same run. Each measure says its baseline
// and target in the table; docs/benchmarks.md explains them.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"
)

// settings are the command's flags.
type settings struct {
	quick    bool
	runs     int
	only     map[string]bool
	treeMB   int
	sessions int // P6: idle sessions
	out      string
	png      string
	keep     bool
	verbose  bool
	cpuprof  string
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == bareWorkerArg {
		// The bare worker of P6, a process of its own so that its memory
		// can be read apart (see idle.go).
		if err := runBareWorker(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "agentbench bare worker:", err)
			os.Exit(1)
		}
		return
	}
	var s settings
	var only string
	flag.BoolVar(&s.quick, "quick", false, "small sizes and 2 runs per measure: checks that every measure still runs (CI)")
	flag.IntVar(&s.runs, "runs", 0, "runs per measure (default 7; -quick 2)")
	flag.StringVar(&only, "only", "", "comma-separated measures to run (P1,…,P9); default all")
	flag.IntVar(&s.treeMB, "mb", 0, "size of the big workspace tree in MB (default 200; -quick 20)")
	flag.IntVar(&s.sessions, "sessions", 0, "P6: idle sessions on one worker (default 1000; -quick 60)")
	flag.StringVar(&s.out, "out", "", "write the table as Markdown to this file (make bench: docs/benchmarks.md)")
	flag.StringVar(&s.png, "png", "", "write the plot of the scaling runs to this PNG (make bench: docs/benchmarks.png)")
	flag.BoolVar(&s.keep, "keep", false, "keep the work directory (logs, state) for reading after the run")
	flag.BoolVar(&s.verbose, "v", false, "log each run")
	flag.StringVar(&s.cpuprof, "cpuprofile", "", "write a CPU profile of this process (the product's worker and gateway, the bare worker, the fakes) to this file")
	flag.Parse()
	if s.runs == 0 {
		s.runs = 7
		if s.quick {
			s.runs = 2
		}
	}
	if s.treeMB == 0 {
		s.treeMB = 200
		if s.quick {
			s.treeMB = 20
		}
	}
	if s.sessions == 0 {
		s.sessions = 1000
		if s.quick {
			s.sessions = 60
		}
	}
	if only != "" {
		s.only = map[string]bool{}
		for _, m := range strings.Split(only, ",") {
			m = strings.ToUpper(strings.TrimSpace(m))
			if !slices.Contains(measureNames, m) {
				fmt.Fprintf(os.Stderr, "agentbench: unknown measure %q (known: %s)\n", m, strings.Join(measureNames, ","))
				os.Exit(2)
			}
			s.only[m] = true
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if s.cpuprof != "" {
		f, err := os.Create(s.cpuprof)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "agentbench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(ctx, s); err != nil {
		fmt.Fprintln(os.Stderr, "agentbench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// measureNames are the measures, in the order they run and are printed.
var measureNames = []string{"P1", "P2", "P3", "P4", "P5", "P6", "P7", "P8", "P9"}

func (s settings) wants(m string) bool { return s.only == nil || s.only[m] }

func run(ctx context.Context, s settings) error {
	began := time.Now()
	work, err := os.MkdirTemp("", "agentbench-")
	if err != nil {
		return err
	}
	if s.keep {
		fmt.Fprintf(os.Stderr, "work directory: %s\n", work)
	} else {
		defer os.RemoveAll(work)
	}
	logFile, err := os.Create(work + "/agentbench.log")
	if err != nil {
		return err
	}
	defer logFile.Close()
	var logOut io.Writer = logFile
	logger := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelWarn}))

	env, err := startEnv(ctx, work, s, logger)
	if err != nil {
		return err
	}
	defer env.close()

	rep := &report{settings: s, started: began}
	steps := []struct {
		name string
		run  func(context.Context, *benchEnv, *report) error
	}{
		{"P1", measureTurnOverhead},
		{"P2", measureBigWorkspace},
		{"P3", measureDockerExec},
		{"P4", measureSnapshot},
		{"P5", measureSwitchFork},
		{"P6", measureIdle},
		{"P7", measureThroughput},
		{"P8", measureChatCalls},
		{"P9", measureRoundTrips},
	}
	for _, st := range steps {
		if !s.wants(st.name) {
			continue
		}
		t0 := time.Now()
		fmt.Fprintf(os.Stderr, "== %s …\n", st.name)
		if err := st.run(ctx, env, rep); err != nil {
			return fmt.Errorf("%s: %w", st.name, err)
		}
		fmt.Fprintf(os.Stderr, "   %s took %s\n", st.name, time.Since(t0).Round(time.Second))
	}
	rep.elapsed = time.Since(began)
	rep.machine = fmt.Sprintf("%s/%s, %d CPUs, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
	fmt.Println(rep.text())
	if s.out != "" {
		if err := os.WriteFile(s.out, []byte(rep.markdown(s.png)), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "wrote %s\n", s.out)
	}
	if s.png != "" {
		if err := rep.plot(s.png); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "wrote %s\n", s.png)
	}
	if failed := rep.missed(); len(failed) > 0 {
		fmt.Fprintf(os.Stderr, "targets missed: %s (see the notes)\n", strings.Join(failed, ", "))
	}
	return nil
}
