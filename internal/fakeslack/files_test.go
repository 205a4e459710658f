package fakeslack

import (
	"bytes"
	"strings"
	"testing"

	"github.com/slack-go/slack"
)

func TestUploadFile(t *testing.T) {
	s := newServer(t, Options{})
	ctx := testCtx(t)
	api := client(s)

	_, root, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("root", false))
	if err != nil {
		t.Fatal(err)
	}
	content := "full output\nline 2\n"
	sum, err := api.UploadFileContext(ctx, slack.UploadFileParameters{
		Filename: "out.txt", Title: "Output", Content: content, FileSize: len(content),
		Channel: "C1", ThreadTimestamp: root, InitialComment: "the full output",
	})
	if err != nil {
		t.Fatalf("UploadFile: %v", err)
	}
	if sum.ID == "" || sum.Title != "Output" {
		t.Errorf("summary = %+v", sum)
	}

	files := s.Files("C1")
	if len(files) != 1 {
		t.Fatalf("Files = %d, want 1", len(files))
	}
	f := files[0]
	if f.ID != sum.ID || f.Name != "out.txt" || string(f.Content) != content || f.ThreadTS != root || f.User != "UBOT" {
		t.Errorf("file = %+v", f)
	}
	th := s.Thread("C1", root)
	if len(th) != 2 || th[1].Text != "the full output" || th[1].Subtype != "file_share" || len(th[1].Files) != 1 {
		t.Fatalf("thread = %+v", th)
	}
	for _, m := range []string{"files.getUploadURLExternal", "files.completeUploadExternal"} {
		if n := s.Calls(m); n != 1 {
			t.Errorf("Calls(%s) = %d, want 1", m, n)
		}
	}

	msgs, _, _, err := api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{ChannelID: "C1", Timestamp: root})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 || len(msgs[1].Files) != 1 {
		t.Fatalf("replies = %+v", msgs)
	}
	url := msgs[1].Files[0].URLPrivate

	t.Run("download with the bot token", func(t *testing.T) {
		var buf bytes.Buffer
		if err := api.GetFileContext(ctx, url, &buf); err != nil {
			t.Fatal(err)
		}
		if buf.String() != content {
			t.Errorf("downloaded %q, want %q", buf.String(), content)
		}
	})
	t.Run("download with another token", func(t *testing.T) {
		var buf bytes.Buffer
		err := slack.New("xoxb-other", slack.OptionAPIURL(s.APIURL())).GetFileContext(ctx, url, &buf)
		if err == nil || !strings.Contains(err.Error(), "sign-in") {
			t.Errorf("error = %v, want a sign-in redirect", err)
		}
	})
	t.Run("complete before upload", func(t *testing.T) {
		u, err := api.GetUploadURLExternalContext(ctx, slack.GetUploadURLExternalParameters{FileName: "a.txt", FileSize: 3})
		if err != nil {
			t.Fatal(err)
		}
		_, err = api.CompleteUploadExternalContext(ctx, slack.CompleteUploadExternalParameters{
			Files: []slack.FileSummary{{ID: u.FileID}}, Channel: "C1",
		})
		if slackErr(err) != "file_not_found" {
			t.Errorf("error = %v, want file_not_found", err)
		}
	})
}
