// Package jsonl reads and writes JSON Lines files. The results
// (docs/results.md) and the generator's ground truth share one reader,
// each with its own record type, line limit and check; Writer writes the
// receiver's results and lost-packet files (rotation, durability, whole
// lines).
package jsonl

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// Read decodes one T per line of r, skipping blank lines. what names the
// records in errors ("results line 3: ..."), maxLine is the longest line
// accepted in bytes (64 KiB at the least), and check (nil: none) refuses a record that decodes
// but is not a T. On an error it returns the records before the bad line.
func Read[T any](r io.Reader, what string, maxLine int, check func(*T) error) ([]T, error) {
	var out []T
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var rec T // a fresh one a line: Unmarshal leaves absent fields alone
		err := json.Unmarshal(b, &rec)
		if err == nil && check != nil {
			err = check(&rec)
		}
		if err != nil {
			return out, fmt.Errorf("%s line %d: %w", what, line, err)
		}
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("read %s after line %d: %w", what, line, err)
	}
	return out, nil
}

// ReadFile opens path and reads it with read. what names the file in the
// error of opening it ("open results: ..."); other errors are prefixed with
// path.
func ReadFile[T any](path, what string, read func(io.Reader) ([]T, error)) ([]T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", what, err)
	}
	defer func() { _ = f.Close() }()
	recs, err := read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return recs, nil
}
