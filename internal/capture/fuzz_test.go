package capture

import (
	"testing"

	"github.com/gopacket/gopacket/layers"
)

var fuzzLinks = []layers.LinkType{layers.LinkTypeEthernet, layers.LinkTypeRaw, layers.LinkTypeLinuxSLL,
	layers.LinkTypeLinuxSLL2, layers.LinkTypeNull, layers.LinkTypeLoop}

// FuzzParse: no input panics the parser, and a parsed frame's identity does
// not depend on bytes past what it consumed being re-parsed (determinism).
func FuzzParse(f *testing.F) {
	for _, b := range basePackets() {
		f.Add(b.frame(f), uint8(0), uint16(0))
		f.Add(b.ipPacket(f), uint8(1), uint16(0))
	}
	first, second := fragPair(basePackets()["v4-tcp"])
	f.Add(first.frame(f), uint8(0), uint16(0))
	f.Add(second.frame(f), uint8(0), uint16(3))
	f.Add(v6Ext(basePackets()["v6-tcp"], 1).frame(f), uint8(0), uint16(0))
	f.Add(v6Frag(basePackets()["v6-udp"], 0, true, 5).frame(f), uint8(0), uint16(0))
	p := testParser(f, func(c *Config) { c.Identity.PayloadBytes = 64 })
	f.Fuzz(func(t *testing.T, data []byte, link uint8, extra uint16) {
		lt := fuzzLinks[int(link)%len(fuzzLinks)]
		var a, b Packet
		okA := p.Parse(data, len(data)+int(extra), 1, lt, &a)
		okB := p.Parse(data, len(data)+int(extra), 1, lt, &b)
		if okA != okB || a != b {
			t.Fatalf("parse not deterministic: %v %+v vs %v %+v", okA, a, okB, b)
		}
	})
}

func FuzzFlowKeyFromBinary(f *testing.F) {
	k, _ := FlowKeyFromAddrs(mustAddr("10.0.0.1"), mustAddr("10.0.0.2"), 6, 1, 2)
	f.Add(k.AppendBinary(nil))
	k6, _ := FlowKeyFromAddrs(mustAddr("2001:db8::1"), mustAddr("2001:db8::2"), 17, 1, 2)
	f.Add(k6.AppendBinary(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := FlowKeyFromBinary(b)
		if err != nil {
			return
		}
		if got := k.AppendBinary(nil); string(got) != string(b) {
			t.Fatalf("round trip %x -> %x", b, got)
		}
	})
}
