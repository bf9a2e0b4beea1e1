package receiver

import (
	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/wire"
)

// senderInterval turns an interval decoded from a sender's stream into the
// matcher's sender side and what the sender reported with it.
func senderInterval(w *wire.Interval) (*interval.SenderInterval, interval.SenderMeta) {
	sk := &interval.Sketches{LDS: w.LDS, LDA: w.LDA, ClassPackets: make([]uint64, len(w.LDA))}
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
		meta.Clock = interval.ClockStatus{State: c.State, OffsetNS: c.OffsetNs, GrandmasterPresent: c.GrandmasterPresent,
			GrandmasterID: c.GrandmasterId, PortState: c.PortState, Err: c.Error}
	}
	if d := e.GetDrops(); d != nil {
		meta.KernelDrops, meta.IfDrops, meta.ParseDrops = d.Kernel, d.Interface, d.Parse
		si.Late = d.Parse["late"]
	}
	return si, meta
}
