package b2bua

import (
	"sync"
	"testing"

	"github.com/emiago/sipgo/sip"
)

func inviteFrom(callID, fromTag string) *sip.Request {
	req := sip.NewRequest(sip.INVITE, sip.Uri{User: "102", Host: "127.0.0.1"})
	from := &sip.FromHeader{Address: sip.Uri{User: "alice", Host: "127.0.0.1"}, Params: sip.NewParams()}
	from.Params.Add("tag", fromTag)
	req.AppendHeader(from)
	cid := sip.CallIDHeader(callID)
	req.AppendHeader(&cid)
	return req
}

// TestInitialToTagStable: the tag depends on the Call-ID and From tag
// only, whichever pooled hash computes it, and is 32 hex digits.
func TestInitialToTagStable(t *testing.T) {
	a := initialToTag(inviteFrom("call-1", "t1"))
	if len(a) != 32 {
		t.Fatalf("tag %q: want 32 hex digits", a)
	}
	if b := initialToTag(inviteFrom("call-1", "t2")); b == a {
		t.Fatal("another From tag gave the same To tag")
	}
	if b := initialToTag(inviteFrom("call-2", "t1")); b == a {
		t.Fatal("another Call-ID gave the same To tag")
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				if b := initialToTag(inviteFrom("call-1", "t1")); b != a {
					t.Errorf("tag %q, then %q for the same request", a, b)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkInitialToTag: the tag of each response to an initial INVITE.
func BenchmarkInitialToTag(b *testing.B) {
	req := inviteFrom("3848276298220188511@192.0.2.10", "as5f2c0b1e")
	b.ReportAllocs()
	for b.Loop() {
		_ = initialToTag(req)
	}
}
