package b2bua

import (
	"strconv"
	"testing"
)

// BenchmarkRemoveCallAmongLiveCalls is a call's end while 10,000 other
// calls (20,000 dialogs) are live: the cost must not grow with them (it
// walked the whole dialog table under the manager's lock before).
func BenchmarkRemoveCallAmongLiveCalls(b *testing.B) {
	m := &Manager{calls: map[CallID]*Call{}, dialogs: map[string]dialogRef{}}
	for i := range 10000 {
		c := &Call{m: m, id: CallID("live-" + strconv.Itoa(i))}
		m.calls[c.id] = c
		m.addDialog("a-"+string(c.id), dialogRef{call: c})
		m.addDialog("b-"+string(c.id), dialogRef{call: c, leg: &outLeg{}})
	}
	keys := make([][2]string, b.N)
	for i := range keys {
		keys[i] = [2]string{"a-" + strconv.Itoa(i), "b-" + strconv.Itoa(i)}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		c := &Call{m: m, id: CallID(keys[i][0])}
		m.mu.Lock()
		m.calls[c.id] = c
		m.mu.Unlock()
		m.wg.Add(1)
		m.addDialog(keys[i][0], dialogRef{call: c})
		m.addDialog(keys[i][1], dialogRef{call: c, leg: &outLeg{}})
		m.removeCall(c)
	}
	b.StopTimer()
	if len(m.dialogs) != 20000 || len(m.calls) != 10000 {
		b.Fatalf("%d dialogs and %d calls left, want the 20000 and 10000 live ones", len(m.dialogs), len(m.calls))
	}
}
