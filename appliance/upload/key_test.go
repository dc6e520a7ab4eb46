package upload

import (
	"strings"
	"testing"
	"time"
)

func TestKeyEveryToken(t *testing.T) {
	v := KeyVars{Tenant: "acme", CallID: "20261121T151230.123Z-k3j9q2ab", Ext: "200", Start: time.Date(2026, 3, 7, 9, 45, 0, 0, time.UTC)}
	got := Key("{tenant}/{kind}/{yyyy}/{mm}/{dd}/{HH}{MM}/{ext}-{callid}.wav", KindAudio, v)
	if want := "acme/audio/2026/03/07/0945/200-20261121T151230.123Z-k3j9q2ab.wav"; got != want {
		t.Errorf("key %q, want %q", got, want)
	}
	ks := KeysFor("{tenant}/recordings/{yyyy}/{mm}/{dd}/{callid}.wav", v)
	if ks.Audio != "acme/recordings/2026/03/07/20261121T151230.123Z-k3j9q2ab.wav" || ks.Meta != "acme/recordings/2026/03/07/20261121T151230.123Z-k3j9q2ab.json" {
		t.Errorf("default template keys %+v", ks)
	}
	if ks := KeysFor("{tenant}/{callid}", v); ks.Meta != ks.Audio+".json" {
		t.Errorf("no .wav, no {kind}: %+v", ks)
	}
	if ks := KeysFor("{tenant}/{kind}/{callid}.wav", v); ks.Audio != "acme/audio/20261121T151230.123Z-k3j9q2ab.wav" || ks.Meta != "acme/meta/20261121T151230.123Z-k3j9q2ab.wav" {
		t.Errorf("with {kind}: %+v", ks)
	}
}

func TestKeySanitisesValues(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"..", "_"}, {".", "_"}, {"", "_"}, {"../other", ".._other"}, {"a/b", "a_b"}, {"x\x00y\r\n", "x_y__"},
		{"+1 555", "+1_555"}, {"ümlaut", "__mlaut"}, {"ok.-_+9", "ok.-_+9"},
	} {
		if got := Sanitize(tc.in); got != tc.want {
			t.Errorf("Sanitize(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// No value can escape its tenant's prefix.
	v := KeyVars{Tenant: "..", CallID: "../../globex/x", Ext: "/", Start: time.Now()}
	k := Key("{tenant}/{ext}/{callid}.wav", KindAudio, v)
	if strings.Count(k, "/") != 2 || strings.Contains(k, "/../") || strings.HasPrefix(k, "../") {
		t.Errorf("escaping key %q", k)
	}
}
