package images

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbot/agentbot/internal/fakeopenai"
	"github.com/agentbot/agentbot/internal/fakeslack"
	"github.com/agentbot/agentbot/internal/testenv"
	"github.com/agentbot/agentbot/sandboxes/dockersandbox"
)

const (
	alice   = "UALICE"
	channel = "C0IMG"
)

// TestImages builds the bot and worker images with the project's script
// and runs them as the Helm chart does (uid 65532, read-only root, all
// capabilities dropped, writable /tmp and state dir only), on the host's
// network so that they reach the test's Temporal server, fake Slack and
// fake model. The bot must answer /healthz and /readyz; a mention in the
// fake Slack must come back answered by the worker container, which ran
// the command in a Docker sandbox through the host's engine (the socket
// mounted: opt-in in the chart).
func TestImages(t *testing.T) {
	if err := testenv.CheckDocker(context.Background()); err != nil {
		t.Fatalf("the image tests need the Docker engine and the test image: %v", err)
	}
	run := randomID()
	tag := "test-" + run
	t.Cleanup(func() {
		for _, name := range []string{"agentbot-bot", "agentbot-worker"} {
			_ = exec.Command("docker", "rmi", "--force", name+":"+tag).Run()
		}
	})
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	build := exec.Command(filepath.Join(root, "scripts", "build-images.sh"), "--tag", tag)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("scripts/build-images.sh: %v\n%s", err, out)
	}

	for _, name := range []string{"agentbot-bot", "agentbot-worker"} {
		t.Run("inspect "+name, func(t *testing.T) { inspect(t, name+":"+tag) })
	}

	srv, err := testenv.StartTemporal(context.Background(), testenv.TemporalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	model := fakeopenai.New(fakeopenai.Options{Script: fakeopenai.DirectiveScript(), APIKey: "sk-images"})
	t.Cleanup(model.Close)
	slack := fakeslack.New(fakeslack.Options{})
	t.Cleanup(slack.Close)
	started := time.Now()
	t.Cleanup(func() { removeSandboxes(t, started) })

	sock := "/var/run/docker.sock"
	var st syscall.Stat_t
	if err := syscall.Stat(sock, &st); err != nil {
		t.Fatalf("the worker container needs the engine's socket: %v", err)
	}
	workerAddr, botAddr := freeAddr(t), freeAddr(t)
	common := []string{
		"TEMPORAL_ADDRESS=" + srv.FrontendHostPort(),
		"SLACK_BOT_TOKEN=" + slack.Options().BotToken,
		"AGENTBOT_SLACK_API_URL=" + slack.APIURL(),
		"AGENTBOT_BACKENDS=docker", "AGENTBOT_DEFAULT_BACKEND=docker",
	}
	startContainer(t, "worker-"+run, "agentbot-worker:"+tag,
		[]string{"-v", sock + ":" + sock, "--group-add", fmt.Sprint(st.Gid)},
		append(common,
			"AGENTBOT_HTTP_ADDR="+workerAddr,
			"OPENAI_BASE_URL="+model.URL(), "OPENAI_API_KEY=sk-images",
			"AGENTBOT_DOCKER_IMAGE="+testenv.TestImage(),
		))
	startContainer(t, "bot-"+run, "agentbot-bot:"+tag, nil,
		append(common,
			"AGENTBOT_HTTP_ADDR="+botAddr,
			"SLACK_APP_TOKEN="+slack.Options().AppToken,
			"AGENTBOT_ALLOWED_USERS="+alice,
		))

	waitHTTP(t, "worker", "http://"+workerAddr+"/readyz", "worker-"+run)
	for _, path := range []string{"/healthz", "/readyz"} {
		waitHTTP(t, "bot", "http://"+botAddr+path, "bot-"+run)
	}

	token := "from-the-images-" + run
	ts := slack.PostUserMessage(channel, alice, "<@UBOT> sh: echo "+token, "")
	deadline := time.Now().Add(2 * time.Minute)
	for {
		answered := false
		for _, m := range slack.Thread(channel, ts) {
			answered = answered || (m.BotID != "" && strings.Contains(m.Text, token))
		}
		if answered {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer in the thread after 2 minutes: %+v\nworker:\n%s\nbot:\n%s",
				slack.Thread(channel, ts), logs("worker-"+run), logs("bot-"+run))
		}
		time.Sleep(250 * time.Millisecond)
	}
	// The model was called with the key the worker container was given.
	called := false
	for _, r := range model.Requests() {
		called = called || r.Header.Get("Authorization") == "Bearer sk-images"
	}
	if !called {
		t.Error("the worker container never called the model with its key")
	}
}

// inspect checks what an image promises: a non-root user, the OCI labels
// with the version, the entrypoint, and no shell to exec into.
func inspect(t *testing.T, ref string) {
	out, err := exec.Command("docker", "image", "inspect", ref).Output()
	if err != nil {
		t.Fatalf("docker image inspect %s: %v", ref, err)
	}
	var imgs []struct {
		Config struct {
			User       string
			Entrypoint []string
			Labels     map[string]string
			Env        []string
		}
		Architecture, Os string
	}
	if err := json.Unmarshal(out, &imgs); err != nil || len(imgs) != 1 {
		t.Fatalf("inspect %s: %v", ref, err)
	}
	c := imgs[0].Config
	if c.User != "65532:65532" {
		t.Errorf("%s runs as %q, want 65532:65532", ref, c.User)
	}
	for _, l := range []string{"org.opencontainers.image.title", "org.opencontainers.image.version",
		"org.opencontainers.image.revision", "org.opencontainers.image.source", "org.opencontainers.image.created"} {
		if c.Labels[l] == "" || c.Labels[l] == "unknown" {
			t.Errorf("%s: label %s = %q", ref, l, c.Labels[l])
		}
	}
	if v := c.Labels["org.opencontainers.image.version"]; !strings.HasPrefix(v, "test-") {
		t.Errorf("%s: version label %q is not the tag it was built with", ref, v)
	}
	if len(c.Entrypoint) != 1 || !strings.HasPrefix(c.Entrypoint[0], "/usr/local/bin/agentbot-") {
		t.Errorf("%s: entrypoint %v", ref, c.Entrypoint)
	}
	if imgs[0].Os != "linux" {
		t.Errorf("%s: os %q", ref, imgs[0].Os)
	}
	// A shell in the image would be one more thing to patch and a way in.
	sh := exec.Command("docker", "run", "--rm", "--entrypoint", "/bin/sh", ref, "-c", "true")
	if out, err := sh.CombinedOutput(); err == nil {
		t.Errorf("%s has a shell: %s", ref, out)
	}
}

// startContainer runs image detached as the chart runs it, with env and
// extra docker run flags, and removes it when the test ends.
func startContainer(t *testing.T, name, image string, extra, env []string) {
	t.Helper()
	name = "agentbot-imagetest-" + name
	args := []string{"run", "--detach", "--name", name, "--label", "agentbot.test=images",
		"--network", "host", "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
		"--tmpfs", "/tmp:mode=1777", "--tmpfs", "/var/lib/agentbot:uid=65532,gid=65532,mode=0700"}
	args = append(args, extra...)
	for _, kv := range env {
		args = append(args, "--env", kv)
	}
	args = append(args, image)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s:\n%s", name, logs(name))
		}
		if out, err := exec.Command("docker", "rm", "--force", name).CombinedOutput(); err != nil {
			t.Errorf("removing %s: %v\n%s", name, err, out)
		}
	})
	if out, err := exec.Command("docker", args...).CombinedOutput(); err != nil {
		t.Fatalf("docker run %s: %v\n%s", image, err, out)
	}
}

// waitHTTP polls url until it answers 200, for at most a minute.
func waitHTTP(t *testing.T, what, url, container string) {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(time.Minute)
	var last string
	for {
		resp, err := c.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, b)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the %s container's %s: %s\n%s", what, url, last, logs("agentbot-imagetest-"+container))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func logs(name string) string {
	if !strings.HasPrefix(name, "agentbot-imagetest-") {
		name = "agentbot-imagetest-" + name
	}
	out, _ := exec.Command("docker", "logs", "--tail", "200", name).CombinedOutput()
	return string(out)
}

// removeSandboxes removes the sandbox containers the worker container
// made during the test (the session outlives the test).
func removeSandboxes(t *testing.T, since time.Time) {
	out, err := exec.Command("docker", "ps", "--all", "--no-trunc",
		"--filter", "label="+dockersandbox.LabelSandbox,
		"--filter", "label="+dockersandbox.LabelImage+"="+testenv.TestImage(),
		"--format", "{{.ID}} {{.CreatedAt}}").Output()
	if err != nil {
		t.Errorf("listing sandboxes: %v", err)
		return
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		id, created, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		// "2026-12-03 13:40:01 +0000 UTC"
		at, err := time.Parse("2006-01-02 15:04:05 -0700 MST", created)
		if err != nil || at.Before(since.Add(-time.Second)) {
			continue
		}
		if out, err := exec.Command("docker", "rm", "--force", "--volumes", id).CombinedOutput(); err != nil {
			t.Errorf("removing sandbox %.12s: %v\n%s", id, err, bytes.TrimSpace(out))
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func randomID() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}
