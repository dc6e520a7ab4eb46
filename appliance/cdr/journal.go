package cdr

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"pbx/appliance/datadir"
)

// The commit journal makes committed records durable with one fdatasync
// shared by every commit running at the time, instead of an fsync of each
// record file and of its directory (about ten block device requests a
// call on a disk without a file system journal).
//
// A commit writes its record file as before (temporary file, rename into
// place, not synced), then stages the record with its path for the
// journal (a copy in memory) and waits for an fdatasync of the journal
// that started after its append; the sync first writes every staged
// entry, one pwrite for all. A lone commit runs that sync itself at once,
// commits that arrive while one runs share the next, and one about to
// start waits (up to gatherMax) for the commits already writing their
// record files. The journal is one file of journalSize bytes written full
// of zeros once, so an append changes no metadata and its fdatasync is
// one data write and one cache flush.
//
// Checkpoint: the markers' batched syncfs (Run, every MarkerSyncInterval)
// also makes the record files durable; the journal entries appended
// before it started are then no longer needed. The file has two halves
// used in turn: when the current one is full, the writer moves to the
// other, which holds only checkpointed entries (or forces a syncfs first).
//
// Recovery replays the journal before anything else: a record file that
// is missing or differs from its entry (lost or torn by a power cut) is
// written again durably. Replay is idempotent; entries of days the
// retention has removed are skipped; after replay the journal is emptied.
//
// Entry: u32 body length, u32 CRC-32C of epoch and body, u64 epoch, body
// (the record's path relative to the data directory, a newline, and the
// record file's bytes). Each half is read from its start while entries are
// whole and carry the epoch of its first entry; a torn or stale entry ends
// it.
const (
	journalName   = "cdr.journal"
	journalSize   = 4 << 20
	journalHalf   = journalSize / 2
	journalHeader = 16
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// journal is the open commit journal.
type journal struct {
	f *os.File

	mu      sync.Mutex
	half    int64     // start of the half being written
	off     int64     // next write offset
	epoch   uint64    // of the entries in the current half
	last    [2]uint64 // seq of the last entry in each half
	seq     atomic.Uint64
	ckpt    uint64 // entries up to this seq are in durable record files
	flushFS func() error
	// staged holds the entries added and not yet written, framed with no
	// epoch (write gives them theirs), the first numbered stagedFrom: a
	// commit copies its entry here and the next sync writes every staged
	// entry with one pwrite, not one a commit (BenchmarkJournalAdd).
	staged     []byte
	stagedFrom uint64

	smu     sync.Mutex
	cond    sync.Cond
	synced  uint64 // entries up to this seq are durable in the journal
	running bool
	syncs   atomic.Int64 // fdatasyncs run, for tests and benchmarks

	// pending counts the commits between begin (writing their record
	// file) and their append; an fdatasync about to start waits for them,
	// up to gatherMax, so that one covers them too. gathering is set while
	// it waits; gathers counts those waits (tests).
	pending   atomic.Int64
	gathering atomic.Bool
	gathers   atomic.Int64
}

// gatherMax bounds how long an fdatasync waits for the commits already
// writing their record files; a lone commit does not wait at all.
const gatherMax = 2 * time.Millisecond

// errEntryTooLarge: a record too large for the journal is committed the
// per-file way.
var errEntryTooLarge = errors.New("record too large for the commit journal")

// openJournal opens (creating and zero-filling) the journal at path and
// empties it: the caller has replayed it. flushFS makes every record file
// written so far durable (syncfs).
func openJournal(path string, flushFS func() error) (*journal, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, fileMode)
	if err != nil {
		return nil, err
	}
	j := &journal{f: f, flushFS: flushFS}
	j.cond.L = &j.smu
	if err := j.prepare(filepath.Dir(path)); err != nil {
		f.Close()
		return nil, err
	}
	return j, nil
}

// prepare zero-fills a new journal and invalidates the first entry of
// each half, durably.
func (j *journal) prepare(dir string) error {
	fi, err := j.f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() != journalSize {
		zeros := make([]byte, 1<<20)
		for off := int64(0); off < journalSize; off += int64(len(zeros)) {
			if _, err := j.f.WriteAt(zeros, off); err != nil {
				return err
			}
		}
		if err := j.f.Truncate(journalSize); err != nil {
			return err
		}
	} else {
		var zero [journalHeader]byte
		for _, h := range []int64{0, journalHalf} {
			if _, err := j.f.WriteAt(zero[:], h); err != nil {
				return err
			}
		}
	}
	if err := j.f.Sync(); err != nil {
		return err
	}
	if fi.Size() != journalSize {
		return datadir.SyncDir(dir)
	}
	return nil
}

// encodeEntry frames rel and data as one entry of epoch.
func encodeEntry(epoch uint64, rel string, data []byte) []byte {
	return appendEntryTo(nil, epoch, rel, data)
}

// appendEntryTo appends the entry of rel and data, of epoch, to buf.
func appendEntryTo(buf []byte, epoch uint64, rel string, data []byte) []byte {
	at := len(buf)
	buf = slices.Grow(buf, journalHeader+len(rel)+1+len(data))[:at+journalHeader]
	buf = append(buf, rel...)
	buf = append(buf, '\n')
	buf = append(buf, data...)
	e := buf[at:]
	binary.LittleEndian.PutUint32(e[0:], uint32(len(e)-journalHeader))
	binary.LittleEndian.PutUint64(e[8:], epoch)
	binary.LittleEndian.PutUint32(e[4:], crc32.Checksum(e[8:], crcTable))
	return buf
}

// begin announces a commit that will append to the journal: an fdatasync
// starting meanwhile waits for it. Each begin is followed by one commit
// or one end.
func (j *journal) begin() {
	j.pending.Add(1)
}

// end withdraws a begin: the commit appended, or gave up.
func (j *journal) end() {
	if j.pending.Add(-1) == 0 && j.gathering.Load() {
		j.wake()
	}
}

func (j *journal) wake() {
	j.smu.Lock()
	j.cond.Broadcast()
	j.smu.Unlock()
}

// commit appends the record file data at rel and returns once an
// fdatasync of the journal covers it. It ends the caller's begin.
func (j *journal) commit(rel string, data []byte) error {
	mine, err := j.add(rel, data)
	if err != nil {
		return err
	}
	return j.sync(mine)
}

// add stages the record file data at rel and returns its seq, for a
// later sync, which writes it; the entry is neither written nor durable
// yet (the record file is in place: a killed process loses nothing, and
// a checkpoint covers it as it covers the written entries). It ends the
// caller's begin.
func (j *journal) add(rel string, data []byte) (uint64, error) {
	if journalHeader+len(rel)+1+len(data) > journalHalf/4 {
		j.end()
		return 0, errEntryTooLarge
	}
	j.mu.Lock()
	if len(j.staged) == 0 {
		j.stagedFrom = j.seq.Load() + 1
	}
	j.staged = appendEntryTo(j.staged, 0, rel, data)
	mine := j.seq.Add(1) // after the entry is staged: sync writes what it sees numbered
	j.mu.Unlock()
	j.end()
	return mine, nil
}

// gather waits, up to gatherMax, for the commits that have begun to
// append. j.smu is held.
func (j *journal) gather() {
	j.gathering.Store(true) // before reading pending: an end after it wakes us
	defer j.gathering.Store(false)
	if j.pending.Load() == 0 {
		return
	}
	j.gathers.Add(1)
	deadline := time.Now().Add(gatherMax)
	t := time.AfterFunc(gatherMax, j.wake)
	defer t.Stop()
	for j.pending.Load() > 0 && time.Now().Before(deadline) {
		j.cond.Wait()
	}
}

// maxStagedKept bounds the staging buffer kept between syncs: a batch of
// about a thousand records (a burst's larger one is let go).
const maxStagedKept = journalHalf / 2

// write writes the staged entries, one pwrite for those that fit in the
// current half (a full half hands over to the other, switchHalf), each
// stamped with its half's epoch. Entries a failed write left staged are
// written by the next call.
func (j *journal) write() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	b := j.staged
	defer func() {
		j.staged = j.staged[:copy(j.staged, b)] // what is left, at the start
		if len(j.staged) == 0 && cap(j.staged) > maxStagedKept {
			j.staged = nil // a burst's buffer is not kept
		}
	}()
	for len(b) > 0 {
		if j.epoch == 0 {
			j.epoch = 1
		}
		// The entries that fit in the current half.
		chunk, seq := 0, j.stagedFrom
		for chunk < len(b) {
			n := journalHeader + int(binary.LittleEndian.Uint32(b[chunk:]))
			if j.off+int64(chunk+n) > j.half+journalHalf {
				break
			}
			e := b[chunk : chunk+n]
			binary.LittleEndian.PutUint64(e[8:], j.epoch)
			binary.LittleEndian.PutUint32(e[4:], crc32.Checksum(e[8:], crcTable))
			chunk += n
			seq++
		}
		if chunk == 0 {
			if err := j.switchHalf(); err != nil {
				return err
			}
			continue
		}
		if _, err := j.f.WriteAt(b[:chunk], j.off); err != nil {
			return err
		}
		j.off += int64(chunk)
		j.last[j.half/journalHalf] = seq - 1
		j.stagedFrom = seq
		b = b[chunk:]
	}
	return nil
}

// switchHalf moves the writer to the other half, first making the record
// files of its entries durable when a checkpoint has not. j.mu is held.
func (j *journal) switchHalf() error {
	other := journalHalf - j.half
	if j.last[other/journalHalf] > j.ckpt {
		upTo := j.seq.Load()
		if err := j.flushFS(); err != nil {
			return fmt.Errorf("checkpoint commit journal: %w", err)
		}
		j.ckpt = max(j.ckpt, upTo)
	}
	j.half, j.off = other, other
	j.epoch++
	j.last[other/journalHalf] = 0
	return nil
}

// checkpointed records that the record files of the entries up to seq
// are durable.
func (j *journal) checkpointed(seq uint64) {
	j.mu.Lock()
	j.ckpt = max(j.ckpt, seq)
	j.mu.Unlock()
}

// dirty reports entries not yet covered by a checkpoint.
func (j *journal) dirty() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.seq.Load() > j.ckpt
}

// sync returns once an fdatasync that started after entry mine was
// appended has succeeded, running it when none is running.
func (j *journal) sync(mine uint64) error {
	j.smu.Lock()
	defer j.smu.Unlock()
	for j.synced < mine {
		if j.running {
			j.cond.Wait()
			continue
		}
		j.running = true
		j.gather()
		upTo := j.seq.Load() // every entry numbered so far is staged: write writes it
		j.smu.Unlock()
		err := j.write()
		if err == nil {
			err = fdatasync(int(j.f.Fd()))
		}
		j.syncs.Add(1)
		j.smu.Lock()
		j.running = false
		j.cond.Broadcast()
		if err != nil {
			return fmt.Errorf("sync commit journal: %w", err)
		}
		j.synced = max(j.synced, upTo)
	}
	return nil
}

func (j *journal) close() error {
	return j.f.Close()
}

// journalEntry is one record read back from the journal.
type journalEntry struct {
	rel  string
	data []byte
}

// readJournal returns the whole entries of both halves of the journal at
// path; none when it does not exist.
func readJournal(path string) ([]journalEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	defer f.Close()
	buf, err := io.ReadAll(io.LimitReader(f, journalSize))
	if err != nil {
		return nil, err
	}
	var out []journalEntry
	for h := 0; h < len(buf); h += journalHalf {
		out = append(out, readHalf(buf[h:min(h+journalHalf, len(buf))])...)
	}
	return out, nil
}

// readHalf parses one half: entries from its start while whole and of the
// first entry's epoch.
func readHalf(b []byte) []journalEntry {
	var out []journalEntry
	var epoch uint64
	for len(b) >= journalHeader {
		n := int(binary.LittleEndian.Uint32(b[0:]))
		if n == 0 || n > len(b)-journalHeader {
			break
		}
		e := binary.LittleEndian.Uint64(b[8:])
		if crc32.Checksum(b[8:journalHeader+n], crcTable) != binary.LittleEndian.Uint32(b[4:]) || e == 0 {
			break
		}
		if epoch == 0 {
			epoch = e
		} else if e != epoch {
			break
		}
		body := b[journalHeader : journalHeader+n]
		i := 0
		for i < len(body) && body[i] != '\n' {
			i++
		}
		if i == len(body) {
			break
		}
		out = append(out, journalEntry{rel: string(body[:i]), data: body[i+1:]})
		b = b[journalHeader+n:]
	}
	return out
}
