package results

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/lds-net/lds/internal/capture"
)

// LostPacket is one packet of an interval's lost-packet list (docs/results.md,
// "Lost packets"): a packet tap A placed in the interval and tap B never
// saw, or, with Extra, one tap B placed there and tap A never saw
// (duplicated, misdirected or injected traffic).
type LostPacket struct {
	Interval int64
	Sender   string
	Key      capture.FlowKey
	// SentNS is tap A's capture timestamp of the packet (Unix ns), from
	// the sender's answer (docs/protocol.md, "Lost packets"); nil for an
	// extra packet.
	SentNS *int64
	IDKind capture.IDKind // what ID is: TCP sequence number, IPv4 identification, none
	ID     uint32
	Extra  bool
	Hash   uint64 // the packet hash (not serialized)
}

type lostJSON struct {
	Interval int64   `json:"interval"`
	Sender   string  `json:"sender"`
	Src      string  `json:"src"`
	Dst      string  `json:"dst"`
	SPort    uint16  `json:"sport"`
	DPort    uint16  `json:"dport"`
	Proto    uint8   `json:"proto"`
	SentNS   *int64  `json:"sent_ns"`
	ID       *uint32 `json:"id"`
	IDKind   string  `json:"id_kind,omitempty"`
	Kind     string  `json:"kind,omitempty"`
}

// Lost-list kinds and identifier kinds as they appear in JSON.
const (
	LostKindExtra = "extra"
	IDKindTCPSeq  = "tcp_seq"
	IDKindIPv4    = "ipv4_id"
)

// MarshalLostLine appends the JSON line of p (with its newline) to b.
func MarshalLostLine(b []byte, p *LostPacket) []byte {
	b = append(b, `{"interval":`...)
	b = strconv.AppendInt(b, p.Interval, 10)
	b = append(b, `,"sender":`...)
	b = appendString(b, p.Sender)
	b = append(b, `,"src":"`...)
	b = p.Key.AppendSrc(b)
	b = append(b, `","dst":"`...)
	b = p.Key.AppendDst(b)
	b = append(b, `","sport":`...)
	b = strconv.AppendUint(b, uint64(p.Key.SPort), 10)
	b = append(b, `,"dport":`...)
	b = strconv.AppendUint(b, uint64(p.Key.DPort), 10)
	b = append(b, `,"proto":`...)
	b = strconv.AppendUint(b, uint64(p.Key.Proto), 10)
	b = append(b, `,"sent_ns":`...)
	if p.SentNS != nil {
		b = strconv.AppendInt(b, *p.SentNS, 10)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"id":`...)
	switch p.IDKind {
	case capture.IDTCPSeq:
		b = strconv.AppendUint(b, uint64(p.ID), 10)
		b = append(b, `,"id_kind":"`+IDKindTCPSeq+`"`...)
	case capture.IDIPv4:
		b = strconv.AppendUint(b, uint64(p.ID), 10)
		b = append(b, `,"id_kind":"`+IDKindIPv4+`"`...)
	default:
		b = append(b, "null"...)
	}
	if p.Extra {
		b = append(b, `,"kind":"`+LostKindExtra+`"`...)
	}
	return append(b, "}\n"...)
}

// MarshalJSON writes p's line without the newline.
func (p LostPacket) MarshalJSON() ([]byte, error) {
	b := MarshalLostLine(make([]byte, 0, 192), &p)
	return b[:len(b)-1], nil
}

// UnmarshalJSON reads one line of a lost-packet list.
func (p *LostPacket) UnmarshalJSON(b []byte) error {
	var j lostJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	if j.Src == "" || j.Dst == "" {
		return errors.New("no src/dst: not a lost-packet record")
	}
	k, err := capture.ParseFlowKey(j.Src, j.Dst, j.Proto, j.SPort, j.DPort)
	if err != nil {
		return err
	}
	*p = LostPacket{Interval: j.Interval, Sender: j.Sender, Key: k, SentNS: j.SentNS}
	switch j.Kind {
	case "":
	case LostKindExtra:
		p.Extra = true
	default:
		return fmt.Errorf("lost-packet record: kind %q is not %q or absent", j.Kind, LostKindExtra)
	}
	if j.ID != nil {
		p.ID = *j.ID
		switch j.IDKind {
		case IDKindTCPSeq:
			p.IDKind = capture.IDTCPSeq
		case IDKindIPv4:
			p.IDKind = capture.IDIPv4
		default:
			return fmt.Errorf("lost-packet record: id_kind %q is not %q or %q", j.IDKind, IDKindTCPSeq, IDKindIPv4)
		}
	}
	return nil
}

// LostSummary is what an interval says about its lost-packet list.
type LostSummary struct {
	// Complete: the two ends' tables decoded completely, every lost and
	// extra packet is listed and the flows' loss is exact. False where the
	// list overflowed the table (more differences than lost.capacity
	// holds), where packets may sit in the wrong interval, where either
	// capture dropped packets, or where the interval is partial.
	Complete bool `json:"complete"`
	Lost     int  `json:"lost"`  // lost packets listed
	Extra    int  `json:"extra"` // extra packets listed
	// Reason says why the list is incomplete: "overflow",
	// "delay_beyond_window", "capture_drops", "partial", "late",
	// "unresolved", "no_answer", "answer_gone", "answer_refused",
	// "unanswered" (docs/results.md).
	Reason string `json:"reason,omitempty"`
	// RepairedCells counts the flow sketch's cells the list repaired
	// (every listed packet in them had its exact capture time and was
	// taken out: docs/decode.md, "Repair from the list of lost packets").
	RepairedCells int `json:"repaired_cells,omitempty"`
}

// markLostIncomplete withdraws the exactness of an interval's loss: the
// list stays (each entry is a packet one end saw and the other did not)
// but says why it is no complete list of losses.
func (iv *Interval) markLostIncomplete(reason string) {
	if iv.LostList == nil {
		return
	}
	if iv.LostList.Complete {
		iv.LostList.Complete, iv.LostList.Reason = false, reason
	}
	for i := range iv.Flows {
		iv.Flows[i].LossExact = false
	}
}

// MarkLostIncomplete is markLostIncomplete for the receiver's checks.
func (iv *Interval) MarkLostIncomplete(reason string) { iv.markLostIncomplete(reason) }
