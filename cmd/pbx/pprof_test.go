package main

import (
	"errors"
	"net/http/httptest"
	"strings"
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

func TestServeMemoryClasses(t *testing.T) {
	rec := httptest.NewRecorder()
	serveMemoryClasses(rec, httptest.NewRequest("GET", "/debug/memory", nil))
	body := rec.Body.String()
	for _, want := range []string{"/memory/classes/heap/objects:bytes ", "/memory/classes/metadata/mspan/inuse:bytes ", "/memory/classes/total:bytes "} {
		if !strings.Contains(body, want) {
			t.Errorf("/debug/memory lacks %q:\n%s", want, body)
		}
	}
}
