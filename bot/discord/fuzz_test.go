package discordbot

import (
	"encoding/json"
	"testing"

	"github.com/bwmarrin/discordgo"

	"github.com/agentbot/agentbot/bot"
)

// FuzzInteraction: whatever a signed interaction holds (it arrives over
// HTTP and over the gateway), reading it never panics, and one the adapter
// takes names a channel that makes a thread key parsing back to it, and
// command text the grammar reads as the verb it came from. Seeds are in
// testdata/fuzz; make fuzz runs it longer.
func FuzzInteraction(f *testing.F) {
	for _, s := range []string{
		`{"id":"1","type":2,"token":"t","channel_id":"10","guild_id":"20","data":{"name":"agent","type":1,"options":[{"type":1,"name":"stop"}]}}`,
		`{"id":"1","type":2,"channel_id":"10","data":{"name":"agent","options":[{"type":1,"name":"switch","options":[{"type":3,"name":"backend","value":"docker"},{"type":3,"name":"root","value":"/tmp/x"}]}]}}`,
		`{"id":"1","type":2,"channel_id":"10","data":{"name":"agent","options":[{"type":1,"name":"policy","options":[{"type":3,"name":"action","value":"set"},{"type":3,"name":"value","value":"9"}]}]}}`,
		`{"id":"1","type":2,"channel_id":"10","data":{"name":"agent","options":[{"type":1,"name":"list","options":[{"type":4,"name":"page","value":1e300}]}]}}`,
		`{"id":"1","type":3,"channel_id":"10","data":{"custom_id":"` + ActionSwitch + `","component_type":3,"values":["e2b"]}}`,
		`{"id":"1","type":3,"channel_id":"1:0","data":{"custom_id":"` + ActionFork + `","component_type":2}}`,
		`{"id":"1","type":3,"channel_id":"10","data":{"custom_id":"` + ActionApproveAll + `:t3-call_abc","component_type":2}}`,
		`{"id":"1","type":3,"channel_id":"10","data":{"custom_id":"` + ActionDeny + `:t 3","component_type":2}}`,
		`{"id":"1","type":2,"channel_id":"10"}`,
		`{"id":"1","type":3,"channel_id":"10"}`,
		`{"type":1}`, `{"type":4,"data":{"name":"agent"}}`, `{}`,
	} {
		f.Add([]byte(s))
	}
	in := &Inbound{cfg: InboundConfig{Backends: []string{"local", "docker"}}}
	f.Fuzz(func(t *testing.T, body []byte) {
		var i discordgo.Interaction
		if json.Unmarshal(body, &i) != nil {
			return
		}
		p, ok := in.prepare(&i)
		if !ok {
			return
		}
		guild, channel, err := ParseThreadKey(ThreadKey(i.GuildID, i.ChannelID))
		if err != nil || channel != i.ChannelID || (i.GuildID != "" && guild != i.GuildID) {
			t.Fatalf("channel %q of guild %q makes a key that does not parse back: %v", i.ChannelID, i.GuildID, err)
		}
		if p.parsed {
			again, err := bot.Parse(p.text, in.cfg.Backends)
			if err != nil || again.Verb != p.cmd.Verb {
				t.Fatalf("command %q parsed as %q, then %v %v", p.text, p.cmd.Verb, again.Verb, err)
			}
		}
	})
}
