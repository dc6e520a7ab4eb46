package sipcore

import "testing"

// The release after a load: once when a big load ends, then a bounded
// number of follow-ups while it stays over, none during a new load, and
// nothing for traffic under releaseFloor.
func TestLoadReleaseSteps(t *testing.T) {
	var r loadRelease
	steps := []struct {
		peak, now int
		want      releaseAction
	}{
		{100, 50, releaseNone},                            // small traffic
		{releaseFloor * 4, releaseFloor * 4, releaseNone}, // load under way
		{releaseFloor * 4, releaseFloor, releaseNone},     // winding down
		{releaseFloor, releaseFloor / 5, releaseFirst},    // over
	}
	for i, s := range steps {
		if got := r.step(s.peak, s.now); got != s.want {
			t.Fatalf("step %d (%d, %d): %v, want %v", i, s.peak, s.now, got, s.want)
		}
	}
	for i := range releaseFollowUps {
		if got := r.step(10, 5); got != releaseAgain {
			t.Fatalf("follow-up %d: %v", i, got)
		}
	}
	if got := r.step(10, 5); got != releaseNone {
		t.Fatalf("after the follow-ups: %v", got)
	}

	// A new load cancels the follow-ups: no collection during it.
	r = loadRelease{}
	r.step(releaseFloor*2, 0)
	if got := r.step(releaseFloor, releaseFloor); got != releaseNone {
		t.Fatalf("during a new load: %v", got)
	}
	if got := r.step(10, 5); got != releaseFirst {
		t.Fatalf("after the new load: %v, want a first release", got)
	}

	// A tail under releaseFloor (a few hundred cached answers) does not
	// cancel them: measured in bin/pbx, cancelling at a tenth of the floor
	// left the nonce table's expiry unreturned 30 s after a REGISTER load.
	r = loadRelease{}
	r.step(releaseFloor*40, releaseFloor*4) // the first release: 20,000 answers still cached
	if got := r.step(releaseFloor*4, releaseFloor/2); got != releaseNone {
		t.Fatalf("cached tail over the floor: %v", got)
	}
	if got := r.step(releaseFloor/2, 0); got != releaseFirst {
		t.Fatalf("tail over: %v, want a first release", got)
	}
	if got := r.step(releaseFloor/2, 0); got != releaseAgain {
		t.Fatalf("a small tail cancelled the follow-ups: %v", got)
	}
}

// The functions given to OnLoadOver run, in order, each time a load's
// memory is returned.
func TestOnLoadOver(t *testing.T) {
	s := &Server{}
	var got []int
	s.OnLoadOver(func() { got = append(got, 1) })
	s.OnLoadOver(func() { got = append(got, 2) })
	s.runLoadOver()
	s.runLoadOver()
	if len(got) != 4 || got[0] != 1 || got[1] != 2 || got[2] != 1 || got[3] != 2 {
		t.Fatalf("calls %v, want [1 2 1 2]", got)
	}
}
