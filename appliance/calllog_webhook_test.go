package appliance

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"pbx/appliance/cdr"
	"pbx/appliance/config"
	"pbx/appliance/webhook"
	"pbx/sipcore/b2bua"
	"pbx/sipcore/calls"
)

// TestCallEndedWebhook: a committed call record goes to the tenant's
// call.ended webhook as stored, signed; the other tenant (no webhook)
// gets nothing.
func TestCallEndedWebhook(t *testing.T) {
	got := make(chan map[string]any, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("X-Pbx-Signature") != webhook.Sign([]byte("hook-secret"), r.Header.Get("X-Pbx-Timestamp"), body) {
			t.Errorf("bad signature")
		}
		var m map[string]any
		_ = json.Unmarshal(body, &m)
		got <- m
	}))
	defer srv.Close()
	dd := t.TempDir()
	store, err := cdr.New(cdr.Options{DataDir: dd}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Flush) // the committer restocks after done, into dd
	w := &config.Webhook{URL: srv.URL, Events: []string{webhook.EventCallEnded}, Key: "hook-secret"}
	w.Tenant, w.Name = "acme", "crm"
	hooks, err := webhook.New(webhook.Options{Webhooks: []*config.Webhook{w}, DataDir: dd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = hooks.Run(ctx) }()
	l := &callLog{store: store, log: slog.New(slog.DiscardHandler), hooks: hooks}
	start := time.Now().Add(-time.Minute)
	c := b2bua.CallInfo{
		ID: b2bua.NewCallID(start), Tenant: "acme", Direction: calls.DirectionInternal, SIPCallID: "sip-1",
		From: "alice", To: "200", Extension: "200", AnsweredBy: "200", Start: start, Answer: start.Add(time.Second),
		Caller: b2bua.Caller{Kind: b2bua.KindEndpoint, Tenant: "demo", Username: "alice", Extension: "100"},
		Meta:   b2bua.Meta{Tenant: "acme", Direction: calls.DirectionInternal, Extension: "200", From: "100"},
		State:  b2bua.StateEnded, End: start.Add(time.Minute), Cause: calls.CauseAnswered, SIPStatus: 200,
	}
	l.CallEvent(b2bua.Event{Kind: b2bua.EventEnded, Call: c})
	select {
	case m := <-got:
		data, _ := m["data"].(map[string]any)
		if m["event"] != "call.ended" || m["tenant"] != "acme" || data["id"] != string(c.ID) || data["tenant"] != "acme" || data["extension"] != "200" {
			t.Fatalf("delivery %v", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no call.ended delivery")
	}
	// demo has no webhook: its side queued nothing.
	deadline := time.Now().Add(10 * time.Second)
	for hooks.Stats().Queued != 0 {
		if time.Now().After(deadline) {
			t.Fatal("deliveries left queued")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := hooks.Stats().Attempts["ok"]; n != 1 {
		t.Fatalf("%d deliveries, want 1", n)
	}
}
