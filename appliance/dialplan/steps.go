package dialplan

import (
	"strconv"
	"sync"
	"time"

	"pbx/appliance/cdr"
	"pbx/appliance/routing"
	"pbx/sipcore/b2bua"
)

// Steps keeps each live call's routing steps until its record is written.
type Steps struct {
	mu sync.Mutex
	m  map[b2bua.CallID][]cdr.Step
}

// NewSteps returns an empty log.
func NewSteps() *Steps { return &Steps{m: map[b2bua.CallID][]cdr.Step{}} }

// Put sets call id's steps to routing's.
func (s *Steps) Put(id b2bua.CallID, steps []routing.Step) {
	now := time.Now()
	out := make([]cdr.Step, 0, len(steps))
	for i, st := range steps {
		out = append(out, cdr.Step{ID: strconv.Itoa(i + 1), Type: st.Type, Skipped: st.Skipped, At: now, Result: st.Result, Error: st.Error})
	}
	s.mu.Lock()
	s.m[id] = out
	s.mu.Unlock()
}

// AddTransfer appends a transfer step (kind, by, to) and the routing steps
// of the transfer's new leg to call id's steps.
func (s *Steps) AddTransfer(id b2bua.CallID, t *b2bua.Transfer, steps []routing.Step) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.m[id]
	out = append(out, cdr.Step{ID: strconv.Itoa(len(out) + 1), Type: cdr.StepTransfer, At: now, Kind: t.Kind, By: t.By, To: t.To})
	for _, st := range steps {
		out = append(out, cdr.Step{ID: strconv.Itoa(len(out) + 1), Type: st.Type, Skipped: st.Skipped, At: now, Result: st.Result, Error: st.Error})
	}
	s.m[id] = out
}

// transferred records a transfer's outcome on its step, and on the steps
// of its new leg that have none (the dial that failed or answered). An
// attended transfer, which routes nothing, gets its step here.
func (s *Steps) transferred(ev b2bua.Event) {
	t := ev.Transfer
	s.mu.Lock()
	defer s.mu.Unlock()
	steps := s.m[ev.Call.ID]
	last := -1
	for i := range steps {
		if steps[i].Type == cdr.StepTransfer && steps[i].Result == "" {
			last = i
		}
	}
	if last < 0 {
		steps = append(steps, cdr.Step{ID: strconv.Itoa(len(steps) + 1), Type: cdr.StepTransfer, At: ev.At, Kind: t.Kind, By: t.By, To: t.To})
		last = len(steps) - 1
	}
	for i := last; i < len(steps); i++ {
		if steps[i].Result == "" {
			steps[i].Result = string(t.Result)
		}
	}
	s.m[ev.Call.ID] = steps
}

// InsertBeforeLast adds st before the last step of call id (the dial or
// ring group that created the far leg, which takes the call's outcome), or
// appends it when there is none, and renumbers the ids.
func (s *Steps) InsertBeforeLast(id b2bua.CallID, st cdr.Step) {
	s.mu.Lock()
	defer s.mu.Unlock()
	steps := s.m[id]
	at := max(len(steps)-1, 0)
	steps = append(steps[:at:at], append([]cdr.Step{st}, steps[at:]...)...)
	for i := range steps {
		steps[i].ID = strconv.Itoa(i + 1)
	}
	s.m[id] = steps
}

// Next closes the last step of call id with result (a dial that failed)
// and appends st: the step the call goes on with.
func (s *Steps) Next(id b2bua.CallID, result string, st cdr.Step) {
	s.mu.Lock()
	defer s.mu.Unlock()
	steps := s.m[id]
	if n := len(steps); n > 0 && steps[n-1].Result == "" {
		steps[n-1].Result = result
	}
	st.ID = strconv.Itoa(len(steps) + 1)
	s.m[id] = append(steps, st)
}

// Get returns a copy of the steps of call id.
func (s *Steps) Get(id b2bua.CallID) []cdr.Step {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]cdr.Step(nil), s.m[id]...)
}

// CallEvent forgets a call's steps once it ended; it runs after the call
// log among the observers.
func (s *Steps) CallEvent(ev b2bua.Event) {
	if ev.Kind == b2bua.EventTransfer && ev.Transfer != nil {
		s.transferred(ev)
		return
	}
	if ev.Kind == b2bua.EventEnded {
		s.mu.Lock()
		delete(s.m, ev.Call.ID)
		s.mu.Unlock()
	}
}
