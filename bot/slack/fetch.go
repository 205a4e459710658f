package slackbot

import (
	"context"
	"fmt"
	"io"
)

// Fetch downloads a file shared in Slack (its url_private) with the bot
// token, for agentflow's FileFetcher: files shared into a session thread
// are copied into the workspace. slack-go sends the token only to Slack's
// own hosts (or the configured API host), never elsewhere.
func (s *Sender) Fetch(ctx context.Context, url string) (io.ReadCloser, error) {
	pr, pw := io.Pipe()
	go func() {
		err := s.api.GetFileContext(ctx, url, pw)
		if err != nil {
			err = fmt.Errorf("downloading the shared file: %w", s.redact(err))
		}
		pw.CloseWithError(err)
	}()
	return pr, nil
}
