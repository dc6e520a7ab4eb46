package mwi_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"pbx/appliance/config"
	"pbx/appliance/mwi"
	"pbx/appliance/tenant"
	"pbx/sipcore"
	"pbx/sipcore/registrar"
	"pbx/sipcore/siptest"
)

func testConfig() *config.Config {
	cfg := &config.Config{}
	cfg.System.Voicemail = config.Voicemail{Enabled: true, MWI: true}
	acme := &config.Tenant{Domain: "acme.example", Mailboxes: []config.Mailbox{{Extension: "101"}}}
	acme.Name = "acme"
	beta := &config.Tenant{Domain: "beta.example", Mailboxes: []config.Mailbox{{Extension: "201"}}}
	beta.Name = "beta"
	cfg.Tenants = []*config.Tenant{acme, beta}
	for _, a := range []struct{ tenant, name, ext string }{{"acme", "alice", "101"}, {"acme", "bob", "102"}, {"beta", "carol", "201"}} {
		acc := &config.Account{Extension: a.ext}
		acc.Name, acc.Tenant = a.name, a.tenant
		cfg.Accounts = append(cfg.Accounts, acc)
	}
	return cfg
}

func TestEnabled(t *testing.T) {
	for _, tc := range []struct {
		name            string
		enabled, mwiOn  bool
		noMailboxes, ok bool
	}{
		{"on", true, true, false, true},
		{"mwi false", true, false, false, false},
		{"voicemail off", false, true, false, false},
		{"no mailboxes", true, true, true, false},
	} {
		cfg := testConfig()
		cfg.System.Voicemail.Enabled, cfg.System.Voicemail.MWI = tc.enabled, tc.mwiOn
		if tc.noMailboxes {
			for _, tn := range cfg.Tenants {
				tn.Mailboxes = nil
			}
		}
		if got := mwi.Enabled(cfg); got != tc.ok {
			t.Errorf("%s: Enabled %v", tc.name, got)
		}
	}
	var off *mwi.Service
	if off.Notify("acme", "101") != 0 {
		t.Error("a nil service notified")
	}
}

func TestMailboxesOfTheSubscribersTenant(t *testing.T) {
	cfg := testConfig()
	dir := siptest.NewDirectory()
	dir.AddDomain("acme", "acme.example")
	dir.AddDomain("beta", "beta.example")
	dir.AddAccount("acme.example", registrar.Account{Username: "alice", Password: "pw-alice", Extension: "101"})
	dir.AddAccount("acme.example", registrar.Account{Username: "bob", Password: "pw-bob", Extension: "102"})
	srv, err := sipcore.New(sipcore.Options{Listeners: []sipcore.Listener{{ID: "udp", Transport: "udp", BindHost: "127.0.0.1"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	auth, err := registrar.NewAuth(registrar.AuthOptions{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := mwi.New(cfg, tenant.New(cfg), mwi.Options{SIP: srv, Auth: auth}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = srv.Run(ctx) }()
	go func() { defer wg.Done(); _ = svc.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait(); srv.Close() })
	<-srv.Ready()
	udp, _ := srv.Addr("udp")
	p := siptest.NewPhone(t, siptest.Options{Username: "alice", Password: "pw-alice", Domain: "acme.example", PBX: udp})
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()

	byExt, res, err := p.Subscribe(rctx, "101", "message-summary", 600)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("subscribe to 101: %v %v", res, err)
	}
	if body := string(byExt.NextNotify(5 * time.Second).Body()); !strings.Contains(body, "Messages-Waiting: no\r\n") || !strings.Contains(body, "Voice-Message: 0/0 (0/0)") {
		t.Errorf("before voicemail's counts: %q", body)
	}
	byName, res, err := p.Subscribe(rctx, "alice", "message-summary", 600)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("subscribe by username: %v %v", res, err)
	}
	byName.NextNotify(5 * time.Second)

	svc.SetCounts(func(tn, ext string) (int, int) {
		if tn == "acme" && ext == "101" {
			return 2, 5
		}
		return 0, 0
	})
	if n := svc.Notify("acme", "101"); n != 2 {
		t.Fatalf("Notify reached %d subscriptions", n)
	}
	for _, s := range []*siptest.Subscription{byExt, byName} {
		if body := string(s.NextNotify(5 * time.Second).Body()); !strings.Contains(body, "Messages-Waiting: yes\r\n") || !strings.Contains(body, "Voice-Message: 2/5 (0/0)") {
			t.Errorf("after a message: %q", body)
		}
	}
	for _, tc := range []struct {
		user, host string
		status     int
	}{{"102", "acme.example", 404}, {"bob", "acme.example", 404}, {"201", "beta.example", 403}, {"999", "acme.example", 404}} {
		req := p.SubscribeRequest(tc.user, "message-summary", 600)
		req.Recipient.Host = tc.host
		_, res, err := p.SubscribeWith(rctx, req)
		if err != nil || res.StatusCode != tc.status {
			t.Errorf("subscribe to %s@%s: %v %v, want %d", tc.user, tc.host, res, err, tc.status)
		}
	}
}
