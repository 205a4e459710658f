package store

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentbot/agentbot/internal/testenv"
)

// callBound is how long a call against a Redis that is down or mute may
// take in these tests: OpTimeout (500ms) plus generous slack.
const callBound = 2 * time.Second

func TestRedisCache(t *testing.T) {
	srv := testenv.StartRedis(context.Background(), t)
	testCache(t, func(t *testing.T) cache {
		// Every subtest gets its own prefix: its own empty cache.
		c, err := NewRedisCache(srv.URL(), RedisOptions{Prefix: "test:" + t.Name() + ":"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	})
}

// TestRedisCacheKeys checks what lands in Redis, as another process (or an
// operator with redis-cli) sees it.
func TestRedisCacheKeys(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(ctx, t)
	raw := rawClient(t, srv.URL())
	entry := ThreadEntry{WorkflowID: "agent/slack:T1:C1:1", Title: "fix the build", Backend: "docker", Requester: "U123"}

	tests := []struct {
		name   string
		prefix string
		key    string // expected Redis key
		ttl    time.Duration
		write  func(c *RedisCache) error
		value  map[string]any // expected JSON value; nil for an event key
	}{
		{
			name: "threadDefaultPrefix", key: "agentbot:thread:slack:T1:C1:1", ttl: ThreadTTL,
			write: func(c *RedisCache) error { return c.PutThread(ctx, "slack:T1:C1:1", entry, ThreadTTL) },
			value: map[string]any{"workflow_id": entry.WorkflowID, "title": entry.Title, "backend": entry.Backend, "requester": entry.Requester},
		},
		{
			name: "negativeThread", prefix: "bot2:", key: "bot2:thread:term:alice", ttl: MissingTTL,
			write: func(c *RedisCache) error {
				return c.PutThread(ctx, "term:alice", ThreadEntry{Missing: true}, MissingTTL)
			},
			value: map[string]any{"missing": true},
		},
		{
			name: "event", prefix: "bot2:", key: "bot2:event:slack:Ev1", ttl: EventTTL,
			write: func(c *RedisCache) error { _, err := c.FirstSeen(ctx, "slack:Ev1", EventTTL); return err },
		},
		{
			name: "subSecondTTL", prefix: "bot3:", key: "bot3:event:slack:Ev1", ttl: 1500 * time.Millisecond,
			write: func(c *RedisCache) error { _, err := c.FirstSeen(ctx, "slack:Ev1", 1500*time.Millisecond); return err },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewRedisCache(srv.URL(), RedisOptions{Prefix: tt.prefix})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := tt.write(c); err != nil {
				t.Fatal(err)
			}
			pttl, err := raw.PTTL(ctx, tt.key).Result()
			if err != nil {
				t.Fatal(err)
			}
			// Redis reports -2 for no key and -1 for no TTL.
			if pttl <= 0 || pttl > tt.ttl || pttl < tt.ttl-time.Minute/2 {
				t.Errorf("PTTL %s = %v; want a little under %v", tt.key, pttl, tt.ttl)
			}
			if tt.value == nil {
				return
			}
			b, err := raw.Get(ctx, tt.key).Bytes()
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("value %q is not JSON: %v", b, err)
			}
			if len(got) != len(tt.value) {
				t.Errorf("value %s; want exactly the fields %v", b, tt.value)
			}
			for k, v := range tt.value {
				if got[k] != v {
					t.Errorf("value %s: %s = %v; want %v", b, k, got[k], v)
				}
			}
		})
	}
}

func TestRedisCacheUnreadableEntry(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(ctx, t)
	raw := rawClient(t, srv.URL())
	logs := &logRecorder{}
	c, err := NewRedisCache(srv.URL(), RedisOptions{Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	tests := []struct{ name, value string }{
		{"notJSON", "not json"},
		{"wrongShape", `["agent/x"]`},
		{"noWorkflowNotNegative", `{"title":"t"}`},
		{"negativeWithWorkflow", `{"workflow_id":"agent/x","missing":true}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := raw.Set(ctx, "agentbot:thread:k", tt.value, time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			before := logs.count(slog.LevelWarn)
			got, found, err := c.GetThread(ctx, "k")
			if err != nil || found {
				t.Fatalf("GetThread = %+v, %v, %v; want a miss", got, found, err)
			}
			if logs.count(slog.LevelWarn) != before+1 {
				t.Errorf("no warning logged for the unreadable entry")
			}
		})
	}
}

// TestRedisCacheDownAndBack stops Redis under a cache and restarts it: calls
// fail fast with ErrCacheUnavailable while it is down, the same cache works
// again once it is back, and each change is logged once.
func TestRedisCacheDownAndBack(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(ctx, t)
	logs := &logRecorder{}
	c, err := NewRedisCache(srv.URL(), RedisOptions{Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	entry := ThreadEntry{WorkflowID: "agent/k"}

	calls := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"FirstSeen", func(ctx context.Context) error { _, err := c.FirstSeen(ctx, "ev", time.Hour); return err }},
		{"GetThread", func(ctx context.Context) error { _, _, err := c.GetThread(ctx, "k"); return err }},
		{"PutThread", func(ctx context.Context) error { return c.PutThread(ctx, "k", entry, time.Hour) }},
		{"DeleteThread", func(ctx context.Context) error { return c.DeleteThread(ctx, "k") }},
		{"Ping", c.Ping},
	}

	checkUp := func(t *testing.T) {
		t.Helper()
		for _, call := range calls {
			if err := call.call(ctx); err != nil {
				t.Errorf("%s: %v", call.name, err)
			}
		}
	}
	checkDown := func(t *testing.T) {
		t.Helper()
		// Several rounds: the first finds dead pooled connections, later
		// ones dial anew.
		for round := range 3 {
			for _, call := range calls {
				start := time.Now()
				err := call.call(ctx)
				if d := time.Since(start); d > callBound {
					t.Errorf("round %d: %s took %v with Redis down; want under %v", round, call.name, d, callBound)
				}
				if !errors.Is(err, ErrCacheUnavailable) {
					t.Errorf("round %d: %s with Redis down: %v; want ErrCacheUnavailable", round, call.name, err)
				}
			}
		}
	}
	waitUp := func(t *testing.T) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			err := c.Ping(ctx)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the cache does not work 15s after Redis restarted: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	checkLogs := func(t *testing.T, warnings, notices int) {
		t.Helper()
		if got := logs.count(slog.LevelWarn); got != warnings {
			t.Errorf("%d warnings logged; want %d, one per time Redis went down:\n%s", got, warnings, logs)
		}
		if got := logs.count(slog.LevelInfo); got != notices {
			t.Errorf("%d notices logged; want %d, one per time Redis came back:\n%s", got, notices, logs)
		}
	}

	t.Run("Up", func(t *testing.T) {
		checkUp(t)
		checkLogs(t, 0, 0)
	})
	t.Run("Down", func(t *testing.T) {
		srv.Stop()
		checkDown(t)
		checkLogs(t, 1, 0)
	})
	t.Run("Back", func(t *testing.T) {
		if err := srv.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		waitUp(t)
		checkUp(t)
		checkLogs(t, 1, 1)
	})
	t.Run("DownAgain", func(t *testing.T) {
		srv.Stop()
		checkDown(t)
		checkLogs(t, 2, 1)
	})
	t.Run("BackAgain", func(t *testing.T) {
		if err := srv.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		waitUp(t)
		checkUp(t)
		checkLogs(t, 2, 2)
	})
	if !strings.Contains(logs.String(), srv.Addr()) {
		t.Errorf("the logs do not name Redis's address %s:\n%s", srv.Addr(), logs)
	}
}

// TestRedisCacheUnreachable covers a Redis that is not there from the start
// and one that accepts connections but never answers: calls end within
// OpTimeout, never with the caller's context errors.
func TestRedisCacheUnreachable(t *testing.T) {
	ctx := context.Background()
	// A port that refuses connections: listen, note it, close.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := l.Addr().String()
	l.Close()
	mute := muteServer(t)

	tests := []struct {
		name string
		addr string
		// callerDeadline: a caller's deadline shorter than OpTimeout ends
		// the call, and the error is the caller's (a refused dial may
		// fail first).
		callerDeadline bool
	}{
		{"refused", refused, false},
		{"mute", mute, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewRedisCache("redis://"+tt.addr, RedisOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for range 3 {
				start := time.Now()
				_, err := c.FirstSeen(ctx, "ev", time.Hour)
				if d := time.Since(start); d > callBound {
					t.Errorf("FirstSeen took %v; want under %v", d, callBound)
				}
				if !errors.Is(err, ErrCacheUnavailable) || errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("FirstSeen: %v; want ErrCacheUnavailable and not context.DeadlineExceeded", err)
				}
			}
			short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			start := time.Now()
			err = c.Ping(short)
			if d := time.Since(start); d > callBound {
				t.Errorf("Ping with a 50ms deadline took %v", d)
			}
			switch {
			case err == nil:
				t.Error("Ping with a 50ms deadline: no error")
			case tt.callerDeadline && (!errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrCacheUnavailable)):
				t.Errorf("Ping with a 50ms deadline: %v; want context.DeadlineExceeded, not ErrCacheUnavailable", err)
			}
		})
	}
}

func TestNewRedisCache(t *testing.T) {
	tests := []struct {
		name    string
		url     string
		opts    RedisOptions
		wantErr string // "" for success
	}{
		{name: "plain", url: "redis://127.0.0.1:6379/0"},
		{name: "noDB", url: "redis://localhost:6379"},
		{name: "tls", url: "rediss://user:pw@redis.example:6380/2"},
		{name: "options", url: "redis://127.0.0.1:6379/0", opts: RedisOptions{Prefix: "x:", DialTimeout: time.Second, OpTimeout: time.Second}},
		{name: "badScheme", url: "http://127.0.0.1:6379", wantErr: "scheme"},
		{name: "unixScheme", url: "unix:///run/redis.sock", wantErr: "scheme"},
		{name: "badDB", url: "redis://127.0.0.1:6379/zero", wantErr: "database"},
		{name: "unknownOption", url: "redis://127.0.0.1:6379/0?colour=blue", wantErr: "colour"},
		{name: "negativeTimeout", url: "redis://127.0.0.1:6379/0", opts: RedisOptions{OpTimeout: -time.Second}, wantErr: "negative"},
		{name: "unparsable", url: "redis://user:s3cret@127.0.0.1:6379/%zz", wantErr: "invalid URL escape"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewRedisCache(tt.url, tt.opts)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				c.Close()
				return
			}
			if err == nil {
				c.Close()
				t.Fatalf("no error; want one mentioning %q", tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not mention %q", err, tt.wantErr)
			}
		})
	}

	t.Run("passwordNeverInErrors", func(t *testing.T) {
		for _, u := range []string{
			"http://user:s3cret@127.0.0.1:6379",
			"redis://user:s3cret@127.0.0.1:6379/zero",
			"redis://user:s3cret@127.0.0.1:6379/%zz",
			"redis://user:s3cret@127.0.0.1:6379/0?colour=blue",
			"redis://user:s3cret@127.0.0.1:port/0",
		} {
			_, err := NewRedisCache(u, RedisOptions{})
			if err == nil || strings.Contains(err.Error(), "s3cret") {
				t.Errorf("NewRedisCache(%q): %v; want an error without the password", u, err)
			}
		}
		// Nor in call errors.
		c, err := NewRedisCache("redis://user:s3cret@"+closedAddr(t)+"/0", RedisOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.Ping(context.Background()); err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Ping: %v; want an error without the password", err)
		}
	})
}

func rawClient(t *testing.T, url string) *redis.Client {
	t.Helper()
	o, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// muteServer accepts connections and never answers, like a Redis stuck on
// a slow command or a network that drops replies.
func muteServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

// logRecorder is a slog.Handler that keeps the records.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logRecorder) WithGroup(string) slog.Handler            { return h }

func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

func (h *logRecorder) count(level slog.Level) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.recs {
		if r.Level == level {
			n++
		}
	}
	return n
}

func (h *logRecorder) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b strings.Builder
	for _, r := range h.recs {
		b.WriteString(r.Level.String() + " " + r.Message)
		r.Attrs(func(a slog.Attr) bool {
			b.WriteString(" " + a.String())
			return true
		})
		b.WriteString("\n")
	}
	return b.String()
}
