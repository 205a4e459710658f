package agentflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.temporal.io/sdk/temporal"

	"github.com/agentbot/agentbot/agentflow/llm"
	"github.com/agentbot/agentbot/sandboxes"
)

// Tools are the tools the agent offers the model.
var Tools = []llm.Tool{
	{
		Name:        "shell",
		Description: "Run a shell command (/bin/sh -c) in the workspace root of the sandbox. Returns the exit code, stdout and stderr; long outputs keep their head and tail, and the output (up to its first and last 2 MiB per stream) is saved to a file named in the result.",
		Parameters: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"command":         map[string]any{"type": "string", "description": "the command line"},
				"timeout_seconds": map[string]any{"type": "integer", "description": "time limit in seconds (default 120, at most 1800)"},
			},
			"required":             []string{"command"},
			"additionalProperties": false,
		},
	},
	{
		Name:        "read_file",
		Description: "Read a text file of the workspace (path relative to the workspace root).",
		Parameters: map[string]any{
			"type":                 "object",
			"properties":           map[string]any{"path": map[string]any{"type": "string"}},
			"required":             []string{"path"},
			"additionalProperties": false,
		},
	},
	{
		Name:        "write_file",
		Description: "Create or replace a file of the workspace with the given content, creating parent directories.",
		Parameters: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"path":    map[string]any{"type": "string"},
				"content": map[string]any{"type": "string"},
			},
			"required":             []string{"path", "content"},
			"additionalProperties": false,
		},
	},
}

// toolFingerprint is the workspace's fingerprint after a call that may
// have changed it (in the form of SnapshotResult.Fingerprint), or "" when
// the backend has none or it takes longer than toolFingerprintBudget: the
// workflow then leaves the question to SnapshotSandbox. When it equals the
// fingerprint of the session's snapshot, the turn needs no snapshot and
// skips that activity (a read-only command, the usual case).
func (a *Activities) toolFingerprint(ctx context.Context, sb *sandboxes.Sandbox) string {
	ctx, cancel := context.WithTimeout(ctx, toolFingerprintBudget)
	defer cancel()
	f, err := sb.Fingerprint(ctx)
	if err != nil {
		return ""
	}
	return sb.ID() + ":" + f
}

// toolFingerprintBudget bounds what toolFingerprint adds to a tool call: a
// local workspace of 200 MB in 20,000 files takes 10-50 ms.
const toolFingerprintBudget = 200 * time.Millisecond

// maxReadFile bounds read_file.
const maxReadFile = 4 << 20

// Bounds of the output files of shell commands, kept in the workspace
// under sandboxes.OutputsDir for the model to read when the result it was
// given was cut.
const (
	// MaxKeptOutput bounds one command's output file: of stdout and of
	// stderr it keeps the first and last MaxKeptOutput/4 bytes, and says
	// where and how much it left out.
	MaxKeptOutput = 8 << 20
	// KeptOutputs is how many output files a workspace keeps; older
	// ones are deleted when a new one is written.
	KeptOutputs = 20
)

// RunTool runs one tool call in the session's sandbox. Problems the model
// can act on (bad arguments, a failing command, a missing file) are results
// with OK false, not errors; errors are for the sandbox itself failing.
// Known secrets are replaced in the result before the model or the history
// sees it (a command may well print one: cat .env); the whole output kept
// in the workspace is left as the command wrote it.
func (a *Activities) RunTool(ctx context.Context, in ToolInput) (res ToolResult, err error) {
	defer a.redactOut(&res, &err)
	defer heartbeat(ctx)()
	defer a.logTool(ctx, in, &res, &err)
	res = ToolResult{CallID: in.Call.ID, Name: in.Call.Name}
	defer func() { a.recordTool(ctx, in.Call.Name, res, err) }()
	traceAttrs(ctx, attribute.String("agentbot.workflow_id", in.SessionID), attribute.Int("agentbot.turn", in.Turn),
		attribute.Int("agentbot.step", in.Step), attribute.String("agentbot.tool", in.Call.Name),
		attribute.String("agentbot.tool_call_id", in.Call.ID), attribute.String("agentbot.backend", in.State.Backend),
		attribute.String("agentbot.sandbox_id", in.State.ID))
	args := in.Call.Arguments
	if in.Call.ArgsRef != "" {
		data, err := a.getBlob(ctx, in.Call.ArgsRef)
		if err != nil {
			return res, err
		}
		args = string(data)
	}
	sb, err := a.Sandboxes.Attach(ctx, in.State)
	if err != nil {
		return res, sandboxErr(err)
	}
	defer func() {
		if err == nil && in.Call.Name != "read_file" {
			res.Fingerprint = a.toolFingerprint(ctx, sb)
		}
	}()
	switch in.Call.Name {
	case "shell":
		var p struct {
			Command        string `json:"command"`
			TimeoutSeconds int    `json:"timeout_seconds"`
		}
		if err := decodeArgs(args, &p); err != nil || strings.TrimSpace(p.Command) == "" {
			return badArgs(res, `shell needs {"command": "..."}`, err), nil
		}
		timeout := in.DefaultTimeout
		if p.TimeoutSeconds > 0 {
			timeout = time.Duration(p.TimeoutSeconds) * time.Second
		}
		timeout = min(timeout, MaxToolTimeout)
		res.Mutating = true
		return a.shell(ctx, sb, in, p.Command, timeout, res)
	case "read_file":
		var p struct {
			Path string `json:"path"`
		}
		if err := decodeArgs(args, &p); err != nil || p.Path == "" {
			return badArgs(res, `read_file needs {"path": "..."}`, err), nil
		}
		sctx, span := startSpan(ctx, "sandbox.read_file", attribute.String("agentbot.backend", in.State.Backend), attribute.String("agentbot.sandbox_id", in.State.ID))
		a.traceContent(span, "agentbot.path", p.Path)
		data, err := sb.ReadFile(sctx, p.Path, maxReadFile)
		endSpan(span, err)
		if err != nil {
			if isSandboxFailure(err) {
				return res, lostErr(err)
			}
			res.Output = "error: " + err.Error()
			res.Summary = "failed"
			return res, nil
		}
		res.OK = true
		res.Summary = fmt.Sprintf("%d bytes", len(data))
		if !utf8.Valid(data) {
			res.Output = fmt.Sprintf("%s is a binary file of %d bytes; use shell tools (xxd, file) to inspect it", p.Path, len(data))
			return res, nil
		}
		res.Output = capText(string(data), MaxToolOutput, "")
		return res, nil
	case "write_file":
		var p struct {
			Path    string  `json:"path"`
			Content *string `json:"content"`
		}
		if err := decodeArgs(args, &p); err != nil || p.Path == "" || p.Content == nil {
			return badArgs(res, `write_file needs {"path": "...", "content": "..."}`, err), nil
		}
		res.Mutating = true
		sctx, span := startSpan(ctx, "sandbox.write_file", attribute.String("agentbot.backend", in.State.Backend), attribute.String("agentbot.sandbox_id", in.State.ID),
			attribute.Int("agentbot.bytes", len(*p.Content)))
		a.traceContent(span, "agentbot.path", p.Path)
		err := sb.WriteFile(sctx, p.Path, []byte(*p.Content), 0o644)
		endSpan(span, err)
		if err != nil {
			if isSandboxFailure(err) {
				return res, lostErr(err)
			}
			res.Output = "error: " + err.Error()
			res.Summary = "failed"
			return res, nil
		}
		res.OK = true
		res.Output = fmt.Sprintf("wrote %d bytes to %s", len(*p.Content), p.Path)
		res.Summary = fmt.Sprintf("%d bytes", len(*p.Content))
		return res, nil
	default:
		res.Output = fmt.Sprintf("unknown tool %q; the tools are shell, read_file and write_file", in.Call.Name)
		return res, nil
	}
}

// logTool logs a tool call's outcome with the fixed keys (the handler adds
// the workflow, run and thread of ctx): IDs, the tool's name and whether it
// worked, never its arguments or output. An error is returned, so the SDK
// logs it; this line only says there was one.
func (a *Activities) logTool(ctx context.Context, in ToolInput, res *ToolResult, err *error) {
	a.log().InfoContext(ctx, "tool call", "turn", in.Turn, "step", in.Step, "tool", in.Call.Name,
		"sandbox_id", in.State.ID, "backend", in.State.Backend, "ok", res.OK, "failed", *err != nil)
}

// isSandboxFailure tells a failure of the sandbox (gone, unreachable) from
// a failure the model caused (bad path, missing file).
func isSandboxFailure(err error) bool {
	return errors.Is(err, sandboxes.ErrNotFound) || errors.Is(err, sandboxes.ErrUnavailable)
}

func decodeArgs(args string, v any) error {
	if strings.TrimSpace(args) == "" {
		args = "{}"
	}
	dec := json.NewDecoder(strings.NewReader(args))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func badArgs(res ToolResult, usage string, err error) ToolResult {
	res.Output = "invalid arguments: " + usage
	if err != nil {
		res.Output += " (" + err.Error() + ")"
	}
	res.Summary = "invalid arguments"
	return res
}

func (a *Activities) shell(ctx context.Context, sb *sandboxes.Sandbox, in ToolInput, command string, timeout time.Duration, res ToolResult) (ToolResult, error) {
	logPath := fmt.Sprintf("%s/turn%d-step%d-%s.log", sandboxes.OutputsDir, in.Turn, in.Step, safeName(in.Call.ID))
	// The file is opened once the output passes what one stream's share
	// of the result holds, so that whenever the result is cut, the file
	// exists.
	spill := &spillWriter{max: MaxToolOutput / 2, limit: MaxKeptOutput, open: func() (io.WriteCloser, <-chan error) {
		pr, pw := io.Pipe()
		done := make(chan error, 1)
		go func() {
			err := sb.WriteFileFrom(context.WithoutCancel(ctx), logPath, pr, 0o644)
			pr.CloseWithError(err)
			done <- err
		}()
		return pw, done
	}}
	began := time.Now()
	sctx, span := startSpan(ctx, "sandbox.exec", attribute.String("agentbot.backend", in.State.Backend), attribute.String("agentbot.sandbox_id", in.State.ID))
	a.traceContent(span, "agentbot.command", command)
	defer span.End()
	out, err := sb.Exec(sctx, sandboxes.ExecRequest{
		Command: command, Timeout: timeout, MaxOutput: MaxToolOutput / 2,
		// Half of the file's bound for each stream: the sandbox hands
		// the file the head and tail of each, and says what it left out.
		MaxStream: MaxKeptOutput / 2,
		Stdout:    spillStream{spill, "stdout"}, Stderr: spillStream{spill, "stderr"},
	})
	a.sandboxOp(ctx, in.State.Backend, "exec", began, err)
	wrote, spilled := spill.finish()
	if err != nil {
		span.SetStatus(codes.Error, "exec failed")
	} else {
		span.SetAttributes(attribute.Int("agentbot.exit_code", out.ExitCode), attribute.Bool("agentbot.timed_out", out.TimedOut))
		a.traceContent(span, "agentbot.stdout", out.Stdout.String())
		a.traceContent(span, "agentbot.stderr", out.Stderr.String())
	}
	switch {
	case err != nil && errors.Is(err, sandboxes.ErrTimeout):
	case err != nil && ctx.Err() != nil:
		return res, ctx.Err()
	case err != nil && errors.Is(err, sandboxes.ErrInvalid):
		res.Output = "error: " + err.Error()
		return res, nil
	case err != nil:
		return res, lostErr(err)
	}
	var b strings.Builder
	if out.TimedOut {
		fmt.Fprintf(&b, "timed out after %s; the command and its children were killed\n", timeout)
		res.Summary = "timed out"
	} else {
		fmt.Fprintf(&b, "exit code: %d\n", out.ExitCode)
		res.Summary = fmt.Sprintf("exit %d in %s", out.ExitCode, out.Duration.Round(100*time.Millisecond))
	}
	if out.Stdout.Len() > 0 {
		b.WriteString("stdout:\n" + out.Stdout.String() + "\n")
	}
	if out.Stderr.Len() > 0 {
		b.WriteString("stderr:\n" + out.Stderr.String() + "\n")
	}
	if out.Stdout.Truncated() || out.Stderr.Truncated() {
		switch left := spill.leftOut(); {
		case spilled != nil:
			fmt.Fprintf(&b, "[output was cut; saving it to a file failed: %v]\n", spilled)
		case left > 0:
			fmt.Fprintf(&b, "[output was cut; %s keeps the first and last %d MiB of stdout and of stderr, %d bytes were left out]\n",
				logPath, MaxKeptOutput/4>>20, left)
		default:
			fmt.Fprintf(&b, "[output was cut; the whole output is in %s]\n", logPath)
		}
	}
	if wrote && spilled == nil {
		a.pruneOutputs(ctx, sb)
	}
	res.OK = !out.TimedOut && out.ExitCode == 0
	res.Output = capText(b.String(), MaxToolOutput, "")
	res.Head, res.Lines = outputHead(out.Stdout.String(), out.Stderr.String())
	return res, nil
}

// pruneScript deletes all but the newest KeptOutputs output files from
// OutputsDir. Only files named as shell names them: the user's own files
// there are not ours to delete.
var pruneScript = fmt.Sprintf(`cd %s 2>/dev/null || exit 0
ls -1t | grep -E '^turn[0-9]+-step[0-9]+-[A-Za-z0-9_-]+\.log$' | tail -n +%d | while IFS= read -r f; do rm -f -- "$f"; done
exit 0`, sandboxes.OutputsDir, KeptOutputs+1)

// pruneOutputs keeps OutputsDir to the newest KeptOutputs files. It runs
// after a command whose output went to a file, in the sandbox (the one way
// to list files that every backend has). A failure is left for the next
// time: housekeeping must not fail the tool call.
func (a *Activities) pruneOutputs(ctx context.Context, sb *sandboxes.Sandbox) {
	_, _ = sb.Exec(ctx, sandboxes.ExecRequest{Command: pruneScript, Timeout: time.Minute, MaxOutput: 1 << 10})
}

// spillWriter keeps a command's output in memory up to max bytes; past
// that it streams everything (what it held first) to a file it opens then.
// What reaches it is bounded already (ExecRequest.MaxStream: the head and
// tail of each stream, and a Skip where the middle was left out, which it
// notes in the file); it writes at most limit bytes of output all the same,
// so that the file is bounded whatever it is given.
type spillWriter struct {
	mu      sync.Mutex
	max     int
	limit   int64
	buf     []byte
	open    func() (io.WriteCloser, <-chan error)
	w       io.WriteCloser
	done    <-chan error
	err     error
	written int64 // bytes of output kept
	skipped int64 // bytes the sandbox left out (Skip)
	over    int64 // bytes left out past limit
}

// spillStream is one stream of a command as its spillWriter sees it.
type spillStream struct {
	s    *spillWriter
	name string // "stdout" or "stderr"
}

func (w spillStream) Write(p []byte) (int, error) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	n := len(p)
	if room := w.s.limit - w.s.written; int64(len(p)) > room {
		w.s.over += int64(len(p)) - room
		p = p[:room]
	}
	w.s.written += int64(len(p))
	w.s.write(p)
	// The command's output must not fail because the file did.
	return n, nil
}

// Skip implements sandboxes.Skipper: the file says where, and how much,
// the sandbox left out.
func (w spillStream) Skip(n int64) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	w.s.skipped += n
	w.s.write(fmt.Appendf(nil, "\n[... %d bytes of %s left out ...]\n", n, w.name))
}

// write adds p to the buffer or the file; s.mu is held.
func (s *spillWriter) write(p []byte) {
	if s.err != nil || len(p) == 0 {
		return
	}
	if s.w == nil && len(s.buf)+len(p) <= s.max {
		s.buf = append(s.buf, p...)
		return
	}
	if s.w == nil {
		s.w, s.done = s.open()
		if _, err := s.w.Write(s.buf); err != nil {
			s.err = err
			return
		}
		s.buf = nil
	}
	if _, err := s.w.Write(p); err != nil {
		s.err = err
	}
}

// leftOut is how many bytes of output the file does not have.
func (s *spillWriter) leftOut() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.skipped + s.over
}

// finish closes the file, if one was opened, and says whether it was
// (wrote) and whether writing it failed.
func (s *spillWriter) finish() (wrote bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil {
		return false, nil
	}
	if s.over > 0 {
		s.write(fmt.Appendf(nil, "\n[... %d more bytes left out: output files keep at most %d bytes ...]\n", s.over, s.limit))
	}
	s.w.Close()
	if err := <-s.done; err != nil {
		return true, err
	}
	return true, s.err
}

// capText keeps the head and tail of s within max bytes, saying what was
// cut.
func capText(s string, max int, where string) string {
	if len(s) <= max {
		return s
	}
	note := fmt.Sprintf("\n[... %d bytes cut%s ...]\n", len(s)-max, where)
	half := (max - len(note)) / 2
	head, tail := half, len(s)-half
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	for tail < len(s) && !utf8.RuneStart(s[tail]) {
		tail++
	}
	return s[:head] + note + s[tail:]
}

func safeName(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			b.WriteRune(r)
		}
		if b.Len() >= 40 {
			break
		}
	}
	if b.Len() == 0 {
		return "call"
	}
	return b.String()
}

// outputHead returns the first non-blank line of stdout (else of stderr),
// cut to 120 bytes, and how many lines the two hold.
func outputHead(stdout, stderr string) (head string, lines int) {
	for _, s := range []string{stdout, stderr} {
		if s == "" {
			continue
		}
		lines += strings.Count(s, "\n")
		if !strings.HasSuffix(s, "\n") {
			lines++
		}
		if head != "" {
			continue
		}
		for l := range strings.Lines(s) {
			if l = strings.TrimSpace(l); l != "" {
				head = cut(l, 120)
				break
			}
		}
	}
	return head, lines
}

// CallSummary is the one line a tool call is shown by in progress
// messages: its name and its command or path ("shell: go test ./...").
// Arguments is the call's JSON object.
func CallSummary(name, arguments string) string {
	return toolSummary(ToolCall{Name: name, Arguments: arguments})
}

// toolSummary is a one-line description of a call for progress messages.
func toolSummary(c ToolCall) string {
	var p map[string]any
	_ = json.Unmarshal([]byte(c.Arguments), &p)
	var s string
	switch c.Name {
	case "shell":
		s, _ = p["command"].(string)
	case "read_file", "write_file":
		s, _ = p["path"].(string)
	}
	if c.ArgsRef != "" && s == "" {
		s = "(large arguments)"
	}
	s = strings.Join(strings.Fields(s), " ")
	return c.Name + ": " + cut(s, 120)
}

// lostErr is sandboxErr for failures after the tool reached the sandbox: a
// sandbox that vanished mid-call is SandboxLost, which the workflow does not
// retry (the call may have run), unlike SandboxGone from attaching.
func lostErr(err error) error {
	if errors.Is(err, sandboxes.ErrNotFound) {
		return temporal.NewNonRetryableApplicationError("the sandbox disappeared while the tool ran", errTypeSandboxLost, err)
	}
	return sandboxErr(err)
}
