package moh

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"pbx/appliance/config"
	"pbx/rtpcore"
	"pbx/sipcore/b2bua"
)

// tone returns n samples all of value v: each file of a test is told
// apart by its value.
func tone(v int16, n int) []int16 {
	pcm := make([]int16, n)
	for i := range pcm {
		pcm[i] = v
	}
	return pcm
}

func writeWAV(t *testing.T, path string, pcm []int16) {
	t.Helper()
	w, err := rtpcore.CreateWAV(path, 8000, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteSamples(pcm); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// value is the constant sample value of pcm, or -1 for silence (nil).
func value(pcm []int16) int16 {
	if pcm == nil {
		return -1
	}
	return pcm[0]
}

// fixture is a configuration root with System classes default (1), jazz
// (2), broken (a file that is no WAV), gone (a missing file); tenant acme
// overrides default (10) and jazz (11) and adds sales (12) and its own
// broken one, tenant solo has a block without default, and tenant bare
// none. Paths are relative to the root, but for sales (absolute).
func fixture(t *testing.T) (*config.Config, *bytes.Buffer) {
	t.Helper()
	root := t.TempDir()
	abs := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "moh"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]int16{"sys-default": 1, "sys-jazz": 2, "acme-default": 10, "acme-jazz": 11, "solo-rock": 20} {
		writeWAV(t, filepath.Join(root, "moh", name+".wav"), tone(v, 800))
	}
	writeWAV(t, filepath.Join(abs, "sales.wav"), tone(12, 800))
	if err := os.WriteFile(filepath.Join(root, "moh", "broken.wav"), []byte("not a wav file at all, not even close"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{Root: root}
	cfg.System.MOH = &config.MOH{Default: "moh/sys-default.wav", Classes: map[string]string{
		"jazz": "moh/sys-jazz.wav", "broken": "moh/broken.wav", "gone": "moh/missing.wav", "solo-only": "moh/sys-jazz.wav",
	}}
	acme := &config.Tenant{MOH: &config.MOH{Default: "moh/acme-default.wav", Classes: map[string]string{
		"jazz": "moh/acme-jazz.wav", "sales": filepath.Join(abs, "sales.wav"), "tbroken": "moh/broken.wav",
	}}}
	acme.Name = "acme"
	solo := &config.Tenant{MOH: &config.MOH{Classes: map[string]string{"rock": "moh/solo-rock.wav"}}}
	solo.Name = "solo"
	bare := &config.Tenant{}
	bare.Name = "bare"
	cfg.Tenants = []*config.Tenant{acme, solo, bare}
	alice := &config.Account{Extension: "101", MOHClass: "jazz"}
	alice.Name, alice.Tenant = "alice", "acme"
	bob := &config.Account{Extension: "102"}
	bob.Name, bob.Tenant = "bob", "acme"
	carol := &config.Account{Extension: "103", MOHClass: "sales"}
	carol.Name, carol.Tenant = "carol", "acme"
	cfg.Accounts = []*config.Account{alice, bob, carol}
	return cfg, &bytes.Buffer{}
}

func load(t *testing.T, cfg *config.Config, buf *bytes.Buffer) *Library {
	t.Helper()
	return Load(cfg, slog.New(slog.NewTextHandler(buf, nil)))
}

// TestClassResolution: every step of the fallback chain.
func TestClassResolution(t *testing.T) {
	cfg, logs := fixture(t)
	l := load(t, cfg, logs)
	for _, tc := range []struct {
		name, tenant, class string
		want                int16
	}{
		{"tenant default overrides the System's", "acme", "default", 10},
		{"empty class is default", "acme", "", 10},
		{"tenant class overrides the System's", "acme", "jazz", 11},
		{"tenant adds a class, absolute path", "acme", "sales", 12},
		{"System class seen from a tenant", "acme", "solo-only", 2},
		{"unreadable tenant file falls back to the tenant default", "acme", "tbroken", 10},
		{"unreadable System file falls back to the tenant default", "acme", "broken", 10},
		{"missing System file falls back to the tenant default", "acme", "gone", 10},
		{"unknown class falls back to default", "acme", "nope", 10},
		{"tenant without default gets the System's", "solo", "default", 1},
		{"tenant class of a tenant without default", "solo", "rock", 20},
		{"tenant without a block gets the System's classes", "bare", "jazz", 2},
		{"unreadable file falls back to the System default", "bare", "broken", 1},
		{"another tenant's class is not seen", "bare", "sales", 1},
		{"unknown tenant gets the System's", "", "jazz", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := value(l.Class(tc.tenant, tc.class)); got != tc.want {
				t.Fatalf("Class(%q, %q) = %d, want %d", tc.tenant, tc.class, got, tc.want)
			}
		})
	}
	// One log line per unreadable file, each naming its class; the file
	// two classes share is read and logged once.
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("log lines %q, want one per unreadable file", lines)
	}
	for _, want := range []string{"moh/broken.wav", "moh/missing.wav"} {
		if !slices.ContainsFunc(lines, func(s string) bool { return strings.Contains(s, want) && strings.Contains(s, "level=WARN") }) {
			t.Fatalf("no warning for %s in %q", want, lines)
		}
	}
}

// TestClassSilence: when the default class is unreadable or there is none,
// the held party hears silence (nil).
func TestClassSilence(t *testing.T) {
	cfg, logs := fixture(t)
	cfg.System.MOH.Default = "moh/broken.wav"
	cfg.Tenants[0].MOH.Default = "moh/missing-too.wav"
	l := load(t, cfg, logs)
	for _, tc := range []struct{ tenant, class string }{
		{"acme", "default"}, {"acme", "tbroken"}, {"bare", "default"}, {"bare", "gone"}, {"solo", "nope"},
	} {
		if got := l.Class(tc.tenant, tc.class); got != nil {
			t.Fatalf("Class(%q, %q) = %d, want silence", tc.tenant, tc.class, value(got))
		}
	}
	// A readable class still plays.
	if got := value(l.Class("acme", "jazz")); got != 11 {
		t.Fatalf("jazz %d", got)
	}
	// Nothing configured anywhere: silence, and no log.
	var quiet bytes.Buffer
	empty := Load(&config.Config{Root: t.TempDir()}, slog.New(slog.NewTextHandler(&quiet, nil)))
	if got := empty.Class("acme", "default"); got != nil || quiet.Len() != 0 {
		t.Fatalf("no moh anywhere: %v, logs %q", got, quiet.String())
	}
}

// TestFilesShared: a file is decoded once and the same samples serve every
// class and tenant naming it.
func TestFilesShared(t *testing.T) {
	cfg, logs := fixture(t)
	l := load(t, cfg, logs)
	a, b := l.Class("bare", "jazz"), l.Class("acme", "solo-only")
	if len(a) == 0 || &a[0] != &b[0] {
		t.Fatalf("the file of two classes was decoded twice")
	}
	if c := l.Class("bare", "jazz"); &c[0] != &a[0] {
		t.Fatalf("a class is decoded again per call")
	}
}

// TestMusicPicksTheHoldersClass: the InboundRoute's class first, else the
// holding account's (caller by username, callee by the extension that
// answered), else default, in the holder's tenant.
func TestMusicPicksTheHoldersClass(t *testing.T) {
	cfg, logs := fixture(t)
	l := load(t, cfg, logs)
	internal := b2bua.CallInfo{
		Tenant: "acme", AnsweredBy: "102",
		Caller: b2bua.Caller{Kind: b2bua.KindEndpoint, Tenant: "acme", Username: "alice", Extension: "101"},
	}
	fromTrunk := b2bua.CallInfo{Tenant: "acme", AnsweredBy: "103", Caller: b2bua.Caller{Kind: b2bua.KindTrunk, Trunk: "carrier"}}
	routed := fromTrunk
	routed.AnsweredBy = "101"
	routed.Meta.Extra = map[string]string{ExtraClass: "sales"}
	interTenant := internal
	interTenant.Tenant = "bare"
	interTenant.AnsweredBy = "555"
	for _, tc := range []struct {
		name     string
		call     b2bua.CallInfo
		byCaller bool
		want     int16
	}{
		{"caller alice holds: her jazz", internal, true, 11},
		{"callee bob holds: he names none, default", internal, false, 10},
		{"callee carol holds a trunk call: her sales", fromTrunk, false, 12},
		{"the trunk caller holds: default", fromTrunk, true, 10},
		{"the route's class beats alice's", routed, false, 12},
		{"the route's class when the trunk holds", routed, true, 12},
		{"caller of another tenant holds: her tenant's class", interTenant, true, 11},
		{"callee of a tenant without block holds: System default", interTenant, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := value(l.Music(tc.call, tc.byCaller)); got != tc.want {
				tn, c := l.Resolve(tc.call, tc.byCaller)
				t.Fatalf("music %d (%s/%s), want %d", got, tn, c, tc.want)
			}
		})
	}
}
