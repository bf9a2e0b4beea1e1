package metrics

import (
	"container/heap"
	"slices"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/match"
	"github.com/lds-net/lds/internal/results"
)

// pick is one flow of the tracked set: its index in Interval.Flows and the
// name of the watch rule that matched it ("" for a top-N flow).
type pick struct {
	idx   int
	watch string
}

// selection is the tracked set of one interval.
type selection struct {
	picks      []pick
	watchCut   int // watched flows left out because more than top_n matched
	topN       int // how many of picks came from the top-N
	watchTotal int // flows matched by a watch rule, kept or not
}

// heavier orders flows by packets, then by key so that ties pick the same
// flows every time (no flapping series between scrapes).
func heavier(a, b *results.FlowRecord) bool {
	if a.Packets != b.Packets {
		return a.Packets > b.Packets
	}
	return compareKey(a, b) < 0
}

func compareKey(a, b *results.FlowRecord) int { return capture.CompareText(a.Key, b.Key) }

// lightHeap is a min-heap (lightest on top) of flow indices: it holds the
// heaviest n seen so far in O(len(flows)·log n).
type lightHeap struct {
	idx   []int
	flows []results.FlowRecord
}

func (h *lightHeap) Len() int           { return len(h.idx) }
func (h *lightHeap) Less(i, j int) bool { return heavier(&h.flows[h.idx[j]], &h.flows[h.idx[i]]) }
func (h *lightHeap) Swap(i, j int)      { h.idx[i], h.idx[j] = h.idx[j], h.idx[i] }
func (h *lightHeap) Push(x any)         { h.idx = append(h.idx, x.(int)) }
func (h *lightHeap) Pop() any {
	x := h.idx[len(h.idx)-1]
	h.idx = h.idx[:len(h.idx)-1]
	return x
}

// selectFlows returns the tracked set of iv: the topN heaviest flows, and
// flows matched by a watch rule, at most topN of the latter beyond the
// top-N (the heaviest of them); the rest are counted in watchCut. A flow
// appearing twice in iv (it should not) is tracked once.
func selectFlows(flows []results.FlowRecord, topN int, watch []match.Compiled) selection {
	var s selection
	h := &lightHeap{flows: flows, idx: make([]int, 0, min(topN, len(flows))+1)}
	for i := range flows {
		if h.Len() < topN {
			heap.Push(h, i)
		} else if heavier(&flows[i], &flows[h.idx[0]]) {
			h.idx[0] = i
			heap.Fix(h, 0)
		}
	}
	inTop := make(map[int]int, h.Len()) // flow index -> position in picks
	seen := make(map[capture.FlowKey]bool, h.Len())
	slices.SortFunc(h.idx, func(a, b int) int {
		if heavier(&flows[a], &flows[b]) {
			return -1
		}
		return 1
	})
	for _, i := range h.idx {
		k := flows[i].Key
		if seen[k] {
			continue
		}
		seen[k] = true
		inTop[i] = len(s.picks)
		s.picks = append(s.picks, pick{idx: i})
	}
	s.topN = len(s.picks)
	if len(watch) == 0 {
		return s
	}
	var extra []pick
	for i := range flows {
		r := &flows[i]
		k := &r.Key
		w := match.First(watch, k.SrcAddr(), k.DstAddr(), k.Proto, k.SPort, k.DPort)
		if w < 0 {
			continue
		}
		s.watchTotal++
		if p, ok := inTop[i]; ok {
			s.picks[p].watch = watch[w].Name
			continue
		}
		extra = append(extra, pick{idx: i, watch: watch[w].Name})
	}
	slices.SortFunc(extra, func(a, b pick) int {
		if heavier(&flows[a.idx], &flows[b.idx]) {
			return -1
		}
		return 1
	})
	for _, p := range extra {
		k := flows[p.idx].Key
		if seen[k] {
			continue
		}
		if len(s.picks)-s.topN >= topN {
			s.watchCut++
			continue
		}
		seen[k] = true
		s.picks = append(s.picks, p)
	}
	return s
}
