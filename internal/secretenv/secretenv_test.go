package secretenv

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbot/agentbot/internal/secretenv/secretenvtest"
)

// The child process of TestHide: childVar set makes the test the child,
// which hides secretVar and emptyVar.
const (
	childVar  = "AGENTBOT_SECRETENV_TEST_CHILD"
	secretVar = "AGENTBOT_SECRETENV_TEST_KEY"
	emptyVar  = "AGENTBOT_SECRETENV_TEST_EMPTY"
)

// TestHide starts a child (this test binary) with a secret in its
// environment. The child hides it and reports what it got; meanwhile this
// test reads the child's /proc/<pid>/environ, which must not hold the
// secret, nor the handover descriptor's variable in the child's
// os.Environ().
func TestHide(t *testing.T) {
	if os.Getenv(childVar) != "" {
		hideChild(t)
		return
	}
	secret := secretenvtest.Secret("sk-hide-")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHide$", "-test.count=1")
	cmd.Env = append(os.Environ(), childVar+"=1", secretVar+"="+secret, emptyVar+"=", "AGENTBOT_SECRETENV_TEST_OTHER=kept")
	cmd.WaitDelay = 5 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cancel() // kills the child if the test fails first

	report := map[string]string{}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && sc.Text() != "ready" {
		k, v, _ := strings.Cut(sc.Text(), "=")
		report[k] = v
	}
	if report["pid"] != strconv.Itoa(cmd.Process.Pid) {
		t.Fatalf("the child reports %v (pid %d)\n%s", report, cmd.Process.Pid, stderr.String())
	}
	// The configuration gets the secret; the process's environment
	// (what children inherit) does not, nor the handover variable.
	want := map[string]string{"pid": report["pid"], "config": secret, "os": "", "fd": "", "other": "kept"}
	for k, v := range want {
		if report[k] != v {
			t.Errorf("%s=%q, want %q", k, report[k], v)
		}
	}
	environ, err := os.ReadFile("/proc/" + report["pid"] + "/environ")
	if err != nil {
		t.Fatal(err) // the child is ours and still dumpable
	}
	if bytes.Contains(environ, []byte(secret)) || bytes.Contains(environ, []byte(secretVar)) {
		t.Errorf("the child's /proc/<pid>/environ holds the secret")
	}
	if !bytes.Contains(environ, []byte("AGENTBOT_SECRETENV_TEST_OTHER=kept")) {
		t.Errorf("the child's /proc/<pid>/environ lost the other variables: %q", environ)
	}
	// Then the child makes itself not dumpable, and says so.
	if _, err := stdin.Write([]byte("next\n")); err != nil {
		t.Fatal(err)
	}
	if !sc.Scan() || sc.Text() != "dumpable=0" {
		t.Errorf("after SetNotDumpable the child reports %q, want dumpable=0", sc.Text())
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v\n%s", err, stderr.String())
	}
}

// hideChild is the child of TestHide.
func hideChild(t *testing.T) {
	environ, err := Hide(os.Environ(), os.Args, []string{secretVar, emptyVar})
	if err != nil {
		t.Fatal(err)
	}
	config, _ := lookup(environ, secretVar)
	fd, _ := os.LookupEnv(fdVar)
	other, _ := lookup(environ, "AGENTBOT_SECRETENV_TEST_OTHER")
	for _, kv := range []string{
		"pid=" + strconv.Itoa(os.Getpid()), "config=" + config, "os=" + os.Getenv(secretVar), "fd=" + fd,
		"other=" + other, "ready",
	} {
		os.Stdout.WriteString(kv + "\n")
	}
	// Stay dumpable until the parent has read /proc/<pid>/environ: as
	// another user than root it could not once we are not.
	in := bufio.NewReader(os.Stdin)
	in.ReadString('\n')
	if err := SetNotDumpable(); err != nil {
		t.Fatal(err)
	}
	dumpable, _, _ := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_GET_DUMPABLE, 0, 0)
	os.Stdout.WriteString("dumpable=" + strconv.Itoa(int(dumpable)) + "\n")
	in.ReadString('\n') // until the parent closes stdin
}

func TestHideNothingToHide(t *testing.T) {
	// No secret set (one empty): no re-execution, environ as it was.
	environ := []string{"A=1", "B=", "C=3"}
	got, err := Hide(environ, nil, []string{"B", "D"})
	if err != nil || !slices.Equal(got, environ) {
		t.Fatalf("Hide = %q, %v; want %q", got, err, environ)
	}
}

func TestHideBadHandover(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "not-a-pipe")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, v := range []string{"x", "-1", "999999", strconv.Itoa(int(f.Fd()))} {
		if _, err := Hide([]string{fdVar + "=" + v}, nil, nil); err == nil || !strings.Contains(err.Error(), fdVar) {
			t.Errorf("%s=%s: %v, want an error naming %s", fdVar, v, err, fdVar)
		}
	}
}

func TestRestore(t *testing.T) {
	t.Setenv("AGENTBOT_SECRETENV_TEST_RESTORED", "")
	environ := []string{"AGENTBOT_SECRETENV_TEST_RESTORED=one", "AGENTBOT_SECRETENV_TEST_RESTORED=two"}
	if err := Restore(environ, []string{"AGENTBOT_SECRETENV_TEST_RESTORED", "AGENTBOT_SECRETENV_TEST_ABSENT"}); err != nil {
		t.Fatal(err)
	}
	// The last entry wins, as in the configuration.
	if v := os.Getenv("AGENTBOT_SECRETENV_TEST_RESTORED"); v != "two" {
		t.Fatalf("restored %q, want two", v)
	}
	if _, ok := os.LookupEnv("AGENTBOT_SECRETENV_TEST_ABSENT"); ok {
		t.Fatal("a variable environ does not set was set")
	}
}
