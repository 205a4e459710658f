package store

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// DefaultRedisPrefix is the key prefix of a RedisCache given none.
const DefaultRedisPrefix = "agentbot:"

// Defaults of RedisOptions.
const (
	// DefaultRedisDialTimeout bounds one connection attempt.
	DefaultRedisDialTimeout = 2 * time.Second
	// DefaultRedisOpTimeout bounds one RedisCache call.
	DefaultRedisOpTimeout = 500 * time.Millisecond
)

// RedisOptions tune NewRedisCache. The zero value gives the defaults.
type RedisOptions struct {
	// Prefix starts every key the cache writes; "" means
	// DefaultRedisPrefix. Bots sharing one Redis database need different
	// prefixes.
	Prefix string
	// Logger receives one warning when Redis stops answering and one
	// notice when it answers again, never one per call; nil discards them.
	Logger *slog.Logger
	// DialTimeout bounds one connection attempt; 0 means
	// DefaultRedisDialTimeout. A dial that outlasts OpTimeout goes on in
	// the background, so the next call may find the connection ready.
	DialTimeout time.Duration
	// OpTimeout bounds each call, waiting for a connection included; 0
	// means DefaultRedisOpTimeout. A call's own ctx can only shorten it.
	OpTimeout time.Duration
	// Meter counts failed calls (agentbot_redis_errors_total); nil counts
	// nothing.
	Meter metric.Meter
}

// RedisCache is the thread cache and event de-duplication in Redis, shared
// by every bot process using the same Redis and Prefix. Keys are
// <prefix>thread:<thread key>, holding a ThreadEntry as JSON, and
// <prefix>event:<event ID>; every key has a TTL.
//
// When Redis is down or slow, every call fails within OpTimeout with an
// error matching ErrCacheUnavailable, and the same RedisCache works again
// once Redis is back: connections are re-dialled as needed, nothing needs
// re-creating. Its methods are safe for concurrent use. Close it when
// done.
type RedisCache struct {
	rdb       *redis.Client
	prefix    string
	addr      string // host:port, for logs; the URL may hold a password
	opTimeout time.Duration
	log       *slog.Logger

	errs      metric.Int64Counter
	down      atomic.Bool // the last call that reached a verdict failed
	closeOnce sync.Once
	closeErr  error
}

// NewRedisCache returns a RedisCache for the Redis at rawURL:
// redis://[[user]:password@]host[:port][/db] or rediss://... for TLS
// (go-redis's ParseURL; its query parameters, such as pool_size, apply,
// except the timeouts, which RedisOptions sets). It does not connect: the
// first call does, and Ping checks Redis at start-up. Errors never repeat
// the URL's password.
func NewRedisCache(rawURL string, opts RedisOptions) (*RedisCache, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// A url.Error quotes the whole URL, password included.
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return nil, fmt.Errorf("store: redis URL: %w", err)
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, fmt.Errorf("store: redis URL %s: the scheme must be redis or rediss", u.Redacted())
	}
	if opts.DialTimeout < 0 || opts.OpTimeout < 0 {
		return nil, fmt.Errorf("store: redis options: negative timeout (dial %v, op %v)", opts.DialTimeout, opts.OpTimeout)
	}
	ro, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("store: redis URL %s: %w", u.Redacted(), err)
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultRedisPrefix
	}
	if opts.DialTimeout == 0 {
		opts.DialTimeout = DefaultRedisDialTimeout
	}
	if opts.OpTimeout == 0 {
		opts.OpTimeout = DefaultRedisOpTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Meter == nil {
		opts.Meter = noop.NewMeterProvider().Meter("")
	}
	// Errors of the meter are for invalid names, fixed here; it then
	// hands back a working no-op counter.
	errs, _ := opts.Meter.Int64Counter("agentbot_redis_errors",
		metric.WithDescription("Calls to Redis (thread cache, event de-duplication) that failed or timed out; the bot carries on from Temporal."))
	// Zero until the first failure, rather than no series.
	errs.Add(context.Background(), 0)
	ro.DialTimeout = opts.DialTimeout
	ro.ReadTimeout = opts.OpTimeout
	ro.WriteTimeout = opts.OpTimeout
	ro.PoolTimeout = opts.OpTimeout
	ro.ContextTimeoutEnabled = true
	// One dial per attempt: against a Redis that is down, retrying the dial
	// only turns "connection refused" into a timeout.
	ro.DialerRetries = 1
	return &RedisCache{
		rdb:       redis.NewClient(ro),
		prefix:    opts.Prefix,
		addr:      ro.Addr,
		opTimeout: opts.OpTimeout,
		log:       opts.Logger,
		errs:      errs,
	}, nil
}

// firstSeenScript is SET NX PX made safe to repeat: go-redis retries a
// command whose reply was lost, and a plain SET NX would then report the
// event as seen, by itself, and the event would be dropped. The value is a
// token of this call, so the retry recognises its own write.
var firstSeenScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
	return 1
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
	return 1
end
return 0
`)

// FirstSeen reports whether eventID is new: true the first time it is
// seen within ttl of its first sighting (by any process sharing the Redis),
// false after; a sighting does not extend ttl. ttl is kept to the
// millisecond.
func (c *RedisCache) FirstSeen(ctx context.Context, eventID string, ttl time.Duration) (bool, error) {
	if err := checkEvent(ctx, eventID, ttl); err != nil {
		return false, err
	}
	token := rand.Text() // not a secret: it only tells this call's write apart
	var first bool
	err := c.do(ctx, func(ctx context.Context) error {
		n, err := firstSeenScript.Run(ctx, c.rdb, []string{c.prefix + "event:" + eventID}, token, ttl.Milliseconds()).Int()
		first = n == 1
		return err
	})
	if err != nil {
		return false, fmt.Errorf("store: first seen %q: %w", eventID, err)
	}
	return first, nil
}

// GetThread returns the cached entry of threadKey; found is false on a miss
// (never cached, expired, or an entry this version cannot read, which is
// logged). A negative entry is found with Missing set.
func (c *RedisCache) GetThread(ctx context.Context, threadKey string) (ThreadEntry, bool, error) {
	if err := checkCall(ctx, "get thread", "thread key", threadKey); err != nil {
		return ThreadEntry{}, false, err
	}
	var raw []byte
	err := c.do(ctx, func(ctx context.Context) error {
		var err error
		raw, err = c.rdb.Get(ctx, c.threadKey(threadKey)).Bytes()
		if errors.Is(err, redis.Nil) {
			raw, err = nil, nil
		}
		return err
	})
	if err != nil {
		return ThreadEntry{}, false, fmt.Errorf("store: get thread %q: %w", threadKey, err)
	}
	if raw == nil {
		return ThreadEntry{}, false, nil
	}
	var e ThreadEntry
	if err := json.Unmarshal(raw, &e); err != nil || e.Missing == (e.WorkflowID != "") {
		// A cache miss costs one lookup in the session manager, and the
		// next PutThread replaces the entry.
		c.log.Warn("unreadable thread cache entry ignored", "thread", threadKey, "addr", c.addr)
		return ThreadEntry{}, false, nil
	}
	return e, true, nil
}

// PutThread caches e for threadKey for ttl (kept to the millisecond),
// replacing any entry. e must name a workflow or be negative (Missing),
// not both.
func (c *RedisCache) PutThread(ctx context.Context, threadKey string, e ThreadEntry, ttl time.Duration) error {
	if err := checkPut(ctx, threadKey, e, ttl); err != nil {
		return err
	}
	raw, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("store: put thread %q: %w", threadKey, err)
	}
	err = c.do(ctx, func(ctx context.Context) error {
		return c.rdb.Set(ctx, c.threadKey(threadKey), raw, ttl).Err()
	})
	if err != nil {
		return fmt.Errorf("store: put thread %q: %w", threadKey, err)
	}
	return nil
}

// DeleteThread forgets the entry of threadKey; a missing one is no error.
func (c *RedisCache) DeleteThread(ctx context.Context, threadKey string) error {
	if err := checkCall(ctx, "delete thread", "thread key", threadKey); err != nil {
		return err
	}
	err := c.do(ctx, func(ctx context.Context) error {
		return c.rdb.Del(ctx, c.threadKey(threadKey)).Err()
	})
	if err != nil {
		return fmt.Errorf("store: delete thread %q: %w", threadKey, err)
	}
	return nil
}

// Settle keeps eventID seen for ttl from now (overwriting a shorter mark):
// FirstSeen claims an event for a short while, Settle makes the claim last
// once the event is handled for good.
func (c *RedisCache) Settle(ctx context.Context, eventID string, ttl time.Duration) error {
	if err := checkEvent(ctx, eventID, ttl); err != nil {
		return err
	}
	err := c.do(ctx, func(ctx context.Context) error {
		return c.rdb.Set(ctx, c.prefix+"event:"+eventID, settledValue, ttl).Err()
	})
	if err != nil {
		return fmt.Errorf("store: settle %q: %w", eventID, err)
	}
	return nil
}

// Settled reports whether eventID was settled (handled for good), as
// opposed to only claimed by FirstSeen or never seen.
func (c *RedisCache) Settled(ctx context.Context, eventID string) (bool, error) {
	if err := checkCall(ctx, "settled", "event ID", eventID); err != nil {
		return false, err
	}
	var v string
	err := c.do(ctx, func(ctx context.Context) error {
		var err error
		v, err = c.rdb.Get(ctx, c.prefix+"event:"+eventID).Result()
		if errors.Is(err, redis.Nil) {
			v, err = "", nil
		}
		return err
	})
	if err != nil {
		return false, fmt.Errorf("store: settled %q: %w", eventID, err)
	}
	return v == settledValue, nil
}

// settledValue marks a settled event; a claim holds a random token.
const settledValue = "settled"

// Release forgets eventID, so that a platform's retry of it is handled.
func (c *RedisCache) Release(ctx context.Context, eventID string) error {
	if err := checkCall(ctx, "release", "event ID", eventID); err != nil {
		return err
	}
	err := c.do(ctx, func(ctx context.Context) error {
		return c.rdb.Del(ctx, c.prefix+"event:"+eventID).Err()
	})
	if err != nil {
		return fmt.Errorf("store: release %q: %w", eventID, err)
	}
	return nil
}

// Ping checks that Redis answers, for start-up checks and health probes;
// an error matches ErrCacheUnavailable unless ctx ended.
func (c *RedisCache) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store: ping redis %s: %w", c.addr, err)
	}
	err := c.do(ctx, func(ctx context.Context) error {
		return c.rdb.Ping(ctx).Err()
	})
	if err != nil {
		return fmt.Errorf("store: ping redis %s: %w", c.addr, err)
	}
	return nil
}

// Close closes the connections; later calls fail with ErrCacheUnavailable.
// Closing twice returns the first result.
func (c *RedisCache) Close() error {
	c.closeOnce.Do(func() {
		if err := c.rdb.Close(); err != nil {
			c.closeErr = fmt.Errorf("store: close redis %s: %w", c.addr, err)
		}
	})
	return c.closeErr
}

func (c *RedisCache) threadKey(threadKey string) string {
	return c.prefix + "thread:" + threadKey
}

// do runs f within OpTimeout and translates its error: ctx's own error if
// ctx ended, else one matching ErrCacheUnavailable. It tracks whether
// Redis is up and logs each change.
func (c *RedisCache) do(ctx context.Context, f func(ctx context.Context) error) error {
	opCtx, cancel := context.WithTimeout(ctx, c.opTimeout)
	defer cancel()
	err := f(opCtx)
	switch {
	case err == nil:
		if c.down.CompareAndSwap(true, false) {
			c.log.Info("redis cache available again", "addr", c.addr)
		}
		return nil
	case ctx.Err() != nil:
		// The caller gave up; that says nothing of Redis.
		return ctx.Err()
	case errors.Is(err, redis.ErrClosed):
		return fmt.Errorf("%w: closed", ErrCacheUnavailable)
	case opCtx.Err() != nil:
		// Not context.DeadlineExceeded: the caller's deadline did not pass.
		err = fmt.Errorf("no reply from redis %s within %v", c.addr, c.opTimeout)
	}
	c.errs.Add(ctx, 1)
	if c.down.CompareAndSwap(false, true) {
		c.log.Warn("redis cache unavailable; callers carry on without it", "addr", c.addr, "error", err)
	}
	return fmt.Errorf("%w: %w", ErrCacheUnavailable, err)
}
