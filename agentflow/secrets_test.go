package agentflow_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/agentflow/llm"
	"github.com/agentbot/agentbot/bot"
	"github.com/agentbot/agentbot/bot/terminal"
	"github.com/agentbot/agentbot/internal/agentworker"
	"github.com/agentbot/agentbot/internal/fakeopenai"
	"github.com/agentbot/agentbot/internal/testenv"
	"github.com/agentbot/agentbot/sandboxes"
	"github.com/agentbot/agentbot/sandboxes/localsandbox"
	"github.com/agentbot/agentbot/store"
)

// The secrets the worker of TestSecretsNeverLeave knows: the model API key
// (the one newRig's worker uses) and a chat token the model client knows
// nothing about, so that only agentbot's own redaction can hide it.
const (
	secretModelKey = "sk-test-secret-key"
	secretBotToken = "xoxb-secrets-test-bot-token"
)

var testSecrets = []string{secretModelKey, secretBotToken}

// recordingSender records every Outbound as the platform's sender gets it
// from Deliver (titles included, which the terminal does not print), then
// prints it like the terminal.
type recordingSender struct {
	next agentflow.ChatSender
	mu   sync.Mutex
	seen []agentflow.Outbound
}

func (s *recordingSender) Deliver(ctx context.Context, m agentflow.Outbound) error {
	s.mu.Lock()
	s.seen = append(s.seen, m)
	s.mu.Unlock()
	return s.next.Deliver(ctx, m)
}

func (s *recordingSender) outbound(t *testing.T) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	data, err := json.Marshal(s.seen)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// secretsScript is the model of TestSecretsNeverLeave. Each phase is keyed
// by the user's message:
//   - "show me the env file": cat .env, then quote the tool's output;
//   - "use the key": a model that knows the key some other way puts it in a
//     tool call's arguments and in its answer;
//   - "break": the endpoint fails with a message that quotes the chat token.
func secretsScript(_ context.Context, call fakeopenai.Call) (fakeopenai.Reply, error) {
	last, text := call.LastUserMessage()
	var outputs []string
	for _, m := range call.Messages[last+1:] {
		if m.Role == "tool" {
			outputs = append(outputs, m.Content)
		}
	}
	switch {
	case strings.Contains(text, "show me the env file"):
		if len(outputs) == 0 {
			return fakeopenai.Invoke(fakeopenai.ToolShell, map[string]any{"command": "cat .env"}), nil
		}
		return fakeopenai.Text("Here is .env:\n" + outputs[0]), nil
	case strings.Contains(text, "use the key"):
		if len(outputs) == 0 {
			return fakeopenai.Invoke(fakeopenai.ToolShell, map[string]any{"command": "echo " + secretModelKey + " > key-copy.txt"}), nil
		}
		return fakeopenai.Text("I wrote " + secretModelKey + " to key-copy.txt."), nil
	case strings.Contains(text, "break"):
		return fakeopenai.Reply{Error: &fakeopenai.HTTPError{Status: 400,
			Message: "the upstream refused the request with credential " + secretBotToken}}, nil
	}
	return fakeopenai.Text("echo: " + text), nil
}

// TestSecretsNeverLeave runs a session whose workspace holds an env file
// with the worker's model API key and a chat token, on the real dev server
// and the local sandbox: the agent cats the file and quotes it, uses the key
// in a command and an answer, and fails with an error quoting the token; the
// user reads status and export through the bot's Router and renames the
// session to the token. Neither secret may appear in any chat message, title,
// router reply, model request or transcript blob, nor in any event of any
// workflow history of the session or its manager.
func TestSecretsNeverLeave(t *testing.T) {
	ctx := context.Background()
	// A Slack-shaped thread key gives the session a session manager of its
	// own (term threads share one with the other tests).
	const thread = "slack:TSECRETS:C1:1700000000.000100"

	tc, err := client.Dial(client.Options{HostPort: temporalAddr(t), Namespace: "default", Logger: testenv.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	reg := sandboxes.NewRegistry()
	lb, err := localsandbox.New(localsandbox.Options{BaseDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(localsandbox.Name, lb); err != nil {
		t.Fatal(err)
	}
	blobs, err := store.OpenBlobs(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { blobs.Close() })
	fake := fakeopenai.New(fakeopenai.Options{APIKey: secretModelKey, Script: secretsScript})
	t.Cleanup(fake.Close)
	model, err := llm.New(llm.Config{BaseURL: fake.URL(), APIKey: secretModelKey})
	if err != nil {
		t.Fatal(err)
	}
	term := &testenv.Buffer{}
	sender := &recordingSender{next: terminal.NewSender(term)}
	w := worker.New(tc, agentflow.TaskQueue, testenv.WorkerOptions())
	agentworker.Register(w, &agentflow.Activities{
		Sandboxes: reg, Blobs: blobs, Model: model, ModelName: "fake-model",
		Chat: map[string]agentflow.ChatSender{"slack": sender}, Temporal: tc,
		Secrets: testSecrets,
	})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	cl := agentflow.NewClient(tc)

	var (
		repliesMu sync.Mutex
		replies   []bot.Response
	)
	router := &bot.Router{Sessions: cl, Backends: []string{"local"}, DefaultBackend: "local",
		Secrets: testSecrets}
	command := func(text string) bot.Response {
		t.Helper()
		var got *bot.Response
		err := router.Handle(ctx, bot.Event{Platform: "slack", Kind: bot.KindCommand, ThreadKey: thread,
			User: "tester", UserName: "tester", Text: text},
			bot.ReplierFunc(func(_ context.Context, r bot.Response) error {
				repliesMu.Lock()
				defer repliesMu.Unlock()
				replies = append(replies, r)
				got = &r
				return nil
			}))
		if err != nil || got == nil {
			t.Fatalf("%s: no reply (%v)", text, err)
		}
		return *got
	}

	workspace := t.TempDir()
	env := "OPENAI_API_KEY=" + secretModelKey + "\nSLACK_BOT_TOKEN=" + secretBotToken + "\n"
	if err := os.WriteFile(filepath.Join(workspace, ".env"), []byte(env), 0o600); err != nil {
		t.Fatal(err)
	}
	turn := func(text string) *agentflow.TurnResult {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		res, err := cl.SendAndWait(ctx, agentflow.AgentInput{ThreadKey: thread, Backend: "local", Root: workspace},
			agentflow.MessageRequest{ID: fmt.Sprintf("secrets-%d", time.Now().UnixNano()), Author: "tester", Text: text})
		if err != nil || res.Result == nil {
			t.Fatalf("send %q: %+v %v", text, res, err)
		}
		return res.Result
	}

	// The tool's output reached the answer: a leak would show.
	res := turn("show me the env file")
	mustContain(t, "answer quoting .env", res.Answer, "OPENAI_API_KEY=", "SLACK_BOT_TOKEN=")
	res = turn("use the key")
	mustContain(t, "answer of a model that knows the key", res.Answer, "I wrote", "key-copy.txt")
	waitFor(t, "the manager knows the session", func() bool {
		_, err := cl.Lookup(ctx, thread)
		return err == nil
	})
	res = turn("break")
	if res.Status != agentflow.TurnFailed {
		t.Fatalf("the failing model call: %+v", res)
	}
	mustContain(t, "the model's error", res.Error, "upstream refused")
	status := command("status")
	mustContain(t, "status", status.Text, "last error:", "upstream refused")
	export := command("export")
	mustContain(t, "export", export.Text, "Here is .env", "I wrote")

	// Every event of every run of the session and its manager.
	for _, id := range []string{agentflow.AgentWorkflowID(thread), agentflow.ManagerWorkflowID(thread)} {
		h := historyText(t, tc, id)
		if id == agentflow.AgentWorkflowID(thread) {
			// The payloads were searched too, not only their base64.
			mustContain(t, "history of "+id, h, "show me the env file", "OPENAI_API_KEY=")
		}
		mustNotContain(t, "history of "+id, h, testSecrets...)
	}
	// The transcripts and large texts in the blob store; the snapshots
	// hold the workspace, .env included, as the sandbox does.
	keys, err := blobs.List(ctx, store.SessionPrefix(agentflow.AgentWorkflowID(thread)))
	if err != nil || len(keys) == 0 {
		t.Fatalf("session blobs: %v %v", keys, err)
	}
	for _, k := range keys {
		r, err := blobs.NewReader(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_, err = b.ReadFrom(r)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		mustNotContain(t, "blob "+k, b.String(), testSecrets...)
	}
	for i, r := range fake.Requests() {
		mustNotContain(t, fmt.Sprintf("model request %d", i), string(r.Body), testSecrets...)
	}

	// A person who types a secret into chat cannot be helped in the
	// history (their message is an update's argument), but what the bot
	// says back, the session view and the thread's new name are redacted.
	renamed := command("title deploy with " + secretBotToken)
	mustContain(t, "rename reply", renamed.Text, "Renamed to")
	waitFor(t, "the rename is delivered", func() bool {
		return strings.Contains(sender.outbound(t), `"kind":"title"`)
	})
	status = command("status")
	if status.Session == nil || !strings.Contains(status.Session.Title, "deploy with") {
		t.Fatalf("status after rename: %+v", status)
	}

	repliesMu.Lock()
	shown, err := json.Marshal(replies)
	repliesMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	mustNotContain(t, "router replies", string(shown), testSecrets...)
	mustNotContain(t, "what Deliver handed the sender", sender.outbound(t), testSecrets...)
	mustNotContain(t, "terminal", term.String(), testSecrets...)
	mustContain(t, "terminal", term.String(), "[redacted]")
}

// historyText returns every event of every run of a workflow (following
// continue-as-new back to the first run) as protojson, followed by the
// decoded data of every payload in them: protojson shows payload data only
// in base64, where a search would never find a secret.
func historyText(t *testing.T, tc client.Client, workflowID string) string {
	t.Helper()
	ctx := context.Background()
	var out bytes.Buffer
	runID := ""
	for runs := 0; ; runs++ {
		if runs > 100 {
			t.Fatalf("%s: too many runs", workflowID)
		}
		var events []*historypb.HistoryEvent
		it := tc.GetWorkflowHistory(ctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			e, err := it.Next()
			if err != nil {
				t.Fatalf("history of %s: %v", workflowID, err)
			}
			events = append(events, e)
		}
		if len(events) == 0 {
			t.Fatalf("history of %s is empty", workflowID)
		}
		data, err := protojson.Marshal(&historypb.History{Events: events})
		if err != nil {
			t.Fatal(err)
		}
		out.Write(data)
		out.WriteByte('\n')
		for _, e := range events {
			payloadData(e.ProtoReflect(), &out)
		}
		runID = events[0].GetWorkflowExecutionStartedEventAttributes().GetContinuedExecutionRunId()
		if runID == "" {
			return out.String()
		}
	}
}

// payloadData appends the data of every Payload found in m.
func payloadData(m protoreflect.Message, out *bytes.Buffer) {
	if p, ok := m.Interface().(*commonpb.Payload); ok {
		out.Write(p.GetData())
		out.WriteByte('\n')
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					payloadData(mv.Message(), out)
					return true
				})
			}
		case fd.IsList():
			if fd.Message() != nil {
				for i := 0; i < v.List().Len(); i++ {
					payloadData(v.List().Get(i).Message(), out)
				}
			}
		case fd.Message() != nil:
			payloadData(v.Message(), out)
		}
		return true
	})
}
