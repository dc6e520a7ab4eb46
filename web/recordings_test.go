package web

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pbx/appliance/cdr"
	"pbx/appliance/config"
	"pbx/appliance/recording"
)

// recEnv is an API server over a real recording store holding three
// recordings of acme and two of globex.
type recEnv struct {
	*env
	acme  []recording.Sidecar // newest first
	audio []byte              // the WAV of acme[0]
}

func newRecEnv(t *testing.T, mods ...envOption) *recEnv {
	t.Helper()
	dd := t.TempDir()
	store, err := recording.New(recording.Options{DataDir: dd}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	re := &recEnv{}
	base := time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)
	for i := range 5 {
		tenant := "acme"
		if i >= 3 {
			tenant = "globex"
		}
		start := base.Add(time.Duration(i) * time.Minute)
		id := string(cdr.NewID(start))
		audio := []byte("RIFF....WAVEfmt " + strings.Repeat(fmt.Sprint(i), 1000))
		sum := sha256.Sum256(audio)
		sc := recording.Sidecar{ID: id, Tenant: tenant, From: fmt.Sprint(100 + i), To: "200", AnsweredBy: "200", Start: start, End: start.Add(time.Minute),
			Bytes: int64(len(audio)), SHA256: hex.EncodeToString(sum[:])}
		dir := filepath.Join(dd, "recordings", "2026", "11", "21")
		if err := os.MkdirAll(dir, 0o750); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(sc)
		if err := os.WriteFile(filepath.Join(dir, id+".wav"), audio, 0o640); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, id+".json"), b, 0o640); err != nil {
			t.Fatal(err)
		}
		if tenant == "acme" {
			re.acme = append([]recording.Sidecar{sc}, re.acme...)
			re.audio = audio
		}
	}
	mods = append([]envOption{func(_ *config.API, o *Options) { o.Backends.Recordings = store }}, mods...)
	re.env = newEnv(t, mods...)
	return re
}

func TestRecordingsListPagingAndTenants(t *testing.T) {
	e := newRecEnv(t)
	var page struct {
		Recordings []recording.Sidecar `json:"recordings"`
		NextCursor string              `json:"next_cursor"`
	}
	r := e.get("/v1/recordings?limit=2", secretAdmin)
	if r.status != 200 || json.Unmarshal(r.body, &page) != nil || len(page.Recordings) != 2 || page.NextCursor == "" {
		t.Fatalf("first page: %d %s", r.status, r.body)
	}
	if page.Recordings[0].Tenant != "globex" || page.Recordings[0].From != "104" {
		t.Errorf("not newest first: %+v", page.Recordings[0])
	}
	seen := len(page.Recordings)
	for page.NextCursor != "" {
		r = e.get("/v1/recordings?limit=2&cursor="+page.NextCursor, secretAdmin)
		page.Recordings, page.NextCursor = nil, ""
		if r.status != 200 || json.Unmarshal(r.body, &page) != nil {
			t.Fatalf("next page: %d %s", r.status, r.body)
		}
		seen += len(page.Recordings)
	}
	if seen != 5 {
		t.Errorf("paging saw %d recordings, want 5", seen)
	}
	// acme's token sees acme's only; asking for globex is forbidden.
	r = e.get("/v1/recordings", secretAcme)
	page.Recordings = nil
	if r.status != 200 || json.Unmarshal(r.body, &page) != nil || len(page.Recordings) != 3 {
		t.Fatalf("acme's list: %d %s", r.status, r.body)
	}
	for _, sc := range page.Recordings {
		if sc.Tenant != "acme" {
			t.Errorf("acme's token sees %s", sc.Tenant)
		}
	}
	if r := e.get("/v1/recordings?tenant=globex", secretAcme); r.status != 403 {
		t.Errorf("acme asking for globex: %d", r.status)
	}
	for _, tc := range []struct {
		q    string
		want int
	}{{"extension=101", 1}, {"extension=200", 5}, {"number=10", 5}, {"tenant=globex", 2}, {"from=2026-11-21T09:01:00Z&to=2026-11-21T09:03:00Z", 3}} {
		page.Recordings = nil
		r := e.get("/v1/recordings?"+tc.q, secretAdmin)
		if r.status != 200 || json.Unmarshal(r.body, &page) != nil || len(page.Recordings) != tc.want {
			t.Errorf("?%s: %d, %d recordings, want %d", tc.q, r.status, len(page.Recordings), tc.want)
		}
	}
	for _, q := range []string{"limit=1001", "limit=0", "to=2026-11-20T00:00:00Z&from=2026-11-21T00:00:00Z", "cursor=abc", "direction=inbound"} {
		if r := e.get("/v1/recordings?"+q, secretAdmin); r.status != 400 {
			t.Errorf("?%s: %d, want 400", q, r.status)
		}
	}
}

func TestRecordingGetAndAudio(t *testing.T) {
	e := newRecEnv(t)
	sc := e.acme[0]
	path := "/v1/recordings/acme/" + sc.ID
	var got recording.Sidecar
	if r := e.get(path, secretAcme); r.status != 200 || json.Unmarshal(r.body, &got) != nil || got.ID != sc.ID || got.SHA256 != sc.SHA256 {
		t.Fatalf("sidecar: %d %s", r.status, r.body)
	}
	if r := e.get("/v1/recordings/globex/"+sc.ID, secretAdmin); r.status != 404 {
		t.Errorf("acme's recording under globex: %d", r.status)
	}
	if r := e.get("/v1/recordings/globex/"+sc.ID+"/audio", secretAcme); r.status != 404 {
		t.Errorf("acme's token on globex: %d", r.status)
	}
	n := len(e.audio)
	r := e.get(path+"/audio", secretAcme)
	if r.status != 200 || string(r.body) != string(e.audio) || r.header.Get("Content-Type") != "audio/wav" || r.header.Get("ETag") != `"`+sc.SHA256+`"` {
		t.Fatalf("audio: %d, %d bytes, %v", r.status, len(r.body), r.header)
	}
	for _, tc := range []struct {
		rng, want, cr string
	}{
		{"bytes=0-0", string(e.audio[:1]), fmt.Sprintf("bytes 0-0/%d", n)},
		{"bytes=-10", string(e.audio[n-10:]), fmt.Sprintf("bytes %d-%d/%d", n-10, n-1, n)},
		{"bytes=1000-", string(e.audio[1000:]), fmt.Sprintf("bytes 1000-%d/%d", n-1, n)},
	} {
		r := e.do(nil, http.MethodGet, path+"/audio", secretAcme, "Range", tc.rng)
		if r.status != 206 || string(r.body) != tc.want || r.header.Get("Content-Range") != tc.cr {
			t.Errorf("Range %s: %d %q, %d bytes", tc.rng, r.status, r.header.Get("Content-Range"), len(r.body))
		}
	}
	if r := e.do(nil, http.MethodGet, path+"/audio", secretAcme, "Range", fmt.Sprintf("bytes=%d-", n+5)); r.status != 416 {
		t.Errorf("unsatisfiable range: %d", r.status)
	}
	if r := e.do(nil, http.MethodGet, path+"/audio", secretAcme, "If-None-Match", `"`+sc.SHA256+`"`); r.status != 304 {
		t.Errorf("If-None-Match with the sha256: %d", r.status)
	}
	if r := e.do(nil, http.MethodHead, path+"/audio", secretAcme); r.status != 200 || len(r.body) != 0 || r.header.Get("Content-Length") != fmt.Sprint(n) {
		t.Errorf("HEAD: %d, %d bytes, length %q", r.status, len(r.body), r.header.Get("Content-Length"))
	}
	if r := e.get(path+"/audio", scopeSecret("cdr:read")); r.status != 403 {
		t.Errorf("without recordings:read: %d", r.status)
	}
}

func TestRecordingAudioPresignAnswers500(t *testing.T) {
	e := newRecEnv(t, func(a *config.API, _ *Options) { a.Recordings.Presign = true })
	if r := e.get("/v1/recordings/acme/"+e.acme[0].ID+"/audio", secretAdmin); r.status != 500 || r.errCode() != "internal" {
		t.Errorf("presign: %d %s", r.status, r.body)
	}
	if r := e.get("/v1/recordings/acme/"+e.acme[0].ID, secretAdmin); r.status != 200 {
		t.Errorf("sidecar with presign: %d", r.status)
	}
}
