package export

import (
	"encoding/binary"
	"hash/fnv"
	"math"

	"github.com/lds-net/lds/internal/results"
)

// IPFIX (RFC 7011) encoding of flow records. Element ids of the IANA
// "IPFIX Information Elements" registry; docs/operations.md lists every
// element with its type and where its id was checked.
const (
	ipfixVersion = 10
	setTemplate  = 2
	headerLen    = 16 // version, length, export time, sequence, domain
	setHeaderLen = 4
	varLen       = 65535 // a variable-length field specifier (RFC 7011 §7)

	iePacketDeltaCount        = 2
	ieProtocolIdentifier      = 4
	ieSourceTransportPort     = 7
	ieSourceIPv4Address       = 8
	ieDestinationTransport    = 11
	ieDestinationIPv4Address  = 12
	ieSourceIPv6Address       = 27
	ieDestinationIPv6Address  = 28
	ieFlowStartMilliseconds   = 152
	ieFlowEndMilliseconds     = 153
	iePathDelayMeanDeltaMicro = 530 // RFC 9951, unsigned32, deltaCounter, microseconds
	iePathDelayMinDeltaMicro  = 531 // RFC 9951 (exported only where a minimum exists; none today)
	iePathDelayMaxDeltaMicro  = 532 // RFC 9951 (likewise)
	iePathDelaySumDeltaMicro  = 533 // RFC 9951, unsigned64, deltaCounter, microseconds
)

// Enterprise-specific elements of lds (under export.ipfix.enterprise_number).
const (
	EntIntervalID      = 1  // unsigned64: interval id (results "interval")
	EntDelayMeanNS     = 2  // float64, ns: delay_ns (NaN = none)
	EntDelayStddevNS   = 3  // float64, ns: stddev_ns
	EntDelayCI95NS     = 4  // float64, ns: ci95_ns
	EntLostPackets     = 5  // float64: loss (docs/decode.md, "Loss and packets")
	EntPackets         = 6  // float64: packets as estimated (packetDeltaCount is it rounded)
	EntSamples         = 7  // float64: effective sample size of the delay estimate
	EntDelayP50NS      = 8  // float64, ns: p50_ns (NaN = none)
	EntDelayP90NS      = 9  // float64, ns: p90_ns
	EntDelayP99NS      = 10 // float64, ns: p99_ns
	EntDelaySamples    = 11 // unsigned32: matched samples behind the quantiles
	EntFlags           = 12 // unsigned16: 1 partial, 2 clock_unsynced, 4 spike, 8 loss_spike, 16/32 delay_from sketch/samples
	EntStatus          = 13 // string: results "status" ("" = none)
	EntEstimator       = 14 // string: results "estimator"
	EntSender          = 15 // string: sender id
	EntLossPoint       = 16 // float64: loss_point (NaN = none)
	EntClockErrorBound = 17 // float64, ns: clock_error_bound_ns (NaN = none)
	EntLossBound       = 18 // float64: loss_bound, the count-min bound (NaN = none)
)

// Flag bits of EntFlags.
const (
	FlagPartial   = 1
	FlagUnsynced  = 2
	FlagSpike     = 4
	FlagLossSpike = 8
	// The mean delay's sources (delay_from): sketch 16, samples 32, both
	// 16|32; neither where there is no delay.
	FlagDelayFromSketch  = 16
	FlagDelayFromSamples = 32
)

// Template ids: address family x whether the RFC 9951 elements are present
// (a record without a mean delay, or with a negative one, which an unsigned
// element cannot carry, uses the template without them).
const (
	tplV4Delay   = 256
	tplV4NoDelay = 257
	tplV6Delay   = 258
	tplV6NoDelay = 259
)

type field struct {
	id     uint16
	length uint16
	ent    bool
}

func templateFields(v6, delay bool) []field {
	f := make([]field, 0, 32)
	if v6 {
		f = append(f, field{ieSourceIPv6Address, 16, false}, field{ieDestinationIPv6Address, 16, false})
	} else {
		f = append(f, field{ieSourceIPv4Address, 4, false}, field{ieDestinationIPv4Address, 4, false})
	}
	f = append(f, field{ieProtocolIdentifier, 1, false}, field{ieSourceTransportPort, 2, false}, field{ieDestinationTransport, 2, false},
		field{ieFlowStartMilliseconds, 8, false}, field{ieFlowEndMilliseconds, 8, false}, field{iePacketDeltaCount, 8, false})
	if delay {
		f = append(f, field{iePathDelayMeanDeltaMicro, 4, false}, field{iePathDelaySumDeltaMicro, 8, false})
	}
	f = append(f, field{EntIntervalID, 8, true}, field{EntDelayMeanNS, 8, true}, field{EntDelayStddevNS, 8, true},
		field{EntDelayCI95NS, 8, true}, field{EntLostPackets, 8, true}, field{EntPackets, 8, true}, field{EntSamples, 8, true},
		field{EntDelayP50NS, 8, true}, field{EntDelayP90NS, 8, true}, field{EntDelayP99NS, 8, true},
		field{EntDelaySamples, 4, true}, field{EntFlags, 2, true}, field{EntLossPoint, 8, true}, field{EntClockErrorBound, 8, true},
		field{EntLossBound, 8, true},
		field{EntStatus, varLen, true}, field{EntEstimator, varLen, true}, field{EntSender, varLen, true})
	return f
}

// appendTemplateSet appends one Template Set holding the four templates.
func appendTemplateSet(b []byte, pen uint32) []byte {
	start := len(b)
	b = binary.BigEndian.AppendUint16(b, setTemplate)
	b = binary.BigEndian.AppendUint16(b, 0) // length, below
	for _, t := range []struct {
		id        uint16
		v6, delay bool
	}{{tplV4Delay, false, true}, {tplV4NoDelay, false, false}, {tplV6Delay, true, true}, {tplV6NoDelay, true, false}} {
		fs := templateFields(t.v6, t.delay)
		b = binary.BigEndian.AppendUint16(b, t.id)
		b = binary.BigEndian.AppendUint16(b, uint16(len(fs)))
		for _, f := range fs {
			if f.ent {
				b = binary.BigEndian.AppendUint16(b, f.id|0x8000)
				b = binary.BigEndian.AppendUint16(b, f.length)
				b = binary.BigEndian.AppendUint32(b, pen)
			} else {
				b = binary.BigEndian.AppendUint16(b, f.id)
				b = binary.BigEndian.AppendUint16(b, f.length)
			}
		}
	}
	binary.BigEndian.PutUint16(b[start+2:], uint16(len(b)-start))
	return b
}

// Quantiles of a record's delay distribution from matched samples, where the
// record carries them (NaN and 0 where it does not).
func quantiles(r *results.FlowRecord) (p50, p90, p99 float64, n uint32) {
	return ptr(r.P50NS), ptr(r.P90NS), ptr(r.P99NS), uint32(max(0, r.DelaySamples))
}

// appendRecord appends r's data record and returns its template id. t is
// the interval length in ns (flowEndMilliseconds = start + t).
func appendRecord(b []byte, r *results.FlowRecord, t int64) ([]byte, uint16) {
	k := &r.Key
	v6 := k.V6
	packets := uint64(0)
	if r.Packets > 0 {
		packets = uint64(math.Round(r.Packets))
	}
	var meanUS uint32
	var sumUS uint64
	delay := false
	if r.DelayNS != nil && *r.DelayNS >= 0 {
		us := *r.DelayNS / 1e3
		if us <= math.MaxUint32 {
			meanUS, sumUS, delay = uint32(math.Round(us)), uint64(math.Round(us*float64(packets))), true
		}
	}
	tpl := uint16(tplV4NoDelay)
	switch {
	case v6 && delay:
		tpl = tplV6Delay
	case v6:
		tpl = tplV6NoDelay
	case delay:
		tpl = tplV4Delay
	}
	n := 4
	if v6 {
		n = 16
	}
	b = append(b, k.Src[:n]...)
	b = append(b, k.Dst[:n]...)
	b = append(b, k.Proto)
	b = binary.BigEndian.AppendUint16(b, k.SPort)
	b = binary.BigEndian.AppendUint16(b, k.DPort)
	b = binary.BigEndian.AppendUint64(b, uint64(r.StartNS/1e6))
	b = binary.BigEndian.AppendUint64(b, uint64((r.StartNS+t)/1e6))
	b = binary.BigEndian.AppendUint64(b, packets)
	if delay {
		b = binary.BigEndian.AppendUint32(b, meanUS)
		b = binary.BigEndian.AppendUint64(b, sumUS)
	}
	p50, p90, p99, nq := quantiles(r)
	b = binary.BigEndian.AppendUint64(b, uint64(r.Interval))
	for _, v := range [...]float64{ptr(r.DelayNS), ptr(r.StddevNS), ptr(r.CI95NS), ptr(r.Loss), r.Packets, r.Samples, p50, p90, p99} {
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(v))
	}
	b = binary.BigEndian.AppendUint32(b, nq)
	var flags uint16
	if r.Partial {
		flags |= FlagPartial
	}
	if r.Unsynced {
		flags |= FlagUnsynced
	}
	if r.Spike {
		flags |= FlagSpike
	}
	if r.LossSpike {
		flags |= FlagLossSpike
	}
	switch r.DelayFrom {
	case results.DelayFromSketch:
		flags |= FlagDelayFromSketch
	case results.DelayFromSamples:
		flags |= FlagDelayFromSamples
	case results.DelayFromBoth:
		flags |= FlagDelayFromSketch | FlagDelayFromSamples
	}
	b = binary.BigEndian.AppendUint16(b, flags)
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(ptr(r.LossPoint)))
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(ptr(r.ErrorNS)))
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(ptr(r.LossBound)))
	for _, s := range [...]string{string(r.Status), r.Estimator, r.Sender} {
		b = appendVarString(b, s)
	}
	return b, tpl
}

func ptr(v *float64) float64 {
	if v == nil {
		return math.NaN()
	}
	return *v
}

// appendVarString writes a variable-length field (RFC 7011 §7): one length
// octet below 255, else 255 and a 16-bit length. Strings are cut at 1024
// bytes (ours are status words and sender ids).
func appendVarString(b []byte, s string) []byte {
	if len(s) > 1024 {
		s = s[:1024]
	}
	if len(s) < 255 {
		b = append(b, byte(len(s)))
	} else {
		b = append(b, 255)
		b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	}
	return append(b, s...)
}

// DomainID is the observation domain of a sender: the configured one, else
// the FNV-1a 32-bit hash of its id (0, which RFC 7011 reserves for "no
// specific domain", becomes 1).
func DomainID(sender string, configured map[string]uint32) uint32 {
	if d, ok := configured[sender]; ok {
		return d
	}
	h := fnv.New32a()
	h.Write([]byte(sender))
	if v := h.Sum32(); v != 0 {
		return v
	}
	return 1
}

// message builds one IPFIX message of at most max bytes.
type message struct {
	buf     []byte
	max     int
	setAt   int // offset of the open data set's header, -1 = none
	setID   uint16
	records int
}

func (m *message) reset(domain uint32, exportTime uint32) {
	m.buf = m.buf[:0]
	m.buf = binary.BigEndian.AppendUint16(m.buf, ipfixVersion)
	m.buf = binary.BigEndian.AppendUint16(m.buf, 0)
	m.buf = binary.BigEndian.AppendUint32(m.buf, exportTime)
	m.buf = binary.BigEndian.AppendUint32(m.buf, 0) // sequence, at finish
	m.buf = binary.BigEndian.AppendUint32(m.buf, domain)
	m.setAt, m.setID, m.records = -1, 0, 0
}

func (m *message) addTemplates(pen uint32) {
	m.closeSet()
	m.buf = appendTemplateSet(m.buf, pen)
}

// add appends one encoded record of template tpl; false if it does not fit.
func (m *message) add(tpl uint16, rec []byte) bool {
	need := len(rec)
	if m.setAt < 0 || m.setID != tpl {
		need += setHeaderLen
	}
	if len(m.buf)+need > m.max {
		return false
	}
	if m.setAt < 0 || m.setID != tpl {
		m.closeSet()
		m.setAt, m.setID = len(m.buf), tpl
		m.buf = binary.BigEndian.AppendUint16(m.buf, tpl)
		m.buf = binary.BigEndian.AppendUint16(m.buf, 0)
	}
	m.buf = append(m.buf, rec...)
	m.records++
	return true
}

func (m *message) closeSet() {
	if m.setAt >= 0 {
		binary.BigEndian.PutUint16(m.buf[m.setAt+2:], uint16(len(m.buf)-m.setAt))
		m.setAt = -1
	}
}

// finish closes the message with its sequence number (data records sent
// before it in this domain) and returns its bytes.
func (m *message) finish(seq uint32) []byte {
	m.closeSet()
	binary.BigEndian.PutUint16(m.buf[2:], uint16(len(m.buf)))
	binary.BigEndian.PutUint32(m.buf[8:], seq)
	return m.buf
}

// EncodeMessages encodes records as one exporting process would over a new
// transport session: templates in the first message, messages of at most
// maxLen bytes, sequence numbers from 0 (tests and tools; the exporter itself
// streams them).
func EncodeMessages(recs []results.FlowRecord, domain, pen uint32, maxLen int, intervalNS int64) [][]byte {
	var out [][]byte
	m := message{max: maxLen}
	var seq uint32
	m.reset(domain, 0)
	m.addTemplates(pen)
	var rec []byte
	for i := range recs {
		var tpl uint16
		rec, tpl = appendRecord(rec[:0], &recs[i], intervalNS)
		if !m.add(tpl, rec) {
			n := m.records
			out = append(out, append([]byte(nil), m.finish(seq)...))
			seq += uint32(n)
			m.reset(domain, 0)
			m.add(tpl, rec)
		}
	}
	return append(out, append([]byte(nil), m.finish(seq)...))
}
