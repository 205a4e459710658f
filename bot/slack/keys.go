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
