package discordbot

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/bwmarrin/discordgo"

	"github.com/agentbot/agentbot/agentflow"
)

// attachmentHosts serve Discord attachments; their URLs need no token.
var attachmentHosts = []string{"cdn.discordapp.com", "media.discordapp.net"}

// Fetch downloads a file shared in Discord (an attachment's URL) for
// agentflow's FileFetcher. Attachment URLs carry their own signature and
// need no credentials, so none are sent. Only https URLs on Discord's
// attachment hosts, or on the host of the configured API and CDN
// endpoints (discordgo.EndpointDiscord, EndpointCDN; a test's fake), are
// fetched, so a message cannot make the worker fetch anything else. The
// download goes through the Sender's HTTP client, so the proxy settings
// of the REST calls apply. A file whose Content-Length exceeds
// agentflow.MaxInboundFile is refused before its body is read. The
// caller closes the body.
func (s *Sender) Fetch(ctx context.Context, rawURL string) (io.ReadCloser, error) {
	if err := allowedURL(rawURL); err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, fmt.Errorf("downloading the shared file: %w", err)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("downloading the shared file: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("downloading the shared file: HTTP %s", resp.Status)
	}
	// Said too large up front, it is not downloaded at all; a body longer
	// than announced is cut by the importer at the same bound.
	if resp.ContentLength > agentflow.MaxInboundFile {
		resp.Body.Close()
		return nil, fmt.Errorf("downloading the shared file: it is larger than %d MiB", agentflow.MaxInboundFile>>20)
	}
	return resp.Body, nil
}

// allowedURL checks that u is a URL Fetch may download.
func allowedURL(u string) error {
	p, err := url.Parse(u)
	if err != nil || p.Host == "" {
		return fmt.Errorf("not a file URL: %q", u)
	}
	host := strings.ToLower(p.Host)
	for _, base := range []string{discordgo.EndpointDiscord, discordgo.EndpointCDN} {
		if b, err := url.Parse(base); err == nil && strings.EqualFold(b.Host, host) && p.Scheme == b.Scheme {
			return nil
		}
	}
	if p.Scheme == "https" {
		for _, h := range attachmentHosts {
			if host == h {
				return nil
			}
		}
	}
	return fmt.Errorf("refusing to download from %s: not a Discord attachment host", p.Host)
}
