package webhook

import (
	"context"
	"crypto/hmac"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pbx/appliance/config"
)

// receiver is a tenant backend: it checks each request's signature with
// secret and answers with status(n) for the n-th request (from 1).
type receiver struct {
	t      testing.TB
	secret string
	status func(n int) int
	hold   chan struct{} // when set, each request waits for it to close

	mu        sync.Mutex
	n         int
	bodies    []map[string]any
	headers   []http.Header
	inflight  int
	maxFlight int
	got       chan string // delivery ids, as they arrive
	srv       *httptest.Server
}

func newReceiver(t testing.TB, secret string, status func(int) int) *receiver {
	r := &receiver{t: t, secret: secret, status: status, got: make(chan string, 10000)}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	ts := req.Header.Get("X-Pbx-Timestamp")
	want := Sign([]byte(r.secret), ts, body)
	sig := req.Header.Get("X-Pbx-Signature")
	if !hmac.Equal([]byte(sig), []byte(want)) {
		r.t.Errorf("signature %q, want %q", sig, want)
	}
	if sec, err := strconv.ParseInt(ts, 10, 64); err != nil || time.Since(time.Unix(sec, 0)) > time.Minute {
		r.t.Errorf("timestamp %q", ts)
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		r.t.Errorf("body %q: %v", body, err)
	}
	r.mu.Lock()
	r.n++
	n := r.n
	r.inflight++
	r.maxFlight = max(r.maxFlight, r.inflight)
	r.bodies = append(r.bodies, m)
	r.headers = append(r.headers, req.Header.Clone())
	r.mu.Unlock()
	r.got <- req.Header.Get("X-Pbx-Delivery")
	if r.hold != nil {
		select {
		case <-r.hold:
		case <-req.Context().Done():
		}
	}
	r.mu.Lock()
	r.inflight--
	r.mu.Unlock()
	code := http.StatusNoContent
	if r.status != nil {
		code = r.status(n)
	}
	w.WriteHeader(code)
}

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

func hook(tenant, name, url, secret string, events ...string) *config.Webhook {
	w := &config.Webhook{URL: url, Events: events, Key: config.Secret(secret)}
	w.Tenant, w.Name = tenant, name
	return w
}

func run(t testing.TB, d *Dispatcher) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = d.Run(ctx); close(done) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Error("Run did not return")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSignedDeliveryOnlyToSubscribers(t *testing.T) {
	acme := newReceiver(t, "acme-secret", nil)
	globex := newReceiver(t, "globex-secret", nil)
	d, err := New(Options{Webhooks: []*config.Webhook{
		hook("acme", "crm", acme.srv.URL, "acme-secret", EventCallEnded, EventMobileEnded),
		hook("globex", "crm", globex.srv.URL, "globex-secret", EventMobileRinging),
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	run(t, d)
	if err := d.Send("acme", EventCallEnded, map[string]string{"id": "rec-1"}); err != nil {
		t.Fatal(err)
	}
	if err := d.Send("acme", EventMobileRinging, map[string]string{"room": "r"}); err != nil { // not subscribed
		t.Fatal(err)
	}
	if err := d.Send("globex", EventCallEnded, nil); err != nil { // not subscribed
		t.Fatal(err)
	}
	if err := d.Send("acme", EventMobileEnded, map[string]string{"outcome": "no_answer"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "two deliveries", func() bool { return d.Stats().Queued == 0 && acme.count() == 2 })
	if globex.count() != 0 {
		t.Fatalf("globex got %d deliveries of events it does not take", globex.count())
	}
	acme.mu.Lock()
	defer acme.mu.Unlock()
	// Two deliveries run in parallel: find the call.ended one.
	i := 0
	if acme.bodies[0]["event"] != EventCallEnded {
		i = 1
	}
	b, h := acme.bodies[i], acme.headers[i]
	if b["event"] != EventCallEnded || b["tenant"] != "acme" || b["id"] != h.Get("X-Pbx-Delivery") || h.Get("X-Pbx-Event") != EventCallEnded {
		t.Fatalf("body %v headers %v", b, h)
	}
	if data, _ := b["data"].(map[string]any); data["id"] != "rec-1" {
		t.Fatalf("data %v", b["data"])
	}
	if _, err := time.Parse(time.RFC3339Nano, b["created_at"].(string)); err != nil {
		t.Fatalf("created_at: %v", err)
	}
	if acme.bodies[1-i]["event"] != EventMobileEnded {
		t.Fatalf("other delivery %v", acme.bodies[1-i])
	}
	if st := d.Stats(); st.Deliveries[[2]string{EventCallEnded, "delivered"}] != 1 || st.Attempts["ok"] != 2 || st.LatencySum <= 0 {
		t.Fatalf("stats %+v", st)
	}
	// A receiver that checks with another secret refuses the signature.
	if Sign([]byte("other"), "1", []byte("x")) == Sign([]byte("acme-secret"), "1", []byte("x")) {
		t.Fatal("signature ignores the secret")
	}
}

func TestRetriesAgainstFailingReceiver(t *testing.T) {
	rcv := newReceiver(t, "s", func(n int) int {
		if n < 4 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	d, err := New(Options{Webhooks: []*config.Webhook{hook("acme", "crm", rcv.srv.URL, "s", EventMobileEnded)},
		FirstBackoff: 20 * time.Millisecond, MaxBackoff: 40 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	run(t, d)
	start := time.Now()
	if err := d.Send("acme", EventMobileEnded, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "delivery after retries", func() bool {
		return d.Stats().Deliveries[[2]string{EventMobileEnded, "delivered"}] == 1
	})
	// 20 + 40 + 40 ms of backoff, less 20% jitter.
	if el := time.Since(start); el < 80*time.Millisecond {
		t.Fatalf("three retries in %s: no backoff", el)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if rcv.n != 4 {
		t.Fatalf("%d attempts, want 4", rcv.n)
	}
	for _, h := range rcv.headers[1:] {
		if h.Get("X-Pbx-Delivery") != rcv.headers[0].Get("X-Pbx-Delivery") {
			t.Fatal("a retry changed the delivery id")
		}
	}
	if st := d.Stats(); st.Attempts["status"] != 3 || st.Attempts["ok"] != 1 {
		t.Fatalf("attempts %v", st.Attempts)
	}
}

func TestGivesUpAtMaxAttemptAge(t *testing.T) {
	rcv := newReceiver(t, "s", func(int) int { return 500 })
	d, err := New(Options{Webhooks: []*config.Webhook{hook("acme", "crm", rcv.srv.URL, "s", EventMobileEnded)},
		Defaults:     config.Webhooks{MaxAttemptAge: config.Duration(150 * time.Millisecond)},
		FirstBackoff: 20 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	run(t, d)
	_ = d.Send("acme", EventMobileEnded, nil)
	eventually(t, "expiry", func() bool { return d.Stats().Deliveries[[2]string{EventMobileEnded, "expired"}] == 1 })
	n := rcv.count()
	if n < 3 {
		t.Fatalf("only %d attempts before giving up", n)
	}
	if d.Stats().Queued != 0 {
		t.Fatal("expired delivery still queued")
	}
}

func TestRingingLivesSixtySeconds(t *testing.T) {
	d, err := New(Options{Webhooks: []*config.Webhook{hook("acme", "crm", "http://127.0.0.1:1/", "s", EventMobileRinging, EventMobileEnded)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := d.send("acme", EventMobileRinging, nil, false)
	if err != nil || len(jobs) != 1 {
		t.Fatal(jobs, err)
	}
	if life := jobs[0].Deadline.Sub(jobs[0].CreatedAt); life != RingingMaxAge {
		t.Fatalf("mobile.ringing lives %s", life)
	}
	jobs, _ = d.send("acme", EventMobileEnded, nil, false)
	if life := jobs[0].Deadline.Sub(jobs[0].CreatedAt); life != DefaultMaxAttemptAge {
		t.Fatalf("mobile.ended lives %s", life)
	}
}

func TestSendNowReturnsOnceOnTheWire(t *testing.T) {
	rcv := newReceiver(t, "s", nil)
	rcv.hold = make(chan struct{})
	d, _ := New(Options{Webhooks: []*config.Webhook{hook("acme", "crm", rcv.srv.URL, "s", EventMobileRinging)}}, nil)
	run(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.SendNow(ctx, "acme", EventMobileRinging, map[string]string{"room": "r1"}); err != nil {
		t.Fatal(err)
	}
	// SendNow returned while the receiver still holds its answer: the
	// request was written, and it arrives.
	select {
	case <-rcv.got:
	case <-time.After(5 * time.Second):
		t.Fatal("request never arrived")
	}
	if d.Stats().Attempts["ok"] != 0 {
		t.Fatal("SendNow waited for the answer")
	}
	close(rcv.hold)
	// A failure before the wire also releases SendNow.
	d2, _ := New(Options{Webhooks: []*config.Webhook{hook("acme", "crm", "http://127.0.0.1:1/", "s", EventMobileRinging)}}, nil)
	run(t, d2)
	if err := d2.SendNow(ctx, "acme", EventMobileRinging, nil); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrencyBoundAndFairness(t *testing.T) {
	slow := newReceiver(t, "s", nil)
	slow.hold = make(chan struct{})
	fast := newReceiver(t, "s", nil)
	const limit = 4
	d, _ := New(Options{Webhooks: []*config.Webhook{
		hook("slow", "crm", slow.srv.URL, "s", EventMobileEnded),
		hook("fast", "crm", fast.srv.URL, "s", EventMobileEnded),
	}, Defaults: config.Webhooks{Concurrency: limit, Timeout: config.Duration(time.Minute)}}, nil)
	run(t, d)
	for range 40 {
		if err := d.Send("slow", EventMobileEnded, nil); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the slow tenant's share in flight", func() bool { return d.Stats().InFlight == limit-1 })
	// The slow tenant holds 3 of 4 slots; the fast tenant's deliveries go
	// through the fourth while the slow ones hang.
	for range 10 {
		_ = d.Send("fast", EventMobileEnded, nil)
	}
	eventually(t, "the fast tenant's deliveries", func() bool { return fast.count() == 10 })
	if st := d.Stats(); st.InFlight > limit {
		t.Fatalf("%d in flight, cap %d", st.InFlight, limit)
	}
	close(slow.hold)
	eventually(t, "every delivery", func() bool { return d.Stats().Queued == 0 })
	slow.mu.Lock()
	defer slow.mu.Unlock()
	if slow.n != 40 || slow.maxFlight > limit-1 {
		t.Fatalf("slow receiver: %d requests, %d at once (cap %d)", slow.n, slow.maxFlight, limit)
	}
}

func TestCallEndedSurvivesRestart(t *testing.T) {
	dataDir := t.TempDir()
	var up atomic.Bool
	rcv := newReceiver(t, "s", func(int) int {
		if up.Load() {
			return 200
		}
		return 502
	})
	hooks := []*config.Webhook{hook("acme", "crm", rcv.srv.URL, "s", EventCallEnded)}
	d, err := New(Options{Webhooks: hooks, DataDir: dataDir, FirstBackoff: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Written before any attempt: the process may die right after Send.
	if err := d.Send("acme", EventCallEnded, map[string]string{"id": "rec-9"}); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dataDir, "webhooks", "pending", "*.json"))
	if len(files) != 1 {
		t.Fatalf("%d job files before the first attempt", len(files))
	}
	stop := run(t, d)
	eventually(t, "a failed attempt", func() bool { return rcv.count() == 1 })
	stop()

	up.Store(true)
	d2, err := New(Options{Webhooks: hooks, DataDir: dataDir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d2.Stats().Queued != 1 {
		t.Fatalf("reopened outbox holds %d", d2.Stats().Queued)
	}
	run(t, d2)
	eventually(t, "delivery after restart", func() bool {
		return d2.Stats().Deliveries[[2]string{EventCallEnded, "delivered"}] == 1
	})
	rcv.mu.Lock()
	first, second := rcv.headers[0].Get("X-Pbx-Delivery"), rcv.headers[1].Get("X-Pbx-Delivery")
	rcv.mu.Unlock()
	if first != second {
		t.Fatal("the delivery id changed across the restart")
	}
	if files, _ := filepath.Glob(filepath.Join(dataDir, "webhooks", "pending", "*")); len(files) != 0 {
		t.Fatalf("job files after a 2xx: %v", files)
	}
	// Confirmed deliveries are never sent again.
	d3, _ := New(Options{Webhooks: hooks, DataDir: dataDir}, nil)
	if d3.Stats().Queued != 0 {
		t.Fatal("a confirmed delivery was queued again")
	}
	// A job of a webhook removed from the configuration is dropped.
	_ = d3.Send("acme", EventCallEnded, nil)
	d4, _ := New(Options{DataDir: dataDir}, nil)
	if d4.Stats().Queued != 0 {
		t.Fatal("job of a removed webhook resumed")
	}
	if ents, _ := os.ReadDir(filepath.Join(dataDir, "webhooks", "pending")); len(ents) != 0 {
		t.Fatalf("%d files left", len(ents))
	}
}

// BenchmarkDeliveries: deliveries per second at concurrency 64 against a
// receiver that takes 20 ms per request, spread over 4 tenants.
func BenchmarkDeliveries(b *testing.B) {
	var rcvN atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(20 * time.Millisecond) // the slow receiver
		rcvN.Add(1)
		w.WriteHeader(200)
	}))
	defer srv.Close()
	var hooks []*config.Webhook
	tenants := []string{"t1", "t2", "t3", "t4"}
	for _, tn := range tenants {
		hooks = append(hooks, hook(tn, "crm", srv.URL, "s", EventMobileEnded))
	}
	d, _ := New(Options{Webhooks: hooks, Defaults: config.Webhooks{Concurrency: 64}}, nil)
	stop := run(b, d)
	defer stop()
	data := map[string]string{"call_id": "c1", "outcome": "no_answer"}
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		_ = d.Send(tenants[i%len(tenants)], EventMobileEnded, data)
	}
	for d.Stats().Queued > 0 {
		time.Sleep(time.Millisecond)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "deliveries/s")
}
