// Package capture turns packets from a wire or a file into the records the
// sketches consume: timestamp, flow key, flow hash, packet hash, wire size,
// weight and traffic class. Everything that decides a hash lives here, so
// the sender and the receiver agree by construction (see docs/capture.md).
package capture

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/lds-net/lds/internal/match"
	"gopkg.in/yaml.v3"
)

// MaxPayloadBytes bounds identity.payload_bytes: the per-parser hash buffer
// is sized from it.
const MaxPayloadBytes = 1024

// FlowKeyConfig sets flow aggregation: prefix lengths and whether the
// protocol and ports are part of the key.
type FlowKeyConfig struct {
	SrcPrefixV4 int  `yaml:"src_prefix_v4"`
	DstPrefixV4 int  `yaml:"dst_prefix_v4"`
	SrcPrefixV6 int  `yaml:"src_prefix_v6"`
	DstPrefixV6 int  `yaml:"dst_prefix_v6"`
	Proto       bool `yaml:"proto"`
	Ports       bool `yaml:"ports"`
}

// IdentityConfig holds everything that changes a hash: it is part of the
// configuration fingerprint both ends must share.
type IdentityConfig struct {
	Seed         string `yaml:"seed"`
	PayloadBytes int    `yaml:"payload_bytes"`
	// IPBytes bounds the bytes of a packet identity reads, counted from
	// the start of the IP header: headers plus at most IPBytes - headers
	// payload bytes are hashed, and a packet whose IP + L4 headers alone
	// are longer is left out (long_headers) at both taps alike. A capture
	// whose snap length holds the link header + IPBytes gives every
	// packet the same identity as a whole-packet capture.
	IPBytes int           `yaml:"ip_bytes"`
	FlowKey FlowKeyConfig `yaml:"flow_key"`
}

// WeightRule gives flows matched by the rule a weight (LDS paper §4.1).
type WeightRule struct {
	match.Rule `yaml:",inline"`
	Weight     uint32 `yaml:"weight"`
}

// SourceConfig says where packets come from.
type SourceConfig struct {
	Kind      string `yaml:"kind"`      // file | afpacket | pcap
	File      string `yaml:"file"`      // kind file: pcap or pcapng path
	Interface string `yaml:"interface"` // kind afpacket, pcap
	// Snaplen is the bytes a live source (afpacket, pcap) keeps of each
	// frame; the wire length is kept whatever it is. 0 keeps the link
	// header with two VLAN tags + identity.ip_bytes (SnapLen), all that
	// identity reads, so the ring holds many more frames than whole ones.
	Snaplen     int    `yaml:"snaplen"`
	Promiscuous bool   `yaml:"promiscuous"` // kind afpacket, pcap
	Workers     int    `yaml:"workers"`     // kind afpacket: sockets in one PACKET_FANOUT group
	FanoutGroup uint16 `yaml:"fanout_group"`
	// Ring (afpacket, TPACKET_V3): block_size bytes x num_blocks per worker.
	BlockSize    int           `yaml:"block_size"`
	NumBlocks    int           `yaml:"num_blocks"`
	BlockTimeout time.Duration `yaml:"block_timeout"` // a partly filled block is handed over after this
	// PollTimeout bounds how long ReadPacket waits before returning
	// ErrTimeout, so an idle link still lets the caller close intervals.
	PollTimeout     time.Duration `yaml:"poll_timeout"`
	BufferSize      int           `yaml:"buffer_size"`      // kind pcap: kernel buffer bytes
	BPF             string        `yaml:"bpf"`              // needs a binary built with -tags pcap
	TimestampSource string        `yaml:"timestamp_source"` // kind pcap: host, adapter, adapter_unsynced, ... ("" = libpcap default)
	// AllowCoalescing lets a live source open an interface whose receive
	// offloads (GRO, LRO, rx-gro-hw, rx-gro-list) merge packets; refused
	// by default (docs/capture.md, "Coalescing").
	AllowCoalescing bool `yaml:"allow_coalescing"`
}

// Config is the capture section of a daemon's configuration.
type Config struct {
	Identity IdentityConfig `yaml:"identity"`
	Select   []match.Rule   `yaml:"select"`  // measured traffic; empty = all IP
	Weights  []WeightRule   `yaml:"weights"` // first match wins; default weight 1
	Classes  []match.Rule   `yaml:"classes"` // LDA traffic classes; first match wins
	Source   SourceConfig   `yaml:"source"`
}

// DefaultConfig returns the defaults for every key.
func DefaultConfig() Config {
	return Config{
		Identity: IdentityConfig{
			Seed:         "change-me",
			PayloadBytes: 32,
			IPBytes:      DefaultIPBytes,
			FlowKey: FlowKeyConfig{
				SrcPrefixV4: 32, DstPrefixV4: 32, SrcPrefixV6: 128, DstPrefixV6: 128,
				Proto: true, Ports: true,
			},
		},
		Source: SourceConfig{
			Kind:        "file",
			Promiscuous: true, // a tap or mirror port delivers frames addressed to other hosts
			Snaplen:     0,    // SnapLen: link header with two VLAN tags + identity.ip_bytes
			Workers:     1,
			// 256 blocks of 256 KiB: 64 MiB, and 12.8 s of traffic at
			// low packet rates, where the kernel retires a block every
			// block_timeout however little it holds (RingHold). 50 ms:
			// a slow link wakes the capture 20 times a second, not 100
			// (docs/capture.md, "Block timeout"), well within IdleSlack.
			BlockSize:    256 << 10,
			NumBlocks:    256,
			BlockTimeout: 50 * time.Millisecond,
			PollTimeout:  100 * time.Millisecond,
			BufferSize:   64 << 20,
		},
	}
}

// DefaultIPBytes is identity.ip_bytes by default: tcpdump -s 96 on
// Ethernet (14 bytes of link header) keeps exactly 82 bytes from the IP
// header, so header-only captures replay out of the box; an IPv4 TCP
// packet with timestamps still hashes 30 payload bytes.
const DefaultIPBytes = 82

// Bounds of identity.ip_bytes: an IPv6 header and a UDP header fit in the
// smallest. Below MinAdvisedIPBytes an IPv6 UDP packet hashes fewer than
// 16 payload bytes, and packets that differ only further on (no IPv6
// identification field tells them apart) share an identity, which the
// sketches see as loss; error messages never advise less. The largest is
// far beyond any header stack plus MaxPayloadBytes and keeps link header
// + ip_bytes below 65535, the snap length of a -s 0 capture file.
const (
	MinIPBytes        = 48
	MinAdvisedIPBytes = 64
	MaxIPBytes        = 4096
)

// LinkHeaderLen is the length of the link header a capture of link type
// lt puts before the IP header (without VLAN tags or MPLS labels, which
// add 4 bytes each), or -1 where it is not known.
func LinkHeaderLen(lt layers.LinkType) int {
	switch lt {
	case layers.LinkTypeEthernet:
		return 14
	case layers.LinkTypeLinuxSLL:
		return 16
	case layers.LinkTypeLinuxSLL2:
		return 20
	case layers.LinkTypeRaw, layers.LinkTypeIPv4, layers.LinkTypeIPv6, 12:
		return 0
	case layers.LinkTypeNull, layers.LinkTypeLoop:
		return 4
	}
	return -1
}

// MinSnaplen is the smallest snap length that gives every packet of link
// type lt (without VLAN tags) the identity a whole-packet capture gives
// it: the link header + identity.ip_bytes.
func (c IdentityConfig) MinSnaplen(lt layers.LinkType) int {
	return max(LinkHeaderLen(lt), 0) + c.IPBytes
}

// liveLinkBudget is the link header a live capture's snap length must
// cover before identity.ip_bytes: Ethernet with two VLAN tags (the kernel
// takes the outer tag off before a packet socket sees the frame, and
// libpcap puts it back).
const liveLinkBudget = 14 + 8

// MaxSnaplen bounds capture.source.snaplen (libpcap's largest).
const MaxSnaplen = 262144

// SnapLen is the snap length a live source keeps of each frame:
// source.snaplen, or where it is 0 the link header with two VLAN tags +
// ip_bytes, which gives every packet the identity a whole-frame capture
// gives it (docs/capture.md, "The bound B").
func (s SourceConfig) SnapLen(id IdentityConfig) int {
	if s.Snaplen > 0 {
		return s.Snaplen
	}
	return liveLinkBudget + id.IPBytes
}

// Validate checks every key; errors name the YAML key under "capture.".
func (c Config) Validate() error {
	var errs []error
	bad := func(key, f string, a ...any) { errs = append(errs, fmt.Errorf("capture."+key+": "+f, a...)) }
	id := c.Identity
	if id.Seed == "" {
		bad("identity.seed", "empty; set a shared secret (both taps must use the same)")
	}
	if id.PayloadBytes < 0 || id.PayloadBytes > MaxPayloadBytes {
		bad("identity.payload_bytes", "%d is outside 0..%d", id.PayloadBytes, MaxPayloadBytes)
	}
	if id.IPBytes < MinIPBytes || id.IPBytes > MaxIPBytes {
		bad("identity.ip_bytes", "%d is outside %d..%d", id.IPBytes, MinIPBytes, MaxIPBytes)
	}
	fk := id.FlowKey
	for _, p := range []struct {
		key    string
		v, max int
	}{{"src_prefix_v4", fk.SrcPrefixV4, 32}, {"dst_prefix_v4", fk.DstPrefixV4, 32}, {"src_prefix_v6", fk.SrcPrefixV6, 128}, {"dst_prefix_v6", fk.DstPrefixV6, 128}} {
		if p.v < 0 || p.v > p.max {
			bad("identity.flow_key."+p.key, "%d is outside 0..%d", p.v, p.max)
		}
	}
	if _, err := match.CompileAll("capture.select", c.Select); err != nil {
		errs = append(errs, err)
	}
	for i, w := range c.Weights {
		if _, err := w.Rule.Compile(fmt.Sprintf("capture.weights[%d]", i)); err != nil {
			errs = append(errs, err)
		}
		if w.Weight == 0 {
			bad(fmt.Sprintf("weights[%d].weight", i), "must be at least 1 (a flow of weight 0 would vanish from the sketch; use select to leave traffic out)")
		}
	}
	seen := map[string]int{}
	for i, r := range c.Classes {
		if _, err := r.Compile(fmt.Sprintf("capture.classes[%d]", i)); err != nil {
			errs = append(errs, err)
		}
		if r.Name == "" {
			bad(fmt.Sprintf("classes[%d].name", i), "required: a traffic class needs a name for its metrics")
		} else if j, dup := seen[r.Name]; dup {
			bad(fmt.Sprintf("classes[%d].name", i), "%q already names classes[%d]", r.Name, j)
		} else {
			seen[r.Name] = i
		}
	}
	if len(c.Classes) > 65534 {
		bad("classes", "%d classes, at most 65534", len(c.Classes))
	}
	errs = append(errs, c.Source.validate(id)...)
	return errors.Join(errs...)
}

func (s SourceConfig) validate(id IdentityConfig) []error {
	var errs []error
	bad := func(key, f string, a ...any) { errs = append(errs, fmt.Errorf("capture.source."+key+": "+f, a...)) }
	switch s.Kind {
	case "file":
		if s.File == "" {
			bad("file", "required when source.kind is file")
		}
		if s.BPF != "" && !pcapBuilt {
			bad("bpf", "a BPF expression needs libpcap: rebuild with -tags pcap, or use select rules")
		}
	case "afpacket", "pcap":
		if s.Interface == "" {
			bad("interface", "required when source.kind is %s", s.Kind)
		}
		if s.Kind == "pcap" && !pcapBuilt {
			bad("kind", "pcap needs a binary built with -tags pcap (and libpcap); use afpacket in a pure-Go build")
		}
		if s.BPF != "" && !pcapBuilt {
			bad("bpf", "a BPF expression needs libpcap to compile: rebuild with -tags pcap, or use select rules")
		}
	default:
		bad("kind", "%q: want file, afpacket or pcap", s.Kind)
	}
	if (s.Kind == "pcap" || s.Kind == "afpacket") && s.Snaplen != 0 && (s.Snaplen < liveLinkBudget+id.IPBytes || s.Snaplen > MaxSnaplen) {
		bad("snaplen", "%d is outside %d..%d: a link header with two VLAN tags (%d bytes) + identity.ip_bytes (%d) need at least %d; 0 keeps exactly that, %d whole frames",
			s.Snaplen, liveLinkBudget+id.IPBytes, MaxSnaplen, liveLinkBudget, id.IPBytes, liveLinkBudget+id.IPBytes, 65535)
	}
	if s.Kind == "afpacket" {
		if s.Workers < 1 || s.Workers > 256 {
			bad("workers", "%d is outside 1..256", s.Workers)
		}
		const page = 4096
		if s.BlockSize < page || s.BlockSize%page != 0 {
			bad("block_size", "%d must be a positive multiple of the page size (%d)", s.BlockSize, page)
		}
		if s.NumBlocks < 1 {
			bad("num_blocks", "%d must be at least 1", s.NumBlocks)
		}
		if s.BlockTimeout < time.Millisecond {
			bad("block_timeout", "%s: the kernel counts it in whole milliseconds, at least 1ms", s.BlockTimeout)
		}
	}
	if s.Kind != "file" && s.PollTimeout < time.Millisecond {
		bad("poll_timeout", "%s: at least 1ms (a live daemon needs to wake up on an idle link)", s.PollTimeout)
	}
	if s.TimestampSource != "" && s.Kind != "pcap" {
		bad("timestamp_source", "only libpcap (kind pcap) can choose a timestamp source")
	}
	return errs
}

// FingerprintFields returns every setting that changes a hash, by YAML key,
// in canonical text; two ends must agree on all of them. The layout of
// the hashed bytes itself is versioned by config.HashVersion: any change
// to what is hashed bumps it.
func (c Config) FingerprintFields() map[string]string {
	id := c.Identity
	fk := id.FlowKey
	return map[string]string{
		"capture.identity.seed":                   seedDigest(id.Seed),
		"capture.identity.payload_bytes":          strconv.Itoa(id.PayloadBytes),
		"capture.identity.ip_bytes":               strconv.Itoa(id.IPBytes),
		"capture.identity.flow_key.src_prefix_v4": strconv.Itoa(fk.SrcPrefixV4),
		"capture.identity.flow_key.dst_prefix_v4": strconv.Itoa(fk.DstPrefixV4),
		"capture.identity.flow_key.src_prefix_v6": strconv.Itoa(fk.SrcPrefixV6),
		"capture.identity.flow_key.dst_prefix_v6": strconv.Itoa(fk.DstPrefixV6),
		"capture.identity.flow_key.proto":         strconv.FormatBool(fk.Proto),
		"capture.identity.flow_key.ports":         strconv.FormatBool(fk.Ports),
	}
}

// seedDigest stands for the seed in fingerprints: the seed is a secret and
// must not travel in a Hello, but a mismatch must still be seen.
func seedDigest(seed string) string {
	s := sha256.Sum256([]byte("lds/capture/v1/fingerprint\x00" + seed))
	return "sha256:" + hex.EncodeToString(s[:16])
}

// variantKeys are fields that change between the two taps. A selection,
// weight or class rule on one of them would treat the same packet
// differently at each tap, so such keys are refused when the YAML is read.
var variantKeys = map[string]string{
	"dscp":          "DSCP is remarked between taps",
	"ecn":           "ECN bits are set (CE) by routers between taps",
	"tos":           "the TOS byte (DSCP/ECN) is rewritten between taps",
	"traffic_class": "the IPv6 traffic class (DSCP/ECN) is rewritten between taps",
	"ttl":           "TTL drops by one at every hop",
	"hop_limit":     "the hop limit drops by one at every hop",
	"flow_label":    "the IPv6 flow label may be rewritten between taps",
	"vlan":          "802.1Q tags are pushed and popped between taps",
	"mpls":          "MPLS labels are swapped between taps",
	"mac":           "MAC addresses are rewritten at every router",
	"src_mac":       "MAC addresses are rewritten at every router",
	"dst_mac":       "MAC addresses are rewritten at every router",
	"checksum":      "checksums are recomputed and offloaded",
}

// UnmarshalYAML decodes strictly (unknown keys are errors) and refuses
// rules on fields that differ between taps, saying why.
func (c *Config) UnmarshalYAML(n *yaml.Node) error {
	if err := checkRuleKeys(n); err != nil {
		return err
	}
	raw, err := yaml.Marshal(n)
	if err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	type plain Config // no UnmarshalYAML: avoids recursion
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode((*plain)(c)); err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	return nil
}

func checkRuleKeys(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		list := n.Content[i].Value
		if list != "select" && list != "weights" && list != "classes" {
			continue
		}
		seq := n.Content[i+1]
		if seq.Kind != yaml.SequenceNode {
			continue
		}
		for j, item := range seq.Content {
			if item.Kind != yaml.MappingNode {
				continue
			}
			for k := 0; k+1 < len(item.Content); k += 2 {
				key := strings.ToLower(item.Content[k].Value)
				why, found := variantKeys[key]
				if !found {
					continue
				}
				return fmt.Errorf("capture.%s[%d].%s (line %d): %s, so a rule on it would treat the same packet differently at the two taps; rules may use only invariant fields: src, dst, proto, sport, dport",
					list, j, key, item.Content[k].Line, why)
			}
		}
	}
	return nil
}

// RingHold is how long a TPACKET_V3 ring of numBlocks blocks of blockSize
// bytes (as RingGeometry makes it) holds traffic while its reader does not
// read. The kernel hands a block over when it is full, and its retire
// timer hands over the open block, however little it holds, every
// blockTimeout, whenever that block was opened; what arrives while every
// block waits for the reader is dropped. At bytesPerSec ring bytes a
// second (packets a second × RingFrameBytes) a timer period's traffic is
// x = bytesPerSec × blockTimeout / (block size − its header) blocks: it
// fills floor(x) of them and the timer hands over one more, partly
// filled, so a period takes max(1, ceil(x)) blocks and the ring holds
// numBlocks × blockTimeout / max(1, ceil(x)): the block count and the
// timeout bound it at low rates, the bytes at high ones, and a rate just
// above a block a period costs half the hold (TestLiveAFPacketRingHold
// measures it). bytesPerSec <= 0 gives the low-rate bound.
func RingHold(blockSize, numBlocks int, blockTimeout time.Duration, bytesPerSec float64) time.Duration {
	bs, nb := RingGeometry(blockSize, numBlocks)
	per := 1.0
	if bytesPerSec > 0 {
		per = max(1, math.Ceil(bytesPerSec*blockTimeout.Seconds()/float64(bs-ringBlockHeader)))
	}
	return time.Duration(float64(nb) * float64(blockTimeout) / per)
}

// Ring slot layout (TPACKET_V3, SOCK_RAW, kernel net/packet/af_packet.c):
// a block starts with a 48-byte header; each frame's data starts
// ringMacOffset bytes into its slot (the tpacket3_hdr and sockaddr_ll,
// aligned to 16 with room for a 16-byte link header, less the 14 of
// Ethernet), and slots are aligned to 8 bytes.
const (
	ringBlockHeader = 48
	ringMacOffset   = 82
)

// RingFrameBytes is the ring bytes a frame of frame bytes takes when the
// socket keeps snap bytes of it: 1600 for a 1514-byte frame kept whole,
// 192 when 104 bytes are kept, 144 for a 60-byte frame. Measured against
// the ring's own offsets by TestLiveAFPacketRingSlots.
func RingFrameBytes(frame, snap int) int {
	if snap > 0 {
		frame = min(frame, snap)
	}
	return (ringMacOffset + frame + 7) &^ 7
}

// Ring geometry. The kernel hands TPACKET_V3 blocks over whole, and the
// block user space is reading stays out of its hands until the reader is
// done with it, so a ring of few large blocks has less room for a burst
// or a late wake-up than its size says: 4 × 256 KiB (what libpcap builds
// for tcpdump -B 1024) lends the kernel 768 KiB while a block is read.
// OpenAFPacket keeps the configured bytes (block_size × num_blocks) but
// halves the blocks while there are fewer than minRingBlocks of them and
// they stay at least minRingBlock bytes; measured in docs/testbed.md,
// "Live capture performance" (32 × 32 KiB against 16 × 64 KiB for a 1 MiB
// ring under CPU contention: 0.95× tcpdump's drops instead of 1.15×,
// pooled over seven alternating rounds, for ~5 ns more CPU a packet).
const (
	minRingBlocks = 32
	// minRingBlock bounds the split: a smaller block means one more
	// retire and wake-up per few hundred packets (more CPU a packet), and
	// a frame larger than a block is cut to the block (the wire length
	// stays right; only headers and identity bytes are read).
	minRingBlock = 32 << 10
)

// RingGeometry returns the block size and count OpenAFPacket asks the
// kernel for when configured with blockSize × numBlocks: the same bytes
// in at least 16 blocks where the blocks can stay >= 64 KiB and whole
// pages. 4 × 256 KiB becomes 16 × 64 KiB; 256 × 256 KiB (the default) stays.
func RingGeometry(blockSize, numBlocks int) (int, int) {
	const page = 4096
	for numBlocks < minRingBlocks && blockSize/2 >= minRingBlock && (blockSize/2)%page == 0 {
		blockSize, numBlocks = blockSize/2, numBlocks*2
	}
	return blockSize, numBlocks
}
