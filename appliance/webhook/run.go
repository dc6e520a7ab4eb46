package webhook

import (
	"bytes"
	"container/heap"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync"
	"time"
)

// job is one delivery: an event for one webhook.
type job struct {
	ID        string    `json:"id"`
	Tenant    string    `json:"tenant"`
	Webhook   string    `json:"webhook"`
	Event     string    `json:"event"`
	CreatedAt time.Time `json:"created_at"`
	Deadline  time.Time `json:"deadline"`
	Body      []byte    `json:"body"`
	Durable   bool      `json:"-"`

	ep       *endpoint
	attempts int
	next     time.Time
	// wrote, when set, is closed once the first attempt wrote its request
	// or failed before it (SendNow waits for it).
	wrote     chan struct{}
	wroteOnce sync.Once
}

func (j *job) markWritten() {
	if j.wrote != nil {
		j.wroteOnce.Do(func() { close(j.wrote) })
	}
}

// Run delivers until ctx ends. An attempt cut by the end is not counted; a
// durable delivery stays on disk for the next run.
func (d *Dispatcher) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for range d.slots {
		wg.Go(func() {
			for {
				j := d.take(ctx)
				if j == nil {
					return
				}
				d.finish(j, d.attempt(ctx, j))
			}
		})
	}
	wg.Wait()
	return nil
}

// take waits for the next delivery to attempt: among the tenants with
// one ready and under the per-tenant share, the one with the fewest
// attempts in flight, ties in round-robin order. nil when ctx ended.
func (d *Dispatcher) take(ctx context.Context) *job {
	for {
		d.mu.Lock()
		now := d.now()
		d.promote(now)
		if j := d.pick(); j != nil {
			d.mu.Unlock()
			return j
		}
		wait := time.Hour
		if len(d.delayed) > 0 {
			wait = min(wait, d.delayed[0].next.Sub(now))
		}
		changed := d.changed
		d.mu.Unlock()
		t := time.NewTimer(max(wait, time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-changed:
		case <-t.C:
		}
		t.Stop()
	}
}

// promote moves the delayed jobs that are due to their ready queues. Locked.
func (d *Dispatcher) promote(now time.Time) {
	for len(d.delayed) > 0 && !now.Before(d.delayed[0].next) {
		d.ready(heap.Pop(&d.delayed).(*job), false)
	}
}

// backlog is the delayed jobs, a min-heap by next attempt.
type backlog []*job

func (b backlog) Len() int           { return len(b) }
func (b backlog) Less(i, j int) bool { return b[i].next.Before(b[j].next) }
func (b backlog) Swap(i, j int)      { b[i], b[j] = b[j], b[i] }
func (b *backlog) Push(x any)        { *b = append(*b, x.(*job)) }
func (b *backlog) Pop() any {
	old := *b
	j := old[len(old)-1]
	old[len(old)-1] = nil
	*b = old[:len(old)-1]
	return j
}

// pick takes a ready job under the fairness rule. Locked.
func (d *Dispatcher) pick() *job {
	if d.inflight >= d.slots {
		return nil
	}
	best := -1
	n := len(d.order)
	for i := range n {
		k := (d.rr + i) % n
		q := d.queues[d.order[k]]
		if len(q.ready) == 0 || q.inflight >= d.perTenant {
			continue
		}
		if best < 0 || q.inflight < d.queues[d.order[best]].inflight {
			best = k
		}
	}
	if best < 0 {
		return nil
	}
	d.rr = (best + 1) % n
	q := d.queues[d.order[best]]
	j := q.ready[0]
	q.ready[0] = nil
	q.ready = q.ready[1:]
	q.inflight++
	d.inflight++
	return j
}

// result is how an attempt ended.
type result int

const (
	resultOK result = iota
	resultFailed
	resultCancelled
)

// attempt sends j once.
func (d *Dispatcher) attempt(ctx context.Context, j *job) result {
	ep := j.ep
	actx, cancel := context.WithTimeout(ctx, ep.timeout)
	defer cancel()
	if j.wrote != nil {
		actx = httptrace.WithClientTrace(actx, onTheWire(j.markWritten))
	}
	defer j.markWritten() // whatever happened, the first attempt is over
	req, err := http.NewRequestWithContext(actx, http.MethodPost, ep.url, bytes.NewReader(j.Body))
	if err != nil {
		d.log.Warn("webhook request", "tenant", j.Tenant, "webhook", j.Webhook, "err", err)
		d.stats.attempt("error", 0)
		return resultFailed
	}
	ts := strconv.FormatInt(d.now().Unix(), 10)
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "pbx-webhook/1")
	h.Set("X-Pbx-Event", j.Event)
	h.Set("X-Pbx-Delivery", j.ID)
	h.Set("X-Pbx-Timestamp", ts)
	h.Set("X-Pbx-Signature", Sign(ep.secret, ts, j.Body))
	start := time.Now()
	resp, err := d.client.Do(req)
	took := time.Since(start)
	if err != nil {
		if ctx.Err() != nil {
			return resultCancelled
		}
		d.log.Info("webhook attempt failed", "tenant", j.Tenant, "webhook", j.Webhook, "event", j.Event,
			"delivery", j.ID, "attempt", j.attempts+1, "err", errors.Unwrap(err))
		d.stats.attempt("error", took)
		return resultFailed
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		d.stats.attempt("ok", took)
		return resultOK
	}
	d.log.Info("webhook attempt refused", "tenant", j.Tenant, "webhook", j.Webhook, "event", j.Event,
		"delivery", j.ID, "attempt", j.attempts+1, "status", resp.StatusCode)
	d.stats.attempt("status", took)
	return resultFailed
}

// Sign is the X-Pbx-Signature value of body sent at timestamp ts.
func Sign(secret []byte, ts string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return "v1=" + hex.EncodeToString(m.Sum(nil))
}

// finish settles an attempt: done, retried later, or given up.
func (d *Dispatcher) finish(j *job, r result) {
	now := d.now()
	outcome := ""
	switch r {
	case resultOK:
		outcome = "delivered"
	case resultFailed:
		j.attempts++
		j.next = now.Add(d.backoff(j.attempts))
		if j.next.After(j.Deadline) {
			outcome = "expired"
			d.log.Warn("webhook delivery given up", "tenant", j.Tenant, "webhook", j.Webhook, "event", j.Event,
				"delivery", j.ID, "attempts", j.attempts)
		}
	case resultCancelled:
		outcome = "cancelled" // stays on disk when durable
	}
	if (outcome == "delivered" || outcome == "expired") && j.Durable {
		d.remove(j)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.queues[j.Tenant].inflight--
	d.inflight--
	if outcome == "" {
		heap.Push(&d.delayed, j)
	} else {
		d.queued--
		if !j.Durable {
			d.volatile--
		}
		if outcome != "cancelled" {
			d.stats.delivery(j.Event, outcome)
		}
	}
	d.signal()
}

// backoff is the wait after the n-th failed attempt: first doubling to the
// ceiling, with ±20% jitter.
func (d *Dispatcher) backoff(n int) time.Duration {
	b := d.first
	for i := 1; i < n && b < d.top; i++ {
		b *= 2
	}
	b = min(b, d.top)
	return time.Duration(float64(b) * (0.8 + 0.4*rand.Float64()))
}
