package discordbot

import (
	"fmt"
	"strings"
)

// Platform is the platform name of Discord in thread keys and bot.Event.
const Platform = "discord"

// dmGuild stands for the guild of a direct-message channel, which has none.
const dmGuild = "@me"

// ThreadKey names the Discord channel that holds a session:
// "discord:<guild>:<id>". In Discord a thread (and a forum post) is a
// channel, so a session of a whole text channel and a session of a thread
// are keyed alike, by the channel's ID; a forum post is a thread whose
// parent is the forum. A direct-message channel has the guild "@me"
// ("discord:@me:<dm channel>"): Discord keeps one DM channel per user and
// bot, so the key names that user's private session, and the user is its
// only tenant (no guild, no roles, no other member). The key is a pure
// function of the channel, so the session's workflow ID is too.
func ThreadKey(guild, channelOrThread string) string {
	if guild == "" {
		guild = dmGuild
	}
	return Platform + ":" + guild + ":" + channelOrThread
}

// ParseThreadKey splits a key made by ThreadKey. It returns an error
// naming the key when it is not a Discord thread key or a part is empty.
func ParseThreadKey(key string) (guild, channel string, err error) {
	parts := strings.Split(key, ":")
	if len(parts) != 3 || parts[0] != Platform || parts[1] == "" || parts[2] == "" {
		return "", "", fmt.Errorf("not a discord thread key (discord:<guild>:<channel>): %q", key)
	}
	return parts[1], parts[2], nil
}

// validSnowflake says s is shaped like a Discord ID (a snowflake: up to 20
// decimal digits). Only such IDs may enter a thread key: a ':' in one
// would make a key that names another channel.
func validSnowflake(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
