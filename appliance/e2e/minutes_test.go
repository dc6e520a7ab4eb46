package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"pbx/db"
)

// TestOutboundMinutesBudgetCutsCall: acme's month budget is one minute and
// 57 s of it are spent (seeded in pbx.db before start). zed's outbound call
// through the carrier is admitted and cut by the PBX about 3 s after the
// answer, both sides getting its BYE, with the spent budget as the record's
// reason. The next outbound call is refused 403, also after a restart (the
// counters are kept in bbolt), and so is a carrier's call acme forwards to
// a carrier.
func TestOutboundMinutesBudgetCutsCall(t *testing.T) {
	requireSIPp(t)
	const seeded = 57 * time.Second
	cfg := trunkPBX{
		carrierPort: freePort(t), intlPort: freePort(t), localPort: freePort(t), fallbackPort: freePort(t),
		acmeLimits: "    outboundMinutesPerMonth: 1\n",
		beforeStart: func(dataDir string) {
			d, err := db.Open(dataDir, db.Options{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			now := time.Now() // acme has no time zone: the host's, as for the PBX
			month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.Local)
			if err := d.Minutes().SaveMinutes(map[string]db.Minutes{"acme": {MonthStart: month, Month: seeded}}); err != nil {
				t.Fatal(err)
			}
		},
	}
	p, _ := startTrunkPBX(t, cfg)
	dir := scenarioDir(t, map[string]string{"zed.csv": "SEQUENTIAL\nzed;acme.test;[authentication username=zed password=zed-secret]\n"})
	zedCalls := func(name, number, scenario string) *sippRun {
		return startSIPp(t, dir, name, 60*time.Second,
			fmt.Sprintf("127.0.0.1:%d", p.sipPort), "-sf", scenario, "-inf", "zed.csv",
			"-s", number, "-auth_uri", fmt.Sprintf("%s@127.0.0.1:%d", number, p.sipPort),
			"-m", "1", "-p", strconv.Itoa(freePort(t)), "-i", "127.0.0.1",
			"-mi", "127.0.0.1", "-mp", strconv.Itoa(freePort(t)), "-t", "u1")
	}

	uas := startSIPp(t, dir, "carrier", 60*time.Second, "-sf", "uas_answer.xml", "-m", "1",
		"-p", strconv.Itoa(cfg.carrierPort), "-i", "127.0.0.2", "-mi", "127.0.0.2", "-mp", strconv.Itoa(freePort(t)), "-rtp_echo", "-t", "u1")
	time.Sleep(300 * time.Millisecond) // let the UAS bind before the call reaches it
	start := time.Now()
	uac := zedCalls("zed-cut", "9555123", "uac_hungup.xml") // waits for the PBX's BYE
	mustExit0(t, uac, dir, "zed (cut by the PBX)")
	mustExit0(t, uas, dir, "carrier (cut by the PBX)")
	if el := time.Since(start); el > 15*time.Second {
		t.Errorf("the call ran %s; the budget had 3 s left", el)
	}
	rec := waitRecord(t, p.dataDir, "acme", func(r map[string]any) bool { return field(r, "to") == "9555123" })
	expect(t, rec, map[string]string{"direction": "outbound", "cause": "answered", "trunk": "carrier"})
	if !strings.Contains(field(rec, "reason"), "outboundMinutesPerMonth used (1 minutes)") {
		t.Errorf("reason %q, want the spent month budget", field(rec, "reason"))
	}
	// Cut within a meter interval (1 s) of the budget, and record-keeping slack.
	if ms, _ := strconv.Atoi(field(rec, "bill_ms")); ms < 2500 || ms > 5500 {
		t.Errorf("bill_ms %d, want about 3000 (60 s budget less 57 s seeded)", ms)
	}

	// refused: a new outbound call of zed is answered 403 for the spent
	// budget; it is the nth refusal on record.
	refused := func(name string, n int) {
		t.Helper()
		mustExit0(t, zedCalls(name, "9555124", "uac_403.xml"), dir, name)
		waitFor(t, name+" on record", 10*time.Second, func() bool {
			k := 0
			for _, r := range recordsOf(t, p.dataDir, "acme") {
				if field(r, "to") == "9555124" && field(r, "sip_status") == "403" && strings.Contains(field(r, "reason"), "outboundMinutesPerMonth") {
					k++
				}
			}
			return k == n
		})
	}
	refused("zed-after-cut", 1)
	p.stop()
	p.start()
	refused("zed-after-restart", 2)

	// A carrier's call that acme forwards to a carrier is outbound too.
	mustExit0(t, carrierCall(t, p, dir, "carrier-fwd", "127.0.0.2", "+15550006", "carrier_403.xml"), dir, "carrier forwarded")
	rec = waitRecord(t, p.dataDir, "acme", func(r map[string]any) bool { return field(r, "did") == "+15550006" })
	expect(t, rec, map[string]string{"direction": "inbound", "cause": "rejected", "sip_status": "403", "trunk": "carrier"})
	if !strings.Contains(field(rec, "reason"), "outboundMinutesPerMonth") {
		t.Errorf("forwarded call's reason %q, want the spent month budget", field(rec, "reason"))
	}
	if n := len(recordsOf(t, p.dataDir, "acme")); n != 4 {
		t.Errorf("acme has %d records, want the cut call and three refusals", n)
	}
}
