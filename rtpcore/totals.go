package rtpcore

import "time"

// Totals are the engine's relay counters since it started: the legs that
// closed plus the legs open now, so that each only ever grows (what a
// monitoring system's counters expect).
type Totals struct {
	Legs        uint64 // legs created
	PacketsIn   uint64 // RTP packets received from the far ends
	PacketsOut  uint64 // RTP packets sent to the far ends
	BytesIn     uint64
	BytesOut    uint64
	PacketsLost uint64 // by sequence number gaps, never negative
	Malformed   uint64 // datagrams that were not RTP
	Strays      uint64 // packets from other sources than the latched one
	SendErrors  uint64

	// Jitter of each closed leg that received audio, by bucket: the count of
	// legs whose interarrival jitter was at most JitterBounds[i] (the last
	// bucket has no bound), and their sum.
	JitterCounts [len(JitterBounds) + 1]uint64
	JitterSum    time.Duration
}

// JitterBounds are the upper bounds of the jitter buckets of Totals.
var JitterBounds = [...]time.Duration{
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond,
	20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond,
}

func (t *Totals) observeJitter(j time.Duration) {
	i := 0
	for i < len(JitterBounds) && j > JitterBounds[i] {
		i++
	}
	t.JitterCounts[i]++
	t.JitterSum += j
}

func (t *Totals) add(st LegStats) {
	t.PacketsIn += st.PacketsIn
	t.PacketsOut += st.PacketsOut
	t.BytesIn += st.BytesIn
	t.BytesOut += st.BytesOut
	t.PacketsLost += uint64(max(st.PacketsLost, 0))
	t.Malformed += st.Malformed
	t.Strays += st.Strays
	t.SendErrors += st.SendErrors
}

// retire folds a closing leg's final counters into the engine's totals
// and takes it out of its session, in one step as Totals sees it, so that a
// leg is never counted twice or not at all.
func (e *Engine) retire(l *Leg) {
	e.totalsMu.Lock()
	defer e.totalsMu.Unlock()
	st := l.Stats()
	e.retired.add(st)
	if st.PacketsIn > 1 {
		e.retired.observeJitter(st.Jitter)
	}
	l.sess.dropLeg(l)
}

// Totals returns the relay counters since the engine started.
func (e *Engine) Totals() Totals {
	e.totalsMu.Lock()
	defer e.totalsMu.Unlock()
	t := e.retired
	t.Legs = e.legsCreated.Load()
	for _, s := range e.Sessions() {
		for _, l := range s.Legs() {
			t.add(l.Stats())
		}
	}
	return t
}
