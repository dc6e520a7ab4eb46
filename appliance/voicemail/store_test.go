package voicemail

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"pbx/appliance/cdr"
	"pbx/appliance/config"
)

func TestStoreWriteListSaveDelete(t *testing.T) {
	e := newTestEnv(t, config.Voicemail{})
	t0 := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
	a := e.put(t, "acme", "201", t0, "5551000", 800)
	b := e.put(t, "acme", "201", t0.Add(time.Hour), "5552000", 1600)
	e.put(t, "acme", "202", t0, "5553000", 800)
	e.put(t, "globex", "201", t0, "5554000", 800)

	got, err := e.store.Get("acme", "201", b.ID)
	if err != nil || got.From != "5552000" || got.DurationMS != 200 || got.Folder != FolderNew || got.HeardAt != nil || got.Extension != "201" {
		t.Fatalf("get: %+v %v", got, err)
	}
	raw, _ := os.ReadFile(filepath.Join(e.dir, "acme", "voicemail", "201", b.ID+".json"))
	var fields map[string]any
	if err := json.Unmarshal(raw, &fields); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "tenant", "extension", "from", "from_name", "call_id", "received_at", "duration_ms", "folder", "heard_at"} {
		if _, ok := fields[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, raw)
		}
	}
	pcm, err := e.store.Samples("acme", "201", b.ID)
	if err != nil || len(pcm) != 1600 || pcm[0] != 1000 {
		t.Fatalf("samples: %d %v", len(pcm), err)
	}
	ms, _ := e.store.List("acme", "201")
	if len(ms) != 2 || ms[0].ID != b.ID || ms[1].ID != a.ID {
		t.Fatalf("list of one mailbox, newest first: %+v", ms)
	}
	if ms, _ := e.store.List("acme", ""); len(ms) != 3 {
		t.Fatalf("list of a tenant: %d", len(ms))
	}
	if ms, _ := e.store.List("", ""); len(ms) != 4 {
		t.Fatalf("list of everything: %d", len(ms))
	}
	if len(e.deposit) != 4 || e.deposit[1].ID != b.ID {
		t.Fatalf("deposit callbacks: %+v", e.deposit)
	}

	if err := e.store.Save("acme", "201", a.ID); err != nil {
		t.Fatal(err)
	}
	if n, s, _ := e.store.Counts("acme", "201"); n != 1 || s != 1 {
		t.Fatalf("counts after save: %d new %d saved", n, s)
	}
	if m, _ := e.store.Get("acme", "201", a.ID); m.HeardAt == nil || m.Folder != FolderSaved {
		t.Fatalf("saved message: %+v", m)
	}
	if err := e.store.MarkHeard("acme", "201", b.ID); err != nil {
		t.Fatal(err)
	}
	if m, _ := e.store.Get("acme", "201", b.ID); m.HeardAt == nil || m.Folder != FolderNew {
		t.Fatalf("heard message stays new: %+v", m)
	}
	if full, _ := e.store.Full("acme", "201", 2); !full {
		t.Fatal("two messages fill a quota of 2")
	}
	if full, _ := e.store.Full("acme", "201", 3); full {
		t.Fatal("two messages do not fill a quota of 3")
	}

	e.changes = nil
	if err := e.store.Delete("acme", "201", a.ID); err != nil {
		t.Fatal(err)
	}
	if fs := e.files(t, "acme", "201"); slices.Contains(fs, a.ID+".wav") || slices.Contains(fs, a.ID+".json") || len(fs) != 2 {
		t.Fatalf("after delete: %v", fs)
	}
	if !slices.Equal(e.changes, []string{"acme/201"}) {
		t.Fatalf("change callbacks: %v", e.changes)
	}
	if err := e.store.Delete("acme", "201", a.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
}

func TestStorePathSafety(t *testing.T) {
	e := newTestEnv(t, config.Voicemail{})
	id := string(cdr.NewID(time.Now()))
	for _, c := range []struct{ tenant, ext, id string }{
		{"..", "201", id}, {"acme/..", "201", id}, {"acme", "..", id}, {"acme", "../202", id},
		{"acme", "201", "../" + id}, {"acme", "201", "x"}, {"", "201", id}, {"acme", "", id}, {"acme", "2 1", id},
	} {
		if _, err := e.store.Get(c.tenant, c.ext, c.id); !errors.Is(err, ErrInvalid) {
			t.Errorf("Get(%q,%q,%q): %v", c.tenant, c.ext, c.id, err)
		}
		if err := e.store.Delete(c.tenant, c.ext, c.id); !errors.Is(err, ErrInvalid) {
			t.Errorf("Delete(%q,%q,%q): %v", c.tenant, c.ext, c.id, err)
		}
		if _, err := e.store.Begin(Message{ID: c.id, Tenant: c.tenant, Extension: c.ext}); !errors.Is(err, ErrInvalid) {
			t.Errorf("Begin(%q,%q,%q): %v", c.tenant, c.ext, c.id, err)
		}
	}
	if _, err := e.store.Get("acme", "201", id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a valid unknown message: %v", err)
	}
}

// crash leaves rec as a process killed mid-recording would: the file is
// closed without its header being finalised.
func crash(rec *Recorder) { rec.f.Close() }

func TestRecoveryPromotesTornTempFile(t *testing.T) {
	e := newTestEnv(t, config.Voicemail{})
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	id := string(cdr.NewID(at))
	rec, err := e.store.Begin(Message{ID: id, Tenant: "acme", Extension: "201", From: "5557777", FromName: "Bob", ReceivedAt: at})
	if err != nil {
		t.Fatal(err)
	}
	said := flat(loud(50, 3000)) // one second
	if err := rec.Write(said); err != nil {
		t.Fatal(err)
	}
	crash(rec)
	// A torn write: half a sample at the end.
	f, _ := os.OpenFile(filepath.Join(boxDir(e.dir, "acme", "201"), "."+id+tmpWAVSuffix), os.O_WRONLY|os.O_APPEND, 0)
	_, _ = f.Write([]byte{0x7f})
	f.Close()

	// A second recording too short to keep, a finished WAV whose JSON was
	// never written, a JSON whose audio is gone, and a torn greeting.
	short := string(cdr.NewID(at.Add(time.Minute)))
	rs, _ := e.store.Begin(Message{ID: short, Tenant: "acme", Extension: "201"})
	_ = rs.Write(flat(loud(5, 3000)))
	crash(rs)
	nojson := e.put(t, "acme", "202", at, "5550000", 800)
	// (the crash came after the rename: the recording's metadata is still there)
	d202 := boxDir(e.dir, "acme", "202")
	_ = os.Rename(filepath.Join(d202, nojson.ID+".json"), filepath.Join(d202, "."+nojson.ID+recSuffix))
	orphan := string(cdr.NewID(at.Add(2 * time.Minute)))
	_ = os.WriteFile(filepath.Join(boxDir(e.dir, "acme", "202"), orphan+".json"), []byte("{}"), 0o640)
	g, _ := e.store.BeginGreeting("acme", "201")
	_ = g.Write(flat(loud(5, 3000)))
	crash(g)
	// A metadata write cut before its rename (datadir.WriteFile's
	// temporary copy).
	_ = os.WriteFile(filepath.Join(boxDir(e.dir, "acme", "201"), "."+id+".json.4711.tmp"), []byte("{"), 0o640)

	var deposited []Message
	st, err := Open(Options{DataDir: e.dir, MinMessage: 500 * time.Millisecond, OnDeposit: func(m Message, _ string) { deposited = append(deposited, m) }}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.Get("acme", "201", id)
	if err != nil || m.From != "5557777" || m.FromName != "Bob" || m.DurationMS != 1000 || !m.ReceivedAt.Equal(at) || m.Folder != FolderNew {
		t.Fatalf("promoted message: %+v %v", m, err)
	}
	raw, _ := os.ReadFile(filepath.Join(boxDir(e.dir, "acme", "201"), id+".wav"))
	if len(raw) != wavHeaderLen+2*len(said) || binary.LittleEndian.Uint32(raw[40:]) != uint32(2*len(said)) || binary.LittleEndian.Uint32(raw[4:]) != uint32(36+2*len(said)) {
		t.Fatalf("repaired WAV: %d bytes, data size %d", len(raw), binary.LittleEndian.Uint32(raw[40:]))
	}
	pcm, _ := st.Samples("acme", "201", id)
	if !slices.Equal(pcm, said) {
		t.Fatal("the promoted audio is not what was said")
	}
	if fs := e.files(t, "acme", "201"); !slices.Equal(fs, []string{id + ".json", id + ".wav"}) {
		t.Fatalf("mailbox 201 after recovery: %v", fs)
	}
	if m, err := st.Get("acme", "202", nojson.ID); err != nil || m.DurationMS != 100 || m.From != "5550000" {
		t.Fatalf("WAV without JSON: %+v %v", m, err)
	}
	if fs := e.files(t, "acme", "202"); len(fs) != 2 {
		t.Fatalf("mailbox 202 after recovery: %v", fs)
	}
	if len(deposited) != 2 {
		t.Fatalf("recovered messages notified: %+v", deposited)
	}
}

func TestSweepAndJanitor(t *testing.T) {
	e := newTestEnv(t, config.Voicemail{})
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	e.store.opts.Now = func() time.Time { return now }
	old := e.put(t, "acme", "201", now.Add(-40*24*time.Hour), "1", 160)
	e.put(t, "acme", "201", now.Add(-10*24*time.Hour), "2", 160)
	oldG := e.put(t, "globex", "300", now.Add(-31*24*time.Hour), "3", 160)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // one pass, then return
	e.store.Janitor(ctx, 30*24*time.Hour)
	ms, _ := e.store.List("", "")
	if len(ms) != 1 || ms[0].From != "2" {
		t.Fatalf("after the janitor: %+v", ms)
	}
	for _, m := range []Message{old, oldG} {
		if _, err := os.Stat(filepath.Join(boxDir(e.dir, m.Tenant, m.Extension), m.ID+".wav")); !os.IsNotExist(err) {
			t.Fatalf("%s still there: %v", m.ID, err)
		}
	}
	// Retention 0 keeps everything.
	e.store.Janitor(ctx, 0)
	if n, _ := e.store.Sweep(now.Add(-20 * 24 * time.Hour)); n != 0 {
		t.Fatalf("a second sweep removed %d", n)
	}
}

func TestBeginRefusesAnExistingMessage(t *testing.T) {
	e := newTestEnv(t, config.Voicemail{})
	m := e.put(t, "acme", "201", time.Now().UTC(), "1", 160)
	if _, err := e.store.Begin(Message{ID: m.ID, Tenant: "acme", Extension: "201"}); !errors.Is(err, ErrExists) {
		t.Fatalf("second Begin of %s: %v", m.ID, err)
	}
	if pcm, _ := e.store.Samples("acme", "201", m.ID); len(pcm) != 160 {
		t.Fatalf("the message changed: %d samples", len(pcm))
	}
}
