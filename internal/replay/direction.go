package replay

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/config"
)

// directionSample is how many packets of each capture's start the
// direction check joins: enough for a clear majority, cheap next to a replay.
const directionSample = 50000

// ErrSwapped is wrapped by the error that refuses two captures whose
// packets reach the receiver's tap before the sender's.
var ErrSwapped = errors.New("replay: the captures look swapped")

// checkDirection joins the first packets of both captures by identity
// and refuses the pair when at least 20 packets match and more than 90 %
// of them were captured at the receiver's tap before the sender's: the
// captures were given the wrong way round (or the taps' clocks differ by
// more than the delay, which would make every delay negative as well).
// A capture the join cannot read is left to the replay to report.
func checkDirection(cfg config.Receiver, senderPcap, receiverPcap string) error {
	p, err := capture.NewParser(cfg.CaptureConfig())
	if err != nil {
		return nil
	}
	type ident struct {
		key  capture.FlowKey
		hash uint64
	}
	sent := make(map[ident]int64, directionSample)
	n := 0
	if err := capture.EachPacket(senderPcap, p, func(pk *capture.Packet) bool {
		sent[ident{pk.Key, pk.PktHash}] = pk.TS
		n++
		return n < directionSample
	}); err != nil {
		return nil
	}
	var diffs []int64
	n = 0
	if err := capture.EachPacket(receiverPcap, p, func(pk *capture.Packet) bool {
		if ts, ok := sent[ident{pk.Key, pk.PktHash}]; ok {
			diffs = append(diffs, pk.TS-ts)
		}
		n++
		return n < 2*directionSample
	}); err != nil {
		return nil
	}
	neg := 0
	for _, d := range diffs {
		if d < 0 {
			neg++
		}
	}
	if len(diffs) < 20 || neg*10 <= len(diffs)*9 {
		return nil
	}
	slices.Sort(diffs)
	return fmt.Errorf("%w: %d of the %d packets joined at the start of both captures appear in --receiver-pcap %s before --sender-pcap %s (median %v), so every delay would come out negative. "+
		"Give the upstream tap's capture as --sender-pcap and the downstream one as --receiver-pcap; if they are the right way round, the taps' clocks differ by more than the delay (check PTP at both), "+
		"and --allow-reversed replays them anyway",
		ErrSwapped, neg, len(diffs), receiverPcap, senderPcap, time.Duration(diffs[len(diffs)/2]))
}
