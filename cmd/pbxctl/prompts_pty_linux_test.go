package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"pbx/appliance/prompts"
)

// openPTY opens a pseudo-terminal pair (master, terminal side).
func openPTY(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return master, tty
}

func TestPromptsGenerateShowsProgressOnATerminal(t *testing.T) {
	hs := httptest.NewServer(&speechServer{t: t})
	defer hs.Close()
	t.Setenv("PBX_TTS_API_KEY", "sk-env-key")
	master, tty := openPTY(t)
	defer master.Close()
	var shown bytes.Buffer
	read := make(chan struct{})
	go func() { io.Copy(&shown, master); close(read) }() // ends with EIO once tty closes

	root := newRootCmd()
	root.SetArgs([]string{"prompts", "generate", "--out", t.TempDir(), "--endpoint", hs.URL})
	root.SetOut(tty)
	t.Setenv("PBX_CONFIG", t.TempDir()+"/absent")
	err := root.Execute()
	tty.Close()
	<-read
	if err != nil {
		t.Fatal(err)
	}
	total := len(prompts.Names())
	want := fmt.Sprintf("[%d/%d] %s", total, total, prompts.Names()[total-1])
	if !strings.Contains(shown.String(), want) || !strings.Contains(shown.String(), fmt.Sprintf("[1/%d]", total)) {
		t.Errorf("terminal shows %q, want progress up to %q", shown.String(), want)
	}
}
