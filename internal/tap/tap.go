// Package tap is what lds-sender and lds-receiver both run at their tap:
// the capture loop of one worker (Loop), which hands each packet to the
// daemon's callbacks, and this host's clock verdict as the intervals carry
// it (Clock). The daemons differ only in their callbacks: the sender
// sketches and samples, the receiver does that per sender entry.
package tap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/metrics"
	"github.com/lds-net/lds/internal/ptp"
)

// IdleSlack is how far behind the wall clock an idle live link's intervals
// are closed: packets still in the capture ring must not arrive late.
const IdleSlack = 250 * time.Millisecond

// pollEvery is how many packets pass between two looks at the context
// (and, in a replay, two yields).
const pollEvery = 1024

// BatchSize is the most packets Loop.Batch takes at a time: enough to
// fetch a few packets' memory ahead, few enough to stay in the first
// cache level (80 bytes a packet).
const BatchSize = 32

// Loop is one capture worker: it reads packets from Reader until the file
// ends, ctx ends or the source fails, and calls the callbacks. Every
// callback runs on Run's goroutine.
type Loop struct {
	Name   string          // "sender" or "receiver": the log's and errors' word
	Reader *capture.Reader // the worker's source and parser
	Log    *slog.Logger
	// Replay: the source is a file, read as fast as it goes. The loop
	// yields the processor every pollEvery packets, so that the stream's
	// and matcher's goroutines run then rather than at the scheduler's
	// next preemption up to 10 ms away; the wall clock closes nothing.
	Replay bool

	// Packet takes one packet. It runs for every packet: it must not
	// allocate, and pkt is reused after it returns.
	Packet func(pkt *capture.Packet)
	// Batch, if set, takes the packets instead of Packet, up to BatchSize
	// at a time: those a live ring already holds (Reader.NextBatch), so
	// that it can fetch the memory of later packets while it works on
	// earlier ones. Same rules as Packet; the slice is reused.
	Batch func(pkts []capture.Packet)
	// Advance closes the intervals that end before now (Unix ns): a live
	// link with no packet for a poll timeout, now being the wall clock
	// less IdleSlack. Never called in a replay.
	Advance func(now int64)
	// Flush emits every open interval at the end of a file.
	Flush func()
	// Stop runs at a stop request (ctx ended): it hands over what was
	// captured so far, so that nothing captured is dropped silently.
	Stop func()
	// Poll, if set, runs every pollEvery packets, on every idle poll and
	// at the end of a file: a moment to publish the capture counters.
	Poll func()
}

// Run runs the loop. It returns nil at the end of a file and after a stop
// request, and the source's error (wrapped, with Name) otherwise.
func (l *Loop) Run(ctx context.Context) error {
	buf := make([]capture.Packet, 1)
	if l.Batch != nil {
		buf = make([]capture.Packet, BatchSize)
	}
	n := 0
	for {
		k, err := l.Reader.NextBatch(buf)
		switch {
		case err == nil:
			if l.Batch != nil {
				l.Batch(buf[:k])
			} else {
				l.Packet(&buf[0])
			}
			old := n
			n += k
			if n/pollEvery == old/pollEvery {
				continue
			}
			if ctx.Err() != nil {
				l.Stop()
				return nil
			}
			l.poll()
			if l.Replay {
				runtime.Gosched()
			}
		case errors.Is(err, capture.ErrTimeout):
			if ctx.Err() != nil {
				l.Stop()
				return nil
			}
			if !l.Replay {
				l.Advance(time.Now().Add(-IdleSlack).UnixNano())
			}
			l.poll()
		case errors.Is(err, io.EOF):
			l.Flush()
			l.poll()
			if te := (*capture.TruncatedError)(nil); errors.As(err, &te) {
				l.Log.Warn(l.Name+" capture file cut short: its last record is dropped, every complete one before it used",
					"file", te.Path, "records_used", te.Record-1, "records_dropped", 1, "bytes_present", te.Have, "bytes_announced", te.Want)
			}
			l.Log.Info(l.Name+" capture ended", "packets", n)
			return nil
		default:
			return fmt.Errorf("%s capture: %w", l.Name, err)
		}
	}
}

func (l *Loop) poll() {
	if l.Poll != nil {
		l.Poll()
	}
}

// ErrDone ends a replay's errgroup: the goroutine that sees the replay
// finished returns it, so that the group's context stops the others.
// Wait turns it into success.
var ErrDone = errors.New("replay finished")

// Wait is g.Wait, with ErrDone as success.
func Wait(g *errgroup.Group) error {
	if err := g.Wait(); !errors.Is(err, ErrDone) {
		return err
	}
	return nil
}

// Clock is this host's clock verdict now, as an interval carries it:
// disabled without a checker (PTP off, or a replay).
func Clock(c *ptp.Checker) interval.ClockStatus {
	if c == nil {
		return interval.ClockStatus{State: ptp.StateDisabled}
	}
	st := c.Status()
	return interval.ClockStatus{State: st.State, OffsetNS: st.OffsetNS, GrandmasterPresent: st.GrandmasterPresent,
		GrandmasterID: st.GrandmasterID, PortState: st.PortState, Err: st.Err}
}

// OwnClock returns what the metrics read at scrape time as this host's
// clock (metrics.Sender.SetOwnClock, metrics.Receiver.SetOwnClock).
func OwnClock(c *ptp.Checker) func() metrics.OwnClock {
	return func() metrics.OwnClock {
		st := c.Status()
		return metrics.OwnClock{State: st.State, OffsetNS: st.OffsetNS, HaveOffset: !st.LastOK.IsZero()}
	}
}
