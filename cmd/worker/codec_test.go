package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/internal/payloadcodec"
	"github.com/agentbot/agentbot/internal/secretenv/secretenvtest"
	"github.com/agentbot/agentbot/internal/testenv"
)

// TestPayloadEncryption (issue 16, item 16): the real worker with
// AGENTBOT_PAYLOAD_KEYS runs a session end to end for a client holding the
// same key; the session's history, read without the key, holds neither the
// message nor the command's output nor the memo in clear, and the codec
// server the worker serves on /codec decodes them for the Web UI.
func TestPayloadEncryption(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv := startTemporal(t)
	raw := make([]byte, 32)
	rand.Read(raw)
	keys := "k1=" + base64.StdEncoding.EncodeToString(raw)
	codec, err := payloadcodec.Parse(keys)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := ln.Addr().String()
	ln.Close()
	state := t.TempDir()
	worker := secretenvtest.Start(t, secretenvtest.Build(t, "."), []string{
		"HOME=" + state, "PATH=" + os.Getenv("PATH"), "OPENAI_BASE_URL=fake", "TEMPORAL_ADDRESS=" + srv.FrontendHostPort(),
		"AGENTBOT_STATE_DIR=" + state, "AGENTBOT_BACKENDS=local", "AGENTBOT_HTTP_ADDR=" + httpAddr,
		"AGENTBOT_PAYLOAD_KEYS=" + keys,
	})
	worker.WaitOutput(t, "worker started", time.Minute)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker output:\n%s", worker.Output())
		}
	})

	withKey, err := client.Dial(client.Options{HostPort: srv.FrontendHostPort(), Logger: testenv.Logger(),
		DataConverter: codec.DataConverter(), FailureConverter: codec.FailureConverter()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(withKey.Close)
	cl := agentflow.NewClient(withKey)
	cl.DataConverter = codec.DataConverter()
	const thread = "term:encrypted"
	res, err := cl.SendAndWait(ctx, agentflow.AgentInput{ThreadKey: thread, Backend: "local", Requester: "alice"},
		agentflow.MessageRequest{ID: "m1", Text: "sh: echo plain-marker-QZ | tr QZ 42", User: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Result == nil || !strings.Contains(res.Result.Answer, "plain-marker-42") {
		t.Fatalf("the turn: %+v", res.Result)
	}
	entries, err := cl.List(ctx, thread)
	if err != nil || len(entries) == 0 || entries[0].ThreadKey != thread {
		t.Fatalf("List with the key (memos decrypted): %+v %v", entries, err)
	}

	// The history as Temporal stores it, read without the key.
	plain, err := client.Dial(client.Options{HostPort: srv.FrontendHostPort(), Logger: testenv.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(plain.Close)
	var history bytes.Buffer
	var sample *commonpb.Payload
	it := plain.GetWorkflowHistory(ctx, agentflow.AgentWorkflowID(thread), "", false, 0)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := protojson.Marshal(ev)
		history.Write(b)
		if a := ev.GetWorkflowExecutionSignaledEventAttributes(); a != nil && sample == nil {
			sample = a.GetInput().GetPayloads()[0]
		}
	}
	for _, clear := range []string{"plain-marker", "echo", "alice", `"thread_key"`} {
		if strings.Contains(history.String(), clear) {
			t.Errorf("the stored history holds %q in clear", clear)
		}
	}
	if !strings.Contains(history.String(), base64.StdEncoding.EncodeToString([]byte(payloadcodec.Encoding))) {
		t.Error("the history holds no payload marked encrypted")
	}
	if sample == nil {
		t.Fatal("no signal in the history")
	}

	// The codec server decodes the message for the Web UI.
	body, _ := protojson.Marshal(&commonpb.Payloads{Payloads: []*commonpb.Payload{sample}})
	resp, err := http.Post("http://"+httpAddr+"/codec/decode", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var dec commonpb.Payloads
	if resp.StatusCode != http.StatusOK || protojson.Unmarshal(out, &dec) != nil || len(dec.Payloads) != 1 ||
		!strings.Contains(string(dec.Payloads[0].Data), "plain-marker-QZ") {
		t.Fatalf("codec server: %d %s", resp.StatusCode, out)
	}
}
