package receiver

import (
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/wire"
	ldsv1 "github.com/lds-net/lds/proto/lds/v1"
)

// LostAnswerWait is how long the match stage waits for the sender's answer
// about an interval's lost packets before it hands the interval on
// without it (the list then incomplete, reason no_answer; docs/protocol.md,
// "Lost packets"). The sender answers from memory in about a millisecond
// a million logged packets; the wait covers the stream's round trip and a
// busy sender. Intervals behind a waiting one wait with it, in order.
const LostAnswerWait = 2 * time.Second

// lostAnswerWaitReplay is the wait in a replay, whose sender answers in
// the same process but may be slowed by a loaded machine.
const lostAnswerWaitReplay = 60 * time.Second

// lostQueue is one sender entry's questions in flight: the match stage
// parks each final interval that asked the sender about its lost packets
// until the answer comes or the wait ends, and hands intervals on in the
// order they became final.
type lostQueue struct {
	queries chan *ldsv1.LostQuery // to the sender's stream (wire.LostHandler)
	done    chan struct{}         // closed when the match stage ends
	park    []*parkedLost
	wait    time.Duration
	max     int   // the table's cells (the most a peel lists): hashes asked at most
	t       int64 // interval length, ns
	timer   *time.Timer
}

type parkedLost struct {
	mt       *interval.Matched
	asked    map[uint64]bool
	deadline time.Time
	resolved bool
}

func newLostQueue(capacity int, t int64, wait time.Duration) *lostQueue {
	return &lostQueue{queries: make(chan *ldsv1.LostQuery, 16), done: make(chan struct{}), max: capacity, t: t, wait: wait}
}

// finalLost peels the final interval's lost-packet tables, asks the
// sender about the lost packets, and parks the interval (or hands it on
// at once when there is nothing to ask and nothing parked before it).
func (ms *matchStage) finalLost(mt *interval.Matched, now time.Time) {
	q := ms.lostQ
	ms.conn.recordFinal(mt.ID)
	mt.Lost = interval.PeelLost(mt)
	p := &parkedLost{mt: mt, resolved: true}
	connected := ms.conn.isConnected()
	if mt.Lost != nil {
		nameExtra(mt)
		if hs := mt.Lost.LostHashes(q.max); len(hs) > 0 {
			mt.Lost.Asked = len(hs)
			p.resolved = false
			p.deadline = now.Add(q.wait)
			p.asked = make(map[uint64]bool, len(hs))
			for _, h := range hs {
				p.asked[h] = true
			}
			select {
			case q.queries <- &ldsv1.LostQuery{Interval: mt.ID, Hashes: hs}:
				if !connected {
					// No stream now: the question waits for the next one,
					// the interval does not (a stream's end flushes the
					// intervals that asked on it).
					mt.Lost.Unanswered, p.resolved = interval.UnansweredTimeout, true
				}
			default: // no stream takes questions now: no answer will come
				mt.Lost.Unanswered, p.resolved = interval.UnansweredTimeout, true
			}
		}
	}
	q.park = append(q.park, p)
	ms.flushLost(now, false)
}

// nameExtra names the extra packets (seen at the receiver only) from the
// receiver's own packet log of the interval.
func nameExtra(mt *interval.Matched) {
	want := map[uint64]bool{}
	for _, it := range mt.Lost.Items {
		if it.Sign < 0 {
			want[it.Hash] = true
		}
	}
	if len(want) == 0 || mt.Receiver == nil {
		return
	}
	mt.Lost.Extra = make(map[uint64]interval.LoggedPacket, len(want))
	interval.Answer(mt.Receiver.PacketLogs(), want, func(p interval.LoggedPacket) { mt.Lost.Extra[p.Hash] = p })
}

// lostAnswered takes the sender's answer to a parked interval.
func (ms *matchStage) lostAnswered(a *ldsv1.LostAnswer, now time.Time) {
	q := ms.lostQ
	for _, p := range q.park {
		if p.resolved || p.mt.ID != a.Interval {
			continue
		}
		p.resolved = true
		// The answer is bytes the sender shipped for the interval.
		p.mt.Meta.SketchBytes += uint64(proto.Size(a))
		switch {
		case a.Gone:
			p.mt.Lost.Unanswered = interval.UnansweredGone
		default:
			ps, err := wire.DecodeLostAnswer(a.Packets, p.asked, p.mt.ID*q.t, q.t)
			if err != nil {
				p.mt.Lost.Unanswered = interval.UnansweredRefused
				ms.log.Warn("refused the sender's answer about lost packets", "sender", ms.conn.name(), "interval", p.mt.ID, "err", err)
				break
			}
			p.mt.Lost.Answer = make(map[uint64]interval.LoggedPacket, len(ps))
			for _, lp := range ps {
				p.mt.Lost.Answer[lp.Hash] = lp
			}
		}
		break
	}
	ms.flushLost(now, false)
}

// flushLost hands on the parked intervals at the head that are answered
// or whose wait is over (all of them when all is set).
func (ms *matchStage) flushLost(now time.Time, all bool) {
	q := ms.lostQ
	n := 0
	for _, p := range q.park {
		if !p.resolved && !all && now.Before(p.deadline) {
			break
		}
		if !p.resolved {
			p.mt.Lost.Unanswered = interval.UnansweredTimeout
		}
		ms.final(p.mt)
		n++
	}
	clear(q.park[:n])
	q.park = q.park[n:]
}

// lostTimer is a channel that fires when the head's wait ends (nil when
// nothing waits).
func (q *lostQueue) lostTimer(now time.Time) <-chan time.Time {
	if len(q.park) == 0 || q.park[0].resolved {
		return nil
	}
	d := q.park[0].deadline.Sub(now)
	if q.timer == nil {
		q.timer = time.NewTimer(d)
	} else {
		q.timer.Reset(d)
	}
	return q.timer.C
}
