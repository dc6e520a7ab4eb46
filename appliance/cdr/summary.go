package cdr

import (
	"math"

	"pbx/sipcore/calls"
)

// gramLen is the length of the substrings of from, to and did a day's Bloom
// filter holds. A number filter of at least gramLen characters can rule out
// a whole day without reading its lines; a shorter one reads every day in
// range (short fragments match most days anyway).
const gramLen = 6

// maxSetValues bounds the distinct trunks or extensions a summary lists;
// beyond it the set answers "maybe" for every value.
const maxSetValues = 64

// summary describes one day's index lines well enough to skip the day.
type summary struct {
	count, answered int
	dirMask         uint8
	minMS, maxMS    int64
	trunks, exts    valueSet
	bloom           bloom
}

func dirBit(d calls.Direction) uint8 {
	switch d {
	case calls.DirectionInbound:
		return 1
	case calls.DirectionOutbound:
		return 2
	case calls.DirectionInternal:
		return 4
	}
	return 8
}

func newSummary(es []Entry) summary {
	s := summary{minMS: math.MaxInt64, maxMS: math.MinInt64}
	grams := 0
	for i := range es {
		grams += gramCount(es[i].From) + gramCount(es[i].To)
		if es[i].DID != es[i].To && es[i].DID != es[i].From {
			grams += gramCount(es[i].DID)
		}
	}
	// Room for half as many substrings again before a rebuild (a day still
	// being written grows).
	s.bloom = newBloom(grams + grams/2)
	for i := range es {
		s.add(&es[i])
	}
	return s
}

func (s *summary) add(e *Entry) {
	s.count++
	if e.Answered {
		s.answered++
	}
	s.dirMask |= dirBit(e.Direction)
	s.minMS = min(s.minMS, e.startMS)
	s.maxMS = max(s.maxMS, e.startMS)
	s.trunks.add(e.Trunk)
	s.exts.add(e.Extension)
	s.bloom.addGrams(e.From)
	s.bloom.addGrams(e.To)
	if e.DID != e.To && e.DID != e.From { // usually the same number as to
		s.bloom.addGrams(e.DID)
	}
}

// match reports whether a line of this day may pass f.
func (s *summary) match(f *filter) bool {
	if s.count == 0 || s.maxMS < f.fromMS || s.minMS > f.upper.ms {
		return false
	}
	if f.direction != "" && s.dirMask&dirBit(f.direction) == 0 {
		return false
	}
	if f.answered != nil {
		if *f.answered && s.answered == 0 || !*f.answered && s.answered == s.count {
			return false
		}
	}
	if f.trunk != "" && !s.trunks.mayHave(f.trunk) {
		return false
	}
	if f.extension != "" && !s.exts.mayHave(f.extension) {
		return false
	}
	if f.party != "" && !s.exts.mayHave(f.party) && len(f.party) >= gramLen && !s.bloom.mayHaveAll(f.party) {
		return false
	}
	if len(f.number) >= gramLen && !s.bloom.mayHaveAll(f.number) {
		return false
	}
	return true
}

// valueSet is a small exact set that gives up (answers maybe) when large.
type valueSet struct {
	vals map[string]struct{}
	full bool
}

func (v *valueSet) add(s string) {
	if v.full {
		return
	}
	if _, ok := v.vals[s]; ok {
		return
	}
	if len(v.vals) >= maxSetValues {
		v.full, v.vals = true, nil
		return
	}
	if v.vals == nil {
		v.vals = map[string]struct{}{}
	}
	v.vals[s] = struct{}{}
}

func (v *valueSet) mayHave(s string) bool {
	if v.full {
		return true
	}
	_, ok := v.vals[s]
	return ok
}

// bloom is a Bloom filter of gramLen-byte substrings, 8 bits per expected
// element and three probes (about 3% false positives per substring; a
// 10-digit number filter needs five substrings to all collide).
type bloom struct {
	bits  []uint64
	m     uint64 // number of bits
	n     int    // substrings added
	limit int    // substrings it was sized for
}

func gramCount(s string) int {
	if len(s) < gramLen {
		return 0
	}
	return len(s) - gramLen + 1
}

func newBloom(expected int) bloom {
	expected = min(max(expected, 256), 1<<28)
	words := (expected*8 + 63) / 64
	return bloom{bits: make([]uint64, words), m: uint64(words) * 64, limit: expected}
}

// probe maps the i-th probe of hash h to a bit (double hashing, then a
// multiply-shift range reduction instead of a power-of-two mask).
func (b *bloom) probe(h uint64, i uint32) uint64 {
	x := uint32(h) + i*(uint32(h>>32)|1)
	return uint64(x) * b.m >> 32
}

// overfull says the filter holds more than it was sized for and should be
// rebuilt from the lines.
func (b *bloom) overfull() bool { return b.n > b.limit }

func gramHash(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

func (b *bloom) set(h uint64) {
	for i := range uint32(3) {
		p := b.probe(h, i)
		b.bits[p>>6] |= 1 << (p & 63)
	}
}

func (b *bloom) has(h uint64) bool {
	for i := range uint32(3) {
		p := b.probe(h, i)
		if b.bits[p>>6]&(1<<(p&63)) == 0 {
			return false
		}
	}
	return true
}

func (b *bloom) addGrams(s string) {
	for i := 0; i+gramLen <= len(s); i++ {
		b.set(gramHash(s[i : i+gramLen]))
		b.n++
	}
}

func (b *bloom) mayHaveAll(s string) bool {
	for i := 0; i+gramLen <= len(s); i++ {
		if !b.has(gramHash(s[i : i+gramLen])) {
			return false
		}
	}
	return true
}
