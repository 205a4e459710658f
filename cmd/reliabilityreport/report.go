package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// module is the prefix of the packages' import paths, left out of the
// report.
const module = "github.com/agentbot/agentbot/"

// A check is a test of another package that proves an item of the issue
// by a table of cases: each leaf subtest (or the test itself, without
// any) is one case.
type check struct {
	item, what string
	pkg, test  string // package relative to the module, top-level test
}

// checks are the tests of other packages that the report counts; the
// scenarios of the reliability suite say their items themselves.
var checks = []check{
	{"11", "Slack: HMAC signature wrong, missing, stale or from the future → 401, nothing started", "bot/slack", "TestHTTPRefusesBadSignatures"},
	{"11", "Discord: Ed25519 signature tampered, missing, replayed (stale) or from the future → 401, nothing started", "bot/discord", "TestHTTPRefusesBadSignatures"},
	{"13", "Slack: allowlists and owner-only controls at every entry point", "bot/slack", "TestAccessEveryEntryPoint"},
	{"13", "Discord: allowlists and owner-only controls at every entry point, gateway and HTTP", "bot/discord", "TestAccessEveryEntryPoint"},
	{"14", "the worker's secrets out of the sandbox's reach (environment, /proc, files)", "cmd/worker", "TestSecretsOutOfReach"},
	{"14", "the bot's secrets out of the local sandbox's reach", "cmd/bot", "TestSecretsOutOfReach"},
	{"15", "Docker sandbox as docker inspect shows it: capabilities dropped, no-new-privileges, limits, no network, not privileged, no socket or bind mount", "sandboxes/dockersandbox", "TestDockerHardening"},
	{"16", "payload codec: histories unreadable without the key, the product works end to end, /codec served", "cmd/worker", "TestPayloadEncryption"},
}

// event is one line of go test -json.
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// outcome is how a test ended: "pass", "fail" or "skip", and its time.
type outcome struct {
	action  string
	elapsed time.Duration
}

// scenario is one line the reliability suite printed.
type scenario struct {
	name        string
	held, total int
	test        string
	elapsed     time.Duration
}

// fuzzRun is one fuzz target's run.
type fuzzRun struct {
	pkg, target string
	execs       int64
	elapsed     string
	failed      bool
	done        bool // the run reached its end (ok or FAIL)
}

type report struct {
	tests     map[string]map[string]outcome // package → test → outcome
	failed    []string                      // package.Test of failed top-level tests
	scenarios []scenario
	fuzz      []fuzzRun
}

// tallyLine is what reliability/stack_test.go's printTally prints.
var tallyLine = regexp.MustCompile(`^reliability: (.+)\t(\d+)/(\d+)\t(\S+)\t([0-9.]+)$`)

func (r *report) readTestJSON(rd io.Reader) error {
	if r.tests == nil {
		r.tests = map[string]map[string]outcome{}
	}
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue // a build error, printed as it is
		}
		var ev event
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("a line of go test -json does not decode: %w", err)
		}
		pkg := strings.TrimPrefix(ev.Package, module)
		switch ev.Action {
		case "output":
			if m := tallyLine.FindStringSubmatch(strings.TrimRight(ev.Output, "\n")); m != nil {
				held, _ := strconv.Atoi(m[2])
				total, _ := strconv.Atoi(m[3])
				secs, _ := strconv.ParseFloat(m[5], 64)
				r.scenarios = append(r.scenarios, scenario{m[1], held, total, m[4], time.Duration(secs * float64(time.Second))})
			}
		case "pass", "fail", "skip":
			if ev.Test == "" {
				if ev.Action == "fail" && len(r.tests[pkg]) == 0 {
					r.failed = append(r.failed, pkg+" (the package did not build or crashed)")
				}
				continue
			}
			if r.tests[pkg] == nil {
				r.tests[pkg] = map[string]outcome{}
			}
			r.tests[pkg][ev.Test] = outcome{ev.Action, time.Duration(ev.Elapsed * float64(time.Second))}
			if ev.Action == "fail" && !strings.Contains(ev.Test, "/") {
				r.failed = append(r.failed, pkg+"."+ev.Test)
			}
		}
	}
	return sc.Err()
}

// cases counts the leaf subtests of test in pkg that passed, of all; ok
// is false when the test did not run.
func (r *report) cases(pkg, test string) (held, total int, elapsed time.Duration, ok bool) {
	tests := r.tests[pkg]
	top, ok := tests[test]
	if !ok {
		return 0, 0, 0, false
	}
	for name, o := range tests {
		if name != test && !strings.HasPrefix(name, test+"/") {
			continue
		}
		leaf := true
		for other := range tests {
			if strings.HasPrefix(other, name+"/") {
				leaf = false
				break
			}
		}
		if !leaf {
			continue
		}
		total++
		if o.action == "pass" {
			held++
		}
	}
	return held, total, top.elapsed, true
}

var (
	fuzzHeader = regexp.MustCompile(`^== fuzz (\S+) (\S+) \(`)
	fuzzExecs  = regexp.MustCompile(`^fuzz: elapsed: (\S+), execs: (\d+) `)
)

// readFuzzLog reads scripts/fuzz.sh's output: a header per target, then
// go test's progress lines and its verdict.
func (r *report) readFuzzLog(rd io.Reader) error {
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var cur *fuzzRun
	for sc.Scan() {
		line := sc.Text()
		if m := fuzzHeader.FindStringSubmatch(line); m != nil {
			r.fuzz = append(r.fuzz, fuzzRun{pkg: strings.TrimPrefix(m[1], "./"), target: m[2]})
			cur = &r.fuzz[len(r.fuzz)-1]
			continue
		}
		if cur == nil {
			continue
		}
		switch {
		case fuzzExecs.MatchString(line):
			m := fuzzExecs.FindStringSubmatch(line)
			cur.elapsed = m[1]
			cur.execs, _ = strconv.ParseInt(m[2], 10, 64)
		case strings.HasPrefix(line, "--- FAIL") || strings.HasPrefix(line, "FAIL"):
			cur.failed, cur.done = true, true
		case strings.HasPrefix(line, "ok "), line == "PASS":
			cur.done = true
		}
	}
	return sc.Err()
}

// header is what the report says of the run.
type header struct {
	Date         time.Time
	Runs         int
	FuzzTime     string
	Took         time.Duration
	Platform, Go string
	CPUs         int
}

// row is one line of the table.
type row struct {
	item, what, held, time string
	bad                    bool
}

func (r *report) rows() []row {
	var rows []row
	for _, s := range r.scenarios {
		item, what, _ := strings.Cut(s.name, ". ")
		per := ""
		if s.total > 0 {
			per = fmt.Sprintf("%.0f s a run", (s.elapsed / time.Duration(s.total)).Seconds())
		}
		rows = append(rows, row{item, what, fmt.Sprintf("%d/%d runs", s.held, s.total), per, s.held != s.total})
	}
	for _, f := range r.fuzz {
		held := fmt.Sprintf("%d inputs, none failed", f.execs)
		bad := f.failed || !f.done
		if f.failed {
			held = fmt.Sprintf("**failed** after %d inputs", f.execs)
		} else if !f.done {
			held = "**did not finish**"
		}
		rows = append(rows, row{"10", fmt.Sprintf("fuzz `%s` (%s): no panic, every invariant of the target holds", f.target, f.pkg), held, f.elapsed, bad})
	}
	for _, c := range checks {
		held, total, elapsed, ok := r.cases(c.pkg, c.test)
		if !ok {
			rows = append(rows, row{c.item, c.what + " (`" + c.test + "`)", "**not run**", "", true})
			continue
		}
		rows = append(rows, row{c.item, c.what + " (`" + c.test + "`)", fmt.Sprintf("%d/%d cases", held, total),
			fmt.Sprintf("%.0f s", elapsed.Seconds()), held != total})
	}
	slices.SortStableFunc(rows, func(a, b row) int { return compareItems(a.item, b.item) })
	return rows
}

// compareItems orders "2" before "10" and "9a" before "9b".
func compareItems(a, b string) int {
	na, ra := splitItem(a)
	nb, rb := splitItem(b)
	if na != nb {
		return na - nb
	}
	return strings.Compare(ra, rb)
}

func splitItem(s string) (int, string) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	n, err := strconv.Atoi(s[:i])
	if err != nil {
		return 1 << 30, s
	}
	return n, s[i:]
}

func (r *report) write(w io.Writer, h header) error {
	rows := r.rows()
	bad := 0
	for _, x := range rows {
		if x.bad {
			bad++
		}
	}
	var b strings.Builder
	b.WriteString("# Reliability\n\n")
	b.WriteString("Faults survived, bad input refused, secrets kept: the scenarios of issue 16, each run against the real\n")
	b.WriteString("`cmd/bot` and `cmd/worker` processes, a real Temporal dev server on a database file, real Redis and Docker,\n")
	b.WriteString("and the protocol fakes for Slack and the model (`reliability/`), with the security tables of the other\n")
	b.WriteString("packages and the fuzz targets. Written by `make reliability` (`scripts/reliability.sh`); `make test`\n")
	b.WriteString("runs each scenario once and every fuzz target for 8 s.\n\n")
	fmt.Fprintf(&b, "Last run: %s, %s, %d CPUs, %s; each scenario %d times, each fuzz target %s",
		h.Date.Format("2006-01-02"), h.Platform, h.CPUs, h.Go, h.Runs, h.FuzzTime)
	if h.Took > 0 {
		fmt.Fprintf(&b, "; %s in all", h.Took.Round(time.Minute))
	}
	b.WriteString(".\n\n")
	if bad == 0 && len(r.failed) == 0 {
		fmt.Fprintf(&b, "Every one of the %d rows held every time.\n\n", len(rows))
	} else {
		fmt.Fprintf(&b, "**%d of %d rows did not hold every time.**\n\n", bad, len(rows))
	}
	b.WriteString("| # | what must hold | held | time |\n|---|---|---:|---:|\n")
	for _, x := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", x.item, strings.ReplaceAll(x.what, "|", "\\|"), x.held, x.time)
	}
	if len(r.failed) > 0 {
		b.WriteString("\nTests that failed:\n\n")
		for _, f := range r.failed {
			fmt.Fprintf(&b, "- `%s`\n", f)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
