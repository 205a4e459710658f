package fakediscord

import (
	"sync"

	"github.com/bwmarrin/discordgo"
)

// pointMu serialises Point and its undo; it cannot make two Servers
// pointed at once safe, only keep the variables themselves consistent.
var pointMu sync.Mutex

// Point aims discordgo's package endpoint variables (EndpointDiscord,
// EndpointAPI and every string variable derived from them, and the
// status and CDN ones so nothing reaches the network) at this server, for
// discordgo.APIVersion as it is now. The Endpoint* functions read those
// variables when called, so they follow. discordgo then learns the gateway
// from GET /gateway, which answers GatewayURL.
//
// Point mutates process-wide globals: a test that uses it must not run in
// parallel with another test using a Discord fake or discordgo. Close
// restores the previous values; close discordgo sessions before the
// server, since they read the variables.
func (s *Server) Point() {
	pointMu.Lock()
	defer pointMu.Unlock()
	base := s.srv.URL + "/"
	api := base + "api/v" + discordgo.APIVersion + "/"
	cdn := base + "cdn/"
	status := base + "status/api/v2/"
	set := map[*string]string{
		&discordgo.EndpointStatus:             status,
		&discordgo.EndpointSm:                 status + "scheduled-maintenances/",
		&discordgo.EndpointSmActive:           status + "scheduled-maintenances/active.json",
		&discordgo.EndpointSmUpcoming:         status + "scheduled-maintenances/upcoming.json",
		&discordgo.EndpointDiscord:            base,
		&discordgo.EndpointAPI:                api,
		&discordgo.EndpointGuilds:             api + "guilds/",
		&discordgo.EndpointChannels:           api + "channels/",
		&discordgo.EndpointUsers:              api + "users/",
		&discordgo.EndpointGateway:            api + "gateway",
		&discordgo.EndpointGatewayBot:         api + "gateway/bot",
		&discordgo.EndpointWebhooks:           api + "webhooks/",
		&discordgo.EndpointStickers:           api + "stickers/",
		&discordgo.EndpointStageInstances:     api + "stage-instances",
		&discordgo.EndpointSKUs:               api + "skus",
		&discordgo.EndpointCDN:                cdn,
		&discordgo.EndpointCDNAttachments:     cdn + "attachments/",
		&discordgo.EndpointCDNAvatars:         cdn + "avatars/",
		&discordgo.EndpointCDNIcons:           cdn + "icons/",
		&discordgo.EndpointCDNSplashes:        cdn + "splashes/",
		&discordgo.EndpointCDNChannelIcons:    cdn + "channel-icons/",
		&discordgo.EndpointCDNBanners:         cdn + "banners/",
		&discordgo.EndpointCDNGuilds:          cdn + "guilds/",
		&discordgo.EndpointCDNRoleIcons:       cdn + "role-icons/",
		&discordgo.EndpointVoice:              api + "/voice/",
		&discordgo.EndpointVoiceRegions:       api + "/voice/regions",
		&discordgo.EndpointNitroStickersPacks: api + "/sticker-packs",
		&discordgo.EndpointGuildCreate:        api + "guilds",
		&discordgo.EndpointApplications:       api + "applications",
		&discordgo.EndpointOAuth2:             api + "oauth2/",
		&discordgo.EndpointOAuth2Applications: api + "oauth2/applications",
	}
	s.mu.Lock()
	if s.pointed == nil {
		s.pointed = map[*string]string{}
		for p := range set {
			s.pointed[p] = *p
		}
	}
	s.mu.Unlock()
	for p, v := range set {
		*p = v
	}
}

// unpoint restores what Point replaced.
func (s *Server) unpoint() {
	pointMu.Lock()
	defer pointMu.Unlock()
	s.mu.Lock()
	old := s.pointed
	s.pointed = nil
	s.mu.Unlock()
	for p, v := range old {
		*p = v
	}
}
