package web

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pbx/appliance/cdr"
	"pbx/appliance/config"
	"pbx/appliance/voicemail"
)

// vmEnv is an API server over a real voicemail store holding two messages
// of acme 201, one of acme 202 and one of globex 201.
type vmEnv struct {
	*env
	store *voicemail.Store
	dir   string
	acme  []voicemail.Message // of acme 201, newest first
}

func newVMEnv(t *testing.T) *vmEnv {
	t.Helper()
	dd := t.TempDir()
	store, err := voicemail.Open(voicemail.Options{DataDir: dd}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ve := &vmEnv{store: store, dir: dd}
	base := time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)
	for i, box := range []string{"acme/201", "acme/201", "acme/202", "globex/201"} {
		tenant, ext, _ := strings.Cut(box, "/")
		at := base.Add(time.Duration(i) * time.Minute)
		rec, err := store.Begin(voicemail.Message{ID: string(cdr.NewID(at)), Tenant: tenant, Extension: ext, From: fmt.Sprint(5550 + i), ReceivedAt: at})
		if err != nil {
			t.Fatal(err)
		}
		pcm := make([]int16, 4000)
		for j := range pcm {
			pcm[j] = int16(j*(i+1)) % 3000
		}
		_ = rec.Write(pcm)
		m, err := rec.Commit(int64(len(pcm)))
		if err != nil {
			t.Fatal(err)
		}
		if box == "acme/201" {
			ve.acme = append([]voicemail.Message{*m}, ve.acme...)
		}
	}
	ve.env = newEnv(t, func(_ *config.API, o *Options) { o.Backends.Voicemail = store })
	return ve
}

func TestVoicemailListAndTenants(t *testing.T) {
	e := newVMEnv(t)
	list := func(path, token string) []voicemail.Message {
		t.Helper()
		r := e.get(path, token)
		var body struct {
			Messages []voicemail.Message `json:"messages"`
		}
		if r.status != 200 || json.Unmarshal(r.body, &body) != nil || body.Messages == nil {
			t.Fatalf("%s: %d %s", path, r.status, r.body)
		}
		return body.Messages
	}
	if ms := list("/v1/voicemail", secretAdmin); len(ms) != 4 || ms[0].Tenant != "globex" {
		t.Fatalf("all, newest first: %+v", ms)
	}
	if ms := list("/v1/voicemail", secretAcme); len(ms) != 3 || ms[0].Tenant != "acme" {
		t.Fatalf("a tenant token sees its tenant only: %+v", ms)
	}
	ms := list("/v1/voicemail?tenant=acme&extension=201", scopeSecret("voicemail:read"))
	if len(ms) != 2 || ms[0].ID != e.acme[0].ID || ms[1].ID != e.acme[1].ID {
		t.Fatalf("acme 201: %+v", ms)
	}
	if ms := list("/v1/voicemail?extension=201", secretAdmin); len(ms) != 3 {
		t.Fatalf("extension 201 everywhere: %+v", ms)
	}
	if ms := list("/v1/voicemail?tenant=nobody", secretAdmin); len(ms) != 0 {
		t.Fatalf("an unknown tenant: %+v", ms)
	}
	if r := e.get("/v1/voicemail?tenant=globex", secretAcme); r.status != 403 {
		t.Fatalf("another tenant with a tenant token: %d", r.status)
	}
	if r := e.get("/v1/voicemail?from=2026-01-01T00:00:00Z", secretAdmin); r.status != 400 {
		t.Fatalf("an unknown parameter: %d", r.status)
	}
	if r := e.get("/v1/voicemail", scopeSecret("recordings:read")); r.status != 403 {
		t.Fatalf("without the scope: %d", r.status)
	}
}

func TestVoicemailMessageAndAudio(t *testing.T) {
	e := newVMEnv(t)
	m := e.acme[0]
	path := "/v1/voicemail/acme/201/" + m.ID
	r := e.get(path, secretAcme)
	var got voicemail.Message
	if r.status != 200 || json.Unmarshal(r.body, &got) != nil || got.ID != m.ID || got.From != m.From || got.DurationMS != 500 || got.Folder != "new" {
		t.Fatalf("one message: %d %s", r.status, r.body)
	}
	for _, p := range []string{
		"/v1/voicemail/acme/202/" + m.ID, "/v1/voicemail/globex/201/" + m.ID, "/v1/voicemail/acme/201/nope",
		"/v1/voicemail/acme/..%2F202/" + m.ID, "/v1/voicemail/acme/201/" + m.ID + "%2F..",
	} {
		if r := e.get(p, secretAdmin); r.status != 404 || r.errCode() != "not_found" {
			t.Errorf("%s: %d %s", p, r.status, r.body)
		}
	}
	// Another tenant's message is the same 404 for a tenant token.
	globex, _ := e.store.List("globex", "")
	if r := e.get("/v1/voicemail/globex/201/"+globex[0].ID, secretAcme); r.status != 404 {
		t.Fatalf("globex with the acme token: %d", r.status)
	}

	wav, err := os.ReadFile(filepath.Join(e.dir, "acme", "voicemail", "201", m.ID+".wav"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(wav)
	etag := `"` + hex.EncodeToString(sum[:]) + `"`
	r = e.get(path+"/audio", secretAcme)
	if r.status != 200 || string(r.body) != string(wav) || r.header.Get("Content-Type") != "audio/wav" || r.header.Get("ETag") != etag {
		t.Fatalf("audio: %d %d bytes %q %q", r.status, len(r.body), r.header.Get("Content-Type"), r.header.Get("ETag"))
	}
	r = e.do(nil, "GET", path+"/audio", secretAcme, "Range", "bytes=0-43")
	if r.status != 206 || string(r.body) != string(wav[:44]) || r.header.Get("Content-Range") != fmt.Sprintf("bytes 0-43/%d", len(wav)) {
		t.Fatalf("range: %d %q", r.status, r.header.Get("Content-Range"))
	}
	if r := e.do(nil, "GET", path+"/audio", secretAcme, "Range", fmt.Sprintf("bytes=%d-", len(wav)+5)); r.status != 416 {
		t.Fatalf("unsatisfiable range: %d", r.status)
	}
	if r := e.do(nil, "GET", path+"/audio", secretAcme, "If-None-Match", etag); r.status != 304 {
		t.Fatalf("If-None-Match: %d", r.status)
	}
}

func TestVoicemailDelete(t *testing.T) {
	e := newVMEnv(t)
	m := e.acme[1]
	path := "/v1/voicemail/acme/201/" + m.ID
	if r := e.do(nil, "DELETE", path, scopeSecret("voicemail:read")); r.status != 403 {
		t.Fatalf("delete with read scope: %d", r.status)
	}
	r := e.do(nil, "DELETE", path, scopeSecret("voicemail:delete"))
	if r.status != 204 || len(r.body) != 0 {
		t.Fatalf("delete: %d %q", r.status, r.body)
	}
	for _, f := range []string{m.ID + ".wav", m.ID + ".json"} {
		if _, err := os.Stat(filepath.Join(e.dir, "acme", "voicemail", "201", f)); !os.IsNotExist(err) {
			t.Fatalf("%s is still there: %v", f, err)
		}
	}
	if r := e.get(path, secretAdmin); r.status != 404 {
		t.Fatalf("after delete: %d", r.status)
	}
	if r := e.do(nil, "DELETE", path, secretAdmin); r.status != 404 {
		t.Fatalf("second delete: %d", r.status)
	}
	logs := e.logs.String()
	if !strings.Contains(logs, `"action":"voicemail.delete"`) || !strings.Contains(logs, `"token":"only-voicemail:delete"`) {
		t.Fatalf("no audit line:\n%s", logs)
	}
	if strings.Contains(logs, scopeSecret("voicemail:delete")) {
		t.Fatal("a token secret reached the log")
	}
}
