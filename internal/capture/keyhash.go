package capture

import (
	"github.com/lds-net/lds/internal/match"
)

// FlowHash is the flow hash Parse gives packets of flow k: the receiver
// needs it for flow keys it only learned from the sender (flows that lost
// every packet). It allocates nothing.
func (p *Parser) FlowHash(k FlowKey) uint64 {
	return p.flowHash.hash(&k)
}

// WeightOf is the weight the weight rules give flow k (1 if none matches).
// For an aggregated flow key it is the weight of the key's own fields.
func (p *Parser) WeightOf(k FlowKey) uint32 {
	if i := match.First(p.weights, k.SrcAddr(), k.DstAddr(), k.Proto, k.SPort, k.DPort); i >= 0 {
		return p.weightVal[i]
	}
	return 1
}
