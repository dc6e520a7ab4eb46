package mobile

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/emiago/sipgo/sip"

	"pbx/appliance/config"
	"pbx/sipcore/b2bua"
	"pbx/sipcore/calls"
)

// OfferRequest is a call forking to an extension that may have devices.
type OfferRequest struct {
	Call         b2bua.CallID
	Tenant       string
	Extension    string
	CallerNumber string
	CallerName   string
}

// Caller is mobile.ringing's caller.
type Caller struct {
	Number string `json:"number"`
	Name   string `json:"name"`
}

// RingingData is the data of a mobile.ringing webhook (one per device).
type RingingData struct {
	CallID    string    `json:"call_id"`
	Room      string    `json:"room"`
	Token     string    `json:"token"`
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expires_at"`
	Caller    Caller    `json:"caller"`
	Extension string    `json:"extension"`
	Device    Device    `json:"device"`
}

// EndedData is the data of a mobile.ended webhook.
type EndedData struct {
	CallID    string `json:"call_id"`
	Room      string `json:"room"`
	Extension string `json:"extension"`
	Outcome   string `json:"outcome"`
}

// HeaderDevice names the device a mobile leg's INVITE is for.
const HeaderDevice = "X-Pbx-Device"

// offer is one call's mobile offer: one room, one leg per device.
type offer struct {
	call              b2bua.CallID
	room              string
	tenant, extension string
	client            *Client
	legs              int // mobile legs still ringing
	won, done         bool
	lastCause         calls.Cause
}

// Offer makes the mobile offer of a call forking to an extension: when the
// extension has devices and its tenant a room service, it creates the room
// <roomPrefix><call id>, sends each device's mobile.ringing webhook (on the
// wire when Offer returns) and returns one leg per device toward the
// bridge. Nil when there is nothing to offer or the room service failed.
// It runs on the INVITE's goroutine (no SIP lock held); ctx bounds it.
func (s *Service) Offer(ctx context.Context, req OfferRequest) []b2bua.LegTarget {
	if s.opts.Devices == nil || s.opts.Webhooks == nil {
		return nil
	}
	devs := s.opts.Devices.Devices(req.Tenant, req.Extension)
	if len(devs) == 0 {
		return nil
	}
	c := s.client(req.Tenant)
	if c == nil {
		return nil
	}
	room := c.Block().RoomPrefix + string(req.Call)
	if err := c.CreateRoom(ctx, room); err != nil {
		s.log.Warn("mobile offer not made", "call", req.Call, "tenant", req.Tenant, "extension", req.Extension, "err", err)
		return nil
	}
	s.keepRoom(room, req.Tenant, req.Extension)
	sent := s.ring(c, req, room, devs)
	var legs []b2bua.LegTarget
	for i, d := range devs {
		if sent[i] {
			legs = append(legs, mobileLeg(c.Block(), room, req.Extension, d))
		}
	}
	if len(legs) == 0 {
		go s.deleteRoom(c, room)
		return nil
	}
	s.mu.Lock()
	s.offers[req.Call] = &offer{call: req.Call, room: room, tenant: req.Tenant, extension: req.Extension, client: c, legs: len(legs)}
	s.mu.Unlock()
	return legs
}

// RingWait bounds how long an offer waits for its mobile.ringing requests
// to be on the wire; a device whose request is not by then gets no leg.
const RingWait = 2 * time.Second

// ring sends mobile.ringing to every device at once and reports which
// deliveries started within RingWait.
func (s *Service) ring(c *Client, req OfferRequest, room string, devs []Device) []bool {
	var mu sync.Mutex
	sent := make([]bool, len(devs))
	var wg sync.WaitGroup
	for i, d := range devs {
		wg.Go(func() {
			tok, err := c.JoinToken(room, DeviceIdentity(d.ID), JoinTokenTTL)
			if err == nil {
				err = s.opts.Webhooks.Send(req.Tenant, EventRinging, RingingData{
					CallID: string(req.Call), Room: room, Token: tok, URL: c.Block().URL,
					ExpiresAt: s.opts.Now().Add(JoinTokenTTL).UTC(),
					Caller:    Caller{Number: req.CallerNumber, Name: req.CallerName},
					Extension: req.Extension, Device: d,
				})
			}
			if err != nil {
				s.log.Warn("mobile.ringing not sent", "call", req.Call, "device", d.ID, "err", err)
				return
			}
			mu.Lock()
			sent[i] = true
			mu.Unlock()
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(s.opts.RingWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.log.Warn("mobile.ringing slow: devices not yet notified get no leg", "call", req.Call)
	}
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(sent)
}

// mobileLeg is the INVITE toward the bridge for device d:
// sip:<room>@sipHost:sipPort;transport=..., from the listener transportId
// names, answering a 401/407 with roomservice.auth.
func mobileLeg(b *config.RoomService, room, ext string, d Device) b2bua.LegTarget {
	transport := b.SIPTransport
	if transport == "" {
		transport = "udp"
	}
	uri := sip.Uri{Scheme: "sip", User: room, Host: b.SIPHost, Port: b.SIPPort}
	if transport != "udp" {
		uri.UriParams = sip.HeaderParams{{K: "transport", V: transport}}
	}
	leg := b2bua.LegTarget{
		URI:        uri,
		To:         sip.Uri{Scheme: "sip", User: room, Host: b.SIPHost},
		Transport:  transport,
		ListenerID: b.TransportID,
		Kind:       b2bua.KindMobile,
		Name:       "mobile:" + d.ID,
		Extension:  ext,
		Headers:    []sip.Header{sip.NewHeader(HeaderDevice, d.ID)},
	}
	if b.Auth.Username != "" {
		leg.Auth = &b2bua.Credentials{Username: b.Auth.Username, Password: b.Auth.Password.Reveal()}
	}
	return leg
}

// CallEvent follows each offer to its end (b2bua.Observer): a mobile leg
// answering settles it; another leg answering, the caller cancelling or
// every mobile leg failing ends it, which deletes its room DeleteDelay
// later and sends mobile.ended.
func (s *Service) CallEvent(ev b2bua.Event) {
	switch ev.Kind {
	case b2bua.EventAnswered, b2bua.EventLegEnded, b2bua.EventEnded:
	default:
		return
	}
	s.mu.Lock()
	o := s.offers[ev.Call.ID]
	if o == nil {
		s.mu.Unlock()
		return
	}
	outcome := o.step(ev)
	if ev.Kind == b2bua.EventEnded {
		delete(s.offers, ev.Call.ID)
	}
	s.mu.Unlock()
	if outcome != "" {
		s.end(o, outcome)
	}
}

// step applies ev to o and returns the outcome when it ends the offer;
// called with s.mu held.
func (o *offer) step(ev b2bua.Event) string {
	if o.won || o.done {
		return ""
	}
	switch ev.Kind {
	case b2bua.EventAnswered:
		if ev.Leg != nil && ev.Leg.Kind == b2bua.KindMobile {
			o.won = true
			return ""
		}
		o.done = true
		return OutcomeAnsweredElsewhere
	case b2bua.EventLegEnded:
		if ev.Leg == nil || ev.Leg.Kind != b2bua.KindMobile {
			return ""
		}
		o.legs--
		o.lastCause = ev.Leg.Cause
		if o.legs > 0 || ev.Leg.Cause == calls.CauseCancelled {
			return "" // a cancel's reason shows on the answer or the end
		}
		o.done = true
		return legOutcome(ev.Leg.Cause)
	default: // EventEnded
		o.done = true
		switch {
		case ev.Call.Cause == calls.CauseCancelled:
			return OutcomeCallerCancelled
		case !ev.Call.Answer.IsZero() || ev.Call.Cause == calls.CauseAnswered:
			return OutcomeAnsweredElsewhere
		case ev.Call.Cause == calls.CauseNoAnswer || o.lastCause == calls.CauseNoAnswer:
			return OutcomeNoAnswer
		}
		return OutcomeFailed
	}
}

func legOutcome(cause calls.Cause) string {
	if cause == calls.CauseNoAnswer {
		return OutcomeNoAnswer
	}
	return OutcomeFailed
}

// end deletes o's room DeleteDelay later and sends mobile.ended.
func (s *Service) end(o *offer, outcome string) {
	time.AfterFunc(s.opts.DeleteDelay, func() { s.deleteRoom(o.client, o.room) })
	s.log.Info("mobile offer ended", "call", o.call, "room", o.room, "extension", o.extension, "outcome", outcome)
	go func() {
		err := s.opts.Webhooks.Send(o.tenant, EventEnded, EndedData{CallID: string(o.call), Room: o.room, Extension: o.extension, Outcome: outcome})
		if err != nil {
			s.log.Warn("mobile.ended not sent", "call", o.call, "err", err)
		}
	}()
}

// Pending is the number of offers still followed (tests, counters).
func (s *Service) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.offers)
}
