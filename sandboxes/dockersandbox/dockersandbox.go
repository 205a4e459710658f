// Package dockersandbox is the Docker backend of package sandboxes: one
// long-lived container per sandbox, with the workspace at /workspace inside
// it.
//
// # Isolation
//
// Every container is hardened by default; each setting is visible in
// `docker inspect`:
//
//   - all Linux capabilities dropped (CapDrop ALL): even root inside cannot
//     chown files, read or write files against their permissions, signal
//     other users' processes, load modules, use raw sockets or mount
//     anything;
//   - no-new-privileges: set-uid binaries cannot raise privileges;
//   - limits on processes (PidsLimit, against fork bombs), memory (no swap
//     beyond it) and CPU (NanoCPUs);
//   - network mode "none" (only a loopback interface) unless
//     Options.Network says otherwise;
//   - a private IPC namespace, no privileged mode, no restart policy;
//   - commands run as a non-root user when the image has one (see
//     Options.User): the default image (scripts/build-sandbox-image.sh, or
//     the Dockerfile of this package) and the test image
//     (scripts/build-test-image.sh) all have "sandbox", uid 1000, owning
//     /workspace.
//
// Processes in the container still share the host's kernel: this is
// isolation against mistakes and casual misuse, not a boundary for hostile
// code (use a cloud backend, or a runtime such as gVisor, for that).
//
// # Lifecycle
//
// Create makes and starts a container that runs an idle shell under
// docker-init (HostConfig.Init), which reaps the zombies that exec'd
// commands leave behind. The sandbox ID is the container ID. Containers
// carry the label LabelSandbox (and the spec's labels and name), so
// Backend.List finds them, orphans included. A sandbox created with a
// Spec.Key lives in the container named KeyName(key), which a second Create
// of the key finds (see Create). Stop stops the container;
// Attach starts (or unpauses) it again. Destroy removes the container and
// its workspace volume.
//
// # Workspace
//
// /workspace is an anonymous volume of the container (labelled
// LabelSandbox too), filled by Docker from the image's /workspace and then
// given to the exec user. A volume, not the container's own layer, because
// Restore must rename whole directory trees, and overlay filesystems
// (fuse-overlayfs in particular) refuse or botch renames of directories
// whose names exist in an image layer. In a volume every rename is a plain
// one.
//
// Files and archives go through the Docker copy API only (the image needs no
// tar binary). Tar entries sent into the container carry the exec user's
// uid and gid, so that user can change them later. Paths given to file
// operations are resolved one component at a time; a symbolic link that
// leads out of the workspace is refused, as on other backends.
//
// # Commands
//
// A command runs through docker exec as the exec user, in /workspace (or
// its Dir), with exactly this environment: PATH=DefaultPath,
// HOME=/workspace, LANG=C.UTF-8, TERM=dumb, then Spec.Env, then the
// request's Env. The image's ENV and Docker's HOSTNAME are removed; the
// shell itself adds PWD (and busybox's SHLVL). HOME is the workspace: it is
// the one directory the user can surely write to, and tools' dotfiles then
// move with the workspace, as on the local backend.
//
// When the context of a command ends, its whole process tree is killed
// inside the container: docker exec makes the command's wrapper shell a
// session leader; an exec of the same user finds it by a random marker in
// its arguments, freezes (SIGSTOP) every process of its session and process
// group and every descendant of those, until no new one appears (which
// catches children that called setsid), then kills them all with SIGKILL.
// Background processes left running by a command that has already exited
// are not killed, and do not hold the command's result up for more than a
// moment.
package dockersandbox

import (
	"archive/tar"
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/jsonmessage"

	"github.com/agentbot/agentbot/sandboxes"
)

// Name is the name the Docker backend is registered under.
const Name = "docker"

// Root is the workspace root inside every sandbox container.
const Root = "/workspace"

// DefaultImage is the image sandboxes are made from when neither
// Options.Image nor Spec.Image names one. No registry has it: build it with
// scripts/build-sandbox-image.sh (from Debian packages, no registry needed;
// scripts/setup.sh runs it), or with
// `docker build -t agentbot-sandbox sandboxes/dockersandbox` where Docker
// Hub is reachable.
const DefaultImage = "agentbot-sandbox:latest"

// Labels set on every sandbox container. The whole dev.agentbot. prefix is
// reserved: a Spec label under it is refused.
const (
	// LabelSandbox marks a container as an agentbot sandbox; List finds
	// containers by it. Its value is "true".
	LabelSandbox = "dev.agentbot.sandbox"
	// LabelName holds the sanitised Spec.Name, when there was one.
	LabelName = "dev.agentbot.name"
	// LabelImage holds the image name the sandbox was created from (the
	// container's own image field may hold an ID once the tag moves).
	LabelImage = "dev.agentbot.image"
	// LabelEnv holds Spec.Env as a JSON object, so a listed sandbox can be
	// attached with the environment it was created with. Spec.Env holds
	// no secrets (see sandboxes.Spec).
	LabelEnv = "dev.agentbot.env"
	// LabelKey holds sandboxes.KeyHash of the Spec.Key of a keyed
	// sandbox, whose container is named KeyName(key).
	LabelKey = "dev.agentbot.key"
	// MetaUser is the State.Meta key of the user commands run as; Attach
	// uses it to keep running commands as the same user.
	MetaUser    = "dev.agentbot.user"
	labelPrefix = "dev.agentbot."
)

// Default limits of a sandbox container.
const (
	DefaultNetwork     = "none"
	DefaultMemoryBytes = 1 << 30
	DefaultNanoCPUs    = 1_000_000_000
	DefaultPidsLimit   = 512
	// DefaultWorkspaceBytes bounds the workspace volume where the engine
	// supports volume quotas.
	DefaultWorkspaceBytes = 10 << 30
)

// DefaultPath is the PATH of every command; the image's own environment
// never reaches commands (see the package documentation).
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Options configures the Docker backend. Zero values mean the documented
// defaults.
type Options struct {
	// Image is the default image of new sandboxes; default
	// DefaultImage. Spec.Image overrides it per sandbox.
	Image string
	// Network is the container network mode ("none", "bridge", a
	// network name); default "none", no network at all.
	Network string
	// MemoryBytes limits the container's memory, swap included; default
	// 1 GiB.
	MemoryBytes int64
	// NanoCPUs limits CPU time in billionths of a CPU; default one CPU.
	NanoCPUs int64
	// PidsLimit limits the number of processes in the container; default
	// 512.
	PidsLimit int64
	// User is who commands run as ("name", "uid", "name:group",
	// "uid:gid"). By default it is "sandbox" when the image's /etc/passwd
	// has that user, else the image's configured USER, else root (with
	// all capabilities dropped all the same).
	User string
	// WorkspaceBytes bounds the workspace volume (the local volume
	// driver's "size" option) where the engine supports it (the volume
	// directory on XFS with project quotas); default
	// DefaultWorkspaceBytes, -1 for none. Where the engine refuses it,
	// sandboxes are made without a bound and WorkspaceBounded says so.
	WorkspaceBytes int64
	// Host is the Docker daemon address ("unix:///var/run/docker.sock",
	// "tcp://host:2376"); empty means the standard DOCKER_HOST,
	// DOCKER_TLS_VERIFY and DOCKER_CERT_PATH environment variables, or
	// the local socket.
	Host string
	// Logger receives the backend's few warnings (an engine without
	// volume quotas); nil means slog.Default().
	Logger *slog.Logger
}

// Backend creates and attaches Docker sandboxes. It implements
// sandboxes.Backend and sandboxes.Lister, and is safe for concurrent use.
// Close it when done.
type Backend struct {
	opts Options
	cli  *client.Client
	// noQuota is set once the engine refused a volume size: later
	// sandboxes are made without one.
	noQuota   atomic.Bool
	quotaWarn sync.Once
}

var (
	_ sandboxes.Backend = (*Backend)(nil)
	_ sandboxes.Lister  = (*Backend)(nil)
	_ sandboxes.Remover = (*Backend)(nil)
)

// New returns a Docker backend. It does not contact the daemon: Available
// does.
func New(opts Options) (*Backend, error) {
	if opts.MemoryBytes < 0 || opts.NanoCPUs < 0 || opts.PidsLimit < 0 {
		return nil, fmt.Errorf("dockersandbox: negative limit in options (memory %d, cpus %d, pids %d)",
			opts.MemoryBytes, opts.NanoCPUs, opts.PidsLimit)
	}
	opts.Image = cmp.Or(opts.Image, DefaultImage)
	opts.Network = cmp.Or(opts.Network, DefaultNetwork)
	opts.MemoryBytes = cmp.Or(opts.MemoryBytes, DefaultMemoryBytes)
	opts.NanoCPUs = cmp.Or(opts.NanoCPUs, DefaultNanoCPUs)
	opts.PidsLimit = cmp.Or(opts.PidsLimit, DefaultPidsLimit)
	opts.WorkspaceBytes = cmp.Or(opts.WorkspaceBytes, DefaultWorkspaceBytes)
	copts := []client.Opt{client.FromEnv}
	if opts.Host != "" {
		copts = append(copts, client.WithHost(opts.Host))
	}
	copts = append(copts, client.WithAPIVersionNegotiation())
	cli, err := client.NewClientWithOpts(copts...)
	if err != nil {
		return nil, fmt.Errorf("dockersandbox: docker client: %w", err)
	}
	return &Backend{opts: opts, cli: cli}, nil
}

// Close releases the client's connections. Sandboxes keep running.
func (b *Backend) Close() error { return b.cli.Close() }

// Description says what the backend isolates.
func (b *Backend) Description() string {
	return fmt.Sprintf("docker: one container per sandbox (image %s; all capabilities dropped, no-new-privileges, "+
		"network %q, %d MiB memory, %g CPU, %d processes); commands share the host's kernel",
		b.opts.Image, b.opts.Network, b.opts.MemoryBytes>>20, float64(b.opts.NanoCPUs)/1e9, b.opts.PidsLimit)
}

// Available reports whether sandboxes of the configured image (Options.Image)
// can be made: the daemon must answer within five seconds, and the image
// must be there or, for an image of a registry, be served by it. Every
// error matches sandboxes.ErrUnavailable and says what is wrong and what to
// do:
//
//   - the daemon does not answer: its address;
//   - agentbot's own image (agentbot-sandbox, agentbot-sandbox-test; see
//     OwnImage) is missing: the command that builds it (no registry has
//     it, so it is never pulled);
//   - another image is missing and its registry does not answer for it
//     within ten seconds: the registry's error.
//
// For another image that is missing, Available asks the registry, through
// the daemon, for the image's manifest only (the distribution API): one
// round trip that proves the registry is reachable and has the image,
// without the download of a pull, which can take minutes and would hold up
// the start of the program. Create pulls it on first use.
func (b *Backend) Available(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := b.cli.Ping(pctx); err != nil {
		return fmt.Errorf("%w: docker daemon at %s is unreachable: %w", sandboxes.ErrUnavailable, b.cli.DaemonHost(), err)
	}
	img := b.opts.Image
	_, err := b.cli.ImageInspect(pctx, img)
	switch {
	case err == nil:
		return nil
	case !cerrdefs.IsNotFound(err):
		return fmt.Errorf("%w: inspecting docker image %s: %w", sandboxes.ErrUnavailable, img, err)
	case OwnImage(img):
		return missingOwnImage(img)
	}
	rctx, cancel := context.WithTimeout(ctx, registryCheckTimeout)
	defer cancel()
	if _, err := b.cli.DistributionInspect(rctx, img, ""); err != nil {
		return fmt.Errorf("%w: docker image %s is not present, and its registry does not serve it "+
			"(pull or build it, or set another image): %w", sandboxes.ErrUnavailable, img, err)
	}
	return nil
}

// registryCheckTimeout bounds Available's question to the registry of a
// missing image.
const registryCheckTimeout = 10 * time.Second

// OwnImage reports whether img names one of agentbot's own images,
// agentbot-sandbox or agentbot-sandbox-test with any tag or digest and no
// registry host (or Docker Hub's, where no such image can exist). They are
// built on this machine (scripts/build-sandbox-image.sh,
// scripts/build-test-image.sh) and never pulled.
func OwnImage(img string) bool {
	n := familiarName(img)
	return n == ownImage || n == ownTestImage
}

// familiarName is img without its tag or digest, and without Docker Hub's
// host and "library/" namespace, which a bare name implies.
func familiarName(img string) string {
	name, _, _ := strings.Cut(img, "@")
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		name = name[:i]
	}
	for _, p := range []string{"docker.io/", "index.docker.io/", "library/"} {
		name = strings.TrimPrefix(name, p)
	}
	return name
}

// The names of agentbot's own images, without a tag.
const (
	ownImage     = "agentbot-sandbox"
	ownTestImage = "agentbot-sandbox-test"
)

// missingOwnImage is the error of one of agentbot's own images that is not
// on the daemon: it says how to build it.
func missingOwnImage(img string) error {
	return fmt.Errorf("%w: docker image %s is not present, and no registry has it (it was not pulled); %s",
		sandboxes.ErrUnavailable, img, buildHint(img))
}

// idleScript keeps the container alive between commands and exits at once
// on docker stop.
const idleScript = `trap "exit 0" TERM; while :; do sleep 3600 & wait; done`

// Create pulls the image if it is missing (never one of agentbot's own,
// see OwnImage), creates and starts a hardened container, and prepares
// /workspace in it. A missing image that cannot be had gives an error
// matching sandboxes.ErrUnavailable that says how to get it. Spec.Root may
// only be empty or Root; Spec labels must not use the dev.agentbot. prefix.
//
// With spec.Key the container is named KeyName(spec.Key) and labelled
// LabelKey: when the daemon answers that the name is taken, Create attaches
// to that container instead (starting it if stopped). A container that was
// never started is one another Create is still preparing: Create waits for
// it, up to keyedCreateWait from its creation, and then takes it for the
// remains of a Create that died half-way, removes it and makes a new one.
func (b *Backend) Create(ctx context.Context, spec sandboxes.Spec) (sandboxes.Instance, error) {
	if spec.Root != "" && path.Clean(spec.Root) != Root {
		return nil, sandboxes.Invalidf("docker sandboxes keep their workspace at %s; root %q cannot be used", Root, spec.Root)
	}
	for k := range spec.Labels {
		if strings.HasPrefix(k, labelPrefix) || k == "" {
			return nil, sandboxes.Invalidf("label %q is reserved (prefix %s) or empty", k, labelPrefix)
		}
	}
	img := cmp.Or(spec.Image, b.opts.Image)
	imgInfo, err := b.ensureImage(ctx, img)
	if err != nil {
		return nil, err
	}

	labels := maps.Clone(spec.Labels)
	if labels == nil {
		labels = make(map[string]string)
	}
	labels[LabelSandbox] = "true"
	labels[LabelImage] = img
	name := sanitizeName(spec.Name)
	if name != "" {
		labels[LabelName] = name
	}
	if len(spec.Env) > 0 {
		env, err := json.Marshal(spec.Env)
		if err != nil {
			return nil, fmt.Errorf("encoding environment: %w", err)
		}
		labels[LabelEnv] = string(env)
	}
	cfg := &container.Config{
		Image: img,
		// The image's entrypoint and command are replaced by the idle
		// loop; commands come through exec.
		Entrypoint: []string{"/bin/sh", "-c"},
		Cmd:        []string{idleScript},
		WorkingDir: "/",
		Labels:     labels,
	}
	if spec.Key == "" {
		resp, err := b.containerCreate(ctx, cfg, containerName(name))
		if err != nil {
			return nil, b.daemonErr(fmt.Errorf("creating a container from %s: %w", img, err))
		}
		return b.finishCreate(ctx, resp.ID, imgInfo, spec)
	}
	labels[LabelKey] = sandboxes.KeyHash(spec.Key)
	cname := KeyName(spec.Key)
	for {
		resp, err := b.containerCreate(ctx, cfg, cname)
		if err == nil {
			return b.finishCreate(ctx, resp.ID, imgInfo, spec)
		}
		if !cerrdefs.IsConflict(err) {
			return nil, b.daemonErr(fmt.Errorf("creating container %s from %s: %w", cname, img, err))
		}
		inst, err := b.findKeyed(ctx, cname, labels[LabelKey])
		if err == nil || !errors.Is(err, errRetryCreate) {
			return inst, err
		}
	}
}

func (b *Backend) logger() *slog.Logger {
	if b.opts.Logger != nil {
		return b.opts.Logger
	}
	return slog.Default()
}

// containerCreate creates a container, with the workspace bounded when the
// engine supports volume quotas. An engine that refuses the bound gets the
// container without it, once and for all, with a warning.
func (b *Backend) containerCreate(ctx context.Context, cfg *container.Config, name string) (container.CreateResponse, error) {
	bounded := b.opts.WorkspaceBytes > 0 && !b.noQuota.Load()
	resp, err := b.cli.ContainerCreate(ctx, cfg, b.hostConfig(bounded), nil, nil, name)
	if err != nil && bounded && quotaRefused(err) {
		b.noQuota.Store(true)
		b.quotaWarn.Do(func() {
			b.logger().Warn("the Docker engine does not support workspace size limits (volume quotas); Docker sandboxes run without one",
				"error", err)
		})
		resp, err = b.cli.ContainerCreate(ctx, cfg, b.hostConfig(false), nil, nil, name)
	}
	return resp, err
}

// quotaRefused reports the engine's refusal of a volume size.
func quotaRefused(err error) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "quota") || (strings.Contains(msg, "size") && strings.Contains(msg, "not supported"))
}

// WorkspaceBounded reports whether new sandboxes get a bounded workspace:
// false when none was asked for, or once the engine refused one.
func (b *Backend) WorkspaceBounded() bool {
	return b.opts.WorkspaceBytes > 0 && !b.noQuota.Load()
}

// keyedCreateWait is how long after its creation a keyed container that
// was never started is taken for one another Create is still preparing
// (rather than the remains of a Create that died).
const keyedCreateWait = time.Minute

// errRetryCreate tells Create that the container of the key is gone (or
// was removed as a dead remnant) and the name may be free again.
var errRetryCreate = errors.New("retry the create")

// findKeyed returns the sandbox in the container named cname, which must
// carry keyHash in LabelKey, once it has been started at least once. It
// waits while the container is being prepared by another Create, and gives
// errRetryCreate once the name is free.
func (b *Backend) findKeyed(ctx context.Context, cname, keyHash string) (sandboxes.Instance, error) {
	for {
		ins, err := b.cli.ContainerInspect(ctx, cname)
		if cerrdefs.IsNotFound(err) {
			return nil, errRetryCreate
		}
		if err != nil {
			return nil, b.daemonErr(fmt.Errorf("inspecting container %s: %w", cname, err))
		}
		if ins.Config == nil || ins.Config.Labels[LabelKey] != keyHash {
			return nil, fmt.Errorf("container %s exists but was not made for this key", cname)
		}
		status := ""
		if ins.State != nil {
			status = string(ins.State.Status)
		}
		created, _ := time.Parse(time.RFC3339Nano, ins.Created)
		switch {
		case status == container.StateCreated && time.Since(created) < keyedCreateWait,
			status == container.StateRemoving:
			// Another Create is preparing it, or the daemon is removing
			// it: look again shortly.
		case status == container.StateCreated, status == container.StateDead:
			// Never started: the remains of a Create that died before
			// the end. Nobody was ever handed it.
			err := b.cli.ContainerRemove(ctx, ins.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
			if err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
				return nil, fmt.Errorf("removing the half-made container %s: %w", cname, err)
			}
			return nil, errRetryCreate
		default:
			return b.Attach(ctx, sandboxes.State{Backend: Name, ID: ins.ID})
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// finishCreate prepares and starts the container id that Create made; on
// failure it removes the container.
func (b *Backend) finishCreate(ctx context.Context, id string, imgInfo image.InspectResponse, spec sandboxes.Spec) (sandboxes.Instance, error) {
	ok := false
	defer func() {
		if !ok {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_ = b.cli.ContainerRemove(rctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
		}
	}()

	user, err := b.resolveUser(ctx, id, b.opts.User, imageUser(imgInfo))
	if err != nil {
		return nil, err
	}
	// Starting the container is the last step: a keyed container that
	// was never started is not ready (see findKeyed).
	if err := prepareWorkspace(ctx, b.cli, id, user); err != nil {
		return nil, fmt.Errorf("preparing %s: %w", Root, err)
	}
	if err := b.cli.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		return nil, fmt.Errorf("starting container %s: %w", id, err)
	}
	if spec.Key != "" {
		// Once started, a keyed container may already be in use by
		// another Create of its key: it is no longer ours to remove.
		ok = true
	}
	ins, err := b.cli.ContainerInspect(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("inspecting container %s: %w", id, err)
	}
	ok = true
	return b.newSandbox(ins, user, spec.Env), nil
}

// hostConfig is where the hardening is; see the package documentation.
func (b *Backend) hostConfig(bounded bool) *container.HostConfig {
	vol := &mount.VolumeOptions{Labels: map[string]string{LabelSandbox: "true"}}
	if bounded {
		vol.DriverConfig = &mount.Driver{Name: "local", Options: map[string]string{"size": strconv.FormatInt(b.opts.WorkspaceBytes, 10)}}
	}
	pids := b.opts.PidsLimit
	init := true
	return &container.HostConfig{
		// No network unless configured: commands cannot reach the
		// host's network, the internet or cloud metadata endpoints.
		NetworkMode: container.NetworkMode(b.opts.Network),
		// No capability at all, for root in the container too.
		CapDrop: []string{"ALL"},
		// Set-uid binaries (su, sudo) cannot raise privileges.
		SecurityOpt: []string{"no-new-privileges"},
		Privileged:  false,
		IpcMode:     container.IPCModePrivate,
		// docker-init as PID 1 reaps the zombies of exec'd commands.
		Init: &init,
		Resources: container.Resources{
			Memory:     b.opts.MemoryBytes,
			MemorySwap: b.opts.MemoryBytes, // no swap beyond the memory limit
			NanoCPUs:   b.opts.NanoCPUs,
			PidsLimit:  &pids, // against fork bombs
		},
		// A sandbox that stops stays stopped until Attach.
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		// The workspace is an anonymous volume of the container (see
		// the package documentation), removed with it.
		Mounts: []mount.Mount{{
			Type:          mount.TypeVolume,
			Target:        Root,
			VolumeOptions: vol,
		}},
	}
}

// ensureImage inspects img and pulls it when missing, unless it is one of
// agentbot's own images (OwnImage), which no registry has: their absence
// is reported at once with the command that builds them.
func (b *Backend) ensureImage(ctx context.Context, img string) (image.InspectResponse, error) {
	info, err := b.cli.ImageInspect(ctx, img)
	if err == nil {
		return info, nil
	}
	if !cerrdefs.IsNotFound(err) {
		return info, b.daemonErr(fmt.Errorf("inspecting image %s: %w", img, err))
	}
	if OwnImage(img) {
		return info, missingOwnImage(img)
	}
	pullErr := b.pull(ctx, img)
	if pullErr == nil {
		info, err = b.cli.ImageInspect(ctx, img)
		if err == nil {
			return info, nil
		}
		pullErr = err
	}
	return info, fmt.Errorf("%w: docker image %s is not present and could not be pulled (pull or build it, or set another image): %w",
		sandboxes.ErrUnavailable, img, pullErr)
}

func (b *Backend) pull(ctx context.Context, img string) error {
	rc, err := b.cli.ImagePull(ctx, img, image.PullOptions{})
	if err != nil {
		return err
	}
	defer rc.Close()
	// Pull errors come inside the progress stream.
	return jsonmessage.DisplayJSONMessagesStream(rc, io.Discard, 0, false, nil)
}

// buildHint gives the commands that build one of agentbot's own images
// (OwnImage) under the name img.
func buildHint(img string) string {
	if familiarName(img) == ownTestImage {
		cmd := "scripts/build-test-image.sh"
		if img != "agentbot-sandbox-test:latest" {
			cmd = "AGENTBOT_TEST_IMAGE=" + img + " " + cmd
		}
		return "build it with `" + cmd + "`"
	}
	script, tag := "scripts/build-sandbox-image.sh", ownImage
	if img != DefaultImage {
		script += " " + img
		tag = img
	}
	return "build it with `" + script + "` (no registry needed), or, where Docker Hub is reachable, " +
		"`docker build -t " + tag + " sandboxes/dockersandbox`"
}

// daemonErr marks an error of an unreachable daemon as ErrUnavailable.
func (b *Backend) daemonErr(err error) error {
	if client.IsErrConnectionFailed(err) {
		return fmt.Errorf("%w: docker daemon at %s is unreachable: %w", sandboxes.ErrUnavailable, b.cli.DaemonHost(), err)
	}
	return err
}

// Attach returns the sandbox of state.ID, unpausing or starting its
// container as needed. A container that is gone gives an error matching
// sandboxes.ErrNotFound; a container without LabelSandbox is refused with
// sandboxes.ErrInvalid.
func (b *Backend) Attach(ctx context.Context, st sandboxes.State) (sandboxes.Instance, error) {
	ins, err := b.cli.ContainerInspect(ctx, st.ID)
	if cerrdefs.IsNotFound(err) {
		return nil, sandboxes.NotFoundError(st.ID)
	}
	if err != nil {
		return nil, b.daemonErr(fmt.Errorf("inspecting container %s: %w", st.ID, err))
	}
	if ins.Config == nil || ins.Config.Labels[LabelSandbox] == "" {
		return nil, sandboxes.Invalidf("container %s is not an agentbot sandbox (no %s label)", st.ID, LabelSandbox)
	}
	switch {
	case ins.State == nil:
	case ins.State.Paused:
		if err := b.cli.ContainerUnpause(ctx, ins.ID); err != nil && !cerrdefs.IsConflict(err) {
			return nil, fmt.Errorf("unpausing container %s: %w", st.ID, err)
		}
	case !ins.State.Running:
		if err := b.cli.ContainerStart(ctx, ins.ID, container.StartOptions{}); err != nil {
			if cerrdefs.IsNotFound(err) {
				return nil, sandboxes.NotFoundError(st.ID)
			}
			return nil, fmt.Errorf("starting container %s: %w", st.ID, err)
		}
	}
	want := cmp.Or(st.Meta[MetaUser], b.opts.User)
	imgUser := ""
	if want == "" {
		if info, err := b.cli.ImageInspect(ctx, ins.Image); err == nil {
			imgUser = imageUser(info)
		}
	}
	user, err := b.resolveUser(ctx, ins.ID, want, imgUser)
	if err != nil {
		return nil, err
	}
	env := st.Env
	if env == nil {
		env = labelEnv(ins.Config.Labels)
	}
	return b.newSandbox(ins, user, env), nil
}

// List returns every container labelled LabelSandbox on the daemon, running
// or not, sorted by ID, with its creation time. Labels and State.Meta hold
// the Spec labels (with the image's labels, which Docker copies onto the
// container); Meta also LabelName. Env comes from LabelEnv.
func (b *Backend) List(ctx context.Context) ([]sandboxes.Listed, error) {
	cs, err := b.cli.ContainerList(ctx, container.ListOptions{
		All:     true,
		Filters: filters.NewArgs(filters.Arg("label", LabelSandbox)),
	})
	if err != nil {
		return nil, b.daemonErr(fmt.Errorf("listing containers: %w", err))
	}
	out := make([]sandboxes.Listed, 0, len(cs))
	for _, c := range cs {
		labels := labelMeta(c.Labels)
		delete(labels, LabelName)
		out = append(out, sandboxes.Listed{
			State: sandboxes.State{
				Backend: Name,
				ID:      c.ID,
				Root:    Root,
				Image:   cmp.Or(c.Labels[LabelImage], c.Image),
				Env:     labelEnv(c.Labels),
				Meta:    labelMeta(c.Labels),
			},
			Labels:  labels,
			Created: time.Unix(c.Created, 0),
		})
	}
	slices.SortFunc(out, func(a, b sandboxes.Listed) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Remove implements sandboxes.Remover: it removes the container of
// state.ID and its workspace volume without starting it first. A container
// without LabelSandbox is refused with sandboxes.ErrInvalid.
func (b *Backend) Remove(ctx context.Context, state sandboxes.State) error {
	ins, err := b.cli.ContainerInspect(ctx, state.ID)
	if cerrdefs.IsNotFound(err) {
		return sandboxes.NotFoundError(state.ID)
	}
	if err != nil {
		return b.daemonErr(fmt.Errorf("inspecting container %s: %w", state.ID, err))
	}
	if ins.Config == nil || ins.Config.Labels[LabelSandbox] == "" {
		return sandboxes.Invalidf("container %s is not an agentbot sandbox (no %s label)", state.ID, LabelSandbox)
	}
	err = b.cli.ContainerRemove(ctx, ins.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if cerrdefs.IsNotFound(err) {
		return sandboxes.NotFoundError(state.ID)
	}
	return b.daemonErr(err)
}

func labelEnv(labels map[string]string) map[string]string {
	var env map[string]string
	if s := labels[LabelEnv]; s != "" {
		_ = json.Unmarshal([]byte(s), &env) // a hand-edited label just loses the env
	}
	return env
}

// labelMeta is what State.Meta shows of a container's labels: the spec's
// own labels and the name.
func labelMeta(labels map[string]string) map[string]string {
	meta := make(map[string]string)
	for k, v := range labels {
		if !strings.HasPrefix(k, labelPrefix) || k == LabelName {
			meta[k] = v
		}
	}
	return meta
}

var nameUnsafe = regexp.MustCompile(`[^a-z0-9_.-]+`)

// sanitizeName turns a human hint into something fit for a container name
// and a label: lower case letters, digits, '.', '_' and '-', at most 40.
func sanitizeName(s string) string {
	s = nameUnsafe.ReplaceAllString(strings.ToLower(s), "-")
	s = strings.Trim(s, "-._")
	if len(s) > 40 {
		s = strings.TrimRight(s[:40], "-._")
	}
	return s
}

// KeyName is the container name of the sandbox of a Spec.Key.
func KeyName(key string) string {
	return "agentbot-k-" + sandboxes.KeyHash(key)
}

func containerName(name string) string {
	if name == "" {
		return "agentbot-" + randHex(6)
	}
	return "agentbot-" + name + "-" + randHex(4)
}

// execUser is who commands run as.
type execUser struct {
	spec     string // as given to docker exec
	uid, gid int    // for tar headers
}

// rootUser runs the few steps that must write into "/": with every
// capability dropped, root can still write into the directories it owns.
var rootUser = execUser{spec: "0:0"}

// resolveUser picks the exec user (see Options.User) and finds its uid
// and gid in the container's /etc/passwd and /etc/group.
func (b *Backend) resolveUser(ctx context.Context, id, want, imgUser string) (execUser, error) {
	passwd, err := readSmallFile(ctx, b.cli, id, "/etc/passwd")
	if err != nil && !cerrdefs.IsNotFound(err) {
		return execUser{}, fmt.Errorf("reading /etc/passwd of container %s: %w", id, err)
	}
	users := parseIDFile(passwd, 3)
	if want == "" {
		switch {
		case users["sandbox"] != nil:
			want = "sandbox"
		case imgUser != "":
			want = imgUser
		default:
			return rootUser, nil
		}
	}
	userPart, groupPart, hasGroup := strings.Cut(want, ":")
	u := execUser{spec: want}
	if n, err := strconv.Atoi(userPart); err == nil && n >= 0 {
		u.uid = n
		for _, f := range users {
			if f[0] == n {
				u.gid = f[1]
				break
			}
		}
	} else if f := users[userPart]; f != nil {
		u.uid, u.gid = f[0], f[1]
	} else if userPart != "" {
		return execUser{}, sandboxes.Invalidf("exec user %q is not in the image's /etc/passwd", userPart)
	}
	if hasGroup && groupPart != "" {
		if n, err := strconv.Atoi(groupPart); err == nil && n >= 0 {
			u.gid = n
		} else {
			group, err := readSmallFile(ctx, b.cli, id, "/etc/group")
			if err != nil && !cerrdefs.IsNotFound(err) {
				return execUser{}, fmt.Errorf("reading /etc/group of container %s: %w", id, err)
			}
			f := parseIDFile(group, 2)[groupPart]
			if f == nil {
				return execUser{}, sandboxes.Invalidf("exec group %q is not in the image's /etc/group", groupPart)
			}
			u.gid = f[0]
		}
	}
	return u, nil
}

func imageUser(info image.InspectResponse) string {
	if info.Config == nil {
		return ""
	}
	return info.Config.User
}

// parseIDFile parses /etc/passwd (idFields 3: name, x, uid, gid) or
// /etc/group (idFields 2: name, x, gid) into name -> numeric fields.
func parseIDFile(data []byte, idFields int) map[string][]int {
	out := make(map[string][]int)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if len(f) < idFields+1 || f[0] == "" || strings.HasPrefix(f[0], "#") {
			continue
		}
		var ids []int
		for _, s := range f[2 : idFields+1] {
			n, err := strconv.Atoi(s)
			if err != nil {
				ids = nil
				break
			}
			ids = append(ids, n)
		}
		if ids != nil {
			if _, dup := out[f[0]]; !dup {
				out[f[0]] = ids
			}
		}
	}
	return out
}

// readSmallFile reads a regular file of the container through the copy
// API, up to 1 MiB.
func readSmallFile(ctx context.Context, cli *client.Client, id, p string) ([]byte, error) {
	rc, _, err := cli.CopyFromContainer(ctx, id, p)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	h, err := tr.Next()
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	if h.Typeflag != tar.TypeReg {
		return nil, fmt.Errorf("%s is not a regular file", p)
	}
	return io.ReadAll(io.LimitReader(tr, 1<<20))
}
