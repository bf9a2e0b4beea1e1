package sender

import (
	"sync"

	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/wire"
)

// lostLogs keeps each shipped interval's packet logs (interval.PacketLog)
// until the receiver has asked about its lost packets, or until keep
// newer intervals have been shipped: the receiver asks once, when the
// interval is final, within max_delay + guard and its own answer wait
// after the sender shipped it (LostLogIntervals). Safe for concurrent
// use: ship adds, the stream's reader answers.
type lostLogs struct {
	mu   sync.Mutex
	t    int64
	keep int
	byID map[int64][]*interval.PacketLog
	ids  []int64 // oldest first
}

func newLostLogs(p interval.Params) *lostLogs {
	return &lostLogs{t: p.T, keep: LostLogIntervals(p), byID: map[int64][]*interval.PacketLog{}}
}

// LostLogIntervals is how many shipped intervals' packet logs the sender
// keeps unanswered: the receiver finalizes an interval at most
// max_delay + guard after its end plus its capture's sealing (one
// interval), and asks at once; two more intervals cover a slow stream.
func LostLogIntervals(p interval.Params) int {
	return 3 + int((p.MaxDelay+2*p.Guard+p.T-1)/p.T)
}

// add keeps an interval's logs, releasing the oldest beyond keep.
func (l *lostLogs) add(id int64, logs []*interval.PacketLog) {
	if len(logs) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.byID[id]; ok { // an interval is shipped once; keep the first
		for _, g := range logs {
			g.Release()
		}
		return
	}
	l.byID[id] = logs
	l.ids = append(l.ids, id)
	for len(l.ids) > l.keep {
		l.dropLocked(l.ids[0])
	}
}

func (l *lostLogs) dropLocked(id int64) {
	for _, g := range l.byID[id] {
		g.Release()
	}
	delete(l.byID, id)
	for i, x := range l.ids {
		if x == id {
			l.ids = append(l.ids[:i], l.ids[i+1:]...)
			break
		}
	}
}

// answer encodes the logged packets among hashes, and forgets the
// interval's logs (a receiver asks once); gone when they are not kept.
func (l *lostLogs) answer(id int64, hashes []uint64) ([]byte, bool) {
	l.mu.Lock()
	logs, ok := l.byID[id]
	if ok {
		delete(l.byID, id)
		for i, x := range l.ids {
			if x == id {
				l.ids = append(l.ids[:i], l.ids[i+1:]...)
				break
			}
		}
	}
	l.mu.Unlock()
	if !ok {
		return nil, true
	}
	defer func() {
		for _, g := range logs {
			g.Release()
		}
	}()
	want := make(map[uint64]bool, len(hashes))
	for _, h := range hashes {
		want[h] = true
	}
	found := make([]interval.LoggedPacket, 0, len(hashes))
	interval.Answer(logs, want, func(p interval.LoggedPacket) { found = append(found, p) })
	return wire.AppendLostAnswer(nil, id*l.t, found), false
}

// close releases every kept log.
func (l *lostLogs) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range append([]int64(nil), l.ids...) {
		l.dropLocked(id)
	}
}
