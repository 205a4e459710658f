package payloadcodec

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

func key(b byte) string { return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, 32)) }

func payload(t *testing.T, v any) *commonpb.Payload {
	t.Helper()
	p, err := converter.GetDefaultDataConverter().ToPayload(v)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRoundTripAndRotation: what one key encrypts decrypts to the same
// payload, holds no plaintext, and still decrypts after the key is rotated
// (a new key first, the old one kept); without the old key it refuses
// clearly; an altered payload or a key ID changed is refused; plain
// payloads pass.
func TestRoundTripAndRotation(t *testing.T) {
	old, err := Parse("k1=" + key(1))
	if err != nil {
		t.Fatal(err)
	}
	in := payload(t, map[string]string{"text": "the secret plan"})
	enc, err := old.Encode([]*commonpb.Payload{in})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(enc[0].Data, []byte("secret plan")) || string(enc[0].Metadata[converter.MetadataEncoding]) != Encoding ||
		string(enc[0].Metadata[MetaKeyID]) != "k1" {
		t.Fatalf("encoded %v", enc[0])
	}
	rotated, err := Parse("k2=" + key(2) + ", k1=" + key(1))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*Codec{old, rotated} {
		dec, err := c.Decode(enc)
		if err != nil || !proto.Equal(dec[0], in) {
			t.Fatalf("decode with %v: %v %v", c.KeyIDs(), dec, err)
		}
	}
	enc2, _ := rotated.Encode([]*commonpb.Payload{in})
	if string(enc2[0].Metadata[MetaKeyID]) != "k2" {
		t.Fatalf("rotated codec encrypts with %s", enc2[0].Metadata[MetaKeyID])
	}
	onlyNew, _ := Parse("k2=" + key(2))
	if _, err := onlyNew.Decode(enc); err == nil || !strings.Contains(err.Error(), `key "k1"`) {
		t.Fatalf("decode without the old key: %v", err)
	}
	// Altered data; a payload relabelled with another key's ID.
	bad := proto.Clone(enc[0]).(*commonpb.Payload)
	bad.Data[len(bad.Data)-1] ^= 1
	if _, err := old.Decode([]*commonpb.Payload{bad}); err == nil {
		t.Fatal("an altered payload decrypted")
	}
	relabel := proto.Clone(enc2[0]).(*commonpb.Payload)
	relabel.Metadata[MetaKeyID] = []byte("k1")
	sameKey, _ := Parse("k1=" + key(2))
	if _, err := sameKey.Decode([]*commonpb.Payload{relabel}); err == nil {
		t.Fatal("a payload relabelled with another key ID decrypted")
	}
	// Written before the codec was on.
	if dec, err := old.Decode([]*commonpb.Payload{in}); err != nil || !proto.Equal(dec[0], in) {
		t.Fatalf("plain payload: %v %v", dec, err)
	}
}

func TestParseErrors(t *testing.T) {
	secret := key(7)
	for _, spec := range []string{"", " , ", "k1", "=" + secret, "k 1=" + secret, "k1=" + secret + ",k1=" + secret,
		"k1=" + base64.StdEncoding.EncodeToString([]byte("short")), "k1=%%%"} {
		_, err := Parse(spec)
		if err == nil {
			t.Errorf("Parse(%q) succeeded", spec)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("the error quotes the key: %v", err)
		}
	}
	for _, spec := range []string{"k1=" + secret, "a.b_c-1=" + strings.TrimRight(base64.URLEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32)), "=")} {
		if _, err := Parse(spec); err != nil {
			t.Errorf("Parse(%q): %v", spec, err)
		}
	}
}

// TestHandler: the codec server decodes what the codec encoded, over the
// Web UI's protocol, and answers CORS for the allowed origin only.
func TestHandler(t *testing.T) {
	c, _ := Parse("k1=" + key(1))
	srv := httptest.NewServer(http.StripPrefix("/codec", c.Handler([]string{"http://ui.example"})))
	t.Cleanup(srv.Close)
	in := payload(t, "hello")
	enc, _ := c.Encode([]*commonpb.Payload{in})
	body, _ := protojson.Marshal(&commonpb.Payloads{Payloads: enc})
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/codec/decode", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", "http://ui.example")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Access-Control-Allow-Origin") != "http://ui.example" {
		t.Fatalf("decode: %d %q %s", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"), out)
	}
	var got commonpb.Payloads
	if err := protojson.Unmarshal(out, &got); err != nil || len(got.Payloads) != 1 || !proto.Equal(got.Payloads[0], in) {
		var raw any
		json.Unmarshal(out, &raw)
		t.Fatalf("decoded %v %v", raw, err)
	}
	req, _ = http.NewRequest(http.MethodOptions, srv.URL+"/codec/decode", nil)
	req.Header.Set("Origin", "http://elsewhere.example")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatal("CORS allowed for an origin not listed")
	}
}
