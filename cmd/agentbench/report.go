package main

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/agentbot/agentbot/internal/benchreport"
)

// sample is the values of one quantity over the runs.
type sample = benchreport.Sample

// ms turns durations into a sample in milliseconds.
func ms(ds []time.Duration) sample {
	out := make(sample, len(ds))
	for i, d := range ds {
		out[i] = float64(d) / float64(time.Millisecond)
	}
	return out
}

// row is one line of the table. Baseline and Product hold the samples
// (either may be empty: a measure against a fixed limit has none); Ratio,
// when set, is the verdict's value, compared with Target by Better.
type row struct {
	ID       string
	Measure  string
	Baseline string // what the baseline is, in words
	Unit     string
	Base     sample
	Prod     sample
	// Ratio is product over baseline per interleaved pair (or a value
	// compared with the target directly, when Base is empty).
	Ratio  sample
	Target string
	// Absolute says Ratio holds a value in Unit compared with a fixed
	// target, not a ratio to the baseline.
	Absolute bool
	// Met says whether the target is met; nil: no target.
	Met  *bool
	Note string
}

// series is one line of a plot.
type series struct {
	Name string
	X, Y []float64
}

// chart is one plot of the scaling runs.
type chart struct {
	Title, XLabel, YLabel string
	Series                []series
	Target                *float64
}

// report gathers the rows and charts of a run.
type report struct {
	settings settings
	started  time.Time
	elapsed  time.Duration
	machine  string
	rows     []row
	charts   []chart
	notes    []string
}

func (r *report) add(x row) { r.rows = append(r.rows, x) }

// missed lists the measures whose targets were missed.
func (r *report) missed() []string {
	var out []string
	for _, x := range r.rows {
		if x.Met != nil && !*x.Met {
			out = append(out, x.ID+" "+x.Measure)
		}
	}
	return out
}

// verdict sets Met from the median ratio: at most (or, with atLeast, at
// least) limit.
func verdict(x *row, limit float64, atLeast bool) {
	m := x.Ratio.Median()
	ok := m <= limit
	if atLeast {
		ok = m >= limit
	}
	x.Met = &ok
}

// stat formats a sample as "median (min–max)".
func stat(s sample, unit string) string {
	if len(s) == 0 {
		return "—"
	}
	return fmt.Sprintf("%s (%s–%s)%s", num(s.Median()), num(s.Min()), num(s.Max()), unitSuffix(unit))
}

func unitSuffix(u string) string {
	if u == "" {
		return ""
	}
	return " " + u
}

// num prints a value with three significant digits or so.
func num(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "—"
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func (x row) ratioText() string {
	if len(x.Ratio) == 0 {
		return "—"
	}
	if x.Absolute || (len(x.Base) == 0 && x.Unit != "") {
		return stat(x.Ratio, x.Unit)
	}
	return fmt.Sprintf("%s× (%s–%s)", num(x.Ratio.Median()), num(x.Ratio.Min()), num(x.Ratio.Max()))
}

func (x row) verdictText() string {
	switch {
	case x.Met == nil:
		return ""
	case *x.Met:
		return "met"
	default:
		return "**missed**"
	}
}

func (r *report) header() []string {
	return []string{"#", "measure", "baseline", "baseline: median (min–max)", "agentbot: median (min–max)", "ratio", "target", ""}
}

func (r *report) cells() [][]string {
	var out [][]string
	for _, x := range r.rows {
		out = append(out, []string{x.ID, x.Measure, x.Baseline, stat(x.Base, x.Unit), stat(x.Prod, x.Unit), x.ratioText(), x.Target, x.verdictText()})
	}
	return out
}

// table is the report as a benchreport.Table.
func (r *report) table() benchreport.Table {
	t := benchreport.Table{Columns: r.header(), Rows: r.cells()}
	for _, x := range r.rows {
		if x.Note != "" {
			t.Notes = append(t.Notes, fmt.Sprintf("%s: %s", x.ID, x.Note))
		}
	}
	t.Notes = append(t.Notes, r.notes...)
	return t
}

// text is the table for the terminal.
func (r *report) text() string {
	return r.table().Text() + fmt.Sprintf("\n%d runs per measure; %s; took %s.\n", r.settings.runs, r.machine, r.elapsed.Round(time.Second))
}

// markdown is docs/benchmarks.md.
func (r *report) markdown(png string) string {
	var b strings.Builder
	b.WriteString(benchIntro)
	fmt.Fprintf(&b, "\nLast run: %s, %s, %d runs per measure, %s in all", r.started.UTC().Format("2006-01-02"), r.machine, r.settings.runs, r.elapsed.Round(time.Second))
	if r.settings.quick {
		b.WriteString(" (**-quick**: small sizes, not the figures to quote)")
	}
	b.WriteString(".\n\n")
	b.WriteString(r.table().Markdown())
	if png != "" && len(r.charts) > 0 {
		name := png[strings.LastIndex(png, "/")+1:]
		fmt.Fprintf(&b, "\n![scaling runs](%s)\n", name)
	}
	b.WriteString(benchMethod)
	return b.String()
}

const benchIntro = `# Benchmarks

What agentbot adds to the work it does, measured by ` + "`make bench`" + ` (` + "`go run ./cmd/agentbench`" + `)
on one machine, next to a baseline doing the same work in the same run. Absolute
times on a shared machine are noise: every verdict is a ratio to a baseline
measured interleaved with the product (A B A B …). The table is written by the
command; the explanations below it are not.
`

const benchMethod = `
## What is measured

- **P1** one turn with one tool call (` + "`true`" + `), instant model, local backend, seen from
  the client: from the gateway taking the message to the answer reaching the
  chat sender. Baseline: a bare Temporal workflow on the same dev server doing the
  same activities (an update in, a model-step activity, an exec activity, a second
  model step, the answer out as the update's result).
- **P2** a turn in a session whose workspace holds the big tree (~20k small files and
  a few large ones) against the same turn in an empty session, for a turn that
  changes nothing and one that changes one file.
- **P3** ` + "`Sandbox.Exec`" + ` of ` + "`true`" + ` on the Docker backend against the ` + "`docker exec`" + ` CLI on a
  container of the same image.
- **P4** the portable snapshot of the big tree against ` + "`tar -c | zstd -1`" + `, the restore
  against ` + "`zstd -d | tar -x`" + `, and the snapshot's size against zstd -1's.
- **P5** switching a session with the big tree from local to Docker, and forking it
  and running the fork's first turn, against P4's CLI snapshot plus restore.
- **P6** idle sessions on one worker process (each ran one turn, then sat past the
  idle timeout): the worker's resident memory, and sandboxes still running.
- **P7** turns in many sessions at once (model latency 100 ms), against the bare
  workflow with the same activities and concurrency: throughput.
- **P8** chat calls during a 30-tool turn, counted by the Slack and Discord fakes.
- **P9** the gateway's Temporal round trips per user message until the answer is shown.

Run one measure with ` + "`go run ./cmd/agentbench -only P4 -runs 9`" + `; ` + "`-keep`" + ` keeps the work
directory with every log; ` + "`-quick`" + ` (` + "`make bench-quick`" + `, in CI) runs everything small.
`
