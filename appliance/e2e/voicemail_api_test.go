package e2e

import (
	"encoding/binary"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestVoicemailAPIServesRecoveredMessage: a message being recorded when the
// PBX died (its audio in the temporary file, the header never finalised, a
// torn last sample) is promoted at startup; bin/pbx then lists it, serves
// its audio and deletes it through /v1/voicemail.
func TestVoicemailAPIServesRecoveredMessage(t *testing.T) {
	dd := filepath.Join(t.TempDir(), "data")
	box := filepath.Join(dd, "vmco", "voicemail", "300")
	if err := os.MkdirAll(box, 0o750); err != nil {
		t.Fatal(err)
	}
	const id = "20261121T101500.000Z-e2evm001"
	audio := make([]byte, 44, 44+16000+1) // a header with zero sizes, as when recording began
	copy(audio, "RIFF\x00\x00\x00\x00WAVEfmt ")
	for i := range 8000 {
		audio = binary.LittleEndian.AppendUint16(audio, uint16(int16(i%200*10-1000)))
	}
	audio = append(audio, 0x55) // half a sample
	meta := `{"id":"` + id + `","tenant":"vmco","extension":"300","from":"5551212","from_name":"Eve","received_at":"2026-11-21T10:15:00Z","folder":"new"}`
	if err := os.WriteFile(filepath.Join(box, "."+id+".wav.tmp"), audio, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(box, "."+id+".rec.json"), []byte(meta), 0o640); err != nil {
		t.Fatal(err)
	}
	const vmToken = "e2e-voicemail-token-0123456789abcdefgh"
	p := startPBX(t, pbxConfig{DataDir: dd, APIPort: freePort(t),
		Tokens: "      - name: vm\n        token: " + vmToken + "\n        scopes: [voicemail:read, voicemail:delete]\n",
		Extra: `---
configVersion: pbx/v1
kind: Tenant
metadata: {name: vmco}
spec:
  domain: vmco.example
  mailboxes:
    - extension: "300"
---
configVersion: pbx/v1
kind: Account
metadata: {name: vic, tenant: vmco}
spec:
  password: vic-secret
  extension: "300"
`})
	api := apiClient{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", p.apiPort), token: vmToken}
	var list struct {
		Messages []struct {
			ID         string `json:"id"`
			From       string `json:"from"`
			DurationMS int64  `json:"duration_ms"`
			Folder     string `json:"folder"`
		} `json:"messages"`
	}
	api.getJSON("/v1/voicemail?tenant=vmco&extension=300", &list)
	if len(list.Messages) != 1 || list.Messages[0].ID != id || list.Messages[0].From != "5551212" || list.Messages[0].DurationMS != 1000 || list.Messages[0].Folder != "new" {
		t.Fatalf("recovered message: %+v", list.Messages)
	}
	code, wav := api.do("GET", "/v1/voicemail/vmco/300/"+id+"/audio")
	if code != 200 || len(wav) != 44+16000 || string(wav[44:]) != string(audio[44:44+16000]) || binary.LittleEndian.Uint32(wav[40:]) != 16000 {
		t.Fatalf("audio: %d, %d bytes", code, len(wav))
	}
	if code, b := api.do("DELETE", "/v1/voicemail/vmco/300/"+id); code != http.StatusNoContent {
		t.Fatalf("delete: %d %s", code, b)
	}
	if ents, _ := os.ReadDir(box); len(ents) != 0 {
		t.Fatalf("files left after delete: %v", ents)
	}
	code, b := api.do("GET", "/v1/voicemail/vmco/300/"+id)
	if code != 404 || !strings.Contains(string(b), "not_found") {
		t.Fatalf("after delete: %d %s", code, b)
	}
	p.waitLog("voicemail.delete", 5*time.Second)
}
