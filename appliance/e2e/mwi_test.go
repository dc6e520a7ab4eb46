package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// mwiTenant is a tenant with a mailbox for extension 200 (account erin) and
// none for 201 (frank), in its own domain; mwiVoicemail turns voicemail and
// message waiting on. Both go in a pbxConfig: mwiVoicemail is appended under
// the System's spec like the Recording block.
const (
	mwiVoicemail = "  voicemail:\n    enabled: true\n    mwi: true\n"
	mwiTenant    = `---
configVersion: pbx/v1
kind: Tenant
metadata: {name: mwi}
spec:
  domain: mwi.example
  mailboxes:
    - extension: "200"
---
configVersion: pbx/v1
kind: Account
metadata: {name: erin, tenant: mwi}
spec:
  password: erin-secret
  extension: "200"
---
configVersion: pbx/v1
kind: Account
metadata: {name: frank, tenant: mwi}
spec:
  password: frank-secret
  extension: "201"
`
)

// mwiSubscriber starts a SIPp (uac_mwi.xml) on port for user of the mwi
// tenant, subscribing to mailbox: its first NOTIFY must say
// Messages-Waiting: first ("yes" or "no"); it then answers NOTIFYs until one
// says Messages-Waiting: then, unsubscribes and checks the final NOTIFY.
// The caller waits for it with r.wait() == 0 (r.errors(dir) tells why not),
// after doing what makes the mailbox change (a deposit: then "yes"; a
// deletion: then "no"; a restart: the resync NOTIFY repeats first).
func mwiSubscriber(t *testing.T, p *pbxProc, user, mailbox, first, then string, port int) (r *sippRun, dir string) {
	t.Helper()
	return mwiSubscriberAt(t, p, "mwi.example", user, mailbox, first, then, port)
}

// mwiSubscriberAt is mwiSubscriber for a user of the tenant of domain.
func mwiSubscriberAt(t *testing.T, p *pbxProc, domain, user, mailbox, first, then string, port int) (r *sippRun, dir string) {
	t.Helper()
	csv := fmt.Sprintf("SEQUENTIAL\n%s;%s;[authentication username=%s password=%s-secret];%s;Messages-Waiting: %s;Messages-Waiting: %s\n",
		user, domain, user, user, mailbox, first, then)
	dir = scenarioDir(t, map[string]string{"mwi.csv": csv})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("sipp %s:\n%s\n%s", user, r.out.String(), r.errors(dir))
		}
	})
	r = startSIPp(t, dir, "mwi-"+user, 60*time.Second,
		fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", "uac_mwi.xml", "-inf", "mwi.csv",
		// SIPp's digest uri is the remote address unless told.
		"-auth_uri", mailbox+"@"+domain,
		"-m", "1", "-p", strconv.Itoa(port), "-i", "127.0.0.1", "-t", "u1")
	return r, dir
}

// TestMWISubscribeNotifyAndResyncAfterRestart: a SIPp phone subscribes to
// its mailbox with digest authentication, gets a NOTIFY saying
// Messages-Waiting: no (no message yet), and after a restart of the PBX a
// NOTIFY again (the subscription was kept in the data directory); then it
// unsubscribes and gets the final NOTIFY (issue 11, item 5; the NOTIFY with
// Messages-Waiting: yes after a deposit needs voicemail: mwiSubscriber with
// first "no" and then "yes").
func TestMWISubscribeNotifyAndResyncAfterRestart(t *testing.T) {
	p := startPBX(t, pbxConfig{NoCDR: true, Recording: mwiVoicemail, Extra: mwiTenant})
	r, dir := mwiSubscriber(t, p, "erin", "200", "no", "no", freePort(t))
	// The first NOTIFY answered (its CSeq is stored before it leaves), restart.
	p.waitLog("mwi notify answered", 15*time.Second)
	p.stop()
	p.start()
	if code := r.wait(); code != 0 {
		t.Fatalf("sipp exit %d\n%s", code, r.errors(dir))
	}
	b, err := os.ReadFile(filepath.Join(dir, "mwi-erin.messages.log"))
	if err != nil {
		t.Fatal(err)
	}
	msgs := string(b)
	for _, want := range []string{"Event: message-summary", "Message-Account: sip:200@mwi.example", "Voice-Message: 0/0 (0/0)", "Subscription-State: terminated;reason=timeout"} {
		if !strings.Contains(msgs, want) {
			t.Errorf("no %q in the messages", want)
		}
	}
	if n := strings.Count(msgs, "NOTIFY sip:"); n != 3 {
		t.Errorf("%d NOTIFYs, want the first, the resync and the final", n)
	}
	if !p.log.ContainsSince(`msg="mwi subscriptions restored" component=mwi count=1`) {
		t.Errorf("the restart did not restore the subscription")
	}
}
