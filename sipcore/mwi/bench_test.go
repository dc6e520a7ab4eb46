package mwi_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"pbx/db"
	"pbx/sipcore/mwi"
	"pbx/sipcore/siptest"
)

// BenchmarkResyncAfterRestart: how fast a restarted PBX sends its restored
// subscriptions their NOTIFY (each CSeq stored in bbolt, with fsync, before
// the NOTIFY leaves). 500 subscriptions of one phone that answers each with
// 481, which also removes them; reports subscriptions resynced per second.
func BenchmarkResyncAfterRestart(b *testing.B) {
	const n = 500
	e := newEnv(b)
	d, err := db.Open(b.TempDir(), db.Options{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	store := d.Subscriptions()
	p := siptest.NewPhone(b, siptest.Options{Username: "alice", Password: "alice-secret", Domain: "acme.example", PBX: e.udp})
	local, _ := e.srv.Addr("udp")
	var total time.Duration
	for i := 0; i < b.N; i++ {
		subs := make([]mwi.Subscription, n)
		for j := range subs {
			subs[j] = mwi.Subscription{Mailbox: "acme/101", Account: "sip:101@acme.example", Subscriber: "alice@acme.example",
				CallID: fmt.Sprintf("bench-%d-%d", i, j), LocalTag: "l", RemoteTag: "r",
				LocalURI: "sip:101@acme.example", RemoteURI: "sip:alice@acme.example", RemoteTarget: p.Contact(),
				Source: p.Addr(), Transport: "udp", Local: local, Expires: time.Now().Add(time.Hour)}
		}
		if err := store.SaveSubscriptions(subs, nil); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		m, err := mwi.New(mwi.Options{SIP: e.srv, Auth: e.auth, Mailboxes: e.boxes, Store: store, MaxPerSubscriber: n}, nil)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = m.Run(ctx); close(done) }()
		for m.Count() != 0 {
			if time.Since(start) > time.Minute {
				b.Fatalf("%d subscriptions left after a minute", m.Count())
			}
			time.Sleep(time.Millisecond)
		}
		total += time.Since(start)
		cancel()
		<-done
	}
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "subscriptions/s")
}
