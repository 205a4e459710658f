package sandboxbench

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// MB is the unit of the memory metrics, as of go test's MB/s: 10^6 bytes.
const MB = 1e6

// memProbe measures this process's peak memory while our code runs: the
// Go heap, sampled every 10ms, and, where Linux lets us reset it, the peak
// resident set size, which also counts the runtime, the binary and
// memory the heap has freed but not yet returned to the OS.
type memProbe struct {
	stop     chan struct{}
	peak     chan uint64
	rssOK    bool
	once     sync.Once
	peakHeap uint64
}

// heapMetric is live and not yet swept heap objects: runtime.MemStats'
// HeapAlloc, read without stopping the world.
const heapMetric = "/memory/classes/heap/objects:bytes"

// startMemProbe collects garbage, so what earlier benchmarks left does not
// count, and starts sampling.
func startMemProbe() *memProbe {
	debug.FreeOSMemory() // a GC, and freed pages back to the OS for the RSS
	p := &memProbe{stop: make(chan struct{}), peak: make(chan uint64, 1), rssOK: resetPeakRSS()}
	go func() {
		s := []metrics.Sample{{Name: heapMetric}}
		var peak uint64
		read := func() {
			metrics.Read(s)
			peak = max(peak, s[0].Value.Uint64())
		}
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for read(); ; read() {
			select {
			case <-p.stop:
				read()
				p.peak <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

// finish stops sampling; defer it, so a benchmark that fails leaves no
// sampler behind.
func (p *memProbe) finish() {
	p.once.Do(func() {
		close(p.stop)
		p.peakHeap = <-p.peak
	})
}

// report stops sampling and reports peak-heap-MB and, where it could be
// measured, peak-rss-MB. Call it after the b.Loop loop: the loop's start
// drops metrics reported before.
func (p *memProbe) report(b *testing.B) {
	p.finish()
	b.ReportMetric(float64(p.peakHeap)/MB, "peak-heap-MB")
	if !p.rssOK {
		return
	}
	if hwm, ok := peakRSS(); ok {
		b.ReportMetric(float64(hwm)/MB, "peak-rss-MB")
	}
}

// resetPeakRSS resets the kernel's high-water mark of this process's
// resident set to its current size (Linux: "5" into /proc/self/clear_refs).
func resetPeakRSS() bool {
	f, err := os.OpenFile("/proc/self/clear_refs", os.O_WRONLY, 0)
	if err != nil {
		return false
	}
	_, err = f.WriteString("5")
	return f.Close() == nil && err == nil
}

// peakRSS returns VmHWM of /proc/self/status, in bytes.
func peakRSS() (uint64, bool) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	return vmHWM(data)
}

// vmHWM parses the peak resident set size out of a /proc/<pid>/status.
func vmHWM(status []byte) (uint64, bool) {
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

// watchPeakRSS follows the peak resident set size (VmHWM) of a running
// child every 10ms; stop returns the last value read, 0 where /proc could
// not be read. It holds the child's /proc directory open, so once the
// child is reaped reads fail rather than find a process that reuses the
// pid.
//
// Rusage.Maxrss from Wait would be simpler and wrong: Go starts children
// with vfork, and Linux carries the peak of the address space a process
// leaves at exec into its Maxrss, so a child's Maxrss is never below this
// process's peak (golang/go#32054).
func watchPeakRSS(pid int) (stop func() uint64) {
	dir, err := os.OpenRoot("/proc/" + strconv.Itoa(pid))
	if err != nil {
		return func() uint64 { return 0 }
	}
	done, peak := make(chan struct{}), make(chan uint64, 1)
	go func() {
		defer dir.Close()
		var hwm uint64
		read := func() {
			if data, err := dir.ReadFile("status"); err == nil {
				if v, ok := vmHWM(data); ok {
					hwm = max(hwm, v)
				}
			}
		}
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for read(); ; read() {
			select {
			case <-done:
				peak <- hwm
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 {
		close(done)
		return <-peak
	}
}

// pipelineStats is what runPipeline measured of the commands it ran.
type pipelineStats struct {
	// peakRSS is the sum of the commands' peak resident set sizes, in
	// bytes, or 0 where they could not be read.
	peakRSS uint64
	// cpu is the user and system time the commands used.
	cpu time.Duration
}

// runPipeline runs cmds as a shell runs `c1 | c2 | ...`, each one's
// standard output piped straight into the next one's standard input, the
// last one's into out (nil: /dev/null). The peak resident set sizes it
// returns are summed (see watchPeakRSS): the commands of a streaming
// pipeline all run, at their peak, at once. Running them ourselves rather
// than through sh gives each one's peak; a shell's would be the largest of
// them.
func runPipeline(out io.Writer, cmds ...*exec.Cmd) (st pipelineStats, err error) {
	var ends []*os.File
	defer func() {
		for _, f := range ends {
			f.Close()
		}
	}()
	stderr := make([]bytes.Buffer, len(cmds))
	for i, c := range cmds {
		c.Stderr = &stderr[i]
		if i == len(cmds)-1 {
			c.Stdout = out
			continue
		}
		r, w, err := os.Pipe()
		if err != nil {
			return st, err
		}
		ends = append(ends, r, w)
		c.Stdout, cmds[i+1].Stdin = w, r
	}
	started := cmds[:0:0]
	var watches []func() uint64
	for _, c := range cmds {
		if err = c.Start(); err != nil {
			err = fmt.Errorf("starting %s: %w", c.Path, err)
			break
		}
		started = append(started, c)
		watches = append(watches, watchPeakRSS(c.Process.Pid))
	}
	// Only the children hold the pipes now: a reader that exits makes
	// its writer fail, a writer that exits gives its reader EOF.
	for _, f := range ends {
		f.Close()
	}
	ends = nil
	known := true
	for i, c := range started {
		if werr := c.Wait(); werr != nil && err == nil {
			err = fmt.Errorf("%s: %w: %s", strings.Join(c.Args, " "), werr, bytes.TrimSpace(stderr[i].Bytes()))
		}
		if ps := c.ProcessState; ps != nil {
			st.cpu += ps.UserTime() + ps.SystemTime()
		}
		rss := watches[i]()
		st.peakRSS += rss
		known = known && rss > 0
	}
	if !known {
		st.peakRSS = 0
	}
	return st, err
}

// selfCPU returns the user and system time this process has used so far,
// or 0 where it cannot be read.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// daemonCPU returns a clock of the CPU time the Docker daemon has used,
// with the children it waited for (docker-tar and docker-untar, which
// archive and extract for the copy API), where this process can read it:
// Linux, with the daemon on this host. Otherwise it returns nil.
func daemonCPU() func() time.Duration {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile("/proc/" + e.Name() + "/comm")
		if err != nil || strings.TrimSpace(string(comm)) != "dockerd" {
			continue
		}
		clock := func() time.Duration { return procCPU(pid) }
		if clock() == 0 {
			return nil
		}
		return clock
	}
	return nil
}

// procCPU reads utime, stime, cutime and cstime of /proc/<pid>/stat, in
// clock ticks of 10ms (USER_HZ is 100 on every Linux we run on).
func procCPU(pid int) time.Duration {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces: fields are
	// counted from after its closing parenthesis, the state being 3.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 15 {
		return 0
	}
	var ticks int64
	for _, f := range fields[11:15] { // fields 14 to 17 of proc(5)
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// reportCPU reports the CPU time of the benchmark's operations, total over
// b.N of them, as unit (cpu-s/op for our process or a baseline's commands,
// daemon-cpu-s/op for the Docker daemon's share).
func reportCPU(b *testing.B, total time.Duration, unit string) {
	if b.N > 0 && total > 0 {
		b.ReportMetric(total.Seconds()/float64(b.N), unit)
	}
}

// reportChildRSS reports the peak resident set of a baseline's commands as
// peak-rss-MB, where it could be measured.
func reportChildRSS(b *testing.B, rss uint64) {
	if rss > 0 {
		b.ReportMetric(float64(rss)/MB, "peak-rss-MB")
	}
}

// countWriter discards what it is given and counts it.
type countWriter struct{ n int64 }

func (w *countWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	return len(p), nil
}

// nsPerOp is the benchmark's time per iteration so far; after the b.Loop
// loop, what go test prints as ns/op.
func nsPerOp(b *testing.B) float64 {
	if b.N == 0 {
		return 0
	}
	return float64(b.Elapsed().Nanoseconds()) / float64(b.N)
}

// reportVs reports this benchmark's time per iteration over the baseline's
// (ns per op of a sibling benchmark run before it) as "x-<baseline>": 2
// means twice as slow. A baseline filtered out by -bench gives no metric.
func reportVs(b *testing.B, baselineNs float64, baseline string) {
	if baselineNs > 0 {
		b.ReportMetric(nsPerOp(b)/baselineNs, "x-"+baseline)
	}
}
