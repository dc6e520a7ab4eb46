package mwi_test

import (
	"context"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/db"
	"pbx/sipcore"
	"pbx/sipcore/mwi"
	"pbx/sipcore/registrar"
	"pbx/sipcore/siptest"
)

// mailboxes is an in-memory mwi.Mailboxes: domain -> tenant, and the
// mailboxes "tenant/extension" with their counts.
type mailboxes struct {
	mu      sync.Mutex
	tenants map[string]string
	counts  map[string][2]int
}

func (b *mailboxes) Resolve(user, domain string, sub registrar.Account) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	tenant, ok := b.tenants[domain]
	if !ok {
		return "", mwi.ErrNoMailbox
	}
	key := tenant + "/" + user
	if _, ok := b.counts[key]; !ok {
		return "", mwi.ErrNoMailbox
	}
	if tenant != sub.Tenant {
		return "", mwi.ErrForbidden
	}
	return key, nil
}

func (b *mailboxes) Summary(mailbox string) (int, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.counts[mailbox]
	return c[0], c[1]
}

func (b *mailboxes) set(mailbox string, n, o int) {
	b.mu.Lock()
	b.counts[mailbox] = [2]int{n, o}
	b.mu.Unlock()
}

type env struct {
	cur   atomic.Pointer[mwi.Manager] // answers SUBSCRIBEs
	srv   *sipcore.Server
	auth  *registrar.Auth
	boxes *mailboxes
	udp   netip.AddrPort
	tcp   netip.AddrPort
}

func newEnv(t testing.TB) *env {
	t.Helper()
	dir := siptest.NewDirectory()
	dir.AddDomain("acme", "acme.example")
	dir.AddDomain("beta", "beta.example")
	dir.AddAccount("acme.example", registrar.Account{Username: "alice", Password: "alice-secret", Extension: "101"})
	dir.AddAccount("beta.example", registrar.Account{Username: "carol", Password: "carol-secret", Extension: "201"})
	srv, err := sipcore.New(sipcore.Options{Listeners: []sipcore.Listener{
		{ID: "udp", Transport: "udp", BindHost: "127.0.0.1"},
		{ID: "tcp", Transport: "tcp", BindHost: "127.0.0.1"},
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	auth, err := registrar.NewAuth(registrar.AuthOptions{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{srv: srv, auth: auth}
	// Handle comes before Run; a restarted Manager takes over the handler.
	srv.Handle(sip.SUBSCRIBE, func(req *sip.Request, tx sip.ServerTransaction) { e.cur.Load().HandleSubscribe(req, tx) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		srv.Close()
	})
	select {
	case <-srv.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("sip server not ready")
	}
	e.boxes = &mailboxes{
		tenants: map[string]string{"acme.example": "acme", "beta.example": "beta"},
		counts:  map[string][2]int{"acme/101": {}, "acme/102": {}, "beta/201": {}},
	}
	e.udp, _ = srv.Addr("udp")
	e.tcp, _ = srv.Addr("tcp")
	return e
}

// manager starts a Manager on the env's server until the test ends (or
// stop is called).
func (e *env) manager(t *testing.T, store mwi.Store) (m *mwi.Manager, stop func()) {
	t.Helper()
	return e.managerWith(t, mwi.Options{Store: store})
}

// managerWith is manager with further options.
func (e *env) managerWith(t *testing.T, opts mwi.Options) (m *mwi.Manager, stop func()) {
	t.Helper()
	opts.SIP, opts.Auth, opts.Mailboxes, opts.MinExpires = e.srv, e.auth, e.boxes, 2*time.Second
	m, err := mwi.New(opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.cur.Store(m)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = m.Run(ctx); close(done) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return m, stop
}

func (e *env) phone(t *testing.T, transport string) *siptest.Phone {
	pbx := e.udp
	if transport == "tcp" {
		pbx = e.tcp
	}
	return siptest.NewPhone(t, siptest.Options{Transport: transport, Username: "alice", Password: "alice-secret", Domain: "acme.example", PBX: pbx})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func hdr(m interface{ GetHeader(string) sip.Header }, name string) string {
	if h := m.GetHeader(name); h != nil {
		return h.Value()
	}
	return ""
}

// checkNotify asserts a message-summary NOTIFY: its state starts with
// state and its body says waiting with counts n/o.
func checkNotify(t *testing.T, n *sip.Request, state, account string, n1, o int) {
	t.Helper()
	if got := hdr(n, "Subscription-State"); !strings.HasPrefix(got, state) {
		t.Errorf("Subscription-State %q, want %q...", got, state)
	}
	if got := hdr(n, "Event"); got != "message-summary" {
		t.Errorf("Event %q", got)
	}
	if got := hdr(n, "Content-Type"); got != "application/simple-message-summary" {
		t.Errorf("Content-Type %q", got)
	}
	waiting := "no"
	if n1 > 0 {
		waiting = "yes"
	}
	want := "Messages-Waiting: " + waiting + "\r\nMessage-Account: " + account + "\r\nVoice-Message: " +
		strconv.Itoa(n1) + "/" + strconv.Itoa(o) + " (0/0)\r\n"
	if string(n.Body()) != want {
		t.Errorf("body %q, want %q", n.Body(), want)
	}
}

func TestSubscribeIsChallengedThenAcceptedAndNotified(t *testing.T) {
	e := newEnv(t)
	m, _ := e.manager(t, nil)
	p := e.phone(t, "udp")
	ctx := ctxT(t)

	res, err := p.Send(ctx, p.SubscribeRequest("101", "message-summary", 600))
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 401 || !strings.HasPrefix(hdr(res, "WWW-Authenticate"), "Digest ") {
		t.Fatalf("unauthenticated SUBSCRIBE: %s", res.StartLine())
	}

	sub, res, err := p.Subscribe(ctx, "101", "message-summary", 600)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 {
		t.Fatalf("SUBSCRIBE: %s", res.StartLine())
	}
	if tag, _ := res.To().Params.Get("tag"); tag == "" {
		t.Error("200 without To-tag")
	}
	if hdr(res, "Expires") != "600" || res.Contact() == nil {
		t.Errorf("200: Expires %q Contact %v", hdr(res, "Expires"), res.Contact())
	}
	n := sub.NextNotify(5 * time.Second)
	checkNotify(t, n, "active;expires=", "sip:101@acme.example", 0, 0)
	if s := hdr(n, "Subscription-State"); s != "active;expires=600" && s != "active;expires=599" {
		t.Errorf("state %q", s)
	}
	if n.Contact() == nil {
		t.Error("NOTIFY without Contact")
	}
	if m.Count() != 1 {
		t.Fatalf("%d subscriptions", m.Count())
	}

	// A message arrives, then is heard.
	e.boxes.set("acme/101", 2, 1)
	if got := m.Notify("acme/101"); got != 1 {
		t.Fatalf("Notify reached %d", got)
	}
	n2 := sub.NextNotify(5 * time.Second)
	checkNotify(t, n2, "active;", "sip:101@acme.example", 2, 1)
	e.boxes.set("acme/101", 0, 3)
	m.Notify("acme/101")
	n3 := sub.NextNotify(5 * time.Second)
	checkNotify(t, n3, "active;", "sip:101@acme.example", 0, 3)
	if !(n.CSeq().SeqNo < n2.CSeq().SeqNo && n2.CSeq().SeqNo < n3.CSeq().SeqNo) {
		t.Errorf("CSeq not rising: %d %d %d", n.CSeq().SeqNo, n2.CSeq().SeqNo, n3.CSeq().SeqNo)
	}
	if m.Notify("acme/102") != 0 {
		t.Error("another mailbox's change reached the subscription")
	}

	// Refresh: a new expiry and a NOTIFY.
	res, err = sub.Refresh(ctx, 120)
	if err != nil || res.StatusCode != 200 || hdr(res, "Expires") != "120" {
		t.Fatalf("refresh: %v %v", res, err)
	}
	n4 := sub.NextNotify(5 * time.Second)
	if s := hdr(n4, "Subscription-State"); s != "active;expires=120" && s != "active;expires=119" {
		t.Errorf("after refresh: state %q", s)
	}

	// Unsubscribe: a final NOTIFY, and the dialog is gone.
	res, err = sub.Refresh(ctx, 0)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("unsubscribe: %v %v", res, err)
	}
	n5 := sub.NextNotify(5 * time.Second)
	checkNotify(t, n5, "terminated;reason=timeout", "sip:101@acme.example", 0, 3)
	if m.Count() != 0 {
		t.Errorf("%d subscriptions after unsubscribe", m.Count())
	}
	res, err = sub.Refresh(ctx, 60)
	if err != nil || res.StatusCode != 481 {
		t.Fatalf("refresh of an ended subscription: %v %v", res, err)
	}
}

func TestSubscriptionExpiresWithFinalNotify(t *testing.T) {
	e := newEnv(t)
	m, _ := e.manager(t, nil)
	p := e.phone(t, "udp")
	ctx := ctxT(t)
	sub, res, err := p.Subscribe(ctx, "101", "message-summary", 2)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("subscribe: %v %v", res, err)
	}
	checkNotify(t, sub.NextNotify(5*time.Second), "active;expires=", "sip:101@acme.example", 0, 0)
	start := time.Now()
	checkNotify(t, sub.NextNotify(5*time.Second), "terminated;reason=timeout", "sip:101@acme.example", 0, 0)
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("expired after %s", el)
	}
	if m.Count() != 0 {
		t.Errorf("%d subscriptions after expiry", m.Count())
	}
}

func TestSubscribeRefusals(t *testing.T) {
	e := newEnv(t)
	m, _ := e.manager(t, nil)
	p := e.phone(t, "udp")
	ctx := ctxT(t)
	check := func(name string, req *sip.Request, status int, header, value string) {
		t.Helper()
		_, res, err := p.SubscribeWith(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if res.StatusCode != status {
			t.Errorf("%s: %s, want %d", name, res.StartLine(), status)
		}
		if header != "" && hdr(res, header) != value {
			t.Errorf("%s: %s %q, want %q", name, header, hdr(res, header), value)
		}
	}
	check("too brief", p.SubscribeRequest("101", "message-summary", 1), 423, "Min-Expires", "2")
	check("presence", p.SubscribeRequest("101", "presence", 600), 489, "Allow-Events", "message-summary")
	check("presence allows", p.SubscribeRequest("101", "presence", 600), 489, "Allow", "OPTIONS, SUBSCRIBE")
	xml := p.SubscribeRequest("101", "message-summary", 600)
	xml.ReplaceHeader(sip.NewHeader("Accept", "application/xml"))
	check("not acceptable", xml, 406, "Accept", "application/simple-message-summary")
	wide := p.SubscribeRequest("101", "message-summary", 600)
	wide.ReplaceHeader(sip.NewHeader("Accept", "application/xml, application/*"))
	check("acceptable", wide, 200, "", "")
	check("no mailbox", p.SubscribeRequest("102x", "message-summary", 600), 404, "", "")
	other := p.SubscribeRequest("201", "message-summary", 600)
	other.Recipient.Host = "beta.example"
	check("other tenant", other, 403, "", "")
	check("too long", p.SubscribeRequest("101", "message-summary", 1_000_000), 200, "Expires", "86400")
	if m.Count() != 2 {
		t.Errorf("%d subscriptions, want the two accepted", m.Count())
	}
}

func TestFetchSendsOneTerminatedNotify(t *testing.T) {
	e := newEnv(t)
	m, _ := e.manager(t, nil)
	e.boxes.set("acme/101", 1, 0)
	p := e.phone(t, "udp")
	sub, res, err := p.Subscribe(ctxT(t), "101", "message-summary", 0)
	if err != nil || res.StatusCode != 200 || hdr(res, "Expires") != "0" {
		t.Fatalf("fetch: %v %v", res, err)
	}
	checkNotify(t, sub.NextNotify(5*time.Second), "terminated;reason=timeout", "sip:101@acme.example", 1, 0)
	if m.Count() != 0 {
		t.Errorf("a fetch left %d subscriptions", m.Count())
	}
}

// waitCount polls until m has n subscriptions.
func waitCount(t *testing.T, m *mwi.Manager, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for m.Count() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d subscriptions, want %d", m.Count(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestNotifyAnswered481DropsTheSubscription(t *testing.T) {
	e := newEnv(t)
	m, _ := e.manager(t, nil)
	p := e.phone(t, "udp")
	sub, res, err := p.Subscribe(ctxT(t), "101", "message-summary", 600)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("subscribe: %v %v", res, err)
	}
	sub.NextNotify(5 * time.Second)
	sub.SetNotifyStatus(481)
	m.Notify("acme/101")
	sub.NextNotify(5 * time.Second)
	waitCount(t, m, 0)
}

func TestNotifyOverTCPAndBehindNAT(t *testing.T) {
	e := newEnv(t)
	m, _ := e.manager(t, nil)
	tp := e.phone(t, "tcp")
	sub, res, err := tp.Subscribe(ctxT(t), "101", "message-summary", 600)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("tcp subscribe: %v %v", res, err)
	}
	checkNotify(t, sub.NextNotify(5*time.Second), "active;", "sip:101@acme.example", 0, 0)

	// A Contact naming an address the SUBSCRIBE did not come from: the
	// NOTIFY goes to the packet source.
	up := e.phone(t, "udp")
	req := up.SubscribeRequest("101", "message-summary", 600)
	req.ReplaceHeader(&sip.ContactHeader{Address: sip.Uri{Scheme: "sip", User: "alice", Host: "192.0.2.10", Port: 5062}})
	nsub, res, err := up.SubscribeWith(ctxT(t), req)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("nat subscribe: %v %v", res, err)
	}
	n := nsub.NextNotify(5 * time.Second)
	if n.Recipient.Host != "192.0.2.10" {
		t.Errorf("Request-URI %s, want the Contact", n.Recipient.String())
	}
	e.boxes.set("acme/101", 1, 0)
	if m.Notify("acme/101") != 2 {
		t.Fatal("not both subscriptions")
	}
	checkNotify(t, sub.NextNotify(5*time.Second), "active;", "sip:101@acme.example", 1, 0)
	checkNotify(t, nsub.NextNotify(5*time.Second), "active;", "sip:101@acme.example", 1, 0)
}

func TestSubscriptionsSurviveARestart(t *testing.T) {
	e := newEnv(t)
	d, err := db.Open(t.TempDir(), db.Options{NoSync: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	store := d.Subscriptions()
	_, stop := e.manager(t, store)
	p := e.phone(t, "udp")
	sub, res, err := p.Subscribe(ctxT(t), "101", "message-summary", 600)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("subscribe: %v %v", res, err)
	}
	first := sub.NextNotify(5 * time.Second)
	stop()
	// An expired one in the store is dropped at load.
	stale := mwi.Subscription{Mailbox: "acme/101", CallID: "old", LocalTag: "a", RemoteTag: "b", Expires: time.Now().Add(-time.Minute)}
	if err := store.SaveSubscriptions([]mwi.Subscription{stale}, nil); err != nil {
		t.Fatal(err)
	}
	e.boxes.set("acme/101", 3, 0)
	m2, _ := e.manager(t, store)
	n := sub.NextNotify(5 * time.Second)
	checkNotify(t, n, "active;expires=", "sip:101@acme.example", 3, 0)
	if n.CSeq().SeqNo <= first.CSeq().SeqNo {
		t.Errorf("CSeq %d after restart, was %d", n.CSeq().SeqNo, first.CSeq().SeqNo)
	}
	if m2.Count() != 1 {
		t.Errorf("%d subscriptions restored", m2.Count())
	}
	if c, _ := store.Count(); c != 1 {
		t.Errorf("%d stored, want the live one", c)
	}
	// The restored dialog still refreshes and ends.
	res, err = sub.Refresh(ctxT(t), 0)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("unsubscribe after restart: %v %v", res, err)
	}
	checkNotify(t, sub.NextNotify(5*time.Second), "terminated;", "sip:101@acme.example", 3, 0)
	deadline := time.Now().Add(5 * time.Second)
	for c, _ := store.Count(); c != 0; c, _ = store.Count() {
		if time.Now().After(deadline) {
			t.Fatalf("%d stored after unsubscribe", c)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestTooManySubscriptionsReplaceTheOneExpiringFirst(t *testing.T) {
	e := newEnv(t)
	m, _ := e.managerWith(t, mwi.Options{MaxPerSubscriber: 2})
	p := e.phone(t, "udp")
	var subs []*siptest.Subscription
	for _, exp := range []int{600, 300, 900} {
		sub, res, err := p.Subscribe(ctxT(t), "101", "message-summary", exp)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("subscribe: %v %v", res, err)
		}
		sub.NextNotify(5 * time.Second)
		subs = append(subs, sub)
	}
	if m.Count() != 2 {
		t.Fatalf("%d subscriptions, want 2", m.Count())
	}
	e.boxes.set("acme/101", 1, 0)
	if n := m.Notify("acme/101"); n != 2 {
		t.Fatalf("Notify reached %d", n)
	}
	subs[0].NextNotify(5 * time.Second)
	subs[2].NextNotify(5 * time.Second)
	res, err := subs[1].Refresh(ctxT(t), 600)
	if err != nil || res.StatusCode != 481 {
		t.Fatalf("the replaced subscription refreshed: %v %v", res, err)
	}
	select {
	case n := <-subs[1].Notifies():
		t.Errorf("the replaced subscription got a NOTIFY: %s", n.Body())
	default:
	}
}
