// Package images holds agentbot's container images: bot.Dockerfile
// (cmd/bot) and worker.Dockerfile (cmd/worker), built by
// scripts/build-images.sh from static binaries. Its test builds both and
// runs them in the real Docker engine.
package images
