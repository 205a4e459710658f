package slackbot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/slack-go/slack"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
)

const (
	// DefaultSnippetOver is the length, in characters, of a fenced code
	// block past which an answer's code goes as a file snippet.
	DefaultSnippetOver = 4000
	// DefaultMarkdownRetry is how long the Sender posts answers as mrkdwn
	// text after Slack refused a markdown block, before it tries one again.
	DefaultMarkdownRetry = 10 * time.Minute

	// maxMarkdownBlock is the text of one markdown block and of one
	// message, in characters: Slack takes 12,000 for all the markdown
	// blocks of a message together; the rest is room for thread links.
	maxMarkdownBlock = 11500
	// maxFallbackText bounds the notification text of a markdown message.
	maxFallbackText = 39000
	// maxSnippets is the most code blocks of one answer uploaded as files.
	maxSnippets = 10
)

// snippet is a long code block taken out of an answer to go as a file.
type snippet struct {
	name, title, body string
}

// takeSnippets replaces each top-level fenced code block of text longer
// than over characters (at most maxSnippets) with a short reference to a
// file, and returns the text and the files' contents. over < 0 takes none.
func takeSnippets(m agentflow.Outbound, text string, over int) (string, []snippet) {
	if over < 0 || utf8.RuneCountInString(text) <= over {
		return text, nil
	}
	sum := sha256.Sum256([]byte(m.Key))
	tag := hex.EncodeToString(sum[:4])
	lines := strings.SplitAfter(text, "\n")
	var out strings.Builder
	var snips []snippet
	for i := 0; i < len(lines); i++ {
		f, ok := openFence(strings.TrimRight(lines[i], "\r\n"))
		if !ok {
			out.WriteString(lines[i])
			continue
		}
		j := i + 1
		for j < len(lines) && !f.closedBy(strings.TrimRight(lines[j], "\r\n")) {
			j++
		}
		body := strings.Join(lines[i+1:min(j, len(lines))], "")
		if utf8.RuneCountInString(body) <= over || len(snips) == maxSnippets {
			out.WriteString(strings.Join(lines[i:min(j+1, len(lines))], ""))
			i = j
			continue
		}
		lang := strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(lines[i]), string(f.char)))
		if fs := strings.Fields(lang); len(fs) > 0 {
			lang = fs[0]
		}
		n := len(snips) + 1
		s := snippet{
			name:  fmt.Sprintf("code-turn-%d-%s-%d.%s", m.Turn, tag, n, snippetExt(lang)),
			title: fmt.Sprintf("Code %d of the answer to turn %d", n, m.Turn),
			body:  body,
		}
		snips = append(snips, s)
		kind := "code"
		if lang != "" {
			kind = strings.NewReplacer("*", "", "_", "", "`", "").Replace(lang)
		}
		fmt.Fprintf(&out, "*(%d lines of %s, attached below as `%s`)*\n", strings.Count(strings.TrimSuffix(body, "\n"), "\n")+1, kind, s.name)
		i = j
	}
	return out.String(), snips
}

// snippetExt is a file extension for a fence's language, so that Slack
// highlights the snippet; "txt" when the language is not a plain word.
func snippetExt(lang string) string {
	l := strings.ToLower(lang)
	switch l {
	case "":
		return "txt"
	case "golang":
		return "go"
	case "python":
		return "py"
	case "javascript":
		return "js"
	case "typescript":
		return "ts"
	case "shell", "bash", "console", "sh", "zsh":
		return "sh"
	case "yaml":
		return "yml"
	case "markdown":
		return "md"
	}
	for _, r := range l {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') {
			return "txt"
		}
	}
	if len(l) > 10 {
		return "txt"
	}
	return l
}

// postAnswer posts text (short enough for messages) in parts: as markdown
// blocks while Slack takes them, else as mrkdwn text.
func (s *Sender) postAnswer(ctx context.Context, d *delivery, m agentflow.Outbound, text string) error {
	if !s.markdownAllowed() {
		return s.postMrkdwn(ctx, d, m, text, 0)
	}
	parts := bot.ChunkLimits(text, bot.Limits{Runes: maxMarkdownBlock})
	for i, part := range parts {
		md := s.links.renderMarkdown(ctx, part)
		fallback := s.mrkdwn(ctx, part)
		if utf8.RuneCountInString(fallback) > maxFallbackText {
			fallback = s.mrkdwn(ctx, bot.Truncate(part, previewChars))
		}
		err := d.putBlocks(ctx, partKey(m.Key, i+1), fallback, []slack.Block{slack.NewMarkdownBlock("", md)}, false)
		if err == nil {
			continue
		}
		if !isSlackError(err, "invalid_blocks", "msg_blocks_too_long") {
			return err
		}
		if isSlackError(err, "invalid_blocks") {
			s.refuseMarkdown()
		}
		s.log.Info("slack refused a markdown block; posting the answer as mrkdwn text", "thread", m.Thread, "key", m.Key, "error", err)
		return s.postMrkdwn(ctx, d, m, strings.Join(parts[i:], "\n\n"), i)
	}
	return nil
}

// postMrkdwn posts text converted to mrkdwn in parts of at most MaxChunk
// characters, numbered from first+1.
func (s *Sender) postMrkdwn(ctx context.Context, d *delivery, m agentflow.Outbound, text string, first int) error {
	for i, part := range bot.Chunk(text, s.maxChunk) {
		if err := d.put(ctx, partKey(m.Key, first+i+1), s.mrkdwn(ctx, part), false); err != nil {
			return err
		}
	}
	return nil
}

// mrkdwn converts Markdown to mrkdwn with thread links.
func (s *Sender) mrkdwn(ctx context.Context, md string) string {
	return toMrkdwn(md, func(key string) string { return s.links.link(ctx, key) })
}

// markdownAllowed says whether to try a markdown block: not within
// MarkdownRetry of Slack's last refusal.
func (s *Sender) markdownAllowed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mdRefusedAt.IsZero() || s.now().Sub(s.mdRefusedAt) >= s.mdRetry
}

func (s *Sender) refuseMarkdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mdRefusedAt = s.now()
}

// uploadSnippets uploads an answer's long code blocks, keyed
// m.Key+"/snippet-N".
func (s *Sender) uploadSnippets(ctx context.Context, d *delivery, m agentflow.Outbound, snips []snippet) error {
	for i, sn := range snips {
		if err := s.uploadFile(ctx, d, fmt.Sprintf("%s/snippet-%d", m.Key, i+1), sn.name, sn.title, sn.body); err != nil {
			return err
		}
	}
	return nil
}

// uploadFile uploads content as a file in the thread under key, once: a
// key posted before (remembered, or on a retry found in the thread by the
// file's name) is not uploaded again.
func (s *Sender) uploadFile(ctx context.Context, d *delivery, key, name, title, content string) error {
	if _, ok := s.recall(key); ok {
		return nil
	}
	if d.mustLookUp() {
		if err := d.load(ctx); err != nil {
			return err
		}
		if id, ok := d.files[name]; ok {
			s.remember(key, postedMsg{channel: d.channel, fileID: id})
			return nil
		}
	}
	f, err := s.api.UploadFileContext(ctx, slack.UploadFileParameters{
		Content: content, FileSize: len(content), Filename: name, Title: title,
		Channel: d.channel, ThreadTimestamp: d.threadTS,
	})
	if err != nil {
		return s.fail("files upload", err)
	}
	s.remember(key, postedMsg{channel: d.channel, fileID: f.ID})
	s.log.Debug("uploaded a file", "key", key, "file_id", f.ID)
	return nil
}
