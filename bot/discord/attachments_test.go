package discordbot

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/internal/fakediscord"
)

// TestInboundAttachments: a message's attachments become the event's
// files (name, URL, size), and the Sender downloads each from its URL.
func TestInboundAttachments(t *testing.T) {
	srv := newFake(t)
	rec := newRecorder()
	startInbound(t, srv, rec, nil)
	ch := srv.AddChannel("general", fakediscord.ChannelText)
	srv.UserMessageFiles(ch, "42", "<@"+srv.Options().BotUserID+"> look", nil,
		fakediscord.Attachment{Filename: "notes.txt", ContentType: "text/plain", Content: []byte("alpha")},
		fakediscord.Attachment{Filename: "blob.bin", Content: []byte{0, 1, 2}})
	ev := rec.next(t)
	if len(ev.Files) != 2 {
		t.Fatalf("files %+v", ev.Files)
	}
	s := newTestSender(t, srv)
	for i, want := range []struct {
		name    string
		content []byte
	}{{"notes.txt", []byte("alpha")}, {"blob.bin", []byte{0, 1, 2}}} {
		f := ev.Files[i]
		if f.Name != want.name || f.Size != int64(len(want.content)) || !strings.HasPrefix(f.URL, srv.URL()+"/attachments/"+ch+"/") {
			t.Fatalf("file %d %+v", i, f)
		}
		rc, err := s.Fetch(context.Background(), f.URL)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, want.content) {
			t.Fatalf("Fetch(%s) = %q, %v", f.Name, got, err)
		}
	}
}

// TestFetchRefuses: Fetch downloads nothing from other hosts, reports the
// CDN's refusal of a bad URL, and refuses a file larger than
// agentflow.MaxInboundFile before reading it.
func TestFetchRefuses(t *testing.T) {
	srv := newFake(t)
	s := newTestSender(t, srv)
	ch := srv.AddChannel("general", fakediscord.ChannelText)
	srv.UserMessageFiles(ch, "42", "big", nil,
		fakediscord.Attachment{Filename: "big.bin", Content: make([]byte, agentflow.MaxInboundFile+1)})
	big := attachmentURL(t, srv, ch)
	tests := []struct {
		name, url, want string
	}{
		{"other host", "https://example.com/attachments/1/2/x.txt", "not a Discord attachment host"},
		{"plain http to the CDN", "http://cdn.discordapp.com/attachments/1/2/x.txt", "not a Discord attachment host"},
		{"bad signature", strings.Replace(big, "hm=", "hm=00", 1), "HTTP 404"},
		{"too large", big, "larger than 50 MiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc, err := s.Fetch(context.Background(), tt.url)
			if err == nil {
				rc.Close()
				t.Fatalf("Fetch(%s) succeeded", tt.url)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Fetch(%s) = %v, want %q", tt.url, err, tt.want)
			}
		})
	}
}
