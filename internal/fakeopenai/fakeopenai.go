// Package fakeopenai is an OpenAI-compatible HTTP server for tests and
// offline demos. It speaks the real wire protocol of the two endpoints the
// agent uses: Chat Completions (POST /v1/chat/completions) and the Responses
// API (POST /v1/responses), also without the /v1 prefix, each streamed
// ("stream": true, server-sent events; see Streaming) or not. Errors use
// OpenAI's envelope: {"error":{"message","type","param","code"}}.
//
// It checks requests as the real API does (a model, a non-empty
// conversation, each tool result answering an earlier tool call, unique tool
// call IDs, well-formed tool definitions, strict-mode schemas in the
// Responses API, no unknown parameters) and answers 400
// invalid_request_error otherwise, so a client that drifts from the protocol
// fails its tests here rather than in production.
//
// Like a real model it may have a context window (Options.ContextTokens),
// past which it answers 400 context_length_exceeded. Tool calls get random
// IDs as OpenAI's do, or, with Options.SequentialIDs, call_1, call_2, ...
// from each server's start, as some servers number them.
//
// What the "model" says is up to a Script, which sees the conversation in a
// neutral form (Call) and returns a Reply: a text, tool calls, or an HTTP
// error. DirectiveScript is a deterministic script for end-to-end tests and
// demos: it runs the "sh:", "read:", "write:" and "sleep:" lines of the last
// user message as tool calls.
package fakeopenai

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// API names the endpoint a request went to.
type API string

// The endpoints the server answers.
const (
	// APIChat is POST /v1/chat/completions.
	APIChat API = "chat"
	// APIResponses is POST /v1/responses.
	APIResponses API = "responses"
)

// Options configures a Server. The zero value is a server that accepts any
// key and any model and answers with DirectiveScript.
type Options struct {
	// APIKey, when set, is required as "Authorization: Bearer <key>";
	// anything else is answered 401 invalid_api_key.
	APIKey string
	// Models, when set, lists the known models; any other model is
	// answered 404 model_not_found.
	Models []string
	// Script decides the answers. Nil means DirectiveScript().
	Script Script
	// Latency delays every answer, as a slow model would; a client that
	// gives up meanwhile gets no answer.
	Latency time.Duration
	// TLS serves HTTPS with a self-signed certificate (see Certificate and
	// Client) instead of plain HTTP.
	TLS bool
	// ContextTokens, when set, is the model's context window: a request
	// whose Call.Tokens (plus its max output tokens) exceed it is answered
	// 400 context_length_exceeded, in OpenAI's words for each API.
	ContextTokens int
	// SequentialIDs numbers the tool calls of the answers call_1, call_2,
	// ... from each server's start, instead of random IDs like OpenAI's.
	// Some servers do so, and any server started afresh then reuses the
	// IDs of the calls that a long conversation already holds: a client
	// must not rely on the endpoint's IDs being unique in a conversation.
	SequentialIDs bool
	// StreamChunk is how many characters (runes) of text, or of a tool
	// call's arguments, each delta of a streamed answer carries; 0 means
	// 4, about a token.
	StreamChunk int
	// StreamDelay is a pause before each event of a streamed answer after
	// the first, unless the reply's Streaming.Delay says otherwise.
	StreamDelay time.Duration
}

// RecordedRequest is a request the server received, as it was decoded.
type RecordedRequest struct {
	// API is the endpoint; empty for a request to an unknown path.
	API API
	// Method and Path are the HTTP method and URL path.
	Method, Path string
	// Header is the request's header, Authorization included.
	Header http.Header
	// Body is the raw request body.
	Body []byte
	// Call is the decoded conversation; zero when the body did not decode.
	Call Call
	// Status is the HTTP status the server answered with.
	Status int
}

// Server is a running fake. Its methods are safe for concurrent use.
type Server struct {
	opts   Options
	script Script
	srv    *httptest.Server
	calls  atomic.Int64 // tool calls answered, for SequentialIDs

	mu       sync.Mutex
	requests []RecordedRequest
}

// statusClientClosed is recorded for a request whose client went away
// before the answer, as nginx logs it.
const statusClientClosed = 499

// maxBody bounds a request body; a long conversation with tool outputs
// stays far below it.
const maxBody = 32 << 20

// New starts a server on 127.0.0.1 with opts. Close it when done.
func New(opts Options) *Server {
	s := &Server{opts: opts, script: opts.Script}
	if s.script == nil {
		s.script = DirectiveScript()
	}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serveHTTP))
	if opts.TLS {
		s.srv.StartTLS()
	} else {
		s.srv.Start()
	}
	return s
}

// URL returns the base URL of the API, ending in /v1 (no trailing slash), as
// a client's base URL setting expects it.
func (s *Server) URL() string { return s.srv.URL + "/v1" }

// Close shuts the server down, waiting for requests in flight.
func (s *Server) Close() { s.srv.Close() }

// Certificate returns the server's self-signed certificate when it serves
// TLS, else nil.
func (s *Server) Certificate() *x509.Certificate { return s.srv.Certificate() }

// Client returns an HTTP client that trusts the server's certificate.
func (s *Server) Client() *http.Client { return s.srv.Client() }

// Requests returns a copy of the requests received so far, oldest first.
func (s *Server) Requests() []RecordedRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// newID returns an ID with prefix and 24 random letters and digits, as
// OpenAI's look: unique across servers and processes.
func newID(prefix string) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, 24)
	for i := range b {
		b[i] = alphabet[rand.IntN(len(alphabet))]
	}
	return prefix + string(b)
}

// toolCallID returns the ID of the next tool call of an answer.
func (s *Server) toolCallID() string {
	n := s.calls.Add(1)
	if s.opts.SequentialIDs {
		return fmt.Sprintf("call_%d", n)
	}
	return newID("call_")
}

// exchange is one request being answered.
type exchange struct {
	w   http.ResponseWriter
	rec RecordedRequest
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	ex := &exchange{w: w, rec: RecordedRequest{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone()}}
	defer func() {
		s.mu.Lock()
		s.requests = append(s.requests, ex.rec)
		s.mu.Unlock()
	}()

	path := strings.TrimPrefix(r.URL.Path, "/v1")
	switch path {
	case "/chat/completions":
		ex.rec.API = APIChat
	case "/responses":
		ex.rec.API = APIResponses
	default:
		ex.fail(&HTTPError{Status: http.StatusNotFound, Type: typeInvalidRequest,
			Message: fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path)})
		return
	}
	if r.Method != http.MethodPost {
		ex.fail(&HTTPError{Status: http.StatusMethodNotAllowed, Type: typeInvalidRequest,
			Message: fmt.Sprintf("Invalid method for URL (%s %s)", r.Method, r.URL.Path)})
		return
	}
	if herr := s.authorize(r); herr != nil {
		ex.fail(herr)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		ex.fail(invalidRequest("", "", "Could not read the request body: %v", err))
		return
	}
	ex.rec.Body = body
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		ex.fail(invalidRequest("", "", "Invalid Content-Type header (%q): expected application/json.", r.Header.Get("Content-Type")))
		return
	}

	var (
		call Call
		herr *HTTPError
	)
	if ex.rec.API == APIChat {
		call, herr = decodeChat(body)
	} else {
		call, herr = decodeResponses(body)
	}
	if herr != nil {
		ex.fail(herr)
		return
	}
	ex.rec.Call = call
	if len(s.opts.Models) > 0 && !slices.Contains(s.opts.Models, call.Model) {
		ex.fail(&HTTPError{Status: http.StatusNotFound, Type: typeInvalidRequest, Code: "model_not_found",
			Message: fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", call.Model)})
		return
	}

	if herr := s.checkContext(call); herr != nil {
		ex.fail(herr)
		return
	}

	if err := sleepCtx(r.Context(), s.opts.Latency); err != nil {
		ex.rec.Status = statusClientClosed
		return
	}

	reply, err := s.script(r.Context(), call)
	if r.Context().Err() != nil {
		ex.rec.Status = statusClientClosed
		return
	}
	if err != nil {
		if errors.As(err, &herr) {
			ex.fail(herr)
		} else {
			ex.fail(&HTTPError{Status: http.StatusInternalServerError, Type: "server_error",
				Message: "The fake model's script failed: " + err.Error()})
		}
		return
	}
	if reply.Error != nil {
		ex.fail(reply.Error)
		return
	}
	if herr := checkReply(call, reply); herr != nil {
		ex.fail(herr)
		return
	}
	if call.Stream {
		s.stream(r.Context(), ex, call, reply, body)
		return
	}
	if ex.rec.API == APIChat {
		ex.send(s.chatCompletion(call, reply))
	} else {
		ex.send(s.response(call, reply, body))
	}
}

// checkContext refuses a call too long for Options.ContextTokens, with
// OpenAI's status, code and message for each API.
func (s *Server) checkContext(call Call) *HTTPError {
	window := s.opts.ContextTokens
	if window <= 0 {
		return nil
	}
	in, out := call.Tokens(), int(call.MaxOutputTokens)
	if in+out <= window {
		return nil
	}
	e := &HTTPError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Code: "context_length_exceeded"}
	switch {
	case call.API == APIResponses:
		e.Param = "input"
		e.Message = "Your input exceeds the context window of this model. Please adjust your input and try again."
	case out > 0:
		e.Param = "messages"
		e.Message = fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.", window, in+out, in, out)
	default:
		e.Param = "messages"
		e.Message = fmt.Sprintf("This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages.", window, in)
	}
	return e
}

// authorize checks the bearer token as OpenAI does.
func (s *Server) authorize(r *http.Request) *HTTPError {
	if s.opts.APIKey == "" {
		return nil
	}
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return &HTTPError{Status: http.StatusUnauthorized, Type: typeInvalidRequest,
			Message: "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."}
	}
	key, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok || key != s.opts.APIKey {
		return &HTTPError{Status: http.StatusUnauthorized, Type: typeInvalidRequest, Code: "invalid_api_key",
			Message: fmt.Sprintf("Incorrect API key provided: %s. You can find your API key at https://platform.openai.com/account/api-keys.", maskKey(key))}
	}
	return nil
}

// maskKey shows a key the way OpenAI's 401 message does: its ends only.
func maskKey(key string) string {
	if len(key) <= 8 {
		return strings.Repeat("*", len(key))
	}
	return key[:3] + strings.Repeat("*", len(key)-7) + key[len(key)-4:]
}

// checkReply refuses a reply that the real model could not give: calls of
// tools the request does not offer.
func checkReply(call Call, reply Reply) *HTTPError {
	for _, tc := range reply.ToolCalls {
		if _, err := tc.marshalArguments(); err != nil {
			return &HTTPError{Status: http.StatusInternalServerError, Type: "server_error",
				Message: fmt.Sprintf("The fake model's script gave arguments for tool %q that do not marshal: %v", tc.Name, err)}
		}
		if !slices.Contains(call.Tools, tc.Name) {
			return &HTTPError{Status: http.StatusInternalServerError, Type: "server_error",
				Message: fmt.Sprintf("The fake model's script called tool %q, which the request does not offer (offered: %s).", tc.Name, strings.Join(call.Tools, ", "))}
		}
	}
	return nil
}

func (ex *exchange) send(v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		ex.fail(&HTTPError{Status: http.StatusInternalServerError, Type: "server_error", Message: "encoding the answer: " + err.Error()})
		return
	}
	ex.rec.Status = http.StatusOK
	ex.w.Header().Set("Content-Type", "application/json")
	_, _ = ex.w.Write(buf.Bytes())
}

func (ex *exchange) fail(e *HTTPError) {
	status := e.Status
	if status == 0 {
		status = http.StatusInternalServerError
	}
	ex.rec.Status = status
	body, _ := json.Marshal(map[string]any{"error": e.envelope()})
	ex.w.Header().Set("Content-Type", "application/json")
	if e.RetryAfter != "" {
		ex.w.Header().Set("Retry-After", e.RetryAfter)
	}
	ex.w.WriteHeader(status)
	_, _ = ex.w.Write(append(body, '\n'))
}

// countWords is the default token count: one token per word.
func countWords(s string) int64 { return int64(len(strings.Fields(s))) }

// usage returns the reply's usage or, by default, word counts.
func usage(call Call, reply Reply) (in, out int64) {
	if reply.Usage != nil {
		return reply.Usage.InputTokens, reply.Usage.OutputTokens
	}
	for _, m := range call.Messages {
		in += countWords(m.Content)
		for _, tc := range m.ToolCalls {
			in += countWords(tc.Arguments)
		}
	}
	out = countWords(reply.Text)
	for _, tc := range reply.ToolCalls {
		args, _ := tc.marshalArguments()
		out += countWords(string(args))
	}
	return in, out
}

// sleepCtx waits d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
