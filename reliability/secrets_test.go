package reliability_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbot/agentbot/internal/devserver"
	"github.com/agentbot/agentbot/internal/fakeopenai"
	"github.com/agentbot/agentbot/internal/fakeslack"
	"github.com/agentbot/agentbot/internal/secretenv/secretenvtest"
)

// leakWindow is the shortest piece of a secret the scan looks for: any
// run of this many characters of one counts as a leak, so that a secret
// cut short (a truncated message, a masked key that shows too much, a
// chunk boundary) is found as well as a whole one.
const leakWindow = 12

// leakSecret is a secret the processes are started with.
type leakSecret struct{ name, value string }

// leakScanner finds secrets, or pieces of leakWindow characters of them,
// in text.
type leakScanner []leakSecret

// find returns, for each secret of which text holds a piece, a line
// saying which piece and where.
func (ls leakScanner) find(text string) []string {
	var out []string
	for _, sec := range ls {
		for i := 0; i+leakWindow <= len(sec.value); i++ {
			piece := sec.value[i : i+leakWindow]
			if at := strings.Index(text, piece); at >= 0 {
				out = append(out, fmt.Sprintf("%s (%q at character %d of it) in …%s…", sec.name, piece, i,
					text[max(0, at-80):min(len(text), at+len(piece)+80)]))
				break
			}
		}
	}
	return out
}

// leakDecoded returns data followed by the decoded form of every string in
// it (read as a stream of JSON values; data that is not JSON is returned
// as it is) that is base64: payloads the CLI does not show as JSON
// (binary ones, --no-json-shorthand-payloads) are base64, where a search
// would never find a secret.
func leakDecoded(data []byte) string {
	var b strings.Builder
	b.Write(data)
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		str, ok := tok.(string)
		if !ok || len(str) < 8 {
			continue
		}
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
			if raw, err := enc.DecodeString(str); err == nil {
				b.WriteByte('\n')
				b.Write(raw)
				break
			}
		}
	}
	return b.String()
}

// leakSources is what the scan reads: a name per source, its text.
type leakSources struct {
	names []string
	texts map[string]string
}

func (src *leakSources) add(name, text string) {
	if src.texts == nil {
		src.texts = map[string]string{}
	}
	if _, ok := src.texts[name]; !ok {
		src.names = append(src.names, name)
	}
	src.texts[name] += text + "\n"
}

// check fails the test for every secret found in any source.
func (src *leakSources) check(t *testing.T, ls leakScanner) {
	t.Helper()
	for _, n := range src.names {
		for _, f := range ls.find(src.texts[n]) {
			t.Errorf("a secret in %s: %s", n, f)
		}
	}
}

// leakCheckScanner proves the scan: it finds a secret whole, a piece of
// leakWindow characters of one, and one base64-encoded in a JSON string;
// it finds nothing in a shorter piece.
func leakCheckScanner(t *testing.T, ls leakScanner) {
	t.Helper()
	v := ls[0].value
	payload, err := json.Marshal(map[string]any{"data": base64.StdEncoding.EncodeToString([]byte("key=" + v))})
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{
		"whole":   "Authorization: Bearer " + v + "\n",
		"prefix":  "key " + v[:leakWindow] + "…",
		"piece":   "ends " + v[len(v)-leakWindow:],
		"payload": leakDecoded(payload),
	} {
		if len(ls.find(text)) == 0 {
			t.Fatalf("the scan does not find a secret (%s) in %q", name, text)
		}
	}
	if f := ls.find("key " + v[:leakWindow-1] + "… " + string(payload)); len(f) != 0 {
		t.Fatalf("the scan finds a secret in a piece shorter than %d characters or in base64 it did not decode: %v", leakWindow, f)
	}
}

// leakModel wraps the model's script so that the agent prints the secrets
// it knows on purpose, keyed by the user's message (each also carries a
// token for the answer, which starts "done." as DirectiveScript's do):
//   - "leak answer": an answer quoting the key it is called with (the
//     Authorization header) and every other secret;
//   - "leak write": write_file of a file holding them, read_file of it,
//     and an answer quoting both results and the secrets again;
//   - "leak shell": a shell command that has them in its arguments;
//   - "leak long": an answer of 200 lines with them, which the Slack
//     sender uploads as a file;
//   - "leak fail": the endpoint fails with an error that quotes them.
//
// Every other message goes to next.
func leakModel(ls leakScanner) func(next fakeopenai.Script) fakeopenai.Script {
	var all strings.Builder
	for _, sec := range ls {
		fmt.Fprintf(&all, "%s=%s\n", sec.name, sec.value)
	}
	secrets := all.String()
	return func(next fakeopenai.Script) fakeopenai.Script {
		return func(ctx context.Context, call fakeopenai.Call) (fakeopenai.Reply, error) {
			last, text := call.LastUserMessage()
			verb, ok := strings.CutPrefix(strings.TrimSpace(text), "leak ")
			if last < 0 || !ok {
				return next(ctx, call)
			}
			var outputs []string
			for _, m := range call.Messages[last+1:] {
				if m.Role == "tool" {
					outputs = append(outputs, m.Content)
				}
			}
			verb, tok, _ := strings.Cut(verb, " ")
			done := "done. " + tok + "\n"
			switch verb {
			case "answer":
				return fakeopenai.Text(done + "I was called with Authorization: Bearer " + modelKey + "\n" + secrets), nil
			case "write":
				switch len(outputs) {
				case 0:
					return fakeopenai.Invoke(fakeopenai.ToolWriteFile, map[string]any{"path": "leak.txt", "content": secrets}), nil
				case 1:
					return fakeopenai.Invoke(fakeopenai.ToolReadFile, map[string]any{"path": "leak.txt"}), nil
				}
				return fakeopenai.Text(done + strings.Join(outputs, "\n") + "\n" + secrets), nil
			case "shell":
				if len(outputs) == 0 {
					cmd := "echo " + strings.Join(strings.Fields(secrets), " ") + " > key-copy.txt; cat key-copy.txt; echo " + modelKey
					return fakeopenai.Invoke(fakeopenai.ToolShell, map[string]any{"command": cmd, "timeout_seconds": 60}), nil
				}
				return fakeopenai.Text(done + strings.Join(outputs, "\n")), nil
			case "long":
				var b strings.Builder
				b.WriteString(done)
				for i := range 200 {
					fmt.Fprintf(&b, "line %d: Bearer %s %s\n", i, modelKey, ls[i%len(ls)].value)
				}
				return fakeopenai.Text(b.String()), nil
			case "fail":
				return fakeopenai.Reply{Error: &fakeopenai.HTTPError{Status: http.StatusBadRequest,
					Message: "request refused for key " + modelKey + " (" + strings.ReplaceAll(secrets, "\n", ", ") + ")"}}, nil
			}
			return next(ctx, call)
		}
	}
}

// leakSlackTap stands between the processes and the fake Slack workspace
// (its Web API, uploads and downloads) and keeps every request body they
// send, so that a message later edited or deleted is scanned as it was
// sent. The bot token in form bodies (slack-go sends it there) is the
// request's credential, going where it belongs, and is left out.
type leakSlackTap struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []string
}

// leakTapSlack starts the tap and restarts the worker and the bot on it.
func leakTapSlack(t *testing.T, s *stack) *leakSlackTap {
	t.Helper()
	tap := &leakSlackTap{}
	target, err := url.Parse(s.slack.URL())
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = func(r *http.Response) error {
		// Upload and download URLs point at the workspace: through the
		// tap too.
		body, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return err
		}
		body = bytes.ReplaceAll(body, []byte(s.slack.URL()), []byte(tap.srv.URL))
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		r.Header.Set("Content-Length", strconv.Itoa(len(body)))
		return nil
	}
	tap.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		tap.record(r, body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(tap.srv.Close)
	s.cfg.env = append(s.cfg.env, "AGENTBOT_SLACK_API_URL="+tap.srv.URL+"/api/")
	s.signalWorker(t, syscall.SIGTERM)
	s.waitWorkerExit(t, time.Minute)
	s.startWorker(t)
	s.killBot(t)
	s.startBot(t)
	return tap
}

func (tap *leakSlackTap) record(r *http.Request, body []byte) {
	q := r.URL.Query()
	q.Del("token")
	text := r.Method + " " + r.URL.Path + "?" + q.Encode() + "\n"
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct == "application/x-www-form-urlencoded" {
		form, err := url.ParseQuery(string(body))
		if err == nil {
			form.Del("token")
			for _, k := range slices.Sorted(maps.Keys(form)) {
				text += k + "=" + strings.Join(form[k], "\x00") + "\n"
			}
			body = nil
		}
	}
	tap.mu.Lock()
	defer tap.mu.Unlock()
	tap.got = append(tap.got, text+string(body))
}

func (tap *leakSlackTap) requests() string {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	return strings.Join(tap.got, "\n")
}

// leakTemporal runs the temporal CLI against the stack's dev server.
func leakTemporal(t *testing.T, s *stack, args ...string) []byte {
	t.Helper()
	bin, err := devserver.FindBinary(os.Getenv("AGENTBOT_TEMPORAL_BIN"))
	if err != nil {
		t.Fatalf("the scan needs the temporal CLI (run scripts/setup.sh --test): %v", err)
	}
	s.mu.Lock()
	addr := s.temporal.FrontendHostPort()
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(args, "--address", addr, "--namespace", "default",
		"--color", "never", "--disable-config-file", "--disable-config-env")...)
	// Nothing of the test's environment: the CLI reads TEMPORAL_* from it.
	cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("temporal %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// leakRun is one workflow run.
type leakRun struct{ workflowID, runID string }

// leakHistories adds to src the list of every workflow run in the
// namespace, and each run's history (`temporal workflow show --output
// json`) and description (pending activities and their last failures,
// which the history does not hold yet), all as the CLI prints them. The
// runs are those the list shows, and those a history says its run
// continued (continue-as-new), so that none is missed. It returns the
// runs.
func leakHistories(t *testing.T, s *stack, src *leakSources) []leakRun {
	t.Helper()
	list := leakTemporal(t, s, "workflow", "list", "--output", "json")
	src.add("`temporal workflow list`", leakDecoded(list))
	var listed []struct {
		Execution struct {
			WorkflowID string `json:"workflowId"`
			RunID      string `json:"runId"`
		} `json:"execution"`
	}
	if err := json.Unmarshal(list, &listed); err != nil {
		t.Fatalf("temporal workflow list: %v\n%s", err, list)
	}
	var todo []leakRun
	for _, e := range listed {
		todo = append(todo, leakRun{e.Execution.WorkflowID, e.Execution.RunID})
	}
	seen := map[leakRun]bool{}
	var runs []leakRun
	for len(todo) > 0 {
		r := todo[0]
		todo = todo[1:]
		if seen[r] {
			continue
		}
		seen[r] = true
		runs = append(runs, r)
		name := fmt.Sprintf("the history of %s run %s", r.workflowID, r.runID)
		show := leakTemporal(t, s, "workflow", "show", "--workflow-id", r.workflowID, "--run-id", r.runID, "--output", "json")
		src.add(name, leakDecoded(show))
		var h struct {
			Events []struct {
				Attrs *struct {
					ContinuedExecutionRunID string `json:"continuedExecutionRunId"`
				} `json:"workflowExecutionStartedEventAttributes"`
			} `json:"events"`
		}
		if err := json.Unmarshal(show, &h); err != nil || len(h.Events) == 0 {
			t.Fatalf("temporal workflow show of %v: %v\n%s", r, err, show)
		}
		if a := h.Events[0].Attrs; a != nil && a.ContinuedExecutionRunID != "" {
			todo = append(todo, leakRun{r.workflowID, a.ContinuedExecutionRunID})
		}
		desc := leakTemporal(t, s, "workflow", "describe", "--workflow-id", r.workflowID, "--run-id", r.runID, "--output", "json")
		src.add("the description of "+r.workflowID+" run "+r.runID, leakDecoded(desc))
	}
	return runs
}

// leakFiles adds to src the files of the dev server's database and of the
// state directory but the sandboxes' workspaces and the workspace
// snapshots (they hold the user's files, .env included, as the sandbox
// does).
func leakFiles(t *testing.T, s *stack, src *leakSources) {
	t.Helper()
	dbFiles, _ := filepath.Glob(s.dbFile + "*")
	if len(dbFiles) == 0 {
		t.Fatalf("no database file %s", s.dbFile)
	}
	for _, f := range dbFiles {
		data, err := os.ReadFile(f)
		if errors.Is(err, fs.ErrNotExist) { // a journal, gone meanwhile
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		src.add("the Temporal database "+filepath.Base(f), string(data))
	}
	err := filepath.WalkDir(s.state, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) { // removed meanwhile
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(s.state, p)
		if d.IsDir() {
			if m, _ := filepath.Match("sandboxes/*/workspace", rel); m || rel == "blobs/snapshots" {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		src.add("the state directory's "+rel, string(data))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// leakChat adds to src everything the workspace holds: messages (their
// text, blocks, attachments, metadata and files), ephemeral messages,
// responses to commands and interactions, and file contents.
func leakChat(t *testing.T, s *stack, src *leakSources) {
	t.Helper()
	msgs := s.slack.Messages(channel)
	msgs = append(msgs, s.slack.Ephemerals(channel)...)
	for _, m := range msgs {
		data, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		name := "user message " + m.TS
		switch {
		case m.Recipient != "":
			name = "ephemeral message " + m.TS
		case m.BotID != "":
			name = "app message " + m.TS
		}
		src.add(name, string(data))
	}
	for i, r := range s.slack.Responses() {
		data, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		src.add(fmt.Sprintf("response %d", i), string(data))
	}
	for _, f := range s.slack.Files(channel) {
		src.add("file "+f.ID+" ("+f.Name+")", f.Title+"\n"+string(f.Content))
	}
}

// TestNoSecretAnywhere starts the stack with recognisable fake secrets for
// everything secret the processes take (the model key, the Slack bot token
// and signing secret, the AWS, E2B and Daytona keys; no payload codec, so
// that histories are readable) and runs a whole session in which the agent
// tries to print them: it reads a .env holding them, the sandbox's
// environment, its parent's /proc/<pid>/environ and every ancestor's
// (uploaded as a file: long), and the key repeated past the output's cut;
// the model quotes the key it is called with, writes the secrets to a file
// and reads it back, puts them in a shell command, gives a long answer
// with them (uploaded as a file), fails with an error quoting them; the
// session is switched, exported, forked, stopped and destroyed. Then it
// scans every workflow history and description in the namespace (the
// temporal CLI's JSON, every run), the dev server's database file, the
// state directory (blob store transcripts, sandbox metadata), both
// processes' logs, every message, ephemeral, response and file in the
// workspace, every request body the processes sent to Slack (through a
// tap, so edited and deleted messages count as sent) and to the model:
// none may hold a secret or a piece of one leakWindow characters long. A
// canary the user types (no secret to the product) must be found in the
// histories, the app's messages, the requests to Slack, the model
// requests and the database, and in the export: the scan reads what it
// claims to.
func TestNoSecretAnywhere(t *testing.T) {
	ls := leakScanner{
		{"OPENAI_API_KEY", modelKey},
		{"SLACK_BOT_TOKEN", secretenvtest.Secret("xoxb-SECRET-bot-")},
		{"SLACK_SIGNING_SECRET", secretenvtest.Secret("SECRET-signing-")},
		{"AWS_SECRET_ACCESS_KEY", secretenvtest.Secret("SECRET-aws-")},
		{"E2B_API_KEY", secretenvtest.Secret("e2b_SECRET-")},
		{"DAYTONA_API_KEY", secretenvtest.Secret("dtn_SECRET-")},
	}
	leakCheckScanner(t, ls)
	var env []string
	for _, sec := range ls[3:] {
		env = append(env, sec.name+"="+sec.value)
	}
	s := startStack(t,
		withSlack(func(o *fakeslack.Options) { o.BotToken, o.SigningSecret = ls[1].value, ls[2].value }),
		withModel(func(o *fakeopenai.Options) { o.APIKey = modelKey }),
		withScript(leakModel(ls)),
		withEnv(env...),
	)
	tap := leakTapSlack(t, s)

	repeat(t, "14. no secret in histories, logs, chat, uploads or exports after a session that prints them", func(t *testing.T, i int) {
		// step names a step's answer: no name is a prefix of another.
		tok := fmt.Sprintf("r%dleak", i)
		step := func(name string) string { return tok + "-" + name }
		canary := secretenvtest.Secret("canary-")
		waitCond := func(t *testing.T, what string, cond func(*fakeslack.Server) bool) {
			t.Helper()
			ctx, cancel := contextWithTimeout(answerWait)
			defer cancel()
			if err := s.slack.WaitFor(ctx, cond); err != nil {
				t.Fatalf("%s: not within %v", what, answerWait)
			}
		}
		// botSays waits for a message of the app in the thread with
		// want, and returns it.
		botSays := func(t *testing.T, root, want string) string {
			t.Helper()
			var got string
			ctx, cancel := contextWithTimeout(answerWait)
			defer cancel()
			err := s.slack.WaitFor(ctx, func(fs *fakeslack.Server) bool {
				for _, m := range fs.Thread(channel, root) {
					if m.BotID != "" && strings.Contains(m.Text, want) {
						got = m.Text
						return true
					}
				}
				return false
			})
			if err != nil {
				t.Fatalf("no message with %q in thread %s within %v:\n%s", want, root, answerWait, s.dumpThread(root))
			}
			return got
		}
		// ask sends a message in the thread and waits for its answer
		// (with want), which it returns.
		ask := func(t *testing.T, root, text, want string) string {
			t.Helper()
			s.slack.PostUserMessage(channel, alice, text, root)
			s.waitAnswer(t, root, want, answerWait)
			for _, m := range s.slack.Thread(channel, root) {
				if isAnswer(m, want) {
					return m.Text
				}
			}
			return ""
		}
		// askLong sends a message in the thread whose answer is long
		// enough to be uploaded, and waits for the file (with want).
		askLong := func(t *testing.T, root, text, want string) {
			t.Helper()
			s.slack.PostUserMessage(channel, alice, text, root)
			ctx, cancel := contextWithTimeout(answerWait)
			defer cancel()
			if err := s.slack.WaitFor(ctx, func(fs *fakeslack.Server) bool {
				for _, f := range fs.Files(channel) {
					if f.ThreadTS == root && f.User != alice && strings.Contains(string(f.Content), want) {
						return true
					}
				}
				return false
			}); err != nil {
				t.Fatalf("no file with %q in thread %s within %v:\n%s", want, root, answerWait, s.dumpThread(root))
			}
		}
		mustSay := func(t *testing.T, what, text string, want ...string) {
			t.Helper()
			for _, w := range want {
				if !strings.Contains(text, w) {
					t.Fatalf("%s lacks %q:\n%s", what, w, text)
				}
			}
		}

		root := s.slack.PostUserMessage(channel, alice, "<@UBOT> sh: echo "+canary, "")
		s.waitAnswer(t, root, canary, answerWait)
		// The session moves into a project of the user's (its files
		// replace the project's), where a .env holds the secrets.
		project := t.TempDir()
		s.slack.PostUserMessage(channel, alice, "!agent switch local "+project, root)
		botSays(t, root, "Switched local → local")
		var dotenv strings.Builder
		for _, sec := range ls {
			fmt.Fprintf(&dotenv, "%s=%s\n", sec.name, sec.value)
		}
		if err := os.WriteFile(filepath.Join(project, ".env"), []byte(dotenv.String()), 0o600); err != nil {
			t.Fatal(err)
		}

		// What the sandbox can read.
		a := ask(t, root, "sh: cat .env; echo "+step("env"), step("env"))
		mustSay(t, "the answer quoting .env", a, "OPENAI_API_KEY=[redacted]", "SLACK_BOT_TOKEN=[redacted]")
		ask(t, root, "sh: env; echo "+step("sandboxenv"), step("sandboxenv"))
		ask(t, root, "sh: tr '\\0' '\\n' </proc/$PPID/environ; echo "+step("parentenv"), step("parentenv"))
		// Every ancestor's environment: long, so it comes as a file.
		askLong(t, root, "sh: "+secretenvtest.WalkScript+"; cat walk.txt; echo "+step("walk"), step("walk"))

		// The key printed over and over, so that the sandbox's cut of a
		// long output (its head and tail kept) falls inside a copy of
		// it; three shifts, so that for one of them at least
		// leakWindow characters of the copy are kept.
		var cut strings.Builder
		for _, pad := range []int{0, 10, 20} {
			fmt.Fprintf(&cut, "sh: head -c %d /dev/zero | tr '\\0' x; v=$(sed -n 's/^OPENAI_API_KEY=//p' .env); for i in $(seq 3000); do printf %%s \"$v\"; done; echo; echo %s\n",
				pad, step("cut"))
		}
		s.slack.PostUserMessage(channel, alice, cut.String(), root)
		botSays(t, root, step("cut"))

		// What the model prints on purpose.
		a = ask(t, root, "leak answer "+step("answer"), step("answer"))
		mustSay(t, "the answer quoting the key", a, "Authorization: Bearer [redacted]")
		a = ask(t, root, "leak write "+step("write"), step("write"))
		mustSay(t, "the answer quoting the file", a, "OPENAI_API_KEY=[redacted]")
		ask(t, root, "leak shell "+step("shell"), step("shell"))
		askLong(t, root, "leak long "+step("long"), step("long"))
		s.slack.PostUserMessage(channel, alice, "leak fail "+step("fail"), root)
		botSays(t, root, "request refused")
		s.slack.PostUserMessage(channel, alice, "!agent status", root)
		botSays(t, root, "last error")
		ask(t, root, "sh: echo "+step("afterfail"), step("afterfail"))

		// The controls.
		s.slack.PostUserMessage(channel, alice, "!agent export", root)
		export := botSays(t, root, "--- turn")
		mustSay(t, "the export", export, canary)
		before := len(s.slack.Messages(channel))
		s.slack.PostUserMessage(channel, alice, "!agent fork leak fork "+tok, root)
		botSays(t, root, "Forked into")
		var forkRoot string
		waitCond(t, "the fork's thread", func(fs *fakeslack.Server) bool {
			for _, m := range fs.Messages(channel)[before:] {
				if m.ThreadTS == "" && m.BotID != "" && strings.Contains(m.Text, "Fork") {
					forkRoot = m.TS
					return true
				}
			}
			return false
		})
		botSays(t, forkRoot, "Forked from")
		a = ask(t, forkRoot, "sh: cat .env; echo "+step("forkenv"), step("forkenv"))
		mustSay(t, "the fork's answer quoting .env", a, "OPENAI_API_KEY=[redacted]")
		ask(t, forkRoot, "leak answer "+step("forkanswer"), step("forkanswer"))
		s.slack.PostUserMessage(channel, alice, "!agent destroy", forkRoot)
		botSays(t, forkRoot, "Destroyed")

		s.slack.PostUserMessage(channel, alice, "sleep: 60\nsh: echo "+step("stop"), root)
		waitCond(t, "the turn to stop reaches the model", func(*fakeslack.Server) bool { return s.turns(step("stop")) > 0 })
		s.slack.PostUserMessage(channel, alice, "!agent stop", root)
		botSays(t, root, "Stopped")
		responses := len(s.slack.Responses())
		s.slack.SlashCommand(channel, alice, "list")
		waitCond(t, "the answer to /agent list", func(fs *fakeslack.Server) bool { return len(fs.Responses()) > responses })

		// The blob store holds the session's transcripts until it is
		// destroyed: scan it now, and everything again at the end.
		var src leakSources
		leakFiles(t, s, &src)
		s.slack.PostUserMessage(channel, alice, "!agent destroy", root)
		botSays(t, root, "Destroyed")

		// The key reached the model: the agent had it to leak.
		called := false
		for _, r := range s.model.Requests() {
			called = called || (r.Header.Get("Authorization") == "Bearer "+modelKey && r.Status == http.StatusOK)
		}
		if !called {
			t.Fatal("the model was never called with the key")
		}

		runs := leakHistories(t, s, &src)
		leakFiles(t, s, &src)
		src.add("the processes' logs", s.logs())
		leakChat(t, s, &src)
		src.add("the requests to Slack's API", tap.requests())
		for j, r := range s.model.Requests() {
			src.add(fmt.Sprintf("model request %d", j), string(r.Body))
		}
		src.check(t, ls)

		// The canary shows where the scan must see what the user typed.
		canaryIn := map[string]bool{}
		kinds := []string{"the history of ", "app message ", "the requests to Slack's API", "model request ", "the Temporal database"}
		for _, n := range src.names {
			if len(leakScanner{{"canary", canary}}.find(src.texts[n])) == 0 {
				continue
			}
			for _, k := range kinds {
				if strings.HasPrefix(n, k) {
					canaryIn[k] = true
				}
			}
		}
		for _, k := range kinds {
			if !canaryIn[k] {
				t.Errorf("the scan does not see the canary %s the user typed in any of %q…: it does not read what it claims to", canary, k)
			}
		}
		t.Logf("scanned %d workflow runs in %d sources", len(runs), len(src.names))
	})
}
