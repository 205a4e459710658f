package agentflow

import (
	"context"
	"fmt"
	"io"
	"path"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/agentbot/agentbot/sandboxes"
)

// FileFetcher is an optional interface of a ChatSender that can download a
// file shared on its platform (with the worker's own credentials).
type FileFetcher interface {
	Fetch(ctx context.Context, url string) (io.ReadCloser, error)
}

// ImportFiles copies files shared in the chat into the workspace under
// uploads/, each at most MaxInboundFile bytes, names sanitised. A file that
// cannot be fetched or is too large is reported, not fatal.
func (a *Activities) ImportFiles(ctx context.Context, in ImportInput) (res ImportResult, err error) {
	defer a.redactOut(&res, &err)
	defer heartbeat(ctx)()
	fetcher, _ := a.Chat[Platform(in.Thread)].(FileFetcher)
	sb, err := a.Sandboxes.Attach(ctx, in.State)
	if err != nil {
		return ImportResult{}, sandboxErr(err)
	}
	used := map[string]bool{}
	for _, f := range in.Files {
		out := ImportedFile{Name: f.Name}
		switch {
		case fetcher == nil:
			out.Error = "this chat platform cannot hand files to the agent"
		case f.Size > MaxInboundFile:
			out.Error = fmt.Sprintf("it is larger than %d MiB", MaxInboundFile>>20)
		default:
			out.Path = uniqueName(used, "uploads/"+SanitizeFileName(f.Name))
			out.Size, err = a.importOne(ctx, fetcher, sb, f.URL, out.Path)
			if err != nil {
				out.Path, out.Error = "", err.Error()
			}
		}
		res.Files = append(res.Files, out)
	}
	return res, nil
}

func (a *Activities) importOne(ctx context.Context, fetcher FileFetcher, sb *sandboxes.Sandbox, url, dst string) (int64, error) {
	rc, err := fetcher.Fetch(ctx, url)
	if err != nil {
		return 0, fmt.Errorf("download failed: %w", err)
	}
	defer rc.Close()
	lr := &limitedReader{r: rc, left: MaxInboundFile + 1}
	if err := sb.WriteFileFrom(ctx, dst, lr, 0o644); err != nil {
		return 0, err
	}
	if lr.left <= 0 {
		_, _ = sb.Exec(ctx, sandboxes.ExecRequest{Command: "rm -f -- '" + dst + "'"})
		return 0, fmt.Errorf("it is larger than %d MiB", MaxInboundFile>>20)
	}
	return MaxInboundFile + 1 - lr.left, nil
}

type limitedReader struct {
	r    io.Reader
	left int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

// SanitizeFileName makes a shared file's name safe as one path element:
// no separators, no leading dots, no control characters, at most 100
// bytes, never empty.
func SanitizeFileName(name string) string {
	name = path.Base(strings.ReplaceAll(name, "\\", "/"))
	name = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == '/' || r == '\'' || r == '"' || r == '`' || r == '$' {
			return '_'
		}
		return r
	}, name)
	name = strings.TrimLeft(strings.TrimSpace(name), ".")
	if len(name) > 100 {
		ext := path.Ext(name)
		if len(ext) > 20 {
			ext = ""
		}
		stem := name[:len(name)-len(ext)]
		end := 100 - len(ext)
		for end > 0 && !utf8.RuneStart(stem[end]) {
			end--
		}
		name = stem[:end] + ext
	}
	if name == "" || name == "." {
		name = "file"
	}
	return name
}

func uniqueName(used map[string]bool, p string) string {
	out := p
	ext := path.Ext(p)
	base := strings.TrimSuffix(p, ext)
	for i := 2; used[out]; i++ {
		out = fmt.Sprintf("%s-%d%s", base, i, ext)
	}
	used[out] = true
	return out
}
