package logging

import (
	"io"
	"sync"
	"time"
)

// Coalescing defaults: a record waits at most DefaultCoalesceDelay before
// it is written, and a batch past DefaultCoalesceBytes is written at once
// by the record that filled it.
const (
	DefaultCoalesceDelay = 5 * time.Millisecond
	DefaultCoalesceBytes = 32 << 10
)

// Coalescer batches the records written to it into few writes to w: the
// first record after a write starts a delay, and the records that arrive
// within it go out with it in one Write. Under load (a few log lines per
// call at thousands of calls a second) that is one system call per batch
// instead of one per line; an idle daemon's line still leaves within the
// delay. Each Write to the Coalescer is kept whole (a slog handler writes
// one record per Write), and batches leave in order.
//
// A record is in memory until its batch is written: call Flush before the
// process exits. Safe for concurrent use.
type Coalescer struct {
	w     io.Writer
	delay time.Duration
	max   int

	mu      sync.Mutex
	buf     []byte
	spare   []byte     // the last batch's array, for the next one
	armed   bool       // a flush is scheduled
	writeMu sync.Mutex // orders batches on w
	err     error      // the last write error, reported by the next Write
}

// NewCoalescer returns a Coalescer writing to w; zero delay or max mean
// the defaults.
func NewCoalescer(w io.Writer, delay time.Duration, max int) *Coalescer {
	if delay <= 0 {
		delay = DefaultCoalesceDelay
	}
	if max <= 0 {
		max = DefaultCoalesceBytes
	}
	return &Coalescer{w: w, delay: delay, max: max}
}

// Write queues p whole. It writes the batch itself when p fills it, and
// returns the error of an earlier batch's write, if any.
func (c *Coalescer) Write(p []byte) (int, error) {
	c.mu.Lock()
	err := c.err
	c.err = nil
	c.buf = append(c.buf, p...)
	full := len(c.buf) >= c.max
	arm := !full && !c.armed
	if arm {
		c.armed = true
	}
	c.mu.Unlock()
	switch {
	case full:
		c.Flush()
	case arm:
		time.AfterFunc(c.delay, c.flushTimer)
	}
	return len(p), err
}

// flushTimer is the scheduled flush.
func (c *Coalescer) flushTimer() {
	c.mu.Lock()
	c.armed = false
	c.mu.Unlock()
	c.Flush()
}

// Flush writes every queued record now.
func (c *Coalescer) Flush() {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.mu.Lock()
	batch := c.buf
	c.buf, c.spare = c.spare, nil
	c.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	_, err := c.w.Write(batch)
	c.mu.Lock()
	if err != nil {
		c.err = err
	}
	if cap(batch) <= 2*c.max {
		c.spare = batch[:0]
	}
	c.mu.Unlock()
}
