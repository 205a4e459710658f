// Package tui is agentbot's full-screen terminal chat (bubbletea): a
// session picker that shows the sessions as a fork tree, a chat view with
// the transcript, live tool-call rows that expand to their arguments and
// output, a status bar, slash-command completion, and pickers for the
// backend of /switch, /fork and a new session.
//
// It drives the same bot core as every chat platform — bot.Router for what
// the person types, agentflow.Client for what it shows — so a session made
// here is the session a line-mode terminal or a script sees. It runs
// against the embedded default (the worker in this process pushes its
// deliveries through Feed) and against a remote Temporal (it asks the
// sessions, at least once a second). The line chat of package terminal
// remains for pipes and scripts.
package tui
