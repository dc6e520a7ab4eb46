package appliance

import (
	"context"
	"net"
	"os"
	"time"
)

// Test knobs of the SIP side, set in the environment by the end-to-end
// tests only (the configuration does not expose them: the defaults are
// what an operator wants).
const (
	// envSessionMinSE lowers the session timers' Min-SE (RFC 4028, 90 s
	// by default) so a SIPp scenario sees a session expire in seconds.
	envSessionMinSE = "PBX_TEST_SESSION_MIN_SE"
	// envDNS names a DNS server (host:port) the trunks' address discovery
	// asks instead of the system's, so a test can serve SRV records.
	envDNS = "PBX_TEST_DNS"
	// envGrantTTL shortens the life of an app's call grant (60 s) so a
	// test sees one expire.
	envGrantTTL = "PBX_TEST_GRANT_TTL"
)

// grantTTLTestKnob is the call grant life the environment sets for tests;
// zero (the default) otherwise.
func grantTTLTestKnob() time.Duration {
	if d, err := time.ParseDuration(os.Getenv(envGrantTTL)); err == nil && d > 0 {
		return d
	}
	return 0
}

// sessionMinSETestKnob is the Min-SE the environment sets for tests; zero
// (the b2bua default) otherwise.
func sessionMinSETestKnob() time.Duration {
	if d, err := time.ParseDuration(os.Getenv(envSessionMinSE)); err == nil && d > 0 {
		return d
	}
	return 0
}

// dnsTestKnob is a resolver asking the DNS server the environment names;
// nil (the system's) otherwise.
func dnsTestKnob() *net.Resolver {
	addr := os.Getenv(envDNS)
	if addr == "" {
		return nil
	}
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", addr)
	}}
}
