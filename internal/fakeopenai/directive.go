package fakeopenai

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// The tools DirectiveScript calls, with the argument names the agent
// declares: shell{command string, timeout_seconds int}, read_file{path
// string}, write_file{path string, content string}.
const (
	ToolShell     = "shell"
	ToolReadFile  = "read_file"
	ToolWriteFile = "write_file"
)

// DirectiveShellTimeout is the timeout_seconds of a "sh:" directive; a
// "sleep: N" directive gets N seconds more.
const DirectiveShellTimeout = 60

// Directive is one tool call that a line of a user message asks for.
type Directive struct {
	// Line is the 1-based line number in the message.
	Line int
	// Tool is ToolShell, ToolReadFile or ToolWriteFile.
	Tool string
	// Arguments is the JSON object of the call's arguments.
	Arguments string
}

// ParseDirectives returns the directives of a message, one per line of
// these forms (leading blanks allowed, prefixes case-sensitive):
//
//	sh: <command>                   shell {"command", "timeout_seconds": 60}
//	sleep: <seconds>                shell {"command": "sleep <seconds>", "timeout_seconds": 60+seconds}
//	read: <path>                    read_file {"path"}
//	write: <path> <<< <content>     write_file {"path", "content"}
//
// The content of "write:" is the rest of the line after "<<<" and one space;
// in it \n, \t, \r and \\ stand for a newline, a tab, a carriage return and
// a backslash (other backslashes are kept), so a multi-line file fits on one
// line. Other lines are not directives and are ignored. A line that starts
// like a directive but is malformed (no command, no path, no "<<<", a
// seconds value that is not a number) is an error naming the line.
func ParseDirectives(text string) ([]Directive, error) {
	var out []Directive
	for i, raw := range strings.Split(text, "\n") {
		line := strings.TrimLeft(strings.TrimSuffix(raw, "\r"), " \t")
		kind, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		d := Directive{Line: i + 1}
		var args any
		switch kind {
		case "sh":
			cmd := strings.TrimSpace(rest)
			if cmd == "" {
				return nil, fmt.Errorf("line %d: sh: needs a command", d.Line)
			}
			d.Tool = ToolShell
			args = shellArgs{Command: cmd, TimeoutSeconds: DirectiveShellTimeout}
		case "sleep":
			arg := strings.TrimSpace(rest)
			// Plain decimals only: the value goes into a shell command.
			secs, err := strconv.ParseFloat(arg, 64)
			if err != nil || strings.Trim(arg, "0123456789.") != "" {
				return nil, fmt.Errorf("line %d: sleep: needs a number of seconds, got %q", d.Line, arg)
			}
			d.Tool = ToolShell
			args = shellArgs{Command: "sleep " + arg, TimeoutSeconds: DirectiveShellTimeout + int(math.Ceil(secs))}
		case "read":
			path := strings.TrimSpace(rest)
			if path == "" {
				return nil, fmt.Errorf("line %d: read: needs a path", d.Line)
			}
			d.Tool = ToolReadFile
			args = readArgs{Path: path}
		case "write":
			path, content, ok := strings.Cut(rest, "<<<")
			path = strings.TrimSpace(path)
			if !ok || path == "" {
				return nil, fmt.Errorf("line %d: write: needs \"<path> <<< <content>\"", d.Line)
			}
			d.Tool = ToolWriteFile
			args = writeArgs{Path: path, Content: unescape(strings.TrimPrefix(content, " "))}
		default:
			continue
		}
		b, err := json.Marshal(args)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", d.Line, err)
		}
		d.Arguments = string(b)
		out = append(out, d)
	}
	return out, nil
}

type shellArgs struct {
	Command        string `json:"command"`
	TimeoutSeconds int    `json:"timeout_seconds"`
}

type readArgs struct {
	Path string `json:"path"`
}

type writeArgs struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// unescape replaces \n, \t, \r and \\; other backslashes stay.
func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case '\\':
			b.WriteByte('\\')
		default:
			b.WriteByte('\\')
			continue
		}
		i++
	}
	return b.String()
}

// DirectiveScript returns a deterministic Script for end-to-end tests and
// offline demos. It reads the last user message with ParseDirectives and,
// one model step at a time, calls a tool for each directive in order: the
// number of tool calls the assistant made since that message says which
// directive is next. After the last tool result it answers a final text that
// quotes every result since the message, in order:
//
//	done.
//	[shell] <output of the first call>
//	[write_file] <output of the second call>
//
// A message without directives is answered "echo: <message>"; a malformed
// directive "directive error: <what is wrong>"; a directive whose tool the
// request does not offer "cannot run line N: ..." (all final texts, so the
// conversation goes on).
func DirectiveScript() Script {
	return func(_ context.Context, call Call) (Reply, error) {
		last, text := call.LastUserMessage()
		if last < 0 {
			return Text("echo: "), nil
		}
		dirs, err := ParseDirectives(text)
		if err != nil {
			return Text("directive error: " + err.Error()), nil
		}
		if len(dirs) == 0 {
			return Text("echo: " + text), nil
		}

		type result struct{ tool, output string }
		var (
			issued  int
			names   = map[string]string{}
			results []result
		)
		for _, m := range call.Messages[last+1:] {
			switch m.Role {
			case "assistant":
				issued += len(m.ToolCalls)
				for _, tc := range m.ToolCalls {
					names[tc.ID] = tc.Name
				}
			case "tool":
				results = append(results, result{tool: names[m.ToolCallID], output: m.Content})
			}
		}
		if issued < len(dirs) {
			d := dirs[issued]
			if !slices.Contains(call.Tools, d.Tool) {
				return Text(fmt.Sprintf("cannot run line %d: the request offers no %q tool (offered: %s)",
					d.Line, d.Tool, strings.Join(call.Tools, ", "))), nil
			}
			return Invoke(d.Tool, json.RawMessage(d.Arguments)), nil
		}
		var b strings.Builder
		b.WriteString("done.")
		for _, r := range results {
			fmt.Fprintf(&b, "\n[%s] %s", r.tool, r.output)
		}
		return Text(b.String()), nil
	}
}
