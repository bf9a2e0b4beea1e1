package interval

import (
	"unsafe"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/prefetch"
)

// Prefetch asks the processor for the memory Add will write for pkts in
// the open interval (their LDS and LDA cells, their heavy-flow slots)
// without waiting for it. The capture worker calls it a few packets ahead
// of Add: live, these cells are rarely in the cache (the flows are many
// and the ring's packets push them out), and each miss would otherwise
// stall the packet path (docs/PERFORMANCE.md, "Capture workers"). It changes no
// state: a packet that lands in the next interval only wasted the fetch.
func (b *SenderBuilder) Prefetch(pkts []capture.Packet) {
	if b.cur == nil || len(pkts) == 0 {
		return
	}
	sk, dst := b.cur.Sk, b.lines[:0]
	for i := range pkts {
		p := &pkts[i]
		dst = sk.LDS.AppendLines(p.FlowHash, p.PktHash, dst)
		c := int(p.Class)
		if c >= len(sk.LDA) {
			c = 0
		}
		dst = sk.LDA[c].AppendLines(p.PktHash, dst)
		h := p.FlowHash
		dst = append(dst, uintptr(unsafe.Pointer(&b.heavy.slots[(h^h>>32)&b.heavy.mask])))
	}
	prefetch.Lines(dst)
	b.lines = dst
}
