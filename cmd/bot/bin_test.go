package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// builtBot is the binary the tests run, built once by TestMain; buildErr
// says why it could not be.
var builtBot, buildErr = "", error(nil)

// TestMain builds the bot once for every test that runs it as a process,
// and removes it after.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "agentbot-bot-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	builtBot = filepath.Join(dir, "bot")
	if out, err := exec.Command("go", "build", "-o", builtBot, ".").CombinedOutput(); err != nil {
		buildErr = fmt.Errorf("go build: %w\n%s", err, out)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// botBinary is the built bot (the test fails when it could not be built).
func botBinary(t *testing.T) string {
	t.Helper()
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBot
}
