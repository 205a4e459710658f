// Package slackbot is agentbot's Slack adapter (named so as not to clash
// with slack-go's package slack).
//
// The inbound side (Inbound) turns what Slack delivers — Socket Mode
// envelopes or signed Events API, slash command and interactivity requests
// — into bot.Events for the core's Router, and answers people through a
// bot.Replier per event: in the event's thread, privately (ephemeral), or
// through a slash command's response_url. It acknowledges every delivery
// before any work starts, then hands it to a bounded pool of workers.
//
// The outbound side (sender.go) implements agentflow.ChatSender and
// ThreadCreator for what sessions post. Both sides name Slack threads with
// ThreadKey and render "<thread:KEY>" tokens as permalinks with Links.
package slackbot
