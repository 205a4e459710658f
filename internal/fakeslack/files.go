package fakeslack

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"
)

// fileRec is a file in the workspace: created by files.getUploadURLExternal
// (then uploaded) or shared by a user.
type fileRec struct {
	id, name, title string
	length          int
	content         []byte
	uploaded        bool
	user            string
	created         int64
}

// newFileLocked records a file and returns it.
func (s *Server) newFileLocked(name, user string) *fileRec {
	f := &fileRec{
		id:      fmt.Sprintf("F%08d", s.nextSeqLocked()),
		name:    name,
		title:   name,
		user:    user,
		created: time.Now().Unix(),
	}
	s.files[f.id] = f
	s.fileOrder = append(s.fileOrder, f)
	return f
}

func (s *Server) filesGetUploadURLExternal(p params) (map[string]any, *apiError) {
	name := p.get("filename")
	length, err := strconv.Atoi(p.get("length"))
	if name == "" || err != nil || length <= 0 {
		return nil, errCode("invalid_arguments")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.newFileLocked(name, s.opts.BotUserID)
	f.length = length
	key := randomHex(16)
	s.uploads[key] = f.id
	return map[string]any{"upload_url": s.srv.URL + "/upload/v1/" + key, "file_id": f.id}, nil
}

// serveUpload takes a file's bytes at the URL files.getUploadURLExternal
// gave: the raw body, or the first file part of a multipart form (as
// slack-go sends it, field "file"). Like Slack it answers "OK - <size>".
func (s *Server) serveUpload(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	id, ok := s.uploads[r.PathValue("id")]
	s.mu.Unlock()
	if !ok {
		http.Error(w, "Not Found", http.StatusNotFound)
		return
	}
	data, err := readUpload(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	f := s.files[id]
	f.content = data
	f.uploaded = true
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = fmt.Fprintf(w, "OK - %d", len(data))
}

func readUpload(r *http.Request) ([]byte, error) {
	mt, mp, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "multipart/form-data" {
		return io.ReadAll(io.LimitReader(r.Body, 1<<30))
	}
	mr := multipart.NewReader(r.Body, mp["boundary"])
	for {
		part, err := mr.NextPart()
		if err != nil {
			return nil, fmt.Errorf("no file part in the multipart body: %w", err)
		}
		if part.FileName() != "" || part.FormName() == "file" {
			return io.ReadAll(io.LimitReader(part, 1<<30))
		}
	}
}

func (s *Server) filesCompleteUploadExternal(p params) (map[string]any, *apiError) {
	raw, ok, err := p.rawJSON("files")
	var summaries []struct {
		ID    string `json:"id"`
		Title string `json:"title"`
	}
	if err != nil || !ok || json.Unmarshal(raw, &summaries) != nil || len(summaries) == 0 {
		return nil, errCode("invalid_arguments")
	}
	var channels []string
	if ch := p.get("channel_id"); ch != "" {
		channels = append(channels, ch)
	}
	for ch := range strings.SplitSeq(p.get("channels"), ",") {
		if ch = strings.TrimSpace(ch); ch != "" {
			channels = append(channels, ch)
		}
	}
	threadTS := p.get("thread_ts")
	if threadTS != "" && len(channels) != 1 {
		return nil, errCode("invalid_arguments")
	}
	text := p.get("initial_comment")
	blocks, hasBlocks, err := p.rawJSON("blocks")
	if err != nil {
		return nil, errCode("invalid_blocks_format")
	}
	if hasBlocks {
		if aerr := validateBlocks(blocks); aerr != nil {
			return nil, aerr
		}
	}

	s.mu.Lock()
	var recs []*fileRec
	for _, sum := range summaries {
		f := s.files[sum.ID]
		if f == nil || !f.uploaded {
			s.mu.Unlock()
			return nil, errCode("file_not_found")
		}
		if sum.Title != "" {
			f.title = sum.Title
		}
		recs = append(recs, f)
	}
	var echoes []map[string]any
	for _, ch := range channels {
		root := ""
		if threadTS != "" {
			r, ok := s.resolveThreadLocked(ch, threadTS)
			if !ok {
				s.mu.Unlock()
				return nil, errCode("invalid_thread_ts")
			}
			root = r
		}
		m := &Message{
			Channel: ch, TS: s.nextTSLocked(), ThreadTS: root, Subtype: "file_share",
			User: s.opts.BotUserID, BotID: s.opts.BotID, Text: text,
		}
		if hasBlocks && text == "" {
			m.Blocks = blocks
		}
		for _, f := range recs {
			m.Files = append(m.Files, s.shareLocked(f, m))
		}
		s.addMessageLocked(m)
		echoes = append(echoes, s.botEchoLocked(m))
	}
	out := make([]map[string]any, 0, len(recs))
	for _, f := range recs {
		out = append(out, map[string]any{"id": f.id, "title": f.title})
	}
	s.mu.Unlock()
	for _, e := range echoes {
		s.deliverEvent(e)
	}
	return map[string]any{"files": out}, nil
}

// shareLocked returns the File record of f shared by message m.
func (s *Server) shareLocked(f *fileRec, m *Message) File {
	return File{
		ID: f.id, Name: f.name, Title: f.title, User: f.user,
		Channel: m.Channel, MessageTS: m.TS, ThreadTS: m.ThreadTS,
		Content: f.content,
	}
}

func (s *Server) filesInfo(p params) (map[string]any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.files[p.get("file")]
	if f == nil || !f.uploaded {
		return nil, errCode("file_not_found")
	}
	return map[string]any{
		"file":     s.wireFileLocked(f),
		"comments": []any{},
		"paging":   map[string]any{"count": 100, "total": 1, "page": 1, "pages": 1},
	}, nil
}

// fileURL is a file's url_private: on this server (slack-go sends the token
// only to Slack hosts or to the API URL's host), under /files-pri/ as
// Slack's.
func (s *Server) fileURL(f *fileRec, download bool) string {
	u := s.srv.URL + "/files-pri/" + s.opts.TeamID + "-" + f.id + "/"
	if download {
		u += "download/"
	}
	return u + url.PathEscape(f.name)
}

func (s *Server) wireFileLocked(f *fileRec) map[string]any {
	if f == nil {
		return nil
	}
	mt, ft := fileTypes(f.name, f.content)
	return map[string]any{
		"id": f.id, "created": f.created, "timestamp": f.created,
		"name": f.name, "title": f.title, "mimetype": mt, "filetype": ft, "pretty_type": strings.ToUpper(ft),
		"user": f.user, "user_team": s.opts.TeamID, "editable": false, "size": len(f.content),
		"mode": "hosted", "is_external": false, "external_type": "", "is_public": true,
		"public_url_shared": false, "display_as_bot": false, "username": "",
		"url_private":          s.fileURL(f, false),
		"url_private_download": s.fileURL(f, true),
		"permalink":            "https://" + teamDomain + ".slack.com/files/" + f.user + "/" + f.id + "/" + url.PathEscape(f.name),
		"permalink_public":     "https://slack-files.com/" + s.opts.TeamID + "-" + f.id + "-" + randomHex(5),
		"has_rich_preview":     false,
		"file_access":          "visible",
	}
}

// fileTypes returns a file's mimetype and Slack filetype.
func fileTypes(name string, content []byte) (string, string) {
	ext := strings.TrimPrefix(path.Ext(name), ".")
	mt := mime.TypeByExtension(path.Ext(name))
	if mt == "" {
		mt = http.DetectContentType(content)
	}
	mt, _, _ = strings.Cut(mt, ";")
	switch ext {
	case "", "txt", "log":
		ext = "text"
	case "md":
		ext = "markdown"
	}
	return mt, ext
}

// serveFile serves url_private and url_private_download to a request with
// the bot token. Without it, like files.slack.com, it redirects to the
// sign-in page with redir set to the file's path, which slack-go's GetFile
// reports as an error.
func (s *Server) serveFile(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+s.opts.BotToken {
		http.Redirect(w, r, "/signin?redir="+url.QueryEscape(r.URL.Path), http.StatusFound)
		return
	}
	teamFile := r.PathValue("file")
	id, ok := strings.CutPrefix(teamFile, s.opts.TeamID+"-")
	s.mu.Lock()
	f := s.files[id]
	found := ok && f != nil && f.uploaded
	var data []byte
	var name string
	if found {
		data, name = f.content, f.name
	}
	s.mu.Unlock()
	if !found {
		http.Error(w, "File not found", http.StatusNotFound)
		return
	}
	mt, _ := fileTypes(name, data)
	w.Header().Set("Content-Type", mt)
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	_, _ = w.Write(data)
}

// serveSignin stands for Slack's sign-in page.
func serveSignin(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = io.WriteString(w, "<!DOCTYPE html><html><head><title>Slack</title></head><body>Sign in to Fake Workspace</body></html>")
}
