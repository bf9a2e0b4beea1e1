package jsonl

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/test/testutil"
)

// flowInterval is interval id of sender "a" with n flow records.
func flowInterval(id int64, n int) *results.Interval {
	iv := &results.Interval{Sender: "a", Interval: id, StartNS: id * 1e9, Outcome: results.OutcomeMatched}
	for i := range n {
		iv.Flows = append(iv.Flows, results.FlowRecord{Interval: id, StartNS: id * 1e9,
			Key: capture.MustParseFlowKey("10.0.0."+strconv.Itoa(i%250+1), "192.0.2.1", 6, uint16(1000+i), 443), DelayNS: f(123456.5 + float64(i)), Packets: 10, Samples: 9})
	}
	return iv
}

// errCounter is an OnError that counts by reason.
type errCounter struct {
	mu      sync.Mutex
	n       map[string]int
	dropped int
}

func (c *errCounter) on(reason string, dropped int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[reason]++
	c.dropped += dropped
}

func (c *errCounter) get(reason string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[reason]
}

// readIntervals parses every line of path (failing on any line that is not
// a whole record) and returns the interval id of each line, in order.
func readIntervals(t *testing.T, path string) []int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Fatalf("%s ends in a torn line: %q", path, b[max(0, len(b)-80):])
	}
	var ids []int64
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		var r results.FlowRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s line %d is not a whole record: %v: %q", path, n, err, sc.Text())
		}
		ids = append(ids, r.Interval)
	}
	return ids
}

// wholeIntervals checks that every interval in ids has exactly per lines,
// contiguous, and returns the distinct ids in order.
func wholeIntervals(t *testing.T, ids []int64, per int) []int64 {
	t.Helper()
	var out []int64
	for i := 0; i < len(ids); i += per {
		if i+per > len(ids) {
			t.Fatalf("interval %d has %d lines, want %d", ids[i], len(ids)-i, per)
		}
		for _, id := range ids[i : i+per] {
			if id != ids[i] {
				t.Fatalf("interval %d has %d lines before interval %d begins, want %d", ids[i], slices.Index(ids[i:], id), id, per)
			}
		}
		out = append(out, ids[i])
	}
	return out
}

func TestJSONLRotateBySize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.jsonl")
	one := len(mustLines(t, flowInterval(1, 5)))
	// Three intervals fit in a file, the fourth rotates.
	w, err := Open(path, Options{MaxBytes: int64(3*one + one/2), Keep: 2})
	if err != nil {
		t.Fatal(err)
	}
	for id := int64(1); id <= 20; id++ {
		if err := w.Write(flowInterval(id, 5)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// 20 intervals in files of 3: 1-3 ... 16-18, 19-20; two kept.
	for name, want := range map[string][]int64{path: {19, 20}, path + ".1": {16, 17, 18}, path + ".2": {13, 14, 15}} {
		if got := wholeIntervals(t, readIntervals(t, name), 5); !slices.Equal(got, want) {
			t.Errorf("%s holds intervals %v, want %v", filepath.Base(name), got, want)
		}
	}
	if _, err := os.Stat(path + ".3"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s.3 exists beyond keep: 2 (%v)", path, err)
	}
}

func mustLines(t *testing.T, iv *results.Interval) []byte {
	t.Helper()
	var b []byte
	for i := range iv.Flows {
		r := iv.Flows[i]
		r.Sender = iv.Sender
		var err error
		if b, err = results.MarshalLine(b, &r); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

func TestJSONLRotateByAge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.jsonl")
	now := time.Now()
	clock := func() time.Time { return now }
	w, err := Open(path, Options{MaxAge: time.Hour, Keep: 1, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	write := func(id int64) {
		t.Helper()
		if err := w.Write(flowInterval(id, 2)); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(2 * time.Hour) // an empty file's age starts with its first line
	write(1)
	now = now.Add(59 * time.Minute)
	write(2) // younger than max_age: same file
	now = now.Add(time.Minute)
	write(3) // an hour old: rotated first
	now = now.Add(30 * time.Minute)
	write(4)
	now = now.Add(30 * time.Minute)
	write(5) // the second file is an hour old: it becomes .1, the first is removed (keep 1)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]int64{path: {5}, path + ".1": {3, 4}} {
		if got := wholeIntervals(t, readIntervals(t, name), 2); !slices.Equal(got, want) {
			t.Errorf("%s holds intervals %v, want %v", filepath.Base(name), got, want)
		}
	}
	if _, err := os.Stat(path + ".2"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s.2 exists beyond keep: 1", path)
	}
}

// TestJSONLDeletedAndMoved: a file deleted under the writer is created
// again at the next interval; one moved away (logrotate's create mode)
// gets the lines written before Reopen, and the new path those after.
func TestJSONLDeletedAndMoved(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r.jsonl")
	w, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	write := func(id int64) {
		t.Helper()
		if err := w.Write(flowInterval(id, 3)); err != nil {
			t.Fatal(err)
		}
	}
	write(1)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	write(2)
	if got := wholeIntervals(t, readIntervals(t, path), 3); !slices.Equal(got, []int64{2}) {
		t.Fatalf("after deleting the file, it holds intervals %v, want [2]", got)
	}
	// Moved away: without Reopen the writer notices too (path names
	// another file or none) and starts path afresh.
	if err := os.Rename(path, path+".old"); err != nil {
		t.Fatal(err)
	}
	if err := w.Reopen(); err != nil {
		t.Fatal(err)
	}
	write(3)
	if got := wholeIntervals(t, readIntervals(t, path+".old"), 3); !slices.Equal(got, []int64{2}) {
		t.Fatalf("the moved file holds %v, want [2]", got)
	}
	if got := wholeIntervals(t, readIntervals(t, path), 3); !slices.Equal(got, []int64{3}) {
		t.Fatalf("the new file holds %v, want [3]", got)
	}
	// Truncated in place (copytruncate): appends go on at the new end.
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	write(4)
	if got := wholeIntervals(t, readIntervals(t, path), 3); !slices.Equal(got, []int64{4}) {
		t.Fatalf("after truncation the file holds %v, want [4]", got)
	}
}

func TestJSONLCutsTornLineAtOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.jsonl")
	whole := mustLines(t, flowInterval(1, 2))
	if err := os.WriteFile(path, append(slices.Clone(whole), `{"interval":2,"sta`...), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(w.Write(flowInterval(3, 2)), w.Close()); err != nil {
		t.Fatal(err)
	}
	if got := wholeIntervals(t, readIntervals(t, path), 2); !slices.Equal(got, []int64{1, 3}) {
		t.Fatalf("file holds %v, want [1 3]", got)
	}
}

// mountTmpfs mounts a tmpfs of size bytes on a new temporary directory.
func mountTmpfs(t *testing.T, size int) string {
	t.Helper()
	testutil.RequireRoot(t)
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.Itoa(size)); err != nil {
		testutil.SkipOrFail(t, "mounting a %d-byte tmpfs on %s: %v", size, dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	return dir
}

// TestJSONLNoSpace fills a real 64 KiB tmpfs until writes fail with
// ENOSPC, frees it, and checks that the file never holds a torn line or
// part of an interval, that every failed interval is counted, and that
// every interval after the space returned is written whole.
func TestJSONLNoSpace(t *testing.T) {
	// One write an interval, and intervals written in several chunks
	// (as those of more than ~14,000 flows are) whose later chunk fails.
	for _, chunk := range []int{writeChunk, 512} {
		t.Run("chunk="+strconv.Itoa(chunk), func(t *testing.T) { testNoSpace(t, chunk) })
	}
}

func testNoSpace(t *testing.T, chunk int) {
	dir := mountTmpfs(t, 64<<10)
	path := filepath.Join(dir, "r.jsonl")
	var errs errCounter
	w, err := Open(path, Options{Fsync: true, OnError: errs.on})
	if err != nil {
		t.Fatal(err)
	}
	w.chunk = chunk
	defer w.Close()
	// Another file takes half the space, so that freeing it makes room.
	if err := os.WriteFile(filepath.Join(dir, "filler"), make([]byte, 32<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	const per = 7 // ~1.5 KB an interval: writes end mid-line at a page boundary
	var written, failed []int64
	id := int64(100)
	for ; len(failed) < 3; id++ {
		if id > 1000 {
			t.Fatal("no write failed on a full 64 KiB tmpfs")
		}
		if err := w.Write(flowInterval(id, per)); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("interval %d: %v, want ENOSPC", id, err)
			}
			failed = append(failed, id)
			continue
		}
		written = append(written, id)
	}
	if got := wholeIntervals(t, readIntervals(t, path), per); !slices.Equal(got, written) {
		t.Fatalf("full disk: the file holds intervals %v, want exactly those written %v", got, written)
	}
	if errs.get(ReasonNoSpace) != len(failed) || errs.dropped != per*len(failed) {
		t.Fatalf("counted %v errors dropping %d records, want %d no_space dropping %d", errs.n, errs.dropped, len(failed), per*len(failed))
	}
	if err := os.Remove(filepath.Join(dir, "filler")); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if err := w.Write(flowInterval(id, per)); err != nil {
			t.Fatalf("interval %d after space returned: %v", id, err)
		}
		written = append(written, id)
		id++
	}
	if got := wholeIntervals(t, readIntervals(t, path), per); !slices.Equal(got, written) {
		t.Fatalf("after freeing space: the file holds intervals %v, want %v", got, written)
	}
	t.Logf("%d intervals written, %d dropped on ENOSPC (%v)", len(written), len(failed), fmt.Sprint(failed))
}

// TestJSONLNotWorldReadable: the results file names flows (addresses and
// ports): it is created readable by its owner and group only.
func TestJSONLNotWorldReadable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "results.jsonl")
	w, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm&0o007 != 0 || perm&0o600 != 0o600 {
		t.Errorf("results file created %v, want no access for others (0640 before the umask)", perm)
	}
}

func TestJSONLWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "results.jsonl")
	w, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	iv1 := &results.Interval{Sender: "a", Interval: 1763000000, Flows: []results.FlowRecord{
		{Interval: 1763000000, StartNS: 1763000000_000000000, Key: capture.MustParseFlowKey("10.0.0.1", "192.0.2.7", 6, 51000, 443),
			DelayNS: f(412345.5), StddevNS: f(80211), Loss: f(0), Packets: 1520, Samples: 1498, CI95NS: f(4020.1)},
		{Interval: 1763000000, Key: capture.MustParseFlowKey("2001:db8::1", "2001:db8::2", 17, 0, 0), Packets: 3, Loss: results.Float(1)},
	}}
	// iv3's record withholds its loss: null, never 0.
	iv2 := &results.Interval{Sender: "a", Interval: 1763000001, Outcome: results.OutcomeVoidedGap} // no flows, no lines
	iv3 := &results.Interval{Sender: "b", Interval: 1763000001, Flows: []results.FlowRecord{{Interval: 1763000001, Sender: "b", Key: capture.MustParseFlowKey("10.0.0.2", "10.0.0.3", 1, 0, 0)}}}
	for _, iv := range []*results.Interval{iv1, iv2, iv3} {
		if err := w.Write(iv); err != nil {
			t.Fatal(err)
		}
	}
	// Flushed at the end of each interval: readable before Close.
	if b, _ := os.ReadFile(path); bytes.Count(b, []byte("\n")) != 3 {
		t.Fatalf("before Close the file has %q, want 3 lines", b)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(iv1); err == nil {
		t.Fatal("Write after Close succeeded")
	}
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	want := []string{
		`{"interval":1763000000,"start_ns":1763000000000000000,"src":"10.0.0.1","dst":"192.0.2.7","sport":51000,"dport":443,"proto":6,"delay_ns":412345.5,"stddev_ns":80211,"loss":0,"packets":1520,"samples":1498,"ci95_ns":4020.1,"sender":"a","p50_ns":null,"p90_ns":null,"p99_ns":null,"delay_samples":0,"loss_exact":false,"reordered":null,"reorder_extent_ns":null}`,
		`{"interval":1763000000,"start_ns":0,"src":"2001:db8::1","dst":"2001:db8::2","sport":0,"dport":0,"proto":17,"delay_ns":null,"stddev_ns":null,"loss":1,"packets":3,"samples":0,"ci95_ns":null,"sender":"a","p50_ns":null,"p90_ns":null,"p99_ns":null,"delay_samples":0,"loss_exact":false,"reordered":null,"reorder_extent_ns":null}`,
		`{"interval":1763000001,"start_ns":0,"src":"10.0.0.2","dst":"10.0.0.3","sport":0,"dport":0,"proto":1,"delay_ns":null,"stddev_ns":null,"loss":null,"packets":0,"samples":0,"ci95_ns":null,"sender":"b","p50_ns":null,"p90_ns":null,"p99_ns":null,"delay_samples":0,"loss_exact":false,"reordered":null,"reorder_extent_ns":null}`,
	}
	sc := bufio.NewScanner(fh)
	var got []string
	for sc.Scan() {
		got = append(got, sc.Text())
	}
	if !slices.Equal(got, want) {
		t.Fatalf("file:\n%q\nwant:\n%q", got, want)
	}
	if iv1.Flows[1].Sender != "" {
		t.Fatal("Write changed the caller's record")
	}
	// Appends, never truncates.
	w2, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := errors2(w2.Write(iv3), w2.Close()); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); bytes.Count(b, []byte("\n")) != 4 {
		t.Fatalf("after reopening the file has %d lines, want 4", bytes.Count(b, []byte("\n")))
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing", "x.jsonl"), Options{}); err == nil {
		t.Fatal("Open in a missing directory succeeded")
	}
}

func errors2(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func f(v float64) *float64 { return &v }
