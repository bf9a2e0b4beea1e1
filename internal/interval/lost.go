package interval

import (
	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/sketch"
)

// insertLost adds a packet to an interval's lost-packet table by its
// packet hash. Both ends call it from Sketches.AddCount, so that the table
// holds exactly the packets the sketches hold: the sender's by its own
// timestamp, the receiver's as its boundary placement put them (direct, or
// held and split by the sender's boundary function). The packet's flow,
// identifier and send time stay in the sender's packet log (PacketLog).
func insertLost(t *sketch.IBLT, p *capture.Packet) { t.Insert(p.PktHash) }

// LostRound is the second round of an interval's lost-packet list: the
// difference of the two ends' tables peeled (the match stage does it when
// the interval is final), the hashes asked of the sender, and its answer:
// each lost packet's capture time at tap A, flow and identifier from the
// sender's packet log (docs/protocol.md, "Lost packets").
type LostRound struct {
	Items    []sketch.Peeled // +1 lost, −1 extra
	Complete bool            // the difference peeled completely
	Asked    int             // lost hashes asked of the sender (0: none asked)
	// Answer holds the sender's answer by hash; Unanswered names why there
	// is none where one was asked ("" when it came): UnansweredTimeout,
	// UnansweredGone, UnansweredRefused.
	Answer     map[uint64]LoggedPacket
	Unanswered string
	// Extra names the extra packets (−1) from the receiver's own packet
	// log: their flow and identifier (no send time: A never saw them).
	Extra map[uint64]LoggedPacket
}

// Why an asked question has no answer (LostRound.Unanswered).
const (
	UnansweredTimeout = "no_answer" // none within the receiver's wait (or the sender is not connected)
	UnansweredGone    = "answer_gone"
	UnansweredRefused = "answer_refused" // the answer broke the rules (wire.DecodeLostAnswer)
)

// PeelLost subtracts the receiver's table from the sender's and peels the
// difference (at most as many items as cells); nil when either end keeps
// no table. The tables are left as they are.
func PeelLost(mt *Matched) *LostRound {
	if mt.Sender == nil || mt.Sender.Sk == nil || mt.Receiver == nil || mt.Sender.Sk.Lost == nil || mt.Receiver.Lost == nil {
		return nil
	}
	diff := mt.Sender.Sk.Lost.Copy()
	if err := diff.Subtract(mt.Receiver.Lost); err != nil {
		return &LostRound{}
	}
	items, complete := diff.Peel(diff.Cells())
	return &LostRound{Items: items, Complete: complete}
}

// LostHashes are the hashes of the round's lost packets (+1), at most limit.
func (r *LostRound) LostHashes(limit int) []uint64 {
	var hs []uint64
	for i := range r.Items {
		if r.Items[i].Sign > 0 && len(hs) < limit {
			hs = append(hs, r.Items[i].Hash)
		}
	}
	return hs
}
