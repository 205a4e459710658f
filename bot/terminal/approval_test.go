package terminal_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/agentflow/risk"
	"github.com/agentbot/agentbot/bot"
	"github.com/agentbot/agentbot/bot/terminal"
	"github.com/agentbot/agentbot/internal/agentworker"
	"github.com/agentbot/agentbot/internal/config"
	"github.com/agentbot/agentbot/internal/testenv"
)

// TestSenderPrintsApprovals: an approval message prints the command that
// waits, the rules that flag it (or the mode) and what to type, once; its
// edit prints the decision. A command's control characters print as
// escapes: a carriage return cannot hide what it runs.
func TestSenderPrintsApprovals(t *testing.T) {
	var out strings.Builder
	s := terminal.NewSender(&out)
	ctx := context.Background()
	exp := time.Date(2030, 1, 2, 14, 5, 0, 0, time.UTC)
	hhmm := exp.Local().Format("15:04")
	findings := []risk.Finding{{Rule: "git-push", Reason: "git push"}, {Rule: "git-push", Reason: "again"}, {Rule: "sudo", Reason: "sudo"}}
	push := agentflow.ApprovalView{ID: "t1-call_1", Turn: 1, Command: "git push origin main", Mode: agentflow.ApprovalRisky,
		Findings: findings, Need: 1, Expires: exp, State: agentflow.ApprovalWaiting}
	approved := push
	approved.State, approved.DecidedBy, approved.All = agentflow.ApprovalApproved, "alice", true
	sneaky := agentflow.ApprovalView{ID: "t2-call_2", Turn: 2, Command: "rm -rf ~\recho safe\nls \x1b[8m", Mode: agentflow.ApprovalAlways,
		Need: 2, Expires: exp, State: agentflow.ApprovalWaiting}
	half := sneaky
	half.Approvers = []string{"alice"}
	denied := sneaky
	denied.State, denied.DecidedBy = agentflow.ApprovalDenied, "bob"
	expired := agentflow.ApprovalView{ID: "t3-c", Command: "curl x | sh", State: agentflow.ApprovalExpired}
	cancelled := agentflow.ApprovalView{ID: "t4-c", Command: "sudo ls", State: agentflow.ApprovalCancelled}

	msg := func(key string, a agentflow.ApprovalView) agentflow.Outbound {
		return agentflow.Outbound{Thread: "term:main", Key: key, Kind: agentflow.OutboundApproval, Approval: &a,
			Text: agentflow.Text{Inline: "*Approval needed* for `" + a.Command + "`"}}
	}
	for _, m := range []agentflow.Outbound{
		msg("a1", push),
		msg("a1", push), // a repeated delivery prints nothing
		msg("a1", approved),
		msg("a2", sneaky),
		msg("a2", half),
		msg("a2", denied),
		msg("a3", expired),
		msg("a4", cancelled),
		// Without its view, the text stands, plain.
		{Thread: "term:main", Key: "a5", Kind: agentflow.OutboundApproval, Text: agentflow.Text{Inline: "*Approval needed* for `ls`"}},
	} {
		if err := s.Deliver(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	want := "[main] approval needed (git-push, sudo): git push origin main\n" +
		"[main] type /approve, /approve --all or /deny (expires " + hhmm + ")\n" +
		"[main] approved by alice, with the rest of this turn's commands: git push origin main\n" +
		"[main] approval needed (approvals always):\n    rm -rf ~\\x0decho safe\n    ls \\x1b[8m\n" +
		"[main] type /approve, /approve --all or /deny (expires " + hhmm + ")\n" +
		"[main] approved by alice (1 of 2):\n    rm -rf ~\\x0decho safe\n    ls \\x1b[8m\n" +
		"[main] another person must approve it too: type /approve or /deny (expires " + hhmm + ")\n" +
		"[main] denied by bob:\n    rm -rf ~\\x0decho safe\n    ls \\x1b[8m\n" +
		"[main] not approved in time, not run: curl x | sh\n" +
		"[main] approval cancelled, not run: sudo ls\n" +
		"[main] * Approval needed for ls\n"
	if got := out.String(); got != want {
		t.Errorf("the terminal shows:\n%s\nwant:\n%s", got, want)
	}
}

// TestChatApproves answers approvals in the line chat, on a real dev
// server with the worker of the embedded default: the session set to ask
// before every command, a message's command waits, its approval printed;
// /approve and /deny answer at once, though the message typed before
// them is not answered (it waits for them), and the decision prints.
func TestChatApproves(t *testing.T) {
	ctx := context.Background()
	srv, err := testenv.StartTemporal(ctx, testenv.TemporalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	tc, err := client.Dial(client.Options{HostPort: srv.FrontendHostPort(), Logger: testenv.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	cfg, err := config.Load([]string{
		"OPENAI_BASE_URL=fake", "AGENTBOT_BACKENDS=local",
		"AGENTBOT_LOCAL_DIR=" + t.TempDir(), "AGENTBOT_STATE_DIR=" + t.TempDir(), "AGENTBOT_BLOB_URL=file://" + t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	out := &screen{}
	sender := terminal.NewSender(out)
	w, err := agentworker.New(ctx, tc, agentworker.Options{Config: cfg,
		Logger: slog.New(slog.DiscardHandler), Chat: map[string]agentflow.ChatSender{"term": sender}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	router := &bot.Router{Sessions: agentflow.NewClient(tc), Backends: w.Registry.Names(), DefaultBackend: "local",
		Logger: slog.New(slog.DiscardHandler)}
	inR, inW := io.Pipe()
	chat := &terminal.Chat{Router: router, Client: router.Sessions, In: inR, Out: out, User: "alice", Thread: "ap", Answers: sender}
	runCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- chat.Run(runCtx) }()
	say := func(line string, want ...string) {
		t.Helper()
		out.clear()
		fmt.Fprintln(inW, line)
		for _, w := range want {
			if err := out.wait(runCtx, w); err != nil {
				t.Fatal(err)
			}
		}
	}
	say("hello", "echo: hello")
	say("/approvals always", "[ap] * Approvals for this session: always.")
	say("sh: echo line-approved", "[ap] approval needed (approvals always): echo line-approved\n",
		"[ap] type /approve, /approve --all or /deny (expires ")
	say("/approve", "Approved: echo line-approved.", "[ap] approved by alice: echo line-approved", "[ap] agent: done.")
	say("sh: echo line-denied", "[ap] approval needed (approvals always): echo line-denied\n")
	say("/deny", "Denied: echo line-denied.", "[ap] denied by alice: echo line-denied", "not run: alice denied this command")
	say("/approvals", "Approvals in this session: always")
	inW.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
