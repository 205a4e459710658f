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

	"go.temporal.io/sdk/temporal"

	"github.com/agentbot/agentbot/agentflow/llm"
	"github.com/agentbot/agentbot/sandboxes"
)

// Tools are the tools the agent offers the model.
var Tools = []llm.Tool{
	{
		Name:        "shell",
		Description: "Run a shell command (/bin/sh -c) in the workspace root of the sandbox. Returns the exit code, stdout and stderr; long outputs keep their head and tail and the whole output is saved to a file.",
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

// maxReadFile bounds read_file.
const maxReadFile = 4 << 20

// RunTool runs one tool call in the session's sandbox. Problems the model
// can act on (bad arguments, a failing command, a missing file) are results
// with OK false, not errors; errors are for the sandbox itself failing.
// Known secrets are replaced in the result before the model or the history
// sees it (a command may well print one: cat .env); the whole output kept
// in the workspace is left as the command wrote it.
func (a *Activities) RunTool(ctx context.Context, in ToolInput) (res ToolResult, err error) {
	defer a.redactOut(&res, &err)
	defer heartbeat(ctx)()
	res = ToolResult{CallID: in.Call.ID, Name: in.Call.Name}
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
		data, err := sb.ReadFile(ctx, p.Path, maxReadFile)
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
		if err := sb.WriteFile(ctx, p.Path, []byte(*p.Content), 0o644); err != nil {
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
	logPath := fmt.Sprintf(".agentbot/outputs/turn%d-step%d-%s.log", in.Turn, in.Step, safeName(in.Call.ID))
	spill := &spillWriter{max: MaxToolOutput, open: func() (io.WriteCloser, <-chan error) {
		pr, pw := io.Pipe()
		done := make(chan error, 1)
		go func() {
			err := sb.WriteFileFrom(context.WithoutCancel(ctx), logPath, pr, 0o644)
			pr.CloseWithError(err)
			done <- err
		}()
		return pw, done
	}}
	out, err := sb.Exec(ctx, sandboxes.ExecRequest{
		Command: command, Timeout: timeout, MaxOutput: MaxToolOutput / 2,
		Stdout: spill, Stderr: spill,
	})
	spilled := spill.finish()
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
		if spilled == nil {
			fmt.Fprintf(&b, "[output was cut; the whole output is in %s]\n", logPath)
		} else {
			fmt.Fprintf(&b, "[output was cut; saving it whole failed: %v]\n", spilled)
		}
	}
	res.OK = !out.TimedOut && out.ExitCode == 0
	res.Output = capText(b.String(), MaxToolOutput, "")
	return res, nil
}

// spillWriter keeps output in memory up to max bytes; past that it streams
// everything (what it held first) to a writer it opens then.
type spillWriter struct {
	mu   sync.Mutex
	max  int
	buf  []byte
	open func() (io.WriteCloser, <-chan error)
	w    io.WriteCloser
	done <-chan error
	err  error
}

func (s *spillWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return len(p), nil // the command's output must not fail because the log did
	}
	if s.w == nil && len(s.buf)+len(p) <= s.max {
		s.buf = append(s.buf, p...)
		return len(p), nil
	}
	if s.w == nil {
		s.w, s.done = s.open()
		if _, err := s.w.Write(s.buf); err != nil {
			s.err = err
			return len(p), nil
		}
		s.buf = nil
	}
	if _, err := s.w.Write(p); err != nil {
		s.err = err
	}
	return len(p), nil
}

// finish closes the spill file, if one was opened, and says whether saving
// it failed.
func (s *spillWriter) finish() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil {
		return nil
	}
	s.w.Close()
	if err := <-s.done; err != nil {
		return err
	}
	return s.err
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
