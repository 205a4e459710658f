package debugserver

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

// TestServeHeapProfile: the endpoint serves a heap profile in pprof's
// format and the goroutine list, and is gone after stop.
func TestServeHeapProfile(t *testing.T) {
	addr, stop, err := Serve("127.0.0.1:0", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) (int, []byte, error) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, body, err
	}
	code, body, err := get("/debug/pprof/heap")
	if err != nil || code != http.StatusOK {
		t.Fatalf("heap profile: %d %v", code, err)
	}
	// A pprof profile is gzip-compressed protobuf.
	if len(body) < 2 || body[0] != 0x1f || body[1] != 0x8b {
		t.Fatalf("heap profile is not gzip: % x", body[:min(len(body), 8)])
	}
	code, body, err = get("/debug/pprof/goroutine?debug=1")
	if err != nil || code != http.StatusOK || !strings.Contains(string(body), "goroutine profile:") {
		t.Fatalf("goroutines: %d %v %.80q", code, err, body)
	}
	stop()
	if _, _, err := get("/debug/pprof/heap"); err == nil {
		t.Fatal("still served after stop")
	}
}
