// Package payloadcodec encrypts what agentbot stores in Temporal: every
// payload of every workflow history (inputs, results, signals, updates,
// queries, memos) and the messages of failures, with AES-256-GCM under a
// key from the environment. Temporal and anyone reading its database or
// its Web UI then see ciphertext; agentbot's processes, which hold the
// key, see what they wrote.
//
// Keys are named, for rotation:
//
//	AGENTBOT_PAYLOAD_KEYS=k2=<base64 32 bytes>,k1=<base64 32 bytes>
//
// The first key encrypts; every listed key decrypts, each payload naming
// its key in its metadata. To rotate, put a new key first and keep the old
// ones until no running session's history holds payloads under them
// (their retention has passed). A payload that is not encrypted (written
// before the codec was turned on) is read as it is.
//
// The Temporal Web UI can show decrypted payloads through a codec server:
// Handler serves the protocol it speaks (POST <endpoint>/encode and
// <endpoint>/decode); the worker mounts it on its HTTP server at /codec
// when the codec is on. Anyone who can reach that endpoint can decrypt:
// keep it inside the cluster (a port-forward, or an authenticating proxy).
package payloadcodec

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/proto"
)

// Metadata of an encrypted payload.
const (
	// Encoding is the payload's "encoding" when it is encrypted.
	Encoding = "binary/encrypted"
	// MetaKeyID names the key that encrypted it.
	MetaKeyID = "encryption-key-id"
)

// Codec is a converter.PayloadCodec encrypting with AES-256-GCM.
type Codec struct {
	active string
	keys   map[string]cipher.AEAD
	order  []string
}

var _ converter.PayloadCodec = (*Codec)(nil)

// Parse reads keys as AGENTBOT_PAYLOAD_KEYS holds them: comma-separated
// id=key pairs, each key 32 bytes in base64 (standard or URL alphabet,
// padded or not), the first the one that encrypts. An error never quotes
// a key.
func Parse(spec string) (*Codec, error) {
	c := &Codec{keys: map[string]cipher.AEAD{}}
	for i, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		id, enc, ok := strings.Cut(part, "=")
		id = strings.TrimSpace(id)
		if !ok || !validID(id) {
			return nil, fmt.Errorf("AGENTBOT_PAYLOAD_KEYS: entry %d is not id=<base64 key> with an id of letters, digits, '.', '_' or '-'", i+1)
		}
		if _, dup := c.keys[id]; dup {
			return nil, fmt.Errorf("AGENTBOT_PAYLOAD_KEYS: key id %q is listed twice", id)
		}
		key, err := decodeKey(strings.TrimSpace(enc))
		if err != nil || len(key) != 32 {
			return nil, fmt.Errorf("AGENTBOT_PAYLOAD_KEYS: key %q is not 32 bytes in base64 (make one with: head -c 32 /dev/urandom | base64)", id)
		}
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, fmt.Errorf("AGENTBOT_PAYLOAD_KEYS: key %q: %w", id, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("AGENTBOT_PAYLOAD_KEYS: key %q: %w", id, err)
		}
		c.keys[id] = aead
		c.order = append(c.order, id)
		if c.active == "" {
			c.active = id
		}
	}
	if c.active == "" {
		return nil, errors.New("AGENTBOT_PAYLOAD_KEYS holds no key")
	}
	return c, nil
}

// KeyIDs are the key IDs, the encrypting one first.
func (c *Codec) KeyIDs() []string { return slices.Clone(c.order) }

func decodeKey(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, errors.New("not base64")
}

func validID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, r := range id {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// Encode encrypts each payload, whole (its metadata too), under the
// active key; the key ID is bound to the ciphertext.
func (c *Codec) Encode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	aead := c.keys[c.active]
	for i, p := range payloads {
		plain, err := proto.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("payloadcodec: %w", err)
		}
		nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
		if _, err := rand.Read(nonce); err != nil {
			return nil, fmt.Errorf("payloadcodec: %w", err)
		}
		out[i] = &commonpb.Payload{
			Metadata: map[string][]byte{converter.MetadataEncoding: []byte(Encoding), MetaKeyID: []byte(c.active)},
			Data:     aead.Seal(nonce, nonce, plain, []byte(c.active)),
		}
	}
	return out, nil
}

// Decode decrypts the encrypted payloads and passes the others on.
func (c *Codec) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		if string(p.GetMetadata()[converter.MetadataEncoding]) != Encoding {
			out[i] = p
			continue
		}
		id := string(p.GetMetadata()[MetaKeyID])
		aead, ok := c.keys[id]
		if !ok {
			return nil, fmt.Errorf("payloadcodec: a payload is encrypted with key %q, which AGENTBOT_PAYLOAD_KEYS does not hold (it has %s)", id, strings.Join(c.order, ", "))
		}
		data := p.GetData()
		if len(data) < aead.NonceSize() {
			return nil, errors.New("payloadcodec: an encrypted payload is too short")
		}
		plain, err := aead.Open(nil, data[:aead.NonceSize()], data[aead.NonceSize():], []byte(id))
		if err != nil {
			return nil, fmt.Errorf("payloadcodec: a payload under key %q does not decrypt: altered, or another key of that name", id)
		}
		var orig commonpb.Payload
		if err := proto.Unmarshal(plain, &orig); err != nil {
			return nil, fmt.Errorf("payloadcodec: %w", err)
		}
		out[i] = &orig
	}
	return out, nil
}

// DataConverter is Temporal's default data converter with c after it.
func (c *Codec) DataConverter() converter.DataConverter {
	return converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), c)
}

// FailureConverter encrypts the messages and stack traces of failures too
// (an error's text can hold what a payload would).
func (c *Codec) FailureConverter() converter.FailureConverter {
	return temporal.NewDefaultFailureConverter(temporal.DefaultFailureConverterOptions{
		DataConverter: c.DataConverter(), EncodeCommonAttributes: true,
	})
}

// Handler serves the codec server protocol of the Temporal Web UI and CLI
// (POST …/encode, POST …/decode, JSON payloads). origins, when not empty,
// are the Web UI origins allowed to call it from a browser (CORS).
func (c *Codec) Handler(origins []string) http.Handler {
	h := converter.NewPayloadCodecHTTPHandler(c)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get("Origin"); o != "" && slices.Contains(origins, o) {
			w.Header().Set("Access-Control-Allow-Origin", o)
			w.Header().Set("Access-Control-Allow-Credentials", "true")
			w.Header().Set("Access-Control-Allow-Headers", "Content-Type,X-Namespace,Authorization")
			w.Header().Set("Access-Control-Allow-Methods", "POST,OPTIONS")
			w.Header().Add("Vary", "Origin")
		}
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h.ServeHTTP(w, r)
	})
}
