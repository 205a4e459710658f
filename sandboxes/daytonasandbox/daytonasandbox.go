// Package daytonasandbox is a sandbox backend on Daytona cloud sandboxes,
// through a thin net/http client of the Daytona API (create, get, start,
// stop, delete, list) and of the sandbox's toolbox (execute, file upload and
// download).
//
// Exec. The toolbox's POST /process/execute answers once, with the exit code
// and one merged output. So every command is wrapped: it runs under
// `env -i` (a built environment, never the daemon's) with the marker
// variable sandboxes.MarkerEnv set to "<id>/<nonce>", its stdout and stderr
// go to two files under <home>/.agentbot-tmp, and the backend reads them
// while the command runs (polling, so output arrives with a delay of up
// to a second, not as it comes) and once it ends. Stdout and stderr are thus
// kept apart. It reads only what ExecRequest.MaxStream lets a caller have:
// the first half as the command runs, the last half once it ended, in
// ranges through execute, base64-encoded (the toolbox's download has no
// ranges; the image needs wc, tail, head and base64). A command that
// prints without end costs the worker no more than that; the files grow on
// the sandbox's own disk until the command ends, and are deleted then.
// When ctx is done, the backend drops the HTTP call and runs a
// second execute that kills (SIGKILL) every process whose environment holds
// the command's marker: this finds children that left the process group or
// session (setsid, double forks); a process that cleared its environment
// escapes it. Stop and Destroy kill every process with the sandbox's
// marker prefix the same way.
//
// Retries. The execute call stays open for the whole command, so it is not
// bounded by Options.RequestTimeout but by the command's own timeout (the
// ctx deadline, sent as the daemon's timeout too) plus a margin, a
// backstop should the kill call fail. It is never sent again once it may
// have reached the daemon: a timeout or a connection lost mid-answer
// leaves the command running, and a second attempt would run it twice,
// concurrently. It is retried only after a failure to connect (dial, DNS,
// proxy) or a 429 or 503, as is the sandbox create. Idempotent calls
// (GET, DELETE, file uploads to a fixed path, start, stop) are retried on
// any 429, 5xx or connection error, each attempt bounded by
// Options.RequestTimeout.
//
// Files, snapshots. ReadFile and WriteFile resolve the path in the sandbox
// (realpath) and refuse paths that resolve outside the workspace; there is
// a window between that check and the transfer (a concurrent command could
// swap a directory for a link). Archive runs tar in the sandbox into a temp
// file and downloads it; Restore reads the whole stream first (so a failing
// stream changes nothing), uploads it, extracts it into a staging directory
// beside the workspace and swaps the two with two renames.
//
// The API key is sent as "Authorization: Bearer" and never appears in
// errors or in State.
package daytonasandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/agentbot/agentbot/sandboxes"
)

// Name is the registry name of the backend.
const Name = "daytona"

// Defaults of Options.
const (
	DefaultAPIURL   = "https://app.daytona.io/api"
	DefaultSnapshot = "daytonaio/sandbox:latest"
	// DefaultStateTimeout bounds the wait for a state change (creating →
	// started, stopping → stopped).
	DefaultStateTimeout = 3 * time.Minute
	// DefaultRequestTimeout bounds one attempt of one HTTP call.
	DefaultRequestTimeout = 2 * time.Minute
)

// Options configures the backend.
type Options struct {
	APIKey   string
	APIURL   string // default DefaultAPIURL
	Snapshot string // default DefaultSnapshot
	// CPU (cores), MemoryGB and DiskGB; zero leaves Daytona's default.
	CPU, MemoryGB, DiskGB int
	// Intervals in minutes; zero leaves Daytona's default.
	AutoStopMinutes, AutoArchiveMinutes, AutoDeleteMinutes int
	// HTTPClient; default a client on a clone of http.DefaultTransport.
	HTTPClient *http.Client
	// StateTimeout bounds waits for a state change; default
	// DefaultStateTimeout.
	StateTimeout time.Duration
	// PollInterval is the first interval of state polling; default 250ms.
	PollInterval time.Duration
	// RequestTimeout bounds one attempt of one HTTP call; default
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
}

// Backend makes Daytona sandboxes.
type Backend struct {
	opts Options
	c    *client
}

var (
	_ sandboxes.Backend = (*Backend)(nil)
	_ sandboxes.Lister  = (*Backend)(nil)
	_ sandboxes.Remover = (*Backend)(nil)
)

// New returns a backend. A missing key is reported by Available, not here.
func New(opts Options) (*Backend, error) {
	if opts.APIURL == "" {
		opts.APIURL = DefaultAPIURL
	}
	u, err := url.Parse(opts.APIURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, sandboxes.Invalidf("daytona: API URL %q is not an http(s) URL", opts.APIURL)
	}
	opts.APIURL = strings.TrimRight(opts.APIURL, "/")
	if opts.Snapshot == "" {
		opts.Snapshot = DefaultSnapshot
	}
	if opts.StateTimeout <= 0 {
		opts.StateTimeout = DefaultStateTimeout
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 250 * time.Millisecond
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.CPU < 0 || opts.MemoryGB < 0 || opts.DiskGB < 0 || opts.AutoStopMinutes < 0 || opts.AutoArchiveMinutes < 0 || opts.AutoDeleteMinutes < 0 {
		return nil, sandboxes.Invalidf("daytona: negative resources or intervals")
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	return &Backend{opts: opts, c: &client{hc: hc, key: opts.APIKey, apiURL: opts.APIURL, timeout: opts.RequestTimeout}}, nil
}

// Description implements sandboxes.Backend.
func (b *Backend) Description() string {
	return "daytona: one Daytona cloud sandbox (VM/container) per sandbox, driven over the Daytona API and toolbox"
}

// Available implements sandboxes.Backend: it needs a key the API accepts.
func (b *Backend) Available(ctx context.Context) error {
	if b.opts.APIKey == "" {
		return fmt.Errorf("%w: no Daytona API key configured", sandboxes.ErrUnavailable)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var out listResponse
	err := b.c.json(ctx, http.MethodGet, b.opts.APIURL+"/sandbox?limit=1", nil, &out)
	if err != nil && !errors.Is(err, sandboxes.ErrUnavailable) {
		return fmt.Errorf("%w: Daytona API unreachable: %v", sandboxes.ErrUnavailable, err)
	}
	return err
}

// sandboxDTO is the subset of the API's Sandbox we use.
type sandboxDTO struct {
	ID              string            `json:"id"`
	State           string            `json:"state"`
	ErrorReason     string            `json:"errorReason"`
	ToolboxProxyURL string            `json:"toolboxProxyUrl"`
	Snapshot        string            `json:"snapshot"`
	Env             map[string]string `json:"env"`
	Labels          map[string]string `json:"labels"`
	CreatedAt       string            `json:"createdAt"`
}

// Labels the backend sets on every sandbox, besides the Spec's.
const (
	labelAgentbot = "agentbot"      // "1": made by agentbot; List filters on it
	labelName     = "agentbot.name" // the sanitised Spec.Name
	labelKey      = "agentbot.key"  // sandboxes.KeyHash(Spec.Key)
)

// created parses CreatedAt; zero when absent or malformed.
func (s *sandboxDTO) created() time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s.CreatedAt)
	return t
}

type listResponse struct {
	Items      []sandboxDTO `json:"items"`
	NextCursor *string      `json:"nextCursor"`
}

func (b *Backend) sandboxURL(id string, suffix string) string {
	return b.opts.APIURL + "/sandbox/" + url.PathEscape(id) + suffix
}

// get fetches a sandbox; 404 gives sandboxes.NotFoundError.
func (b *Backend) get(ctx context.Context, id string) (*sandboxDTO, error) {
	var s sandboxDTO
	if err := b.c.json(ctx, http.MethodGet, b.sandboxURL(id, ""), nil, &s); err != nil {
		return nil, mapNotFound(err, id)
	}
	return &s, nil
}

func mapNotFound(err error, id string) error {
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return sandboxes.NotFoundError(id)
	}
	return err
}

// errState reports a sandbox in a failed state.
func errState(s *sandboxDTO) error {
	reason := s.ErrorReason
	if reason == "" {
		reason = "no reason given"
	}
	return fmt.Errorf("daytona: sandbox %s is in state %q: %s", s.ID, s.State, reason)
}

// waitState polls until the sandbox is in one of want, fails on error
// states, and gives up after StateTimeout.
func (b *Backend) waitState(ctx context.Context, id string, want ...string) (*sandboxDTO, error) {
	deadline := time.Now().Add(b.opts.StateTimeout)
	wait := b.opts.PollInterval
	for {
		s, err := b.get(ctx, id)
		if err != nil {
			return nil, err
		}
		for _, w := range want {
			if s.State == w {
				return s, nil
			}
		}
		switch s.State {
		case "error", "build_failed", "destroyed", "destroying":
			return nil, errState(s)
		}
		if time.Now().Add(wait).After(deadline) {
			return nil, fmt.Errorf("daytona: sandbox %s still in state %q after %s, want %s: %w",
				id, s.State, b.opts.StateTimeout, strings.Join(want, " or "), sandboxes.ErrTimeout)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*3/2, 2*time.Second)
	}
}

type createRequest struct {
	Name                string            `json:"name,omitempty"`
	Snapshot            string            `json:"snapshot,omitempty"`
	Env                 map[string]string `json:"env,omitempty"`
	Labels              map[string]string `json:"labels,omitempty"`
	CPU                 int               `json:"cpu,omitempty"`
	Memory              int               `json:"memory,omitempty"`
	Disk                int               `json:"disk,omitempty"`
	AutoStopInterval    *int              `json:"autoStopInterval,omitempty"`
	AutoArchiveInterval *int              `json:"autoArchiveInterval,omitempty"`
	AutoDeleteInterval  *int              `json:"autoDeleteInterval,omitempty"`
}

func intp(v int) *int {
	if v == 0 {
		return nil
	}
	return &v
}

// Create implements sandboxes.Backend.
//
// With spec.Key the sandbox carries the label agentbot.key (the key's
// sandboxes.KeyHash), and Create first lists the sandboxes with it: if
// there is one, it is started if need be and returned instead of a new
// one (one in an error state is deleted first). Two Creates of one key at
// once may both create; each then lists again, and all keep the sandbox
// created first (the smaller ID on a tie), the others deleting what they
// made. Daytona documents its list as eventually consistent: a sandbox
// created moments before may be missing from it, and then two may stay
// (the reaper of agentflow removes the one no session points to).
func (b *Backend) Create(ctx context.Context, spec sandboxes.Spec) (sandboxes.Instance, error) {
	if spec.Root != "" {
		return nil, sandboxes.Invalidf("daytona: a workspace root cannot be chosen")
	}
	if b.opts.APIKey == "" {
		return nil, fmt.Errorf("%w: no Daytona API key configured", sandboxes.ErrUnavailable)
	}
	snap := b.opts.Snapshot
	if spec.Image != "" {
		snap = spec.Image
	}
	labels := map[string]string{}
	maps.Copy(labels, spec.Labels)
	labels[labelAgentbot] = "1"
	if spec.Name != "" {
		labels[labelName] = sanitize(spec.Name)
	}
	keyHash := ""
	if spec.Key != "" {
		keyHash = sandboxes.KeyHash(spec.Key)
		labels[labelKey] = keyHash
		first, err := b.keyed(ctx, keyHash)
		if err != nil {
			return nil, err
		}
		if first != nil {
			return b.adopt(ctx, first, spec, snap)
		}
	}
	req := createRequest{
		Snapshot: snap, Env: spec.Env, Labels: labels,
		CPU: b.opts.CPU, Memory: b.opts.MemoryGB, Disk: b.opts.DiskGB,
		AutoStopInterval: intp(b.opts.AutoStopMinutes), AutoArchiveInterval: intp(b.opts.AutoArchiveMinutes),
		AutoDeleteInterval: intp(b.opts.AutoDeleteMinutes),
	}
	var s sandboxDTO
	// Not idempotent: a repeated create would make a second sandbox, so it
	// is sent again only when the first provably did not reach the API.
	if err := b.c.json(ctx, http.MethodPost, b.opts.APIURL+"/sandbox", req, &s); err != nil {
		return nil, err
	}
	if s.ID == "" {
		return nil, errors.New("daytona: create answered no sandbox id")
	}
	if keyHash != "" {
		if first, err := b.keyed(ctx, keyHash); err == nil && first != nil && first.ID != s.ID {
			// Another Create of the key made one first: keep that one.
			b.deleteQuietly(ctx, s.ID)
			return b.adopt(ctx, first, spec, snap)
		}
	}
	inst, err := b.finishCreate(ctx, &s, spec, snap)
	if err != nil {
		b.deleteQuietly(ctx, s.ID)
		return nil, err
	}
	return inst, nil
}

// deleteQuietly deletes sandbox id, even when ctx is done, ignoring errors:
// it cleans up after a failed or superseded create.
func (b *Backend) deleteQuietly(ctx context.Context, id string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_, _ = b.c.do(dctx, request{method: http.MethodDelete, url: b.sandboxURL(id, "")})
}

// keyed returns the usable sandbox labelled with keyHash that was created
// first, or nil when there is none. Sandboxes of the key in an error state
// are deleted on the way: they can never be handed out.
func (b *Backend) keyed(ctx context.Context, keyHash string) (*sandboxDTO, error) {
	list, err := b.list(ctx, map[string]string{labelAgentbot: "1", labelKey: keyHash})
	if err != nil {
		return nil, fmt.Errorf("daytona: looking for the sandbox of the key: %w", err)
	}
	var first *sandboxDTO
	for i := range list {
		s := &list[i]
		switch s.State {
		case "destroyed", "destroying":
			continue
		case "error", "build_failed":
			b.deleteQuietly(ctx, s.ID)
			continue
		}
		if first == nil || s.created().Before(first.created()) || (s.created().Equal(first.created()) && s.ID < first.ID) {
			first = s
		}
	}
	return first, nil
}

// adopt returns the existing sandbox s of a key as a Create does: started,
// with its workspace made.
func (b *Backend) adopt(ctx context.Context, s *sandboxDTO, spec sandboxes.Spec, snap string) (sandboxes.Instance, error) {
	if s.State == "stopping" {
		var err error
		if s, err = b.waitState(ctx, s.ID, "stopped"); err != nil {
			return nil, err
		}
	}
	switch s.State {
	case "stopped", "archived", "paused":
		if _, err := b.c.do(ctx, request{method: http.MethodPost, url: b.sandboxURL(s.ID, "/start"), idempotent: true}); err != nil {
			return nil, mapNotFound(err, s.ID)
		}
		s.State = "starting"
	}
	if s.Snapshot != "" {
		snap = s.Snapshot
	}
	return b.finishCreate(ctx, s, spec, snap)
}

func (b *Backend) finishCreate(ctx context.Context, s *sandboxDTO, spec sandboxes.Spec, snap string) (*instance, error) {
	if s.State != "started" {
		var err error
		if s, err = b.waitState(ctx, s.ID, "started"); err != nil {
			return nil, err
		}
	}
	inst := b.newInstance(s, sandboxes.State{Backend: Name, ID: s.ID, Image: snap, Env: maps.Clone(spec.Env)})
	var home struct {
		Dir string `json:"dir"`
	}
	if err := b.c.json(ctx, http.MethodGet, inst.toolbox+"/user-home-dir", nil, &home); err != nil {
		return nil, fmt.Errorf("daytona: home directory: %w", err)
	}
	if !path.IsAbs(home.Dir) {
		return nil, fmt.Errorf("daytona: home directory %q is not absolute", home.Dir)
	}
	inst.st.Root = path.Join(home.Dir, "workspace")
	if _, _, err := inst.run(ctx, "mkdir -p "+quote(inst.st.Root)+" "+quote(inst.tmpDir())); err != nil {
		return nil, err
	}
	return inst, nil
}

// Attach implements sandboxes.Backend: it starts a stopped sandbox.
func (b *Backend) Attach(ctx context.Context, st sandboxes.State) (sandboxes.Instance, error) {
	if st.ID == "" || !path.IsAbs(st.Root) {
		return nil, sandboxes.Invalidf("daytona: state needs an id and an absolute root")
	}
	s, err := b.get(ctx, st.ID)
	if err != nil {
		return nil, err
	}
	switch s.State {
	case "started":
	case "stopped", "archived", "paused":
		// Idempotent: starting a starting or started sandbox is no error.
		if _, err := b.c.do(ctx, request{method: http.MethodPost, url: b.sandboxURL(st.ID, "/start"), idempotent: true}); err != nil {
			return nil, mapNotFound(err, st.ID)
		}
		fallthrough
	default:
		if s, err = b.waitState(ctx, st.ID, "started"); err != nil {
			return nil, err
		}
	}
	st.Backend = Name
	return b.newInstance(s, st), nil
}

// List implements sandboxes.Lister: the sandboxes labelled agentbot=1.
// Their Root is not known without a call into each sandbox, so it is empty.
func (b *Backend) List(ctx context.Context) ([]sandboxes.Listed, error) {
	list, err := b.list(ctx, map[string]string{labelAgentbot: "1"})
	if err != nil {
		return nil, err
	}
	out := make([]sandboxes.Listed, 0, len(list))
	for _, s := range list {
		l := sandboxes.Listed{
			State:   sandboxes.State{Backend: Name, ID: s.ID, Image: s.Snapshot, Meta: map[string]string{"state": s.State}},
			Labels:  map[string]string{},
			Created: s.created(),
		}
		for k, v := range s.Labels {
			if k != labelAgentbot && k != labelName && k != labelKey {
				l.Labels[k] = v
			}
		}
		out = append(out, l)
	}
	return out, nil
}

// list returns the sandboxes that carry labels, page by page.
func (b *Backend) list(ctx context.Context, labels map[string]string) ([]sandboxDTO, error) {
	filter, err := json.Marshal(labels)
	if err != nil {
		return nil, err
	}
	var out []sandboxDTO
	cursor := ""
	for range 100 {
		q := url.Values{"labels": {string(filter)}, "limit": {"100"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page listResponse
		if err := b.c.json(ctx, http.MethodGet, b.opts.APIURL+"/sandbox?"+q.Encode(), nil, &page); err != nil {
			return nil, err
		}
		out = append(out, page.Items...)
		if page.NextCursor == nil || *page.NextCursor == "" {
			break
		}
		cursor = *page.NextCursor
	}
	return out, nil
}

// Remove implements sandboxes.Remover: it deletes the sandbox of state.ID
// without starting it or knowing its Root.
func (b *Backend) Remove(ctx context.Context, state sandboxes.State) error {
	if b.opts.APIKey == "" {
		return fmt.Errorf("%w: no Daytona API key configured", sandboxes.ErrUnavailable)
	}
	_, err := b.c.do(ctx, request{method: http.MethodDelete, url: b.sandboxURL(state.ID, "")})
	return mapNotFound(err, state.ID)
}

func sanitize(s string) string {
	var sb strings.Builder
	for _, r := range s {
		if r < 0x80 && (r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			sb.WriteRune(r)
		} else {
			sb.WriteByte('-')
		}
		if sb.Len() >= 63 {
			break
		}
	}
	return sb.String()
}

// quote quotes s for a POSIX shell.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
