// Package bot is the platform-neutral core of agentbot's chat side: the
// command grammar (command.go), the inbound Event a platform adapter makes of
// what it receives, the Router that checks, de-duplicates and dispatches
// events to sessions (one Temporal call each), access control, and rendering
// within platform limits (render.go).
//
// A platform adapter (bot/slack, bot/terminal, ...) is small: it turns its
// events into Events, implements Replier to answer the person, and
// implements agentflow.ChatSender (and ThreadCreator) for what sessions
// post. Nothing in this package knows a platform.
package bot
