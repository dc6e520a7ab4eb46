package notice

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"pbx/appliance/config"
)

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestBackoffDoublesWithJitterUpToTheCap(t *testing.T) {
	b := openBox(t, t.TempDir(), settingsFor(t, "127.0.0.1:1", "none"), Options{BackoffMin: 30 * time.Second, BackoffMax: 30 * time.Minute})
	for n, want := range map[int]time.Duration{1: 30 * time.Second, 2: time.Minute, 3: 2 * time.Minute, 7: 30 * time.Minute, 40: 30 * time.Minute} {
		for range 50 {
			if d := b.backoff(n); d < want/2 || d > want {
				t.Fatalf("attempt %d: wait %v, want within [%v, %v]", n, d, want/2, want)
			}
		}
	}
}

func TestStateMachineRetriesThenGivesUpAfterSevenDays(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	dir := t.TempDir()
	// Nothing listens on port 1: every attempt fails at once.
	b := openBox(t, dir, settingsFor(t, "127.0.0.1:1", "none"), Options{Now: c.now, BackoffMin: 30 * time.Second, BackoffMax: 30 * time.Minute})
	if err := b.Enqueue(testNotice("")); err != nil {
		t.Fatal(err)
	}
	due, _ := b.due()
	if len(due) != 1 || due[0].State != StatePending || due[0].Attempts != 0 {
		t.Fatalf("a new job: %+v", due)
	}
	b.attempt(t.Context(), due[0])
	jobs := b.jobFiles(t, "pending")
	if len(jobs) != 1 || jobs[0].Attempts != 1 || jobs[0].State != StatePending || jobs[0].LastError == "" {
		t.Fatalf("after a failed attempt: %+v", jobs)
	}
	if wait := jobs[0].NextAttemptAt.Sub(c.now()); wait < 15*time.Second || wait > 30*time.Second {
		t.Errorf("first retry in %v", wait)
	}
	if due, next := b.due(); len(due) != 0 || !next.Equal(jobs[0].NextAttemptAt) {
		t.Errorf("due before its time: %d, next %v", len(due), next)
	}
	c.add(7*24*time.Hour - time.Second)
	due, _ = b.due()
	b.attempt(t.Context(), due[0])
	if len(b.jobFiles(t, "failed")) != 0 || b.Pending() != 1 {
		t.Fatal("given up before seven days")
	}
	c.add(time.Hour)
	due, _ = b.due()
	b.attempt(t.Context(), due[0])
	failed := b.jobFiles(t, "failed")
	if len(failed) != 1 || failed[0].Attempts != 3 || len(b.jobFiles(t, "pending")) != 0 || b.Pending() != 0 {
		t.Fatalf("after seven days: %d failed, %d pending", len(failed), b.Pending())
	}
	if !strings.Contains(b.logs.String(), "level=ERROR") || !strings.Contains(b.logs.String(), "given up") {
		t.Errorf("no error log line:\n%s", b.logs.String())
	}
}

func TestOpenQuarantinesAndCleans(t *testing.T) {
	dir := t.TempDir()
	pending := filepath.Join(dir, "notices", "pending")
	os.MkdirAll(pending, 0o750)
	os.WriteFile(filepath.Join(pending, "garbage.json"), []byte("{not json"), 0o640)
	os.WriteFile(filepath.Join(pending, "abc.json"), []byte(`{"id":"abc","state":"lost","notice":{"to":"a@b.c"},"created_at":"2026-01-01T00:00:00Z"}`), 0o640)
	os.WriteFile(filepath.Join(pending, ".job-123"), []byte("half"), 0o640)
	b := openBox(t, dir, settingsFor(t, "127.0.0.1:1", "none"), Options{})
	if b.Pending() != 0 {
		t.Errorf("%d jobs loaded", b.Pending())
	}
	for _, name := range []string{"garbage.json", "abc.json"} {
		if _, err := os.Stat(filepath.Join(dir, "notices", "failed", name)); err != nil {
			t.Errorf("%s not quarantined: %v", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(pending, ".job-123")); !os.IsNotExist(err) {
		t.Error("an interrupted rewrite was left")
	}
}

func TestEnqueueRefusesWhatCannotBeSent(t *testing.T) {
	b := openBox(t, t.TempDir(), settingsFor(t, "127.0.0.1:1", "none"), Options{})
	n := testNotice("")
	n.To = "not an address"
	if err := b.Enqueue(n); err == nil {
		t.Error("a bad address was queued")
	}
	b.relay.p.Store(nil)
	if err := b.Enqueue(testNotice("")); err == nil || !strings.Contains(err.Error(), "no SMTP relay") {
		t.Errorf("no relay: %v", err)
	}
	if b.Pending() != 0 || len(b.jobFiles(t, "pending")) != 0 {
		t.Error("a refused notice was written")
	}
}

func TestConfigSettingsMergesTheTenantFieldByField(t *testing.T) {
	cfg, rep, err := config.Load("../../config/testdata/good/full", config.Options{Getenv: func(string) string { return "" }})
	if err != nil || !rep.OK() {
		t.Fatalf("load: %v %v", err, rep)
	}
	get := ConfigSettings(func() *config.Config { return cfg })
	s := get("acme")
	if s == nil || s.Host != "mail.acme.example" || s.From != "voicemail@acme.example" || s.Security != "starttls" ||
		s.Username != "pbx" || s.HELO != "pbx.example.com" || time.Duration(s.MaxAttach) != 2*time.Minute {
		t.Errorf("acme's effective relay: %+v", s)
	}
	if get("no-such-tenant") != nil {
		t.Error("an unknown tenant has a relay")
	}
}

func TestEnqueueOfTheSameMessageIsIdempotentWhileQueued(t *testing.T) {
	b := openBox(t, t.TempDir(), settingsFor(t, "127.0.0.1:1", "none"), Options{})
	n := testNotice("")
	for range 2 {
		if err := b.Enqueue(n); err != nil {
			t.Fatal(err)
		}
	}
	other := n
	other.Extension = "1002"
	if err := b.Enqueue(other); err != nil {
		t.Fatal(err)
	}
	if b.Pending() != 2 || len(b.jobFiles(t, "pending")) != 2 {
		t.Errorf("%d jobs for two messages", b.Pending())
	}
}
