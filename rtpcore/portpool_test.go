package rtpcore

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

func TestPortPoolRange(t *testing.T) {
	lo, hi := freeRange(t, 4) // e.g. 30000-30007: 30000, 30002, 30004, 30006
	p, err := NewPortPool(PortPoolOptions{Min: lo, Max: hi, BindIP: loopback, Quarantine: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Size() != 4 {
		t.Fatalf("size %d", p.Size())
	}
	var conns []*net.UDPConn
	seen := map[int]bool{}
	for i := 0; i < 4; i++ {
		c, err := p.Allocate()
		if err != nil {
			t.Fatalf("allocate %d: %v", i, err)
		}
		port := c.LocalAddr().(*net.UDPAddr).Port
		if port < lo || port+1 > hi || port%2 != 0 || seen[port] {
			t.Errorf("port %d outside %d-%d, odd or repeated", port, lo, hi)
		}
		seen[port] = true
		conns = append(conns, c)
	}
	if _, err := p.Allocate(); !errors.Is(err, ErrPortsExhausted) {
		t.Fatalf("fifth allocate: %v", err)
	}
	if p.InUse() != 4 {
		t.Errorf("in use %d", p.InUse())
	}
	// Quarantine: a released port is not handed out while it rests.
	p.Release(conns[0])
	if p.InUse() != 3 || p.Quarantined() != 1 {
		t.Errorf("in use %d quarantined %d", p.InUse(), p.Quarantined())
	}
	if _, err := p.Allocate(); !errors.Is(err, ErrPortsExhausted) {
		t.Fatalf("allocate during quarantine: %v", err)
	}
	// Once the quarantine is over (clock moved), it comes back.
	p.mu.Lock()
	p.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	p.mu.Unlock()
	c, err := p.Allocate()
	if err != nil {
		t.Fatalf("allocate after quarantine: %v", err)
	}
	if c.LocalAddr().(*net.UDPAddr).Port != conns[0].LocalAddr().(*net.UDPAddr).Port {
		t.Errorf("got port %v, want the rested one", c.LocalAddr())
	}
	conns[0] = c
	for _, c := range conns {
		p.Release(c)
	}
	if p.InUse() != 0 {
		t.Errorf("leak: %d in use", p.InUse())
	}
	p.Close()
	if _, err := p.Allocate(); !errors.Is(err, ErrClosed) {
		t.Errorf("allocate after close: %v", err)
	}
}

// TestPortPoolMaxInUse: with MaxInUse below the range, the pool refuses a
// port past the bound although the range has free ones, and hands one out
// again once a port is released (no quarantine here).
func TestPortPoolMaxInUse(t *testing.T) {
	lo, hi := freeRange(t, 4)
	p, err := NewPortPool(PortPoolOptions{Min: lo, Max: hi, BindIP: loopback, Quarantine: -1, MaxInUse: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var conns []*net.UDPConn
	for i := 0; i < 2; i++ {
		rtp, rtcp, err := p.AllocatePair()
		if err != nil {
			t.Fatalf("allocate %d: %v", i, err)
		}
		defer rtcp.Close()
		conns = append(conns, rtp)
	}
	if _, _, err := p.AllocatePair(); !errors.Is(err, ErrPortsExhausted) {
		t.Fatalf("third allocate with MaxInUse 2: %v", err)
	}
	if p.InUse() != 2 || p.Size() != 4 || p.Exhausted() != 1 {
		t.Errorf("in use %d size %d exhausted %d; want 2, 4, 1", p.InUse(), p.Size(), p.Exhausted())
	}
	p.Release(conns[0])
	c, err := p.Allocate()
	if err != nil {
		t.Fatalf("allocate after a release: %v", err)
	}
	p.Release(c)
	p.Release(conns[1])
}

func TestPortPoolSkipsBusyPort(t *testing.T) {
	lo, hi := freeRange(t, 2)
	busy, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: lo})
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	p, _ := NewPortPool(PortPoolOptions{Min: lo, Max: hi, BindIP: loopback}, nil)
	c, err := p.Allocate()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(c)
	if c.LocalAddr().(*net.UDPAddr).Port != lo+2 {
		t.Errorf("got %v, want %d", c.LocalAddr(), lo+2)
	}
	if _, err := p.Allocate(); !errors.Is(err, ErrPortsExhausted) {
		t.Errorf("busy port handed out: %v", err)
	}
}

func TestPortPoolOptions(t *testing.T) {
	tests := []struct {
		name     string
		min, max int
		size     int
		ok       bool
	}{
		{"defaults", 0, 0, 5000, true},
		{"odd bounds", 10001, 10010, 4, true}, // 10002..10008
		{"one pair", 10000, 10001, 1, true},
		{"no pair", 10001, 10002, 0, false},
		{"reversed", 20000, 10000, 0, false},
		{"too high", 60000, 70000, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewPortPool(PortPoolOptions{Min: tt.min, Max: tt.max}, nil)
			if (err == nil) != tt.ok {
				t.Fatalf("err %v", err)
			}
			if err == nil && p.Size() != tt.size {
				t.Errorf("size %d, want %d", p.Size(), tt.size)
			}
		})
	}
	if _, err := New(Options{PortMin: 10000}, nil); err == nil {
		t.Error("engine accepted only one bound")
	}
}

func TestPortPoolConcurrent(t *testing.T) {
	lo, hi := freeRange(t, 40)
	p, _ := NewPortPool(PortPoolOptions{Min: lo, Max: hi, BindIP: loopback, Quarantine: -1}, nil)
	var wg sync.WaitGroup
	var mu sync.Mutex
	held := map[int]bool{}
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				c, err := p.Allocate()
				if err != nil {
					continue
				}
				port := c.LocalAddr().(*net.UDPAddr).Port
				mu.Lock()
				if held[port] {
					t.Errorf("port %d handed out twice", port)
				}
				held[port] = true
				mu.Unlock()
				mu.Lock()
				delete(held, port)
				mu.Unlock()
				p.Release(c)
			}
		}()
	}
	wg.Wait()
	if p.InUse() != 0 || p.Size() != 40 {
		t.Errorf("in use %d size %d", p.InUse(), p.Size())
	}
}

// TestPortPoolBindsOutsideItsLock: while one allocation waits in its bind
// (a slow system call), another completes; a refused allocation is counted.
func TestPortPoolBindsOutsideItsLock(t *testing.T) {
	lo, hi := freeRange(t, 2)
	p, err := NewPortPool(PortPoolOptions{Min: lo, Max: hi, BindIP: loopback, Quarantine: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan int), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := p.take(func(port int) error { entered <- port; <-release; return nil })
		done <- err
	}()
	slow := <-entered
	second := make(chan int, 1)
	go func() {
		port, err := p.take(func(int) error { return nil })
		if err != nil {
			t.Error(err)
		}
		second <- port
	}()
	select {
	case port := <-second:
		if port == slow {
			t.Fatalf("port %d handed out twice", port)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an allocation waited for another's bind: the pool binds under its lock")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := p.take(func(int) error { return nil }); !errors.Is(err, ErrPortsExhausted) || p.Exhausted() != 1 {
		t.Fatalf("third allocation: %v, exhausted counted %d", err, p.Exhausted())
	}
}
