package terminal_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"

	"github.com/agentbot/agentbot/agentflow"
	"github.com/agentbot/agentbot/bot"
	"github.com/agentbot/agentbot/bot/terminal"
	"github.com/agentbot/agentbot/internal/agentworker"
	"github.com/agentbot/agentbot/internal/config"
	"github.com/agentbot/agentbot/internal/testenv"
)

// TestChatRoundTrips counts the Temporal calls the terminal's chat makes
// per message, from the line typed to the answer printed (issue 15, P9),
// on a real dev server with the in-process worker of the embedded default
// and the offline model ("sleep: 1" makes a turn of about a second).
//
//   - with Answers (the sender printing in the same process): one call,
//     the signal-with-start; the answer is pushed. Before, the chat asked
//     the session again and again (20 ms doubling to 500 ms): 5 or more
//     calls for a one-second turn.
//   - without (a worker elsewhere), asking every PollInterval: at most
//     2 + T/PollInterval calls for a turn of T.
func TestChatRoundTrips(t *testing.T) {
	ctx := context.Background()
	srv, err := testenv.StartTemporal(ctx, testenv.TemporalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	workerClient, err := client.Dial(client.Options{HostPort: srv.FrontendHostPort(), Logger: testenv.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(workerClient.Close)
	var calls counter
	gateway, err := client.Dial(client.Options{HostPort: srv.FrontendHostPort(), Logger: testenv.Logger(),
		ConnectionOptions: client.ConnectionOptions{DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(calls.intercept)}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gateway.Close)
	cfg, err := config.Load([]string{
		"OPENAI_BASE_URL=fake", "AGENTBOT_BACKENDS=local",
		"AGENTBOT_LOCAL_DIR=" + t.TempDir(), "AGENTBOT_STATE_DIR=" + t.TempDir(), "AGENTBOT_BLOB_URL=file://" + t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	out := &screen{}
	sender := terminal.NewSender(out)
	w, err := agentworker.New(ctx, workerClient, agentworker.Options{Config: cfg,
		Logger: slog.New(slog.DiscardHandler), Chat: map[string]agentflow.ChatSender{"term": sender}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	router := &bot.Router{Sessions: agentflow.NewClient(gateway), Backends: w.Registry.Names(), DefaultBackend: "local",
		Logger: slog.New(slog.DiscardHandler)}

	for _, tc := range []struct {
		name    string
		answers terminal.Answers
		poll    time.Duration
		max     func(turn time.Duration) int
	}{
		{"pushed", sender, 0, func(time.Duration) int { return 1 }},
		{"polled", nil, 300 * time.Millisecond, func(turn time.Duration) int { return 2 + int(turn/(300*time.Millisecond)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The answer is shown by the sender when pushed, and by the
			// chat itself when it polls (a worker elsewhere): the turn's
			// time is until the chat has it, one poll after the sender
			// printed it at worst.
			shown := out
			var chatOut io.Writer = io.Discard
			if tc.answers == nil {
				shown = &screen{}
				chatOut = shown
			}
			out.clear()
			inR, inW := io.Pipe()
			chat := &terminal.Chat{Router: router, Client: router.Sessions, In: inR, Out: chatOut, User: "alice",
				Thread: "rt-" + tc.name, Answers: tc.answers, PollInterval: tc.poll, PrintAnswers: tc.answers == nil}
			runCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- chat.Run(runCtx) }()
			say := func(line, want string) (int, time.Duration) {
				t.Helper()
				calls.reset()
				t0 := time.Now()
				shown.clear()
				fmt.Fprintln(inW, line)
				if err := shown.wait(runCtx, want); err != nil {
					t.Fatal(err)
				}
				turn := time.Since(t0)
				// The chat's own wait ends with the answer; give it the
				// time of one more poll to show up in the count.
				time.Sleep(tc.poll + 100*time.Millisecond)
				return calls.reset(), turn
			}
			say("hello", "echo: hello") // starts the session
			n, turn := say("sleep: 1", "agent: done.")
			if limit := tc.max(turn); n > limit {
				t.Errorf("a message answered after %s cost %d Temporal calls, want at most %d", turn.Round(time.Millisecond), n, limit)
			}
			if n < 1 {
				t.Errorf("%d Temporal calls for a message: the count is broken", n)
			}
			inW.Close()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// counter counts a client's unary gRPC calls.
type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (c *counter) reset() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = 0
	return n
}

// screen is the terminal: what was printed, and a wait for a line.
type screen struct {
	testenv.Buffer
	from int // clear: what was printed before is not waited for
}

func (s *screen) clear() { s.from = len(s.String()) }

func (s *screen) wait(ctx context.Context, want string) error {
	for !strings.Contains(s.String()[s.from:], want) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("the terminal never printed %q; it shows:\n%s", want, s.String()[s.from:])
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}
