package mobile

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/livekit/protocol/auth"
	"github.com/livekit/protocol/livekit"
	"github.com/twitchtv/twirp"

	"pbx/appliance/config"
)

// Lifetimes and bounds of the room service calls (DESIGN.md 5.3, the
// specification's lifetimes).
const (
	// CallTimeout bounds every request to the room service.
	CallTimeout = 5 * time.Second
	// JoinTokenTTL is the life of a join token minted with an offer or a
	// placed call.
	JoinTokenTTL = 2 * time.Minute
	// adminTokenTTL is the life of the token of one API request.
	adminTokenTTL = time.Minute
)

// Client talks to one room service deployment (one effective roomservice
// block) through LiveKit's Twirp API, each request with an admin token
// minted for it and bounded by CallTimeout. It holds no lock while a
// request is in flight.
type Client struct {
	block   *config.RoomService
	rooms   livekit.RoomService
	sip     livekit.SIP
	timeout time.Duration
}

// NewClient returns the client of block; hc nil means a plain
// http.Client (every request is bounded by CallTimeout anyway).
func NewClient(block *config.RoomService, hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{}
	}
	base := HTTPURL(block.URL)
	return &Client{
		block:   block,
		rooms:   livekit.NewRoomServiceProtobufClient(base, hc),
		sip:     livekit.NewSIPProtobufClient(base, hc),
		timeout: CallTimeout,
	}
}

// HTTPURL is the HTTP address of a room service URL as LiveKit's SDK
// derives it: ws becomes http, wss https, no trailing slash.
func HTTPURL(u string) string {
	u = strings.TrimRight(u, "/")
	if strings.HasPrefix(u, "ws") {
		u = "http" + strings.TrimPrefix(u, "ws")
	}
	return u
}

// Block is the configuration the client was made from.
func (c *Client) Block() *config.RoomService { return c.block }

// CreateRoom creates room (LiveKit: video.roomCreate).
func (c *Client) CreateRoom(ctx context.Context, room string) error {
	ctx, cancel, err := c.authorised(ctx, &auth.VideoGrant{RoomCreate: true, RoomAdmin: true, Room: room}, nil)
	if err != nil {
		return err
	}
	defer cancel()
	if _, err := c.rooms.CreateRoom(ctx, &livekit.CreateRoomRequest{Name: room}); err != nil {
		return fmt.Errorf("create room %s: %w: %w", room, ErrUnavailable, err)
	}
	return nil
}

// DeleteRoom deletes room (LiveKit: video.roomCreate); a room already
// gone is no error.
func (c *Client) DeleteRoom(ctx context.Context, room string) error {
	ctx, cancel, err := c.authorised(ctx, &auth.VideoGrant{RoomCreate: true, RoomAdmin: true, Room: room}, nil)
	if err != nil {
		return err
	}
	defer cancel()
	if _, err := c.rooms.DeleteRoom(ctx, &livekit.DeleteRoomRequest{Room: room}); err != nil {
		if te, ok := err.(twirp.Error); ok && te.Code() == twirp.NotFound {
			return nil
		}
		return fmt.Errorf("delete room %s: %w: %w", room, ErrUnavailable, err)
	}
	return nil
}

// Dial asks the room service's SIP bridge to call to from room over the
// block's outboundTrunkId, with headers on its INVITE (LiveKit: sip.call).
func (c *Client) Dial(ctx context.Context, room, to, identity string, headers map[string]string) error {
	if c.block.OutboundTrunkID == "" {
		return fmt.Errorf("dial %s: %w: no outboundTrunkId", to, ErrNoRoomService)
	}
	ctx, cancel, err := c.authorised(ctx, nil, &auth.SIPGrant{Call: true})
	if err != nil {
		return err
	}
	defer cancel()
	_, err = c.sip.CreateSIPParticipant(ctx, &livekit.CreateSIPParticipantRequest{
		SipTrunkId:          c.block.OutboundTrunkID,
		SipCallTo:           to,
		RoomName:            room,
		ParticipantIdentity: identity,
		Headers:             headers,
	})
	if err != nil {
		return fmt.Errorf("create sip participant for %s: %w: %w", to, ErrUnavailable, err)
	}
	return nil
}

// JoinToken mints a token that lets identity join room (and only room)
// for ttl, with publish and subscribe rights.
func (c *Client) JoinToken(room, identity string, ttl time.Duration) (string, error) {
	t := auth.NewAccessToken(c.block.APIKey, c.block.Secret.Reveal()).
		SetIdentity(identity).
		SetValidFor(ttl).
		SetVideoGrant(&auth.VideoGrant{RoomJoin: true, Room: room})
	s, err := t.ToJWT()
	if err != nil {
		return "", fmt.Errorf("join token for %s: %w", room, err)
	}
	return s, nil
}

// authorised bounds ctx by the call timeout and puts an admin token with
// the given grants in its request headers.
func (c *Client) authorised(ctx context.Context, video *auth.VideoGrant, sipg *auth.SIPGrant) (context.Context, context.CancelFunc, error) {
	t := auth.NewAccessToken(c.block.APIKey, c.block.Secret.Reveal()).SetValidFor(adminTokenTTL)
	if video != nil {
		t.SetVideoGrant(video)
	}
	if sipg != nil {
		t.SetSIPGrant(sipg)
	}
	jwt, err := t.ToJWT()
	if err != nil {
		return nil, nil, fmt.Errorf("admin token: %w", err)
	}
	h := http.Header{}
	h.Set("Authorization", "Bearer "+jwt)
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	ctx, err = twirp.WithHTTPRequestHeaders(ctx, h)
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("admin token: %w", err)
	}
	return ctx, cancel, nil
}
