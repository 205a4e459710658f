package agentflow

// Unit tests of the transcript work of ModelStep (model.go): compaction
// when the context overflows, and tool-call IDs.

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/agentbot/agentbot/agentflow/llm"
)

// conversation builds a transcript of turns: turns[i] is how many tool
// steps turn i has, each with one call whose output is outBytes long; each
// turn but the last ends with an answer (the last is the one running).
func conversation(outBytes int, turns ...int) []llm.Message {
	var msgs []llm.Message
	for t, steps := range turns {
		msgs = append(msgs, llm.Message{Role: llm.RoleUser, Content: fmt.Sprintf("question %d", t+1)})
		for s := range steps {
			id := fmt.Sprintf("c%d_%d", t+1, s+1)
			msgs = append(msgs,
				llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: id, Name: "shell", Arguments: `{"command":"make"}`}}},
				llm.Message{Role: llm.RoleTool, ToolCallID: id, Content: fmt.Sprintf("<%s>", id) + strings.Repeat("x", outBytes) + fmt.Sprintf("</%s>", id)})
		}
		if t < len(turns)-1 {
			msgs = append(msgs, llm.Message{Role: llm.RoleAssistant, Content: fmt.Sprintf("answer %d", t+1)})
		}
	}
	return msgs
}

// checkPairs fails unless every tool call of msgs is answered by the tool
// messages right after its assistant message, and every tool message
// answers such a call: what every API requires.
func checkPairs(t *testing.T, msgs []llm.Message) {
	t.Helper()
	var pending []string
	for i, m := range msgs {
		if m.Role == llm.RoleTool {
			k := slices.Index(pending, m.ToolCallID)
			if k < 0 {
				t.Errorf("message %d answers %q, which is not a pending call (pending %q)", i, m.ToolCallID, pending)
				continue
			}
			pending = slices.Delete(pending, k, k+1)
			continue
		}
		if len(pending) > 0 {
			t.Errorf("message %d (%s) comes before the results of %q", i, m.Role, pending)
		}
		pending = nil
		for _, c := range m.ToolCalls {
			pending = append(pending, c.ID)
		}
	}
	if len(pending) > 0 {
		t.Errorf("calls %q are never answered", pending)
	}
}

func userContents(msgs []llm.Message) []string {
	var out []string
	for _, m := range msgs {
		if m.Role == llm.RoleUser {
			out = append(out, m.Content)
		}
	}
	return out
}

// outputs maps the tool-call IDs of msgs to their results.
func outputs(msgs []llm.Message) map[string]string {
	out := map[string]string{}
	for _, m := range msgs {
		if m.Role == llm.RoleTool {
			out[m.ToolCallID] = m.Content
		}
	}
	return out
}

const cutNote = "bytes cut to fit the model's context"

func TestFit(t *testing.T) {
	// Three turns of 3 steps with 8 KiB outputs, the running one with 4.
	msgs := conversation(8<<10, 3, 3, 4)
	whole := size(msgs)
	orig, err := json.Marshal(msgs)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		budget int
		check  func(t *testing.T, got []llm.Message)
	}{
		{"fits", whole, func(t *testing.T, got []llm.Message) {
			if !slices.EqualFunc(got, msgs, func(a, b llm.Message) bool { return a.Content == b.Content }) {
				t.Error("a conversation within the budget was changed")
			}
		}},
		{"old outputs cut first", whole - 20<<10, func(t *testing.T, got []llm.Message) {
			// Every turn is still there; only the old outputs are cut.
			if u := userContents(got); len(u) != 3 {
				t.Errorf("user messages %q, want all three", u)
			}
			for id, out := range outputs(got) {
				old := !strings.HasPrefix(id, "c3_")
				if cut := strings.Contains(out, cutNote); cut != old {
					t.Errorf("output of %s cut: %v", id, cut)
				}
				if !strings.HasPrefix(out, "<"+id+">") || !strings.HasSuffix(out, "</"+id+">") {
					t.Errorf("output of %s lost its head or tail: %.40q...", id, out)
				}
			}
		}},
		{"then old turns", 4*(8<<10+200) + 2<<10, func(t *testing.T, got []llm.Message) {
			if u := userContents(got); !slices.Equal(u, []string{"question 3"}) {
				t.Errorf("user messages %q, want only the running turn's", u)
			}
			if got[0].Role != llm.RoleSystem || !strings.Contains(got[0].Content, "left out to fit the context") {
				t.Errorf("first message %+v, want the note", got[0])
			}
			for id, out := range outputs(got) {
				if strings.Contains(out, cutNote) {
					t.Errorf("output of %s of the running turn cut while leaving old turns out would do", id)
				}
			}
		}},
		{"then the running turn's outputs", 4 * (4<<10 + 200), func(t *testing.T, got []llm.Message) {
			outs := outputs(got)
			if len(outs) != 4 {
				t.Errorf("%d outputs, want the running turn's 4", len(outs))
			}
			for id, out := range outs {
				if !strings.Contains(out, cutNote) || !strings.HasSuffix(out, "</"+id+">") {
					t.Errorf("output of %s: %d bytes, not cut or without its tail", id, len(out))
				}
			}
		}},
		{"then the running turn's first steps", 2 * (minOutputKeep + 200), func(t *testing.T, got []llm.Message) {
			outs := outputs(got)
			if _, ok := outs["c3_4"]; !ok || len(outs) >= 4 {
				t.Errorf("outputs %d, want fewer than 4 and the last one kept", len(outs))
			}
			var note bool
			for _, m := range got {
				note = note || m.Role == llm.RoleSystem && strings.Contains(m.Content, "of this turn, your tool calls and their results, are left out")
			}
			if !note {
				t.Error("no note says steps of the turn were left out")
			}
			if u := userContents(got); !slices.Equal(u, []string{"question 3"}) {
				t.Errorf("user messages %q", u)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := fit(msgs, tt.budget)
			checkPairs(t, got)
			if n := size(got); n > tt.budget {
				t.Errorf("size %d, over the budget %d", n, tt.budget)
			}
			tt.check(t, got)
			if now, _ := json.Marshal(msgs); string(now) != string(orig) {
				t.Error("fit changed its input")
			}
		})
	}
}

func TestFitLongArguments(t *testing.T) {
	content := strings.Repeat("line of a big file\n", 2000)
	args, _ := json.Marshal(map[string]string{"path": "src/big.txt", "content": content})
	msgs := []llm.Message{
		{Role: llm.RoleUser, Content: "write it"},
		{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "w1", Name: "write_file", Arguments: string(args)}}},
		{Role: llm.RoleTool, ToolCallID: "w1", Content: "wrote it"},
		{Role: llm.RoleAssistant, Content: "done"},
		{Role: llm.RoleUser, Content: "thanks"},
	}
	got := fit(msgs, 8<<10)
	checkPairs(t, got)
	var a map[string]string
	if err := json.Unmarshal([]byte(got[1].ToolCalls[0].Arguments), &a); err != nil {
		t.Fatalf("arguments are no longer JSON: %v", err)
	}
	if a["path"] != "src/big.txt" || !strings.Contains(a["content"], cutNote) || len(a["content"]) > oldOutputKeep {
		t.Errorf("arguments after the cut: path %q, content of %d bytes", a["path"], len(a["content"]))
	}
}

func TestUniqueCallIDs(t *testing.T) {
	call := func(ids ...string) llm.Message {
		m := llm.Message{Role: llm.RoleAssistant}
		for _, id := range ids {
			m.ToolCalls = append(m.ToolCalls, llm.ToolCall{ID: id, Name: "shell", Arguments: "{}"})
		}
		return m
	}
	result := func(id, out string) llm.Message { return llm.Message{Role: llm.RoleTool, ToolCallID: id, Content: out} }
	msgs := []llm.Message{
		{Role: llm.RoleUser, Content: "one"},
		call("call_1", "call_2"), result("call_1", "a"), result("call_2", "b"),
		{Role: llm.RoleAssistant, Content: "done"},
		{Role: llm.RoleUser, Content: "two"}, // after a restart of the endpoint
		call("call_1"), result("call_1", "c"),
		call("call_2", "call_2"), result("call_2", "d"), result("call_2", "e"),
	}
	taken := uniqueCallIDs(msgs)
	checkPairs(t, msgs)
	seen := map[string]bool{}
	for _, m := range msgs {
		for _, c := range m.ToolCalls {
			if seen[c.ID] {
				t.Errorf("ID %q still appears twice", c.ID)
			}
			seen[c.ID] = true
			if !taken[c.ID] {
				t.Errorf("ID %q is not among those returned", c.ID)
			}
		}
	}
	// The first of each keeps its name; each result still answers the
	// call it answered (by position).
	if msgs[1].ToolCalls[0].ID != "call_1" || msgs[1].ToolCalls[1].ID != "call_2" {
		t.Errorf("first calls renamed: %+v", msgs[1].ToolCalls)
	}
	byID := map[string]string{}
	for _, m := range msgs {
		if m.Role == llm.RoleTool {
			byID[m.ToolCallID] = m.Content
		}
	}
	for _, want := range []struct{ id, out string }{
		{msgs[6].ToolCalls[0].ID, "c"}, {msgs[8].ToolCalls[0].ID, "d"}, {msgs[8].ToolCalls[1].ID, "e"},
	} {
		if byID[want.id] != want.out {
			t.Errorf("call %s answered %q, want %q", want.id, byID[want.id], want.out)
		}
	}

	// A transcript without duplicates is left as it is.
	clean := []llm.Message{{Role: llm.RoleUser, Content: "x"}, call("a"), result("a", "1")}
	uniqueCallIDs(clean)
	if clean[1].ToolCalls[0].ID != "a" || clean[2].ToolCallID != "a" {
		t.Errorf("a clean transcript changed: %+v", clean)
	}
}

func TestCallID(t *testing.T) {
	in := ModelStepInput{SessionID: "agent/slack:T1:C1:1700000000.000100", Turn: 12345, Step: 24}
	valid := regexp.MustCompile(`^[A-Za-z0-9_]{1,40}$`)
	taken := map[string]bool{}
	a, b := callID(taken, in, 0), callID(taken, in, 11)
	if a == b || !valid.MatchString(a) || !valid.MatchString(b) {
		t.Errorf("IDs %q and %q: not distinct, or not letters, digits and _ within 40 characters", a, b)
	}
	// The same step of the same transcript gives the same IDs (a retried
	// ModelStep records what the first attempt did).
	if again := callID(map[string]bool{}, in, 0); again != a {
		t.Errorf("callID is not stable: %q, then %q", a, again)
	}
	// An ID the transcript holds already (a fork's copy, an endpoint's
	// ID of the same form) is not given again.
	if c := callID(taken, in, 0); c == a || taken[c] != true {
		t.Errorf("an ID taken was given again: %q", c)
	}
	// A fork numbers its turns from 1 again, over its source's transcript.
	fork := in
	fork.SessionID = "agent/slack:T1:C1:1700000999.000200"
	if f := callID(map[string]bool{}, fork, 0); f == a {
		t.Errorf("a fork's ID %q is its source's", f)
	}
}

func TestSmallerBudget(t *testing.T) {
	said := &llm.APIError{StatusCode: 400, ContextTokens: 8000, RequestTokens: 16000}
	if b := smallerBudget(said, 90_000, 10_000); b != 35_000 {
		// (90k + 10k) * 8/16 * 0.9 - 10k
		t.Errorf("budget from the endpoint's numbers = %d, want 35000", b)
	}
	if b := smallerBudget(&llm.APIError{StatusCode: 413}, 90_000, 10_000); b != 45_000 {
		t.Errorf("budget without numbers = %d, want half", b)
	}
	// Numbers that would not shrink it still do.
	odd := &llm.APIError{StatusCode: 400, ContextTokens: 9990, RequestTokens: 10000}
	if b := smallerBudget(odd, 90_000, 0); b > 81_000 {
		t.Errorf("budget = %d, not less than what was sent", b)
	}
}
