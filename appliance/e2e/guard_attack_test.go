package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// attackCounters is the part of /v1/security/counters these tests read.
type attackCounters struct {
	guardCounters
	Untracked       uint64 `json:"untracked"`
	Evicted         uint64 `json:"evicted"`
	AccountFailures uint64 `json:"account_failures"`
	AccountLocks    uint64 `json:"account_locks"`
	AccountRefused  uint64 `json:"account_refused"`
	AccountsLocked  int    `json:"accounts_locked"`
}

// keepAliveFlood sends a 4-byte CRLFCRLF keep-alive from each of n
// loopback addresses (127.1.0.0 and up) to target, all of them every
// period, until the test ends. It returns how many rounds were sent.
func keepAliveFlood(t *testing.T, target string, n int, period time.Duration) func() int {
	t.Helper()
	dst, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]*net.UDPConn, n)
	for i := range conns {
		src := &net.UDPAddr{IP: net.IPv4(127, 1, byte(i>>8), byte(i))}
		if conns[i], err = net.ListenUDP("udp", src); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	rounds := 0
	wg.Go(func() {
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			for _, c := range conns {
				_, _ = c.WriteToUDP([]byte("\r\n\r\n"), dst)
			}
			mu.Lock()
			rounds++
			mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		for _, c := range conns {
			c.Close()
		}
	})
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return rounds
	}
}

// pollCounters reads the guard's counters until ok accepts them or d passes.
func pollCounters(t *testing.T, api apiClient, d time.Duration, ok func(attackCounters) bool) attackCounters {
	t.Helper()
	var c attackCounters
	for end := time.Now().Add(d); ; {
		c = attackCounters{}
		api.getJSON("/v1/security/counters", &c)
		if ok(c) || time.Now().After(end) {
			return c
		}
		time.Sleep(200 * time.Millisecond) // polling interval, not a wait for an event
	}
}

// TestGuardTrackerFloodThenBruteForceBanned: 1,000 loopback sources send
// keep-alives four times a second, twice the tracker's 500 places, so no
// tracked source is ever idle. A SIPp brute force from a new source is
// still tracked and banned after 5 guesses while the flood goes on,
// nothing fails open, and the evictions are counted.
func TestGuardTrackerFloodThenBruteForceBanned(t *testing.T) {
	apiPort := freePort(t)
	sec := guardSecurity + "    maxTracked: 500\n"
	p := startPBX(t, pbxConfig{APIPort: apiPort, Security: sec, NoCDR: true, LogLevel: "info"})
	api := apiClient{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", apiPort), token: testToken}
	target := fmt.Sprintf("127.0.0.1:%d", p.sipPort)

	rounds := keepAliveFlood(t, target, 1000, 250*time.Millisecond)
	c := pollCounters(t, api, 10*time.Second, func(c attackCounters) bool {
		return rounds() >= 3 && c.Tracked == 500
	})
	if c.Tracked != 500 {
		t.Fatalf("counters %+v after %d rounds: want the tracker full (500)", c, rounds())
	}

	dir := scenarioDir(t, map[string]string{"guesses.csv": wrongPasswords(8)})
	r := startSIPp(t, dir, "crack", 60*time.Second, target, "-sf", "register_wrong.xml", "-inf", "guesses.csv",
		"-m", "8", "-l", "1", "-i", "127.0.0.2", "-p", strconv.Itoa(freePort(t)), "-recv_timeout", "2000", "-max_retrans", "2")
	if code := r.wait(); code == 0 {
		t.Fatalf("every guess was answered during the flood: the guard was blinded\n%s", r.errors(dir))
	}
	var bans banList
	api.getJSON("/v1/security/bans", &bans)
	if len(bans.Bans) != 1 || bans.Bans[0].IP != "127.0.0.2" {
		t.Fatalf("bans %+v, want the brute-forcer 127.0.0.2", bans)
	}
	c = attackCounters{}
	api.getJSON("/v1/security/counters", &c)
	// Every round of 1,000 sources through 500 places evicts about 1,000.
	if c.AuthFailures != 5 || c.Banned == 0 || c.Untracked != 0 || c.Tracked > 500 || c.Evicted < uint64(500*rounds()) {
		t.Fatalf("counters %+v after %d flood rounds: want 5 failures, later guesses dropped, no fail open, the flood evicting",
			c, rounds())
	}
	if strings.Contains(p.log.String(), "admitting without tracking") {
		t.Fatal("fail open logged though every tracked source was blameless")
	}
}

// TestGuardDistributedGuessingLocksAccount: 50 loopback addresses guess
// alice's password once each, none reaching the per-source ban. After 10
// failures the account is locked: the right password from a new address
// is refused like a wrong one, while the phone that registered from
// 127.0.0.3 before the attack still registers, and bob is unaffected.
func TestGuardDistributedGuessingLocksAccount(t *testing.T) {
	p, api := startGuardedPBX(t)
	target := fmt.Sprintf("127.0.0.1:%d", p.sipPort)
	dir := scenarioDir(t, map[string]string{
		"guess.csv": wrongPasswords(1),
		"alice.csv": credentials("alice"),
		"bob.csv":   credentials("bob"),
	})
	register := func(name, csv, ip string) int {
		t.Helper()
		r := startSIPp(t, dir, name, 30*time.Second, target, "-sf", "register.xml", "-inf", csv,
			"-m", "1", "-i", ip, "-p", strconv.Itoa(freePort(t)), "-recv_timeout", "3000")
		return r.wait()
	}
	if code := register("phone-before", "alice.csv", "127.0.0.3"); code != 0 {
		t.Fatalf("the phone did not register before the attack: sipp exit %d", code)
	}

	// Ten guessers at a time, each from its own address, one guess each.
	var wg sync.WaitGroup
	var mu sync.Mutex
	answered := 0
	for batch := range 5 {
		for i := range 10 {
			ip := fmt.Sprintf("127.0.2.%d", 10+batch*10+i)
			r := startSIPp(t, dir, "guess-"+ip, 30*time.Second, target, "-sf", "register_wrong.xml", "-inf", "guess.csv",
				"-m", "1", "-i", ip, "-p", strconv.Itoa(freePort(t)), "-recv_timeout", "3000")
			wg.Go(func() {
				if r.wait() == 0 {
					mu.Lock()
					answered++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	if answered != 50 {
		t.Fatalf("%d of 50 guesses answered 403: a source was banned or dropped", answered)
	}

	if code := register("right-password-new-source", "alice.csv", "127.0.0.70"); code == 0 {
		t.Fatal("the right password from a new address registered while alice was locked")
	}
	if code := register("phone-after", "alice.csv", "127.0.0.3"); code != 0 {
		t.Fatalf("the phone that registered from its own address was locked out: sipp exit %d", code)
	}
	if code := register("bob", "bob.csv", "127.0.0.71"); code != 0 {
		t.Fatalf("bob, another account, was refused: sipp exit %d", code)
	}
	var c attackCounters
	api.getJSON("/v1/security/counters", &c)
	if c.AuthFailures != 50 || c.AccountFailures != 50 || c.AccountLocks != 1 || c.AccountsLocked != 1 ||
		c.AccountRefused != 1 || c.BansActive != 0 {
		t.Fatalf("counters %+v: want 50 failures, one account locked, one refusal, no source banned", c)
	}
	p.log.Contains(`msg="valid credentials refused: account locked against password guessing"`) // the log is written in batches
	log := p.log.String()
	if !strings.Contains(log, `msg="account locked against password guessing"`) || !strings.Contains(log, "username=alice") {
		t.Fatal("no log line for the account lock")
	}
	if !strings.Contains(log, `msg="valid credentials refused: account locked against password guessing"`) {
		t.Fatal("no log line for the refusal")
	}
}

// TestAPIGuesserCannotLockOutOperator: a local process sending wrong
// tokens from the operator's address empties its failed-authentication
// bucket; the operator's valid token is still answered 200 every time,
// while the guesser stays at 429.
func TestAPIGuesserCannotLockOutOperator(t *testing.T) {
	apiPort := freePort(t)
	startPBX(t, pbxConfig{APIPort: apiPort, NoCDR: true, LogLevel: "info"})
	base := fmt.Sprintf("http://127.0.0.1:%d", apiPort)
	get := func(token string) int {
		t.Helper()
		req, err := http.NewRequest("GET", base+"/v1/status", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	var codes []int
	for i := range 8 {
		codes = append(codes, get(fmt.Sprintf("wrong-token-%d-0123456789abcdefghij", i)))
	}
	if fmt.Sprint(codes) != "[401 401 401 401 401 429 429 429]" {
		t.Fatalf("wrong tokens answered %v, want 5 × 401 then 429", codes)
	}
	for i := range 5 {
		if code := get(testToken); code != 200 {
			t.Fatalf("valid token %d after the guesses: %d, want 200", i, code)
		}
	}
	if code := get("wrong-token-again-0123456789abcdefghij"); code != 429 {
		t.Fatalf("guess after the operator's requests: %d, want 429", code)
	}
}
