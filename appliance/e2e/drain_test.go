package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDrainOnSIGTERM: after SIGTERM a new INVITE gets 503 while the call in
// progress continues to its natural end, and then the process exits by itself.
func TestDrainOnSIGTERM(t *testing.T) {
	p := startPBX(t, pbxConfig{})
	dir := scenarioDir(t, map[string]string{"bob.csv": credentials("bob"), "alice.csv": credentials("alice")})
	bobPort := freePort(t)
	registerSIPp(t, p, dir, "udp", "bob", bobPort)
	uas := startSIPp(t, dir, "uas", 60*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uas_answer.xml", "-m", "1",
		"-p", strconv.Itoa(bobPort), "-i", "127.0.0.1", "-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)), "-rtp_echo")
	time.Sleep(300 * time.Millisecond)
	long := startSIPp(t, dir, "long", 60*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uac_call.xml", "-inf", "alice.csv",
		"-s", "101", "-auth_uri", fmt.Sprintf("101@127.0.0.1:%d", p.sipPort),
		"-m", "1", "-d", "4000", "-p", strconv.Itoa(freePort(t)), "-i", "127.0.0.1",
		"-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)))
	p.waitLog("call answered", 20*time.Second)

	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	p.waitLog("draining", 5*time.Second)
	refused := startSIPp(t, dir, "refused", 30*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uac_call.xml", "-inf", "alice.csv",
		"-s", "101", "-auth_uri", fmt.Sprintf("101@127.0.0.1:%d", p.sipPort),
		"-m", "1", "-p", strconv.Itoa(freePort(t)), "-i", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)))
	if code := refused.wait(); code == 0 {
		t.Fatal("a new call was accepted while draining")
	}
	if errs := refused.errors(dir); !strings.Contains(errs, "503 Service Unavailable") {
		t.Errorf("new call while draining was not answered 503:\n%s", errs)
	}
	if code := long.wait(); code != 0 {
		t.Fatalf("the call in progress did not finish normally: sipp exit %d\n%s", code, long.errors(dir))
	}
	_ = uas.wait()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("pbx did not exit after its last call ended")
	}
	if p.exitErr != nil {
		t.Errorf("pbx exit after drain: %v", p.exitErr)
	}
	// The refused INVITE was answered before authentication, so it belongs to no
	// tenant and leaves no record; the finished call does.
	if recs := callRecords(t, p.dataDir); len(recs) != 1 || recs[0]["cause"] != "answered" {
		t.Errorf("records after drain: %v", recs)
	}
}
