package export

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
)

// Decoder reads IPFIX messages (RFC 7011) as a collector would: template
// sets teach it templates per observation domain, data sets are decoded
// with them. The tests use it as an in-repo collector (IPFIX over TCP,
// which the Debian collectors do not listen on) and to check the encoder.
type Decoder struct {
	templates map[tplKey][]field
	pens      map[tplKey][]uint32
}

type tplKey struct {
	domain uint32
	id     uint16
}

// FieldKey names an information element: its enterprise number (0 = IANA)
// and its id (without the enterprise bit).
type FieldKey struct {
	PEN uint32
	ID  uint16
}

// Message is one decoded IPFIX message.
type Message struct {
	ExportTime uint32
	Sequence   uint32
	Domain     uint32
	Templates  int // template records it carried
	Records    []map[FieldKey][]byte
	Template   []uint16 // each record's template id
}

// NewDecoder returns a decoder that knows no template yet.
func NewDecoder() *Decoder {
	return &Decoder{templates: map[tplKey][]field{}, pens: map[tplKey][]uint32{}}
}

// MessageLength returns the length of the message b starts with (TCP
// framing), or an error if b does not start an IPFIX message.
func MessageLength(hdr []byte) (int, error) {
	if len(hdr) < headerLen {
		return 0, errors.New("ipfix: short header")
	}
	if v := binary.BigEndian.Uint16(hdr); v != ipfixVersion {
		return 0, fmt.Errorf("ipfix: version %d, want 10", v)
	}
	n := int(binary.BigEndian.Uint16(hdr[2:]))
	if n < headerLen {
		return 0, fmt.Errorf("ipfix: message length %d below the header's", n)
	}
	return n, nil
}

// Decode decodes one whole message.
func (d *Decoder) Decode(b []byte) (*Message, error) {
	n, err := MessageLength(b)
	if err != nil {
		return nil, err
	}
	if n != len(b) {
		return nil, fmt.Errorf("ipfix: message length %d, have %d bytes", n, len(b))
	}
	m := &Message{ExportTime: binary.BigEndian.Uint32(b[4:]), Sequence: binary.BigEndian.Uint32(b[8:]),
		Domain: binary.BigEndian.Uint32(b[12:])}
	for p := headerLen; p < n; {
		if n-p < setHeaderLen {
			return nil, errors.New("ipfix: truncated set header")
		}
		id, l := binary.BigEndian.Uint16(b[p:]), int(binary.BigEndian.Uint16(b[p+2:]))
		if l < setHeaderLen || p+l > n {
			return nil, fmt.Errorf("ipfix: set length %d out of bounds", l)
		}
		body := b[p+setHeaderLen : p+l]
		switch {
		case id == setTemplate:
			k, err := d.templateSet(m.Domain, body)
			if err != nil {
				return nil, err
			}
			m.Templates += k
		case id >= 256:
			if err := d.dataSet(m, id, body); err != nil {
				return nil, err
			}
		}
		p += l
	}
	return m, nil
}

func (d *Decoder) templateSet(domain uint32, b []byte) (int, error) {
	k := 0
	for len(b) >= 4 {
		id, count := binary.BigEndian.Uint16(b), int(binary.BigEndian.Uint16(b[2:]))
		b = b[4:]
		if id < 256 {
			return k, fmt.Errorf("ipfix: template id %d below 256", id)
		}
		fs := make([]field, 0, count)
		pens := make([]uint32, 0, count)
		for range count {
			if len(b) < 4 {
				return k, errors.New("ipfix: truncated field specifier")
			}
			f := field{id: binary.BigEndian.Uint16(b) & 0x7fff, length: binary.BigEndian.Uint16(b[2:]), ent: b[0]&0x80 != 0}
			b = b[4:]
			var pen uint32
			if f.ent {
				if len(b) < 4 {
					return k, errors.New("ipfix: truncated enterprise number")
				}
				pen = binary.BigEndian.Uint32(b)
				b = b[4:]
			}
			fs = append(fs, f)
			pens = append(pens, pen)
		}
		d.templates[tplKey{domain, id}] = fs
		d.pens[tplKey{domain, id}] = pens
		k++
	}
	return k, nil
}

func (d *Decoder) dataSet(m *Message, id uint16, b []byte) error {
	fs, ok := d.templates[tplKey{m.Domain, id}]
	if !ok {
		return fmt.Errorf("ipfix: data set of unknown template %d in domain %d", id, m.Domain)
	}
	pens := d.pens[tplKey{m.Domain, id}]
	minLen := 0
	for _, f := range fs {
		if f.length == varLen {
			minLen++
		} else {
			minLen += int(f.length)
		}
	}
	if minLen == 0 {
		return nil // fields of length 0 only: no record can advance
	}
	for len(b) > 0 && len(b) >= minLen {
		rec := make(map[FieldKey][]byte, len(fs))
		for i, f := range fs {
			l := int(f.length)
			if f.length == varLen {
				if len(b) < 1 {
					return errors.New("ipfix: truncated variable-length field")
				}
				l, b = int(b[0]), b[1:]
				if l == 255 {
					if len(b) < 2 {
						return errors.New("ipfix: truncated variable-length field")
					}
					l, b = int(binary.BigEndian.Uint16(b)), b[2:]
				}
			}
			if len(b) < l {
				return errors.New("ipfix: truncated data record")
			}
			rec[FieldKey{pens[i], f.id}] = b[:l:l]
			b = b[l:]
		}
		m.Records = append(m.Records, rec)
		m.Template = append(m.Template, id)
	}
	return nil // what is left is padding (RFC 7011 §3.3.1)
}

// Uint reads an unsigned field of 1 to 8 octets (reduced-size encoding
// included); ok is false if it is absent or longer.
func Uint(rec map[FieldKey][]byte, k FieldKey) (uint64, bool) {
	b, ok := rec[k]
	if !ok || len(b) == 0 || len(b) > 8 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v, true
}

// Float reads a float64 field (NaN if absent).
func Float(rec map[FieldKey][]byte, k FieldKey) float64 {
	b, ok := rec[k]
	if !ok || len(b) != 8 {
		return math.NaN()
	}
	return math.Float64frombits(binary.BigEndian.Uint64(b))
}

// Addr reads an IPv4 or IPv6 address field.
func Addr(rec map[FieldKey][]byte, k FieldKey) (netip.Addr, bool) {
	return netip.AddrFromSlice(rec[k])
}

// IANA returns the key of an IANA element.
func IANA(id uint16) FieldKey { return FieldKey{0, id} }

// Element ids of the IANA elements lds exports (docs/operations.md).
const (
	IEPacketDeltaCount            = iePacketDeltaCount
	IEProtocolIdentifier          = ieProtocolIdentifier
	IESourceTransportPort         = ieSourceTransportPort
	IESourceIPv4Address           = ieSourceIPv4Address
	IEDestinationTransportPort    = ieDestinationTransport
	IEDestinationIPv4Address      = ieDestinationIPv4Address
	IESourceIPv6Address           = ieSourceIPv6Address
	IEDestinationIPv6Address      = ieDestinationIPv6Address
	IEFlowStartMilliseconds       = ieFlowStartMilliseconds
	IEFlowEndMilliseconds         = ieFlowEndMilliseconds
	IEPathDelayMeanDeltaMicrosecs = iePathDelayMeanDeltaMicro
	IEPathDelayMinDeltaMicrosecs  = iePathDelayMinDeltaMicro
	IEPathDelayMaxDeltaMicrosecs  = iePathDelayMaxDeltaMicro
	IEPathDelaySumDeltaMicrosecs  = iePathDelaySumDeltaMicro
)
