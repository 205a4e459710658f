package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/internal/fakeopenai"
	"github.com/agentbot/agentbot/internal/fakeslack"
	"github.com/agentbot/agentbot/internal/secretenv/secretenvtest"
	"github.com/agentbot/agentbot/internal/testenv"
)

// TestLogs runs a session end to end through the real gateway (Socket
// Mode) and the real worker, both with AGENTBOT_LOG_FORMAT=json and
// recognisable fake keys, against the fake Slack workspace and the fake
// model, then reads every line the two processes wrote:
//
//   - each line is one JSON object;
//   - no line holds a key or token, nor the message's text, nor the
//     command's output (the processes log at info: bodies are for debug);
//   - the lines about the turn carry the fixed keys: the gateway's line
//     of the event (platform, thread, workflow_id), the workflow's turn
//     lines and the activities' model step and tool call lines (thread,
//     workflow_id, run_id, turn; the tool call also sandbox_id and
//     backend).
func TestLogs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	srv, err := testenv.StartTemporal(ctx, testenv.TemporalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	key := secretenvtest.Secret("sk-test-")
	botToken, appToken := secretenvtest.Secret("xoxb-test-"), secretenvtest.Secret("xapp-test-")
	signing, daytona := secretenvtest.Secret("sign-test-"), secretenvtest.Secret("dtn-test-")
	secrets := []string{key, botToken, appToken, signing, daytona}
	slack := fakeslack.New(fakeslack.Options{BotToken: botToken, AppToken: appToken, SigningSecret: signing})
	t.Cleanup(slack.Close)
	model := fakeopenai.New(fakeopenai.Options{APIKey: key, Script: fakeopenai.DirectiveScript()})
	t.Cleanup(model.Close)
	botBin := secretenvtest.Build(t, ".")
	workerBin := secretenvtest.Build(t, "../worker")
	state := t.TempDir()
	env := func(extra ...string) []string {
		return append([]string{
			"HOME=" + state, "PATH=" + os.Getenv("PATH"), "AGENTBOT_STATE_DIR=" + state,
			"TEMPORAL_ADDRESS=" + srv.FrontendHostPort(), "AGENTBOT_LOG_FORMAT=json", "AGENTBOT_LOG_LEVEL=info",
			"SLACK_BOT_TOKEN=" + botToken, "AGENTBOT_SLACK_API_URL=" + slack.APIURL(),
			"AGENTBOT_HTTP_ADDR=127.0.0.1:0",
			"AGENTBOT_UNSAFE_LOCAL=true", "AGENTBOT_BACKENDS=local", "AGENTBOT_DEFAULT_BACKEND=local",
		}, extra...)
	}
	worker := secretenvtest.Start(t, workerBin, env(
		"OPENAI_BASE_URL="+model.URL(), "OPENAI_API_KEY="+key, "DAYTONA_API_KEY="+daytona,
	))
	bot := secretenvtest.Start(t, botBin, env(
		"SLACK_APP_TOKEN="+appToken, "SLACK_SIGNING_SECRET="+signing, "AGENTBOT_ALLOWED_USERS=UALICE",
	))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker output:\n%s\nbot output:\n%s", worker.Output(), bot.Output())
		}
	})
	worker.WaitOutput(t, `"msg":"worker started"`, time.Minute)
	bot.WaitOutput(t, `"msg":"slack socket mode connected"`, time.Minute)

	// The message and the command's output are recognisable: "tr" turns
	// the message's marker into a different one in the output.
	const channel = "C0LOGS"
	root := slack.PostUserMessage(channel, "UALICE", "<@UBOT> sh: echo text-marker-QZ | tr QZ 42", "")
	if err := slack.WaitFor(ctx, func(s *fakeslack.Server) bool {
		for _, m := range s.Thread(channel, root) {
			if m.BotID != "" && strings.Contains(m.Text, "text-marker-42") && strings.HasPrefix(strings.TrimSpace(m.Text), "done.") {
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatalf("no answer in the thread: %v", err)
	}
	// The answer is delivered before the workflow logs the turn's end.
	worker.WaitOutput(t, `"msg":"turn finished"`, time.Minute)
	for _, p := range []*secretenvtest.Process{bot, worker} {
		if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.Done():
		case <-time.After(time.Minute):
			t.Fatal("a process did not stop on SIGTERM")
		}
	}

	thread := fmt.Sprintf("slack:%s:%s:%s", slack.Options().TeamID, channel, root)
	wid := agentflow.AgentWorkflowID(thread)
	never := append([]string{"text-marker"}, secrets...)
	seen := map[string]int{}
	for name, out := range map[string]string{"bot": bot.Output(), "worker": worker.Output()} {
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Errorf("%s: not a JSON line: %q", name, line)
				continue
			}
			for _, s := range never {
				if strings.Contains(line, s) {
					t.Errorf("%s: a line holds %q: %s", name, s, line)
				}
			}
			for _, k := range []string{"time", "level", "msg"} {
				if _, ok := m[k]; !ok {
					t.Errorf("%s: a line without %s: %s", name, k, line)
				}
			}
			msg, _ := m["msg"].(string)
			var want map[string]any
			switch {
			case name == "bot" && msg == "event handled":
				want = map[string]any{"platform": "slack", "thread": thread, "workflow_id": wid}
			case name == "worker" && (msg == "turn started" || msg == "turn finished" || msg == "model step"):
				want = map[string]any{"thread": thread, "workflow_id": wid, "turn": 1.0, "backend": "local"}
			case name == "worker" && msg == "tool call":
				want = map[string]any{"thread": thread, "workflow_id": wid, "turn": 1.0, "backend": "local", "tool": "shell"}
				if id, _ := m["sandbox_id"].(string); id == "" {
					t.Errorf("no sandbox_id: %s", line)
				}
			default:
				continue
			}
			seen[name+": "+msg]++
			for k, v := range want {
				if m[k] != v {
					t.Errorf("%s: %s = %#v, want %#v: %s", name, k, m[k], v, line)
				}
			}
			if name == "worker" {
				if id, _ := m["run_id"].(string); id == "" {
					t.Errorf("no run_id: %s", line)
				}
			}
		}
	}
	for _, k := range []string{"bot: event handled", "worker: turn started", "worker: model step", "worker: tool call", "worker: turn finished"} {
		if seen[k] == 0 {
			t.Errorf("no line %q (lines seen: %v)", k, seen)
		}
	}
}
