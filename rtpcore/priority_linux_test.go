package rtpcore

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// priorityChildEnv, set to a Priority's name, makes TestRelayThreadPriority
// the child it starts: an engine with that priority relays, and the child
// prints how its threads are scheduled.
const priorityChildEnv = "PBX_TEST_RELAY_PRIORITY"

// TestRelayThreadPriority runs an engine asking for each priority in a
// child process, as root and as root without CAP_SYS_NICE under various
// RLIMIT_RTPRIO and RLIMIT_NICE (what systemd's LimitRTPRIO= and
// LimitNICE= set), and checks what the relay thread got, that a refusal
// is logged, and that no other thread of the process got it too.
func TestRelayThreadPriority(t *testing.T) {
	if name := os.Getenv(priorityChildEnv); name != "" {
		reportRelayPriority(t, name)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("granting and withdrawing CAP_SYS_NICE needs root")
	}
	for _, tool := range []string{"setpriv", "prlimit"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s (util-linux) is missing", tool)
		}
	}
	// A limit raised above its hard limit needs CAP_SYS_RESOURCE.
	canRaise := exec.Command("prlimit", "--rtprio=10", "--nice=30", "--", "true").Run() == nil
	noCap := []string{"setpriv", "--inh-caps=-sys_nice", "--bounding-set=-sys_nice", "--"}
	for _, c := range []struct {
		name   string
		asked  Priority
		limits []string // prlimit's options
		drop   bool     // run without CAP_SYS_NICE
		want   string
		logged bool
	}{
		{"root realtime", PriorityRealtime, nil, false, "policy=fifo prio=10 nice=0", false},
		{"root high", PriorityHigh, nil, false, "policy=other prio=0 nice=-10", false},
		{"root normal", PriorityNormal, nil, false, "policy=other prio=0 nice=0", false},
		{"rtprio limit", PriorityRealtime, []string{"--rtprio=10", "--nice=0"}, true, "policy=fifo prio=10 nice=0", false},
		{"nice limit only", PriorityRealtime, []string{"--rtprio=0", "--nice=30"}, true, "policy=other prio=0 nice=-10", true},
		{"no limit", PriorityRealtime, nil, true, "policy=other prio=0 nice=0", true},
		{"high, no limit", PriorityHigh, nil, true, "policy=other prio=0 nice=0", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.limits != nil && !canRaise {
				t.Skip("raising RLIMIT_RTPRIO or RLIMIT_NICE needs CAP_SYS_RESOURCE, which this host withholds")
			}
			var argv []string // limits set first: raising one needs CAP_SYS_RESOURCE
			if c.limits != nil {
				argv = append(append(append(argv, "prlimit"), c.limits...), "--")
			}
			if c.drop {
				argv = append(argv, noCap...)
			}
			argv = append(argv, os.Args[0], "-test.run=^TestRelayThreadPriority$", "-test.count=1")
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Env = append(os.Environ(), priorityChildEnv+"="+c.asked.String())
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v: %v\n%s", argv, err, out)
			}
			got := string(out)
			if !strings.Contains(got, "relay "+c.want+" others=0\n") {
				t.Errorf("asked %s: want relay %s others=0, got\n%s", c.asked, c.want, got)
			}
			if logged := strings.Contains(got, "thread priority refused"); logged != c.logged {
				t.Errorf("refusal logged %t, want %t:\n%s", logged, c.logged, got)
			}
		})
	}
}

// reportRelayPriority is the child of TestRelayThreadPriority: it starts a
// leg with the priority named, lets the runtime start more threads once
// the relay thread has its priority, and prints the relay thread's
// scheduling and how many other threads are not scheduled as the process
// started.
func reportRelayPriority(t *testing.T, name string) {
	p, err := ParsePriority(name)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	e, err := New(Options{BindIP: procRelayIP, PortMin: 41000, PortMax: 41100, Quarantine: -1, Priority: p}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	s, err := e.NewSession(SessionOptions{ID: "priority"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.NewLeg("a"); err != nil {
		t.Fatal(err)
	}
	// Every worker's thread asks for the priority, the leg's or not.
	relays := map[int]bool{}
	deadline := time.Now().Add(5 * time.Second)
	for _, w := range e.io.workers {
		for w.tid.Load() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("a relay worker did not start")
			}
			time.Sleep(time.Millisecond)
		}
		relays[int(w.tid.Load())] = true
	}
	// Blocking system calls make the runtime start threads: none may be a
	// clone of the relay's.
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts := unix.NsecToTimespec(int64(20 * time.Millisecond))
			_ = unix.Nanosleep(&ts, nil)
		}()
	}
	wg.Wait()
	relaySched, others := "missing", 0
	tasks, err := filepath.Glob("/proc/self/task/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		tid, _ := strconv.Atoi(filepath.Base(task))
		sched := threadSched(t, tid)
		switch {
		case relays[tid] && (relaySched == "missing" || relaySched == sched):
			relaySched = sched
		case relays[tid]:
			relaySched = "mixed: " + relaySched + ", " + sched
		case sched != "policy=other prio=0 nice=0":
			others++
			t.Logf("thread %d: %s", tid, sched)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	fmt.Printf("relay %s others=%d\n%s", relaySched, others, logs.String())
}

// threadSched describes how thread tid is scheduled.
func threadSched(t *testing.T, tid int) string {
	attr, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		t.Fatalf("sched_getattr %d: %v", tid, err)
	}
	policy := map[uint32]string{unix.SCHED_NORMAL: "other", unix.SCHED_FIFO: "fifo", unix.SCHED_RR: "rr"}[attr.Policy]
	return fmt.Sprintf("policy=%s prio=%d nice=%d", policy, attr.Priority, attr.Nice)
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestRelayKeepsMainThread starts engines one after another and checks
// that no relay worker ever runs on the process's main thread, and that
// the main thread keeps the scheduling it started with: a worker's
// goroutine first run there (the first engine's, in every run before
// goLockedThread kept it off) hands itself to another thread.
func TestRelayKeepsMainThread(t *testing.T) {
	pid := os.Getpid()
	start := threadSched(t, pid)
	for i := range 20 {
		e, err := New(Options{BindIP: procRelayIP, PortMin: 41000, PortMax: 41100, Quarantine: -1, Priority: PriorityRealtime}, nil)
		if err != nil {
			t.Fatal(err)
		}
		s, err := e.NewSession(SessionOptions{ID: "main-thread"})
		if err != nil {
			e.Close()
			t.Fatal(err)
		}
		if _, err := s.NewLeg("a"); err != nil {
			e.Close()
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for _, w := range e.io.workers {
			for w.tid.Load() == 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if tid := int(w.tid.Load()); tid == 0 {
				t.Errorf("engine %d: a relay worker did not start", i)
			} else if tid == pid {
				t.Errorf("engine %d: a relay worker runs on the main thread", i)
			}
		}
		if got := threadSched(t, pid); got != start {
			t.Errorf("engine %d: main thread %s, started %s", i, got, start)
		}
		e.Close()
	}
}
