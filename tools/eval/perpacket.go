package eval

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/tools/gen"
	"github.com/lds-net/lds/tools/join"
)

// PacketDelay is the fate of one sender-tap packet: the per-packet truth
// the baselines (RLI, exact join) are computed from.
type PacketDelay struct {
	Key    capture.FlowKey
	SendNS int64 // sender-tap timestamp, Unix ns
	RecvNS int64 // receiver-tap timestamp, Unix ns; meaningless when Lost
	Lost   bool
}

// Delay is the packet's one-way delay in ns (receive - send).
func (p *PacketDelay) Delay() int64 { return p.RecvNS - p.SendNS }

// Packets is a push iterator over per-packet truth in SEND order (the order
// of the sender tap), lost packets included. The *PacketDelay passed to
// yield is reused: valid only during the call. Iteration stops early when
// yield returns false (then the error is nil); the error says why the
// source could not be read to its end.
type Packets func(yield func(*PacketDelay) bool) error

// PerPacketFromGen runs the generator on sc and streams its per-packet
// truth (gen.Outputs.OnPacket, called in send order) while it writes the
// captures and truth named in out (Generate requires both capture paths).
// An OnPacket already in out is still called. Each call of the returned
// iterator runs the generator again.
func PerPacketFromGen(ctx context.Context, sc gen.Scenario, out gen.Outputs, log *slog.Logger) Packets {
	return func(yield func(*PacketDelay) bool) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		prev := out.OnPacket
		stopped := false
		var pd PacketDelay
		o := out
		o.OnPacket = func(p *gen.PacketTruth) {
			if prev != nil {
				prev(p)
			}
			if stopped {
				return
			}
			pd = PacketDelay{Key: *p.Key, SendNS: p.SendNS, RecvNS: p.RecvNS, Lost: p.Lost}
			if !yield(&pd) {
				// Generate checks its context every 64k packets; until then
				// the callback just returns.
				stopped = true
				cancel()
			}
		}
		_, err := gen.Generate(ctx, sc, o, log)
		if stopped {
			return nil
		}
		if err != nil {
			return fmt.Errorf("per-packet truth from the generator: %w", err)
		}
		return nil
	}
}

// JoinCounts is the bookkeeping of a per-packet capture join.
type JoinCounts struct {
	Sent       uint64 // sender-tap packets yielded (identity seen once)
	Received   uint64 // of those, found at the receiver tap
	Lost       uint64 // Sent - Received
	Unmatched  uint64 // receiver-tap packets with no (unique) sender-tap twin, or seen twice
	Duplicates uint64 // extra sender-tap occurrences of an identity: all its copies are left out
}

// PerPacketFromCaptures joins two captures per packet by identity (flow key
// hash, packet hash; cfg.Identity must be the one both daemons use) and
// streams each sender-tap packet with its receive time or its loss, in the
// sender capture's order. Identities seen twice at the sender are left out
// (not joinable), as tools/join does, so the per-packet stream
// aggregates to join.Files' truth.
//
// It reads the sender capture twice and the receiver capture once
// (join.MatchFiles, then the sender again for its order), and holds one
// map entry per sender-tap packet. counts (may be nil) is
// filled when the iterator runs.
func PerPacketFromCaptures(senderPcap, receiverPcap string, cfg capture.Config, counts *JoinCounts) (Packets, error) {
	if _, err := capture.NewParser(cfg); err != nil {
		return nil, fmt.Errorf("per-packet join: capture configuration: %w", err)
	}
	if counts == nil {
		counts = &JoinCounts{}
	}
	return func(yield func(*PacketDelay) bool) error {
		*counts = JoinCounts{}
		p, err := capture.NewParser(cfg)
		if err != nil {
			return err
		}
		m, err := join.MatchFiles(senderPcap, receiverPcap, p)
		if err != nil {
			return err
		}
		counts.Unmatched, counts.Duplicates = m.Unmatched, m.Duplicates
		var pd PacketDelay
		err = capture.EachPacket(senderPcap, p, func(pk *capture.Packet) bool {
			recv, got, joinable := m.Lookup(pk.Key, pk.PktHash)
			if !joinable {
				return true
			}
			counts.Sent++
			if got {
				counts.Received++
			} else {
				counts.Lost++
			}
			pd = PacketDelay{Key: pk.Key,
				SendNS: pk.TS, RecvNS: recv, Lost: !got}
			return yield(&pd)
		})
		if err != nil {
			return fmt.Errorf("sender capture %s (second pass): %w", senderPcap, err)
		}
		return nil
	}, nil
}
