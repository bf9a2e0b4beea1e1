package interval

import (
	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/sketch"
)

// insertLost adds a packet's identity to an interval's lost-packet table:
// its packet hash, its flow key and its own identifier. Both ends call it
// from Sketches.AddCount, so that the table holds exactly the packets the
// sketches hold: the sender's by its own timestamp, the receiver's as its
// boundary placement put them (direct, or held and split by the sender's
// boundary function).
func insertLost(t *sketch.IBLT, p *capture.Packet) {
	it := sketch.IBLTItem{Hash: p.PktHash, Src: p.Key.Src, Dst: p.Key.Dst, SPort: p.Key.SPort, DPort: p.Key.DPort,
		Proto: p.Key.Proto, ID: p.ID}
	if p.Key.V6 {
		it.Flags |= sketch.ItemV6
	}
	switch p.IDKind {
	case capture.IDIPv4:
		it.Flags |= sketch.ItemIDIPv4
	case capture.IDTCPSeq:
		it.Flags |= sketch.ItemIDTCPSeq
	}
	t.Insert(&it)
}
