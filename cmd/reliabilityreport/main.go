// Command reliabilityreport writes docs/reliability.md from what
// scripts/reliability.sh (make reliability) ran: the go test -json streams
// of the reliability suite (its scenarios print their held/total counts)
// and of the security tests of other packages, and the log of the fuzz
// targets.
//
//	go run ./cmd/reliabilityreport -out docs/reliability.md -runs 20 -fuzztime 30s \
//		-fuzz fuzz.log reliability.json security.json
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"
)

func main() {
	out := flag.String("out", "", "write the report here (default: standard output)")
	runs := flag.Int("runs", 0, "how many times each scenario ran (for the header)")
	fuzztime := flag.String("fuzztime", "", "how long each fuzz target ran (for the header)")
	fuzzLog := flag.String("fuzz", "", "the output of scripts/fuzz.sh")
	took := flag.Duration("took", 0, "the whole run's wall time (for the header)")
	flag.Parse()
	if err := run(*out, *fuzzLog, flag.Args(), header{
		Date: time.Now(), Runs: *runs, FuzzTime: *fuzztime, Took: *took,
		Platform: runtime.GOOS + "/" + runtime.GOARCH, CPUs: runtime.NumCPU(), Go: runtime.Version(),
	}); err != nil {
		fmt.Fprintln(os.Stderr, "reliabilityreport:", err)
		os.Exit(1)
	}
}

func run(out, fuzzLog string, jsonFiles []string, h header) error {
	var r report
	for _, name := range jsonFiles {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		err = r.readTestJSON(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	if fuzzLog != "" {
		f, err := os.Open(fuzzLog)
		if err != nil {
			return err
		}
		err = r.readFuzzLog(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", fuzzLog, err)
		}
	}
	var w io.Writer = os.Stdout
	if out != "" {
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	return r.write(w, h)
}
