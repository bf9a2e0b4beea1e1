package export

import (
	"context"
	"encoding/binary"
	"net/netip"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/results"
	exportv1 "github.com/lds-net/lds/proto/lds/export/v1"
)

// publishLost hands the interval's lost-packet list to the Kafka exporter
// when export.kafka.lost_topic is set (IPFIX carries flow records only).
// Like flow records, what does not fit the queue is dropped and counted.
func (s *Set) publishLost(iv *results.Interval) {
	if len(iv.Lost) == 0 {
		return
	}
	complete := iv.LostList != nil && iv.LostList.Complete
	for _, k := range s.sinks {
		ks, ok := k.(*kafkaSink)
		if !ok || ks.cfg.LostTopic == "" {
			continue
		}
		lost := iv.Lost
		n := ks.q.offerN(len(lost), s.opt.Blocking, func(lo, hi int) batch {
			return batch{sender: iv.Sender, lost: lost[lo:hi:hi], lostComplete: complete}
		})
		if n < len(lost) {
			s.m.ExportDropped(k.kind(), k.name(), DropQueueFull, len(lost)-n)
		}
	}
}

// produceLost produces a batch's lost packets to the lost topic.
func (s *kafkaSink) produceLost(ctx context.Context, b batch) {
	for i := range b.lost {
		p := &b.lost[i]
		val, err := proto.Marshal(LostToProto(p, b.lostComplete))
		if err != nil {
			s.m.ExportDropped(KindKafka, s.brokers, DropEncode, 1)
			continue
		}
		if ctx.Err() != nil {
			s.m.ExportDropped(KindKafka, s.brokers, DropStop, 1)
			continue
		}
		s.pending.Add(1)
		s.cl.Produce(ctx, &kgo.Record{Topic: s.cfg.LostTopic, Key: keyBytes(p.Key), Value: val}, s.promise)
	}
}

// LostToProto converts a lost-packet record to its Kafka message.
func LostToProto(p *results.LostPacket, complete bool) *exportv1.LostPacket {
	m := &exportv1.LostPacket{Interval: p.Interval, Sender: p.Sender, Src: p.Key.SrcAddr().String(), Dst: p.Key.DstAddr().String(),
		Sport: uint32(p.Key.SPort), Dport: uint32(p.Key.DPort), Proto: uint32(p.Key.Proto), SentNs: p.SentNS, ListComplete: complete}
	switch p.IDKind {
	case capture.IDTCPSeq:
		m.Id, m.IdKind = &p.ID, results.IDKindTCPSeq
	case capture.IDIPv4:
		m.Id, m.IdKind = &p.ID, results.IDKindIPv4
	}
	if p.Extra {
		m.Kind = results.LostKindExtra
	}
	return m
}

// keyBytes is FlowKey's 37-byte message key for a flow key.
func keyBytes(fk capture.FlowKey) []byte {
	k := make([]byte, 0, 37)
	for _, a := range [...]netip.Addr{fk.SrcAddr(), fk.DstAddr()} {
		b := a.As16()
		k = append(k, b[:]...)
	}
	k = append(k, fk.Proto)
	k = binary.BigEndian.AppendUint16(k, fk.SPort)
	return binary.BigEndian.AppendUint16(k, fk.DPort)
}
