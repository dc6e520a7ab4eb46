package logging

import (
	"bytes"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer safe for the summary timer's goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := strings.TrimSuffix(l.b.String(), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// count returns how many lines contain substr.
func (l *lockedBuffer) count(substr string) int {
	n := 0
	for _, line := range l.lines() {
		if strings.Contains(line, substr) {
			n++
		}
	}
	return n
}

// fakeClock is a time source the test moves by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time       { return c.t }
func (c *fakeClock) add(d time.Duration)  { c.t = c.t.Add(d) }
func newFakeClock() *fakeClock            { return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }
func (c *fakeClock) install(h *RateLimit) { h.st.now = c.now }
func testLimits(global float64, gb int) Limits {
	return Limits{PerKind: 10, PerKindBurst: 20, Global: global, GlobalBurst: gb, Interval: time.Hour, MaxKinds: 64}
}

func newLimited(lim Limits) (*slog.Logger, *RateLimit, *lockedBuffer, *fakeClock) {
	buf := &lockedBuffer{}
	h := NewRateLimit(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}), lim)
	c := newFakeClock()
	c.install(h)
	return slog.New(h), h, buf, c
}

func TestRateLimitPerKind(t *testing.T) {
	log, h, buf, clock := newLimited(testLimits(1000, 1000))
	for range 100 {
		log.Warn("flood", "src", "192.0.2.1:5060")
	}
	if n := buf.count(`msg=flood`); n != 20 {
		t.Fatalf("a burst of 100 warnings of one kind wrote %d, want the burst of 20", n)
	}
	log.Warn("other")
	for range 50 {
		log.Info("call answered")
	}
	if n := buf.count(`msg=other`); n != 1 {
		t.Errorf("another kind wrote %d lines during the flood, want 1", n)
	}
	if n := buf.count(`msg="call answered"`); n != 50 {
		t.Errorf("info records without a kind are not limited: %d of 50 written", n)
	}

	clock.add(time.Second)
	for range 50 {
		log.Warn("flood", "src", "192.0.2.1:5060")
	}
	if n := buf.count(`msg=flood`); n != 30 {
		t.Fatalf("after a second, %d flood lines in all, want 20 + 10", n)
	}
	if n := buf.count("suppressed"); n != 0 {
		t.Fatalf("summary written before the interval: %v", buf.lines())
	}
	h.Flush(t.Context())
	want := `level=WARN msg="suppressed 120 similar messages" kind="WARN flood" suppressed=120`
	if n := buf.count(want); n != 1 {
		t.Fatalf("want one summary %q, got:\n%s", want, strings.Join(buf.lines(), "\n"))
	}
	h.Flush(t.Context())
	if n := buf.count("suppressed"); n != 1 {
		t.Errorf("a second flush with nothing suppressed wrote a summary")
	}
}

func TestRateLimitExplicitKind(t *testing.T) {
	log, h, buf, _ := newLimited(testLimits(1000, 1000))
	for i := range 30 {
		// Different messages, one kind: they share a bucket.
		log.Debug("malformed "+strings.Repeat("x", i), KindKey, "sip.malformed")
	}
	comp := log.With("component", "sip", KindKey, "sip.unknown_method")
	for range 25 {
		comp.Info("unknown method", "method", "FOO")
	}
	if n := buf.count("kind=sip.malformed"); n != 20 {
		t.Errorf("kind sip.malformed wrote %d, want 20", n)
	}
	if n := buf.count("kind=sip.unknown_method"); n != 20 {
		t.Errorf("kind given through With wrote %d, want 20", n)
	}
	h.Flush(t.Context())
	for _, line := range buf.lines() {
		if !strings.Contains(line, "suppressed ") {
			continue
		}
		if c := strings.Count(line, "kind="); c != 1 {
			t.Errorf("summary with %d kind attributes: %s", c, line)
		}
	}
	if buf.count(`msg="suppressed 10 similar messages" kind=sip.malformed suppressed=10`) != 1 ||
		buf.count(`level=DEBUG`) != 21 {
		t.Errorf("debug kind summary missing:\n%s", strings.Join(buf.lines(), "\n"))
	}
	if buf.count(`level=INFO msg="suppressed 5 similar messages" component=sip kind=sip.unknown_method suppressed=5`) != 1 {
		t.Errorf("summary lost the logger's attributes:\n%s", strings.Join(buf.lines(), "\n"))
	}
}

func TestRateLimitGlobalCap(t *testing.T) {
	lim := testLimits(50, 100)
	log, h, buf, clock := newLimited(lim)
	kinds := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}
	// 10 s of 2,000 records a second spread over 10 kinds: each kind alone
	// is allowed 10/s, together they are held to the global 50/s.
	const seconds, perSecond = 10, 2000
	for i := range seconds * perSecond {
		log.Error("boom", KindKey, kinds[i%len(kinds)])
		clock.add(time.Second / perSecond)
	}
	written := len(buf.lines())
	max := int(lim.Global*seconds) + lim.GlobalBurst + len(kinds)
	if written > max || written < int(lim.Global*seconds) {
		t.Fatalf("%d lines over %ds, want between %d and %d", written, seconds, int(lim.Global*seconds), max)
	}
	if rate := float64(written) / seconds; rate >= 100 {
		t.Errorf("%.0f lines/s, want under 100", rate)
	}
	for _, k := range kinds {
		if buf.count("kind="+k) == 0 {
			t.Errorf("kind %s never written", k)
		}
	}
	// A quiet kind's first line passes although the flood keeps the global
	// bucket empty.
	log.Error("rare event")
	if buf.count(`msg="rare event"`) != 1 {
		t.Errorf("the first line of a quiet kind was suppressed by the global cap")
	}
	h.Flush(t.Context())
	total := 0
	for _, line := range buf.lines() {
		if i := strings.Index(line, " suppressed="); i >= 0 {
			n, err := strconv.Atoi(strings.Fields(line[i+len(" suppressed="):])[0])
			if err != nil {
				t.Fatal(err)
			}
			total += n
		}
	}
	if total+written != seconds*perSecond {
		t.Errorf("written %d + suppressed %d != %d records", written, total, seconds*perSecond)
	}
}

func TestRateLimitSummaryTimer(t *testing.T) {
	buf := &lockedBuffer{}
	lim := testLimits(1000, 1000)
	lim.Interval = 20 * time.Millisecond
	log := slog.New(NewRateLimit(slog.NewTextHandler(buf, nil), lim))
	for range 25 {
		log.Warn("flood")
	}
	deadline := time.Now().Add(5 * time.Second)
	for buf.count(`msg="suppressed 5 similar messages"`) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no summary within 5s:\n%s", strings.Join(buf.lines(), "\n"))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRateLimitMaxKinds(t *testing.T) {
	lim := testLimits(1e6, 1e6)
	lim.MaxKinds = 3
	log, h, buf, _ := newLimited(lim)
	for i := range 100 {
		for range 30 {
			log.Warn("dynamic " + strings.Repeat("y", i))
		}
	}
	if n := len(h.st.kinds); n != 4 {
		t.Errorf("%d kinds tracked, want 3 and the overflow", n)
	}
	h.Flush(t.Context())
	if buf.count(`kind=overflow`) != 1 {
		t.Errorf("no overflow summary:\n%s", strings.Join(buf.lines()[len(buf.lines())-3:], "\n"))
	}
}

func TestRateLimitForgetsIdleKinds(t *testing.T) {
	lim := testLimits(1e6, 1e6)
	lim.MaxKinds = 3
	log, h, buf, clock := newLimited(lim)
	log.Warn("old one")
	log.Warn("old two")
	log.Warn("old three")
	// Long after, a new kind takes the place of an idle one instead of
	// sharing the overflow bucket.
	clock.add(time.Minute)
	for range 30 {
		log.Warn("new")
	}
	if n := buf.count(`msg=new`); n != 20 {
		t.Errorf("new kind wrote %d, want its own burst of 20", n)
	}
	if _, ok := h.st.kinds[overflowKind]; ok {
		t.Errorf("idle kinds were kept and the new one overflowed")
	}
}
