package appliance

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"pbx/appliance/config"
	"pbx/appliance/voicemail"
	"pbx/sipcore/b2bua"
	"pbx/web/api"
)

// TestDeviceVoicemailIsTheOwnMailbox: the device API's voicemail lists,
// reads, streams and deletes the device's extension's messages; another
// extension's message is not found through it, and an extension without a
// mailbox has none.
func TestDeviceVoicemailIsTheOwnMailbox(t *testing.T) {
	st, err := voicemail.Open(voicemail.Options{DataDir: t.TempDir()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	deposit := func(ext string) string {
		id := string(b2bua.NewCallID(time.Now()))
		rec, err := st.Begin(voicemail.Message{ID: id, Tenant: "acme", Extension: ext, From: "5551234", ReceivedAt: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if err := rec.Write(make([]int16, 8000)); err != nil {
			t.Fatal(err)
		}
		if _, err := rec.Commit(8000); err != nil {
			t.Fatal(err)
		}
		return id
	}
	mine, theirs := deposit("100"), deposit("101")
	cfg := &config.Config{Tenants: []*config.Tenant{{Meta: config.Meta{Name: "acme"},
		Mailboxes: []config.Mailbox{{Extension: "100"}, {Extension: "101"}}}}}
	d := newDeviceVoicemail(cfg, st)
	ctx := context.Background()
	v, err := d.List(ctx, "acme", "100")
	if err != nil {
		t.Fatal(err)
	}
	list := v.(struct {
		Messages []voicemail.Message `json:"messages"`
	})
	if len(list.Messages) != 1 || list.Messages[0].ID != mine {
		t.Fatalf("list %+v, want only %s", list, mine)
	}
	if _, err := d.Get(ctx, "acme", "100", theirs); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("another extension's message: %v, want not found", err)
	}
	f, _, err := d.Audio(ctx, "acme", "100", mine)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if len(b) != 44+16000 {
		t.Errorf("audio of %d bytes, want a 1 s WAV", len(b))
	}
	if _, err := d.List(ctx, "acme", "102"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("extension without a mailbox: %v", err)
	}
	if err := d.Delete(ctx, "acme", "100", mine); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Get(ctx, "acme", "100", mine); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("deleted message: %v", err)
	}
	if _, err := st.Get("acme", "101", theirs); err != nil {
		t.Errorf("the other mailbox lost its message: %v", err)
	}
}
