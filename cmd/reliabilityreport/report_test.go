package main

import (
	"strings"
	"testing"
	"time"
)

// The events of a short run: two scenarios of the reliability suite (one
// held once of two times), a security table with a failed case, a test
// that failed at the top, and fuzz targets that passed, failed and were
// cut off.
const testJSON = `{"Action":"run","Package":"github.com/agentbot/agentbot/reliability","Test":"TestA"}
{"Action":"pass","Package":"github.com/agentbot/agentbot/reliability","Test":"TestA/run1","Elapsed":3}
{"Action":"pass","Package":"github.com/agentbot/agentbot/reliability","Test":"TestA","Elapsed":3}
{"Action":"fail","Package":"github.com/agentbot/agentbot/reliability","Test":"TestB","Elapsed":9}
{"Action":"output","Package":"github.com/agentbot/agentbot/reliability","Output":"reliability: 9a. twenty messages\t2/2\tTestA\t6.0\n"}
{"Action":"output","Package":"github.com/agentbot/agentbot/reliability","Output":"reliability: 10b. later item\t1/1\tTestC\t1.0\n"}
{"Action":"output","Package":"github.com/agentbot/agentbot/reliability","Output":"reliability: 2. bot killed\t1/2\tTestB\t9.0\n"}
{"Action":"fail","Package":"github.com/agentbot/agentbot/reliability","Elapsed":20}
{"Action":"pass","Package":"github.com/agentbot/agentbot/bot/slack","Test":"TestAccessEveryEntryPoint/mention/stranger","Elapsed":1}
{"Action":"fail","Package":"github.com/agentbot/agentbot/bot/slack","Test":"TestAccessEveryEntryPoint/mention/owner","Elapsed":1}
{"Action":"pass","Package":"github.com/agentbot/agentbot/bot/slack","Test":"TestAccessEveryEntryPoint/button/admin","Elapsed":1}
{"Action":"fail","Package":"github.com/agentbot/agentbot/bot/slack","Test":"TestAccessEveryEntryPoint/mention","Elapsed":2}
{"Action":"pass","Package":"github.com/agentbot/agentbot/bot/slack","Test":"TestAccessEveryEntryPoint/button","Elapsed":1}
{"Action":"fail","Package":"github.com/agentbot/agentbot/bot/slack","Test":"TestAccessEveryEntryPoint","Elapsed":3}
{"Action":"pass","Package":"github.com/agentbot/agentbot/sandboxes/dockersandbox","Test":"TestDockerHardening","Elapsed":4}
`

const fuzzLog = `== fuzz ./bot FuzzParse (8s)
fuzz: elapsed: 0s, gathering baseline coverage: 0/40 completed
fuzz: elapsed: 3s, execs: 1000 (333/sec), new interesting: 1 (total: 41)
fuzz: elapsed: 8s, execs: 4242 (530/sec), new interesting: 2 (total: 42)
PASS
ok  	github.com/agentbot/agentbot/bot	8.1s
== fuzz ./bot/slack FuzzInteraction (8s)
fuzz: elapsed: 2s, execs: 77 (38/sec), new interesting: 0 (total: 5)
--- FAIL: FuzzInteraction (2.01s)
FAIL
== fuzz ./sandboxes FuzzCheckArchive (8s)
fuzz: elapsed: 3s, execs: 12 (4/sec), new interesting: 0 (total: 5)
`

func TestReport(t *testing.T) {
	var r report
	if err := r.readTestJSON(strings.NewReader(testJSON)); err != nil {
		t.Fatal(err)
	}
	if err := r.readFuzzLog(strings.NewReader(fuzzLog)); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := r.write(&b, header{Date: time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC), Runs: 2, FuzzTime: "8s", Platform: "linux/amd64", CPUs: 2, Go: "go1.26"}); err != nil {
		t.Fatal(err)
	}
	doc := b.String()
	t.Log(doc)
	lines := strings.Split(doc, "\n")
	find := func(sub string) int {
		t.Helper()
		for i, l := range lines {
			if strings.Contains(l, sub) {
				return i
			}
		}
		t.Fatalf("no line with %q in\n%s", sub, doc)
		return -1
	}
	// Rows in the order of the items: 2 < 9a < 10 < 10b < 11 < 13 < 15.
	order := []string{"| 2 | bot killed | 1/2 runs | 4 s a run |", "| 9a | twenty messages | 2/2 runs | 3 s a run |",
		"| 10 | fuzz `FuzzParse` (bot): no panic, every invariant of the target holds | 4242 inputs, none failed | 8s |",
		"| 10b | later item | 1/1 runs |", "TestHTTPRefusesBadSignatures`) | **not run** |",
		"TestAccessEveryEntryPoint`) | 2/3 cases | 3 s |", "TestDockerHardening`) | 1/1 cases | 4 s |"}
	last := -1
	for _, want := range order {
		i := find(want)
		if i <= last {
			t.Errorf("%q is at line %d, before the row above it (line %d)", want, i, last)
		}
		last = i
	}
	find("fuzz `FuzzInteraction` (bot/slack): no panic, every invariant of the target holds | **failed** after 77 inputs")
	find("fuzz `FuzzCheckArchive` (sandboxes): no panic, every invariant of the target holds | **did not finish**")
	// Not held: scenario 2, FuzzInteraction, FuzzCheckArchive, the Slack
	// access table (a case failed), and six checks that did not run.
	find("**10 of 14 rows did not hold every time.**")
	find("- `reliability.TestB`")
	if strings.Contains(doc, "Every one of") {
		t.Error("a failed run reported as held")
	}
}

func TestCompareItems(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		less bool
	}{{"2", "10", true}, {"9a", "9b", true}, {"9b", "10", true}, {"10", "10a", true}, {"11", "9", false}} {
		if got := compareItems(tt.a, tt.b) < 0; got != tt.less {
			t.Errorf("compareItems(%q, %q) < 0 = %v, want %v", tt.a, tt.b, got, tt.less)
		}
	}
}
