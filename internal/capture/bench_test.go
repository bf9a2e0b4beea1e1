package capture

import (
	"errors"
	"io"
	"path/filepath"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/zeebo/xxh3"
)

func benchFrames(b *testing.B) map[string][]byte {
	bp := basePackets()
	return map[string][]byte{
		"v4-tcp":      bp["v4-tcp"].frame(b),
		"v4-tcp-vlan": withVLAN(bp["v4-tcp"]).frame(b),
		"v6-tcp":      bp["v6-tcp"].frame(b),
		"v4-udp-64B":  bp["v4-udp-small"].frame(b),
	}
}

// BenchmarkParse: parse + flow key + both hashes, the per-packet hot path.
func BenchmarkParse(b *testing.B) {
	for name, f := range benchFrames(b) {
		b.Run(name, func(b *testing.B) {
			p := testParser(b, nil)
			var out Packet
			b.ReportAllocs()
			for b.Loop() {
				if !p.Parse(f, len(f), 1, layers.LinkTypeEthernet, &out) {
					b.Fatal("skipped")
				}
			}
		})
	}
}

// BenchmarkDecodingLayerParser is the alternative measured against
// BenchmarkParse: gopacket's DecodingLayerParser decoding the same layers,
// plus copying the invariant fields out and hashing them (flow key + packet
// hash), so the comparison is like for like.
func BenchmarkDecodingLayerParser(b *testing.B) {
	for name, f := range benchFrames(b) {
		b.Run(name, func(b *testing.B) {
			var (
				eth     layers.Ethernet
				dot1q   layers.Dot1Q
				ip4     layers.IPv4
				ip6     layers.IPv6
				tcp     layers.TCP
				udp     layers.UDP
				payload gopacket.Payload
			)
			dlp := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &dot1q, &ip4, &ip6, &tcp, &udp, &payload)
			dlp.IgnoreUnsupported = true
			decoded := make([]gopacket.LayerType, 0, 8)
			var buf [128]byte
			b.ReportAllocs()
			for b.Loop() {
				if err := dlp.DecodeLayers(f, &decoded); err != nil {
					b.Fatal(err)
				}
				n := 0
				var key FlowKey
				for _, lt := range decoded {
					switch lt {
					case layers.LayerTypeIPv4:
						n += copy(buf[n:], ip4.SrcIP)
						n += copy(buf[n:], ip4.DstIP)
						copy(key.Src[:], ip4.SrcIP)
						copy(key.Dst[:], ip4.DstIP)
						buf[n] = byte(ip4.Protocol)
						buf[n+1], buf[n+2] = byte(ip4.Id>>8), byte(ip4.Id)
						n += 3
					case layers.LayerTypeIPv6:
						n += copy(buf[n:], ip6.SrcIP)
						n += copy(buf[n:], ip6.DstIP)
						copy(key.Src[:], ip6.SrcIP)
						copy(key.Dst[:], ip6.DstIP)
						key.V6 = true
					case layers.LayerTypeTCP:
						key.SPort, key.DPort = uint16(tcp.SrcPort), uint16(tcp.DstPort)
						n += copy(buf[n:], tcp.Contents[:16])
						n += copy(buf[n:], tcp.Payload[:min(32, len(tcp.Payload))])
					case layers.LayerTypeUDP:
						key.SPort, key.DPort = uint16(udp.SrcPort), uint16(udp.DstPort)
						n += copy(buf[n:], udp.Contents[:6])
						n += copy(buf[n:], udp.Payload[:min(32, len(udp.Payload))])
					}
				}
				var kb [FlowKeyBinaryLenV6]byte
				_ = xxh3.HashSeed(key.AppendBinary(kb[:0]), 1)
				_ = xxh3.HashSeed(buf[:n], 2)
			}
		})
	}
}

// BenchmarkFileRead: packets/s through OpenFile + Reader (pcap, Ethernet).
func BenchmarkFileRead(b *testing.B) {
	pkts := randomPackets(2000, 11)
	var frames [][]byte
	var ts []int64
	for i, p := range pkts {
		frames = append(frames, p.frame(b))
		ts = append(ts, int64(i)*1000)
	}
	path := filepath.Join(b.TempDir(), "bench.pcap")
	writePcapTB(b, path, frames, ts)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		src, err := OpenFile(path)
		if err != nil {
			b.Fatal(err)
		}
		r := NewReader(src, testParser(b, nil))
		var pkt Packet
		for {
			err := r.Next(&pkt)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			n++
		}
		src.Close()
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "packets/s")
}
