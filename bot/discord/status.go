package discordbot

import (
	"strconv"
	"strings"

	"github.com/bwmarrin/discordgo"

	"github.com/agentbot/agentbot/bot"
)

// maxEmbedTitle is Discord's limit on an embed's title, in characters.
const maxEmbedTitle = 256

// statusEmbeds are the embeds of an answer about a session: one card
// titled with the session's title, with its backend, state and turn; none
// without a session. The answer's text stays the message's content, so
// what it says is read the same with or without embeds.
func statusEmbeds(resp bot.Response) []*discordgo.MessageEmbed {
	v := resp.Session
	if v == nil {
		return nil
	}
	title := strings.Join(strings.Fields(v.Title), " ")
	if title == "" {
		title = "Agent session"
	}
	field := func(name, value string) *discordgo.MessageEmbedField {
		if value == "" {
			value = "—"
		}
		return &discordgo.MessageEmbedField{Name: name, Value: value, Inline: true}
	}
	return []*discordgo.MessageEmbed{{
		Type:  discordgo.EmbedTypeRich,
		Title: bot.Truncate(title, maxEmbedTitle),
		Fields: []*discordgo.MessageEmbedField{
			field("Backend", v.Backend), field("State", string(v.Status)), field("Turn", strconv.Itoa(v.Turn)),
		},
	}}
}
