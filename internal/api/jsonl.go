package api

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/lds-net/lds/internal/results"
)

// JSONLWriter appends one results line (DESIGN.md §6) per flow record to a
// file. Lines are buffered and handed to the OS at the end of every interval,
// so a reader never sees half an interval for long; Sync forces them to disk.
// It is safe for concurrent use.
type JSONLWriter struct {
	mu   sync.Mutex
	path string
	f    *os.File
	w    *bufio.Writer
	line []byte
	own  bool // f is ours to close (not stdout)
}

// NewJSONLWriter opens path for appending, creating it if needed; "-" writes
// to standard output.
func NewJSONLWriter(path string) (*JSONLWriter, error) {
	if path == "-" {
		return &JSONLWriter{path: path, f: os.Stdout, w: bufio.NewWriterSize(os.Stdout, 1<<16)}, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("results file: %w (check that the directory exists and is writable)", err)
	}
	return &JSONLWriter{path: path, f: f, w: bufio.NewWriterSize(f, 1<<16), own: true}, nil
}

// Write appends the flow records of iv, then flushes them to the OS. A
// record without a sender gets the interval's.
func (j *JSONLWriter) Write(iv *results.Interval) error {
	if iv == nil {
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.w == nil {
		return fmt.Errorf("results file %s: write after Close", j.path)
	}
	for i := range iv.Flows {
		rec := &iv.Flows[i]
		if rec.Sender == "" && iv.Sender != "" {
			c := *rec
			c.Sender = iv.Sender
			rec = &c
		}
		var err error
		if j.line, err = results.MarshalLine(j.line[:0], rec); err != nil {
			return fmt.Errorf("results file %s: encoding interval %d flow %s->%s: %w", j.path, iv.Interval, rec.Src, rec.Dst, err)
		}
		if _, err := j.w.Write(j.line); err != nil {
			return fmt.Errorf("results file %s: %w", j.path, err)
		}
	}
	if err := j.w.Flush(); err != nil {
		return fmt.Errorf("results file %s: %w", j.path, err)
	}
	return nil
}

// Sync flushes and asks the OS to put the lines on disk.
func (j *JSONLWriter) Sync() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.sync()
}

func (j *JSONLWriter) sync() error {
	if j.w == nil {
		return nil
	}
	if err := j.w.Flush(); err != nil {
		return fmt.Errorf("results file %s: %w", j.path, err)
	}
	if err := j.f.Sync(); err != nil && j.own {
		return fmt.Errorf("results file %s: sync: %w", j.path, err)
	}
	return nil
}

// Close flushes, syncs and closes the file (standard output stays open).
func (j *JSONLWriter) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.w == nil {
		return nil
	}
	err := j.sync()
	j.w = nil
	if j.own {
		err = errors.Join(err, j.f.Close())
	}
	return err
}

var _ io.Closer = (*JSONLWriter)(nil)
