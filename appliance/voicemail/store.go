package voicemail

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"pbx/appliance/cdr"
	"pbx/appliance/datadir"
)

// Folders of a message.
const (
	FolderNew   = "new"
	FolderSaved = "saved"
)

// GreetingFile is the name of a mailbox's own greeting in its directory.
const GreetingFile = "greeting.wav"

var (
	// ErrNotFound is returned for a message, mailbox or greeting that does
	// not exist.
	ErrNotFound = errors.New("voicemail: not found")
	// ErrInvalid is returned for a tenant, extension or id that is not a
	// safe path component.
	ErrInvalid = errors.New("voicemail: invalid name")
	// ErrExists is returned by Begin for an id that already names a
	// message (a call leaves at most one).
	ErrExists = errors.New("voicemail: message exists")
)

// Message is a voicemail message's metadata (<id>.json).
type Message struct {
	ID         string     `json:"id"`
	Tenant     string     `json:"tenant"`
	Extension  string     `json:"extension"`
	From       string     `json:"from"`
	FromName   string     `json:"from_name"`
	CallID     string     `json:"call_id"` // the SIP Call-ID of the call that left it
	ReceivedAt time.Time  `json:"received_at"`
	DurationMS int64      `json:"duration_ms"`
	Folder     string     `json:"folder"`
	HeardAt    *time.Time `json:"heard_at"`
}

// Options configures a Store.
type Options struct {
	// DataDir is the data directory; messages live under
	// <DataDir>/<tenant>/voicemail/<extension>/.
	DataDir string
	// MinMessage is the shortest message kept; recovery discards a shorter
	// leftover.
	MinMessage time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// OnChange is called after a mailbox's messages changed (a message
	// stored, deleted, saved or heard), for message-waiting lamps.
	OnChange func(tenant, extension string)
	// OnDeposit is called once a new message's audio is in place and
	// before its metadata is written (also for one that recovery
	// promoted), for email notices: a crash in between calls it again at
	// the next start.
	OnDeposit func(m Message, audio string) // audio: the WAV's path
}

// Store reads and writes the messages under a data directory. It is safe
// for concurrent use.
type Store struct {
	opts Options
	log  *slog.Logger
	mu   sync.Mutex // serialises read-modify-write of message JSON
}

// Open returns the store under opts.DataDir after promoting what a crash
// left behind (see Recover); a file recovery could not handle is logged
// and left for an operator.
func Open(opts Options, log *slog.Logger) (*Store, error) {
	if opts.DataDir == "" {
		return nil, errors.New("voicemail: no data directory")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{opts: opts, log: log}
	actions, err := s.Recover()
	for _, a := range actions {
		log.Warn("voicemail recovery", "action", a)
	}
	if err != nil {
		log.Error("voicemail recovery", "err", err)
	}
	return s, nil
}

// validExtension reports whether ext is safe as a directory name.
func validExtension(ext string) bool {
	if ext == "" || len(ext) > 64 {
		return false
	}
	for i := 0; i < len(ext); i++ {
		c := ext[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '-' || c == '+') {
			return false
		}
	}
	return true
}

// Dir returns the mailbox directory of tenant and extension after checking
// that both are safe path components.
func (s *Store) Dir(tenant, extension string) (string, error) {
	if cdr.ValidateTenant(tenant) != nil || !validExtension(extension) {
		return "", fmt.Errorf("%w: %q/%q", ErrInvalid, tenant, extension)
	}
	return filepath.Join(s.opts.DataDir, tenant, "voicemail", extension), nil
}

// paths returns the audio and JSON paths of a message.
func (s *Store) paths(tenant, extension, id string) (wav, meta string, err error) {
	dir, err := s.Dir(tenant, extension)
	if err != nil {
		return "", "", err
	}
	if cdr.ID(id).Validate() != nil {
		return "", "", fmt.Errorf("%w: id %q", ErrInvalid, id)
	}
	return filepath.Join(dir, id+".wav"), filepath.Join(dir, id+".json"), nil
}

func (s *Store) changed(tenant, extension string) {
	if s.opts.OnChange != nil {
		s.opts.OnChange(tenant, extension)
	}
}

// Get returns one message.
func (s *Store) Get(tenant, extension, id string) (*Message, error) {
	wav, meta, err := s.paths(tenant, extension, id)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(wav); err != nil {
		return nil, fmt.Errorf("%w: message %s/%s/%s", ErrNotFound, tenant, extension, id)
	}
	return readMessage(meta)
}

func readMessage(path string) (*Message, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, filepath.Base(path))
	}
	if err != nil {
		return nil, err
	}
	var m Message
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("voicemail: %s: %w", path, err)
	}
	return &m, nil
}

// AudioPath returns the path of a message's WAV.
func (s *Store) AudioPath(tenant, extension, id string) (string, error) {
	wav, _, err := s.paths(tenant, extension, id)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(wav); err != nil {
		return "", fmt.Errorf("%w: message %s/%s/%s", ErrNotFound, tenant, extension, id)
	}
	return wav, nil
}

// OpenAudio opens a message's WAV; the caller closes it.
func (s *Store) OpenAudio(tenant, extension, id string) (*os.File, *Message, error) {
	m, err := s.Get(tenant, extension, id)
	if err != nil {
		return nil, nil, err
	}
	wav, _, _ := s.paths(tenant, extension, id)
	f, err := os.Open(wav)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("%w: message %s/%s/%s", ErrNotFound, tenant, extension, id)
	}
	if err != nil {
		return nil, nil, err
	}
	return f, m, nil
}

// Samples returns a message's audio.
func (s *Store) Samples(tenant, extension, id string) ([]int16, error) {
	f, _, err := s.OpenAudio(tenant, extension, id)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readPCM(f)
}

// List returns the messages of one mailbox, of every mailbox of tenant
// (extension empty) or of every tenant (both empty), newest first.
func (s *Store) List(tenant, extension string) ([]Message, error) {
	if extension != "" && tenant == "" {
		return nil, fmt.Errorf("%w: an extension needs a tenant", ErrInvalid)
	}
	tenants := []string{tenant}
	if tenant == "" {
		var err error
		if tenants, err = subdirs(s.opts.DataDir); err != nil {
			return nil, err
		}
	}
	var out []Message
	for _, tn := range tenants {
		if cdr.ValidateTenant(tn) != nil {
			continue
		}
		exts := []string{extension}
		if extension == "" {
			var err error
			if exts, err = subdirs(filepath.Join(s.opts.DataDir, tn, "voicemail")); err != nil {
				return nil, err
			}
		}
		for _, ext := range exts {
			ms, err := s.mailbox(tn, ext)
			if err != nil {
				return nil, err
			}
			out = append(out, ms...)
		}
	}
	sortNewestFirst(out)
	return out, nil
}

func sortNewestFirst(ms []Message) {
	slices.SortFunc(ms, func(a, b Message) int {
		if c := b.ReceivedAt.Compare(a.ReceivedAt); c != 0 {
			return c
		}
		return cmp.Compare(b.ID, a.ID)
	})
}

// subdirs lists the directories in dir (none when dir does not exist).
func subdirs(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// mailbox reads the messages of one mailbox (those with both files).
func (s *Store) mailbox(tenant, extension string) ([]Message, error) {
	dir, err := s.Dir(tenant, extension)
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, e := range ents {
		have[e.Name()] = true
	}
	var out []Message
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || strings.HasPrefix(id, ".") || !have[id+".wav"] || cdr.ID(id).Validate() != nil {
			continue
		}
		m, err := readMessage(filepath.Join(dir, e.Name()))
		if err != nil {
			s.log.Warn("voicemail: unreadable message", "path", filepath.Join(dir, e.Name()), "err", err)
			continue
		}
		out = append(out, *m)
	}
	sortNewestFirst(out)
	return out, nil
}

// Counts returns the numbers of new and saved messages of a mailbox.
func (s *Store) Counts(tenant, extension string) (unheard, saved int, err error) {
	ms, err := s.mailbox(tenant, extension)
	if err != nil {
		return 0, 0, err
	}
	for _, m := range ms {
		if m.Folder == FolderSaved {
			saved++
		} else {
			unheard++
		}
	}
	return unheard, saved, nil
}

// Full reports whether the mailbox holds max messages or more (max <= 0:
// never full).
func (s *Store) Full(tenant, extension string, max int) (bool, error) {
	if max <= 0 {
		return false, nil
	}
	n, sv, err := s.Counts(tenant, extension)
	return n+sv >= max, err
}

// Delete removes a message (audio, then metadata).
func (s *Store) Delete(tenant, extension, id string) error {
	wav, meta, err := s.paths(tenant, extension, id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	err = os.Remove(wav)
	if errors.Is(err, os.ErrNotExist) {
		s.mu.Unlock()
		return fmt.Errorf("%w: message %s/%s/%s", ErrNotFound, tenant, extension, id)
	}
	if err == nil {
		err = os.Remove(meta)
		if errors.Is(err, os.ErrNotExist) {
			err = nil
		}
	}
	if err == nil {
		err = datadir.SyncDir(filepath.Dir(wav))
	}
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("voicemail: delete %s: %w", id, err)
	}
	s.changed(tenant, extension)
	return nil
}

// Save moves a message to the saved folder (and marks it heard).
func (s *Store) Save(tenant, extension, id string) error {
	return s.update(tenant, extension, id, func(m *Message) {
		m.Folder = FolderSaved
		if m.HeardAt == nil {
			t := s.opts.Now().UTC()
			m.HeardAt = &t
		}
	})
}

// MarkHeard records that a message was heard, leaving its folder.
func (s *Store) MarkHeard(tenant, extension, id string) error {
	return s.update(tenant, extension, id, func(m *Message) {
		if m.HeardAt == nil {
			t := s.opts.Now().UTC()
			m.HeardAt = &t
		}
	})
}

func (s *Store) update(tenant, extension, id string, f func(*Message)) error {
	_, meta, err := s.paths(tenant, extension, id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	m, err := s.Get(tenant, extension, id)
	if err == nil {
		before := *m
		f(m)
		if before.Folder == m.Folder && (before.HeardAt == nil) == (m.HeardAt == nil) {
			s.mu.Unlock()
			return nil
		}
		err = writeJSON(meta, m)
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	s.changed(tenant, extension)
	return nil
}
