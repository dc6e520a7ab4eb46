package b2bua_test

import (
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/sipcore"
	"pbx/sipcore/b2bua"
	"pbx/sipcore/calls"
	"pbx/sipcore/registrar"
)

// deadCarrier is a carrier target that fails: it answers every INVITE with
// status (after 100 Trying), or says nothing when status is 0. It counts
// the INVITEs and ACKs it gets.
type deadCarrier struct {
	conn   *net.UDPConn
	status int
	mu     sync.Mutex
	got    map[sip.RequestMethod]int
}

func newDeadCarrier(t *testing.T, status int) *deadCarrier {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	d := &deadCarrier{conn: c, status: status, got: map[sip.RequestMethod]int{}}
	go d.loop()
	return d
}

func (d *deadCarrier) addr() netip.AddrPort { return d.conn.LocalAddr().(*net.UDPAddr).AddrPort() }

func (d *deadCarrier) count(m sip.RequestMethod) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.got[m]
}

func (d *deadCarrier) loop() {
	buf := make([]byte, 8192)
	for {
		n, from, err := d.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		m, err := sip.ParseMessage(append([]byte(nil), buf[:n]...))
		if err != nil {
			continue
		}
		req, ok := m.(*sip.Request)
		if !ok {
			continue
		}
		d.mu.Lock()
		d.got[req.Method]++
		d.mu.Unlock()
		if req.Method != sip.INVITE || d.status == 0 {
			continue
		}
		for _, code := range []int{100, d.status} {
			res := sip.NewResponseFromRequest(req, code, sipcore.Phrase(code), nil)
			if code >= 200 {
				res.To().Params.Add("tag", "dead")
			}
			_, _ = d.conn.WriteToUDPAddrPort([]byte(res.String()), from)
		}
	}
}

// routeVia sends calls for 102 to a failing carrier first, then to bob's
// registered contact as the alternate (a trunk's next SRV target).
func routeVia(first netip.AddrPort) func(in *b2bua.Inbound, reg *registrar.Registrar, srv *sipcore.Server) b2bua.Decision {
	return func(in *b2bua.Inbound, reg *registrar.Registrar, srv *sipcore.Server) b2bua.Decision {
		legs := b2bua.LegsFor(reg.Lookup(tenant, "102"), srv.ConnectionOpen, "carrier", "")
		for i := range legs {
			legs[i].Alternates = []netip.AddrPort{legs[i].Destination}
			legs[i].Destination = first
			legs[i].Kind = b2bua.KindTrunk
		}
		return b2bua.Decision{Target: &b2bua.Target{
			Legs: legs, CallerID: b2bua.Identity{User: "101"},
			Meta: b2bua.Meta{Tenant: tenant, Direction: calls.DirectionOutbound, Domain: domain},
		}}
	}
}

// TestFailoverOn503: the first target answers 503 Service Unavailable; the
// INVITE goes on to the next (RFC 3263 section 4.3), which answers. The 503
// was ACKed and the call has one leg, answered.
func TestFailoverOn503(t *testing.T) {
	dead := newDeadCarrier(t, 503)
	e := newEnv(t, envOpts{route: routeVia(dead.addr())})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	call, in := answered(t, alice, bob, "102")
	if n := dead.count(sip.INVITE); n < 1 {
		t.Fatalf("first target got %d INVITEs", n)
	}
	deadline := time.Now().Add(wait)
	for dead.count(sip.ACK) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if dead.count(sip.ACK) == 0 {
		t.Fatal("the 503 was not ACKed")
	}
	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitCh(t, in.Ended(), "callee BYE")
	ev := e.rec.ended(t)
	if len(ev.Call.Legs) != 1 || !ev.Call.Legs[0].Won || ev.Call.Cause != calls.CauseAnswered {
		t.Fatalf("call %+v", ev.Call)
	}
}

// TestFailoverOnSilence: the first target never answers; after
// FailoverAfter without any response the INVITE goes to the next target.
func TestFailoverOnSilence(t *testing.T) {
	dead := newDeadCarrier(t, 0)
	e := newEnv(t, envOpts{route: routeVia(dead.addr()), failoverAfter: 500 * time.Millisecond})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	start := time.Now()
	call, _ := answered(t, alice, bob, "102")
	if took := time.Since(start); took < 500*time.Millisecond || took > 5*time.Second {
		t.Fatalf("answered after %s, want soon after the 500 ms failover", took)
	}
	if n := dead.count(sip.INVITE); n < 1 {
		t.Fatalf("first target got %d INVITEs", n)
	}
	if err := call.Hangup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// TestNoFailoverOnBusy: a final answer other than 503 (486 Busy Here) is the
// leg's outcome; the alternate is not tried.
func TestNoFailoverOnBusy(t *testing.T) {
	dead := newDeadCarrier(t, 486)
	e := newEnv(t, envOpts{route: routeVia(dead.addr())})
	alice := e.phone("udp", "alice", "alice-pw")
	bob := e.phone("udp", "bob", "bob-pw")
	call := alice.Dial(ctxT(t), "102")
	if s := final(t, call); s != 486 {
		t.Fatalf("final %d, want 486", s)
	}
	select {
	case <-bob.Incoming():
		t.Fatal("the alternate rang after a 486")
	default:
	}
}
