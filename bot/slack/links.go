package slackbot

import (
	"context"
	"log/slog"
	"strings"
	"sync"

	"github.com/slack-go/slack"
)

// PermalinkGetter is what Links needs of the Slack Web API
// (chat.getPermalink); *slack.Client satisfies it.
type PermalinkGetter interface {
	GetPermalinkContext(ctx context.Context, params *slack.PermalinkParameters) (string, error)
}

// maxCachedLinks bounds the permalink cache; past it the cache starts over.
const maxCachedLinks = 4096

// threadToken opens the token agentflow.LinkThread writes: "<thread:KEY>".
const threadToken = "<thread:"

// Links renders the "<thread:KEY>" tokens that sessions write (see
// agentflow.LinkThread) as Slack links to the thread: the permalink of
// the thread's root message, asked of chat.getPermalink once per thread
// and cached (permalinks do not change). Safe for concurrent use.
type Links struct {
	api PermalinkGetter
	log *slog.Logger

	mu    sync.Mutex
	cache map[string]string // thread key -> permalink
}

// NewLinks returns a Links that asks api for permalinks and logs failures
// to log (nil means slog.Default).
func NewLinks(api PermalinkGetter, log *slog.Logger) *Links {
	if log == nil {
		log = slog.Default()
	}
	return &Links{api: api, log: log, cache: make(map[string]string)}
}

// Render makes text from outside Slack (an answer, a notice, a reply)
// ready to post: it escapes '&', '<' and '>' (so "switch <backend>" or a
// crafted "<!channel>" shows as written instead of being read as Slack
// markup) and replaces every "<thread:KEY>" token with a link to the
// thread ("<permalink|thread>"). When the permalink cannot be had (the
// API fails, the message is gone) a Slack thread is named by its channel
// ("<#C1> thread"); a key of another platform is shown as code. ctx
// bounds the API calls.
func (l *Links) Render(ctx context.Context, text string) string {
	var b strings.Builder
	for {
		i := strings.Index(text, threadToken)
		if i < 0 {
			break
		}
		end := strings.IndexByte(text[i:], '>')
		if end < 0 {
			break
		}
		key := text[i+len(threadToken) : i+end]
		if key == "" || strings.ContainsAny(key, " \t\n<") {
			// Not a token: keep the '<' as text and look further on.
			b.WriteString(Escape(text[:i+1]))
			text = text[i+1:]
			continue
		}
		b.WriteString(Escape(text[:i]))
		b.WriteString(l.link(ctx, key))
		text = text[i+end+1:]
	}
	b.WriteString(Escape(text))
	return b.String()
}

// link renders one thread key.
func (l *Links) link(ctx context.Context, key string) string {
	_, channel, _, err := ParseThreadKey(key)
	if err != nil {
		return "`" + strings.ReplaceAll(Escape(key), "`", "'") + "`"
	}
	if url, err := l.Permalink(ctx, key); err == nil && url != "" {
		return "<" + url + "|thread>"
	}
	return "<#" + channel + "> thread"
}

// Permalink returns the permalink of the root message of a Slack thread,
// from the cache or from chat.getPermalink. Failures are not cached.
func (l *Links) Permalink(ctx context.Context, threadKey string) (string, error) {
	l.mu.Lock()
	url, ok := l.cache[threadKey]
	l.mu.Unlock()
	if ok {
		return url, nil
	}
	_, channel, ts, err := ParseThreadKey(threadKey)
	if err != nil {
		return "", err
	}
	url, err = l.api.GetPermalinkContext(ctx, &slack.PermalinkParameters{Channel: channel, Ts: ts})
	if err != nil {
		l.log.Debug("chat.getPermalink failed; naming the channel instead", "thread", threadKey, "error", err)
		return "", err
	}
	l.mu.Lock()
	if len(l.cache) >= maxCachedLinks {
		clear(l.cache)
	}
	l.cache[threadKey] = url
	l.mu.Unlock()
	return url, nil
}

// Escape escapes the three characters Slack reads as markup ('&', '<',
// '>'), for text from outside Slack.
func Escape(s string) string {
	if !strings.ContainsAny(s, "&<>") {
		return s
	}
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// unescape undoes what Slack does to '&', '<' and '>' in what people
// write, so the agent reads "a < b" rather than "a &lt; b".
func unescape(s string) string {
	if !strings.Contains(s, "&") {
		return s
	}
	return strings.NewReplacer("&lt;", "<", "&gt;", ">", "&amp;", "&").Replace(s)
}
