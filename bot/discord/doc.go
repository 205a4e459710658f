// Package discordbot is agentbot's Discord adapter (named so as not to
// clash with discordgo).
//
// The inbound side (Inbound) turns what Discord delivers — MESSAGE_CREATE
// and INTERACTION_CREATE over the gateway, and Ed25519-signed interactions
// over HTTP — into bot.Events for the core's Router, and answers people
// through a bot.Replier per event: a reply to the message, or the
// interaction's deferred response and follow-ups. Every interaction is
// acknowledged with a deferred response before any work starts.
//
// The outbound side (Sender) implements agentflow.ChatSender,
// ThreadCreator and FileFetcher for what sessions post, over REST only.
//
// In Discord a thread (and a forum post) is a channel, so a session lives
// in a channel, whole or a thread, keyed by the channel's ID (ThreadKey).
package discordbot
