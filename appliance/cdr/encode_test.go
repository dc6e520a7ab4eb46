package cdr

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"
)

// fill sets every exported field of the struct v points to, recursively,
// to a value that is not its zero value, with s for strings: a field added
// to a record type and not to its encoder shows as a difference.
func fill(v reflect.Value, s string, n int) {
	v = v.Elem()
	t := v.Type()
	for i := range t.NumField() {
		if !t.Field(i).IsExported() {
			continue
		}
		fillValue(v.Field(i), s, n)
	}
}

func fillValue(f reflect.Value, s string, n int) {
	switch {
	case f.Type() == reflect.TypeFor[time.Time]():
		f.Set(reflect.ValueOf(time.Date(2026, 11, 21, 12, 0, 0, n*1_000_000, time.UTC)))
		return
	case f.Type() == reflect.TypeFor[*time.Time]():
		t := time.Date(2026, 11, 21, 12, 0, 1, 0, time.FixedZone("x", 3600))
		f.Set(reflect.ValueOf(&t))
		return
	}
	switch f.Kind() {
	case reflect.String:
		f.SetString(s)
	case reflect.Int, reflect.Int64:
		f.SetInt(int64(n))
	case reflect.Bool:
		f.SetBool(true)
	case reflect.Slice:
		sl := reflect.MakeSlice(f.Type(), 2, 2)
		for j := range 2 {
			fill(sl.Index(j).Addr(), s+"·", n+j)
		}
		f.Set(sl)
	default:
		panic("fill: unhandled kind " + f.Kind().String())
	}
}

var encodeStrings = []string{
	"", "plain", "+15551230001", `quote " backslash \ slash /`, "<script>&amp;</script>",
	"ctl \x00\x01\b\f\n\r\t\x1f\x7f", "utf8 é 日本 \u2028 \u2029 😀", "bad \xff\xfe utf8 \xe2\x82",
}

// TestEncodeMatchesJSON: the hand encoders write what encoding/json writes,
// for every field set (so a new field fails it) and for the shapes a
// record takes (nil and empty lists, no answer).
func TestEncodeMatchesJSON(t *testing.T) {
	for i, s := range encodeStrings {
		var r Record
		fill(reflect.ValueOf(&r), s, i)
		checkRecord(t, &r)
		r.Answer, r.Steps, r.Legs, r.Digits = nil, []Step{}, nil, []Digits{}
		checkRecord(t, &r)
		var e Entry
		fill(reflect.ValueOf(&e), s, i)
		checkEntry(t, &e)
		e.Tenant = ""
		checkEntry(t, &e)
	}
	r := call("acme", time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), true, "+15551230001", "+15559870002")
	n := r.normalize()
	checkRecord(t, &n)
	en := n.Entry()
	checkEntry(t, &en)
	if _, err := appendRecord(nil, &Record{Start: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}); err == nil {
		t.Fatal("year 10000 encoded")
	}
}

func checkRecord(t *testing.T, r *Record) {
	t.Helper()
	want, werr := json.Marshal(r)
	got, gerr := appendRecord([]byte("prefix"), r)
	if (werr != nil) != (gerr != nil) {
		t.Fatalf("errors differ: json %v, ours %v", werr, gerr)
	}
	if werr == nil && !bytes.Equal(got, append([]byte("prefix"), want...)) {
		t.Fatalf("record encodings differ:\njson %s\nours %s", want, got[len("prefix"):])
	}
}

func checkEntry(t *testing.T, e *Entry) {
	t.Helper()
	want, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	got, err := appendEntry(nil, e)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("entry encodings differ (%v):\njson %s\nours %s", err, want, got)
	}
}

// FuzzEncodeRecord holds the hand encoders to encoding/json over any
// strings and times.
func FuzzEncodeRecord(f *testing.F) {
	for i, s := range encodeStrings {
		f.Add(s, int64(i)*1e15)
	}
	f.Fuzz(func(t *testing.T, s string, ns int64) {
		var r Record
		fill(reflect.ValueOf(&r), s, 3)
		r.End = time.Unix(0, ns).UTC()
		checkRecord(t, &r)
		e := r.Entry()
		e.Tenant = s
		checkEntry(t, &e)
	})
}

func BenchmarkEncodeRecord(b *testing.B) {
	r := call("acme", time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), true, "+15551230001", "+15559870002")
	r.AddStep(Step{ID: "s1", Type: "dial", At: r.Start, Result: "answered"})
	n := r.normalize()
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(&n); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			var err error
			if buf, err = appendRecord(buf[:0], &n); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestPadMarker: a marker shorter than its spare by up to maxMarkerPad is
// padded with spaces to the spare's length and still decodes; a longer
// one, or one much shorter, is left as it is (cut to length instead).
func TestPadMarker(t *testing.T) {
	r := call("acme", time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC), true, "100", "200")
	n := r.normalize()
	data, err := appendRecord(nil, &n)
	if err != nil {
		t.Fatal(err)
	}
	data = append(data, '\n')
	for _, tc := range []struct{ size, want int }{
		{-1, len(data)},
		{len(data) - 3, len(data)},
		{len(data), len(data)},
		{len(data) + 7, len(data) + 7},
		{len(data) + maxMarkerPad, len(data) + maxMarkerPad},
		{len(data) + maxMarkerPad + 1, len(data)},
	} {
		got := padMarker(slices.Clone(data), tc.size)
		if len(got) != tc.want {
			t.Errorf("spare of %d bytes: marker of %d, want %d", tc.size, len(got), tc.want)
		}
		var back Record
		if err := json.Unmarshal(got, &back); err != nil || back.ID != r.ID || back.To != r.To {
			t.Errorf("spare of %d bytes: padded marker reads %v %+v", tc.size, err, back)
		}
	}
}
