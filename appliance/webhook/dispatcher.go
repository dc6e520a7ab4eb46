package webhook

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"pbx/appliance/config"
)

// Events.
const (
	EventMobileRinging = "mobile.ringing"
	EventMobileEnded   = "mobile.ended"
	EventCallEnded     = "call.ended"
)

// Delivery rules.
const (
	DefaultTimeout       = 10 * time.Second
	DefaultMaxAttemptAge = 24 * time.Hour
	// RingingMaxAge is the life of a mobile.ringing delivery.
	RingingMaxAge = 60 * time.Second
	// MaxConcurrency is the ceiling of webhooks.concurrency.
	MaxConcurrency     = 64
	DefaultConcurrency = 8
	firstBackoff       = time.Second
	maxBackoff         = 5 * time.Minute
	// maxQueued bounds the deliveries held in memory that are not durable.
	maxQueued = 20000
)

// ErrQueueFull is returned when too many deliveries wait.
var ErrQueueFull = errors.New("webhook queue full")

// durable reports whether event's deliveries survive a restart.
func durable(event string) bool { return event == EventCallEnded }

// endpoint is one Webhook document.
type endpoint struct {
	tenant, name, url string
	events            []string
	secret            []byte
	timeout           time.Duration
}

// Options configures the dispatcher.
type Options struct {
	Webhooks []*config.Webhook
	Defaults config.Webhooks
	// DataDir holds the durable deliveries; "": they are kept in memory
	// only.
	DataDir string
	// Client sends the requests; nil: a client that follows no redirect.
	Client *http.Client
	// Now is the clock; nil: time.Now.
	Now func() time.Time
	// FirstBackoff and MaxBackoff override the retry schedule (tests).
	FirstBackoff, MaxBackoff time.Duration
}

// Dispatcher queues and delivers webhook events.
type Dispatcher struct {
	log        *slog.Logger
	client     *http.Client
	now        func() time.Time
	pending    string // "" without a data directory
	eps        map[string][]*endpoint
	byKey      map[string]*endpoint // tenant "/" name
	maxAge     time.Duration
	slots      int
	perTenant  int
	first, top time.Duration

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced at each change
	queues   map[string]*tenantQueue
	order    []string // tenants in round-robin order
	rr       int
	delayed  backlog // waiting for their next attempt
	queued   int     // jobs held (ready, delayed or in flight)
	volatile int     // of which not durable
	inflight int
	stats    stats
}

type tenantQueue struct {
	ready    []*job
	inflight int
}

// New builds the dispatcher and loads the durable deliveries a previous
// run left.
func New(o Options, log *slog.Logger) (*Dispatcher, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Dispatcher{log: log, client: o.Client, now: o.Now, eps: map[string][]*endpoint{}, byKey: map[string]*endpoint{},
		changed: make(chan struct{}), queues: map[string]*tenantQueue{}, first: o.FirstBackoff, top: o.MaxBackoff}
	if d.now == nil {
		d.now = time.Now
	}
	if d.first <= 0 {
		d.first = firstBackoff
	}
	if d.top <= 0 {
		d.top = maxBackoff
	}
	d.maxAge = o.Defaults.MaxAttemptAge.D()
	if d.maxAge <= 0 {
		d.maxAge = DefaultMaxAttemptAge
	}
	d.slots = o.Defaults.Concurrency
	if d.slots <= 0 {
		d.slots = DefaultConcurrency
	}
	d.slots = min(d.slots, MaxConcurrency)
	d.perTenant = d.slots
	if d.slots > 1 {
		d.perTenant = d.slots - max(1, d.slots/4)
	}
	if d.client == nil {
		// Keep a connection per slot: every attempt may go to one host.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = d.slots
		tr.DialContext = wireDialer(tr.DialContext) // see onTheWire
		d.client = &http.Client{Transport: tr,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	timeout := o.Defaults.Timeout.D()
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	for _, w := range o.Webhooks {
		ep := &endpoint{tenant: w.Tenant, name: w.Name, url: w.URL, events: w.Events, secret: []byte(w.Key.Reveal()), timeout: w.Timeout.D()}
		if len(ep.secret) == 0 {
			ep.secret = []byte(w.Secret.Reveal())
		}
		if ep.timeout <= 0 {
			ep.timeout = timeout
		}
		d.eps[w.Tenant] = append(d.eps[w.Tenant], ep)
		d.byKey[w.Tenant+"/"+w.Name] = ep
	}
	d.stats.init()
	if o.DataDir != "" {
		d.pending = filepath.Join(o.DataDir, "webhooks", "pending")
		if err := d.load(); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// Subscribed reports whether any webhook of tenant takes event.
func (d *Dispatcher) Subscribed(tenant, event string) bool {
	return len(d.subscribers(tenant, event)) > 0
}

func (d *Dispatcher) subscribers(tenant, event string) []*endpoint {
	var out []*endpoint
	for _, ep := range d.eps[tenant] {
		if slices.Contains(ep.events, event) {
			out = append(out, ep)
		}
	}
	return out
}

// payload is a delivery's body.
type payload struct {
	ID        string    `json:"id"`
	Event     string    `json:"event"`
	CreatedAt time.Time `json:"created_at"`
	Tenant    string    `json:"tenant"`
	Data      any       `json:"data"`
}

func newID() string {
	var b [15]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Send queues event for every webhook of tenant that subscribes to it and
// returns once each is queued (for call.ended: written to disk). Events no
// webhook takes are not sent.
func (d *Dispatcher) Send(tenant, event string, data any) error {
	_, err := d.send(tenant, event, data, false)
	return err
}

// SendNow queues event ahead of the tenant's other deliveries and returns
// once the first attempt of every delivery has written its request (it is
// on the wire) or failed before that, or ctx ends. mobile.ringing goes
// this way, before the leg's INVITE.
func (d *Dispatcher) SendNow(ctx context.Context, tenant, event string, data any) error {
	jobs, err := d.send(tenant, event, data, true)
	if err != nil {
		return err
	}
	for _, j := range jobs {
		select {
		case <-j.wrote:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (d *Dispatcher) send(tenant, event string, data any, urgent bool) ([]*job, error) {
	eps := d.subscribers(tenant, event)
	if len(eps) == 0 {
		return nil, nil
	}
	now := d.now()
	age := d.maxAge
	if event == EventMobileRinging {
		age = RingingMaxAge
	}
	jobs := make([]*job, 0, len(eps))
	for _, ep := range eps {
		id := newID()
		body, err := json.Marshal(payload{ID: id, Event: event, CreatedAt: now.UTC(), Tenant: tenant, Data: data})
		if err != nil {
			return nil, fmt.Errorf("webhook %s: encode %s: %w", ep.name, event, err)
		}
		j := &job{ID: id, Tenant: tenant, Webhook: ep.name, Event: event, CreatedAt: now, Deadline: now.Add(age),
			Body: body, Durable: durable(event) && d.pending != "", ep: ep}
		if urgent {
			j.wrote = make(chan struct{})
		}
		if j.Durable {
			if err := d.write(j); err != nil {
				return nil, err
			}
		}
		jobs = append(jobs, j)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.volatile+len(jobs) > maxQueued && !jobs[0].Durable {
		d.stats.delivery(event, "dropped")
		return nil, ErrQueueFull
	}
	for _, j := range jobs {
		d.queued++
		if !j.Durable {
			d.volatile++
		}
		d.ready(j, urgent)
	}
	d.signal()
	return jobs, nil
}

// ready puts j in its tenant's queue (at the front when urgent). Locked.
func (d *Dispatcher) ready(j *job, urgent bool) {
	q := d.queues[j.Tenant]
	if q == nil {
		q = &tenantQueue{}
		d.queues[j.Tenant] = q
		d.order = append(d.order, j.Tenant)
	}
	if urgent {
		q.ready = append([]*job{j}, q.ready...)
	} else {
		q.ready = append(q.ready, j)
	}
}

// signal wakes every waiting worker. Locked.
func (d *Dispatcher) signal() {
	close(d.changed)
	d.changed = make(chan struct{})
}
