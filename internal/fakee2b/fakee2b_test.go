package fakee2b

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
)

const key = "e2b_fake_key"

func newServer(t *testing.T) *Server {
	t.Helper()
	dir := DefaultSpecsDir()
	if _, err := os.Stat(dir); err != nil {
		t.Logf("specs directory %s missing (set %s): running without validation", dir, SpecsDirEnv)
		dir = ""
	}
	s, err := New(Options{APIKey: key, SpecsDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func do(t *testing.T, method, url string, hdr map[string]string, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

func TestSpecViolationIsRefusedAndRecorded(t *testing.T) {
	s := newServer(t)
	if !s.Validating() {
		t.Skip("no specs")
	}
	// templateID is required by NewSandbox.
	code, body := do(t, "POST", s.URL+"/sandboxes", map[string]string{"X-API-Key": key, "Content-Type": "application/json"}, `{"timeout":10}`)
	if code != 500 || !strings.Contains(string(body), "violates the spec") {
		t.Fatalf("got %d %s", code, body)
	}
	if len(s.Failures()) != 1 {
		t.Fatalf("failures %q", s.Failures())
	}
}

func TestLifecycleExecFiles(t *testing.T) {
	s := newServer(t)
	h := map[string]string{"X-API-Key": key, "Content-Type": "application/json"}
	if code, _ := do(t, "POST", s.URL+"/sandboxes", map[string]string{"X-API-Key": "wrong", "Content-Type": "application/json"}, `{"templateID":"base"}`); code != 401 {
		t.Fatalf("wrong key: %d", code)
	}
	code, body := do(t, "POST", s.URL+"/sandboxes", h, `{"templateID":"base","timeout":60,"metadata":{"agentbot":"1"},"envVars":{"A":"1"}}`)
	if code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	var sb struct{ SandboxID, EnvdAccessToken string }
	json.Unmarshal(body, &sb)
	env := s.EnvdURL(sb.SandboxID)
	tok := map[string]string{"X-Access-Token": sb.EnvdAccessToken, "Content-Type": "application/octet-stream"}
	if code, body := do(t, "POST", env+"/files?path=d/f.txt&username=user", tok, "hello"); code != 200 {
		t.Fatalf("upload: %d %s", code, body)
	}
	if code, body := do(t, "GET", env+"/files?path=d/f.txt&username=user", tok, ""); code != 200 || string(body) != "hello" {
		t.Fatalf("download: %d %q", code, body)
	}
	if code, _ := do(t, "GET", env+"/files?path=missing&username=user", tok, ""); code != 404 {
		t.Fatalf("missing file: %d", code)
	}
	if code, _ := do(t, "GET", env+"/files?path=/etc/passwd&username=user", tok, ""); code != 400 {
		t.Fatalf("outside path: %d", code)
	}

	// Process.Start, by hand.
	msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/sh", "args": []string{"-c", "cat d/f.txt; echo err >&2; echo \"$A-$HOME\"; exit 3"}, "envs": map[string]string{"A": "x"}}, "stdin": false})
	frame := append([]byte{0, 0, 0, 0, 0}, msg...)
	binary.BigEndian.PutUint32(frame[1:], uint32(len(msg)))
	code, body = do(t, "POST", env+"/process.Process/Start", map[string]string{"X-Access-Token": sb.EnvdAccessToken,
		"Content-Type": "application/connect+json", "Connect-Protocol-Version": "1"}, string(frame))
	if code != 200 {
		t.Fatalf("start: %d %s", code, body)
	}
	var stdout, stderr bytes.Buffer
	var end map[string]any
	trailer := false
	for len(body) >= 5 {
		n := binary.BigEndian.Uint32(body[1:5])
		flags, payload := body[0], body[5:5+n]
		body = body[5+n:]
		if flags == 2 {
			trailer = true
			continue
		}
		var ev struct {
			Event map[string]map[string]any `json:"event"`
		}
		json.Unmarshal(payload, &ev)
		if d, ok := ev.Event["data"]; ok {
			for k, v := range d {
				b, _ := base64.StdEncoding.DecodeString(v.(string))
				map[string]*bytes.Buffer{"stdout": &stdout, "stderr": &stderr}[k].Write(b)
			}
		}
		if e, ok := ev.Event["end"]; ok {
			end = e
		}
	}
	if !trailer || stdout.String() != "hellox-\n" || stderr.String() != "err\n" || end["exitCode"] != float64(3) {
		t.Fatalf("stream: trailer %v, stdout %q, stderr %q, end %v", trailer, stdout.String(), stderr.String(), end)
	}

	// Pause, connect (resume), delete.
	id := sb.SandboxID
	if code, body := do(t, "POST", s.URL+"/sandboxes/"+id+"/pause", h, ""); code != 204 {
		t.Fatalf("pause: %d %s", code, body)
	}
	if code, _ := do(t, "POST", s.URL+"/sandboxes/"+id+"/pause", h, ""); code != 409 {
		t.Fatalf("pause again: %d", code)
	}
	if code, _ := do(t, "GET", env+"/files?path=d/f.txt&username=user", tok, ""); code != 502 {
		t.Fatalf("envd of a paused sandbox: %d", code)
	}
	if code, _ := do(t, "POST", s.URL+"/sandboxes/"+id+"/connect", h, `{"timeout":60}`); code != 201 {
		t.Fatalf("resume: %d", code)
	}
	if code, _ := do(t, "POST", s.URL+"/sandboxes/"+id+"/connect", h, `{"timeout":60}`); code != 200 {
		t.Fatalf("connect running: %d", code)
	}
	if code, body := do(t, "GET", s.URL+"/v2/sandboxes?metadata=agentbot%3D1", h, ""); code != 200 || !strings.Contains(string(body), id) {
		t.Fatalf("list: %d %s", code, body)
	}
	if code, _ := do(t, "DELETE", s.URL+"/sandboxes/"+id, h, ""); code != 204 {
		t.Fatalf("delete: %d", code)
	}
	if code, _ := do(t, "GET", s.URL+"/sandboxes/"+id, h, ""); code != 404 {
		t.Fatalf("get deleted: %d", code)
	}
	if s.Exists(id) {
		t.Error("deleted sandbox still exists")
	}
	for _, f := range s.Failures() {
		t.Error(f)
	}
}
