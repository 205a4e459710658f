package dockersandbox

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"
	"syscall"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/agentbot/agentbot/sandboxes"
)

// sandbox is one container. Its fields are set once, so it is safe for
// concurrent use.
type sandbox struct {
	cli   *client.Client
	id    string
	user  execUser
	state sandboxes.State
	// imageEnv names the variables docker exec would pass on from the
	// container's configuration (the image's ENV) and from Docker itself;
	// Exec removes those the command's environment does not set.
	imageEnv []string
}

var (
	_ sandboxes.Instance = (*sandbox)(nil)
	_ sandboxes.Pauser   = (*sandbox)(nil)
)

func (b *Backend) newSandbox(ins container.InspectResponse, u execUser, env map[string]string) *sandbox {
	var labels map[string]string
	img := ins.Image
	names := map[string]bool{"HOSTNAME": true, "SHLVL": true}
	if ins.Config != nil {
		labels = ins.Config.Labels
		img = cmp.Or(labels[LabelImage], ins.Config.Image, img)
		for _, kv := range ins.Config.Env {
			if k, _, _ := strings.Cut(kv, "="); k != "" {
				names[k] = true
			}
		}
	}
	meta := labelMeta(labels)
	meta[MetaUser] = u.spec
	return &sandbox{
		cli:  b.cli,
		id:   ins.ID,
		user: u,
		state: sandboxes.State{
			Backend: Name,
			ID:      ins.ID,
			Root:    Root,
			Image:   img,
			Env:     maps.Clone(env),
			Meta:    meta,
		},
		imageEnv: slices.Sorted(maps.Keys(names)),
	}
}

// State returns a copy of the sandbox's state. Meta holds the spec's
// labels, LabelName and MetaUser.
func (s *sandbox) State() sandboxes.State {
	st := s.state
	st.Env = maps.Clone(st.Env)
	st.Meta = maps.Clone(st.Meta)
	return st
}

// opErr turns a daemon error about the container into one of the sandboxes
// package: a missing container gives ErrNotFound, a stopped or paused one
// ErrStopped, an unreachable daemon ErrUnavailable.
func (s *sandbox) opErr(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return err
	case client.IsErrConnectionFailed(err):
		return fmt.Errorf("%w: docker daemon is unreachable: %w", sandboxes.ErrUnavailable, err)
	case cerrdefs.IsNotFound(err):
		if _, ierr := s.cli.ContainerInspect(context.WithoutCancel(ctx), s.id); cerrdefs.IsNotFound(ierr) {
			return sandboxes.NotFoundError(s.id)
		}
		return err
	case cerrdefs.IsConflict(err):
		ins, ierr := s.cli.ContainerInspect(context.WithoutCancel(ctx), s.id)
		switch {
		case cerrdefs.IsNotFound(ierr):
			return sandboxes.NotFoundError(s.id)
		case ierr != nil || ins.State == nil:
		case ins.State.Paused:
			return fmt.Errorf("container is paused: %w", sandboxes.ErrStopped)
		case !ins.State.Running:
			return fmt.Errorf("container is %s: %w", ins.State.Status, sandboxes.ErrStopped)
		}
	}
	return err
}

// Stop stops the container (SIGTERM, then SIGKILL after two seconds); its
// filesystem, and so the workspace, stays for Attach. A paused container
// is unpaused first. Stopping a stopped container is not an error; a
// missing one gives ErrNotFound.
func (s *sandbox) Stop(ctx context.Context) error {
	ins, err := s.cli.ContainerInspect(ctx, s.id)
	if cerrdefs.IsNotFound(err) {
		return sandboxes.NotFoundError(s.id)
	}
	if err != nil {
		return s.opErr(ctx, err)
	}
	if ins.State != nil && ins.State.Paused {
		if err := s.cli.ContainerUnpause(ctx, s.id); err != nil && !cerrdefs.IsConflict(err) {
			return s.opErr(ctx, fmt.Errorf("unpausing before stop: %w", err))
		}
	}
	timeout := 2
	if err := s.cli.ContainerStop(ctx, s.id, container.StopOptions{Timeout: &timeout}); err != nil {
		if cerrdefs.IsNotFound(err) {
			return sandboxes.NotFoundError(s.id)
		}
		return s.opErr(ctx, err)
	}
	return nil
}

// Destroy removes the container, running or not, with its filesystem. A
// missing container gives an error matching ErrNotFound that names the ID.
func (s *sandbox) Destroy(ctx context.Context) error {
	err := s.cli.ContainerRemove(ctx, s.id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if cerrdefs.IsNotFound(err) {
		return sandboxes.NotFoundError(s.id)
	}
	return s.opErr(ctx, err)
}

// Pause freezes every process of the container (docker pause). Pausing a
// paused container is not an error; a stopped one gives ErrStopped.
func (s *sandbox) Pause(ctx context.Context) error {
	err := s.cli.ContainerPause(ctx, s.id)
	if err != nil && !cerrdefs.IsNotFound(err) {
		// Daemons differ in how they say "already paused".
		if ins, ierr := s.cli.ContainerInspect(ctx, s.id); ierr == nil && ins.State != nil && ins.State.Paused {
			return nil
		}
	}
	return s.opErr(ctx, err)
}

// Resume thaws a paused container (docker unpause). Resuming a running
// container is not an error; a stopped one gives ErrStopped.
func (s *sandbox) Resume(ctx context.Context) error {
	err := s.cli.ContainerUnpause(ctx, s.id)
	if err != nil && !cerrdefs.IsNotFound(err) {
		if ins, ierr := s.cli.ContainerInspect(ctx, s.id); ierr == nil && ins.State != nil && ins.State.Running && !ins.State.Paused {
			return nil
		}
	}
	return s.opErr(ctx, err)
}

// lstat stats p in the container without following a final symbolic link
// (for a link, LinkTarget is where the daemon resolves it, within the
// container). A missing path gives an error matching fs.ErrNotExist, a
// path below a file one matching syscall.ENOTDIR.
func (s *sandbox) lstat(ctx context.Context, p string) (container.PathStat, error) {
	st, err := s.cli.ContainerStatPath(ctx, s.id, p)
	if cerrdefs.IsNotFound(err) {
		return st, &fs.PathError{Op: "stat", Path: p, Err: fs.ErrNotExist}
	}
	if err != nil && ctx.Err() == nil {
		// The stat is a HEAD request: its error has no message. A GET
		// of the same path says what went wrong, such as a file where
		// a directory should be.
		if rc, _, gerr := s.cli.CopyFromContainer(ctx, s.id, p); gerr == nil {
			rc.Close()
		} else if strings.Contains(gerr.Error(), "not a directory") {
			return st, &fs.PathError{Op: "stat", Path: p, Err: syscall.ENOTDIR}
		} else {
			err = gerr
		}
	}
	if err != nil {
		return st, s.opErr(ctx, err)
	}
	return st, nil
}

// resolve turns a workspace-relative path into an absolute path of the
// container with no symbolic link in it, and stats it. It goes one
// component at a time, so that a link anywhere on the way (and a final one)
// is followed only when it resolves inside the workspace: a link that
// leads out gives an error matching sandboxes.ErrInvalid. (Out of the
// workspace is still inside the container; the check keeps the file
// operations of every backend alike.) A missing path gives an error
// matching fs.ErrNotExist, with the path it would have.
func (s *sandbox) resolve(ctx context.Context, rel string) (string, container.PathStat, error) {
	var parts []string
	for _, c := range strings.Split(rel, "/") {
		if c != "" && c != "." {
			parts = append(parts, c)
		}
	}
	cur := Root
	if len(parts) == 0 {
		st, err := s.lstat(ctx, cur)
		return cur, st, err
	}
	var st container.PathStat
	for i, c := range parts {
		next := path.Join(cur, c)
		var err error
		st, err = s.lstat(ctx, next)
		if errors.Is(err, fs.ErrNotExist) {
			return path.Join(append([]string{next}, parts[i+1:]...)...), st, err
		}
		if err != nil {
			return next, st, err
		}
		if st.Mode&fs.ModeSymlink != 0 {
			if !inside(st.LinkTarget) {
				return next, st, sandboxes.Invalidf("%s: the symbolic link %s leads out of the workspace",
					rel, strings.TrimPrefix(next, Root+"/"))
			}
			next = st.LinkTarget
			if i == len(parts)-1 {
				st, err = s.lstat(ctx, next)
				if err != nil {
					return next, st, err
				}
			}
		}
		cur = next
	}
	return cur, st, nil
}

// inside reports whether the container path p is in the workspace.
func inside(p string) bool {
	return p == Root || strings.HasPrefix(p, Root+"/")
}

// headerTar is a tar of entries without contents (directories, empty
// files).
func headerTar(hdrs ...*tar.Header) (io.Reader, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return &buf, nil
}
