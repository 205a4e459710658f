package daytonasandbox

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"mime/multipart"
	"net/http"
	"net/url"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbot/agentbot/sandboxes"
)

// Default environment of every command.
var defaultEnv = map[string]string{
	"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"LANG": "C.UTF-8",
	"TERM": "dumb",
}

type instance struct {
	b       *Backend
	st      sandboxes.State
	toolbox string // <toolboxProxyUrl>/<id>
	stopped atomic.Bool
}

func (b *Backend) newInstance(s *sandboxDTO, st sandboxes.State) *instance {
	return &instance{b: b, st: st, toolbox: strings.TrimRight(s.ToolboxProxyURL, "/") + "/" + url.PathEscape(s.ID)}
}

func (in *instance) State() sandboxes.State { return in.st }

func (in *instance) home() string   { return path.Dir(in.st.Root) }
func (in *instance) tmpDir() string { return path.Join(in.home(), ".agentbot-tmp") }

func nonce() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func (in *instance) check() error {
	if in.stopped.Load() {
		return sandboxes.ErrStopped
	}
	return nil
}

type executeRequest struct {
	Command string            `json:"command"`
	Cwd     string            `json:"cwd,omitempty"`
	Envs    map[string]string `json:"envs,omitempty"`
	Timeout int               `json:"timeout,omitempty"`
}

type executeResponse struct {
	ExitCode int    `json:"exitCode"`
	Result   string `json:"result"`
}

// execMargin is how much longer than the command's own timeout the HTTP
// call of an execute may take: the daemon answers only when the command
// ended, and then the answer has to travel.
const execMargin = 30 * time.Second

// execute runs command through the toolbox's execute, which the daemon
// kills after timeoutSecs and answers only when it ended. The call is
// bounded by that timeout plus execMargin, not by the client's request
// timeout, and it is never sent again once it may have reached the daemon
// (see client.do): a second attempt would run the command a second time,
// alongside the first.
func (in *instance) execute(ctx context.Context, command string, timeoutSecs int) (executeResponse, error) {
	var out executeResponse
	err := in.b.c.jsonRequest(ctx, request{method: http.MethodPost, url: in.toolbox + "/process/execute",
		timeout: time.Duration(timeoutSecs)*time.Second + execMargin},
		executeRequest{Command: command, Timeout: timeoutSecs}, &out)
	return out, err
}

// run executes a helper script (not a user command) through sh and returns
// its exit code and merged output.
func (in *instance) run(ctx context.Context, script string) (int, string, error) {
	timeout := 120
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(1, int(math.Ceil(time.Until(dl).Seconds())))
	}
	out, err := in.execute(ctx, "sh -c "+quote(script), timeout)
	if err != nil {
		return -1, "", err
	}
	return out.ExitCode, out.Result, nil
}

func (in *instance) download(ctx context.Context, p string) ([]byte, error) {
	body, err := in.b.c.do(ctx, request{method: http.MethodGet, url: in.toolbox + "/files/download?" + url.Values{"path": {p}}.Encode(), accept: "application/octet-stream"})
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return nil, fs.ErrNotExist
	}
	return body, err
}

func (in *instance) upload(ctx context.Context, p string, data []byte) error {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, err := mw.CreateFormFile("file", path.Base(p))
	if err == nil {
		_, err = fw.Write(data)
	}
	if err == nil {
		err = mw.Close()
	}
	if err != nil {
		return err
	}
	// Idempotent: a repetition writes the same bytes to the same path.
	_, err = in.b.c.do(ctx, request{method: http.MethodPost, url: in.toolbox + "/files/upload?" + url.Values{"path": {p}}.Encode(),
		body: buf.Bytes(), contentType: mw.FormDataContentType(), idempotent: true})
	return err
}

// Exec implements sandboxes.Instance; see the package documentation.
func (in *instance) Exec(ctx context.Context, req sandboxes.ExecRequest, stdout, stderr io.Writer) (int, error) {
	if err := in.check(); err != nil {
		return -1, err
	}
	n := nonce()
	marker := in.st.ID + "/" + n
	env := map[string]string{"HOME": in.home()}
	for k, v := range defaultEnv {
		env[k] = v
	}
	for k, v := range in.st.Env {
		env[k] = v
	}
	for k, v := range req.Env {
		env[k] = v
	}
	env[sandboxes.MarkerEnv] = marker
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var envArgs strings.Builder
	for _, k := range keys {
		envArgs.WriteString(quote(k+"="+env[k]) + " ")
	}
	dir := in.st.Root
	if req.Dir != "" {
		dir = path.Join(dir, req.Dir)
	}
	outF, errF := path.Join(in.tmpDir(), n+".out"), path.Join(in.tmpDir(), n+".err")
	inner := "cd " + quote(dir) + " || exit 1\n" + req.Command
	script := fmt.Sprintf("mkdir -p %s || exit 125\nenv -i %s/bin/sh -c %s >%s 2>%s </dev/null",
		quote(in.tmpDir()), envArgs.String(), quote(inner), quote(outF), quote(errF))

	timeout := 3600
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(1, int(math.Ceil(time.Until(dl).Seconds()))+5)
	}
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		out, err := in.execute(ctx, "sh -c "+quote(script), timeout)
		done <- result{out.ExitCode, err}
	}()

	limit := int64(cmp.Or(req.MaxStream, sandboxes.DefaultMaxStream))
	so, se := newOutFile(stdout, outF, limit), newOutFile(stderr, errF, limit)
	var r result
	wait := 200 * time.Millisecond
poll:
	for {
		select {
		case r = <-done:
			break poll
		case <-ctx.Done():
			break poll
		case <-time.After(wait):
			wait = min(wait*3/2, time.Second)
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			so.poll(pctx, in)
			se.poll(pctx, in)
			cancel()
		}
	}
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	var runErr error
	if ctx.Err() != nil {
		runErr = ctx.Err()
		if err := in.kill(bg, marker); err != nil {
			runErr = errors.Join(runErr, fmt.Errorf("killing the command: %w", err))
		}
	} else if r.err != nil {
		runErr = r.err
	}
	so.finish(bg, in)
	se.finish(bg, in)
	_, _, _ = in.run(bg, "rm -f "+quote(outF)+" "+quote(errF))
	if runErr != nil {
		return -1, runErr
	}
	return r.code, nil
}

// readChunk is the most one call reads of an output file.
const readChunk = 1 << 20

// outFile copies one output file of a command to its writer, reading at
// most its first head and last tail bytes (see Exec): what the worker reads
// and holds stays bounded however much the command prints.
type outFile struct {
	mu         sync.Mutex
	w          io.Writer
	path       string
	head, tail int64
	off        int64 // bytes of the file handled: written or skipped
}

func newOutFile(w io.Writer, p string, limit int64) *outFile {
	return &outFile{w: w, path: p, head: limit / 2, tail: limit - limit/2}
}

// poll copies the next bytes of the head, while the command runs. A file
// not there yet, or a failed read, is tried again at the next poll.
func (f *outFile) poll(ctx context.Context, in *instance) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.off >= f.head {
		return
	}
	_, data, err := in.readRange(ctx, f.path, f.off, min(f.head-f.off, readChunk))
	if err == nil && len(data) > 0 {
		f.w.Write(data)
		f.off += int64(len(data))
	}
}

// finish copies the rest once the command has ended: the rest of the head,
// then, of a file longer than head and tail, a Skip of the middle and the
// last tail bytes. The size the first read finds bounds what it reads: a
// background process may write on.
func (f *outFile) finish(ctx context.Context, in *instance) {
	f.mu.Lock()
	defer f.mu.Unlock()
	size := int64(-1) // not known before the first read
	for {
		var n int64
		switch {
		case size >= 0 && f.off >= size:
			return
		case size >= 0:
			if f.off >= f.head && size-f.off > f.tail {
				skip := size - f.tail - f.off
				if s, ok := f.w.(sandboxes.Skipper); ok {
					s.Skip(skip)
				}
				f.off += skip
			}
			n = min(size-f.off, readChunk)
		case f.off < f.head:
			n = readChunk // most outputs are read whole by this one call
		}
		if f.off < f.head {
			n = min(n, f.head-f.off)
		}
		sz, data, err := in.readRange(ctx, f.path, f.off, n)
		if err != nil || sz < 0 {
			return // failed, or the command removed its own output file
		}
		if size < 0 {
			size = sz
		}
		if n > 0 && len(data) == 0 {
			return
		}
		f.w.Write(data)
		f.off += int64(len(data))
	}
}

// readRange returns the size of the file p in the sandbox and n bytes of it
// from off (fewer at its end), through execute: the toolbox's download has
// no ranges and would bring the whole file. The bytes travel base64-encoded
// because execute's result is a JSON string. A missing file has size -1.
func (in *instance) readRange(ctx context.Context, p string, off, n int64) (int64, []byte, error) {
	script := fmt.Sprintf("f=%s\n[ -f \"$f\" ] || { echo -1; exit 0; }\nwc -c <\"$f\"", quote(p))
	if n > 0 {
		script += fmt.Sprintf("\ntail -c +%d \"$f\" 2>/dev/null | head -c %d | base64", off+1, n)
	}
	code, out, err := in.run(ctx, script)
	if err != nil {
		return 0, nil, err
	}
	first, rest, _ := strings.Cut(out, "\n")
	size, perr := strconv.ParseInt(strings.TrimSpace(first), 10, 64)
	if code != 0 || perr != nil {
		return 0, nil, fmt.Errorf("daytona: reading %s: exit code %d: %.200s", p, code, out)
	}
	// StdEncoding skips the line breaks base64 puts in.
	data, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		return 0, nil, fmt.Errorf("daytona: reading %s: %w", p, err)
	}
	return size, data, nil
}

// killScript kills (twice, for processes forked meanwhile) every process
// whose environment holds sandboxes.MarkerEnv equal to m (exact) or
// starting with m (prefix).
func killScript(m string, prefix bool) string {
	pat := "^" + sandboxes.MarkerEnv + "=" + m + "$"
	if prefix {
		pat = "^" + sandboxes.MarkerEnv + "=" + m
	}
	return fmt.Sprintf(`for i in 1 2; do
for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" = "$$" ] && continue
tr '\0' '\n' <"$d/environ" 2>/dev/null | grep -q %s && kill -9 "$p" 2>/dev/null
done; done; exit 0`, quote(pat))
}

func (in *instance) kill(ctx context.Context, marker string) error {
	_, _, err := in.run(ctx, killScript(marker, false))
	return err
}

// resolve resolves p below the root in the sandbox with realpath and fails
// when the result leaves the workspace. For reading, every element is
// followed; for writing, the parent is (and created), and a last element
// that is a symlink must point inside the workspace (it is replaced, not
// followed, by the rename that ends WriteFile).
func (in *instance) resolve(ctx context.Context, p string, forWrite bool) (string, error) {
	full := path.Join(in.st.Root, p)
	var script string
	if forWrite {
		script = fmt.Sprintf(`r=$(realpath %[1]s) || exit 3
d=$(dirname %[2]s); mkdir -p "$d" 2>/dev/null
pd=$(realpath "$d") || exit 2
case "$pd/" in "$r"/*) ;; *) exit 4;; esac
f="$pd/"$(basename %[2]s)
if [ -L "$f" ]; then t=$(realpath -m "$f"); case "$t/" in "$r"/*) ;; *) exit 4;; esac; fi
[ -d "$f" ] && exit 5
printf %%s "$f"`, quote(in.st.Root), quote(full))
	} else {
		script = fmt.Sprintf(`r=$(realpath %[1]s) || exit 3
[ -e %[2]s ] || exit 2
f=$(realpath %[2]s) || exit 2
case "$f/" in "$r"/*) ;; *) exit 4;; esac
[ -d "$f" ] && exit 5
printf %%s "$f"`, quote(in.st.Root), quote(full))
	}
	code, out, err := in.run(ctx, script)
	switch {
	case err != nil:
		return "", err
	case code == 0:
		return out, nil
	case code == 2:
		return "", fmt.Errorf("%s: %w", p, fs.ErrNotExist)
	case code == 4:
		return "", sandboxes.Invalidf("%s resolves outside the workspace", p)
	case code == 5:
		return "", sandboxes.Invalidf("%s is a directory", p)
	default:
		return "", fmt.Errorf("daytona: resolving %s: exit code %d: %s", p, code, strings.TrimSpace(out))
	}
}

// ReadFile implements sandboxes.Instance.
func (in *instance) ReadFile(ctx context.Context, p string) (io.ReadCloser, error) {
	if err := in.check(); err != nil {
		return nil, err
	}
	f, err := in.resolve(ctx, p, false)
	if err != nil {
		return nil, err
	}
	data, err := in.download(ctx, f)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", p, fs.ErrNotExist)
	}
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

// WriteFile implements sandboxes.Instance: upload to a temp file beside the
// target, then chmod and rename.
func (in *instance) WriteFile(ctx context.Context, p string, r io.Reader, mode fs.FileMode) error {
	if err := in.check(); err != nil {
		return err
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	f, err := in.resolve(ctx, p, true)
	if err != nil {
		return err
	}
	tmp := path.Join(path.Dir(f), ".agentbot-upload-"+nonce())
	if err := in.upload(ctx, tmp, data); err != nil {
		return err
	}
	code, out, err := in.run(ctx, fmt.Sprintf("chmod %o %s && mv -f %s %s || { rm -f %[2]s; exit 1; }",
		mode.Perm(), quote(tmp), quote(tmp), quote(f)))
	if err == nil && code != 0 {
		err = fmt.Errorf("daytona: writing %s: %s", p, strings.TrimSpace(out))
	}
	return err
}

// Archive implements sandboxes.Instance.
func (in *instance) Archive(ctx context.Context, w io.Writer) error {
	if err := in.check(); err != nil {
		return err
	}
	t := path.Join(in.tmpDir(), nonce()+".tar")
	// Snapshot drops sandboxes.OutputsDir anyway; leaving it out here
	// keeps it out of the download.
	code, out, err := in.run(ctx, fmt.Sprintf("mkdir -p %s && tar -C %s -cf %s --exclude=%s . 2>&1",
		quote(in.tmpDir()), quote(in.st.Root), quote(t), quote("./"+sandboxes.OutputsDir)))
	defer func() {
		bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _, _ = in.run(bg, "rm -f "+quote(t))
	}()
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("daytona: tar: exit code %d: %s", code, strings.TrimSpace(out))
	}
	data, err := in.download(ctx, t)
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}

// Restore implements sandboxes.Instance: all or nothing.
func (in *instance) Restore(ctx context.Context, r io.Reader) error {
	if err := in.check(); err != nil {
		return err
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	n := nonce()
	t := path.Join(in.tmpDir(), n+".tar")
	if err := in.upload(ctx, t, data); err != nil {
		return err
	}
	root := in.st.Root
	staging, old := root+".agentbot-restore-"+n, root+".agentbot-old-"+n
	code, out, err := in.run(ctx, fmt.Sprintf(`t=%s s=%s o=%s r=%s
cleanup() { chmod -R u+w "$1" 2>/dev/null; rm -rf "$1"; }
mkdir "$s" && tar -C "$s" -xpf "$t" 2>&1 || { rm -f "$t"; cleanup "$s"; exit 1; }
rm -f "$t"
chmod "$(stat -c %%a "$r")" "$s" 2>/dev/null
mv "$r" "$o" || { cleanup "$s"; exit 1; }
mv "$s" "$r" || { mv "$o" "$r"; cleanup "$s"; exit 1; }
cleanup "$o"; exit 0`, quote(t), quote(staging), quote(old), quote(root)))
	if err == nil && code != 0 {
		err = fmt.Errorf("daytona: extracting the archive: %s", strings.TrimSpace(out))
	}
	return err
}

// Stop implements sandboxes.Instance: it kills the sandbox's commands and
// stops the sandbox (its disk is kept; Attach starts it).
func (in *instance) Stop(ctx context.Context) error {
	s, err := in.b.get(ctx, in.st.ID)
	if err != nil {
		return err
	}
	switch s.State {
	case "stopped", "archived", "archiving":
		in.stopped.Store(true)
		return nil
	case "started":
		_, _, _ = in.run(ctx, killScript(in.st.ID+"/", true))
	}
	if s.State != "stopping" {
		// Idempotent: stopping a stopping or stopped sandbox is no error.
		if _, err := in.b.c.do(ctx, request{method: http.MethodPost, url: in.b.sandboxURL(in.st.ID, "/stop"), idempotent: true}); err != nil {
			return mapNotFound(err, in.st.ID)
		}
	}
	if _, err := in.b.waitState(ctx, in.st.ID, "stopped", "archived"); err != nil {
		return err
	}
	in.stopped.Store(true)
	return nil
}

// Destroy implements sandboxes.Instance.
func (in *instance) Destroy(ctx context.Context) error {
	if !in.stopped.Load() {
		kctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, _, _ = in.run(kctx, killScript(in.st.ID+"/", true))
		cancel()
	}
	_, err := in.b.c.do(ctx, request{method: http.MethodDelete, url: in.b.sandboxURL(in.st.ID, "")})
	return mapNotFound(err, in.st.ID)
}
