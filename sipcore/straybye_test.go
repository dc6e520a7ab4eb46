package sipcore_test

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/sipcore"
)

// TestStrayByeAnswered481WithoutTransaction: with a dialog lookup set, a
// BYE of no dialog is answered 481 by the UDP reader (no transaction, the
// handler never sees it, StrayBye counts it); a BYE of a known dialog goes
// to the handler, and its retransmission gets the handler's answer again
// from the transaction even once the dialog is gone.
func TestStrayByeAnswered481WithoutTransaction(t *testing.T) {
	var handled atomic.Int32
	var ended atomic.Bool
	s, addr := udpServer(t, sipcore.Options{}, func(s *sipcore.Server) {
		s.Handle(sip.BYE, func(req *sip.Request, tx sip.ServerTransaction) {
			handled.Add(1)
			ended.Store(true)
			_ = tx.Respond(sip.NewResponseFromRequest(req, sip.StatusOK, "OK", nil))
		})
		s.SetDialogLookup(func(req *sip.Request) bool {
			return req.CallID().Value() == "known" && !ended.Load()
		})
	})
	c := udpClient(t)
	bye := func(callID string) []byte {
		msg := sipRequest("BYE", "SIP/2.0", callID, local(c), "")
		return bytes.Replace(msg, []byte("To: <sip:pbx@127.0.0.1>"), []byte("To: <sip:pbx@127.0.0.1>;tag=x"), 1)
	}
	for range 2 { // a retransmission is answered alike
		if res := send(t, c, addr, bye("stray"), 5*time.Second); statusOf(res) != "SIP/2.0 481 Call/Transaction Does Not Exist" {
			t.Fatalf("stray BYE: %q", res)
		}
	}
	if st := s.Stats(); st.StrayBye != 2 || st.OpenTransactions != 0 || handled.Load() != 0 {
		t.Fatalf("StrayBye %d OpenTransactions %d handled %d; want 2, 0, 0", st.StrayBye, st.OpenTransactions, handled.Load())
	}
	for i := range 2 {
		if res := send(t, c, addr, bye("known"), 5*time.Second); statusOf(res) != "SIP/2.0 200 OK" {
			t.Fatalf("BYE of a known dialog, copy %d: %q", i, res)
		}
	}
	if st := s.Stats(); st.StrayBye != 2 || handled.Load() != 1 {
		t.Fatalf("StrayBye %d handled %d; want 2 and 1", st.StrayBye, handled.Load())
	}
}
