package bot

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// ErrPoolClosed is returned for work handed to a Pool after Shutdown.
var ErrPoolClosed = errors.New("the event pool is shut down")

// Pool handles acknowledged platform events on a bounded set of workers.
// Adapters acknowledge a delivery first (platforms retry what is not
// acknowledged in time) and then Submit its work here; Shutdown drains what
// was accepted. Safe for concurrent use.
type Pool struct {
	name          string
	workers       int
	queueSize     int
	handleTimeout time.Duration
	log           *slog.Logger

	once    sync.Once
	queue   chan func(context.Context)
	stop    chan struct{} // closed when the workers should exit
	abort   chan struct{} // closed when running handlers must give up
	running sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	pending   sync.WaitGroup // jobs accepted and not yet finished
	stopOnce  sync.Once
	abortOnce sync.Once
}

// NewPool returns a pool of workers goroutines with room for queueSize
// waiting jobs; each job gets a context that ends after handleTimeout or
// when Shutdown gives up waiting. name labels its log lines ("slack").
func NewPool(name string, workers, queueSize int, handleTimeout time.Duration, log *slog.Logger) *Pool {
	if log == nil {
		log = slog.Default()
	}
	return &Pool{name: name, workers: max(workers, 1), queueSize: max(queueSize, 0),
		handleTimeout: handleTimeout, log: log}
}

func (p *Pool) start() {
	p.queue = make(chan func(context.Context), p.queueSize)
	p.stop = make(chan struct{})
	p.abort = make(chan struct{})
	for range p.workers {
		p.running.Go(func() {
			for {
				select {
				case job := <-p.queue:
					p.run(job)
				case <-p.stop:
					return
				}
			}
		})
	}
}

// Submit hands job to the pool, waiting for room in the queue until ctx is
// done. After Shutdown it returns ErrPoolClosed.
func (p *Pool) Submit(ctx context.Context, job func(context.Context)) error {
	p.once.Do(p.start)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrPoolClosed
	}
	p.pending.Add(1)
	p.mu.Unlock()
	select {
	case p.queue <- job:
		return nil
	default:
	}
	p.log.Warn(p.name+" event queue is full; waiting for a worker", "workers", p.workers, "queue", p.queueSize)
	select {
	case p.queue <- job:
		return nil
	case <-ctx.Done():
		p.pending.Done()
		return ctx.Err()
	}
}

func (p *Pool) run(job func(context.Context)) {
	defer p.pending.Done()
	// Jobs outlive the delivery that started them (it was answered
	// already); only their timeout and Shutdown's deadline end them.
	ctx, cancel := context.WithTimeout(context.Background(), p.handleTimeout)
	defer cancel()
	go func() {
		select {
		case <-p.abort:
			cancel()
		case <-ctx.Done():
		}
	}()
	defer func() {
		if r := recover(); r != nil {
			p.log.Error(p.name+" event handler panicked", "panic", r)
		}
	}()
	job(ctx)
}

// Shutdown stops taking jobs and waits for the accepted ones to finish,
// until ctx is done; then it cancels the jobs still running, waits for
// them, and returns ctx's error.
func (p *Pool) Shutdown(ctx context.Context) error {
	p.once.Do(p.start)
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	done := make(chan struct{})
	go func() {
		p.pending.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		p.abortOnce.Do(func() { close(p.abort) })
		<-done
	}
	p.stopOnce.Do(func() { close(p.stop) })
	p.running.Wait()
	return err
}
