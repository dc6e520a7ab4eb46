package cdr

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"pbx/sipcore/calls"
)

func TestNewIDForm(t *testing.T) {
	at := time.Date(2026, 11, 21, 15, 12, 30, 123456789, time.FixedZone("x", 3600))
	re := regexp.MustCompile(`^20261121T141230\.123Z-[a-z0-9]{8}$`)
	seen := map[ID]bool{}
	for range 1000 {
		id := NewID(at)
		if !re.MatchString(string(id)) {
			t.Fatalf("id %q does not have the form", id)
		}
		if seen[id] {
			t.Fatalf("duplicate id %q", id)
		}
		seen[id] = true
		got, err := id.Time()
		if err != nil || !got.Equal(at.Truncate(time.Millisecond)) {
			t.Fatalf("Time() = %v, %v", got, err)
		}
	}
	a, b := NewID(at), NewID(at.Add(time.Millisecond))
	if !(a < b) {
		t.Fatalf("ids do not sort by time: %s %s", a, b)
	}
}

func TestIDValidate(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"20261121T151230.123Z-k3j9q2ab", true},
		{"20261121T151230.123Z-k", true},
		{"20261121T151230.123Z-", false},
		{"20261121T151230.123Z-K3J9Q2AB", false},
		{"20261121T151230.123Z-k3j9/2ab", false},
		{"20261121T151230.123Z-..", false},
		{"20261321T151230.123Z-k3j9q2ab", false}, // month 13
		{"20261121T15:12:30.123Z-k3j9q2ab", false},
		{"../../../etc/passwd", false},
		{"", false},
		{"20261121T151230.123Z-" + strings.Repeat("a", 33), false},
	} {
		err := ID(tc.id).Validate()
		if (err == nil) != tc.ok {
			t.Errorf("Validate(%q) = %v, want ok=%v", tc.id, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrID) {
			t.Errorf("Validate(%q) error %v is not ErrID", tc.id, err)
		}
	}
}

func TestValidateTenant(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"acme", true}, {"Acme-Corp_2.eu", true}, {"", false}, {".", false}, {"..", false},
		{".hidden", false}, {"a/b", false}, {"a b", false}, {strings.Repeat("a", 129), false},
	} {
		if err := ValidateTenant(tc.name); (err == nil) != tc.ok {
			t.Errorf("ValidateTenant(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestAddDigitsDropsVoicemailCheck(t *testing.T) {
	r := NewRecord("acme", calls.DirectionInternal, time.Now())
	at := time.Now()
	if !r.AddDigits("s1", "dial", "123", at) {
		t.Fatal("dial digits refused")
	}
	if r.AddDigits("s2", StepVoicemailCheck, "4711", at) {
		t.Fatal("voicemail_check digits accepted")
	}
	if r.AddDigits("s1", "dial", "", at) {
		t.Fatal("empty digits accepted")
	}
	if len(r.Digits) != 1 || r.Digits[0].Digits != "123" {
		t.Fatalf("digits = %+v", r.Digits)
	}
	// Digits appended to the field directly are still filtered on write,
	// by type and by the id of a voicemail_check step.
	r.AddStep(Step{ID: "s3", Type: StepVoicemailCheck})
	r.Digits = append(r.Digits, Digits{Step: "s2", Type: StepVoicemailCheck, Digits: "4711"}, Digits{Step: "s3", Digits: "9999"})
	n := r.normalize()
	if len(n.Digits) != 1 || n.Digits[0].Digits != "123" {
		t.Fatalf("normalized digits = %+v", n.Digits)
	}
}

func TestRecordJSONFields(t *testing.T) {
	start := time.Date(2026, 11, 21, 15, 12, 30, 123_400_000, time.UTC)
	r := call("acme", start, true, "+15551230001", "+15559870002")
	r.AddStep(Step{ID: "s1", Type: "dial", At: start})
	r.AddLeg(Leg{Target: "sip:100@10.0.0.5", Kind: "contact", Start: start, End: start.Add(time.Minute), SIPStatus: 200, Won: true, Cause: calls.CauseAnswered})
	n := r.normalize()
	data, err := json.Marshal(&n)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.Unmarshal(data, &m)
	want := []string{"id", "tenant", "v", "direction", "call_id", "dialog_id", "from", "from_name", "to", "did",
		"trunk", "source", "extension", "start", "answer", "end", "duration_ms", "bill_ms", "cause", "sip_status",
		"reason", "steps", "legs", "digits", "answered_by", "incomplete", "queue", "recording", "voicemail"}
	var got []string
	for k := range m {
		got = append(got, k)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("fields\n got %v\nwant %v", got, want)
	}
	if m["v"] != float64(1) || m["duration_ms"] != float64(90000) || m["bill_ms"] != float64(80000) {
		t.Fatalf("v/duration/bill = %v %v %v", m["v"], m["duration_ms"], m["bill_ms"])
	}
	if m["start"] != "2026-11-21T15:12:30.123Z" {
		t.Fatalf("start = %v (want ms precision, UTC)", m["start"])
	}
	steps := m["steps"].([]any)[0].(map[string]any)
	for _, k := range []string{"id", "type", "skipped", "at", "result", "error"} {
		if _, ok := steps[k]; !ok {
			t.Errorf("step lacks %s", k)
		}
	}
	leg := m["legs"].([]any)[0].(map[string]any)
	for _, k := range []string{"target", "kind", "start", "end", "sip_status", "won", "cause"} {
		if _, ok := leg[k]; !ok {
			t.Errorf("leg lacks %s", k)
		}
	}

	// Unanswered: no answer field, bill_ms zero, lists empty not null.
	u := call("acme", start, false, "1", "2")
	nu := u.normalize()
	data, _ = json.Marshal(&nu)
	if strings.Contains(string(data), `"answer"`) || !strings.Contains(string(data), `"bill_ms":0`) ||
		!strings.Contains(string(data), `"steps":[]`) || !strings.Contains(string(data), `"digits":[]`) {
		t.Fatalf("unanswered record JSON: %s", data)
	}
}

func TestValidate(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for name, mod := range map[string]func(*Record){
		"bad cause":         func(r *Record) { r.Cause = "timeout" },
		"no cause":          func(r *Record) { r.Cause = "" },
		"bad direction":     func(r *Record) { r.Direction = "sideways" },
		"end before start":  func(r *Record) { r.End = r.Start.Add(-time.Second) },
		"no end":            func(r *Record) { r.End = time.Time{} },
		"answer after end":  func(r *Record) { a := r.End.Add(time.Second); r.Answer = &a },
		"tenant with slash": func(r *Record) { r.Tenant = "a/b" },
		"bad id":            func(r *Record) { r.ID = "x" },
	} {
		r := call("acme", start, true, "1", "2")
		mod(r)
		if err := r.validate(true); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := call("acme", start, true, "1", "2").validate(true); err != nil {
		t.Fatalf("good record refused: %v", err)
	}
}

// TestIDValidateTimeAsParse checks that Validate accepts exactly the
// timestamps time.Parse does, over every month 00-13, day 00-32 and edge
// values of the other fields, in leap and common years and centuries.
func TestIDValidateTimeAsParse(t *testing.T) {
	n := 0
	for _, y := range []string{"0000", "1900", "2000", "2024", "2026", "2100", "9999"} {
		for m := 0; m <= 13; m++ {
			for d := 0; d <= 32; d++ {
				for _, hms := range []string{"000000", "235959", "240000", "006000", "000060", "125959"} {
					ts := fmt.Sprintf("%s%02d%02dT%s.999Z", y, m, d, hms)
					_, perr := time.Parse(idTimeLayout, ts)
					verr := ID(ts + "-k3j9q2ab").Validate()
					if (perr == nil) != (verr == nil) {
						t.Fatalf("%s: time.Parse %v, Validate %v", ts, perr, verr)
					}
					if perr == nil {
						n++
					}
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no valid timestamp tried")
	}
}

// BenchmarkIDValidate measures the validation every Answered and
// CommitThen makes of a record's id.
func BenchmarkIDValidate(b *testing.B) {
	id := NewID(time.Date(2026, 2, 28, 23, 59, 59, 0, time.UTC))
	b.ReportAllocs()
	for b.Loop() {
		if err := id.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}
