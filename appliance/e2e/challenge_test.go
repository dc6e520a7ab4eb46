package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLateChallengeKeepsTheCallEndable: a caller whose ACK to the 407 is
// lost (late under load, as in a CI run of TestReloadUnderLoad) gets the 407
// again after the 200 and SIPp adopts its To tag; its BYE must still end
// the call. Before every response to the caller's initial INVITEs carried
// one tag, that BYE got 481 and the PBX held the call until its media
// timeout.
func TestLateChallengeKeepsTheCallEndable(t *testing.T) {
	p := startPBX(t, pbxConfig{})
	dir := scenarioDir(t, map[string]string{"bob.csv": credentials("bob"), "alice.csv": credentials("alice")})
	bobPort := freePort(t)
	registerSIPp(t, p, dir, "udp", "bob", bobPort)
	uas := startSIPpLoad(t, dir, "uas", time.Minute,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uas_answer.xml", "-m", "1",
		"-p", strconv.Itoa(bobPort), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)), "-t", "u1")
	waitUDPBound(t, bobPort)
	// The 3 s hold outlasts the 407's retransmissions at 0.5 and 1.5 s.
	uac := startSIPpLoad(t, dir, "uac", time.Minute,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uac_lost_407_ack.xml", "-inf", "alice.csv",
		"-s", "101", "-auth_uri", fmt.Sprintf("101@127.0.0.1:%d", p.sipPort),
		"-m", "1", "-d", "3000", "-recv_timeout", "10000",
		"-p", strconv.Itoa(freePort(t)), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)), "-t", "u1")
	if code := uac.wait(); code != 0 {
		t.Errorf("caller: sipp exit %d\n%s", code, uac.errors(dir))
	}
	if s := uac.stats(t, dir); s.OK != 1 || s.Failed != 0 {
		t.Errorf("caller: %d calls completed, %d failed; want 1 and 0", s.OK, s.Failed)
	}
	if code := uas.wait(); code != 0 {
		t.Errorf("callee: sipp exit %d\n%s", code, uas.errors(dir))
	}
	waitFor(t, "the call ended", 5*time.Second, func() bool { return strings.Contains(p.log.String(), `reason="caller hung up"`) })
}
