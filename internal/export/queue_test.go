package export

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/lds-net/lds/internal/results"
)

type nopMetrics struct{ up []bool }

func (m *nopMetrics) ExportSent(_, _ string, _ int)       {}
func (m *nopMetrics) ExportDropped(_, _, _ string, _ int) {}
func (m *nopMetrics) ExportError(_, _ string)             {}
func (m *nopMetrics) ExportUp(_, _ string, up bool)       { m.up = append(m.up, up) }
func (m *nopMetrics) ExportQueued(_, _ string, _ int)     {}

// TestStateLogOncePerChange: a flapping UDP collector (fail, ok, fail, ...)
// logs one line, not one per message; a steady recovery logs one more.
func TestStateLogOncePerChange(t *testing.T) {
	var buf bytes.Buffer
	m := &nopMetrics{}
	l := stateLog{kind: KindIPFIX, name: "c", log: slog.New(slog.NewTextHandler(&buf, nil)), m: m}
	l.ok()
	for range 100 {
		l.fail(errors.New("connection refused"))
		l.ok()
	}
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Fatalf("%d log lines for one failure episode:\n%s", n, buf.String())
	}
	for range recoverStreak {
		l.ok()
	}
	if n := strings.Count(buf.String(), "export recovered"); n != 1 || !l.up {
		t.Fatalf("recovery logged %d times, up %v", n, l.up)
	}
}

// TestQueueBounded: offers beyond the bound are cut and reported; a closed
// queue drains and then ends takes.
func TestQueueBounded(t *testing.T) {
	q := newQueue(10)
	recs := make([]results.FlowRecord, 7)
	if n := q.offer("a", recs, false); n != 7 {
		t.Fatalf("offer of 7 into 10: %d", n)
	}
	if n := q.offer("a", recs, false); n != 3 {
		t.Fatalf("offer of 7 into 3 free: %d", n)
	}
	if !q.noteFull() || q.noteFull() {
		t.Fatal("noteFull must report the first drop of an episode only")
	}
	q.close()
	total := 0
	for {
		b, ok := q.take(context.Background())
		if !ok {
			break
		}
		total += len(b.flows)
	}
	if total != 10 || q.offer("a", recs, true) != 0 {
		t.Fatalf("drained %d, want 10; a closed queue takes nothing", total)
	}
}
