package receiver

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/metrics"
	"github.com/lds-net/lds/internal/ptp"
	"github.com/lds-net/lds/internal/wire"
	ldsv1 "github.com/lds-net/lds/proto/lds/v1"
)

// The stream stage is the gRPC server's: one goroutine per connected
// sender runs wire.Server.Stream, decodes frames (wire.Assembler) and calls
// the wire.Handler methods of streams below, which hand the sender entry's
// match stage what the stream said on its input. A call returns once its
// message is queued (then the interval is acknowledged) or the receiver
// is shutting down (done).

// streams is the stream stage's state: every sender entry's connection,
// shared by the gRPC server's goroutines under each entry's lock.
type streams struct {
	entries []*senderConn
	metrics *metrics.Receiver
	log     *slog.Logger
	done    chan struct{} // closed when Run returns: stream handlers stop waiting
}

// senderConn is one receiver.senders entry as its streams see it: the
// match stage's channels it feeds and reads, and what the gRPC server's
// goroutines share under mu.
type senderConn struct {
	entry config.SenderEntry
	// toMatch carries what the sender's stream decoded to the match
	// stage; never closed (streams come and go; done ends a waiting send).
	toMatch chan<- senderMsg
	// queries are the match stage's questions about lost packets;
	// matchDone is closed when the match stage ends.
	queries   <-chan *ldsv1.LostQuery
	matchDone <-chan struct{}

	mu        sync.Mutex
	bound     string // sender id bound to a wildcard entry
	connected bool
	final     []int64 // recent final interval ids, for HelloAck.have
	finished  bool    // the connected sender said Finished (its end already told the match stage)
	plan      *interval.WindowPlan
	keepFinal int // the most final ids kept
}

// senderMsg is what a sender's stream hands its match stage: an interval,
// the intervals a seq gap voided, or the end of the stream.
type senderMsg struct {
	si     *interval.SenderInterval
	meta   interval.SenderMeta
	voided []int64
	gone   bool
	answer *ldsv1.LostAnswer // the sender's answer about lost packets
	// ended: a stream of the sender ended; questions asked on it will not
	// be answered (lost_round.go).
	ended bool
}

// name is the sender id the entry serves ("unknown" before a wildcard
// entry is bound).
func (c *senderConn) name() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entry.ID != "" {
		return c.entry.ID
	}
	if c.bound != "" {
		return c.bound
	}
	return "unknown"
}

// isConnected says whether a stream of the sender is up now.
func (c *senderConn) isConnected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.connected
}

// recordFinal records a final interval for HelloAck.have: the receiver
// holds it, whatever its lost-packet round still waits for.
func (c *senderConn) recordFinal(id int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.final = append(c.final, id)
	if len(c.final) > c.keepFinal {
		c.final = c.final[len(c.final)-c.keepFinal:]
	}
}

// setPlan gives the entry its hold windows (Run: it needs the worker
// count; the gRPC server may already ask for them).
func (c *senderConn) setPlan(p *interval.WindowPlan) {
	c.mu.Lock()
	c.plan = p
	c.mu.Unlock()
}

// entryFor is the receiver.senders entry that serves sender (a wildcard
// entry is bound to the first sender id that asks).
func (st *streams) entryFor(sender string) (*senderConn, error) {
	for _, s := range st.entries {
		s.mu.Lock()
		ok := s.entry.ID == sender || (s.entry.ID == "" && (s.bound == "" || s.bound == sender))
		if ok && s.entry.ID == "" {
			s.bound = sender
		}
		s.mu.Unlock()
		if ok {
			return s, nil
		}
	}
	return nil, fmt.Errorf("no receiver.senders entry for sender %q (the wildcard entry is bound to another sender: list every sender in receiver.senders)", sender)
}

// Connected implements wire.Handler.
func (st *streams) Connected(sender string, _ uint64) ([]int64, error) {
	s, err := st.entryFor(sender)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.connected {
		return nil, fmt.Errorf("sender %q is already connected", sender)
	}
	s.connected, s.finished = true, false
	st.metrics.SenderConnected(sender, true)
	return append([]int64(nil), s.final...), nil
}

// Interval implements wire.Handler: it turns a decoded interval into the
// matcher's and queues it (or the ids a gap voided) for the match stage.
func (st *streams) Interval(sender string, res *wire.Result) error {
	s, err := st.entryFor(sender)
	if err != nil {
		return err
	}
	msg := senderMsg{voided: res.Voided}
	if res.Kind == wire.Complete {
		msg.si, msg.meta = senderInterval(res.Interval)
	}
	select {
	case s.toMatch <- msg:
		return nil
	case <-st.done:
		return errors.New("receiver shutting down")
	}
}

// Disconnected implements wire.Handler.
func (st *streams) Disconnected(sender string, err error) {
	s, e := st.entryFor(sender)
	if e != nil {
		return
	}
	s.mu.Lock()
	s.connected = false
	finished := s.finished
	s.mu.Unlock()
	st.metrics.SenderConnected(sender, false)
	select {
	case s.toMatch <- senderMsg{ended: true}:
	case <-s.matchDone:
	case <-st.done:
	}
	if err == nil || errors.Is(err, io.EOF) {
		if finished {
			return // Finished already told the match stage
		}
		select {
		case s.toMatch <- senderMsg{gone: true}:
		case <-st.done:
		}
	} else {
		st.log.Warn("sender disconnected", "sender", sender, "err", err)
	}
}

// LostQueries implements wire.LostHandler: the questions the match stage
// asks the sender, and the end of its need for answers.
func (st *streams) LostQueries(sender string) (<-chan *ldsv1.LostQuery, <-chan struct{}) {
	s, err := st.entryFor(sender)
	if err != nil {
		return nil, nil
	}
	return s.queries, s.matchDone
}

// LostAnswer implements wire.LostHandler: it hands the answer to the match stage.
func (st *streams) LostAnswer(sender string, a *ldsv1.LostAnswer) {
	s, err := st.entryFor(sender)
	if err != nil {
		return
	}
	select {
	case s.toMatch <- senderMsg{answer: a}:
	case <-s.matchDone: // the match stage has ended: nothing waits for it
	case <-st.done:
	}
}

// Finished implements wire.LostHandler: the sender sends no more
// intervals (its stream stays open for answers), which the match stage
// takes as the sender's end.
func (st *streams) Finished(sender string) {
	s, err := st.entryFor(sender)
	if err != nil {
		return
	}
	s.mu.Lock()
	s.finished = true
	s.mu.Unlock()
	select {
	case s.toMatch <- senderMsg{gone: true}:
	case <-s.matchDone:
	case <-st.done:
	}
}

// Windows gives the server the hold windows to tell sender (wire.windowed).
func (st *streams) Windows(sender string) wire.WindowSource {
	s, err := st.entryFor(sender)
	if err != nil {
		return nil
	}
	s.mu.Lock()
	plan := s.plan
	s.mu.Unlock()
	if plan == nil {
		return nil
	}
	return plan
}

// FrameError implements wire.Handler.
func (st *streams) FrameError(sender, reason string) { st.metrics.FrameError(sender, reason) }

// senderInterval turns an interval decoded from a sender's stream into the
// matcher's sender side and what the sender reported with it.
func senderInterval(w *wire.Interval) (*interval.SenderInterval, interval.SenderMeta) {
	sk := &interval.Sketches{LDS: w.LDS, LDA: w.LDA, ClassPackets: make([]uint64, len(w.LDA)), Lost: w.Lost}
	e := w.End
	if t := e.GetTotals(); t != nil {
		sk.Packets, sk.Bytes = t.Packets, t.Bytes
		if len(t.ClassPackets) == len(sk.ClassPackets) {
			copy(sk.ClassPackets, t.ClassPackets)
		}
	}
	si := &interval.SenderInterval{ID: w.ID, Partial: w.Flags&wire.FlagPartial != 0, First: w.Flags&wire.FlagFirst != 0,
		Trailer: w.Flags&wire.FlagTrailer != 0, Sk: sk, Split: w.Boundary, Samples: w.Samples, Heavy: w.Heavy}
	meta := interval.SenderMeta{SketchBytes: uint64(w.SketchBytes)}
	if c := e.GetClock(); c != nil {
		meta.Clock = interval.ClockStatus{State: ptp.ParseState(c.State), OffsetNS: c.OffsetNs, GrandmasterPresent: c.GrandmasterPresent,
			GrandmasterID: c.GrandmasterId, PortState: c.PortState, Err: c.Error}
	}
	if d := e.GetDrops(); d != nil {
		meta.KernelDrops, meta.IfDrops, meta.ParseDrops = d.Kernel, d.Interface, d.Parse
		// A sender that does not say which intervals its drops reach
		// still flags the interval that read them.
		meta.DropsAffecting = max(d.Affecting, d.Kernel+d.Interface)
		si.Late = d.Parse["late"]
	}
	return si, meta
}
