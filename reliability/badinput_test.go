package reliability_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/agentbot/agentbot/agentflow"
	slackbot "github.com/agentbot/agentbot/bot/slack"
	"github.com/agentbot/agentbot/internal/fakeslack"
)

// TestBadInput (issue 16, item 12) gives the real bot and worker bad input
// through Slack's own entry points — messages, mentions, `/agent` slash
// commands, `!agent` commands in threads, and raw signed HTTP requests —
// one kind at a time, each kind -runs times:
//
//	a. empty mentions, messages and commands
//	b. 100 KB messages and commands (and one at the 32 KB limit)
//	c. control characters and invalid UTF-8, in messages, titles,
//	   commands, a raw event body and a command's output
//	d. titles over the 100-character limit
//	e. unknown verbs and backends
//	f. relative and forbidden roots for the local backend
//	g. every verb, a message and a mention on a destroyed session
//	h. malformed JSON and form bodies on the three HTTP endpoints
//
// Each input must get a clear answer that reached the person (an
// ephemeral, a response_url answer or a thread reply that says what was
// wrong; never "Sorry, something went wrong", never invalid UTF-8) and
// change nothing: no session where none should be, the test session's
// title, backend and root as they were, a destroyed session not
// restarted, a malformed request refused with 4xx before anything
// started. After each run both processes still run and /readyz answers
// 200; at the end (i) a message is still answered and the sessions
// Temporal lists are exactly those the test started.
func TestBadInput(t *testing.T) {
	s := startStack(t)
	f := newBadFixture(t, s)
	for _, k := range badKinds {
		// A kind that fails does not keep the others from running.
		t.Run(k.name, func(t *testing.T) {
			repeat(t, k.label, func(t *testing.T, i int) {
				if k.setup != nil {
					k.setup(f, t, i)
				}
				for _, c := range badCases {
					if c.kind == k.id {
						t.Run(c.name, func(t *testing.T) {
							c.run(t, f, i)
							f.alive(t)
						})
					}
				}
				f.alive(t)
			})
		})
	}
	repeat(t, "12i. after all the bad input: both processes up, a message answered, only the test's sessions exist", func(t *testing.T, i int) {
		f.alive(t)
		tok := fmt.Sprintf("bi%dfinal", i)
		s.slack.PostUserMessage(channel, alice, "sh: echo "+tok, f.baseRoot)
		s.waitAnswer(t, f.baseRoot, tok, answerWait)
		f.sameSessions(t)
		for _, line := range strings.Split(s.logs(), "\n") {
			if panicked.MatchString(line) {
				t.Errorf("a process logged: %s", tail(line, 500))
			}
		}
		f.alive(t)
	})
}

// panicked matches what a process logs when it, a handler or a workflow
// panicked.
var panicked = regexp.MustCompile(`^panic: |^fatal error: |http: panic serving|(?i)workflow panic|panic recovered`)

// badKind is one kind of bad input: its scenario label and what each of
// its runs needs first.
type badKind struct {
	id          byte
	name, label string
	setup       func(f *badFixture, t *testing.T, i int)
}

var badKinds = []badKind{
	{id: 'a', name: "12a_empty", label: "12a. empty mentions, messages and commands: a clear answer, no session started"},
	{id: 'b', name: "12b_oversized", label: "12b. 100 KB messages and commands: refused with the limit stated, the thread still answered"},
	{id: 'c', name: "12c_control_and_invalid_utf8", label: "12c. control characters and invalid UTF-8: the turn runs, every answer valid UTF-8, titles clean"},
	{id: 'd', name: "12d_long_titles", label: "12d. titles over the 100-character limit: refused with the limit, the title unchanged"},
	{id: 'e', name: "12e_unknown_verbs_and_backends", label: "12e. unknown verbs and backends: refused with the choices, nothing changed"},
	{id: 'f', name: "12f_local_roots", label: "12f. relative or forbidden local roots: refused with why, the session stays where it was"},
	{id: 'g', name: "12g_destroyed_session", label: "12g. verbs, messages and mentions on a destroyed session: told so, nothing restarted", setup: (*badFixture).destroyed},
	{id: 'h', name: "12h_malformed_bodies", label: "12h. malformed JSON and form bodies: 4xx, nothing started"},
}

// badCase is one bad input and what must hold after it.
type badCase struct {
	kind byte
	name string
	run  func(t *testing.T, f *badFixture, i int)
}

// The answers the product gives, by meaning.
var (
	wantHint      = regexp.MustCompile("Tell me what to do")
	wantHelp      = regexp.MustCompile(`(?s)new \[backend\] \[--root /abs/path\] \[title\.\.\.\].*switch &lt;backend&gt; \[root\].*help \[verb\]`)
	wantTooLong   = regexp.MustCompile(fmt.Sprintf(`message is too long \(\d+ bytes, at most %d\)`, agentflow.MaxMessageBytes))
	wantLongTitle = regexp.MustCompile(`title is too long \(\d+ characters; at most 100\)`)
	wantDestroyed = regexp.MustCompile(`This session was destroyed`)
	// wantDeadStatus is the status of a destroyed session.
	wantDeadStatus = regexp.MustCompile(`destroyed on ` + "`local`")
	// wantNoMove is the session's notice of a switch that failed.
	wantNoMove = func(why string) *regexp.Regexp {
		return regexp.MustCompile(`(?i)could not move to local; still on local: .*` + why)
	}
	wantRelative = regexp.MustCompile(`the root must be an absolute path`)
)

// long is n bytes of words.
func long(n int) string {
	return strings.Repeat("lorem ipsum dolor ", n/18+1)[:n]
}

var badCases = []badCase{
	// a. Empty input.
	{'a', "mention_alone", func(t *testing.T, f *badFixture, i int) {
		var root string
		f.expect(t, wantHint, func() { root = f.s.slack.PostUserMessage(channel, alice, "<@UBOT>", "") })
		f.noSession(t, root)
	}},
	{'a', "mention_of_blanks", func(t *testing.T, f *badFixture, i int) {
		var root string
		f.expect(t, wantHint, func() { root = f.s.slack.PostUserMessage(channel, alice, "<@UBOT>  \n\t  ", "") })
		f.noSession(t, root)
	}},
	{'a', "slash_command_without_text", func(t *testing.T, f *badFixture, i int) {
		f.expect(t, wantHelp, func() { f.s.slack.SlashCommand(channel, alice, "") })
		f.noNewThread(t)
	}},
	{'a', "bang_agent_alone_in_the_session", func(t *testing.T, f *badFixture, i int) {
		v := f.base(t)
		f.expect(t, wantHelp, func() { f.s.slack.PostUserMessage(channel, alice, "!agent", f.baseRoot) })
		f.unchanged(t, v)
	}},
	{'a', "blank_reply_in_the_session", func(t *testing.T, f *badFixture, i int) {
		v := f.base(t)
		f.expect(t, wantHint, func() { f.s.slack.PostUserMessage(channel, alice, " \n \t ", f.baseRoot) })
		f.unchanged(t, v)
	}},

	// b. Oversized input.
	{'b', "100KB_mention_in_a_new_thread", func(t *testing.T, f *badFixture, i int) {
		var root string
		f.expect(t, wantTooLong, func() { root = f.s.slack.PostUserMessage(channel, alice, "<@UBOT> "+long(100<<10), "") })
		f.noSession(t, root)
	}},
	{'b', "100KB_reply_in_the_session_then_a_reply_answered", func(t *testing.T, f *badFixture, i int) {
		v := f.base(t)
		f.expect(t, wantTooLong, func() { f.s.slack.PostUserMessage(channel, alice, long(100<<10), f.baseRoot) })
		f.unchanged(t, v)
		tok := fmt.Sprintf("bi%dafterlong", i)
		f.s.slack.PostUserMessage(channel, alice, "sh: echo "+tok, f.baseRoot)
		f.s.waitAnswer(t, f.baseRoot, tok, answerWait)
	}},
	{'b', "100KB_title_command_in_the_session", func(t *testing.T, f *badFixture, i int) {
		v := f.base(t)
		f.expect(t, wantLongTitle, func() { f.s.slack.PostUserMessage(channel, alice, "!agent title "+long(100<<10), f.baseRoot) })
		f.unchanged(t, v)
	}},
	{'b', "100KB_slash_new", func(t *testing.T, f *badFixture, i int) {
		f.expect(t, wantLongTitle, func() { f.s.slack.SlashCommand(channel, alice, "new "+long(100<<10)) })
		f.noNewThread(t)
	}},
	{'b', "100KB_reply_in_a_thread_without_a_session_gets_no_answer", func(t *testing.T, f *badFixture, i int) {
		// People talking among themselves: the bot keeps out, even of
		// a long message (it is not addressed to the bot).
		root := f.s.slack.PostUserMessage(channel, bob, fmt.Sprintf("just us talking %d", i), "")
		m := f.mark()
		f.s.slack.PostUserMessage(channel, alice, long(100<<10), root)
		// Help is answered in that thread all the same, after the long
		// message was delivered; the refusal would have come by then.
		f.expect(t, wantHelp, func() { f.s.slack.PostUserMessage(channel, alice, "!agent help", root) })
		time.Sleep(time.Second)
		for _, text := range f.since(m) {
			if wantTooLong.MatchString(text) {
				t.Errorf("the bot answered a long message in a thread that is not its own: %q", text)
			}
		}
		f.noSession(t, root)
	}},
	{'b', "32KB_mention_at_the_limit_is_answered", func(t *testing.T, f *badFixture, i int) {
		tok := fmt.Sprintf("bi%dlimit", i)
		head := "sh: echo " + tok + "\n"
		root := f.s.slack.PostUserMessage(channel, alice, "<@UBOT> "+head+long(agentflow.MaxMessageBytes-len(head)), "")
		f.s.waitAnswer(t, root, tok, answerWait)
		f.started(root)
	}},

	// c. Control characters and invalid UTF-8.
	{'c', "control_characters_in_a_reply", func(t *testing.T, f *badFixture, i int) {
		tok := fmt.Sprintf("bi%dctl", i)
		f.answered(t, f.baseRoot, tok, func() {
			f.s.slack.PostUserMessage(channel, alice, "sh: echo "+tok+"\n\x00\x01\x07\x08\x1b[31mred\x1b[0m\x7f\u202egnp.exe\u0085end", f.baseRoot)
		})
	}},
	{'c', "control_characters_in_a_mention_that_starts_a_session", func(t *testing.T, f *badFixture, i int) {
		tok := fmt.Sprintf("bi%dctlnew", i)
		var root string
		f.answered(t, "", tok, func() {
			root = f.s.slack.PostUserMessage(channel, alice, "<@UBOT> \x1b[2J\x00\u202eevil\u202c sh: "+tok+"\nsh: echo "+tok, "")
		})
		f.started(root)
		f.cleanTitle(t, f.key(root))
	}},
	{'c', "invalid_UTF-8_in_a_reply", func(t *testing.T, f *badFixture, i int) {
		tok := fmt.Sprintf("bi%dinvalid", i)
		f.answered(t, f.baseRoot, tok, func() {
			f.s.slack.PostUserMessage(channel, alice, "sh: echo "+tok+"\n\xff\xfe\xc3( \xed\xa0\x80 \xf4\x90\x80\x80", f.baseRoot)
		})
	}},
	{'c', "invalid_UTF-8_raw_in_a_signed_event_body", func(t *testing.T, f *badFixture, i int) {
		// Slack's own JSON is valid UTF-8; the bot must not depend on it.
		tok := fmt.Sprintf("bi%drawutf", i)
		f.answered(t, f.baseRoot, tok, func() {
			ts := f.pastTS()
			body := []byte(`{"token":"` + f.s.slack.Options().VerificationToken + `","team_id":"` + f.team + `","api_app_id":"A0001",` +
				`"type":"event_callback","event_id":"EvBAD` + strconv.Itoa(int(f.seq.Add(1))) + `","event_time":` + strconv.FormatInt(time.Now().Unix(), 10) + `,` +
				`"event":{"type":"message","channel_type":"channel","user":"` + alice + `","channel":"` + channel + `","ts":"` + ts +
				`","thread_ts":"` + f.baseRoot + `","text":"sh: echo ` + tok + `\n` + "\xff\xfe\xc3(\xed\xa0\x80" + ` bad"}}`)
			if code := f.post(t, slackbot.PathEvents, body, "application/json"); code != http.StatusOK {
				t.Fatalf("the event was answered %d", code)
			}
		})
	}},
	{'c', "command_output_that_is_not_UTF-8", func(t *testing.T, f *badFixture, i int) {
		tok := fmt.Sprintf("bi%dbinout", i)
		f.answered(t, f.baseRoot, tok, func() {
			f.s.slack.PostUserMessage(channel, alice, `sh: printf 'bin\377\376\033[1m\001`+tok+`\n'`, f.baseRoot)
		})
	}},
	{'c', "slash_command_of_invalid_UTF-8_and_control_characters", func(t *testing.T, f *badFixture, i int) {
		f.expect(t, regexp.MustCompile(`unknown command '\x{FFFD}stop'`), func() {
			f.s.slack.SlashCommand(channel, alice, "\xff\xfe\x01\x1bstop now")
		})
		f.noNewThread(t)
	}},
	{'c', "title_with_control_characters_is_cleaned", func(t *testing.T, f *badFixture, i int) {
		v := f.base(t)
		f.expect(t, regexp.MustCompile(`Renamed to \*ok\[1m\x{FFFD} name\*`), func() {
			f.s.slack.PostUserMessage(channel, alice, "!agent title ok\x00\x1b[1m\xff\u202e\tname", f.baseRoot)
		})
		f.cleanTitle(t, f.baseKey)
		f.expect(t, regexp.MustCompile(`Renamed to \*`+regexp.QuoteMeta(v.Title)+`\*`), func() {
			f.s.slack.PostUserMessage(channel, alice, "!agent title "+v.Title, f.baseRoot)
		})
		f.unchanged(t, v)
	}},

	// d. Titles over the limit.
	{'d', "slash_new_with_a_101-character_title", func(t *testing.T, f *badFixture, i int) {
		f.expect(t, wantLongTitle, func() { f.s.slack.SlashCommand(channel, alice, "new "+strings.Repeat("t", 101)) })
		f.noNewThread(t)
	}},
	{'d', "slash_new_local_with_101_two-byte_runes", func(t *testing.T, f *badFixture, i int) {
		f.expect(t, regexp.MustCompile(`title is too long \(101 characters; at most 100\)`), func() {
			f.s.slack.SlashCommand(channel, alice, "new local "+strings.Repeat("é", 101))
		})
		f.noNewThread(t)
	}},
	{'d', "bang_title_with_101_characters", func(t *testing.T, f *badFixture, i int) {
		v := f.base(t)
		f.expect(t, wantLongTitle, func() {
			f.s.slack.PostUserMessage(channel, alice, "!agent title "+strings.Repeat("t ", 51), f.baseRoot)
		})
		f.unchanged(t, v)
	}},
	{'d', "mention_title_quoted_101_characters", func(t *testing.T, f *badFixture, i int) {
		v := f.base(t)
		f.expect(t, wantLongTitle, func() {
			f.s.slack.PostUserMessage(channel, alice, `<@UBOT> title "`+strings.Repeat("q", 101)+`"`, f.baseRoot)
		})
		f.unchanged(t, v)
	}},
	{'d', "fork_with_a_101-character_title", func(t *testing.T, f *badFixture, i int) {
		v := f.base(t)
		f.expect(t, wantLongTitle, func() { f.s.slack.PostUserMessage(channel, alice, "!agent fork "+strings.Repeat("f", 101), f.baseRoot) })
		f.unchanged(t, v)
	}},

	// e. Unknown verbs and backends.
	{'e', "slash_unknown_verb", func(t *testing.T, f *badFixture, i int) {
		f.expect(t, regexp.MustCompile(`unknown command 'frobnicate'\. Try 'help'`), func() { f.s.slack.SlashCommand(channel, alice, "frobnicate the thing") })
		f.noNewThread(t)
	}},
	{'e', "slash_misspelt_verb", func(t *testing.T, f *badFixture, i int) {
		f.expect(t, regexp.MustCompile(`unknown command 'destory'; did you mean 'destroy'\?`), func() { f.s.slack.SlashCommand(channel, alice, "destory") })
		f.noNewThread(t)
	}},
	{'e', "bang_misspelt_destroy_in_the_session", func(t *testing.T, f *badFixture, i int) {
		v := f.base(t)
		f.expect(t, regexp.MustCompile(`unknown command 'DESTORY'; did you mean 'destroy'\?`), func() {
			f.s.slack.PostUserMessage(channel, alice, "!agent DESTORY", f.baseRoot)
		})
		f.unchanged(t, v)
	}},
	{'e', "help_on_an_unknown_verb", func(t *testing.T, f *badFixture, i int) {
		f.expect(t, regexp.MustCompile(`there is no command 'frobnicate'`), func() { f.s.slack.SlashCommand(channel, alice, "help frobnicate") })
	}},
	{'e', "switch_to_an_unknown_backend", func(t *testing.T, f *badFixture, i int) {
		v := f.base(t)
		f.expect(t, regexp.MustCompile(`unknown backend 'nosuch'; available: local`), func() {
			f.s.slack.PostUserMessage(channel, alice, "!agent switch nosuch", f.baseRoot)
		})
		f.unchanged(t, v)
	}},
	{'e', "switch_to_a_backend_not_enabled_here", func(t *testing.T, f *badFixture, i int) {
		v := f.base(t)
		f.expect(t, regexp.MustCompile(`unknown backend 'e2b'; available: local`), func() {
			f.s.slack.PostUserMessage(channel, alice, "!agent switch e2b", f.baseRoot)
		})
		f.unchanged(t, v)
	}},
	{'e', "fork_onto_an_unknown_backend", func(t *testing.T, f *badFixture, i int) {
		v := f.base(t)
		f.expect(t, regexp.MustCompile(`unknown backend 'nosuch'; available: local`), func() {
			f.s.slack.PostUserMessage(channel, alice, "!agent fork --backend nosuch my fork", f.baseRoot)
		})
		f.unchanged(t, v)
	}},

	// f. Roots of the local backend.
	{'f', "relative_root", func(t *testing.T, f *badFixture, i int) {
		v := f.base(t)
		f.expect(t, wantRelative, func() { f.s.slack.PostUserMessage(channel, alice, "!agent switch local work/project", f.baseRoot) })
		f.unchanged(t, v)
	}},
	{'f', "dot-dot_root", func(t *testing.T, f *badFixture, i int) {
		v := f.base(t)
		f.expect(t, wantRelative, func() { f.s.slack.PostUserMessage(channel, alice, "!agent switch local ../../etc", f.baseRoot) })
		f.unchanged(t, v)
	}},
	{'f', "root_with_control_characters", func(t *testing.T, f *badFixture, i int) {
		v := f.base(t)
		f.expect(t, regexp.MustCompile(`the root must not contain control characters`), func() {
			f.s.slack.PostUserMessage(channel, alice, "!agent switch local /tmp/a\x01\x1bb", f.baseRoot)
		})
		f.unchanged(t, v)
	}},
	{'f', "file_system_root", func(t *testing.T, f *badFixture, i int) {
		v := f.base(t)
		f.expect(t, wantNoMove(`file system root`), func() { f.s.slack.PostUserMessage(channel, alice, "!agent switch local /", f.baseRoot) })
		f.unchanged(t, v)
	}},
	{'f', "root_that_does_not_exist", func(t *testing.T, f *badFixture, i int) {
		v := f.base(t)
		f.expect(t, wantNoMove(`does not exist`), func() {
			f.s.slack.PostUserMessage(channel, alice, fmt.Sprintf("!agent switch local /nonexistent/agentbot-%d", i), f.baseRoot)
		})
		f.unchanged(t, v)
	}},
	{'f', "root_that_is_a_file", func(t *testing.T, f *badFixture, i int) {
		v := f.base(t)
		file := filepath.Join(t.TempDir(), "a-file")
		if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		f.expect(t, wantNoMove(`is not a directory`), func() { f.s.slack.PostUserMessage(channel, alice, "!agent switch local "+file, f.baseRoot) })
		f.unchanged(t, v)
	}},
	{'f', "root_that_contains_the_sandbox_directory", func(t *testing.T, f *badFixture, i int) {
		v := f.base(t)
		f.expect(t, wantNoMove(`contains the sandbox directory`), func() {
			f.s.slack.PostUserMessage(channel, alice, "!agent switch local "+f.s.state, f.baseRoot)
		})
		f.unchanged(t, v)
	}},
	{'f', "root_inside_the_sandbox_directory", func(t *testing.T, f *badFixture, i int) {
		v := f.base(t)
		f.expect(t, wantNoMove(`inside the sandbox directory`), func() {
			f.s.slack.PostUserMessage(channel, alice, "!agent switch local "+filepath.Join(f.s.state, "sandboxes"), f.baseRoot)
		})
		f.unchanged(t, v)
	}},
	{'f', "the_session_still_answers", func(t *testing.T, f *badFixture, i int) {
		tok := fmt.Sprintf("bi%dafterroots", i)
		f.answered(t, f.baseRoot, tok, func() { f.s.slack.PostUserMessage(channel, alice, "sh: echo "+tok, f.baseRoot) })
	}},

	// g. A destroyed session (made by the kind's setup).
	{'g', "stop", func(t *testing.T, f *badFixture, i int) { f.onDead(t, wantDestroyed, "!agent stop") }},
	{'g', "switch", func(t *testing.T, f *badFixture, i int) { f.onDead(t, wantDestroyed, "!agent switch local") }},
	{'g', "fork", func(t *testing.T, f *badFixture, i int) { f.onDead(t, wantDestroyed, "!agent fork") }},
	{'g', "title", func(t *testing.T, f *badFixture, i int) { f.onDead(t, wantDestroyed, "!agent title back to life") }},
	{'g', "done", func(t *testing.T, f *badFixture, i int) { f.onDead(t, wantDestroyed, "!agent done") }},
	{'g', "reset", func(t *testing.T, f *badFixture, i int) { f.onDead(t, wantDestroyed, "!agent reset") }},
	{'g', "destroy_again", func(t *testing.T, f *badFixture, i int) { f.onDead(t, wantDestroyed, "!agent destroy") }},
	{'g', "status", func(t *testing.T, f *badFixture, i int) { f.onDead(t, wantDeadStatus, "!agent status") }},
	{'g', "message", func(t *testing.T, f *badFixture, i int) {
		f.onDead(t, wantDestroyed, fmt.Sprintf("sh: echo bi%ddeadmsg", i))
	}},
	{'g', "mention", func(t *testing.T, f *badFixture, i int) {
		f.onDead(t, wantDestroyed, fmt.Sprintf("<@UBOT> sh: echo bi%ddeadmention", i))
	}},
	{'g', "status_button_stop", func(t *testing.T, f *badFixture, i int) {
		f.expect(t, wantDestroyed, func() { f.s.slack.BlockAction(channel, alice, f.deadRoot, slackbot.ActionStop, f.deadKey) })
		f.stillDead(t)
	}},

	// h. Malformed HTTP bodies, correctly signed.
	{'h', "events_not_json", func(t *testing.T, f *badFixture, i int) {
		f.refused(t, slackbot.PathEvents, []byte(`{"type":"event_callback","event":{`), "application/json")
	}},
	{'h', "events_empty_body", func(t *testing.T, f *badFixture, i int) {
		f.refused(t, slackbot.PathEvents, nil, "application/json")
	}},
	{'h', "events_array", func(t *testing.T, f *badFixture, i int) {
		f.refused(t, slackbot.PathEvents, []byte(`[{"type":"event_callback"}]`), "application/json")
	}},
	{'h', "events_event_of_the_wrong_type", func(t *testing.T, f *badFixture, i int) {
		f.refused(t, slackbot.PathEvents, []byte(`{"type":"event_callback","event_id":"EvX1","event":"<@UBOT> hi"}`), "application/json")
	}},
	{'h', "events_text_of_the_wrong_type", func(t *testing.T, f *badFixture, i int) {
		f.refused(t, slackbot.PathEvents, []byte(`{"type":"event_callback","event_id":"EvX2","event":{"type":"app_mention","user":"`+
			alice+`","channel":"`+channel+`","ts":"`+f.pastTS()+`","text":["sh: echo x"]}}`), "application/json")
	}},
	{'h', "events_truncated", func(t *testing.T, f *badFixture, i int) {
		body := `{"type":"event_callback","event_id":"EvX3","event":{"type":"app_mention","user":"` + alice + `","channel":"` + channel +
			`","ts":"` + f.pastTS() + `","text":"<@UBOT> sh: echo truncated"}}`
		f.refused(t, slackbot.PathEvents, []byte(body[:len(body)-7]), "application/json")
	}},
	{'h', "events_2MB_body", func(t *testing.T, f *badFixture, i int) {
		body := `{"type":"event_callback","event_id":"EvX4","event":{"type":"app_mention","user":"` + alice + `","channel":"` + channel +
			`","ts":"` + f.pastTS() + `","text":"<@UBOT> ` + long(2<<20) + `"}}`
		f.refused(t, slackbot.PathEvents, []byte(body), "application/json")
	}},
	{'h', "commands_bad_percent_encoding", func(t *testing.T, f *badFixture, i int) {
		f.refused(t, slackbot.PathCommands, []byte("command=%2Fagent&text=new%zz&channel_id="+channel+"&user_id="+alice), "application/x-www-form-urlencoded")
	}},
	{'h', "commands_empty_body", func(t *testing.T, f *badFixture, i int) {
		f.refused(t, slackbot.PathCommands, nil, "application/x-www-form-urlencoded")
	}},
	{'h', "commands_json_instead_of_a_form", func(t *testing.T, f *badFixture, i int) {
		f.refused(t, slackbot.PathCommands, []byte(`{"command":"/agent","text":"new","channel_id":"`+channel+`","user_id":"`+alice+`"}`), "application/json")
	}},
	{'h', "commands_without_a_user", func(t *testing.T, f *badFixture, i int) {
		f.refused(t, slackbot.PathCommands, []byte("command=%2Fagent&text=new&channel_id="+channel), "application/x-www-form-urlencoded")
	}},
	{'h', "interactivity_payload_not_json", func(t *testing.T, f *badFixture, i int) {
		f.refused(t, slackbot.PathInteractivity, []byte("payload=%7B%22type%22%3A%22block_actions%22%2C"), "application/x-www-form-urlencoded")
	}},
	{'h', "interactivity_without_a_payload", func(t *testing.T, f *badFixture, i int) {
		f.refused(t, slackbot.PathInteractivity, []byte("type=block_actions&user=UALICE"), "application/x-www-form-urlencoded")
	}},
	{'h', "interactivity_bad_percent_encoding", func(t *testing.T, f *badFixture, i int) {
		f.refused(t, slackbot.PathInteractivity, []byte("payload=%7B%zz"), "application/x-www-form-urlencoded")
	}},
	{'h', "interactivity_actions_of_the_wrong_type", func(t *testing.T, f *badFixture, i int) {
		f.refused(t, slackbot.PathInteractivity, []byte("payload="+url.QueryEscape(`{"type":"block_actions","user":{"id":"`+alice+
			`"},"channel":{"id":"`+channel+`"},"container":{"message_ts":"`+f.baseRoot+`"},"actions":"stop"}`)), "application/x-www-form-urlencoded")
	}},
}

// badFixture is what the cases share: the stack, a session they must not
// change, and the sessions the test started.
type badFixture struct {
	s        *stack
	sessions *agentflow.Client
	team     string
	// baseRoot is the thread of a session (alice's) the cases must leave
	// as it was; baseKey its thread key.
	baseRoot, baseKey string
	// deadRoot and deadKey are the thread of the destroyed session of the
	// current run of kind g; deadRun is its workflow run.
	deadRoot, deadKey, deadRun string
	// expected are the thread keys of the sessions the test started.
	expected map[string]bool
	seq      atomic.Int64
}

func newBadFixture(t *testing.T, s *stack) *badFixture {
	t.Helper()
	f := &badFixture{s: s, sessions: agentflow.NewClient(s.temporalClient()), team: s.slack.Options().TeamID, expected: map[string]bool{}}
	f.baseRoot = s.slack.PostUserMessage(channel, alice, "<@UBOT> sh: echo bibase", "")
	s.waitAnswer(t, f.baseRoot, "bibase", answerWait)
	f.baseKey = f.key(f.baseRoot)
	f.started(f.baseRoot)
	return f
}

func (f *badFixture) key(root string) string { return slackbot.ThreadKey(f.team, channel, root) }

// started notes that the test started a session in the thread root.
func (f *badFixture) started(root string) { f.expected[f.key(root)] = true }

// pastTS is a Slack timestamp of a day ago no other message has.
func (f *badFixture) pastTS() string {
	return fmt.Sprintf("%d.%06d", time.Now().Add(-24*time.Hour).Unix(), f.seq.Add(1)%1e6)
}

// seen is what the workspace showed so far: the bot's messages, and how
// many ephemerals and response_url answers.
type seen struct {
	msgs      map[string]bool
	eph, resp int
}

func (f *badFixture) mark() seen {
	m := seen{msgs: map[string]bool{}}
	for _, msg := range f.s.slack.Messages(channel) {
		m.msgs[msg.TS] = true
	}
	m.eph, m.resp = len(f.s.slack.Ephemerals(channel)), len(f.s.slack.Responses())
	return m
}

// since returns the texts that reached people after m: the bot's new
// messages (in channel and threads), ephemerals and response_url answers.
func (f *badFixture) since(m seen) []string {
	var texts []string
	for _, msg := range f.s.slack.Messages(channel) {
		if msg.BotID != "" && !m.msgs[msg.TS] {
			texts = append(texts, msg.Text)
		}
	}
	for _, e := range f.s.slack.Ephemerals(channel)[m.eph:] {
		texts = append(texts, e.Text)
	}
	for _, r := range f.s.slack.Responses()[m.resp:] {
		texts = append(texts, r.Text)
	}
	return texts
}

// expect does send and waits for an answer that matches want. An answer
// that says something went wrong, or is not valid UTF-8, fails at once.
func (f *badFixture) expect(t *testing.T, want *regexp.Regexp, send func()) string {
	t.Helper()
	m := f.mark()
	send()
	var got, bad string
	ctx, cancel := contextWithTimeout(answerWait)
	defer cancel()
	err := f.s.slack.WaitFor(ctx, func(*fakeslack.Server) bool {
		for _, text := range f.since(m) {
			if strings.Contains(text, "Sorry, something went wrong") || !utf8.ValidString(text) {
				bad = text
				return true
			}
			if got == "" && want.MatchString(text) {
				got = text
			}
		}
		return got != ""
	})
	if bad != "" {
		t.Fatalf("answered %q", tail(bad, 2000))
	}
	if err != nil {
		var seen []string
		for _, text := range f.since(m) {
			seen = append(seen, strconv.Quote(tail(text, 300)))
		}
		t.Fatalf("no answer matching %q within %v; the bot said: [%s]", want, answerWait, strings.Join(seen, ", "))
	}
	t.Logf("answered %q", tail(got, 300))
	return got
}

// answered does send and waits for the agent's answer with tok in the
// thread root (or, for "", in any thread); everything the bot said in the
// meantime must be valid UTF-8 and free of "something went wrong".
func (f *badFixture) answered(t *testing.T, root, tok string, send func()) {
	t.Helper()
	m := f.mark()
	send()
	ctx, cancel := contextWithTimeout(answerWait)
	defer cancel()
	var bad string
	err := f.s.slack.WaitFor(ctx, func(*fakeslack.Server) bool {
		done := false
		for _, msg := range f.s.slack.Messages(channel) {
			if msg.BotID == "" || m.msgs[msg.TS] {
				continue
			}
			if !utf8.ValidString(msg.Text) || strings.Contains(msg.Text, "Sorry, something went wrong") {
				bad = msg.Text
				return true
			}
			if (root == "" || msg.ThreadTS == root) && isAnswer(msg, tok) {
				done = true
			}
		}
		for _, text := range f.since(m) {
			if !utf8.ValidString(text) || strings.Contains(text, "Sorry, something went wrong") {
				bad = text
				return true
			}
		}
		return done
	})
	if bad != "" {
		t.Fatalf("the bot said %q", tail(bad, 2000))
	}
	if err != nil {
		var said []string
		for _, text := range f.since(m) {
			said = append(said, strconv.Quote(tail(text, 300)))
		}
		t.Fatalf("no answer with %q within %v; the bot said: [%s]", tok, answerWait, strings.Join(said, ", "))
	}
}

// base is the state of the session the cases must not change.
func (f *badFixture) base(t *testing.T) agentflow.SessionView {
	t.Helper()
	return f.state(t, f.baseKey)
}

func (f *badFixture) state(t *testing.T, key string) agentflow.SessionView {
	t.Helper()
	ctx, cancel := contextWithTimeout(30 * time.Second)
	defer cancel()
	v, err := f.sessions.State(ctx, key)
	if err != nil {
		t.Fatalf("the state of %s: %v", key, err)
	}
	return v
}

// unchanged checks that the session is as it was in v: title, backend,
// root, forks, turns, and still there.
func (f *badFixture) unchanged(t *testing.T, v agentflow.SessionView) {
	t.Helper()
	now := f.state(t, v.ThreadKey)
	if now.Title != v.Title || now.Backend != v.Backend || now.Root != v.Root || now.Forks != v.Forks ||
		now.Turn != v.Turn || now.Status == agentflow.StatusDestroyed || now.Model != v.Model {
		t.Fatalf("the session changed: was title %q backend %q root %q forks %d turn %d status %s model %q; now %q %q %q %d %d %s %q",
			v.Title, v.Backend, v.Root, v.Forks, v.Turn, v.Status, v.Model,
			now.Title, now.Backend, now.Root, now.Forks, now.Turn, now.Status, now.Model)
	}
}

// noSession checks that Temporal has no session for the thread root.
func (f *badFixture) noSession(t *testing.T, root string) {
	t.Helper()
	ctx, cancel := contextWithTimeout(30 * time.Second)
	defer cancel()
	p, err := f.sessions.Describe(ctx, f.key(root))
	if err != nil {
		t.Fatal(err)
	}
	if p != agentflow.PresenceNone {
		t.Fatalf("the thread %s has a session (%s)", root, p)
	}
}

// noNewThread checks that no session thread was opened (by "/agent new")
// since the last case: the bot's thread roots are those of the sessions
// the test started.
func (f *badFixture) noNewThread(t *testing.T) {
	t.Helper()
	for _, m := range f.s.slack.Messages(channel) {
		if m.BotID != "" && m.ThreadTS == "" && strings.HasPrefix(m.Text, "Session started by") {
			t.Fatalf("a session thread was opened: %q at %s", m.Text, m.TS)
		}
	}
}

// cleanTitle checks that the session's title has no control or bidi
// characters and is valid UTF-8.
func (f *badFixture) cleanTitle(t *testing.T, key string) {
	t.Helper()
	title := f.state(t, key).Title
	if !utf8.ValidString(title) || strings.ContainsFunc(title, func(r rune) bool {
		return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r)
	}) {
		t.Fatalf("the session's title is %q", title)
	}
}

// destroyed is kind g's setup: a session of alice's, answered once, then
// destroyed and closed.
func (f *badFixture) destroyed(t *testing.T, i int) {
	t.Helper()
	tok := fmt.Sprintf("bi%ddead", i)
	f.deadRoot = f.s.slack.PostUserMessage(channel, alice, "<@UBOT> sh: echo "+tok, "")
	f.deadKey = f.key(f.deadRoot)
	f.s.waitAnswer(t, f.deadRoot, tok, answerWait)
	f.started(f.deadRoot)
	f.s.slack.PostUserMessage(channel, alice, "!agent destroy", f.deadRoot)
	ctx, cancel := contextWithTimeout(answerWait)
	defer cancel()
	for {
		p, err := f.sessions.Describe(ctx, f.deadKey)
		if err == nil && p == agentflow.PresenceEnded {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the session is not destroyed %v after `!agent destroy` (%v, %v):\n%s", answerWait, p, err, f.s.dumpThread(f.deadRoot))
		}
		time.Sleep(200 * time.Millisecond)
	}
	d, err := f.s.temporalClient().DescribeWorkflow(ctx, agentflow.AgentWorkflowID(f.deadKey), "")
	if err != nil {
		t.Fatal(err)
	}
	f.deadRun = d.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId()
}

// onDead sends text in the destroyed session's thread, waits for want,
// and checks that nothing restarted it and no turn ran for text.
func (f *badFixture) onDead(t *testing.T, want *regexp.Regexp, text string) {
	t.Helper()
	f.expect(t, want, func() { f.s.slack.PostUserMessage(channel, alice, text, f.deadRoot) })
	f.stillDead(t)
	if _, cmd, ok := strings.Cut(text, "sh: "); ok {
		if n := f.s.turns(cmd); n != 0 {
			t.Fatalf("%d turns ran for %q on the destroyed session", n, text)
		}
	}
}

// stillDead checks that the destroyed session's workflow is still the one
// closed run.
func (f *badFixture) stillDead(t *testing.T) {
	t.Helper()
	ctx, cancel := contextWithTimeout(30 * time.Second)
	defer cancel()
	d, err := f.s.temporalClient().DescribeWorkflow(ctx, agentflow.AgentWorkflowID(f.deadKey), "")
	if err != nil {
		t.Fatal(err)
	}
	info := d.RawResponse.GetWorkflowExecutionInfo()
	if run := info.GetExecution().GetRunId(); run != f.deadRun || info.GetCloseTime() == nil {
		t.Fatalf("the destroyed session runs again: run %s (was %s), status %s", run, f.deadRun, info.GetStatus())
	}
}

// post sends body to the bot's path, signed as Slack signs, and returns
// the status.
func (f *badFixture) post(t *testing.T, path string, body []byte, ctype string) int {
	t.Helper()
	resp, err := f.s.slack.SendSigned(f.s.url(path), body, ctype, time.Now(), f.s.slack.Options().SigningSecret, 0)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// refused posts a malformed body and wants a 4xx, and nothing said or
// started: no new message, ephemeral or model call a moment later.
func (f *badFixture) refused(t *testing.T, path string, body []byte, ctype string) {
	t.Helper()
	m := f.mark()
	calls := len(f.s.model.Requests())
	code := f.post(t, path, body, ctype)
	if code < 400 || code > 499 {
		t.Fatalf("a malformed body to %s (%q) was answered %d, want 4xx", path, tail(string(body), 200), code)
	}
	time.Sleep(300 * time.Millisecond)
	if said := f.since(m); len(said) > 0 {
		t.Fatalf("after a malformed body the bot said %q", said)
	}
	if n := len(f.s.model.Requests()); n != calls {
		t.Fatalf("after a malformed body the model was called %d times", n-calls)
	}
}

// sameSessions checks that Temporal lists exactly the sessions the test
// started (visibility may lag: it is given time to catch up).
func (f *badFixture) sameSessions(t *testing.T) {
	t.Helper()
	var keys []string
	ctx, cancel := contextWithTimeout(30 * time.Second)
	defer cancel()
	for {
		list, err := f.sessions.List(ctx, f.baseKey)
		keys = keys[:0]
		for _, e := range list {
			keys = append(keys, e.ThreadKey)
		}
		all := err == nil
		for k := range f.expected {
			all = all && slices.Contains(keys, k)
		}
		if all || ctx.Err() != nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	var extra, missing []string
	for _, k := range keys {
		if !f.expected[k] {
			extra = append(extra, k)
		}
	}
	for k := range f.expected {
		if !slices.Contains(keys, k) {
			missing = append(missing, k)
		}
	}
	if len(extra) > 0 || len(missing) > 0 {
		t.Fatalf("the sessions are not those the test started: extra %v, missing %v", extra, missing)
	}
}

// alive checks that both processes still run and the bot is ready.
func (f *badFixture) alive(t *testing.T) {
	t.Helper()
	f.s.mu.Lock()
	b, w := f.s.bot, f.s.worker
	f.s.mu.Unlock()
	for _, p := range []struct {
		name string
		done <-chan struct{}
		out  func() string
	}{{"bot", b.Done(), b.Output}, {"worker", w.Done(), w.Output}} {
		select {
		case <-p.done:
			t.Fatalf("the %s exited:\n%s", p.name, tail(p.out(), 4000))
		default:
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.s.url("/readyz"), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("/readyz: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz answered %d", resp.StatusCode)
	}
}
