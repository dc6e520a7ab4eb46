package mobile

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"pbx/appliance/config"
	"pbx/sipcore/b2bua"
)

// Lifetimes of rooms (the specification's lifetimes table).
const (
	// RoomTTL is how long a room stays reachable through RoomToken.
	RoomTTL = 4 * time.Hour
	// DeleteDelay is how long a failed or cancelled offer's room lives on,
	// so that a late 200 can settle.
	DeleteDelay = 5 * time.Second
)

// Options configure a Service.
type Options struct {
	// Blocks is the effective roomservice block of a tenant (nil: none);
	// see BlocksOf.
	Blocks   func(tenant string) *config.RoomService
	Devices  Devices  // nil: no extension has devices
	Webhooks Webhooks // nil: no webhooks (offers are then not made)
	// HTTP is the client of the room service requests; nil: a plain one.
	HTTP *http.Client
	// Now is the clock; nil: time.Now.
	Now func() time.Time
	// DeleteDelay overrides DeleteDelay (tests); 0: the default.
	DeleteDelay time.Duration
	// RingWait overrides RingWait (tests); 0: the default.
	RingWait time.Duration
	// GrantTTL overrides GrantTTL (tests); 0: the default.
	GrantTTL time.Duration
}

// Service is the mobile side of calls: offers toward apps (Offer and the
// Observer CallEvent), calls placed by apps (Place, Authorise) and join
// tokens (RoomToken). It is safe for concurrent use.
type Service struct {
	opts   Options
	log    *slog.Logger
	grants *Grants

	mu      sync.Mutex
	clients map[*config.RoomService]*Client
	rooms   map[string]roomEntry // room name: who may fetch tokens for it
	offers  map[b2bua.CallID]*offer
}

// roomEntry is a room an extension may fetch join tokens for.
type roomEntry struct {
	tenant, extension string
	expires           time.Time
}

// New returns a Service.
func New(opts Options, log *slog.Logger) *Service {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.DeleteDelay <= 0 {
		opts.DeleteDelay = DeleteDelay
	}
	if opts.RingWait <= 0 {
		opts.RingWait = RingWait
	}
	if opts.Blocks == nil {
		opts.Blocks = func(string) *config.RoomService { return nil }
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	grants := NewGrants(opts.Now)
	if opts.GrantTTL > 0 {
		grants.ttl = opts.GrantTTL
	}
	return &Service{
		opts: opts, log: log, grants: grants,
		clients: map[*config.RoomService]*Client{},
		rooms:   map[string]roomEntry{},
		offers:  map[b2bua.CallID]*offer{},
	}
}

// BlocksOf resolves the effective roomservice block of each tenant of cfg
// once: the tenant's own block when it has the key (nil when it is null),
// else the System block; a block without a url is none.
func BlocksOf(cfg *config.Config) func(tenant string) *config.RoomService {
	byTenant := map[string]*config.RoomService{}
	for _, t := range cfg.Tenants {
		byTenant[t.Name] = usable(cfg.RoomServiceFor(t))
	}
	sys := usable(cfg.RoomServiceFor(nil))
	return func(tenant string) *config.RoomService {
		if b, ok := byTenant[tenant]; ok {
			return b
		}
		return sys
	}
}

func usable(b *config.RoomService) *config.RoomService {
	if b == nil || b.URL == "" {
		return nil
	}
	return b
}

// Grants is the grant store (for tests and counters).
func (s *Service) Grants() *Grants { return s.grants }

// client is the Client of tenant's block, or nil.
func (s *Service) client(tenant string) *Client {
	b := s.opts.Blocks(tenant)
	if b == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.clients[b]
	if c == nil {
		c = NewClient(b, s.opts.HTTP)
		s.clients[b] = c
	}
	return c
}

// keepRoom lets extension of tenant fetch tokens for room for RoomTTL,
// and forgets rooms whose time is over.
func (s *Service) keepRoom(room, tenant, extension string) {
	now := s.opts.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, e := range s.rooms {
		if !now.Before(e.expires) {
			delete(s.rooms, k)
		}
	}
	s.rooms[room] = roomEntry{tenant: tenant, extension: extension, expires: now.Add(RoomTTL)}
}

// RoomToken is a fresh join token for room, for the app of session s:
// ErrRoomNotFound unless the room was offered to (or placed by) s's
// extension less than RoomTTL ago.
func (s *Service) RoomToken(_ context.Context, ss Session, room string) (JoinToken, error) {
	now := s.opts.Now()
	s.mu.Lock()
	e, ok := s.rooms[room]
	s.mu.Unlock()
	if !ok || !now.Before(e.expires) || e.tenant != ss.Device.Tenant || e.extension != ss.Device.Extension {
		return JoinToken{}, ErrRoomNotFound
	}
	c := s.client(ss.Device.Tenant)
	if c == nil {
		return JoinToken{}, ErrRoomNotFound
	}
	tok, err := c.JoinToken(room, DeviceIdentity(ss.Device.ID), JoinTokenTTL)
	if err != nil {
		return JoinToken{}, err
	}
	return JoinToken{Token: tok, URL: c.Block().URL, ExpiresAt: now.Add(JoinTokenTTL).UTC()}, nil
}

// DeviceIdentity is the room identity of a device's app.
func DeviceIdentity(deviceID string) string { return "device-" + deviceID }

// Place starts a call from the app of session ss to to: a room, a
// single-use grant for the bridge's INVITE, and a request to the room
// service's SIP bridge to dial the PBX with it. Errors: ErrBadDestination,
// ErrNoRoomService, ErrUnavailable.
func (s *Service) Place(ctx context.Context, ss Session, to string) (Call, error) {
	to = strings.TrimSpace(to)
	if !dialable(to) {
		return Call{}, fmt.Errorf("%w: %q", ErrBadDestination, to)
	}
	c := s.client(ss.Device.Tenant)
	if c == nil {
		return Call{}, ErrNoRoomService
	}
	if c.Block().OutboundTrunkID == "" {
		return Call{}, fmt.Errorf("%w: no outboundTrunkId", ErrNoRoomService)
	}
	room := c.Block().RoomPrefix + string(b2bua.NewCallID(s.opts.Now()))
	if err := c.CreateRoom(ctx, room); err != nil {
		return Call{}, err
	}
	tok, err := c.JoinToken(room, DeviceIdentity(ss.Device.ID), JoinTokenTTL)
	if err != nil {
		return Call{}, err
	}
	grant, _ := s.grants.Mint(Grant{Tenant: ss.Device.Tenant, Account: ss.Device.Account, Extension: ss.Device.Extension, DeviceID: ss.Device.ID, To: to, Room: room})
	s.keepRoom(room, ss.Device.Tenant, ss.Device.Extension)
	if err := c.Dial(ctx, room, to, "pbx-"+to, map[string]string{HeaderGrant: grant}); err != nil {
		s.grants.Use(grant, to) // never usable now
		go s.deleteRoom(c, room)
		return Call{}, err
	}
	s.log.Info("mobile call placed", "tenant", ss.Device.Tenant, "account", ss.Device.Account, "device", ss.Device.ID, "to", to, "room", room)
	return Call{Room: room, Token: tok, URL: c.Block().URL, To: to, ExpiresAt: s.opts.Now().Add(JoinTokenTTL).UTC()}, nil
}

// HeaderGrant is the SIP header carrying a call grant on the bridge's
// INVITE.
const HeaderGrant = "X-Pbx-Token"

// Authorise consumes the grant of the bridge's INVITE for a call to to
// (its Request-URI user). Errors wrap ErrGrant.
func (s *Service) Authorise(grant, to string) (Grant, error) {
	return s.grants.Use(grant, to)
}

// dialable: a number or extension, as the app may dial it.
func dialable(to string) bool {
	if to == "" || len(to) > 64 {
		return false
	}
	for _, r := range to {
		switch {
		case r >= '0' && r <= '9', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case strings.ContainsRune("+*#-_.", r):
		default:
			return false
		}
	}
	return true
}

// deleteRoom deletes room, bounded by CallTimeout.
func (s *Service) deleteRoom(c *Client, room string) {
	if err := c.DeleteRoom(context.Background(), room); err != nil {
		s.log.Warn("room not deleted", "room", room, "err", err)
	}
}

// Service is what the device routes use, and follows offers as a call
// observer.
var (
	_ b2bua.Observer = (*Service)(nil)
)
