package voicemail

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"pbx/appliance/cdr"
	"pbx/appliance/config"
	"pbx/sipcore/b2bua"
)

// testPrompts gives every prompt name a distinct two-sample clip and names
// what was played back from its first sample's address.
type testPrompts struct {
	clips map[string][]int16
	names map[*int16]string
	skip  map[string]bool // names the set lacks
}

func newPrompts(missing ...string) *testPrompts {
	p := &testPrompts{clips: map[string][]int16{}, names: map[*int16]string{}, skip: map[string]bool{}}
	for _, m := range missing {
		p.skip[m] = true
	}
	return p
}

func (p *testPrompts) Get(name string) []int16 {
	if p.skip[name] {
		return nil
	}
	c, ok := p.clips[name]
	if !ok {
		c = []int16{1, int16(len(p.clips))}
		p.clips[name] = c
		p.names[&c[0]] = name
	}
	return c
}

// fakeChannel is a b2bua.Channel that plays instantly, records what was
// played, presses keys in reaction to what it played and feeds scripted
// audio frames to Listen.
type fakeChannel struct {
	t       *testing.T
	call    b2bua.CallInfo
	prompts *testPrompts
	digits  chan rune
	done    chan struct{}
	endOnce sync.Once

	mu     sync.Mutex
	played []string          // prompt names; "audio:<n>" for other audio; "!" suffix: cut by a key
	after  map[string]string // keys to press once the named prompt finished (used once)
	hidden bool

	frames [][]int16 // audio for the next Listen
	then   string    // after the frames: "hangup", "#" (press it) or "" (silence forever)
}

func newFake(t *testing.T, p *testPrompts) *fakeChannel {
	return &fakeChannel{t: t, prompts: p, digits: make(chan rune, 64), done: make(chan struct{}), after: map[string]string{},
		call: b2bua.CallInfo{ID: b2bua.NewCallID(time.Now()), Tenant: "acme", From: "5551234", FromName: "Alice", SIPCallID: "sip-1"}}
}

func (f *fakeChannel) Call() b2bua.CallInfo { return f.call }
func (f *fakeChannel) HideDigits()          { f.mu.Lock(); f.hidden = true; f.mu.Unlock() }
func (f *fakeChannel) Digits() <-chan rune  { return f.digits }
func (f *fakeChannel) Done() <-chan struct{} {
	return f.done
}
func (f *fakeChannel) hangup() { f.endOnce.Do(func() { close(f.done) }) }

// press queues keys now.
func (f *fakeChannel) press(keys string) {
	for _, k := range keys {
		f.digits <- k
	}
}

func (f *fakeChannel) name(pcm []int16) string {
	if n, ok := f.prompts.names[&pcm[0]]; ok {
		return n
	}
	return fmt.Sprintf("audio:%d", len(pcm))
}

// Play records the clip. With a key already waiting it stands for a prompt
// cut by that key: it blocks until ctx ends.
func (f *fakeChannel) Play(ctx context.Context, pcm []int16) error {
	select {
	case <-f.done:
		return b2bua.ErrHungUp
	default:
	}
	n := f.name(pcm)
	// Real time, so that a key can cut long audio; a key already waiting
	// cuts even a short prompt.
	cut := func() {
		f.mu.Lock()
		f.played = append(f.played, n+"!")
		f.mu.Unlock()
	}
	for len(f.digits) > 0 { // until the player took the key (and maybe ignored it)
		select {
		case <-ctx.Done():
			cut()
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	t := time.NewTimer(time.Duration(len(pcm)) * time.Second / sampleRate)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		cut()
		return ctx.Err()
	}
	f.mu.Lock()
	f.played = append(f.played, n)
	keys, ok := f.after[n]
	delete(f.after, n)
	f.mu.Unlock()
	if ok {
		f.press(keys)
	}
	return nil
}

// Listen feeds f.frames one by one (unbuffered: a frame is sent only once
// the reader took the previous), then does f.then.
func (f *fakeChannel) Listen() (<-chan []int16, func()) {
	out := make(chan []int16)
	stop := make(chan struct{})
	frames, then := f.frames, f.then
	f.frames, f.then = nil, ""
	go func() {
		defer close(out)
		for _, fr := range frames {
			select {
			case out <- fr:
			case <-stop:
				return
			}
		}
		switch then {
		case "hangup":
			f.hangup()
		case "":
			// Silence until stopped, as a real call's time line.
			for {
				select {
				case out <- make([]int16, frameLen):
				case <-stop:
					return
				}
			}
		default:
			f.press(then)
		}
		<-stop
	}()
	var once sync.Once
	return out, func() { once.Do(func() { close(stop) }) }
}

// playedNames is what was played whole, in order.
func (f *fakeChannel) playedNames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, p := range f.played {
		if !strings.HasSuffix(p, "!") {
			out = append(out, p)
		}
	}
	return out
}

func (f *fakeChannel) reset() {
	f.mu.Lock()
	f.played = nil
	f.mu.Unlock()
}

// loud is n frames of a 1 kHz-ish square wave at level v; quiet n frames
// of low noise below SilenceLevel.
func loud(n int, v int16) [][]int16 {
	out := make([][]int16, n)
	for i := range out {
		fr := make([]int16, frameLen)
		for j := range fr {
			if j/4%2 == 0 {
				fr[j] = v
			} else {
				fr[j] = -v
			}
		}
		out[i] = fr
	}
	return out
}

func quiet(n int) [][]int16 {
	out := make([][]int16, n)
	for i := range out {
		fr := make([]int16, frameLen)
		for j := range fr {
			fr[j] = int16(j%5*20 - 40) // |x| <= 40
		}
		out[i] = fr
	}
	return out
}

func concat(parts ...[][]int16) [][]int16 { return slices.Concat(parts...) }

func flat(frames [][]int16) []int16 { return slices.Concat(frames...) }

// testEnv is a store in a temporary data directory with settings over it.
type testEnv struct {
	dir     string
	store   *Store
	set     *Settings
	prompts *testPrompts
	changes []string
	deposit []Message
	mu      sync.Mutex
}

func newTestEnv(t *testing.T, sys config.Voicemail) *testEnv {
	t.Helper()
	e := &testEnv{dir: t.TempDir(), prompts: newPrompts()}
	st, err := Open(Options{DataDir: e.dir, MinMessage: sys.MinMessage.D(),
		OnChange:  func(tn, ext string) { e.mu.Lock(); e.changes = append(e.changes, tn+"/"+ext); e.mu.Unlock() },
		OnDeposit: func(m Message, _ string) { e.mu.Lock(); e.deposit = append(e.deposit, m); e.mu.Unlock() },
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	e.store = st
	e.set = &Settings{Store: st, Prompts: e.prompts, System: sys, InputTimeout: 30 * time.Millisecond}
	return e
}

// put stores a message of n samples received at at.
func (e *testEnv) put(t *testing.T, tenant, ext string, at time.Time, from string, n int) Message {
	t.Helper()
	rec, err := e.store.Begin(Message{ID: string(cdr.NewID(at)), Tenant: tenant, Extension: ext, From: from, ReceivedAt: at})
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Write(flat(loud(n/frameLen+1, 1000))[:n]); err != nil {
		t.Fatal(err)
	}
	m, err := rec.Commit(int64(n))
	if err != nil {
		t.Fatal(err)
	}
	return *m
}

func (e *testEnv) files(t *testing.T, tenant, ext string) []string {
	t.Helper()
	ents, err := os.ReadDir(boxDir(e.dir, tenant, ext))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, en := range ents {
		out = append(out, en.Name())
	}
	return out
}

func boxDir(dir, tenant, ext string) string { return dir + "/" + tenant + "/voicemail/" + ext }

// runApp runs app on ch and waits for it with a deadline.
func runApp(t *testing.T, app b2bua.App, ch *fakeChannel) {
	t.Helper()
	done := make(chan struct{})
	go func() { app.Run(context.Background(), ch); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("application did not return; played %v", ch.playedNames())
	}
}
