package jsonl

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lds-net/lds/internal/results"
)

// Options are a results file's rotation, durability and error
// reporting. The zero value never rotates and never fsyncs.
type Options struct {
	// Lost makes the file a lost-packet list: Write writes an interval's
	// lost packets (results.MarshalLostLine) instead of its flow records.
	Lost bool
	// MaxBytes rotates the file before an interval's lines would take it
	// past this size (0: never by size). An interval is never split over
	// two files, so one interval larger than MaxBytes makes a file of its own.
	MaxBytes int64
	// MaxAge rotates the file at the first interval written after it has
	// been this long in use (0: never by age). A file found at start counts
	// from its creation time where the filesystem records one, else from
	// the start.
	MaxAge time.Duration
	// Keep is the number of rotated files kept: path.1 (newest) to
	// path.Keep; older ones are removed. 0 removes the file at rotation.
	Keep int
	// Fsync asks the OS to put each interval's lines on disk before Write
	// returns.
	Fsync bool
	// OnError is called for every failed interval write with a bounded
	// reason (see ErrorReason) and the number of records that were dropped
	// with it (0 when the lines were written and only the fsync failed).
	OnError func(reason string, dropped int)
	// Now replaces time.Now (tests).
	Now func() time.Time
}

// Write error reasons, a bounded set used as a metric label.
const (
	ReasonNoSpace = "no_space" // ENOSPC, EDQUOT, EFBIG
	ReasonIO      = "io"       // EIO
	ReasonOpen    = "open"     // the file could not be (re)opened
	ReasonFsync   = "fsync"    // lines written, the fsync failed
	ReasonRotate  = "rotate"   // the rotation's renames failed (writing goes on in the same file)
	ReasonOther   = "other"
)

// ErrorReason classifies a write error into one of the Reason* constants.
func ErrorReason(err error) string {
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT), errors.Is(err, syscall.EFBIG):
		return ReasonNoSpace
	case errors.Is(err, syscall.EIO):
		return ReasonIO
	}
	return ReasonOther
}

// Writer appends one results line (docs/results.md) per flow record to a
// file. Each interval's lines go to the OS in one write; a write that fails
// part-way is cut back to the last whole line, so a reader never sees a torn
// line, and the interval's records are dropped (counted through OnError).
// The next interval is tried afresh: once space returns, writing resumes by
// itself. Before each interval the writer checks that path still names its
// file, and creates it again if it was deleted or moved away. It is safe for
// concurrent use.
type Writer struct {
	mu     sync.Mutex
	path   string
	opt    Options
	f      *os.File // nil: closed, or to be opened at the next Write
	stdout bool
	closed bool
	chunk  int       // bytes of lines handed to the OS in one write (writeChunk)
	size   int64     // bytes of whole lines in f
	since  time.Time // when f was started (for MaxAge)
	dev    uint64    // identity of f, to notice path naming another file
	ino    uint64
	buf    []byte
}

// Open opens path for appending, creating it if needed; "-" writes to
// standard output (which is never rotated, reopened or synced). A torn last
// line left by a crash is cut off.
func Open(path string, opt Options) (*Writer, error) {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.OnError == nil {
		opt.OnError = func(string, int) {}
	}
	if path == "-" {
		return &Writer{path: path, opt: opt, f: os.Stdout, stdout: true, chunk: writeChunk}, nil
	}
	j := &Writer{path: path, opt: opt, chunk: writeChunk}
	if err := j.open(); err != nil {
		return nil, err
	}
	return j, nil
}

// open opens (or creates) path, cuts a torn last line, and records the
// file's identity, size and age origin.
func (j *Writer) open() error {
	// Owner and group only: the records name flows (addresses, ports).
	f, err := os.OpenFile(j.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("results file: %w (check that the directory exists and is writable by the daemon)", err)
	}
	size, err := cutTornLine(j.path, f)
	if err != nil {
		_ = f.Close()
		return fmt.Errorf("results file %s: repairing its last line: %w", j.path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		_ = f.Close()
		return fmt.Errorf("results file %s: %w", j.path, err)
	}
	j.f, j.size, j.dev, j.ino = f, size, st.Dev, st.Ino
	j.since = j.opt.Now()
	if size > 0 {
		var sx unix.Statx_t
		if unix.Statx(int(f.Fd()), "", unix.AT_EMPTY_PATH, unix.STATX_BTIME, &sx) == nil && sx.Mask&unix.STATX_BTIME != 0 {
			if b := time.Unix(sx.Btime.Sec, int64(sx.Btime.Nsec)); b.Before(j.since) {
				j.since = b
			}
		}
	}
	return nil
}

// cutTornLine truncates f after its last newline (a crash or an old
// writer's failed write may have left half a line) and returns the size.
func cutTornLine(path string, f *os.File) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := st.Size()
	if size == 0 {
		return 0, nil
	}
	r, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer func() { _ = r.Close() }()
	chunk := make([]byte, 64<<10)
	end := size
	for end > 0 {
		n := int64(len(chunk))
		if end < n {
			n = end
		}
		if _, err := r.ReadAt(chunk[:n], end-n); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		if i := bytes.LastIndexByte(chunk[:n], '\n'); i >= 0 {
			end = end - n + int64(i) + 1
			break
		}
		end -= n
	}
	if end == size {
		return size, nil
	}
	return end, f.Truncate(end)
}

// writeChunk bounds the lines an interval hands the OS in one write (and
// the writer's buffer): an interval of up to ~14,000 flow records goes in
// one write, a larger one in whole-line chunks of this size.
const writeChunk = 4 << 20

// Write appends the flow records of iv, in one write where they fit in
// writeChunk, else in whole-line chunks. A record without a sender gets
// the interval's. On an error the interval's records are not in the file
// (not even in part: what was written of them is cut off again) and
// OnError has counted them.
func (j *Writer) Write(iv *results.Interval) error {
	if iv == nil {
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return fmt.Errorf("results file %s: write after Close", j.path)
	}
	n := len(iv.Flows)
	if j.opt.Lost {
		n = len(iv.Lost)
	}
	if n == 0 {
		return nil
	}
	w := intervalWrite{j: j, iv: iv}
	buf := j.buf[:0]
	for i := range n {
		if j.opt.Lost {
			buf = results.MarshalLostLine(buf, &iv.Lost[i])
		} else {
			rec := &iv.Flows[i]
			if rec.Sender == "" && iv.Sender != "" {
				c := *rec
				c.Sender = iv.Sender
				rec = &c
			}
			var err error
			if buf, err = results.MarshalLine(buf, rec); err != nil {
				return w.fail(ReasonOther, fmt.Errorf("encoding flow %s: %w", rec.Key, err))
			}
		}
		if len(buf) >= j.chunk {
			if err := w.write(buf); err != nil {
				return err
			}
			buf = buf[:0]
		}
	}
	j.buf = buf[:0]
	if len(buf) > 0 {
		if err := w.write(buf); err != nil {
			return err
		}
	}
	if j.stdout {
		return nil
	}
	j.size += w.written
	if j.opt.Fsync {
		if err := j.f.Sync(); err != nil {
			j.opt.OnError(ReasonFsync, 0)
			return fmt.Errorf("results file %s: fsync: %w", j.path, err)
		}
	}
	return nil
}

// intervalWrite is one interval being written: j.size stays at the
// interval's start until every chunk is in.
type intervalWrite struct {
	j       *Writer
	iv      *results.Interval
	written int64 // bytes of this interval handed to the OS
}

// write hands one chunk of whole lines to the OS; before the first, it
// makes sure path names the open file and rotates it if due.
func (w *intervalWrite) write(chunk []byte) error {
	j := w.j
	if j.stdout {
		if _, err := j.f.Write(chunk); err != nil {
			return w.fail(ErrorReason(err), err)
		}
		return nil
	}
	if w.written == 0 {
		if err := j.ready(int64(len(chunk))); err != nil {
			return w.fail(ReasonOpen, err)
		}
	}
	n, err := j.f.Write(chunk)
	w.written += int64(n)
	if err != nil {
		return w.fail(ErrorReason(err), err)
	}
	return nil
}

// fail cuts off what was written of the interval, counts its records as
// dropped and says so.
func (w *intervalWrite) fail(reason string, err error) error {
	j := w.j
	if w.written > 0 && !j.stdout && j.f != nil {
		if terr := j.f.Truncate(j.size); terr != nil {
			// The torn tail stays: drop the file handle so that the next
			// interval reopens the file, which cuts the tail first.
			_ = j.f.Close()
			j.f = nil
		}
	}
	j.opt.OnError(reason, len(w.iv.Flows))
	return fmt.Errorf("results file %s: %w (interval %d dropped: %d records; the next interval is tried afresh)",
		j.path, err, w.iv.Interval, len(w.iv.Flows))
}

// ready makes j.f the file path names now, rotated if the next n bytes
// would take it past MaxBytes or it has reached MaxAge.
func (j *Writer) ready(n int64) error {
	if j.f != nil {
		if size, ok := j.sameFile(); ok {
			// The size as it is now: someone may have truncated the file
			// (logrotate's copytruncate), and a failed write must be cut
			// back to the file's end, not to where it once was.
			j.size = size
		} else {
			// Deleted or moved away under the daemon: start path afresh.
			_ = j.f.Close()
			j.f = nil
		}
	}
	if j.f == nil {
		if err := j.open(); err != nil {
			return err
		}
	}
	if j.size == 0 {
		j.since = j.opt.Now() // an empty file's age starts with its first line
	}
	bySize := j.opt.MaxBytes > 0 && j.size > 0 && j.size+n > j.opt.MaxBytes
	byAge := j.opt.MaxAge > 0 && j.size > 0 && j.opt.Now().Sub(j.since) >= j.opt.MaxAge
	if !bySize && !byAge {
		return nil
	}
	if err := j.rotate(); err != nil {
		j.opt.OnError(ReasonRotate, 0)
		// Keep writing where we were rather than lose the interval.
		if j.f == nil {
			return j.open()
		}
		return nil
	}
	return j.open()
}

// sameFile reports whether path still names the open file, and its size.
func (j *Writer) sameFile() (int64, bool) {
	var st unix.Stat_t
	if err := unix.Stat(j.path, &st); err != nil {
		return 0, false
	}
	return st.Size, st.Dev == j.dev && st.Ino == j.ino
}

// rotate shifts path.(k) to path.(k+1), removing path.Keep, and renames
// path to path.1; the caller opens a new path. On success j.f is closed.
func (j *Writer) rotate() error {
	name := func(k int) string { return j.path + "." + strconv.Itoa(k) }
	if j.opt.Keep == 0 {
		if err := os.Remove(j.path); err != nil {
			return err
		}
	} else {
		if err := os.Remove(name(j.opt.Keep)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		for k := j.opt.Keep - 1; k >= 1; k-- {
			if err := os.Rename(name(k), name(k+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		if err := os.Rename(j.path, name(1)); err != nil {
			return err
		}
	}
	err := j.f.Close()
	j.f = nil
	return err
}

// Reopen closes the file and opens path anew: what SIGHUP asks for after
// an outside rotation (logrotate's create mode renames the file away).
func (j *Writer) Reopen() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed || j.stdout {
		return nil
	}
	if j.f != nil {
		_ = j.f.Close() // every line was handed to the OS at its interval's end
		j.f = nil
	}
	if err := j.open(); err != nil {
		j.opt.OnError(ReasonOpen, 0)
		return err
	}
	return nil
}

// Sync asks the OS to put the lines on disk.
func (j *Writer) Sync() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.sync()
}

func (j *Writer) sync() error {
	if j.f == nil || j.stdout {
		return nil
	}
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("results file %s: sync: %w", j.path, err)
	}
	return nil
}

// Close syncs and closes the file (standard output stays open).
func (j *Writer) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return nil
	}
	j.closed = true
	err := j.sync()
	if j.f != nil && !j.stdout {
		err = errors.Join(err, j.f.Close())
	}
	j.f = nil
	return err
}

var _ io.Closer = (*Writer)(nil)
