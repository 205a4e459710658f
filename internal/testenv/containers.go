package testenv

import (
	"context"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
)

// RemoveContainers removes every container (and its volumes) labelled
// label=value, as a test's cleanup does with the sandboxes it made, and
// fails t if any is left or the engine cannot be asked.
func RemoveContainers(t testing.TB, label, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Errorf("removing the containers labelled %s=%s: %v", label, value, err)
		return
	}
	defer cli.Close()
	list := func() ([]container.Summary, error) {
		return cli.ContainerList(ctx, container.ListOptions{All: true,
			Filters: filters.NewArgs(filters.Arg("label", label+"="+value))})
	}
	cs, err := list()
	if err != nil {
		t.Errorf("listing the containers labelled %s=%s: %v", label, value, err)
		return
	}
	for _, c := range cs {
		err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("removing container %.12s: %v", c.ID, err)
		}
	}
	t.Logf("removed the %d sandbox containers of this test", len(cs))
	left, err := list()
	if err != nil {
		t.Errorf("listing the containers labelled %s=%s: %v", label, value, err)
		return
	}
	for _, c := range left {
		t.Errorf("container %.12s (%s) of this test is still there", c.ID, c.Labels["agentbot.session"])
	}
}
