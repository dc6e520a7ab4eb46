package rtpcore_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"pbx/rtpcore"
	"pbx/rtpcore/sdp"
)

// A B2BUA anchoring one call: a session, a leg per SIP leg, SDP rewritten
// with the legs' ports, the legs bridged once the callee answers.
func Example() {
	engine, err := rtpcore.New(rtpcore.Options{BindIP: netip.MustParseAddr("127.0.0.1")}, nil)
	if err != nil {
		panic(err)
	}
	defer engine.Close()

	call, _ := engine.NewSession(rtpcore.SessionOptions{
		ID:           "call-1",
		MediaTimeout: 30 * time.Second,
		OnTimeout:    func(s *rtpcore.Session, idle time.Duration) { /* hang up */ },
	})
	defer call.Close()

	// The caller's offer.
	offer, _ := sdp.Parse([]byte("v=0\r\nc=IN IP4 127.0.0.1\r\nm=audio 4000 RTP/AVP 0 8 101\r\na=rtpmap:101 telephone-event/8000\r\n"))
	codecs, err := sdp.Negotiate(offer, sdp.DefaultCodecs)
	if err != nil {
		panic(err) // 488
	}
	caller, _ := call.NewLeg("caller")
	caller.SetRemote(offer.AudioAddr())

	// The callee is offered exactly the codecs agreed with the caller.
	callee, _ := call.NewLeg("callee-1")
	calleeOrigin := sdp.NewOrigin()
	_ = calleeOrigin.Offer(engine.AdvertisedAddr(), callee.Port(), codecs, "")

	// On 200 OK from the callee: its address, the bridge, the caller's answer.
	callee.SetRemote(netip.MustParseAddrPort("127.0.0.1:4002"))
	if err := call.Bridge(caller, callee); err != nil {
		panic(err)
	}
	answer, _, _ := sdp.NewOrigin().Answer(offer, engine.AdvertisedAddr(), caller.Port(), codecs, "")
	parsed, _ := sdp.Parse(answer)
	fmt.Println(parsed.Codecs[0].Name, parsed.TelephoneEvent.PayloadType, parsed.Port == caller.Port())
	// Output: PCMA 101 true
}

// Music on hold: while the caller is held, a player replaces the
// callee's audio toward the caller.
func ExampleLeg_Play() {
	engine, _ := rtpcore.New(rtpcore.Options{BindIP: netip.MustParseAddr("127.0.0.1")}, nil)
	defer engine.Close()
	call, _ := engine.NewSession(rtpcore.SessionOptions{ID: "held"})
	caller, _ := call.NewLeg("caller")

	phone, _ := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	defer phone.Close()
	caller.SetRemote(phone.LocalAddr().(*net.UDPAddr).AddrPort())

	music := make([]int16, 8000/10) // 100 ms of silence stands in for a WAV file
	player, _ := rtpcore.NewPlayer(music, rtpcore.PlayerOptions{PayloadType: rtpcore.PayloadPCMA})
	if err := caller.Play(context.Background(), player, rtpcore.PayloadPCMA); err != nil {
		panic(err)
	}
	fmt.Println("packets sent:", caller.Stats().Injected)
	// Output: packets sent: 5
}

// A tap seeing both directions of a leg, as a recorder does.
func ExampleLeg_AddTap() {
	engine, _ := rtpcore.New(rtpcore.Options{BindIP: netip.MustParseAddr("127.0.0.1")}, nil)
	defer engine.Close()
	call, _ := engine.NewSession(rtpcore.SessionOptions{})
	caller, _ := call.NewLeg("caller")

	q := rtpcore.NewQueueTap(256) // copies; drops and counts when full
	remove := caller.AddTap(q)
	defer remove()

	phone, _ := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	defer phone.Close()
	pkt := rtpcore.AppendHeader(nil, false, rtpcore.PayloadPCMU, 1, 160, 42)
	pkt = rtpcore.EncodeUlaw(pkt, make([]int16, 160))
	phone.WriteToUDPAddrPort(pkt, caller.LocalAddr())

	p := <-q.C()
	pcm, _ := rtpcore.Decode(p.Header.PayloadType, nil, p.Payload())
	fmt.Println(p.Dir, p.Header.SSRC, len(pcm))
	// Output: in 42 160
}
