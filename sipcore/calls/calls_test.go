package calls

import "testing"

func TestCauseValid(t *testing.T) {
	want := []string{"answered", "no_answer", "busy", "rejected", "no_route", "cancelled", "failed", "error", "incomplete"}
	if len(Causes) != len(want) {
		t.Fatalf("%d causes, want %d", len(Causes), len(want))
	}
	for _, c := range want {
		if !Cause(c).Valid() {
			t.Errorf("%q should be valid", c)
		}
	}
	for _, c := range []string{"", "ANSWERED", "timeout", "declined"} {
		if Cause(c).Valid() {
			t.Errorf("%q should be invalid", c)
		}
	}
}

func TestDirectionValid(t *testing.T) {
	for _, d := range []string{"inbound", "outbound", "internal"} {
		if !Direction(d).Valid() {
			t.Errorf("%q should be valid", d)
		}
	}
	for _, d := range []string{"", "Inbound", "transit"} {
		if Direction(d).Valid() {
			t.Errorf("%q should be invalid", d)
		}
	}
}
