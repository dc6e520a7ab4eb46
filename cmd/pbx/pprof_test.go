package main

import (
	"errors"
	"testing"
)

func TestCheckLoopback(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:6060": true,
		"127.0.0.2:0":    true,
		"[::1]:6060":     true,
		"0.0.0.0:6060":   false,
		"10.0.0.1:6060":  false,
		"localhost:6060": false, // a name could resolve anywhere
		":6060":          false,
	} {
		err := checkLoopback(addr)
		if (err == nil) != ok {
			t.Errorf("checkLoopback(%q) = %v, want ok=%t", addr, err, ok)
		}
		if !ok && addr != ":6060" && !errors.Is(err, errPprofNotLoopback) {
			t.Errorf("checkLoopback(%q) = %v, want errPprofNotLoopback", addr, err)
		}
	}
}
