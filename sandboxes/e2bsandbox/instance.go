package e2bsandbox

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"mime/multipart"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/agentbot/agentbot/sandboxes"
)

// user is the Linux user commands and files act as.
const user = "user"

// killTimeout bounds the kill calls made after a command's context is done.
const killTimeout = 8 * time.Second

type instance struct {
	b     *Backend
	token string // envd access token: a secret, never in State
	envd  string
	mu    sync.Mutex
	st    sandboxes.State
}

func nonce() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func (in *instance) State() sandboxes.State {
	in.mu.Lock()
	defer in.mu.Unlock()
	st := in.st
	st.Env = maps.Clone(st.Env)
	st.Meta = maps.Clone(st.Meta)
	return st
}

func (in *instance) root() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.st.Root
}

func (in *instance) envdHeader() http.Header {
	h := http.Header{}
	if in.token != "" {
		h.Set("X-Access-Token", in.token)
	}
	return h
}

// ---- process.Process ----

// run runs argv in the sandbox with the full environment env in cwd ("" is
// the user's home), copying output. On ctx done it kills the process (and,
// when marker is set, everything carrying it) and returns ctx.Err().
func (in *instance) run(ctx context.Context, argv []string, env map[string]string, cwd, marker string, stdout, stderr io.Writer) (int, error) {
	proc := map[string]any{"cmd": argv[0], "args": argv[1:], "envs": env}
	if cwd != "" {
		proc["cwd"] = cwd
	}
	msg, err := json.Marshal(map[string]any{"process": proc, "stdin": false})
	if err != nil {
		return -1, err
	}
	frame := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(frame[1:], uint32(len(msg)))
	frame = append(frame, msg...)
	h := in.envdHeader()
	h.Set("Connect-Protocol-Version", "1")
	h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	h.Set("Keepalive-Ping-Interval", "50")
	if dl, ok := ctx.Deadline(); ok {
		h.Set("Connect-Timeout-Ms", fmt.Sprint(max(1, time.Until(dl).Milliseconds())))
	}
	// Not idempotent: envd starts the process as soon as it has the
	// request, so a Start is sent again only when it provably did not
	// reach envd (see do). The stream is bounded by ctx, the command's own
	// timeout, not by CallTimeout: it stays open while the command runs.
	resp, err := in.b.do(ctx, call{method: http.MethodPost, url: in.envd + "/process.Process/Start", header: h,
		body: frame, ctype: "application/connect+json", envd: true}, true)
	if err != nil {
		if ctx.Err() != nil {
			in.killAfter(ctx, 0, marker)
			return -1, ctx.Err()
		}
		return -1, in.envdErr(err)
	}
	defer resp.Body.Close()
	pid, code, err := readStream(resp.Body, stdout, stderr)
	if ctx.Err() != nil {
		in.killAfter(ctx, pid, marker)
		return -1, ctx.Err()
	}
	return code, err
}

// envdErr turns envd's 502 for a sandbox that is not running into ErrStopped.
func (in *instance) envdErr(err error) error {
	if isStatus(err, http.StatusBadGateway) {
		return fmt.Errorf("%w: envd unreachable (%v)", sandboxes.ErrStopped, err)
	}
	return err
}

// readStream reads a Start response stream. It returns the pid (0 if no
// start event came) and the exit code.
func readStream(r io.Reader, stdout, stderr io.Writer) (pid int, code int, err error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var hdr [5]byte
	ended := false
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return pid, -1, fmt.Errorf("reading the command's output stream: %w", err)
		}
		n := binary.BigEndian.Uint32(hdr[1:])
		if n > 64<<20 {
			return pid, -1, fmt.Errorf("envd sent a %d-byte message", n)
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(br, payload); err != nil {
			return pid, -1, fmt.Errorf("reading the command's output stream: %w", err)
		}
		if hdr[0]&0x01 != 0 {
			return pid, -1, errors.New("envd sent a compressed message, which was not asked for")
		}
		if hdr[0]&0x02 != 0 {
			var end struct {
				Error *struct{ Code, Message string } `json:"error"`
			}
			if err := json.Unmarshal(payload, &end); err != nil {
				return pid, -1, fmt.Errorf("bad end of stream from envd: %w", err)
			}
			if end.Error != nil {
				return pid, -1, fmt.Errorf("envd: %s: %s", end.Error.Code, end.Error.Message)
			}
			if !ended {
				return pid, -1, errors.New("envd ended the stream without the command's end event")
			}
			return pid, code, nil
		}
		var ev struct {
			Event struct {
				Start *struct {
					Pid int `json:"pid"`
				} `json:"start"`
				Data *struct {
					Stdout []byte `json:"stdout"`
					Stderr []byte `json:"stderr"`
					Pty    []byte `json:"pty"`
				} `json:"data"`
				End *struct {
					ExitCode int    `json:"exitCode"`
					Exited   bool   `json:"exited"`
					Status   string `json:"status"`
					Error    string `json:"error"`
				} `json:"end"`
			} `json:"event"`
		}
		if err := json.Unmarshal(payload, &ev); err != nil {
			return pid, -1, fmt.Errorf("bad event from envd: %w", err)
		}
		switch e := ev.Event; {
		case e.Start != nil:
			pid = e.Start.Pid
		case e.Data != nil:
			if len(e.Data.Stdout) > 0 {
				if _, err := stdout.Write(e.Data.Stdout); err != nil {
					return pid, -1, err
				}
			}
			if len(e.Data.Stderr) > 0 {
				if _, err := stderr.Write(e.Data.Stderr); err != nil {
					return pid, -1, err
				}
			}
		case e.End != nil:
			ended = true
			code = e.End.ExitCode
			if !e.End.Exited {
				code = -1
				if e.End.Error != "" {
					return pid, -1, fmt.Errorf("command did not exit: %s (%s)", e.End.Error, e.End.Status)
				}
			}
		}
		// keepalive and unknown events are ignored
	}
}

// killAfter kills what a command whose context is done left: its pid, then
// every process carrying its marker.
func (in *instance) killAfter(ctx context.Context, pid int, marker string) {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killTimeout)
	defer cancel()
	if pid > 0 {
		_ = in.signal(kctx, pid)
	}
	if marker != "" {
		_ = in.sweep(kctx, marker+"$")
	}
}

// signal sends SIGKILL to pid through envd. envd signals the process only,
// not its group.
func (in *instance) signal(ctx context.Context, pid int) error {
	body, _ := json.Marshal(map[string]any{"process": map[string]any{"pid": pid}, "signal": "SIGNAL_SIGKILL"})
	h := in.envdHeader()
	h.Set("Connect-Protocol-Version", "1")
	// Idempotent: a second SIGKILL to the same process changes nothing.
	resp, err := in.b.do(ctx, call{method: http.MethodPost, url: in.envd + "/process.Process/SendSignal", header: h,
		body: body, ctype: "application/json", envd: true, idempotent: true}, false)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// sweepScript kills, a few passes over, every process whose environment
// has sandboxes.MarkerEnv matching the regular expression $1 (anchored at
// the value's start).
const sweepScript = `pat=$1; me=$$
for pass in 1 2 3 4; do
  found=
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = "$me" ] && continue
    if grep -qz -- "^` + sandboxes.MarkerEnv + `=$pat" "$d/environ" 2>/dev/null; then
      kill -9 "$p" 2>/dev/null && found=1
    fi
  done
  [ -n "$found" ] || break
  sleep 0.05
done
exit 0`

func (in *instance) sweep(ctx context.Context, pattern string) error {
	var stderr bytes.Buffer
	code, err := in.run(ctx, []string{"/bin/sh", "-c", sweepScript, "sh", pattern}, in.baseEnv(), "", "", io.Discard, &stderr)
	if err == nil && code != 0 {
		err = fmt.Errorf("killing processes: exit code %d: %s", code, strings.TrimSpace(stderr.String()))
	}
	return err
}

func (in *instance) idPattern() string {
	// IDs are alphanumeric; quote anything else for grep.
	var b strings.Builder
	for _, r := range in.st.ID {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String() + "/"
}

// baseEnv is the default environment of commands.
func (in *instance) baseEnv() map[string]string {
	home := "/home/" + user
	if r := in.root(); r != "" {
		home = path.Dir(r)
	}
	return map[string]string{
		"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME": home, "LANG": "C.UTF-8", "TERM": "dumb", "USER": user,
	}
}

// script runs a shell script with arguments in the user's home and returns
// its stdout; a non-zero exit is an error carrying stderr.
func (in *instance) script(ctx context.Context, script string, args ...string) (string, error) {
	var out, errb bytes.Buffer
	argv := append([]string{"/bin/sh", "-c", script, "sh"}, args...)
	code, err := in.run(ctx, argv, in.baseEnv(), "", "", &out, &errb)
	if err != nil {
		return "", err
	}
	if code != 0 {
		return out.String(), &scriptError{code, strings.TrimSpace(errb.String())}
	}
	return out.String(), nil
}

type scriptError struct {
	code int
	msg  string
}

func (e *scriptError) Error() string {
	if e.msg == "" {
		return fmt.Sprintf("exit code %d", e.code)
	}
	return e.msg
}

func (in *instance) findRoot(ctx context.Context) error {
	out, err := in.script(ctx, `mkdir -p workspace && cd workspace && pwd -P`)
	if err != nil {
		return fmt.Errorf("making the workspace: %w", err)
	}
	root := strings.TrimSpace(out)
	if !path.IsAbs(root) {
		return fmt.Errorf("making the workspace: pwd printed %q", out)
	}
	in.mu.Lock()
	in.st.Root = root
	in.mu.Unlock()
	return nil
}

// Exec implements sandboxes.Instance.
func (in *instance) Exec(ctx context.Context, req sandboxes.ExecRequest, stdout, stderr io.Writer) (int, error) {
	env := in.baseEnv()
	maps.Copy(env, in.st.Env)
	maps.Copy(env, req.Env)
	marker := in.st.ID + "/" + nonce()
	env[sandboxes.MarkerEnv] = marker
	cwd := path.Join(in.root(), req.Dir)
	return in.run(ctx, []string{"/bin/sh", "-c", req.Command}, env, cwd, regexpQuote(marker), stdout, stderr)
}

func regexpQuote(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`\.[]*^$+?(){}|`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// ---- files ----

// resolveScript prints the real path of $1/$2 and fails unless it is
// inside $1. With $3 = "w" it also fails for a directory.
const resolveScript = `root=$1
p=$(realpath -m -- "$root/$2") || exit 3
case "$p" in "$root"|"$root"/*) ;; *) echo "path leads out of the workspace" >&2; exit 3;; esac
if [ "$3" = w ]; then
  [ -d "$p" ] && { echo "is a directory" >&2; exit 4; }
else
  [ -e "$p" ] || { echo "file does not exist" >&2; exit 2; }
  [ -f "$p" ] || { echo "not a regular file" >&2; exit 4; }
fi
printf '%s' "$p"`

func (in *instance) resolve(ctx context.Context, rel, mode string) (string, error) {
	root := in.root()
	if path.IsAbs(rel) {
		r, ok := strings.CutPrefix(rel, root)
		if !ok || (r != "" && r[0] != '/') {
			return "", sandboxes.Invalidf("path %q is outside the workspace", rel)
		}
		rel = strings.TrimPrefix(r, "/")
	}
	p, err := in.script(ctx, resolveScript, root, rel, mode)
	var se *scriptError
	if errors.As(err, &se) {
		switch se.code {
		case 2:
			return "", fmt.Errorf("%s: %w", rel, fs.ErrNotExist)
		case 3:
			return "", sandboxes.Invalidf("%s: %s", rel, se.msg)
		default:
			return "", fmt.Errorf("%s: %s", rel, se.msg)
		}
	}
	return p, err
}

func (in *instance) filesURL(p string) string {
	return in.envd + "/files?" + url.Values{"path": {p}, "username": {user}}.Encode()
}

// download streams a sandbox file.
func (in *instance) download(ctx context.Context, p string) (io.ReadCloser, error) {
	resp, err := in.b.do(ctx, call{method: http.MethodGet, url: in.filesURL(p), header: in.envdHeader(), envd: true}, true)
	if isStatus(err, http.StatusNotFound) {
		return nil, fmt.Errorf("%s: %w", p, fs.ErrNotExist)
	}
	if err != nil {
		return nil, in.envdErr(err)
	}
	return resp.Body, nil
}

// upload streams r to a sandbox file (not retried: r is read once).
func (in *instance) upload(ctx context.Context, p string, r io.Reader) error {
	// The spec requires a body: an empty file goes as a multipart part.
	br := bufio.NewReader(r)
	ctype := "application/octet-stream"
	var body io.Reader = br
	if _, err := br.Peek(1); err == io.EOF {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		if _, err := mw.CreateFormFile("file", path.Base(p)); err != nil {
			return err
		}
		mw.Close()
		body, ctype = &buf, mw.FormDataContentType()
	} else if err != nil {
		return err
	}
	er := &errReader{r: body}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, in.filesURL(p), er)
	if err != nil {
		return err
	}
	req.Header = in.envdHeader()
	req.Header.Set("Content-Type", ctype)
	resp, err := in.b.hc.Do(req)
	if er.err != nil {
		if resp != nil {
			resp.Body.Close()
		}
		return er.err
	}
	if err != nil {
		return in.b.redact(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return in.envdErr(in.b.respError(resp, true))
	}
	io.Copy(io.Discard, resp.Body)
	return nil
}

type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF && e.err == nil {
		e.err = err
	}
	return n, err
}

// ReadFile implements sandboxes.Instance.
func (in *instance) ReadFile(ctx context.Context, rel string) (io.ReadCloser, error) {
	p, err := in.resolve(ctx, rel, "r")
	if err != nil {
		return nil, err
	}
	return in.download(ctx, p)
}

// WriteFile implements sandboxes.Instance.
func (in *instance) WriteFile(ctx context.Context, rel string, r io.Reader, mode fs.FileMode) error {
	p, err := in.resolve(ctx, rel, "w")
	if err != nil {
		return err
	}
	if mode == 0 {
		mode = 0o644
	}
	tmp := path.Join(path.Dir(p), ".agentbot-write-"+nonce())
	if err := in.upload(ctx, tmp, r); err != nil {
		in.cleanup(ctx, tmp)
		return err
	}
	if _, err := in.script(ctx, `chmod "$2" "$1" && mv -f -T -- "$1" "$3" || { rm -f -- "$1"; exit 1; }`, tmp, fmt.Sprintf("%04o", mode.Perm()), p); err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	return nil
}

// cleanup removes temporary files, even after ctx is done.
func (in *instance) cleanup(ctx context.Context, paths ...string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killTimeout)
	defer cancel()
	_, _ = in.script(cctx, `rm -rf -- "$@"`, paths...)
}

// Archive implements sandboxes.Instance.
func (in *instance) Archive(ctx context.Context, w io.Writer) error {
	root := in.root()
	tmp := path.Join(path.Dir(root), ".agentbot-archive-"+nonce()+".tar")
	defer in.cleanup(ctx, tmp)
	if _, err := in.script(ctx, `tar -C "$1" -cf "$2" .`, root, tmp); err != nil {
		return fmt.Errorf("tar in the sandbox: %w", err)
	}
	rc, err := in.download(ctx, tmp)
	if err != nil {
		return err
	}
	defer rc.Close()
	_, err = io.Copy(w, rc)
	return err
}

// Restore implements sandboxes.Instance.
func (in *instance) Restore(ctx context.Context, r io.Reader) error {
	root := in.root()
	n := nonce()
	tmp := path.Join(path.Dir(root), ".agentbot-restore-"+n+".tar")
	stage := root + ".agentbot-stage-" + n
	old := root + ".agentbot-old-" + n
	defer in.cleanup(ctx, tmp, stage)
	if err := in.upload(ctx, tmp, r); err != nil {
		return err
	}
	_, err := in.script(ctx, `root=$1 tmp=$2 stage=$3 old=$4
mkdir -- "$stage" && tar -C "$stage" -xpf "$tmp" || exit 1
mv -T -- "$root" "$old" || exit 1
if ! mv -T -- "$stage" "$root"; then mv -T -- "$old" "$root"; exit 1; fi
rm -rf -- "$old"`, root, tmp, stage, old)
	if err != nil {
		return fmt.Errorf("extracting in the sandbox: %w", err)
	}
	return nil
}

// ---- life cycle ----

// Stop kills every process of the sandbox and pauses it; Attach resumes.
func (in *instance) Stop(ctx context.Context) error {
	if err := in.sweep(ctx, in.idPattern()); err != nil && !errors.Is(err, sandboxes.ErrStopped) {
		return err
	}
	return in.Pause(ctx)
}

// Pause implements sandboxes.Pauser: E2B pause, which keeps memory and
// processes. Pausing a paused sandbox is not an error.
func (in *instance) Pause(ctx context.Context) error {
	// Idempotent: pausing a paused sandbox answers 409, taken as success.
	_, err := in.b.idempotentPost(ctx, "/sandboxes/"+url.PathEscape(in.st.ID)+"/pause", nil, nil)
	switch {
	case isStatus(err, http.StatusNotFound):
		return sandboxes.NotFoundError(in.st.ID)
	case isStatus(err, http.StatusConflict):
		return nil
	}
	return err
}

// Resume implements sandboxes.Pauser.
func (in *instance) Resume(ctx context.Context) error {
	sb, err := in.b.connect(ctx, in.st.ID)
	if err == nil && sb.EnvdAccessToken != "" && sb.EnvdAccessToken != in.token {
		err = errors.New("E2B gave the resumed sandbox a new access token; attach again")
	}
	return err
}

// Destroy kills the sandbox's processes (best effort) and deletes it.
func (in *instance) Destroy(ctx context.Context) error {
	_ = in.sweep(ctx, in.idPattern())
	return in.kill(ctx)
}

func (in *instance) kill(ctx context.Context) error {
	_, err := in.b.jsonCall(ctx, http.MethodDelete, "/sandboxes/"+url.PathEscape(in.st.ID), nil, nil)
	if isStatus(err, http.StatusNotFound) {
		return sandboxes.NotFoundError(in.st.ID)
	}
	return err
}
