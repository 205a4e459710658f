package fakedaytona

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func newServer(t *testing.T) *Server {
	t.Helper()
	s, err := New(Options{StateDelay: 100 * time.Millisecond, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if !s.Validating() {
		t.Fatalf("specs not found: set %s", SpecsDirEnv)
	}
	return s
}

func call(t *testing.T, s *Server, method, url, ctype string, body []byte) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+s.Key())
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func TestLifecycleAndExecute(t *testing.T) {
	s := newServer(t)
	code, body := call(t, s, "POST", s.APIURL()+"/sandbox", "application/json", []byte(`{"snapshot":"x","env":{"A":"1"},"labels":{"agentbot":"1"}}`))
	if code != 200 {
		t.Fatalf("create: %d %s", code, body)
	}
	var sb struct{ ID, State, ToolboxProxyURL string }
	json.Unmarshal(body, &sb)
	if sb.State != "creating" {
		t.Fatalf("state %q right after create", sb.State)
	}
	// The toolbox refuses until started.
	tb := s.URL + "/toolbox/" + sb.ID
	if code, _ := call(t, s, "POST", tb+"/process/execute", "application/json", []byte(`{"command":"true"}`)); code != http.StatusConflict {
		t.Fatalf("execute while creating: %d", code)
	}
	time.Sleep(150 * time.Millisecond)
	_, body = call(t, s, "GET", s.APIURL()+"/sandbox/"+sb.ID, "", nil)
	json.Unmarshal(body, &sb)
	if sb.State != "started" {
		t.Fatalf("state %q after the delay", sb.State)
	}
	code, body = call(t, s, "POST", tb+"/process/execute", "application/json", []byte(`{"command":"echo $FOO; pwd","envs":{"FOO":"bar"},"timeout":5}`))
	if code != 200 || !strings.HasPrefix(string(body), `{"exitCode":0,"result":"bar\n`) {
		t.Fatalf("execute: %d %s", code, body)
	}
	code, body = call(t, s, "POST", tb+"/process/execute", "application/json", []byte(`{"command":"sleep 5","timeout":1}`))
	if code != 200 || !strings.Contains(string(body), `"exitCode":-1`) {
		t.Fatalf("execute past its timeout: %d %s", code, body)
	}
	if errs := s.Errors(); len(errs) > 0 {
		t.Fatalf("validation: %v", errs)
	}
}

func TestInvalidRequestIsRecorded(t *testing.T) {
	s := newServer(t)
	// CreateSandbox.cpu is an integer-ish number: a string is invalid.
	code, _ := call(t, s, "POST", s.APIURL()+"/sandbox", "application/json", []byte(`{"cpu":"many"}`))
	if code != 500 || len(s.Errors()) != 1 {
		t.Fatalf("got %d, errors %v", code, s.Errors())
	}
}

func TestUnauthorized(t *testing.T) {
	s := newServer(t)
	resp, err := http.Get(s.APIURL() + "/sandbox")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("got %d", resp.StatusCode)
	}
}

func TestInvalidToolboxRequestIsRecorded(t *testing.T) {
	s := newServer(t)
	_, body := call(t, s, "POST", s.APIURL()+"/sandbox", "application/json", []byte(`{}`))
	var sb struct{ ID string }
	json.Unmarshal(body, &sb)
	time.Sleep(150 * time.Millisecond)
	// ExecuteRequest.command is required.
	code, _ := call(t, s, "POST", s.URL+"/toolbox/"+sb.ID+"/process/execute", "application/json", []byte(`{"cwd":"/"}`))
	if code != 500 || len(s.Errors()) != 1 || !strings.Contains(s.Errors()[0], "request invalid") {
		t.Fatalf("got %d, errors %v", code, s.Errors())
	}
}

func TestRefuseAndDrop(t *testing.T) {
	s := newServer(t)
	_, body := call(t, s, "POST", s.APIURL()+"/sandbox", "application/json", []byte(`{}`))
	var sb struct{ ID string }
	json.Unmarshal(body, &sb)
	time.Sleep(150 * time.Millisecond)
	exec := s.URL + "/toolbox/" + sb.ID + "/process/execute"
	cmd := []byte(`{"command":"echo run >>runs.log; grep -c run runs.log","timeout":5}`)

	s.RefuseNext("POST", "/process/execute", http.StatusServiceUnavailable)
	if code, _ := call(t, s, "POST", exec, "application/json", cmd); code != http.StatusServiceUnavailable {
		t.Fatalf("refused execute: %d", code)
	}
	s.DropNext("POST", "/process/execute")
	req, _ := http.NewRequest("POST", exec, bytes.NewReader(cmd))
	req.Header.Set("Authorization", "Bearer "+s.Key())
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("dropped execute answered %d", resp.StatusCode)
	}
	// The refused one did not run, the dropped one did.
	if code, body := call(t, s, "POST", exec, "application/json", cmd); code != 200 || !strings.Contains(string(body), `"result":"2\n"`) {
		t.Fatalf("execute after the faults: %d %s; want the second run", code, body)
	}
	if errs := s.Errors(); len(errs) > 0 {
		t.Fatalf("validation: %v", errs)
	}
}
