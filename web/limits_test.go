package web

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"pbx/appliance/config"
)

// clock is a settable clock for the buckets and token expiry.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func withClock(c *clock) envOption {
	return func(_ *config.API, o *Options) { o.Now = c.now }
}

func withRate(perMinute, burst float64) envOption {
	return func(a *config.API, _ *Options) {
		a.RateLimit = config.RateLimit{RequestsPerMinute: perMinute, Burst: burst}
	}
}

func TestPerTokenRateLimit(t *testing.T) {
	c := newClock()
	e := newEnv(t, withClock(c), withRate(60, 3))
	tok := scopeSecret("status:read")
	for i := range 3 {
		if r := e.get("/v1/status", tok); r.status != 200 {
			t.Fatalf("request %d: %d", i, r.status)
		}
	}
	r := e.get("/v1/status", tok)
	if r.status != 429 || r.errCode() != "rate_limited" {
		t.Fatalf("4th request: %d %s", r.status, r.body)
	}
	if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 || ra > 1 {
		t.Fatalf("Retry-After %q, want 1 (60/minute)", r.header.Get("Retry-After"))
	}
	// Another token has its own bucket; a limited token is not a failed
	// authentication.
	if r := e.get("/v1/status", secretAdmin); r.status != 200 {
		t.Fatalf("other token: %d", r.status)
	}
	c.advance(time.Second)
	if r := e.get("/v1/status", tok); r.status != 200 {
		t.Fatalf("after a second: %d", r.status)
	}
	if r := e.get("/v1/status", tok); r.status != 429 {
		t.Fatalf("bucket refilled more than one: %d", r.status)
	}
}

func TestRateLimitDefaultsAndOff(t *testing.T) {
	c := newClock()
	// Zero is the default pair: 300/minute, burst 60.
	e := newEnv(t, withClock(c), withRate(0, 0))
	n := 0
	for n < 100 && e.get("/v1/health", "").status == 200 && e.get("/v1/status", secretAdmin).status == 200 {
		n++
	}
	if n != 60 {
		t.Fatalf("default burst: %d requests before 429, want 60", n)
	}
	r := e.get("/v1/status", secretAdmin)
	if r.header.Get("Retry-After") != "1" { // 300/minute: one token each 0.2s
		t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
	}
	// Health is not limited.
	if r := e.get("/v1/health", ""); r.status != 200 {
		t.Fatalf("health limited: %d", r.status)
	}

	off := newEnv(t, withClock(c), withRate(-1, 0))
	for i := range 200 {
		if r := off.get("/v1/status", secretAdmin); r.status != 200 {
			t.Fatalf("limiter off, request %d: %d", i, r.status)
		}
	}
}

func TestFailedAuthenticationBucket(t *testing.T) {
	c := newClock()
	e := newEnv(t, withClock(c))
	a, b := e.from("127.0.0.7"), e.from("127.0.0.8")
	for i := range 5 {
		if r := e.do(a, "GET", "/v1/status", []string{"", secretBad, secretExpired}[i%3]); r.status != 401 {
			t.Fatalf("failure %d: %d", i, r.status)
		}
	}
	r := e.do(a, "GET", "/v1/status", secretBad)
	if r.status != 429 || r.errCode() != "rate_limited" || r.header.Get("Retry-After") != "6" {
		t.Fatalf("6th failure: %d Retry-After %q %s", r.status, r.header.Get("Retry-After"), r.body)
	}
	// A valid token is checked first and never charged: the failures of
	// its address cannot lock the operator out.
	for i := range 10 {
		if r := e.do(a, "GET", "/v1/status", secretAdmin); r.status != 200 {
			t.Fatalf("valid token %d from a peer with an empty bucket: %d", i, r.status)
		}
	}
	// The guesser is still held: every wrong or missing token is 429.
	for _, tok := range []string{secretBad, "", secretExpired} {
		if r := e.do(a, "GET", "/v1/status", tok); r.status != 429 {
			t.Fatalf("failure %q after a success: %d, want 429", tok, r.status)
		}
	}
	// X-Forwarded-For is ignored: the socket peer is what counts.
	if r := e.do(a, "GET", "/v1/status", secretBad, "X-Forwarded-For", "198.51.100.1", "X-Real-Ip", "198.51.100.1"); r.status != 429 {
		t.Fatalf("X-Forwarded-For changed the peer: %d", r.status)
	}
	// Another peer is unaffected; health and unknown paths stay open.
	if r := e.do(b, "GET", "/v1/status", secretBad); r.status != 401 {
		t.Fatalf("other peer: %d", r.status)
	}
	if r := e.do(a, "GET", "/v1/health", ""); r.status != 200 {
		t.Fatalf("health from a blocked peer: %d", r.status)
	}
	// 10/minute: one attempt back every 6 seconds, then 429 again.
	c.advance(6 * time.Second)
	if r := e.do(a, "GET", "/v1/status", secretBad); r.status != 401 {
		t.Fatalf("failure after 6s: %d, want 401", r.status)
	}
	if r := e.do(a, "GET", "/v1/status", secretBad); r.status != 429 {
		t.Fatalf("second failure after 6s: %d, want 429", r.status)
	}
	// Over a minute of steady guessing, at most 10 guesses are heard.
	heard := 0
	for range 60 {
		c.advance(time.Second)
		if r := e.do(a, "GET", "/v1/status", secretBad); r.status == 401 {
			heard++
		}
	}
	if heard < 9 || heard > 10 { // 10, or 9 when rounding delays the last refill
		t.Fatalf("%d guesses answered 401 in a minute, want 10", heard)
	}
}

func TestPeerTableBounded(t *testing.T) {
	c := newClock()
	l := newLimiter(authFailPerMinute, authFailBurst, maxPeers, c.now)
	for i := range 3 * maxPeers {
		l.take(fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255))
		if l.size() > maxPeers {
			t.Fatalf("table grew to %d after %d peers", l.size(), i+1)
		}
	}
	// A refilled bucket is dropped first: a blocked peer stays blocked
	// while idle ones are forgotten.
	l = newLimiter(authFailPerMinute, authFailBurst, 10, c.now)
	for range authFailBurst {
		l.take("attacker")
	}
	for i := range 9 {
		l.take(fmt.Sprint("idle-", i))
	}
	c.advance(time.Minute) // every idle bucket refills; attacker's too
	for range authFailBurst {
		l.take("attacker")
	}
	l.take("newcomer")
	if ok, _ := l.check("attacker"); ok {
		t.Fatal("the blocked peer was forgotten before idle ones")
	}
	if l.size() > 10 {
		t.Fatalf("size %d", l.size())
	}
}

func TestRetryAfterRounding(t *testing.T) {
	for d, want := range map[time.Duration]int{0: 1, time.Millisecond: 1, time.Second: 1, 1001 * time.Millisecond: 2, 6 * time.Second: 6} {
		if got := retryAfter(d); got != want {
			t.Errorf("retryAfter(%v) = %d, want %d", d, got, want)
		}
	}
}
