package slackbot

import (
	"fmt"
	"strings"
)

// Platform is the platform name of Slack in thread keys and bot.Event.
const Platform = "slack"

// ThreadKey names a Slack thread: "slack:<team>:<channel>:<thread_ts>",
// where threadTS is the ts of the thread's root message. It is a pure
// function of the thread, so the session's workflow ID is too.
func ThreadKey(team, channel, threadTS string) string {
	return Platform + ":" + team + ":" + channel + ":" + threadTS
}

// ParseThreadKey splits a key made by ThreadKey. It returns an error
// naming the key when it is not a Slack thread key or a part is empty.
func ParseThreadKey(key string) (team, channel, ts string, err error) {
	parts := strings.Split(key, ":")
	if len(parts) != 4 || parts[0] != Platform || parts[1] == "" || parts[2] == "" || parts[3] == "" {
		return "", "", "", fmt.Errorf("not a slack thread key (slack:<team>:<channel>:<thread_ts>): %q", key)
	}
	return parts[1], parts[2], parts[3], nil
}

// validChannel says s is shaped like a Slack conversation ID (C…, G…, D…:
// letters and digits). Only such a channel may enter a thread key: a ':'
// in one would make a key that names another thread.
func validChannel(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !('A' <= r && r <= 'Z' || 'a' <= r && r <= 'z' || '0' <= r && r <= '9') {
			return false
		}
	}
	return true
}

// validTS says s is shaped like a Slack message timestamp: seconds, a dot
// and a fraction ("1712345678.000200"), digits only.
func validTS(s string) bool {
	sec, frac, ok := strings.Cut(s, ".")
	return ok && digits(sec) && digits(frac) && len(s) <= 32 && !tsTime(s).IsZero()
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
